/// Identifies one consent of one feature.
public struct ConsentKey: Hashable, Sendable {
    public let feature: Int
    public let consent: String

    public init(feature: Int, consent: String) {
        self.feature = feature
        self.consent = consent
    }
}

/// A consent that is currently given.
public struct Grant: Hashable, Sendable {
    /// When it was given (the app's `validFrom`).
    public let validFrom: Timestamp
    public let version: String
    /// The `ConsentGiven` event's sequence number.
    public let seq: UInt64
    /// How it was obtained, as the grant recorded it.
    public var evidence: GrantEvidence {
        get { recorded?.evidence ?? GrantEvidence() }
        set { recorded = newValue.isEmpty ? nil : RecordedEvidence(newValue) }
    }
    /// The evidence, held out of line and only when there is some. A replay or verify of a whole
    /// ledger keeps a grant for every consent of every subject, and most grants record no
    /// evidence: inline, the five optional members made every subject's state twice its size.
    private var recorded: RecordedEvidence?

    public init(validFrom: Timestamp, version: String, seq: UInt64, evidence: GrantEvidence = GrantEvidence()) {
        self.validFrom = validFrom
        self.version = version
        self.seq = seq
        self.evidence = evidence
    }

    /// When the subject agreed: the recorded effective time, else the time it was recorded.
    public var agreedAt: Timestamp { evidence.effectiveAt ?? validFrom }

    public static func == (a: Grant, b: Grant) -> Bool {
        a.validFrom == b.validFrom && a.version == b.version && a.seq == b.seq && a.evidence == b.evidence
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(validFrom)
        hasher.combine(version)
        hasher.combine(seq)
        hasher.combine(evidence)
    }
}

/// A grant's evidence, immutable and shared by the copies of a grant.
private final class RecordedEvidence: Sendable {
    let evidence: GrantEvidence
    init(_ evidence: GrantEvidence) { self.evidence = evidence }
}

/// A consent that was given once and later withdrawn.
public struct Withdrawal: Hashable, Sendable {
    public let at: Timestamp
    public let seq: UInt64
    /// Set when rule R4 withdrew it because a required consent was withdrawn.
    public let cause: UInt64?
}

/// The state of one consent for one subject.
///
/// The app shows `GIVEN` or `WITHHELD`; withheld covers both "never given" (no status at all) and
/// "given and later withdrawn" (`.withdrawn`), which the ledger keeps apart.
public enum ConsentStatus: Hashable, Sendable {
    case given(Grant)
    case withdrawn(Withdrawal)

    public var isGiven: Bool {
        if case .given = self { return true }
        return false
    }
}

/// One subject's consents, rebuilt by replaying their events. Applying an event re-checks the
/// rules, so a log that breaks them fails replay instead of producing a state the app never allows.
public struct SubjectState: Hashable, Sendable {
    // Equality and hashing cover the consents and the last sequence number, not the bookkeeping
    // of a command in progress.
    /// Consents that have ever been given; a consent that is absent was never given.
    public var consents: [ConsentKey: ConsentStatus] { table.dictionary }
    private var table = ConsentTable()
    /// Sequence number of the subject's latest event.
    public private(set) var lastSeq: UInt64?
    /// The command being applied, the one feature it is about, and its revocations of required
    /// consents (seq, consent), which cascades must cite.
    private var openCommand: CommandSpan?
    private var commandFeature: Int?
    private var requiredRevocations: [(seq: UInt64, consent: String)] = []
    /// The recorded time of the subject's latest event about each feature, from the commands
    /// before the one in progress: an effective time may not be earlier.
    /// (A list, for the reason ``ConsentTable`` is one.)
    private var featureTimes: [(feature: Int, at: Timestamp)] = []

    public init() {}

    /// The recorded time of the subject's latest event about a feature, or nil if there is none.
    public func latestEventTime(feature: Int) -> Timestamp? { featureTimes.first { $0.feature == feature }?.at }

