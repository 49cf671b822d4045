import Foundation
#if PostgreSQL
import ConsentDomain
import Logging
import PostgresNIO
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentLedgerPostgres
@testable import LedgerFormat
@testable import LedgerStorage

#if canImport(Glibc)
import Glibc
#endif

/// A PostgreSQL server that misbehaves: a session that holds the ledger's lock, a server that
/// crashes (`pg_ctl stop -m immediate`) and comes back, one paused with SIGSTOP. Every
/// acknowledged command is present afterwards, every other one is whole or absent, nothing waits
/// without end, and writers go on once the server is back. The server is the throwaway one of
/// `scripts/with-test-postgres.sh`, which `CONSENTLEDGER_TEST_POSTGRES_CTL` controls. They stop
/// the server every other test uses, so `make test` runs them alone (`--filter`), after the
/// others (`--skip ServerFaultTests`).
@Suite(.serialized) struct ServerFaultTests {
    static func control(_ action: String) throws {
        guard let ctl = getenv("CONSENTLEDGER_TEST_POSTGRES_CTL").flatMap({ String(validatingCString: $0) }) else {
            throw TestDatabase.Missing()
        }
        let status = system("'\(ctl)' \(action)")
        guard status == 0 else { throw ConsentError.storage("\(ctl) \(action) failed (\(status))") }
    }

