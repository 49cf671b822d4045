/// The ledger's clock corrections (`clock.corrected` events), and the times they make good.
///
/// Times in the log never go backwards except at a correction. So whatever happened before a
/// correction happened before the correction's own time, whatever its recorded `at` says: an
/// event stamped 2999 by a machine whose clock was wrong, and corrected on 26.11.2026, happened
/// by 26.11.2026. An event's **effective time** is therefore its `at`, or the `at` of a later
/// correction when that is earlier (Spec/ledger-format.md, Clock corrections). Effective times
/// never go backwards, so "the state as of T" is still a prefix of the log: the events whose
/// effective time is not later than T.
///
/// Without corrections the effective time is the recorded one.
public struct ClockCorrections: Hashable, Sendable {
    /// One correction: the event's seq, its `at` (the ledger's time from then on) and the time
    /// it corrected.
    public struct Correction: Hashable, Sendable {
        public let seq: UInt64
        public let at: Timestamp
        public let correctedFrom: Timestamp
        public let reason: String?

        public init(seq: UInt64, at: Timestamp, correctedFrom: Timestamp, reason: String?) {
            self.seq = seq
            self.at = at
            self.correctedFrom = correctedFrom
            self.reason = reason
        }
    }

    /// In log order.
    public private(set) var corrections: [Correction] = []
    /// `earliestFrom[i]`: the earliest `at` of corrections i and later.
    private var earliestFrom: [Timestamp] = []

    public init() {}

    public init(_ corrections: [Correction]) {
        for c in corrections { append(c) }
    }

    /// Adds the next correction of the log (corrections come in seq order).
    public mutating func append(_ correction: Correction) {
        precondition(corrections.last.map { $0.seq < correction.seq } ?? true, "clock corrections come in log order")
        corrections.append(correction)
        // A later correction can only lower the bound of the earlier ones.
        earliestFrom.append(correction.at)
        for i in stride(from: earliestFrom.count - 2, through: 0, by: -1) where earliestFrom[i] > correction.at {
            earliestFrom[i] = correction.at
        }
    }

    public var isEmpty: Bool { corrections.isEmpty }

    /// The effective time of the event at `seq` recorded at `at`: `at`, or the earliest `at` of
    /// a correction after it when that is earlier.
    public func effectiveTime(seq: UInt64, at: Timestamp) -> Timestamp {
        guard !corrections.isEmpty else { return at }
        // The first correction after `seq`.
        var low = 0, high = corrections.count
        while low < high {
            let mid = (low + high) / 2
            if corrections[mid].seq > seq { high = mid } else { low = mid + 1 }
        }
        guard low < corrections.count else { return at }
        return min(at, earliestFrom[low])
    }

    /// The effective time of an event.
    public func effectiveTime(of event: LedgerEvent) -> Timestamp {
        effectiveTime(seq: event.seq, at: event.at)
    }
}