    public func status(feature: Int, consent: String) -> ConsentStatus? {
        table[ConsentKey(feature: feature, consent: consent)]
    }

    public func isGiven(feature: Int, consent: String) -> Bool {
        table.isGiven(ConsentKey(feature: feature, consent: consent))
    }

    /// Given, and of the policy version in force.
    public func isCurrent(_ feature: Feature, _ consent: ConsentDefinition) -> Bool {
        table.isGiven(ConsentKey(feature: feature.code, consent: consent.code), version: consent.version)
    }

    /// Given under an older policy version than the one in force: the subject must consent again.
    public func isOutdated(_ feature: Feature, _ consent: ConsentDefinition) -> Bool {
        isGiven(feature: feature.code, consent: consent.code) && !isCurrent(feature, consent)
    }

    /// Rule R3: a feature is active when all its required consents are given, each of the
    /// policy version in force (an outdated required consent deactivates the feature).
    public func isActive(_ feature: Feature) -> Bool {
        feature.requiredConsents.allSatisfy { isCurrent(feature, $0) }
    }

    /// True when no consent of this subject is given right now (rule R8's empty state).
    public var hasNoGivenConsent: Bool { !table.entries.contains { $0.status.isGiven } }

    /// True while a command's events have been applied only in part.
    public var isInsideCommand: Bool { openCommand != nil }

    public static func == (a: SubjectState, b: SubjectState) -> Bool {
        a.consents == b.consents && a.lastSeq == b.lastSeq && a.openCommand == b.openCommand && a.erasedAt == b.erasedAt
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(consents)
        hasher.combine(lastSeq)
        hasher.combine(erasedAt)
    }

    /// The `subject.erased` event's seq, once the subject's record was destroyed: nothing of the
    /// subject may follow it.
    public private(set) var erasedAt: UInt64?

