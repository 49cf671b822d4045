#if PostgreSQL
import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A ledger in a PostgreSQL schema: entries, derived data and head kept as rows by sequence
/// number (see ``PostgresSchema``). Nothing here imitates a file: no byte offsets, no torn tails,
/// no syncs; a commit is durable when its transaction commits, and invisible before.
///
/// **One linear chain across processes.** A write runs in one transaction that first takes a
/// transaction-level advisory lock on the ledger (`pg_advisory_xact_lock`), then reads the head,
/// appends, writes the derived data and the new head, and commits. Writers on any number of
/// processes or machines queue on the lock, so each one extends the head the previous one
/// committed: no gaps, no forks, no duplicate sequence numbers (and the `events` primary key
/// would refuse a duplicate even if the lock were bypassed). The lock ends with the
/// transaction, so a writer that dies releases it at once; one that hangs loses it when the
/// server ends its idle transaction (see ``PostgresConnections``).
///
/// Why a lock rather than optimistic concurrency on the head (expected seq and hash, retry on
/// conflict): a command is decided against the subject's current state and then signed, so a
/// writer that lost a race would have to re-read, re-decide and re-sign; under contention most
/// of that work is thrown away and a busy writer can starve. With the lock, nobody computes on
/// a stale head, the wait is one short transaction per writer ahead, and the lock covers the
/// derived data and subject salts as well as the head.
///
/// **Acknowledged after commit.** ``write(_:)`` commits when its body returns; the ledger
/// reports a command as done only after that. A failed statement or commit rolls the
/// whole command back. Readers use a `REPEATABLE READ READ ONLY` transaction: one snapshot,
/// never blocking or blocked by writers.
///
/// **Round trips.** A locked write is `BEGIN`, one call of `head_state` (the lock, the head,
/// the newest entry and the derived tables' sizes), whatever rows the ledger reads that this
/// store has not read before, one call of `append_commit`, and `COMMIT`. A writer that
/// committed last (``writeOptimistically(_:)``) remembers the head, the newest entry and the
/// rows it read, all of which that head commits to; its next command is one call of
/// `append_commit`, in a transaction of its own, which first checks under the lock that the
/// head is still the remembered one. When another writer moved it, nothing is written and the
/// ledger writes again with ``write(_:)``. Remembered rows are as good as rows read now: the
/// log's rows never change, derived rows change only with the head, and the ledger checks
/// whatever it reads against the signed head either way.
///
/// **Connections.** postgres-nio's `PostgresClient` keeps the connections (at most
/// ``maximumConnections``). ``LedgerStore`` is synchronous, so each statement runs as a task
/// on threads of the store's own and the caller's thread waits for it (see
/// `PostgresExecutor`); nothing waits on an `EventLoopFuture`.
public final class PostgresLedgerStore: LedgerStore {
    /// Where the ledger lives.
    public let address: PostgresLedgerAddress
    let connections: PostgresConnections
    private let schemaReady = Mutex(false)

    /// What this process's last commit, or its last locked write, left: see ``WarmState``.
    let warm = Mutex<WarmState?>(nil)

    /// The catalogue and public key, as created: the row never changes.
    let createdWith = Mutex<(catalog: [UInt8], publicKey: PublicKey)?>(nil)

    /// Statements sent to the server by this store (round trips), for tests and the bench.
    public var statementsSent: Int { sent.load(ordering: .relaxed) }
    let sent = Atomic<Int>(0)

    /// Connections a store opens at most; more callers at once wait for one.
    public static var maximumConnections: Int { PostgresConnections.maximumConnections }

    /// Where this process's writers find the signing key; the database never holds it.
    private let writerKeys: (any KeyStore)?

    /// A store at `address`. `keyStore` is where writers find the signing key (a key file,
    /// `FileKeyStore`, or a key store of your own, such as one backed by a KMS); without it the
    /// ledger can be read and verified, and writes fail with `ConsentError.notFound(.signingKey, _)`.
    ///
    /// A write waits at most `lockTimeout` for the ledger's lock (another process's write),
    /// then fails with `ConsentError.storage` naming the session that holds it; a statement the
    /// server leaves unanswered longer than `statementTimeout` (a paused or vanished server)
    /// fails too, its connection closed.
    /// `statementTimeout` bounds how long any one statement may go unanswered (at least 15 s
    /// past `lockTimeout`): long enough for the longest legitimate one (a VACUUM FULL after an
    /// erasure, a commit of many rows).
    public init(address: PostgresLedgerAddress, keyStore: (any KeyStore)? = nil, lockTimeout: Duration = PostgresLedgerStore.defaultLockTimeout, statementTimeout: Duration = PostgresLedgerStore.defaultStatementTimeout) throws {
        self.address = address
        self.writerKeys = keyStore
        self.connections = try PostgresConnections(address: address, lockTimeout: lockTimeout, statementTimeout: statementTimeout)
    }

    /// A minute: a commit of many commands (`apply` commits 256 at a time) holds the lock for a
    /// while on a busy server.
    public static let defaultLockTimeout: Duration = .seconds(60)

    /// Five minutes: no statement of the store takes that long on a server that answers.
    public static let defaultStatementTimeout: Duration = .seconds(300)

    /// A store for a `postgres://` URL (see ``PostgresLedgerAddress``).
    public convenience init(url: String, keyStore: (any KeyStore)? = nil, lockTimeout: Duration = PostgresLedgerStore.defaultLockTimeout, statementTimeout: Duration = PostgresLedgerStore.defaultStatementTimeout) throws {
        try self.init(address: PostgresLedgerAddress(url: url), keyStore: keyStore, lockTimeout: lockTimeout, statementTimeout: statementTimeout)
    }

