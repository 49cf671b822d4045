/// One consent as the consent manager lists it (rule R7).
public struct ConsentLine: Hashable, Sendable {
    /// The consent as the catalogue in force defines it (its `version` is the current one).
    public let definition: ConsentDefinition
    /// `nil` when never given.
    public let status: ConsentStatus?

    public var isGiven: Bool { status?.isGiven ?? false }

    /// Given under an older policy version: shown `outdated`, with both versions.
    public var isOutdated: Bool {
        if case .given(let grant) = status { return !grant.version.hasSameBytes(as: definition.version) }
        return false
    }

    /// The version the subject agreed to, when given.
    public var givenVersion: String? {
        if case .given(let grant) = status { return grant.version }
        return nil
    }

    /// The date it was given, when it is given (the app's `validFrom`).
    public var validFrom: Timestamp? {
        if case .given(let grant) = status { return grant.validFrom }
        return nil
    }
}

/// One feature's consents, required first, then optional (rule R7).
public struct FeatureLine: Hashable, Sendable {
    public let feature: Feature
    /// Rule R3.
    public let isActive: Bool
    public let consents: [ConsentLine]
}

/// The consent manager's listing for one subject: every feature of the catalogue, grouped, in
/// catalogue order (rules R7 and R9's "consents of one feature" / "of the active features").
public struct ConsentListing: Hashable, Sendable {
    public let features: [FeatureLine]

    public init(state: SubjectState, catalog: Catalog) {
        features = catalog.features.map { feature in
            FeatureLine(
                feature: feature,
                isActive: state.isActive(feature),
                consents: feature.consents.map {
                    ConsentLine(definition: $0, status: state.status(feature: feature.code, consent: $0.code))
                }
            )
        }
    }

    /// Rule R3: the features whose required consents are all given.
    public var activeFeatures: [FeatureLine] { features.filter(\.isActive) }

    /// Rule R8: nothing is given, so the listing has nothing to show.
    public var isEmpty: Bool { !features.contains { $0.consents.contains(where: \.isGiven) } }
}

/// One line of a subject's history.
public struct HistoryEntry: Hashable, Sendable {
    /// The event types, as every output names them (the same words as the audit report's).
    public enum Kind: String, Hashable, Sendable {
        case given
        /// Given again under a new policy version; `renews` names the outdated grant.
        case reconsent = "re-consent"
        case withdrawn
        /// Withdrawn by rule R4's cascade; `cause` names the event that caused it.
        case cascade = "cascade-withdrawn"
    }

    public let seq: UInt64
    public let at: Timestamp
    public let kind: Kind
    public let feature: Int
    public let consent: String
    public let actor: String
    public let cause: UInt64?
    public let version: String?
    /// On a re-consent: the outdated grant it renews.
    public let renews: UInt64?
    /// On a grant: how it was obtained.
    public let evidence: GrantEvidence

    /// The history entry for a subject event; `nil` for ledger-level events.
    public init?(_ event: LedgerEvent) {
        switch event.payload {
        case .ledgerCreated, .catalogPublished, .subjectErased, .keyRotated, .keyRevoked, .clockCorrected:
            return nil
        case .consentGiven(let e):
            (kind, feature, consent, cause, version, renews, evidence) = (e.renews == nil ? .given : .reconsent, e.feature, e.consent, nil, e.version, e.renews, e.evidence)
        case .consentRevoked(let e):
            switch e.reason {
            case .withdrawn: (kind, cause) = (.withdrawn, nil)
            case .cascade(let c): (kind, cause) = (.cascade, c)
            }
            (feature, consent, version, renews, evidence) = (e.feature, e.consent, nil, nil, GrantEvidence())
        }
        seq = event.seq
        at = event.at
        actor = event.actor
    }
}