    /// Applies one of this subject's events, re-checking rules R2–R6 and the cascade.
    public mutating func apply(_ event: LedgerEvent, catalog: Catalog) throws(ReplayViolation) {
        let seq = event.seq
        if let erasedAt {
            throw ReplayViolation(seq: seq, problem: "the subject was erased at seq \(erasedAt): no event of theirs may follow")
        }
        if let open = openCommand, open != event.command || seq != (lastSeq ?? 0) + 1 {
            // A command is one subject's, so its events are consecutive even in a subject's
            // own history: a gap means one is missing.
            throw ReplayViolation(seq: seq, problem: "command starting at seq \(open.first) is incomplete: expected \(open.size) events")
        }
        if openCommand == nil {
            guard event.command.first == seq, event.command.size >= 1 else {
                throw ReplayViolation(seq: seq, problem: "event claims to belong to a command starting at seq \(event.command.first), which is not open for this subject")
            }
            openCommand = event.command
            commandFeature = nil
            if !requiredRevocations.isEmpty { requiredRevocations.removeAll() }
        }
        switch event.payload {
        case .ledgerCreated, .catalogPublished, .keyRotated, .keyRevoked, .clockCorrected:
            throw ReplayViolation(seq: seq, problem: "a ledger event is not a subject's event")
        case .subjectErased:
            guard event.command.size == 1 else {
                throw ReplayViolation(seq: seq, problem: "an erasure is a command of its own, of one event")
            }
            erasedAt = seq
        case .consentGiven(let given):
            let (feature, definition) = try resolve(given.feature, given.consent, seq: seq, catalog: catalog)
            try enter(feature, seq: seq)
            let key = ConsentKey(feature: feature.code, consent: definition.code)
            if isCurrent(feature, definition) {
                throw ReplayViolation(seq: seq, problem: "consent '\(definition.code)' of '\(feature.key)' is given twice (rule R6 gives only a withheld consent)")
            }
            // A re-consent names the outdated grant it renews; a first grant names none.
            let outdated: UInt64? = if case .given(let grant)? = table[key] { grant.seq } else { nil }
            guard given.renews == outdated else {
                throw ReplayViolation(seq: seq, problem: outdated.map { "consent '\(definition.code)' of '\(feature.key)' renews the outdated grant at seq \($0), so 'renews' must name it" } ?? "'renews' names seq \(given.renews!), but consent '\(definition.code)' of '\(feature.key)' has no outdated grant")
            }
            if !definition.isRequired && !isActive(feature) {
                throw ReplayViolation(seq: seq, problem: "optional consent '\(definition.code)' given while '\(feature.key)' is not active: a required consent is withheld or outdated (rule R2)")
            }
            if !given.version.hasSameBytes(as: definition.version) {
                throw ReplayViolation(seq: seq, problem: "consent '\(definition.code)' of '\(feature.key)' records policy version '\(given.version)' but the catalogue's is '\(definition.version)'")
            }
            if let effective = given.evidence.effectiveAt {
                if effective > event.at {
                    throw ReplayViolation(seq: seq, problem: "consent '\(definition.code)' of '\(feature.key)' has an effective time after the time it was recorded")
                }
                if let previous = latestEventTime(feature: feature.code), effective < previous {
                    throw ReplayViolation(seq: seq, problem: "consent '\(definition.code)' of '\(feature.key)' has an effective time before the subject's previous event about '\(feature.key)'")
                }
            }
            table[key] = .given(Grant(validFrom: event.at, version: given.version, seq: seq, evidence: given.evidence))
        case .consentRevoked(let revoked):
            let (feature, definition) = try resolve(revoked.feature, revoked.consent, seq: seq, catalog: catalog)
            try enter(feature, seq: seq)
            let key = ConsentKey(feature: feature.code, consent: definition.code)
            guard table.isGiven(key) else {
                throw ReplayViolation(seq: seq, problem: "consent '\(definition.code)' of '\(feature.key)' is revoked while it is withheld")
            }
            var cause: UInt64?
            switch revoked.reason {
            case .withdrawn:
                if definition.isRequired {
                    requiredRevocations.append((seq, definition.code))
                } else if !requiredRevocations.isEmpty {
                    throw ReplayViolation(seq: seq, problem: "optional consent '\(definition.code)' is withdrawn in the same command as a required one; it must be a cascade (rule R4)")
                }
            case .cascade(let causeSeq):
                guard !definition.isRequired else {
                    throw ReplayViolation(seq: seq, problem: "required consent '\(definition.code)' cannot be revoked by cascade (rule R4 cascades to optional consents only)")
                }
                guard requiredRevocations.contains(where: { $0.seq == causeSeq }) else {
                    throw ReplayViolation(seq: seq, problem: "cascade names cause seq \(causeSeq), which is not a revocation of a required consent of '\(feature.key)' in the same command")
                }
                cause = causeSeq
            }
            table[key] = .withdrawn(Withdrawal(at: event.at, seq: seq, cause: cause))
        }
        lastSeq = seq
        if seq == event.command.last {
            if let code = commandFeature {
                if let i = featureTimes.firstIndex(where: { $0.feature == code }) { featureTimes[i].at = event.at } else { featureTimes.append((code, event.at)) }
            }
            // Rule R4, checked once the whole command is in: no optional consent survives a
            // withheld required consent.
            if let code = commandFeature, let feature = catalog.feature(code: code),
                feature.requiredConsents.contains(where: { !isGiven(feature: code, consent: $0.code) }),
                let survivor = feature.optionalConsents.first(where: { isGiven(feature: code, consent: $0.code) })
            {
                throw ReplayViolation(seq: seq, problem: "optional consent '\(survivor.code)' of '\(feature.key)' is still given after a required consent of its feature was withdrawn (rule R4 cascade missing)")
            }
            openCommand = nil
        }
    }

    /// A command is about one feature of one subject.
    private mutating func enter(_ feature: Feature, seq: UInt64) throws(ReplayViolation) {
        if let current = commandFeature, current != feature.code {
            throw ReplayViolation(seq: seq, problem: "a command is about one feature; this event is about feature \(feature.code), the command's first about \(current)")
        }
        commandFeature = feature.code
    }

