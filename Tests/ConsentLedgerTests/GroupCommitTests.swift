import ConsentDomain
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage

/// Group commit: calls that share a commit are each checked and appended on their own.
@Suite struct GroupCommitTests {
    static func give(_ subject: String, _ consents: [String] = ["required"], feature: String = "timeline") -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents))
    }

    /// How many commits the ledger holds (a folder keeps one signed head per commit).
    static func commits(_ ledger: Ledger) throws -> Int {
        var count = 0
        try ledger.store.read { tx in try tx.heads { _ in count += 1 } }
        return count
    }

    static func makeLedger(_ folder: TemporaryFolder, store: (any LedgerStore)? = nil) throws -> Ledger {
        try Ledger.create(store: store ?? FileLedgerStore(directory: folder.path + "/ledger"), catalog: SeedCatalog.catalog, name: "group.example/consents", keyProtection: .insecurePlaintext)
    }

    /// Three calls in one commit: the refused one appends nothing, and the state it would have
    /// left is not seen by the call after it.
    @Test func aRefusedCallInAGroupAppendsNothingAndTheOthersGoOn() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder)
        let before = try Self.commits(ledger)
        let outcomes = try ledger.executeGroup([
            [Self.give("alice")],
            // Its first command would activate bob's timeline; its second is refused.
            [Self.give("bob"), Self.give("bob", feature: "no-such-feature")],
            // Refused by R2 only if the refused call's activation was dropped.
            [Self.give("bob", ["optional-a"])],
            [Self.give("carol", ["required", "optional-b"])],
        ], stopAtRefusal: false)
        #expect(outcomes.count == 4)
        #expect(try outcomes[0].get().results[0].events.count == 1)
        guard case .failure(let refused) = outcomes[1] else { Issue.record("bob's call was accepted"); return }
        #expect("\(refused)".contains("no-such-feature"))
        guard case .failure(let r2) = outcomes[2] else { Issue.record("bob's optional consent saw the refused call's activation"); return }
        #expect("\(r2)".contains("R2"))
        #expect(try outcomes[3].get().results[0].events.count == 2)
        #expect(try Self.commits(ledger) == before + 1, "one commit for the whole group")
        #expect(try ledger.report(for: "bob").events.isEmpty)
        #expect(try ledger.report(for: "alice").listing.activeFeatures.map(\.feature.key) == ["timeline"])
        #expect(try ledger.report(for: "carol").events.count == 2)
        #expect(try ledger.verify().events == 4)
    }

    /// A call is decided against the states the accepted calls before it in the group left:
    /// each call after the first needs the one before it (R2: an optional consent needs the
    /// feature's required one), and the last call's states, which no call reads after it, are
    /// not merged back (a bulk execute's only call).
    @Test func aCallInAGroupSeesTheStatesTheAcceptedCallsBeforeItLeft() throws {
        let folder = TemporaryFolder("group-chain")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder)
        let outcomes = try ledger.executeGroup([
            [Self.give("dave")],
            [Self.give("dave", ["optional-a"])],
            [Self.give("dave", ["optional-b"]), Self.give("erin")],
        ], stopAtRefusal: false)
        #expect(try outcomes.map { try $0.get().results.map(\.events.count) } == [[1], [1], [1, 1]])
        let listing = try ledger.report(for: "dave").listing
        #expect(listing.activeFeatures.map(\.feature.key) == ["timeline"])
        #expect(try ledger.report(for: "dave").events.count == 3)
        // The next group starts from what the ledger remembers, not from the last call's states.
        let next = try ledger.executeGroup([[Self.give("dave", ["optional-a"])]], stopAtRefusal: false)
        #expect(try next[0].get().results[0].events.isEmpty, "optional-a was already given")
        #expect(try ledger.verify().events == 5, "the genesis and four consents")
    }

    /// One call's commands are sealed (and signed on other threads) as they are decided. When
    /// a later one is refused, nothing is appended, and the streams the sealer had advanced past
    /// the refused call's events are not kept: the next write links each stream to its newest
    /// event in the log, and the subject map holds no subject that has no event.
    @Test func aCallRefusedAfterItsFirstCommandsWereSealedLeavesTheStreamsAsTheLogHasThem() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder)
        try ledger.execute([Self.give("alice")])
        let log = readLog(folder.path + "/ledger")
        // Enough events for chunks of them to be signed elsewhere before the refusal.
        let accepted = (0..<8).map { Self.give("new-\($0)", ["required", "optional-a"]) }
        #expect(throws: ConsentError.self) {
            try ledger.execute([Self.give("alice", ["optional-a"])] + accepted + [Self.give("bob", feature: "no-such-feature")])
        }
        #expect(readLog(folder.path + "/ledger") == log)
        try ledger.execute([Self.give("alice", ["optional-a"])])
        try ledger.execute([Self.give("carol")])
        #expect(try ledger.report(for: "alice").events.count == 2)
        #expect(try ledger.report(for: "new-0").events.isEmpty)
        #expect(try ledger.verify().events == 4)
        #expect(try Ledger.open(store: FileLedgerStore(directory: folder.path + "/ledger")).verify().events == 4)
    }

    /// A group of nothing but refused calls commits nothing.
    @Test func aGroupOfRefusedCallsCommitsNothing() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder)
        let log = readLog(folder.path + "/ledger")
        let outcomes = try ledger.executeGroup([[Self.give("a", ["optional-a"])], [Self.give("b", feature: "x")]], stopAtRefusal: false)
        #expect(outcomes.allSatisfy { if case .failure = $0 { true } else { false } })
        #expect(readLog(folder.path + "/ledger") == log)
    }

    /// `executeInOrder` commits a group per sync, acknowledges each command once its group is
    /// durable, and stops at the first refusal: nothing after it is appended.
    @Test func inOrderCommitsGroupsAndStopsAtTheFirstRefusal() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder)
        let before = try Self.commits(ledger)
        var commands = (0..<7).map { Self.give("p\($0)") }
        commands.append(Self.give("p0", ["optional-a"]))
        commands.append(Self.give("late", ["optional-b"]))  // refused: R2
        commands.append(Self.give("after"))
        var acknowledged: [Int] = []
        #expect(throws: ConsentError.self) {
            try ledger.executeInOrder(commands, groupSize: 3) { index, result, _ in
                #expect(!result.events.isEmpty)
                acknowledged.append(index)
            }
        }
        #expect(acknowledged == Array(0..<8))
        // Groups of 3: [0 1 2] [3 4 5] [6 7 (8 refused, 9 not run)].
        #expect(try Self.commits(ledger) == before + 3)
        #expect(try ledger.report(for: "after").events.isEmpty)
        #expect(try ledger.report(for: "p0").events.count == 2)
        #expect(try ledger.verify().events == 1 + 8)
    }

    /// Sixteen threads writing at once: every call answered, every event in the log once, and
    /// fewer commits than calls. The store holds the first commit back until every thread has
    /// queued its call, so the test does not depend on the machine's speed.
    @Test func concurrentWritersShareCommits() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let gate = HeldFirstWrite(FileLedgerStore(directory: folder.path + "/ledger"))
        let ledger = try Self.makeLedger(folder, store: gate)
        let before = try Self.commits(ledger)
        let writers = 16, perWriter = 8
        let answered = Mutex<[String: Int]>([:])
        gate.holdNextWrite()
        onThreads(writers) { w in
            for k in 0..<perWriter {
                let subject = "w\(w)-\(k)"
                if k == 0 { gate.arrived() }
                do {
                    let (result, _) = try ledger.execute(Self.give(subject, ["required", "optional-a"]))
                    answered.withLock { $0[subject] = result.events.count }
                } catch {
                    Issue.record("\(subject): \(error)")
                }
            }
        }
        let answers = answered.withLock { $0 }
        #expect(answers.count == writers * perWriter && answers.values.allSatisfy { $0 == 2 })
        let commits = try Self.commits(ledger) - before
        #expect(commits < writers * perWriter, "\(commits) commits for \(writers * perWriter) calls")
        let report = try ledger.verify()
        #expect(report.events == 1 + 2 * writers * perWriter)
        for subject in answers.keys {
            #expect(try ledger.report(for: subject).events.count == 2)
        }
    }

    /// Each waiting caller is woken alone (with its result, or to lead the next group), and
    /// callers of `executeInOrder` wait for the leader's place on a condition of their own:
    /// many writers and in-order importers at once all finish, each call answered once. A
    /// wake-up lost anywhere would leave a caller asleep: the test then fails at its deadline
    /// rather than hanging.
    @Test(arguments: [(writers: 12, importers: 0), (writers: 12, importers: 2), (writers: 3, importers: 3)])
    func everyWaitingCallerIsWokenWithItsResult(writers: Int, importers: Int) throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let ledger = try Self.makeLedger(folder, store: MemoryLedgerStore())
        let perWriter = 30, perImporter = 12
        let answered = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            onThreads(writers + importers) { t in
                if t < writers {
                    for k in 0..<perWriter {
                        if (try? ledger.execute(Self.give("w\(t)-\(k)"))) != nil { answered.withLock { $0 += 1 } }
                    }
                } else {
                    let commands = (0..<perImporter).map { Self.give("i\(t)-\($0)") }
                    try? ledger.executeInOrder(commands, groupSize: 3) { _, _, _ in answered.withLock { $0 += 1 } }
                }
            }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 120) == .success, "a caller was never woken")
        #expect(answered.withLock { $0 } == writers * perWriter + importers * perImporter)
        #expect(try ledger.verify().events == 1 + writers * perWriter + importers * perImporter)
    }

    /// A subject record that fails its check (its signature altered) is the error of the call
    /// that names that subject only: the group is run call by call, and the other call of the
    /// group is committed.
    @Test func aBadRecordFailsOnlyTheCallThatNamesIt() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let path = folder.path + "/ledger"
        try Self.makeLedger(folder).execute([Self.give("mallory"), Self.give("first")])
        try Self.damageSignature(of: "mallory", in: path)
        let gate = HeldFirstWrite(FileLedgerStore(directory: path), expected: 3)
        let ledger = try Ledger.open(store: gate)
        let outcomes = Mutex<[String: Result<Int, ConsentError>]>([:])
        gate.holdNextWrite()
        onThreads(3) { t in
            // The first call leads and is held; the other two queue behind it as one group.
            if t > 0 { usleep(20_000) }
            let subject = ["first", "good", "mallory"][t]
            gate.arrived()
            let result = Result { () throws(ConsentError) -> Int in
                do { return try ledger.execute(Self.give(subject, ["optional-a"])).result.events.count } catch let error as ConsentError { throw error } catch { throw .storage("\(error)") }
            }
            outcomes.withLock { $0[subject] = result }
        }
        let results = outcomes.withLock { $0 }
        #expect((try? results["first"]?.get()) == 1)
        // "good" has no required consent yet: its refusal is its own (R2), not the record's.
        guard case .failure(let good)? = results["good"] else { Issue.record("good was accepted"); return }
        #expect("\(good)".contains("R2"), "\(good)")
        guard case .failure(let bad)? = results["mallory"] else { Issue.record("mallory's damaged record was used"); return }
        #expect("\(bad)".contains("mallory") && "\(bad)".contains("subject record"), "\(bad)")
    }

    /// In `executeInOrder`, a subject record that fails its check stops the run at its command:
    /// the commands before it, in the same group, are committed and acknowledged.
    @Test func inOrderStopsAtABadRecordAfterCommittingWhatComesBefore() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let path = folder.path + "/ledger"
        try Self.makeLedger(folder).execute([Self.give("mallory")])
        try Self.damageSignature(of: "mallory", in: path)
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        var acknowledged: [Int] = []
        let commands = [Self.give("a"), Self.give("b"), Self.give("mallory", ["optional-a"]), Self.give("d")]
        do {
            try ledger.executeInOrder(commands, groupSize: 4) { index, _, _ in acknowledged.append(index) }
            Issue.record("the damaged record was used")
        } catch {
            #expect("\(error)".contains("mallory"), "\(error)")
        }
        #expect(acknowledged == [0, 1])
        #expect(try ledger.report(for: "b").events.count == 1)
        #expect(try ledger.report(for: "d").events.isEmpty)
    }

    /// A storage failure of a group's commit is every call's error, and no call is run again:
    /// the commit may have been made (here it was: a sync or a connection that failed after the
    /// data reached the disk), and a call run again alone would append its events twice.
    @Test func aStorageFailureOfAGroupIsEveryCallsAndNothingRunsAgain() throws {
        let folder = TemporaryFolder("group")
        defer { folder.remove() }
        let path = folder.path + "/ledger"
        try Self.makeLedger(folder).execute([Self.give("a"), Self.give("b"), Self.give("c")])
        let gate = HeldFirstWrite(FileLedgerStore(directory: path), expected: 3)
        let store = CommitsThenFails(gate, failingWrite: 2)
        let ledger = try Ledger.open(store: store)
        let before = try ledger.verify().events
        let outcomes = Mutex<[String: Result<Int, ConsentError>]>([:])
        gate.holdNextWrite()
        onThreads(3) { t in
            // The first call leads and is held; the other two queue behind it as one group.
            if t > 0 { usleep(20_000) }
            let subject = ["a", "b", "c"][t]
            gate.arrived()
            // Two commands that a second run would append again.
            let call = [Self.give(subject, ["optional-a"]), LedgerCommand(subjectID: subject, request: .revoke(feature: "timeline", consent: "optional-a"))]
            let result = Result { () throws(ConsentError) -> Int in
                do { return try ledger.execute(call).results.reduce(0) { $0 + $1.events.count } } catch let error as ConsentError { throw error } catch { throw .storage("\(error)") }
            }
            outcomes.withLock { $0[subject] = result }
        }
        let results = outcomes.withLock { $0 }
        #expect((try? results["a"]?.get()) == 2)
        for subject in ["b", "c"] {
            guard case .failure(.storage)? = results[subject] else { Issue.record("\(subject): \(String(describing: results[subject]))"); continue }
        }
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == before + 6, "each call's two events, once")
    }

    /// Alters one hex digit of `subject`'s record signature in subjects.jsonl.
    static func damageSignature(of subject: String, in path: String) throws {
        var text = String(decoding: readBytes(path + "/subjects.jsonl"), as: UTF8.self)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("{\"id\":\"\(subject)\"") })
        var altered = String(line)
        let digit = altered.index(altered.endIndex, offsetBy: -4)
        altered.replaceSubrange(digit...digit, with: altered[digit] == "0" ? "1" : "0")
        text = text.replacingOccurrences(of: String(line), with: altered)
        writeBytes(Array(text.utf8), to: path + "/subjects.jsonl")
    }
}