    static func give(_ subject: String) -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required", "optional-a"]))
    }

    /// After a fault: a new store verifies the ledger, holds every acknowledged command with
    /// both its events, and every subject it holds has exactly one whole command.
    static func checkAfterFault(_ url: String, acknowledged: [String]) throws -> Int {
        let ledger = try Ledger.open(store: try TestDatabase.store(url))
        let report = try ledger.verify()
        for subject in acknowledged {
            #expect(try ledger.report(for: subject).events.count == 2, "\(subject) was acknowledged")
        }
        let replay = try ledger.loadAll()
        for (ref, state) in replay.subjects {
            #expect(state.consents.values.filter(\.isGiven).count == 2, "subject \(ref.value) holds part of a command")
        }
        return report.events
    }

    /// A session that holds the ledger's lock: a write waits the store's lock timeout, then
    /// fails naming that session, and changes nothing; once the lock is free it goes through.
    @Test func aHeldLockFailsAfterTheLockTimeoutNamingTheSession() async throws {
        let url = try TestDatabase.freshURL("held_lock")
        let schema = try PostgresLedgerAddress(url: url).schema
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/held-lock", keyProtection: .insecurePlaintext)
        let holder = try await TestDatabase.connect(url)
        let logger = Logger(label: "test")
        let pid = try await holder.query("SELECT pg_backend_pid()::text", logger: logger).get().first!.decode(String.self)
        _ = try await holder.query("BEGIN", logger: logger).get()
        _ = try await holder.query(PostgresQuery(unsafeSQL: "SELECT pg_advisory_xact_lock(hashtextextended('consentledger:\(schema)', 0))"), logger: logger).get()
        let before = try await TestDatabase.fingerprint(url)
        let store = try PostgresLedgerStore(url: url, keyStore: FileKeyStore(path: TestDatabase.keyPath(url)), lockTimeout: .seconds(1))
        let ledger = try Ledger.open(store: store)
        let started = ContinuousClock.now
        #expect {
            try ledger.execute(Self.give("bob"))
        } throws: { error in
            guard case ConsentError.storage(let message) = error else { return false }
            return message.contains("is locked by session \(pid)") && message.contains("stayed locked for 1 s") && message.contains("nothing was written")
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .seconds(1) && waited < .seconds(15))
        #expect(try await TestDatabase.fingerprint(url) == before)
        _ = try await holder.query("COMMIT", logger: logger).get()
        try await holder.close()
        #expect(try ledger.execute(Self.give("bob")).result.events.count == 2)
    }

    /// The server crashes while a writer writes, and comes back: the writer's calls fail while
    /// it is down, and succeed again once it is up, on new connections.
    @Test func aWriterGoesOnAfterTheServerCrashesAndComesBack() throws {
        let url = try TestDatabase.freshURL("crash")
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/crash", keyProtection: .insecurePlaintext)
        let ledger = try Ledger.open(store: try PostgresLedgerStore(url: url, keyStore: FileKeyStore(path: TestDatabase.keyPath(url)), lockTimeout: .seconds(2)))
        let acknowledged = Mutex<[String]>([])
        let failures = Mutex(0)
        let back = Mutex(false)
        let writer = Thread {
            var i = 0
            // Until 20 commands went through after the server came back (or two minutes).
            let deadline = Date().addingTimeInterval(120)
            var afterRestart = 0
            while afterRestart < 20, Date() < deadline {
                let subject = "c\(i)"
                i += 1
                do {
                    _ = try ledger.execute(Self.give(subject))
                    acknowledged.withLock { $0.append(subject) }
                    if back.withLock({ $0 }) { afterRestart += 1 }
                } catch {
                    failures.withLock { $0 += 1 }
                    usleep(50_000)
                }
            }
        }
        writer.start()
        while acknowledged.withLock({ $0.count }) < 20 { usleep(10_000) }
        try Self.control("crash")
        usleep(500_000)
        try Self.control("start")
        back.withLock { $0 = true }
        while !writer.isFinished { usleep(50_000) }
        let done = acknowledged.withLock { $0 }
        // Calls made while the server was down fail, or wait for the pool's reconnection and
        // succeed: either way the writer goes on.
        print("server crash: \(failures.withLock { $0 }) call(s) failed while it was down, \(done.count) acknowledged")
        #expect(done.count >= 40, "the writer did not go on after the restart: \(done.count) acknowledged")
        let events = try Self.checkAfterFault(url, acknowledged: done)
        #expect(events >= 1 + 2 * done.count)
    }

    /// A session's backend killed by an administrator (`pg_terminate_backend`) while writers
    /// write: the commit in flight is looked up, never sent twice, and the writers go on. No
    /// call waits for a statement whose connection closed: postgres-nio sometimes left one
    /// neither answered nor failed, and the writers stopped for the whole statement deadline
    /// (300 s, in about one run in five) before the store looked at the connection itself.
    @Test func writersGoOnWhenTheirBackendsAreTerminated() async throws {
        let url = try TestDatabase.freshURL("terminate")
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/terminate", keyProtection: .insecurePlaintext)
        let ledger = try Ledger.open(store: try TestDatabase.store(url))
        let acknowledged = Mutex<[String]>([])
        let stop = Mutex(false)
        let writers = (0..<4).map { w in
            Thread {
                var i = 0
                while !stop.withLock({ $0 }) {
                    let subject = "w\(w)-\(i)"
                    i += 1
                    if (try? ledger.execute(Self.give(subject))) != nil { acknowledged.withLock { $0.append(subject) } }
                }
            }
        }
        writers.forEach { $0.start() }
        for _ in 0..<10 {
            usleep(100_000)
            try await TestDatabase.sql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        }
        usleep(300_000)
        stop.withLock { $0 = true }
        let stopped = ContinuousClock.now
        while writers.contains(where: { !$0.isFinished }) { usleep(20_000) }
        let waited = ContinuousClock.now - stopped
        #expect(waited < .seconds(30), "a writer's call went on for \(waited) after the terminations")
        let done = acknowledged.withLock { $0 }
        #expect(done.count > 10)
        _ = try Self.checkAfterFault(url, acknowledged: done)
        // And a write after it all goes through.
        #expect(try ledger.execute(Self.give("after")).result.events.count == 2)
    }

    /// Pooled connections that take a statement and never answer it (their backends gone while
    /// they sat idle, seen after `pg_terminate_backend`): a transaction's `BEGIN` on one of
    /// them waits only the opening deadline, and the transaction runs on a new connection, long
    /// before the statement deadline (30 s here). A read opens its transaction as a locked
    /// write does, through the same session.
    @Test func aPooledConnectionThatNeverAnswersIsReplacedQuickly() throws {
        let url = try TestDatabase.freshURL("silent_pool")
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/silent-pool", keyProtection: .insecurePlaintext)
        let address = try PostgresLedgerAddress(url: url)
        let proxy = try SilencingProxy(toHost: address.host, port: address.port)
        defer { proxy.stop() }
        let proxied = url.replacingOccurrences(of: "@\(address.host):\(address.port)/", with: "@localhost:\(proxy.port)/")
        #expect(proxied != url)
        let store = try PostgresLedgerStore(url: proxied, keyStore: FileKeyStore(path: TestDatabase.keyPath(url)), lockTimeout: .seconds(1), statementTimeout: .seconds(30))
        let ledger = try Ledger.open(store: store)
        for i in 0..<3 { _ = try ledger.execute(Self.give("before\(i)")) }
        let opened = proxy.connectionCount
        proxy.silenceOpenConnections()
        let started = ContinuousClock.now
        let events = try ledger.report(for: "before1").events.count
        let waited = ContinuousClock.now - started
        print("silent pooled connections: the read went through after \(waited), on \(proxy.connectionCount - opened) new connection(s)")
        #expect(events == 2)
        #expect(waited < .seconds(20), "the read waited \(waited) on a connection that never answers")
        #expect(proxy.connectionCount > opened)
        #expect(try ledger.execute(Self.give("after")).result.events.count == 2)
        _ = try Self.checkAfterFault(url, acknowledged: ["before0", "before1", "before2", "after"])
    }

    /// A server paused with SIGSTOP (past the lock timeout): a write fails within the store's
    /// bounds instead of waiting for ever, and once the server continues, the ledger is whole
    /// and the next write goes through.
    @Test func aPausedServerFailsAWriteInBoundedTime() throws {
        let url = try TestDatabase.freshURL("paused")
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/paused", keyProtection: .insecurePlaintext)
        let store = try PostgresLedgerStore(url: url, keyStore: FileKeyStore(path: TestDatabase.keyPath(url)), lockTimeout: .seconds(1), statementTimeout: .seconds(5))
        let ledger = try Ledger.open(store: store)
        _ = try ledger.execute(Self.give("before"))
        try Self.control("pause")
        let outcome = Mutex<Result<Int, any Error>?>(nil)
        let started = ContinuousClock.now
        let writer = Thread { outcome.withLock { $0 = Result { try ledger.execute(Self.give("paused")).result.events.count } } }
        writer.start()
        // The store gives up on a silent statement 15 s after its lock timeout (and on the
        // lookup of a commit in flight as long again): the write must end while the server is
        // still paused.
        while !writer.isFinished, ContinuousClock.now - started < .seconds(45) { usleep(50_000) }
        let waited = ContinuousClock.now - started
        let endedWhilePaused = writer.isFinished
        try Self.control("resume")
        #expect(endedWhilePaused, "the write still waited after \(waited) with the server paused")
        while !writer.isFinished { usleep(50_000) }
        print("paused server: the write ended after \(waited): \(String(describing: outcome.withLock { $0 }))")
        switch outcome.withLock({ $0 })! {
        case .success(let events): #expect(events == 2)
        case .failure(let error):
            guard case ConsentError.storage(let message) = error else { Issue.record("not a storage error: \(error)"); break }
            #expect(message.contains("did not answer within 16 s") || message.contains("nothing was appended") || message.contains("cannot be asked"), "\(message)")
        }
        let acknowledged = (try? outcome.withLock({ $0 })!.get()) != nil ? ["before", "paused"] : ["before"]
        _ = try Self.checkAfterFault(url, acknowledged: acknowledged)
        #expect(try ledger.execute(Self.give("after")).result.events.count == 2)
    }
}
#endif
