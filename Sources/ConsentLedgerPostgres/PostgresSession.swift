#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO
import Synchronization

/// One connection used by one caller at a time, with blocking calls.
///
/// ``LedgerStore`` is synchronous (the file store is plain POSIX I/O), so each statement waits
/// for its `EventLoopFuture`. The futures complete on NIO's own threads, never on the caller's,
/// so waiting cannot starve them; callers in async code (``ConsentManager``) run the ledger on
/// a dispatch queue, not on the cooperative pool.
final class PostgresSession: @unchecked Sendable {
    let connection: PostgresConnection
    let address: PostgresLedgerAddress
    private let logger: Logger

    init(connection: PostgresConnection, address: PostgresLedgerAddress, logger: Logger) {
        self.connection = connection
        self.address = address
        self.logger = logger
    }

    /// Statements run so far, and whether the connection itself failed (rather than a
    /// statement, after which a ROLLBACK leaves the connection fit for reuse).
    private(set) var statements = 0
    private(set) var broken = false

    /// Runs one statement and collects its rows.
    @discardableResult
    func query(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        statements += 1
        do {
            return try connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).wait()
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

/// A few idle connections kept for reuse, so a process pays the connection set-up once.
final class PostgresConnections: Sendable {
    let address: PostgresLedgerAddress
    private let configuration: PostgresConnection.Configuration
    private let idle = Mutex<[PostgresConnection]>([])
    private let nextID = Atomic<Int>(1)
    private let logger: Logger
    private static let maxIdle = 16

    init(address: PostgresLedgerAddress) throws {
        self.address = address
        self.configuration = try address.connectionConfiguration()
        var logger = Logger(label: "consentledger.postgres")
        logger.logLevel = .critical
        self.logger = logger
    }

    deinit {
        for connection in idle.withLock({ $0 }) { Self.close(connection) }
    }

    /// Closes and waits: postgres-nio requires a connection to be closed before it is freed.
    private static func close(_ connection: PostgresConnection) {
        _ = try? connection.close().wait()
    }

    /// Runs `body` with a connection of its own. A connection whose link failed is closed; one
    /// where only a statement failed (and the transaction was rolled back) is kept for reuse.
    /// A pooled connection that the server dropped while it was idle fails on its first
    /// statement, before anything was done: `body` then runs once more on a new connection.
    func withSession<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        var retried = false
        while true {
            let pooled = popIdle()
            let connection = try pooled ?? connect()
            let session = PostgresSession(connection: connection, address: address, logger: logger)
            do {
                let result = try body(session)
                release(connection)
                return result
            } catch {
                guard session.broken || connection.isClosed else {
                    release(connection)
                    throw error
                }
                Self.close(connection)
                if pooled != nil, session.statements == 1, !retried {
                    retried = true
                    continue
                }
                throw error
            }
        }
    }

    private func popIdle() -> PostgresConnection? {
        while let connection = idle.withLock({ $0.popLast() }) {
            if !connection.isClosed { return connection }
            Self.close(connection)
        }
        return nil
    }

    private func release(_ connection: PostgresConnection) {
        guard !connection.isClosed else { return }
        let kept = idle.withLock { list -> Bool in
            guard list.count < Self.maxIdle else { return false }
            list.append(connection)
            return true
        }
        if !kept { Self.close(connection) }
    }

    /// Opens a connection. Its session never waits forever: a writer waiting more than a
    /// minute for the ledger's lock gives up (nothing was changed), and the server ends a
    /// session left idle inside a transaction for a minute (a client that hangs or whose
    /// machine vanished), which releases the lock.
    private func connect() throws -> PostgresConnection {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection.connect(
                on: PostgresConnection.defaultEventLoopGroup.any(), configuration: configuration, id: id, logger: logger
            ).wait()
        } catch {
            throw PostgresSession.ledgerError(error, address: address)
        }
        do {
            _ = try connection.query(
                "SELECT set_config('lock_timeout', '60s', false), set_config('idle_in_transaction_session_timeout', '60s', false)",
                logger: logger
            ).wait()
        } catch {
            Self.close(connection)
            throw PostgresSession.ledgerError(error, address: address)
        }
        return connection
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