    private func resolve(_ featureCode: Int, _ consentCode: String, seq: UInt64, catalog: Catalog) throws(ReplayViolation) -> (Feature, ConsentDefinition) {
        guard let feature = catalog.feature(code: featureCode) else {
            throw ReplayViolation(seq: seq, problem: "unknown feature code \(featureCode)")
        }
        guard let definition = feature.consent(code: consentCode) else {
            throw ReplayViolation(seq: seq, problem: "unknown consent '\(consentCode)' in feature '\(feature.key)'")
        }
        return (feature, definition)
    }
}

/// A subject's consents: a short list searched in order, not a dictionary. A subject has a
/// handful (three per feature in the seed catalogue), and a whole-ledger replay or verify keeps
/// every subject's: a dictionary's table and hashing cost a third of the memory of a 5M-event
/// verify and a tenth of replay's time.
private struct ConsentTable: Sendable {
    /// A struct, not a tuple: a tuple of these was copied through the runtime's generic tuple
    /// copy, and a lookup copied every entry it passed.
    struct Entry: Sendable {
        let key: ConsentKey
        var status: ConsentStatus
    }

    var entries: [Entry] = []

    /// Where `key`'s entry is, compared in place.
    func index(of key: ConsentKey) -> Int? {
        var i = 0
        while i < entries.count {
            if entries[i].key.feature == key.feature && entries[i].key.consent == key.consent { return i }
            i += 1
        }
        return nil
    }

    /// Whether the consent is given now, without copying its status.
    func isGiven(_ key: ConsentKey) -> Bool {
        guard let i = index(of: key) else { return false }
        return entries[i].status.isGiven
    }

    /// Whether the consent is given now under policy `version`, without copying its status.
    func isGiven(_ key: ConsentKey, version: String) -> Bool {
        guard let i = index(of: key) else { return false }
        return entries[i].status.isGiven(version: version)
    }

    subscript(key: ConsentKey) -> ConsentStatus? {
        get { index(of: key).map { entries[$0].status } }
        set {
            let index = index(of: key)
            switch (index, newValue) {
            case (let i?, let status?): entries[i].status = status
            case (let i?, nil): entries.remove(at: i)
            case (nil, let status?):
                // Grown a little at a time (an array doubles): most subjects stop at a few.
                if entries.count == entries.capacity { entries.reserveCapacity(entries.count + max(3, entries.count / 2)) }
                entries.append(Entry(key: key, status: status))
            case (nil, nil): break
            }
        }
    }

    var dictionary: [ConsentKey: ConsentStatus] {
        Dictionary(uniqueKeysWithValues: entries.lazy.map { ($0.key, $0.status) })
    }
}

extension ConsentStatus {
    /// Given, under policy version `version` (compared byte for byte).
    func isGiven(version: String) -> Bool {
        if case .given(let grant) = self { return grant.version.hasSameBytes(as: version) }
        return false
    }
}

/// An event that the rules or the log's structure do not allow.
public struct ReplayViolation: Error, Hashable, Sendable, CustomStringConvertible {
    public let seq: UInt64
    public let problem: String

    public init(seq: UInt64, problem: String) {
        self.seq = seq
        self.problem = problem
    }

    public var description: String { "seq \(seq): \(problem)" }
}

extension SubjectState {
    /// Replaces the evidence of every consent given now with `transform(evidence, grant seq)`.
    public mutating func mapEvidence<E: Error>(_ transform: (GrantEvidence, UInt64) throws(E) -> GrantEvidence) throws(E) {
        for i in table.entries.indices {
            guard case .given(var grant) = table.entries[i].status, !grant.evidence.isEmpty else { continue }
            grant.evidence = try transform(grant.evidence, grant.seq)
            table.entries[i].status = .given(grant)
        }
    }
}
