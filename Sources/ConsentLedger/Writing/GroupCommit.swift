import Synchronization

/// Group commit for the writers of one process: a sync costs the same for one command as for a
/// hundred, so commands that arrive while a commit is being made durable wait together, and
/// the next commit takes them all.
///
/// Each call queues its commands, then takes the leader's lock. The caller that holds it runs
/// every queued call (its own among them) in one write transaction and hands each its result;
/// a caller that gets the lock after its call was run by another just takes its result. No
/// thread sleeps on a timer to gather a group: a group is whatever arrived during the previous
/// commit, so a lone writer pays nothing for it.
///
/// The transaction and the storage's lock between processes are unchanged: a group is an
/// ordinary commit of several commands, each its own command span in the log, so a crash keeps
/// or loses each whole, and nothing is acknowledged before its commit returned.
final class GroupCommit: Sendable {
    /// Calls whose commands wait for a commit, and the results of calls run by another leader
    /// but not yet taken by their caller.
    private struct Queue {
        var nextTicket = 0
        var waiting: [(ticket: Int, commands: [LedgerCommand])] = []
        var done: [Int: Result<ExecutionReport, any Error>] = [:]
    }

    private let queue = Mutex(Queue())
    /// Held by the caller that runs a group (and by ``exclusively(_:)``).
    private let leader = Mutex(())

    /// At most this many commands go into one commit (a bound on its memory and on how long
    /// the first caller of a group waits); calls beyond it wait for the next.
    static let maxCommands = 1024

    /// Queues `commands` as one call and returns its report once a commit has made its events
    /// durable (or its error). `run` decides and commits a group of calls, each call's commands
    /// as one batch, and returns each batch's result in order; an error it throws fails every
    /// call of the group.
    func submit(_ commands: [LedgerCommand], run: ([[LedgerCommand]]) throws -> [Result<ExecutionReport, ConsentError>]) throws -> ExecutionReport {
        let ticket = queue.withLock { q in
            q.nextTicket += 1
            q.waiting.append((q.nextTicket, commands))
            return q.nextTicket
        }
        let result: Result<ExecutionReport, any Error> = leader.withLock { _ in
            while true {
                if let done = queue.withLock({ $0.done.removeValue(forKey: ticket) }) { return done }
                let group = queue.withLock { q -> [(ticket: Int, commands: [LedgerCommand])] in
                    var count = 0
                    var taken = 0
                    while taken < q.waiting.count, taken == 0 || count + q.waiting[taken].commands.count <= Self.maxCommands {
                        count += q.waiting[taken].commands.count
                        taken += 1
                    }
                    defer { q.waiting.removeFirst(taken) }
                    return Array(q.waiting.prefix(taken))
                }
                let results: [Result<ExecutionReport, any Error>]
                do {
                    results = try run(group.map(\.commands)).map { $0.mapError { $0 as any Error } }
                } catch {
                    results = group.map { _ in .failure(error) }
                }
                queue.withLock { q in
                    for (call, result) in zip(group, results) { q.done[call.ticket] = result }
                }
            }
        }
        return try result.get()
    }

    /// Runs `body` as the only leader: no group runs meanwhile (a caller that commits groups of
    /// its own, ``Ledger/executeInOrder(_:groupSize:acknowledge:)``).
    func exclusively(_ body: () throws -> [Result<ExecutionReport, ConsentError>]) throws -> [Result<ExecutionReport, ConsentError>] {
        let result: Result<[Result<ExecutionReport, ConsentError>], any Error> = leader.withLock { _ in Result { try body() } }
        return try result.get()
    }
}