    public var names: StorageNames {
        StorageNames(
            location: address.description,
            derivedRepair: "rebuild it: DELETE FROM \(address.schema).line_index, \(address.schema).tree_hashes and \(address.schema).subject_map, and the next write recomputes them from the events table",
            checkpoints: "table \(address.schema).checkpoints", subjects: "table \(address.schema).subjects")
    }

    /// The key store given at ``init(address:keyStore:)``: the secret key never lives in the
    /// database, where every writer would load it over the network.
    public var keyStore: (any KeyStore)? { writerKeys }

    /// The seed that a ledger made before keys left the database still keeps in the table
    /// `signing_key`, if any: to be moved into a key file (`consentctl key move-out`) and then
    /// dropped with ``dropRetiredKey()``.
    public func retiredSeed() throws -> SecretBytes? {
        try inTransaction(exclusive: false) { session in
            let exists = try session.query("SELECT to_regclass($1) IS NOT NULL", PostgresBindings(s + ".signing_key"))
            guard let row = exists.first, try row.decode(Bool.self) else { return nil }
            guard let seedRow = try session.query("SELECT seed FROM \(s).signing_key").first else { return nil }
            var seed = try seedRow.decode(ByteBuffer.self).bytes
            defer { zeroize(&seed) }
            return SecretBytes(copying: seed)
        }
    }

    /// Drops the table `signing_key` once its seed is safe in a key file.
    public func dropRetiredKey() throws {
        try inTransaction(exclusive: true) { session in
            try session.query("DROP TABLE IF EXISTS \(s).signing_key")
        }
    }

    /// The schema as SQL text (quoted).
    var s: String { PostgresSchema.quoted(address.schema) }

    var lockName: String { "consentledger:" + address.schema }

    // MARK: - Sessions and transactions

    /// Checks once per store that the schema exists and is current, migrating it if it is older.
    private func ensureSchema(_ session: PostgresSession) throws {
        if schemaReady.withLock({ $0 }) { return }
        guard let version = try PostgresSchema.version(session, schema: address.schema) else {
            throw ConsentError.notFound(.ledger, "no ledger at \(address) (run 'consentctl init --store \(address)' to create one)")
        }
        if version != PostgresSchema.latestVersion {
            try transaction(session, exclusive: true, lockFirst: true) { try PostgresSchema.migrate(session, schema: address.schema, create: false) }
        }
        schemaReady.withLock { $0 = true }
    }

    private func transaction<T>(_ session: PostgresSession, exclusive: Bool, lockFirst: Bool, _ body: () throws -> T) throws -> T {
        try session.begin(exclusive ? "BEGIN ISOLATION LEVEL READ COMMITTED" : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            if exclusive, lockFirst { try session.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", PostgresBindings(lockName)) }
            let result = try body()
            let commit = try session.query("COMMIT")
            // COMMIT of a transaction in which a statement failed answers ROLLBACK, not an error.
            guard commit.metadata.command == "COMMIT" else {
                throw ConsentError.storage("PostgreSQL at \(address) rolled the transaction back; nothing was changed")
            }
            return result
        } catch {
            _ = try? session.query("ROLLBACK")
            throw error
        }
    }

    /// Runs `body` in a transaction of its own session. Without `lockFirst`, an exclusive
    /// transaction leaves the lock to its first statement (a ``PostgresLedgerTransaction``
    /// takes it with the head, in one round trip).
    func inTransaction<T>(exclusive: Bool, lockFirst: Bool = true, _ body: (PostgresSession) throws -> T) throws -> T {
        try connections.withSession { session in
            defer { sent.add(session.statements, ordering: .relaxed) }
            try ensureSchema(session)
            return try transaction(session, exclusive: exclusive, lockFirst: lockFirst) { try body(session) }
        }
    }

    public func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T {
        try inTransaction(exclusive: false) { session in try body(PostgresLedgerTransaction(store: self, session: session, locking: false)) }
    }

    public func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        try namingLockHolder { try lockedWrite(body) }
    }

