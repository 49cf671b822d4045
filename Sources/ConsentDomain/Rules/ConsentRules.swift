/// What a caller asks the ledger to do for one subject.
public enum ConsentRequest: Hashable, Sendable {
    /// Give one or more consents of a feature. Activates the feature when the required consents
    /// are among them (R2, R5), or gives withheld consents of an active feature (R6).
    case give(feature: String, consents: [String])
    /// Withdraw one or more consents of a feature, atomically. Withdrawing a required consent
    /// cascades to the optional ones still given (R4). Named optional consents are withdrawn
    /// first, each as the subject's own withdrawal, then the required one with its cascade.
    case revoke(feature: String, consents: [String])

    /// Withdraw one consent.
    public static func revoke(feature: String, consent: String) -> ConsentRequest {
        .revoke(feature: feature, consents: [consent])
    }
}

/// The events a command appends, or why it appends nothing although it succeeded.
public struct CommandOutcome: Hashable, Sendable {
    /// Events to append, in order; empty when the request changes nothing.
    public let events: [LedgerEvent]
    /// Notes for the caller, such as "already given", in request order.
    public let notes: [String]
}

/// Why a request was refused. Nothing is appended.
public enum CommandRejection: Error, Hashable, Sendable, CustomStringConvertible {
    case unknownFeature(String, known: [String])
    case unknownConsent(String, feature: String, known: [String])
    case emptyRequest(String)
    /// The grant's evidence cannot be recorded (``GrantEvidence``).
    case invalidEvidence(String)
    /// The request is well formed but a consent rule forbids it.
    case ruleViolation(rule: String, message: String)

    public var description: String {
        switch self {
        case .unknownFeature(let f, let known):
            return "unknown feature '\(f)'; the catalogue has: \(known.joined(separator: ", "))"
        case .unknownConsent(let c, let f, let known):
            return "unknown consent '\(c)' in feature '\(f)'; it has: \(known.joined(separator: ", "))"
        case .emptyRequest(let message), .invalidEvidence(let message):
            return message
        case .ruleViolation(let rule, let message):
            return "rule \(rule): \(message)"
        }
    }
}

