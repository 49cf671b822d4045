
/// Group commit for the writers of one process: a sync costs the same for one command as for a
/// hundred, so commands that arrive while a commit is being made durable wait together, and
/// the next commit takes them all.
///
/// Each call queues its commands. When no caller leads, one becomes the leader: it runs every
/// queued call (its own among them) in one write transaction and hands each its result; the
/// others sleep, each woken alone: when its result is there, or when it is the oldest call
/// still waiting and the leader's place is free (it leads the next group). No thread
/// sleeps on a timer to gather a group: a group is whatever arrived during the previous commit,
/// so a lone writer pays nothing for it.
///
/// The transaction and the storage's lock between processes are unchanged: a group is an
/// ordinary commit of several commands, each its own command span in the log, so a crash keeps
/// or loses each whole, and nothing is acknowledged before its commit returned.
final class GroupCommit: @unchecked Sendable {
    /// One caller's queued commands, its result once a leader has run them, and the condition
    /// its caller sleeps on (under `state`'s lock). Each caller is woken alone, when its result
    /// is there or when it is to lead: waking every sleeper at the end of each commit (a
    /// broadcast) cost each of them a context switch only to sleep again, and the leader's
    /// core time with them.
    private final class Call {
        let commands: [LedgerCommand]
        var result: Result<ExecutionReport, any Error>?
        let wake = ThreadCondition.Waiter()
        init(_ commands: [LedgerCommand]) { self.commands = commands }
    }

    /// Calls whose commands wait for a commit, oldest first. Guarded by `state`.
    private var waiting: [Call] = []
    /// Whether a caller is running a group now (or ``exclusively(_:)`` a body).
    private var leading = false
    /// Callers of ``exclusively(_:)`` waiting for the leader's place (they wait on `state`'s own
    /// condition).
    private var exclusiveWaiting = 0
    /// The lock of all of the above. A sleeping waiter takes no core from the leader, whose
    /// signing needs them all.
    private let state = ThreadCondition()

    /// At most this many commands go into one commit (a bound on its memory and on how long
    /// the first caller of a group waits); calls beyond it wait for the next.
    static let maxCommands = 1024

    /// Queues `commands` as one call and returns its report once a commit has made its events
    /// durable (or its error). `run` decides and commits a group of calls, each call's commands
    /// as one batch, and returns each batch's result in order; an error it throws fails every
    /// call of the group.
    func submit(_ commands: [LedgerCommand], run: ([[LedgerCommand]]) throws -> [Result<ExecutionReport, any Error>]) throws -> ExecutionReport {
        let call = Call(commands)
        state.lock()
        waiting.append(call)
        while true {
            if let result = call.result {
                state.unlock()
                return try result.get()
            }
            if leading {
                state.wait(on: call.wake)
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
            for (member, result) in zip(group, results) { member.result = result }
            let next = releaseLeadership()
            state.unlock()
            // Woken after the lock is let go, so that none wakes only to wait for it; the next
            // leader first, since the next commit waits for it. (A caller checks its result and
            // the leader's place under the lock before it sleeps, so no wake-up is lost.)
            wake(next)
            for member in group where member !== call { state.signal(member.wake) }
            state.lock()
        }
    }

    /// Gives up the leader's place (with `state` locked). Returns whom to wake once the lock
    /// is let go: the oldest waiting call, which leads next (it takes the calls that arrived
    /// meanwhile), and whether callers of ``exclusively(_:)`` wait.
    private func releaseLeadership() -> (leader: Call?, exclusive: Bool) {
        leading = false
        return (waiting.first, exclusiveWaiting > 0)
    }

    private func wake(_ next: (leader: Call?, exclusive: Bool)) {
        if next.exclusive { state.broadcast() }
        if let leader = next.leader { state.signal(leader.wake) }
    }

    /// Runs `body` as the only leader: no group runs meanwhile (a caller that commits groups of
    /// its own, ``Ledger/executeInOrder(_:groupSize:acknowledge:)``).
    func exclusively(_ body: () throws -> [Result<ExecutionReport, ConsentError>]) throws -> [Result<ExecutionReport, ConsentError>] {
        state.lock()
        exclusiveWaiting += 1
        while leading { state.wait() }
        exclusiveWaiting -= 1
        leading = true
        state.unlock()
        defer {
            state.lock()
            let next = releaseLeadership()
            state.unlock()
            wake(next)
        }
        return try body()
    }
}