    /// A lock wait the server ended (`lock_timeout`, SQLSTATE 55P03) is reported with the
    /// session that holds the ledger's lock, as `pg_locks` and `pg_stat_activity` show it.
    private func namingLockHolder<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch ConsentError.storage(let message) where message.hasSuffix("[SQLSTATE 55P03]") {
            let holders = (try? connections.autocommit("""
                SELECT a.pid::text, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'a local socket'), coalesce(a.xact_start::text, '')
                FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid, (SELECT hashtextextended($1, 0) AS key) k
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
                """, PostgresBindings(lockName)).map { row -> String in
                    let (pid, application, client, since) = try row.decode((String, String, String, String).self)
                    return "session \(pid)" + (application.isEmpty ? "" : " ('\(Terminal.escaped(application))')") + " from \(client), in its transaction since \(since)"
                }) ?? []
            let seconds = connections.lockTimeout.components.seconds
            throw ConsentError.storage("the ledger at \(address) is locked by \(holders.isEmpty ? "another session" : holders.joined(separator: " and ")), and stayed locked for \(seconds) s; nothing was written: try again once it is done, or wait longer (consentctl --lock-timeout SECONDS)")
        }
    }

    private func lockedWrite<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        var transaction: PostgresLedgerTransaction?
        var produced: T?
        let result: T
        warm.withLock { $0 = nil }
        do {
            result = try inTransaction(exclusive: true, lockFirst: false) { session in
                let opened = PostgresLedgerTransaction(store: self, session: session, locking: true)
                transaction = opened
                let value = try body(opened)
                produced = value
                return value
            }
        } catch {
            // Whatever failed may have left the head elsewhere: read it again next time.
            warm.withLock { $0 = nil }
            // A COMMIT whose connection failed may have been committed: find out, so that the
            // caller neither reports a write that happened as failed nor writes it again.
            guard let transaction, let sent = transaction.sentCommit, transaction.connectionFailed, let produced else { throw error }
            try resolveLost(sent, error: error)
            return produced
        }
        remember(transaction?.takeKnown())
        if let transaction, transaction.erased { try purgeErasedRows(deletedBy: transaction.erasedBy) }
        return result
    }

    public var writesOptimistically: Bool { true }

    public func writeOptimistically<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        try namingLockHolder { try optimisticWrite(body) }
    }

    private func optimisticWrite<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        // After a commit refused because another writer moved the head, the next few writes take
        // the lock at once: where other processes write all the time, a remembered head is
        // almost never the current one, and each refused commit is a signature and a round trip
        // thrown away.
        let contended = lockedWritesLeft.withLock { left -> Bool in
            guard left > 0 else { return false }
            left -= 1
            return true
        }
        // Taken out while the write runs, so that the rows it adds go into the same dictionaries
        // rather than into copies of them (a copy would cost every remembered row per command).
        let remembered = contended ? nil : warm.withLock { state -> WarmState? in
            defer { state = nil }
            return state
        }
        guard let remembered else { return try write(body) }
        try ensureSchemaOutsideTransaction()
        let transaction = PostgresLedgerTransaction(store: self, remembered: remembered)
        let result: T
        do {
            result = try body(transaction)
            // A write that appended nothing (every command refused, or nothing to do) was decided
            // on the remembered state as well: it stands only if the head is still that one.
            if !transaction.committed { try transaction.checkHeadUnmoved() }
        } catch {
            // The head moved, or a row changed under the reader: forget it all. (A command the
            // rules refuse is not thrown; its group commits or writes nothing and returns.)
            warm.withLock { $0 = nil }
            if case .conflict? = error as? ConsentError { lockedWritesLeft.withLock { $0 = Self.lockedWritesAfterConflict } }
            throw error
        }
        remember(transaction.takeKnown())
        if transaction.erased { try purgeErasedRows(deletedBy: transaction.erasedBy) }
        return result
    }

    /// Keeps what a write knew, unless a write of another thread has meanwhile left a newer head.
    private func remember(_ known: WarmState?) {
        guard let known else { return }
        warm.withLock { current in
            if let current, current.state.size > known.state.size { return }
            current = known
        }
    }

    /// After the connection failed while a commit was sent: whether the commit is in the log,
    /// read on another connection. Returns if it is; throws a storage error saying which if it
    /// is not, or that it cannot tell.
    func resolveLost(_ commit: LedgerCommit, error: any Error) throws {
        guard let last = commit.entries.last else { throw error }
        let seq = commit.firstSeq + commit.entries.count - 1
        var found: [UInt8]?
        var attempt = 0
        while true {
            var silent = false
            do {
                // Under the ledger's lock, which the commit in flight held for its whole
                // transaction: once the lock is ours, that transaction has ended, committed or
                // not, and a statement after it sees which (read committed: each statement
                // takes its own snapshot). A backend still at work (the client gave up on a
                // silent server) keeps the lock, and the lookup waits for it, at most the lock
                // timeout.
                found = try connections.withSession { session in
                    do {
                        try session.begin("BEGIN ISOLATION LEVEL READ COMMITTED")
                        try session.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", PostgresBindings(lockName))
                        let line = try session.query("SELECT line FROM \(s).events WHERE seq = $1", PostgresBindings(Int64(seq))).first.map { try $0.decode(ByteBuffer.self).bytes }
                        _ = try? session.query("ROLLBACK")
                        return line
                    } catch {
                        silent = session.silent
                        if session.broken { throw PostgresConnections.ConnectionLost(error: PostgresSession.ledgerError(error, address: address)) }
                        _ = try? session.query("ROLLBACK")
                        throw error
                    }
                }
                break
            } catch {
                // What ended one connection (a restart, an administrator) may have ended the
                // pool's others: the lookup is made again, on a new one. Not after a server
                // that did not answer: each try would wait as long again.
                attempt += 1
                if error is PostgresConnections.ConnectionLost, !silent, attempt <= PostgresConnections.maximumConnections { continue }
                let cause = (error as? PostgresConnections.ConnectionLost)?.error ?? error
                throw ConsentError.storage("the connection to PostgreSQL at \(address) failed while a commit was sent, and the server cannot be asked whether it was committed (\(cause)): run verify and look for the command before sending it again")
            }
        }
        // Our entry is ours alone: signed, with this command's time and the head it followed.
        guard found == last else {
            throw ConsentError.storage("the connection to PostgreSQL at \(address) failed before the commit was made; nothing was appended")
        }
    }
    /// Writes that take the lock at once before the next optimistic one (see
    /// ``writeOptimistically(_:)``).
    private let lockedWritesLeft = Mutex(0)
    static let lockedWritesAfterConflict = 16

    /// Checks the schema once per store, in a transaction of its own.
    private func ensureSchemaOutsideTransaction() throws {
        if schemaReady.withLock({ $0 }) { return }
        try connections.withSession { session in try ensureSchema(session) }
    }

    /// Rewrites the subjects table and its index (VACUUM FULL), so that no dead row version of an
    /// erased subject's record stays in the table's files. VACUUM keeps a dead row that a
    /// transaction open since before the deletion may still see, so it first waits (at most
    /// ``purgeWait`` seconds) until no such transaction is open in the database. What WAL and
    /// backups still hold is the operator's to expire (Spec/erasure.md).
    func purgeErasedRows(deletedBy xid: String?) throws {
        do {
            try connections.withSession { session in
                if let xid {
                    var waited = 0
                    while try session.query(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND age(backend_xmin) >= age($1::xid)",
                        PostgresBindings(xid)
                    ).first?.decode(Int64.self) ?? 0 > 0 {
                        guard waited < Self.purgeWait * 10 else {
                            throw ConsentError.storage("a transaction open since before the erasure can still see the deleted record, so VACUUM would keep it; it was waited for \(Self.purgeWait) seconds")
                        }
                        usleep(100_000)
                        waited += 1
                    }
                }
                try session.query("VACUUM (FULL) \(s).subjects")
            }
        } catch {
            throw ConsentError.storage("the erasure is recorded and the record deleted at \(address), but its dead row was not purged (\(error)): run VACUUM (FULL) \(s).subjects once the older transactions have ended")
        }
    }

    /// How long an erasure waits for older transactions before purging.
    static let purgeWait = 30

    // MARK: - Creating

    public func create(_ setup: LedgerSetup) throws {
        try connections.withSession { session in
            try transaction(session, exclusive: true, lockFirst: true) {
                try PostgresSchema.migrate(session, schema: address.schema, create: true)
                guard try session.query("SELECT 1 FROM \(s).ledger").count == 0 else {
                    throw ConsentError.alreadyExists("a ledger already exists at \(address)")
                }
                try session.query("INSERT INTO \(s).ledger (catalog, public_key) VALUES ($1, $2)", PostgresBindings(setup.catalog.buffer, setup.publicKey.bytes.buffer))
                let transaction = PostgresLedgerTransaction(store: self, session: session, locking: false)
                try transaction.insertEntries([setup.genesis.lineWithoutNewline], from: 0)
                try transaction.writeDerived(setup.derived)
                try transaction.writeHead(setup.head)
            }
        }
        schemaReady.withLock { $0 = true }
    }
}

