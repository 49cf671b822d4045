#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where the store's async work runs: two threads of its own, never Swift's cooperative pool.
///
/// ``LedgerStore`` is synchronous (the file store is plain POSIX I/O, and the ledger's commit
/// path is one for every storage), while postgres-nio's `PostgresClient` is async. The store's
/// calls therefore start a task on this executor and block the calling thread until it ends.
/// The calling thread is the ledger's caller: the CLI's main thread, or one of
/// `ConsentManager`'s own blocking threads, never an event loop. Because the tasks run here
/// and not on the cooperative pool, a caller that blocks a pool thread (a test, say) cannot
/// starve the very task it waits for.
final class PostgresExecutor: TaskExecutor, @unchecked Sendable {
    static let shared = PostgresExecutor(threads: 2)

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let ready = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var jobs: [UnownedJob] = []
    private var nextJob = 0

    private init(threads: Int) {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(ready, nil)
        for _ in 0..<threads {
            var thread = pthread_t()
            let started = pthread_create(&thread, nil, { context in
                Unmanaged<PostgresExecutor>.fromOpaque(context!).takeUnretainedValue().work()
            }, Unmanaged.passRetained(self).toOpaque())
            precondition(started == 0, "cannot start a thread for PostgreSQL's work (\(started))")
            pthread_detach(thread)
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        pthread_mutex_lock(mutex)
        jobs.append(job)
        pthread_cond_signal(ready)
        pthread_mutex_unlock(mutex)
    }

    private func work() -> Never {
        while true {
            pthread_mutex_lock(mutex)
            while nextJob == jobs.count { pthread_cond_wait(ready, mutex) }
            let job = jobs[nextJob]
            nextJob += 1
            if nextJob == jobs.count || nextJob > 1024 {
                jobs.removeFirst(nextJob)
                nextJob = 0
            }
            pthread_mutex_unlock(mutex)
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Runs `operation` as a task on this executor and waits for it.
    func run<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let outcome = Handoff<T>()
        Task(executorPreference: self) {
            do {
                outcome.give(.success(try await operation()))
            } catch {
                outcome.give(.failure(error))
            }
        }
        return try outcome.take()!
    }
}

/// Runs one statement on `connection` and collects its rows (and what the server said it did:
/// "INSERT 0 1", "COMMIT", …).
private func collect(_ connection: PostgresConnection, _ query: PostgresQuery, _ logger: Logger) async throws -> PostgresQueryResult {
    try await connection.query(query, logger: logger).get()
}

/// One connection leased from the store's `PostgresClient` for a transaction, used by one
/// caller at a time.
final class PostgresSession: @unchecked Sendable {
    let connection: PostgresConnection
    let address: PostgresLedgerAddress
    private let logger: Logger

    init(connection: PostgresConnection, address: PostgresLedgerAddress, logger: Logger) {
        self.connection = connection
        self.address = address
        self.logger = logger
    }

    /// Statements run so far (round trips to the server), and whether the connection itself
    /// failed (rather than a statement, after which a ROLLBACK leaves the connection fit for
    /// reuse).
    private(set) var statements = 0
    private(set) var broken = false

    /// Runs one statement and collects its rows.
    @discardableResult
    func query(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        statements += 1
        let connection = connection, logger = logger
        do {
            return try PostgresExecutor.shared.run { try await collect(connection, PostgresQuery(unsafeSQL: sql, binds: binds), logger) }
        } catch {
            if (error as? PSQLError)?.serverInfo == nil { broken = true }
            throw PostgresSession.ledgerError(error, address: address)
        }
    }

    /// Turns a postgres-nio error into a ``ConsentError`` that says what the server said.
    /// (`PSQLError`'s description hides the details on purpose; the server's message and SQL
    /// state are what a user needs, and they carry no data of the ledger.)
    static func ledgerError(_ error: any Error, address: PostgresLedgerAddress) -> ConsentError {
        if let error = error as? ConsentError { return error }
        guard let psql = error as? PSQLError else { return .storage("PostgreSQL at \(address): \(error)") }
        if let info = psql.serverInfo {
            let state = info[.sqlState] ?? "?"
            var message = info[.message] ?? "unknown server error"
            if let detail = info[.detail] { message += " (\(detail))" }
            // Serialization failure, deadlock, a unique key taken by another writer, a lock not
            // available: the transaction lost to another one and changed nothing.
            if state == "40P01" || state == "40001" || state == "23505" || state == "55P03" {
                return .conflict("PostgreSQL at \(address): another writer changed the ledger first, nothing was changed: \(message) [SQLSTATE \(state)]")
            }
            return .storage("PostgreSQL at \(address): \(message) [SQLSTATE \(state)]")
        }
        switch psql.code {
        case .connectionError:
            let cause = psql.underlying.map { "\($0)" } ?? "no answer"
            return .storage("cannot connect to PostgreSQL at \(address): \(cause)")
        case .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
            return .storage("the connection to PostgreSQL at \(address) was closed; the last change may or may not have been committed (run verify)")
        default:
            return .storage("PostgreSQL at \(address): \(psql.code)\(psql.underlying.map { ": \($0)" } ?? "")")
        }
    }
}

/// The store's connections: postgres-nio's `PostgresClient` (its pool, its keep-alives, its
/// reconnection), run on ``PostgresExecutor`` for as long as the store lives.
final class PostgresConnections: Sendable {
    let address: PostgresLedgerAddress
    private let client: PostgresClient
    private let running: Task<Void, Never>
    private let probeConfiguration: PostgresConnection.Configuration
    private let logger: Logger

    /// Connections this store opens at most; more callers at once wait for one.
    static let maximumConnections = 20

    init(address: PostgresLedgerAddress) throws {
        self.address = address
        var logger = Logger(label: "consentledger.postgres")
        logger.logLevel = .critical
        self.logger = logger
        var configuration = try address.clientConfiguration()
        configuration.options.maximumConnections = Self.maximumConnections
        // A session never waits forever: a writer waiting more than a minute for the ledger's
        // lock gives up (nothing was changed), and the server ends a session left idle inside
        // a transaction for a minute (a client that hangs or whose machine vanished), which
        // releases the lock.
        configuration.options.additionalStartupParameters = [("lock_timeout", "60s"), ("idle_in_transaction_session_timeout", "60s")]
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.probeConfiguration = try address.connectionConfiguration()
        self.running = Task(executorPreference: PostgresExecutor.shared) { await client.run() }
    }

    deinit {
        running.cancel()
    }

    /// Runs one statement on a connection of the pool, outside any transaction: the statement
    /// is its own transaction, committed when this returns.
    /// One task leases a connection, runs the statement and gives the connection back: one
    /// wait for the caller's thread, where a session costs one per statement and one for the
    /// lease.
    func autocommit(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        // Never sent twice: a commit whose connection failed may or may not have been committed.
        let client = client, logger = logger
        let outcome = Handoff<PostgresQueryResult>()
        let running = Task(executorPreference: PostgresExecutor.shared) {
            do {
                outcome.give(.success(try await client.withConnection { connection in
                    try await collect(connection, PostgresQuery(unsafeSQL: sql, binds: binds), logger)
                }))
            } catch {
                outcome.give(.failure(error))
            }
        }
        do {
            if let result = try outcome.take(waitingAtMost: Self.probeAfter) { return result }
            if let error = probe() {
                running.cancel()
                throw error
            }
            return try outcome.take(waitingAtMost: nil)!
        } catch {
            throw PostgresSession.ledgerError(error, address: address)
        }
    }

    /// Says why no connection can be made, when none can: the pool retries a failing server
    /// for a minute and then reports only that it gave up, so a lease that waits longer than
    /// ``probeAfter`` seconds tries one connection of its own, whose error names the cause
    /// (refused, a certificate, a password). Nil when that connection succeeds: the pool is
    /// merely busy, and the lease goes on waiting.
    private func probe() -> ConsentError? {
        let configuration = probeConfiguration, logger = logger
        do {
            try PostgresExecutor.shared.run {
                let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
                try? await connection.close()
            }
            return nil
        } catch {
            return PostgresSession.ledgerError(error, address: address)
        }
    }

    /// How long a lease waits before ``probe()`` checks that the server can be reached at all.
    static let probeAfter = 1.0

    /// Runs `body` with a connection of its own, leased from the pool until `body` returns. A
    /// pooled connection that the server dropped while it was idle fails on its first
    /// statement, before anything was done: `body` then runs once more on another connection.
    func withSession<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        var retried = false
        while true {
            let lease = try Lease.take(from: client, address: address, probe: probe)
            let session = PostgresSession(connection: lease.connection, address: address, logger: logger)
            defer { lease.giveBack() }
            do {
                return try body(session)
            } catch {
                guard session.broken, session.statements == 1, !retried else { throw error }
                retried = true
            }
        }
    }

    /// A connection held by a task on the executor until the synchronous caller gives it back.
    private final class Lease: @unchecked Sendable {
        let connection: PostgresConnection
        private let returned = Mutex<(done: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

        private init(connection: PostgresConnection) {
            self.connection = connection
        }

        static func take(from client: PostgresClient, address: PostgresLedgerAddress, probe: () -> ConsentError?) throws -> Lease {
            let handover = Handoff<Lease>()
            let leasing = Task(executorPreference: PostgresExecutor.shared) {
                do {
                    try await client.withConnection { connection in
                        let lease = Lease(connection: connection)
                        handover.give(.success(lease))
                        await lease.untilGivenBack()
                    }
                } catch {
                    handover.give(.failure(error))
                }
            }
            do {
                if let lease = try handover.take(waitingAtMost: PostgresConnections.probeAfter) { return lease }
                if let error = probe() {
                    leasing.cancel()
                    // A lease granted meanwhile is given back at once.
                    if let lease = try? handover.take(waitingAtMost: 0) { lease.giveBack() }
                    throw error
                }
                return try handover.take(waitingAtMost: nil)!
            } catch let error as ConsentError {
                throw error
            } catch {
                throw PostgresSession.ledgerError(error, address: address)
            }
        }

        private func untilGivenBack() async {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let done = returned.withLock { state -> Bool in
                    if state.done { return true }
                    state.waiter = waiter
                    return false
                }
                if done { waiter.resume() }
            }
        }

        func giveBack() {
            let waiter = returned.withLock { state -> CheckedContinuation<Void, Never>? in
                state.done = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}

/// A value or an error handed from a task on ``PostgresExecutor`` to the thread that waits for it.
final class Handoff<T: Sendable>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let done = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var result: Result<T, any Error>?

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(done, nil)
    }

    deinit {
        pthread_cond_destroy(done)
        pthread_mutex_destroy(mutex)
        done.deallocate()
        mutex.deallocate()
    }

    func give(_ value: Result<T, any Error>) {
        pthread_mutex_lock(mutex)
        result = value
        pthread_cond_signal(done)
        pthread_mutex_unlock(mutex)
    }

    /// The value, waiting at most `seconds` (for ever when nil); nil when none came in time.
    func take(waitingAtMost seconds: Double? = nil) throws -> T? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard let seconds else {
            while result == nil { pthread_cond_wait(done, mutex) }
            return try result!.get()
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let nanoseconds = Int(now.tv_nsec) + Int(seconds * 1e9)
        var deadline = timespec(tv_sec: now.tv_sec + nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
        while result == nil {
            if pthread_cond_timedwait(done, mutex, &deadline) == ETIMEDOUT { break }
        }
        return try result?.get()
    }
}

extension PostgresBindings {
    /// Bindings from a list of values, in order ($1, $2, …).
    init(_ values: any PostgresDynamicTypeEncodable...) {
        self.init(capacity: values.count)
        for value in values { append(value) }
    }
}

extension ByteBuffer {
    var bytes: [UInt8] { Array(readableBytesView) }
}

extension [UInt8] {
    var buffer: ByteBuffer { ByteBuffer(bytes: self) }
}
#endif
