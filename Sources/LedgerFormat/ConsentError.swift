import TransparencyLog
import ConsentDomain

/// What part of the stored ledger an integrity failure is about: callers tell damage to
/// rebuildable derived data from damage to the evidence itself by this, never by the message.
public enum IntegrityKind: String, Hashable, Sendable {
    /// The log's entries: an encoding, signature, hash link, sequence number, stream link or
    /// rule that does not hold, or an entry missing.
    case log
    /// The signed head or a recorded checkpoint disagrees with the log (a cut or rewritten log,
    /// a head signed by another key).
    case head
    /// Derived data (the per-subject index, the Merkle tree's stored hashes, the subject map)
    /// contradicts the log. It is a cache: rebuilding it from the log repairs it.
    case derivedData
    /// A subject record is malformed, unsigned, repeated, swapped or missing.
    case subjectRecord
    /// The ledger's own small files or rows: the catalogue, the public key, the genesis event,
    /// the signing key.
    case ledgerFiles
}

/// Where in the log an integrity failure was found and what is wrong.
public struct IntegrityFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public let kind: IntegrityKind
    /// 1-based number of the log entry (the Nth event, seq N-1), when the failure is tied to
    /// one. Printed as "entry N": a file ledger's log also holds head lines, so it is not the
    /// file's line number.
    public let line: Int?
    /// The event's sequence number, when known.
    public let seq: UInt64?
    public let problem: String

    public init(_ kind: IntegrityKind = .log, line: Int?, seq: UInt64?, problem: String) {
        self.kind = kind
        self.line = line
        self.seq = seq
        self.problem = problem
    }

    public var description: String {
        var location: [String] = []
        if let seq { location.append("seq \(seq)") }
        if let line { location.append("entry \(line)") }
        return location.isEmpty ? problem : "\(location.joined(separator: ", ")): \(problem)"
    }
}

/// What a request names that does not exist.
public enum MissingThing: String, Hashable, Sendable {
    /// No ledger at the given folder or database schema.
    case ledger
    /// No signing key where the ledger's key store keeps it.
    case signingKey
    /// A file or folder the request needs.
    case file
    /// A subject the ledger has never recorded.
    case subject
    /// A feature or consent the catalogue does not have.
    case feature
    case consent
}

/// Every failure the library reports. Callers switch on the case (each maps to one exit code
/// of `consentctl` and one HTTP status of the service), never on the message; messages name
/// the storage they speak of.
public enum ConsentError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The request is malformed (an empty or over-long subject id, a control character, a bad
    /// time, an empty request).
    case invalidRequest(String)
    /// The request names something that does not exist.
    case notFound(MissingThing, String)
    /// A consent rule forbids the request; nothing was appended. `rule` names the rule of
    /// `docs/consent-rules.md` (for example `R2`).
    case ruleViolation(rule: String, message: String)
    /// The catalogue file is malformed or breaks a catalogue rule.
    case invalidCatalog(CatalogError)
    /// The stored ledger is damaged, tampered with, or signed by another key.
    case integrity(IntegrityFailure)
    /// A ledger (or key) already exists where a new one was to be made.
    case alreadyExists(String)
    /// Another writer changed the ledger first (for example a PostgreSQL serialization
    /// failure); nothing was changed, and the request may be tried again.
    case conflict(String)
    /// Reading, writing, syncing or locking failed.
    case storage(String)
    /// The signing key is encrypted and could not be unlocked: no passphrase was given, or it
    /// was not the key's passphrase. Nothing was changed.
    case keyLocked(String)
    /// A service the command needs (a witness) did not answer, or refused for a reason that is
    /// not evidence against the ledger. Nothing was lost; the request may be tried again.
    case unavailable(String)
    /// The ledger's time (its newest event's) is further ahead of this writer's clock than the
    /// ledger allows: a write refuses rather than carry that time forward. Nothing was changed.
    case clockAhead(ClockAhead)

    public var description: String {
        switch self {
        case .invalidRequest(let m): return m
        case .notFound(_, let m): return m
        case .ruleViolation(let rule, let m): return "rule violation: rule \(rule): \(m)"
        case .invalidCatalog(let e): return "invalid catalogue: \(e)"
        case .integrity(let f): return "integrity failure: \(f)"
        case .alreadyExists(let m): return m
        case .conflict(let m): return "conflict: \(m)"
        case .storage(let m): return "storage error: \(m)"
        case .keyLocked(let m): return m
        case .unavailable(let m): return "unavailable: \(m)"
        case .clockAhead(let c): return "clock: \(c)"
        }
    }

    package init(_ rejection: CommandRejection) {
        switch rejection {
        case .ruleViolation(let rule, let message): self = .ruleViolation(rule: rule, message: message)
        case .unknownFeature: self = .notFound(.feature, rejection.description)
        case .unknownConsent: self = .notFound(.consent, rejection.description)
        case .emptyRequest, .invalidEvidence: self = .invalidRequest(rejection.description)
        }
    }
}

/// Why a write refused: the ledger's time is ahead of the writer's clock by more than the
/// allowed skew (``ConsentError/clockAhead(_:)``).
public struct ClockAhead: Hashable, Sendable, CustomStringConvertible {
    /// The newest event's time, and its seq.
    public let ledgerTime: Timestamp
    public let seq: UInt64
    /// The writer's clock.
    public let clock: Timestamp
    /// The skew the writer allows, in milliseconds.
    public let allowedSkewMilliseconds: Int64

    public init(ledgerTime: Timestamp, seq: UInt64, clock: Timestamp, allowedSkewMilliseconds: Int64) {
        self.ledgerTime = ledgerTime
        self.seq = seq
        self.clock = clock
        self.allowedSkewMilliseconds = allowedSkewMilliseconds
    }

    public var description: String {
        "the ledger's time, \(ledgerTime.rfc3339) (its newest event, seq \(seq)), is \(Self.span(ledgerTime.millisecondsSinceEpoch - clock.millisecondsSinceEpoch)) ahead of this machine's clock, \(clock.rfc3339), more than the \(Self.span(allowedSkewMilliseconds)) a write allows; nothing was changed. If this machine's clock is behind, set it right. If the ledger's clock went wrong, `consentctl clock correct` records the error in a signed event and sets the ledger's time back to this clock"
    }

    /// A length of time as people say it: "973 days", "2 h 5 min", "300 ms".
    public static func span(_ milliseconds: Int64) -> String {
        let ms = max(0, milliseconds)
        if ms < 1000 { return "\(ms) ms" }
        let seconds = ms / 1000
        if seconds < 60 { return "\(seconds) s" }
        let minutes = seconds / 60
        if minutes < 60 { return seconds % 60 == 0 ? "\(minutes) min" : "\(minutes) min \(seconds % 60) s" }
        let hours = minutes / 60
        if hours < 48 { return minutes % 60 == 0 ? "\(hours) h" : "\(hours) h \(minutes % 60) min" }
        return "\(hours / 24) days"
    }
}