/// What a store knows of the ledger after its own last commit or locked write: the head, the
/// newest entry, the derived tables' sizes and rows it read since, all as of that head. Good
/// for as long as the head is that one (``PostgresLedgerStore/writeOptimistically(_:)`` checks
/// it under the lock when it commits).
struct WarmState: Sendable {
    var state: LogState
    var counts: DerivedCounts
    /// Rows as of `state`'s head. Entries never change; derived rows change only in a commit,
    /// which moves the head.
    var entries: [Int: [UInt8]] = [:]
    var mapRecords: [Int64: [UInt8]] = [:]
    var treeHashes: [Int64: Digest] = [:]

    /// Bounds on the rows kept, so that a long-running writer's memory stays flat.
    static let rowsKept = 200_000

    mutating func trim() {
        if entries.count > Self.rowsKept { entries = [:] }
        if mapRecords.count > Self.rowsKept { mapRecords = [:] }
        if treeHashes.count > Self.rowsKept { treeHashes = [:] }
    }

    /// After a commit of this store's: the new head, newest entry and sizes, and the rows it
    /// wrote.
    mutating func apply(_ commit: LedgerCommit) {
        for (i, entry) in commit.entries.enumerated() { entries[commit.firstSeq + i] = entry }
        if let head = commit.head, let line = commit.entries.last {
            // The ledger made the line; if it could not be read back, the next write reads the
            // head again (by way of a conflict).
            let last = (try? EventCodec.decode(line: line)) ?? state.last
            state = LogState(size: commit.firstSeq + commit.entries.count, last: last, head: .signed(head), torn: nil)
        } else if let head = commit.head {
            state = LogState(size: state.size, last: state.last, head: .signed(head), torn: nil)
        }
        var mapCount = counts.subjectMapRecords
        if let map = commit.derived.subjectMap {
            // Rows from `at` on are replaced; a commit normally only appends, after them all.
            if map.at < counts.subjectMapRecords { mapRecords = mapRecords.filter { $0.key < map.at } }
            for i in 0..<map.records.count { mapRecords[map.at + Int64(i)] = map.records[i] }
            mapCount = map.at + Int64(map.records.count)
        }
        if commit.derived.treeFrom < counts.treeHashes { treeHashes = treeHashes.filter { $0.key < commit.derived.treeFrom } }
        for (i, hash) in commit.derived.treeHashes.enumerated() { treeHashes[commit.derived.treeFrom + Int64(i)] = hash }
        counts = DerivedCounts(
            indexed: commit.derived.indexFrom + commit.derived.streamKeys.count,
            treeHashes: commit.derived.treeFrom + Int64(commit.derived.treeHashes.count),
            subjectMapRecords: mapCount)
        trim()
    }
}

/// A transaction on a PostgreSQL ledger, one of three kinds:
/// - a reader's: one session and one snapshot;
/// - a locked writer's: one session holding the ledger's advisory lock, taken with the head in
///   its first statement;
/// - an optimistic writer's: no session; it starts from what the store remembers (``WarmState``),
///   reads any row it lacks in a statement of its own, and commits in one statement that
///   checks the head under the lock.
final class PostgresLedgerTransaction: LedgerWriteTransaction {
    let store: PostgresLedgerStore
    private let session: PostgresSession?
    /// Whether this transaction's first statement takes the lock (a locked writer's).
    private let locking: Bool
    /// What is known of the ledger as of the head this transaction works on; rows read are
    /// added to it.
    private(set) var known: WarmState?
    /// The head this transaction's commit expects (an optimistic writer's), and the derived
    /// tables' sizes with it.
    private var expected: ChainHead?
    private(set) var committed = false
    /// The last commit sent to the server, for finding out whether it was made when the
    /// connection failed.
    private(set) var sentCommit: LedgerCommit?
    /// What the transaction knew, handed to the store: the transaction forgets it, so that
    /// the store's copy is the only one and the next write adds to it in place. (The ledger may
    /// keep a reader that names this transaction, in its remembered subject map.)
    func takeKnown() -> WarmState? {
        defer { known = nil }
        return known
    }

    /// Whether the session's connection failed (rather than a statement).
    var connectionFailed: Bool { session?.broken ?? false }

