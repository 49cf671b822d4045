
/// Group commit for the writers of one process: a sync costs the same for one command as for a
/// hundred, so commands that arrive while a commit is being made durable wait together, and
/// the next commit takes them all.
///
/// Each call queues its commands. When no caller leads, one becomes the leader: it runs every
/// queued call (its own among them) in one write transaction and hands each its result; the
/// others sleep until their result is there or the leader's place is free again. No thread
/// sleeps on a timer to gather a group: a group is whatever arrived during the previous commit,
/// so a lone writer pays nothing for it.
///
/// The transaction and the storage's lock between processes are unchanged: a group is an
/// ordinary commit of several commands, each its own command span in the log, so a crash keeps
/// or loses each whole, and nothing is acknowledged before its commit returned.
final class GroupCommit: @unchecked Sendable {
    /// Calls whose commands wait for a commit, and the results of calls run by a leader but not
    /// yet taken by their caller. Guarded by `state`.
    private var nextTicket = 0
    private var waiting: [(ticket: Int, commands: [LedgerCommand])] = []
    private var done: [Int: Result<ExecutionReport, any Error>] = [:]
    /// Whether a caller is running a group now (or ``exclusively(_:)`` a body).
    private var leading = false
    /// Callers sleep here until a leader has run their call or the leader's place is free; a
    /// sleeping waiter takes no core from the leader, whose signing needs them all.
    private let state = ThreadCondition()

    /// At most this many commands go into one commit (a bound on its memory and on how long
    /// the first caller of a group waits); calls beyond it wait for the next.
    static let maxCommands = 1024

    /// Queues `commands` as one call and returns its report once a commit has made its events
    /// durable (or its error). `run` decides and commits a group of calls, each call's commands
    /// as one batch, and returns each batch's result in order; an error it throws fails every
    /// call of the group.
    func submit(_ commands: [LedgerCommand], run: ([[LedgerCommand]]) throws -> [Result<ExecutionReport, any Error>]) throws -> ExecutionReport {
        state.lock()
        nextTicket += 1
        let ticket = nextTicket
        waiting.append((ticket, commands))
        while true {
            if let result = done.removeValue(forKey: ticket) {
                state.unlock()
                return try result.get()
            }
            if leading || waiting.isEmpty {
                state.wait()
                continue
            }
            // Lead: take every call that waits (up to the bound), run them outside the lock.
            leading = true
            var count = 0, taken = 0
            while taken < waiting.count, taken == 0 || count + waiting[taken].commands.count <= Self.maxCommands {
                count += waiting[taken].commands.count
                taken += 1
            }
            let group = Array(waiting.prefix(taken))
            waiting.removeFirst(taken)
            state.unlock()
            var results: [Result<ExecutionReport, any Error>]
            do {
                results = try run(group.map(\.commands))
            } catch {
                results = group.map { _ in .failure(error) }
            }
            // Every call of the group gets a result, or its caller would wait for ever.
            while results.count < group.count {
                results.append(.failure(ConsentError.invalidRequest("internal error: the group commit gave this call no result")))
            }
            state.lock()
            for (call, result) in zip(group, results) { done[call.ticket] = result }
            leading = false
            state.broadcast()
        }
    }

    /// Runs `body` as the only leader: no group runs meanwhile (a caller that commits groups of
    /// its own, ``Ledger/executeInOrder(_:groupSize:acknowledge:)``).
    func exclusively(_ body: () throws -> [Result<ExecutionReport, ConsentError>]) throws -> [Result<ExecutionReport, ConsentError>] {
        state.lock()
        while leading { state.wait() }
        leading = true
        state.unlock()
        defer {
            state.lock()
            leading = false
            state.broadcast()
            state.unlock()
        }
        return try body()
    }
}