/// The consent rules of `docs/consent-rules.md`, as a pure decision: given the catalogue, a subject's
/// replayed state and a request, which events does the request append?
public enum ConsentRules {
    /// Decides a request. `nextSeq` and `at` are the sequence number and time the first event will
    /// get; the function has no clock and no I/O.
    public static func decide(
        _ request: ConsentRequest,
        subject: SubjectRef,
        state: SubjectState,
        catalog: Catalog,
        actor: String,
        at: Timestamp,
        nextSeq: UInt64,
        evidence: GrantEvidence = GrantEvidence()
    ) throws(CommandRejection) -> CommandOutcome {
        switch request {
        case .give(let featureName, let codes):
            let feature = try resolveFeature(featureName, catalog)
            let requested = try consentCodes(codes, of: feature, verb: "give")
            if let problem = evidence.problem { throw .invalidEvidence(problem) }
            if let effective = evidence.effectiveAt {
                // Evidence, not a rule input: the grant keeps its recorded time and place in the
                // log, so an effective time may only tell of an agreement that came after
                // everything already recorded about the feature, and before the recording.
                if effective > at {
                    throw .invalidEvidence("the effective time \(effective.rfc3339) is in the future (it is now \(at.rfc3339))")
                }
                if let previous = state.latestEventTime(feature: feature.code), effective < previous {
                    throw .invalidEvidence("the effective time \(effective.rfc3339) is before the subject's previous event about '\(feature.key)' (\(previous.rfc3339))")
                }
            }
            // R2/R5: an inactive feature is activated only together with every required consent
            // still withheld. This also refuses an optional consent on its own (rules file: "what
            // the seed does not say", first point).
            if !state.isActive(feature) {
                let missing = feature.requiredConsents.filter {
                    !state.isCurrent(feature, $0) && !requested.contains($0.code)
                }
                if !missing.isEmpty {
                    let names = missing.map { "'\($0.code)'" + (state.isOutdated(feature, $0) ? " (outdated: consent again to policy version \($0.version))" : "") }.joined(separator: ", ")
                    throw .ruleViolation(
                        rule: "R2",
                        message: "'\(feature.key)' is not active; its required consent \(names) must be given first or in the same command"
                    )
                }
            }
            // Catalogue order puts required consents first, so replay sees the feature activated
            // before its optional consents are given.
            var notes: [String] = []
            var toGive: [ConsentDefinition] = []
            for definition in feature.consents where requested.contains(definition.code) {
                if state.isCurrent(feature, definition) {
                    notes.append("'\(definition.code)' of '\(feature.key)' is already given; nothing to do")
                } else {
                    toGive.append(definition)
                }
            }
            let span = CommandSpan(first: nextSeq, size: toGive.count)
            let events = toGive.enumerated().map { i, definition in
                // Giving an outdated consent again is a re-consent: it renews the old grant.
                let renews: UInt64? = if case .given(let grant)? = state.status(feature: feature.code, consent: definition.code) { grant.seq } else { nil }
                return LedgerEvent(
                    seq: nextSeq + UInt64(i), at: at, actor: actor, command: span,
                    payload: .consentGiven(ConsentGiven(subject: subject, feature: feature.code, consent: definition.code, version: definition.version, renews: renews, evidence: evidence))
                )
            }
            return CommandOutcome(events: events, notes: notes)

        case .revoke(let featureName, let codes):
            let feature = try resolveFeature(featureName, catalog)
            let requested = try consentCodes(codes, of: feature, verb: "revoke")
            if !evidence.isEmpty {
                throw .invalidEvidence("evidence (effective time, channel, notice language, reference) is recorded on grants only, not on a withdrawal")
            }
            // Optional consents first: each named one is the subject's own withdrawal, recorded as
            // such even when a required consent named in the same command would have cascaded
            // to it. Then the required ones, whose cascade covers the optional ones still given.
            let order = feature.optionalConsents + feature.requiredConsents
            var given = Set(feature.consents.map(\.code).filter { state.isGiven(feature: feature.code, consent: $0) })
            var notes: [String] = []
            // (consent, cause) in order; the cause is an index into this list.
            var withdrawals: [(code: String, cause: Int?)] = []
            for definition in order where requested.contains(definition.code) {
                let code = definition.code
                guard given.contains(code) else {
                    let how = state.status(feature: feature.code, consent: code) == nil ? "never given" : "already withdrawn"
                    notes.append("'\(code)' of '\(feature.key)' is withheld (\(how)); nothing to do")
                    continue
                }
                given.remove(code)
                let cause = withdrawals.count
                withdrawals.append((code, nil))
                // R4: a required consent takes the feature's given optional consents with it; an
                // optional consent goes alone.
                if definition.isRequired {
                    for optional in feature.optionalConsents where given.contains(optional.code) {
                        given.remove(optional.code)
                        withdrawals.append((optional.code, cause))
                    }
                }
            }
            let span = CommandSpan(first: nextSeq, size: withdrawals.count)
            let events = withdrawals.enumerated().map { i, w in
                LedgerEvent(
                    seq: nextSeq + UInt64(i), at: at, actor: actor, command: span,
                    payload: .consentRevoked(ConsentRevoked(
                        subject: subject, feature: feature.code, consent: w.code,
                        reason: w.cause.map { .cascade(cause: nextSeq + UInt64($0)) } ?? .withdrawn))
                )
            }
            return CommandOutcome(events: events, notes: notes)
        }
    }

    /// The named consents, each checked to belong to the feature; at least one.
    private static func consentCodes(_ codes: [String], of feature: Feature, verb: String) throws(CommandRejection) -> Set<String> {
        guard !codes.isEmpty else { throw .emptyRequest("\(verb) needs at least one consent") }
        for code in codes where feature.consent(code: code) == nil {
            throw .unknownConsent(code, feature: feature.key, known: feature.consents.map(\.code))
        }
        return Set(codes)
    }

    private static func resolveFeature(_ name: String, _ catalog: Catalog) throws(CommandRejection) -> Feature {
        guard let feature = catalog.feature(named: name) else {
            throw .unknownFeature(name, known: catalog.features.map { "\($0.key) (\($0.code))" })
        }
        return feature
    }
}