    init(store: PostgresLedgerStore, session: PostgresSession, locking: Bool) {
        self.store = store
        self.session = session
        self.locking = locking
        self.known = nil
        self.expected = nil
    }

    init(store: PostgresLedgerStore, remembered: WarmState) {
        self.store = store
        self.session = nil
        self.locking = false
        self.known = remembered
        self.expected = remembered.state.recordedHead
    }

    private var s: String { store.s }
    private var address: PostgresLedgerAddress { store.address }

    /// Runs one statement: in the session, or for an optimistic writer, on its own.
    @discardableResult
    private func query(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) throws -> PostgresQueryResult {
        do {
            return try queryNoticingLoss(sql, binds)
        } catch let lost as PostgresConnections.ConnectionLost {
            throw lost.error
        }
    }

    /// A statement, throwing `ConnectionLost` when an optimistic writer's connection failed
    /// after the statement was sent.
    private func queryNoticingLoss(_ sql: String, _ binds: PostgresBindings) throws -> PostgresQueryResult {
        if let session { return try session.query(sql, binds) }
        store.sent.add(1, ordering: .relaxed)
        return try store.connections.autocommit(sql, binds)
    }

    /// For an optimistic writer whose body appended nothing: its decisions stand only if the
    /// head is still the one it decided on.
    func checkHeadUnmoved() throws {
        guard let expected else { return }
        let rows = try query("SELECT count(*) FROM \(s).head WHERE seq = $1 AND hash = $2", PostgresBindings(Int64(expected.seq), expected.hash.bytes.buffer))
        guard let row = rows.first, try row.decode(Int64.self) == 1 else {
            throw ConsentError.conflict("another writer changed the ledger at \(address) since this process last wrote; nothing was changed")
        }
    }

    private func integrity(_ problem: String, seq: Int? = nil, kind: IntegrityKind = .log) -> ConsentError {
        .integrity(IntegrityFailure(kind, line: seq.map { $0 + 1 }, seq: seq.map { UInt64($0) }, problem: "\(address): \(problem)"))
    }

    func metadata() throws -> (catalog: [UInt8], publicKey: PublicKey) {
        if let created = store.createdWith.withLock({ $0 }) { return created }
        try lockIfWriter()
        guard let row = try query("SELECT catalog, public_key FROM \(s).ledger").first else {
            throw integrity("the catalogue and public key (table ledger) are missing", kind: .ledgerFiles)
        }
        let (catalog, key) = try row.decode((ByteBuffer, ByteBuffer).self)
        guard let publicKey = PublicKey(bytes: key.bytes) else { throw integrity("the public key is not 32 bytes", kind: .ledgerFiles) }
        let created = (catalog.bytes, publicKey)
        store.createdWith.withLock { $0 = created }
        return created
    }

    /// A locked writer takes the lock in its first statement, before reading anything.
    private func lockIfWriter() throws {
        if locking, known == nil { _ = try logState() }
    }

    /// The head, the newest entry and the derived tables' sizes, in one statement that first
    /// takes the lock (a writer's).
    func logState() throws -> LogState {
        if let known { return known.state }
        var binds = PostgresBindings(capacity: 1)
        if locking { binds.append(store.lockName) } else { binds.appendNull() }
        let rows = try query("SELECT * FROM \(s).head_state($1::text)", binds)
        guard let row = rows.first else { throw integrity("the head row is missing", kind: .head) }
        let (headSeq, headHash, note, lastSeq, lastLine, indexed, hashes, map) = try row.decode((Int64?, ByteBuffer?, String?, Int64?, ByteBuffer?, Int64, Int64, Int64).self)
        guard let headSeq, let headHash else { throw integrity("the head row is missing", kind: .head) }
        guard headSeq >= 0, let hash = Digest(bytes: headHash.bytes) else {
            throw integrity("the head row is not a sequence number and a 32-byte hash", kind: .head)
        }
        // The note is the head; seq and hash are kept beside it for SQL and must agree.
        var recorded = RecordedHead.unsigned(ChainHead(seq: UInt64(headSeq), hash: hash))
        if let note {
            guard case .signed(let signed)? = RecordedHead.parse(note), signed.chainHead == recorded.chainHead else {
                throw integrity("the head row's note is not a signed head of seq \(headSeq)", kind: .head)
            }
            recorded = .signed(signed)
        }
        guard let seq = lastSeq, let line = lastLine else {
            throw integrity("the log is empty: the genesis event is missing", seq: 0)
        }
        guard seq >= 0 else { throw integrity("the newest row of the log has a negative seq") }
        let record: EventRecord
        do {
            record = try EventCodec.decode(line: line.bytes)
        } catch {
            throw integrity("malformed event: \(error.problem)", seq: Int(seq))
        }
        let head = recorded.chainHead
        guard record.event.seq >= head.seq else {
            throw integrity("the log ends at seq \(record.event.seq) but seq \(head.seq) was acknowledged: acknowledged events are missing", seq: Int(seq), kind: .head)
        }
        guard indexed >= 0, hashes >= 0, map >= 0, indexed < Int64(Int32.max) * 1024 else {
            throw integrity("a derived table holds a negative or impossible index", kind: .derivedData)
        }
        let found = LogState(size: Int(seq) + 1, last: record, head: recorded, torn: nil)
        known = WarmState(state: found, counts: DerivedCounts(indexed: Int(indexed), treeHashes: hashes, subjectMapRecords: map))
        return found
    }

