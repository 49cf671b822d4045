/// Rebuilds every subject's state from the log, event by event. Replay is the truth: the ledger's
/// state is whatever this fold produces, and it refuses any log the rules do not allow.
///
/// Feed it every event in order (``apply(_:)``), or, for one subject, only that subject's
/// events with ``SubjectState/apply(_:catalog:)`` directly.
public struct LedgerReplay: Sendable {
    /// The catalogue in force: the genesis catalogue, then each published version in turn.
    public private(set) var catalog: Catalog
    /// Every catalogue version in force so far, with the sequence number it took effect at.
    public private(set) var catalogVersions: [(seq: UInt64, at: Timestamp, catalog: Catalog)] = []
    public private(set) var subjects: [SubjectRef: SubjectState] = [:]
    /// The genesis event, once applied.
    public private(set) var genesis: LedgerCreated?
    public private(set) var lastSeq: UInt64?
    public private(set) var lastAt: Timestamp?
    public private(set) var eventCount = 0
    /// The clock corrections so far (rule 5b).
    public private(set) var clockCorrections = ClockCorrections()
    /// The command still open, and what its first event set that the others must share. Kept
    /// apart, and only for a command of more than one event: an optional tuple holding a string
    /// was copied out and destroyed for every event of a replay.
    private var openCommand: CommandSpan?
    private var openSubject: SubjectRef?
    private var openAt = Timestamp(millisecondsSinceEpoch: 0)
    private var openActor = ""

    public init(catalog: Catalog) {
        self.catalog = catalog
    }

    /// Applies the next event of the log. Checks sequence numbers, time order, command spans and
    /// the consent rules.
    public mutating func apply(_ event: LedgerEvent) throws(ReplayViolation) {
        let seq = event.seq
        let expected = lastSeq.map { $0 + 1 } ?? 0
        guard seq == expected else {
            throw ReplayViolation(seq: seq, problem: "sequence number \(seq) where \(expected) was expected")
        }
        // Rule 2; a clock correction is the one event that moves time back (rule 5b).
        let correctsClock = if case .clockCorrected = event.payload { true } else { false }
        if let lastAt, event.at < lastAt, !correctsClock {
            throw ReplayViolation(seq: seq, problem: "time \(event.at) is earlier than the previous event's \(lastAt)")
        }
        if let open = openCommand {
            guard event.command == open, event.payload.subject == openSubject else {
                throw ReplayViolation(seq: seq, problem: "command starting at seq \(open.first) is incomplete: expected \(open.size) events")
            }
            guard event.at == openAt, event.actor.hasSameBytes(as: openActor) else {
                throw ReplayViolation(seq: seq, problem: "events of one command share one time and one actor")
            }
        } else {
            guard event.command.first == seq, event.command.size >= 1 else {
                throw ReplayViolation(seq: seq, problem: "event claims command start \(event.command.first), but a new command must start at its own seq")
            }
            if event.command.size > 1 {
                openCommand = event.command
                openSubject = event.payload.subject
                openAt = event.at
                openActor = event.actor
            }
        }
        switch event.payload {
        case .ledgerCreated(let created):
            guard seq == 0, event.command.size == 1 else {
                throw ReplayViolation(seq: seq, problem: "a genesis event can only be the first event, alone in its command")
            }
            genesis = created
            catalogVersions = [(seq, event.at, catalog)]
        case .catalogPublished(let published):
            guard genesis != nil, event.command.size == 1 else {
                throw ReplayViolation(seq: seq, problem: "a catalogue version is published alone in its command, after the genesis event")
            }
            if let problem = published.catalog.problemAsUpdate(of: catalog) {
                throw ReplayViolation(seq: seq, problem: "the published catalogue cannot replace the one in force: \(problem)")
            }
            let expected = published.catalog.features.flatMap { f in f.consents.map { (f.code, $0.code, $0.version) } }
            guard published.notices.count == expected.count,
                zip(published.notices, expected).allSatisfy({ $0.feature == $1.0 && $0.consent == $1.1 && $0.version.utf8.elementsEqual($1.2.utf8) })
            else {
                throw ReplayViolation(seq: seq, problem: "the notices must list every consent of the published catalogue, in catalogue order, with its version")
            }
            catalog = published.catalog
            catalogVersions.append((seq, event.at, catalog))
        case .keyRotated:
            guard genesis != nil, event.command.size == 1 else {
                throw ReplayViolation(seq: seq, problem: "a key rotation is alone in its command, after the genesis event")
            }
        case .keyRevoked:
            guard genesis != nil, event.command.size == 1 else {
                throw ReplayViolation(seq: seq, problem: "a key revocation is alone in its command, after the genesis event")
            }
        case .clockCorrected(let correction):
            guard genesis != nil, event.command.size == 1, let lastAt else {
                throw ReplayViolation(seq: seq, problem: "a clock correction is alone in its command, after the genesis event")
            }
            guard correction.correctedFrom == lastAt else {
                throw ReplayViolation(seq: seq, problem: "a clock correction names the time it corrects, the previous event's \(lastAt), but this one names \(correction.correctedFrom)")
            }
            guard event.at < lastAt else {
                throw ReplayViolation(seq: seq, problem: "a clock correction moves the ledger's time back, but \(event.at) is not earlier than the previous event's \(lastAt)")
            }
            // Not before what the ledger already holds to be right: its creation, and the time
            // a previous correction set.
            let floor = clockCorrections.corrections.last.map(\.at) ?? catalogVersions[0].at
            guard event.at >= floor else {
                throw ReplayViolation(seq: seq, problem: "a clock correction cannot set the ledger's time to \(event.at), before \(clockCorrections.isEmpty ? "the genesis event's" : "the previous clock correction's") \(floor)")
            }
            clockCorrections.append(.init(seq: seq, at: event.at, correctedFrom: correction.correctedFrom, reason: correction.reason))
        default:
            // The genesis event starts the catalogue versions: asking for them, not for the
            // optional genesis (which copied it), on every subject's event.
            guard !catalogVersions.isEmpty, let subject = event.payload.subject else {
                throw ReplayViolation(seq: seq, problem: "the log does not start with a genesis event")
            }
            try subjects[subject, default: SubjectState()].apply(event, catalog: catalog)
        }
        if seq == event.command.last { openCommand = nil }
        lastSeq = seq
        lastAt = event.at
        eventCount += 1
    }

    /// The start of the command still open, when the log ends inside one.
    public var incompleteCommand: CommandSpan? { openCommand }

    /// A subject's state; a subject with no events has no consents (rule R1).
    public func state(of subject: SubjectRef) -> SubjectState {
        subjects[subject] ?? SubjectState()
    }
}
