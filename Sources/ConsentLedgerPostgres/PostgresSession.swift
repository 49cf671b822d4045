#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where the store's async work runs: one NIO event loop of its own, which also carries every
/// connection of the store's `PostgresClient`. Never Swift's cooperative pool.
///
/// ``LedgerStore`` is synchronous (the file store is plain POSIX I/O, and the ledger's commit
/// path is one for every storage), while postgres-nio's `PostgresClient` is async. The store's
/// calls therefore start a task on this executor and block the calling thread until it ends.
/// The calling thread is the ledger's caller: the CLI's main thread, or one of
/// `ConsentManager`'s own blocking threads, never this event loop.
/// - Because the tasks run here and not on the cooperative pool, a caller that blocks a pool
///   thread (a test, say) cannot starve the very task it waits for.
/// - Because they run on the event loop of the connections they use, a statement costs two
///   thread hand-overs (to the loop and back), not four: the task writes to the connection and
///   is resumed by its answer on the same thread. (Measured: with two threads of its own, a
///   durable command took 1.31 ms p50.)
/// - Nothing here blocks the loop: the tasks only await, and the rows are decoded by the
///   caller.
final class PostgresExecutor: TaskExecutor, @unchecked Sendable {
    static let shared = PostgresExecutor()

    /// The event loop, for the client and the probe connection. Never shut down: it lives as
    /// long as the process, like NIO's own singletons.
    let group: MultiThreadedEventLoopGroup
    private let loop: any EventLoop

    private init() {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        loop = group.next()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        loop.execute { job.runSynchronously(on: executor) }
    }

    /// Runs `operation` as a task on this executor and waits for it, at most `seconds`: then
    /// it throws ``PostgresConnections/NoAnswer`` (the task goes on; its result is dropped).
    /// With `on`, the statement's connection: throws ``PostgresConnections/Closed`` once that
    /// connection is closed and the statement still has no answer.
    func run<T: Sendable>(within seconds: Double, on connection: PostgresConnection? = nil, _ operation: @escaping @Sendable () async throws -> T) throws -> T {
        let outcome = Handoff<T>()
        Task(executorPreference: self) {
            do {
                outcome.give(.success(try await operation()))
            } catch {
                outcome.give(.failure(error))
            }
        }
        return try outcome.take(within: seconds, on: connection)
    }
}