    func entries(_ range: Range<Int>, batchSize: Int, indexedKeys: Bool, _ visit: (EntryBatch) throws -> Void) throws {
        try lockIfWriter()
        // One remembered entry (a stream's event, read before) costs no round trip.
        if range.count == 1, !indexedKeys, let line = known?.entries[range.lowerBound] {
            try visit(EntryBatch(buffer: line, spans: [0..<line.count], firstSeq: range.lowerBound))
            return
        }
        var next = range.lowerBound
        while next < range.upperBound {
            let upper = range.upperBound - next > max(1, batchSize) ? next + max(1, batchSize) : range.upperBound
            let sql = indexedKeys
                ? "SELECT e.seq, e.line, i.subject FROM \(s).events e LEFT JOIN \(s).line_index i ON i.seq = e.seq WHERE e.seq >= $1 AND e.seq < $2 ORDER BY e.seq"
                : "SELECT seq, line, NULL::bytea FROM \(s).events WHERE seq >= $1 AND seq < $2 ORDER BY seq"
            let rows = try query(sql, PostgresBindings(Int64(next), Int64(min(upper, Int(Int64.max)))))
            var buffer: [UInt8] = []
            var spans: [Range<Int>] = []
            var keys: [[UInt8]] = []
            for row in rows {
                let (seq, line, key) = try row.decode((Int64, ByteBuffer, ByteBuffer?).self)
                guard seq == Int64(next + spans.count) else {
                    throw integrity("the log has no entry \(next + spans.count): its row is missing", seq: next + spans.count)
                }
                let start = buffer.count
                buffer.append(contentsOf: line.readableBytesView)
                spans.append(start..<buffer.count)
                if indexedKeys {
                    guard let key else { throw integrity("table line_index has no row for entry \(seq) (\(store.names.derivedRepair))", seq: Int(seq), kind: .derivedData) }
                    keys.append(key.bytes)
                }
            }
            if spans.isEmpty { break }
            let batch = EntryBatch(buffer: buffer, spans: spans, firstSeq: next, indexedKeys: indexedKeys ? keys : nil)
            if batch.count == 1, let size = known?.state.size, next < size { known?.entries[next] = batch.entry(0) }
            try visit(batch)
            next += spans.count
            if next < upper { break }
        }
        if let size = try? logState().size, next < min(range.upperBound, size) {
            throw integrity("the log has no entry \(next): its row is missing", seq: next)
        }
    }

    func derivedCounts() throws -> DerivedCounts {
        _ = try logState()
        return known!.counts
    }

    func treeHashes(_ indexes: [Int64]) throws -> [Digest] {
        try lockIfWriter()
        var found: [Int64: Digest] = [:]
        let missing = indexes.filter { index in
            guard let hash = known?.treeHashes[index] else { return true }
            found[index] = hash
            return false
        }
        if !missing.isEmpty {
            for row in try query("SELECT idx, hash FROM \(s).tree_hashes WHERE idx = ANY($1)", PostgresBindings(missing)) {
                let (index, hash) = try row.decode((Int64, ByteBuffer).self)
                found[index] = Digest(bytes: hash.bytes)
            }
            // Only the few hashes a proof needs are remembered, not a verifier's millions.
            if missing.count <= 64 { for index in missing { known?.treeHashes[index] = found[index] } }
        }
        return try indexes.map { index in
            guard let digest = found[index] else { throw integrity("the tree has no hash at index \(index) (\(store.names.derivedRepair))", kind: .derivedData) }
            return digest
        }
    }

    func subjectMapRecord(_ index: Int64) throws -> [UInt8] {
        if let record = known?.mapRecords[index] { return record }
        try lockIfWriter()
        mapRowsRead += 1
        // A transaction that reads many nodes one by one (a compaction reads them all, a new
        // process meets the map) reads the whole table at once instead, when it is small enough
        // to keep.
        if mapRowsRead == Self.mapRowsReadAlone, let count = known?.counts.subjectMapRecords, count <= Int64(WarmState.rowsKept) {
            for row in try query("SELECT idx, record FROM \(s).subject_map WHERE idx < $1", PostgresBindings(count)) {
                let (at, record) = try row.decode((Int64, ByteBuffer).self)
                known?.mapRecords[at] = record.bytes
            }
            if let record = known?.mapRecords[index] { return record }
        }
        guard let row = try query("SELECT record FROM \(s).subject_map WHERE idx = $1", PostgresBindings(index)).first else {
            throw integrity("table subject_map has no record \(index) (\(store.names.derivedRepair))", kind: .derivedData)
        }
        let record = try row.decode(ByteBuffer.self).bytes
        known?.mapRecords[index] = record
        return record
    }

    /// Subject-map rows read one by one before the rest are read at once.
    static let mapRowsReadAlone = 64
    private var mapRowsRead = 0

    func indexedEntries(of key: [UInt8], below limit: Int) throws -> [Int] {
        try lockIfWriter()
        return try query("SELECT seq FROM \(s).line_index WHERE subject = $1 AND seq < $2 ORDER BY seq", PostgresBindings(key.buffer, Int64(limit))).map { row in
            Int(try row.decode(Int64.self))
        }
    }

    // MARK: Subjects and checkpoints

    private func record(salt: ByteBuffer, sig: ByteBuffer?) throws -> SubjectRecord {
        guard let sig else { return SubjectRecord(salt: salt.bytes, signature: nil) }
        guard let signature = Signature(bytes: sig.bytes) else {
            throw integrity("a subject record's signature in table \(address.schema).subjects is not 64 bytes", kind: .subjectRecord)
        }
        return SubjectRecord(salt: salt.bytes, signature: signature)
    }

    func subjectRecord(_ id: SubjectID) throws -> SubjectRecord? {
        try lockIfWriter()
        guard let row = try query("SELECT salt, sig FROM \(s).subjects WHERE subject_id = $1", PostgresBindings(id.utf8.buffer)).first else { return nil }
        let (salt, sig) = try row.decode((ByteBuffer, ByteBuffer?).self)
        return try record(salt: salt, sig: sig)
    }

