import ConsentDomain

/// Where in the log an integrity failure was found and what is wrong.
public struct IntegrityFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// 1-based line of the log file, when the failure is tied to a line.
    public let line: Int?
    /// The event's sequence number, when known.
    public let seq: UInt64?
    public let problem: String

    public init(line: Int?, seq: UInt64?, problem: String) {
        self.line = line
        self.seq = seq
        self.problem = problem
    }

    public var description: String {
        var location: [String] = []
        if let seq { location.append("seq \(seq)") }
        if let line { location.append("line \(line)") }
        return location.isEmpty ? problem : "\(location.joined(separator: ", ")): \(problem)"
    }
}

/// Every failure the ledger reports. Each case maps to one exit code of `consentctl`.
public enum LedgerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The request names something that does not exist or is malformed (unknown feature or
    /// consent, bad subject id, bad time).
    case invalidRequest(String)
    /// A consent rule forbids the request. Nothing was appended.
    case ruleViolation(String)
    /// The catalogue file is malformed or breaks a catalogue rule.
    case invalidCatalog(CatalogError)
    /// The stored ledger is damaged, tampered with, or signed by another key.
    case integrity(IntegrityFailure)
    /// No ledger where one was expected, or one where none was expected.
    case notFound(String)
    case alreadyExists(String)
    /// Reading, writing, syncing or locking failed.
    case storage(String)

    public var description: String {
        switch self {
        case .invalidRequest(let m): return m
        case .ruleViolation(let m): return "rule violation: \(m)"
        case .invalidCatalog(let e): return "invalid catalogue: \(e)"
        case .integrity(let f): return "integrity failure: \(f)"
        case .notFound(let m): return m
        case .alreadyExists(let m): return m
        case .storage(let m): return "storage error: \(m)"
        }
    }

    init(_ rejection: CommandRejection) {
        switch rejection {
        case .ruleViolation: self = .ruleViolation(rejection.description)
        default: self = .invalidRequest(rejection.description)
        }
    }
}