/// A storage that, when told, holds its next write transaction until `expected` callers have
/// arrived (or a second has passed), so that they queue behind it.
final class HeldFirstWrite: LedgerStore, Sendable {
    let base: FileLedgerStore
    let expected: Int
    private let state = Mutex<(hold: Bool, arrived: Int)>((false, 0))

    init(_ base: FileLedgerStore, expected: Int = 16) {
        self.base = base
        self.expected = expected
    }

    func holdNextWrite() { state.withLock { $0.hold = true } }
    func arrived() { state.withLock { $0.arrived += 1 } }

    var names: StorageNames { base.names }
    var keyStore: (any KeyStore)? { base.keyStore }
    func create(_ setup: LedgerSetup) throws { try base.create(setup) }
    func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T { try base.read(body) }
    func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        if state.withLock({ s in defer { s.hold = false }; return s.hold }) {
            for _ in 0..<1000 where state.withLock({ $0.arrived }) < expected { usleep(1000) }
            usleep(20_000)
        }
        return try base.write(body)
    }
}

/// A storage whose `failingWrite`-th write transaction commits and then reports a storage
/// failure, as a sync or a connection that fails after the data is durable does.
final class CommitsThenFails: LedgerStore, Sendable {
    let base: any LedgerStore
    let failingWrite: Int
    private let writes = Mutex(0)