    func subjectRecords() throws -> [SubjectID: SubjectRecord] {
        try lockIfWriter()
        var records: [SubjectID: SubjectRecord] = [:]
        for row in try query("SELECT subject_id, salt, sig FROM \(s).subjects") {
            let (id, salt, sig) = try row.decode((ByteBuffer, ByteBuffer, ByteBuffer?).self)
            guard let text = String(validating: id.readableBytesView, as: UTF8.self) else {
                throw integrity("a subject id in table subjects is not UTF-8", kind: .subjectRecord)
            }
            records[SubjectID(text)] = try record(salt: salt, sig: sig)
        }
        return records
    }

    func heads(_ visit: (SignedHead) throws -> Void) throws {
        if let head = try logState().signedHead { try visit(head) }
    }

    func checkpoints() throws -> [IssuedCheckpoint] {
        try lockIfWriter()
        return try query("SELECT size, note FROM \(s).checkpoints ORDER BY size").map { row in
            let (size, note) = try row.decode((Int64, String).self)
            return IssuedCheckpoint(size: size, note: note)
        }
    }

    func newestCheckpoint() throws -> IssuedCheckpoint? {
        try lockIfWriter()
        return try query("SELECT size, note FROM \(s).checkpoints ORDER BY size DESC LIMIT 1").map { row in
            let (size, note) = try row.decode((Int64, String).self)
            return IssuedCheckpoint(size: size, note: note)
        }.first
    }

    // MARK: Writing

    /// Everything in the one transaction: it commits when the write's body returns (a locked
    /// writer's), or is its own transaction, committed when this returns (an optimistic
    /// writer's, refused with `ConsentError.conflict` when the head moved since).
    func commit(_ commit: LedgerCommit) throws -> String? {
        let size = try logState().size
        guard commit.firstSeq == size else {
            throw ConsentError.conflict("the log at \(address) has \(size) entries, not \(commit.firstSeq) as this write began; nothing was appended")
        }
        try commit.checkHead(following: size, at: "\(address)")
        let largest = [commit.entries.count, commit.subjects.count, commit.revisedSubjects.count, commit.erasedSubjects.count,
                       commit.derived.streamKeys.count, commit.derived.treeHashes.count, commit.derived.subjectMap?.records.count ?? 0].max()!
        sentCommit = commit
        if session == nil || largest <= Self.rowsInOneStatement {
            do {
                erasedBy = try appendCommit(commit)
            } catch let lost as PostgresConnections.ConnectionLost {
                // An optimistic commit is its own transaction: it may have been made.
                try store.resolveLost(commit, error: lost.error)
                erasedBy = nil
            }
        } else {
            try commitStatementByStatement(commit)
        }
        erased = !commit.erasedSubjects.isEmpty
        committed = true
        // Nothing may throw once an optimistic commit is made.
        known?.apply(commit)
        if known != nil, session == nil { expected = known?.state.recordedHead }
        return nil
    }

    /// Up to this many rows of each kind, a commit is one call of `append_commit`; a larger one
    /// (a migration's, a key revocation's) is written in chunks, statement by statement.
    static let rowsInOneStatement = 10_000

    /// One call of `append_commit`: the transaction id when it erased subject records.
    private func appendCommit(_ commit: LedgerCommit) throws -> String? {
        let resigned = commit.revisedSubjects.compactMap { r in r.record.map { (r.subjectID, $0) } }
        let removed = commit.revisedSubjects.filter { $0.record == nil }.map(\.subjectID)
        let derived = commit.derived
        var binds = PostgresBindings(capacity: 25)
        binds.append(store.lockName)
        if let expected {
            binds.append(Int64(expected.seq))
            binds.append(expected.hash.bytes.buffer)
        } else {
            binds.appendNull()
            binds.appendNull()
        }
        binds.append(Int64(commit.firstSeq))
        binds.append(commit.entries.map(\.buffer))
        binds.append(commit.subjects.map { $0.subjectID.utf8.buffer })
        binds.append(commit.subjects.map { $0.record.salt.buffer })
        // An unsigned record (a format-1 ledger) is an empty array here and NULL in the row.
        binds.append(commit.subjects.map { ($0.record.signature?.bytes ?? []).buffer })
        binds.append(resigned.map { $0.0.utf8.buffer })
        binds.append(resigned.map { $0.1.salt.buffer })
        binds.append(resigned.map { ($0.1.signature?.bytes ?? []).buffer })
        binds.append(removed.map { $0.utf8.buffer })
        if let map = derived.subjectMap { binds.append(map.at) } else { binds.appendNull() }
        let mapRecords = derived.subjectMap?.records
        binds.append((0..<(mapRecords?.count ?? 0)).map { mapRecords![$0].buffer })
        binds.append(Int64(derived.indexFrom))
        binds.append(derived.streamKeys.map(\.buffer))
        binds.append(derived.treeFrom)
        binds.append(derived.treeHashes.map { $0.bytes.buffer })
        if let head = commit.head {
            binds.append(Int64(head.seq))
            binds.append(head.chainHash.bytes.buffer)
            binds.append(head.note)
        } else {
            binds.appendNull()
            binds.appendNull()
            binds.appendNull()
        }
        binds.append(commit.erasedSubjects.map { $0.utf8.buffer })
        // The derived tables' sizes the writer remembers (checked with the head).
        if expected != nil, let counts = known?.counts {
            binds.append(Int64(counts.indexed))
            binds.append(counts.treeHashes)
            binds.append(counts.subjectMapRecords)
        } else {
            binds.appendNull()
            binds.appendNull()
            binds.appendNull()
        }
        let row = try queryNoticingLoss(
            "SELECT \(s).append_commit($1::text, $2::bigint, $3::bytea, $4::bigint, $5::bytea[], $6::bytea[], $7::bytea[], $8::bytea[], $9::bytea[], $10::bytea[], $11::bytea[], $12::bytea[], $13::bigint, $14::bytea[], $15::bigint, $16::bytea[], $17::bigint, $18::bytea[], $19::bigint, $20::bytea, $21::text, $22::bytea[], $23::bigint, $24::bigint, $25::bigint)",
            binds).first
        return try row?.decode(String?.self)
    }