extension Handoff {
    /// The value, waiting at most `seconds`, then ``PostgresConnections/NoAnswer``. With `on`,
    /// the connection the value is an answer from: when it is closed and nothing came,
    /// ``PostgresConnections/Closed``. (postgres-nio 1.33 can leave a statement whose
    /// connection the server closed, after `pg_terminate_backend`, neither answered nor failed;
    /// the socket is gone, so its answer never comes.) The handoff is abandoned either way.
    func take(within seconds: Double, on connection: PostgresConnection?) throws -> T {
        let deadline = monotonicSeconds() + seconds
        var closedSince: Double?
        while true {
            let now = monotonicSeconds()
            guard now < deadline else { break }
            if let value = try take(waitingAtMost: min(deadline - now, PostgresConnections.closedCheckInterval)) { return value }
            guard let connection, connection.isClosed else { continue }
            // A failure on its way from the closed connection is given the time to arrive.
            if let since = closedSince, monotonicSeconds() - since >= PostgresConnections.closedCheckInterval {
                if abandon() { throw PostgresConnections.Closed() }
                return try take()!
            }
            closedSince = closedSince ?? monotonicSeconds()
        }
        if abandon() { throw PostgresConnections.NoAnswer(seconds: seconds) }
        return try take()!
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
    /// How long a statement may go unanswered (``PostgresConnections/statementDeadline``).
    private let deadline: Double
    /// How long the session's opening `BEGIN` may go unanswered (see ``begin(_:)``).
    private let openingDeadline: Double

    init(connection: PostgresConnection, address: PostgresLedgerAddress, logger: Logger, deadline: Double, openingDeadline: Double? = nil) {
        self.connection = connection
        self.address = address
        self.logger = logger
        self.deadline = deadline
        self.openingDeadline = min(deadline, openingDeadline ?? deadline)
    }

    /// Statements run so far (round trips to the server), and whether the connection itself
    /// failed (rather than a statement, after which a ROLLBACK leaves the connection fit for
    /// reuse).
    private(set) var statements = 0
    private(set) var broken = false
    /// Whether the connection failed because the server left a statement unanswered.
    private(set) var silent = false

    /// Opens the session's transaction: `sql` is a `BEGIN`. As the session's first statement it
    /// waits only the opening deadline, since a server answers a `BEGIN` at once, without a lock
    /// or a disk. A connection leased from the pool whose backend was terminated while it sat
    /// idle can take a statement and never answer it (postgres-nio 1.33 hands it out, and the
    /// statement is neither answered nor failed); the session then fails as a broken
    /// connection on its first statement, which ``PostgresConnections/withSession(_:)`` runs
    /// again on another connection, instead of waiting the whole statement deadline.
    func begin(_ sql: String) throws {
        try query(sql, within: statements == 0 ? openingDeadline : deadline)
    }

    /// Runs one statement and collects its rows.
    @discardableResult
    func query(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        try query(sql, binds, within: deadline)
    }

    @discardableResult
    private func query(_ sql: String, _ binds: PostgresBindings = PostgresBindings(), within seconds: Double) throws -> PostgresQueryResult {
        statements += 1
        let connection = connection, logger = logger
        do {
            return try PostgresExecutor.shared.run(within: seconds, on: connection) { try await collect(connection, PostgresQuery(unsafeSQL: sql, binds: binds), logger) }
        } catch is PostgresConnections.Closed {
            broken = true
            throw PostgresSession.closedError(address)
        } catch let noAnswer as PostgresConnections.NoAnswer {
            // A server that stopped answering (paused, or its machine gone): the connection is
            // closed, so that the statement can no longer take effect later unseen... or has
            // already; the caller treats it as a connection that failed. (The session's lease
            // is given back once the close is done: see ``PostgresConnections/withSession(_:)``.)
            broken = true
            silent = true
            Task(executorPreference: PostgresExecutor.shared) { try? await connection.close() }
            throw noAnswer.error(address)
        } catch {
            if Self.connectionEnded(error) { broken = true }
            throw PostgresSession.ledgerError(error, address: address)
        }
    }

    /// Whether `error` ended the connection, rather than a statement: the link failed, or the
    /// server ended the session (SQLSTATE class 57P: terminated by an administrator, a crash
    /// or a shutdown; class 08: a connection exception). A statement sent on it may or may not
    /// have been carried out.
    static func connectionEnded(_ error: any Error) -> Bool {
        guard let psql = error as? PSQLError else { return false }
        guard let state = psql.serverInfo?[.sqlState] else { return true }
        return state.hasPrefix("57P") || state.hasPrefix("08")
    }

    /// A connection that closed under a statement.
    static func closedError(_ address: PostgresLedgerAddress) -> ConsentError {
        .storage("the connection to PostgreSQL at \(address) was closed; the last change may or may not have been committed (run verify)")
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
            if state == "40P01" || state == "40001" || state == "23505" {
                return .conflict("PostgreSQL at \(address): another writer changed the ledger first, nothing was changed: \(message) [SQLSTATE \(state)]")
            }
            // The ledger's lock was not free within lock_timeout: a storage error, as a held
            // lock on a folder (the store names the holder).
            if state == "55P03" {
                return .storage("PostgreSQL at \(address): the ledger's lock was not free in time (\(message)); nothing was written [SQLSTATE 55P03]")
            }
            return .storage("PostgreSQL at \(address): \(message) [SQLSTATE \(state)]")
        }
        switch psql.code {
        case .connectionError:
            let cause = psql.underlying.map { "\($0)" } ?? "no answer"
            return .storage("cannot connect to PostgreSQL at \(address): \(cause)")
        case .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
            return closedError(address)
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

    /// How long a session waits for the ledger's lock (the server's `lock_timeout`).
    let lockTimeout: Duration

    /// How long a statement may go unanswered before the store gives up on its connection:
    /// the statement timeout, and at least 15 s past any lock wait, which the server ends
    /// itself.
    let statementDeadline: Double

    /// A statement whose connection closed before it was answered, or failed.
    struct Closed: Error {}

    /// How often a statement's wait looks whether its connection is still open.
    static let closedCheckInterval = 0.5

    /// A statement the server did not answer within ``statementDeadline``.
    struct NoAnswer: Error {
        let seconds: Double
        func error(_ address: PostgresLedgerAddress) -> ConsentError {
            .storage("PostgreSQL at \(address) did not answer within \(Int(seconds)) s (paused or unreachable); the connection is closed, and the statement may or may not have been carried out")
        }
    }

    init(address: PostgresLedgerAddress, lockTimeout: Duration, statementTimeout: Duration) throws {
        self.lockTimeout = lockTimeout
        let seconds = { (d: Duration) in Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
        self.statementDeadline = max(seconds(statementTimeout), seconds(lockTimeout) + 15)
        self.address = address
        var logger = Logger(label: "consentledger.postgres")
        logger.logLevel = .critical
        self.logger = logger
        var configuration = try address.clientConfiguration()
        configuration.options.maximumConnections = Self.maximumConnections
        // A session never waits forever: a writer waiting longer than `lockTimeout` for the
        // ledger's lock gives up (nothing was changed), and the server ends a session left idle inside
        // a transaction for a minute (a client that hangs or whose machine vanished), which
        // releases the lock.
        // Read committed whatever the server's default: after taking the ledger's lock, a
        // statement must see what the previous holder committed (`append_commit` checks the head).
        configuration.options.additionalStartupParameters = [
            ("lock_timeout", "\(max(1, Int(lockTimeout.components.seconds * 1000 + lockTimeout.components.attoseconds / 1_000_000_000_000_000)))ms"),
            ("idle_in_transaction_session_timeout", "60s"), ("default_transaction_isolation", "read committed"),
        ]
        let client = PostgresClient(configuration: configuration, eventLoopGroup: PostgresExecutor.shared.group, backgroundLogger: logger)
        self.client = client
        self.probeConfiguration = try address.connectionConfiguration()
        self.running = Task(executorPreference: PostgresExecutor.shared) { await client.run() }
    }

    deinit {
        running.cancel()
    }

    /// A statement that was sent, and whose connection then failed: it may or may not have
    /// been carried out (for a statement that is its own transaction, committed).
    struct ConnectionLost: Error {
        let error: ConsentError
    }

    /// Runs one statement on a connection of the pool, outside any transaction: the statement
    /// is its own transaction, committed when this returns. One task leases the connection,
    /// runs the statement and gives the connection back, so the caller's thread waits once
    /// for the lease and once for the answer. Never sent twice: throws ``ConnectionLost`` when
    /// the connection failed after the statement was sent.
    func autocommit(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        let client = client, logger = logger
        let leased = Handoff<PostgresConnection>()
        let answer = Handoff<PostgresQueryResult>()
        let running = Task(executorPreference: PostgresExecutor.shared) {
            do {
                try await client.withConnection { connection in
                    // A caller that gave up waiting for the lease (the server cannot be reached)
                    // sends nothing.
                    guard leased.give(.success(connection)) else { return }
                    // An answer the caller no longer takes: it gave up on the connection and
                    // closes it, which goes back to the pool only once closed (see
                    // ``withSession(_:)``).
                    let result: Result<PostgresQueryResult, any Error>
                    do {
                        result = .success(try await collect(connection, PostgresQuery(unsafeSQL: sql, binds: binds), logger))
                    } catch {
                        result = .failure(error)
                    }
                    if !answer.give(result) { try? await connection.closeFuture.get() }
                }
            } catch {
                leased.give(.failure(error))
            }
        }
        let connection = try waitForLease(leased, cancelling: running)
        do {
            return try answer.take(within: statementDeadline, on: connection)
        } catch is Closed {
            throw ConnectionLost(error: PostgresSession.closedError(address))
        } catch let noAnswer as NoAnswer {
            // Closed, so that the statement cannot take effect later unseen (or the lookup
            // of the commit in flight, which waits for the ledger's lock, sees it).
            Task(executorPreference: PostgresExecutor.shared) { try? await connection.close() }
            throw ConnectionLost(error: noAnswer.error(address))
        } catch let lost as ConnectionLost {
            throw lost
        } catch where PostgresSession.connectionEnded(error) {
            throw ConnectionLost(error: PostgresSession.ledgerError(error, address: address))
        } catch {
            throw PostgresSession.ledgerError(error, address: address)
        }
    }

    /// Waits for a lease of the pool. The pool retries a server it cannot reach for a minute
    /// and then says only that it gave up; so a lease that waits longer than ``probeAfter``
    /// seconds, when no lease was granted for a while, tries one connection of its own, whose
    /// error names the cause (refused, a certificate, a password), and gives up with that
    /// error. When that connection succeeds, the pool is merely busy, and the wait goes on.
    @discardableResult
    private func waitForLease<T: Sendable>(_ leased: Handoff<T>, cancelling task: Task<Void, Never>) throws -> T {
        do {
            if let lease = try leased.take(waitingAtMost: Self.probeAfter) {
                lastLease.withLock { $0 = monotonicSeconds() }
                return lease
            }
            if monotonicSeconds() - lastLease.withLock({ $0 }) > Self.probeUnlessLeasedWithin, let error = probe() {
                // A lease granted meanwhile is refused (its task sends nothing and returns the
                // connection); one granted before is already in the handoff, and given back.
                if leased.abandon() {
                    task.cancel()
                    throw error
                }
            }
            let lease = try leased.take()!
            lastLease.withLock { $0 = monotonicSeconds() }
            return lease
        } catch let error as ConsentError {
            throw error
        } catch {
            throw PostgresSession.ledgerError(error, address: address)
        }
    }

    /// When a lease was last granted (monotonic seconds).
    private let lastLease = Mutex<Double>(-1e9)

    /// How long a lease waits before ``probe()`` checks that the server can be reached at all,
    /// and how recent a granted lease makes that check needless.
    static let probeAfter = 1.0
    static let probeUnlessLeasedWithin = 5.0

    /// One connection of its own: nil when it can be made, else why not.
    private func probe() -> ConsentError? {
        let configuration = probeConfiguration, logger = logger
        do {
            // A server that accepts the connection and then says nothing (paused) is an answer too.
            try PostgresExecutor.shared.run(within: statementDeadline) {
                let connection = try await PostgresConnection.connect(on: PostgresExecutor.shared.group.next(), configuration: configuration, id: 0, logger: logger)
                try? await connection.close()
            }
            return nil
        } catch let silent as NoAnswer {
            return silent.error(address)
        } catch {
            return PostgresSession.ledgerError(error, address: address)
        }
    }

    /// Runs `body` with a connection of its own, leased from the pool until `body` returns. A
    /// pooled connection that the server dropped while it was idle fails on its first
    /// statement (`BEGIN`), before anything was done, with an error or with no answer within
    /// ``openingDeadline``: `body` then runs again on another connection, at most
    /// ``sessionAttempts`` times in all. The last attempt's `BEGIN` waits the whole statement
    /// deadline, so that a server that is merely slow still gets it.
    func withSession<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        var attempt = 1
        while true {
            let lease = try Lease.take(from: client, waiting: waitForLease)
            let session = PostgresSession(connection: lease.connection, address: address, logger: logger, deadline: statementDeadline,
                                          openingDeadline: attempt < Self.sessionAttempts ? Self.openingDeadline : nil)
            // A connection closed because it did not answer is given back only once it is
            // closed, which over TLS waits for the server's close_notify (or NIOSSL's timeout):
            // until then the pool would lease it again, and the next attempt would fail on it.
            defer { session.silent ? lease.giveBack(once: lease.connection.closeFuture) : lease.giveBack() }
            do {
                return try body(session)
            } catch {
                guard session.broken, session.statements == 1, attempt < Self.sessionAttempts else { throw error }
                attempt += 1
            }
        }
    }

    /// How many connections a session tries when each fails on its first statement (several
    /// pooled connections can have lost their backends at once).
    static let sessionAttempts = 3
    /// How long a session's opening `BEGIN` waits for an answer, but on its last attempt.
    static let openingDeadline = 5.0

    /// A connection held by a task on the executor until the synchronous caller gives it back.
    private final class Lease: @unchecked Sendable {
        let connection: PostgresConnection
        private let returned = Mutex<(done: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

        private init(connection: PostgresConnection) {
            self.connection = connection
        }

        static func take(from client: PostgresClient, waiting: (Handoff<Lease>, Task<Void, Never>) throws -> Lease) throws -> Lease {
            let handover = Handoff<Lease>()
            let leasing = Task(executorPreference: PostgresExecutor.shared) {
                do {
                    try await client.withConnection { connection in
                        let lease = Lease(connection: connection)
                        // Refused when the caller gave up waiting: the connection goes back.
                        guard handover.give(.success(lease)) else { return }
                        await lease.untilGivenBack()
                    }
                } catch {
                    handover.give(.failure(error))
                }
            }
            return try waiting(handover, leasing)
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

        /// Gives the connection back once `event` (its close) happened.
        func giveBack(once event: EventLoopFuture<Void>) {
            event.whenComplete { _ in self.giveBack() }
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

/// A value or an error handed from a task on ``PostgresExecutor`` to the thread that waits for
/// it, once. The waiting thread may abandon it: a value given after that is refused, so that
/// its giver can undo it (give a leased connection back).
final class Handoff<T: Sendable>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let done = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var result: Result<T, any Error>?
    private var abandoned = false

    init() {
        pthread_mutex_init(mutex, nil)
        // Timed waits count on the monotonic clock: a step of the wall clock neither cuts a
        // wait short nor stretches it.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(done, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(done)
        pthread_mutex_destroy(mutex)
        done.deallocate()
        mutex.deallocate()
    }

    /// Gives the value; false when the waiting thread abandoned it.
    @discardableResult
    func give(_ value: Result<T, any Error>) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !abandoned else { return false }
        result = value
        pthread_cond_signal(done)
        return true
    }

    /// Stops waiting: true when nothing was given yet (and nothing will be accepted now).
    func abandon() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard result == nil else { return false }
        abandoned = true
        return true
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
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nanoseconds = Int(now.tv_nsec) + Int(seconds * 1e9)
        var deadline = timespec(tv_sec: now.tv_sec + nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
        while result == nil {
            if pthread_cond_timedwait(done, mutex, &deadline) == ETIMEDOUT { break }
        }
        return try result?.get()
    }
}

/// Seconds on the monotonic clock.
func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
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