    init(_ base: any LedgerStore, failingWrite: Int) {
        self.base = base
        self.failingWrite = failingWrite
    }

    var names: StorageNames { base.names }
    var keyStore: (any KeyStore)? { base.keyStore }
    func create(_ setup: LedgerSetup) throws { try base.create(setup) }
    func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T { try base.read(body) }
    func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        let number = writes.withLock { n in n += 1; return n }
        let result = try base.write(body)
        if number == failingWrite { throw ConsentError.storage("the sync after the commit failed (simulated)") }
        return result
    }
}

/// The manager's blocking calls each get a thread: sixteen jobs that can finish only when all
/// sixteen run at once do finish (on Dispatch's pool, which runs about as many as there are
/// cores, they waited for each other; a load test saw 900 ms at p99).
@Suite struct BlockingWorkersTests {
    @Test func sixteenWaitingJobsRunAtOnce() throws {
        let workers = BlockingWorkers(maximum: 64)
        let running = Mutex(0)
        let finished = Mutex<[Bool]>([])
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<16 {
            workers.submit {
                running.withLock { $0 += 1 }
                // Wait up to 5 s for all sixteen to be running.
                var all = false
                for _ in 0..<5000 {
                    if running.withLock({ $0 }) >= 16 { all = true; break }
                    usleep(1000)
                }
                finished.withLock { $0.append(all) }
                done.signal()
            }
        }
        for _ in 0..<16 { done.wait() }
        #expect(finished.withLock { $0 } == Array(repeating: true, count: 16))
    }
}