    /// A large commit, in chunks of a few thousand rows per statement.
    private func commitStatementByStatement(_ commit: LedgerCommit) throws {
        try saveSubjects(commit.subjects)
        let resigned = commit.revisedSubjects.compactMap { r in r.record.map { (r.subjectID, $0) } }
        for chunk in stride(from: 0, to: resigned.count, by: 5000) {
            let part = resigned[chunk..<min(resigned.count, chunk + 5000)]
            try query(
                "UPDATE \(s).subjects AS r SET sig = t.sig FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS t(id, salt, sig) WHERE r.subject_id = t.id AND r.salt = t.salt",
                PostgresBindings(part.map { $0.0.utf8.buffer }, part.map { $0.1.salt.buffer }, part.map { ($0.1.signature?.bytes ?? []).buffer }))
        }
        let removed = commit.revisedSubjects.filter { $0.record == nil }.map(\.subjectID)
        if !removed.isEmpty {
            try query("DELETE FROM \(s).subjects WHERE subject_id = ANY($1::bytea[])", PostgresBindings(removed.map { $0.utf8.buffer }))
        }
        try insertEntries(commit.entries, from: commit.firstSeq)
        try writeDerived(commit.derived)
        if let head = commit.head { try writeHead(head) }
        if !commit.erasedSubjects.isEmpty {
            try query("DELETE FROM \(s).subjects WHERE subject_id = ANY($1::bytea[])", PostgresBindings(commit.erasedSubjects.map { $0.utf8.buffer }))
            // The transaction's id: snapshots older than it may still see the deleted row.
            erasedBy = try query("SELECT backend_xid::text FROM pg_stat_activity WHERE pid = pg_backend_pid()").first?.decode(String?.self) ?? nil
        }
    }

    /// Whether this transaction deleted subject records: the store then purges their dead row
    /// versions once it has committed (VACUUM cannot run inside a transaction).
    private(set) var erased = false
    /// The id of the transaction that deleted them.
    private(set) var erasedBy: String?

    func insertEntries(_ entries: [[UInt8]], from first: Int) throws {
        try lockIfWriter()
        for chunk in stride(from: 0, to: entries.count, by: 2000) {
            let range = chunk..<min(entries.count, chunk + 2000)
            try query(
                "INSERT INTO \(s).events (seq, line) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(range.map { Int64(first + $0) }, range.map { entries[$0].buffer }))
        }
    }

    private func saveSubjects(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) throws {
        for chunk in stride(from: 0, to: records.count, by: 5000) {
            let part = records[chunk..<min(records.count, chunk + 5000)]
            // An unsigned record (a format-1 ledger) is an empty array here and NULL in the row.
            try query(
                "INSERT INTO \(s).subjects (subject_id, salt, sig) SELECT id, salt, NULLIF(sig, ''::bytea) FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS t(id, salt, sig)",
                PostgresBindings(part.map { $0.subjectID.utf8.buffer }, part.map { $0.record.salt.buffer }, part.map { ($0.record.signature?.bytes ?? []).buffer }))
        }
    }

    func writeDerived(_ derived: DerivedUpdate) throws {
        if let subjectMap = derived.subjectMap {
            try query("DELETE FROM \(s).subject_map WHERE idx >= $1", PostgresBindings(subjectMap.at))
            for chunk in stride(from: 0, to: subjectMap.records.count, by: 5000) {
                let part = chunk..<min(subjectMap.records.count, chunk + 5000)
                try query(
                    "INSERT INTO \(s).subject_map (idx, record) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                    PostgresBindings(part.map { subjectMap.at + Int64($0) }, part.map { subjectMap.records[$0].buffer }))
            }
        }
        try query("DELETE FROM \(s).line_index WHERE seq >= $1", PostgresBindings(Int64(derived.indexFrom)))
        for chunk in stride(from: 0, to: derived.streamKeys.count, by: 5000) {
            let part = chunk..<min(derived.streamKeys.count, chunk + 5000)
            try query(
                "INSERT INTO \(s).line_index (seq, subject) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(part.map { Int64(derived.indexFrom + $0) }, part.map { derived.streamKeys[$0].buffer }))
        }
        try query("DELETE FROM \(s).tree_hashes WHERE idx >= $1", PostgresBindings(derived.treeFrom))
        for chunk in stride(from: 0, to: derived.treeHashes.count, by: 5000) {
            let part = derived.treeHashes[chunk..<min(derived.treeHashes.count, chunk + 5000)]
            try query(
                "INSERT INTO \(s).tree_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(part.indices.map { derived.treeFrom + Int64($0) }, part.map { $0.bytes.buffer }))
        }
    }

    func writeHead(_ head: SignedHead) throws {
        try query(
            "INSERT INTO \(s).head (seq, hash, note) VALUES ($1, $2, $3) ON CONFLICT (only_row) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, note = excluded.note",
            PostgresBindings(Int64(head.seq), head.chainHash.bytes.buffer, head.note))
    }

    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        try lockIfWriter()
        try query(
            checkpoint.replaces
                ? "INSERT INTO \(s).checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO UPDATE SET note = EXCLUDED.note, recorded_at = clock_timestamp()"
                : "INSERT INTO \(s).checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO NOTHING",
            PostgresBindings(checkpoint.size, checkpoint.note))
    }
}

#endif
