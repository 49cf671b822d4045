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
public final class PostgresLedgerStore: LedgerStore {
    /// Where the ledger lives.
    public let address: PostgresLedgerAddress
    private let connections: PostgresConnections
    private let schemaReady = Mutex(false)

    /// Where this process's writers find the signing key; the database never holds it.
    private let writerKeys: (any KeyStore)?

    /// A store at `address`. `keyStore` is where writers find the signing key (a key file,
    /// `FileKeyStore`, or a key store of your own, such as one backed by a KMS); without it the
    /// ledger can be read and verified, and writes fail with `ConsentError.notFound(.signingKey, _)`.
    public init(address: PostgresLedgerAddress, keyStore: (any KeyStore)? = nil) throws {
        self.address = address
        self.writerKeys = keyStore
        self.connections = try PostgresConnections(address: address)
    }

    /// A store for a `postgres://` URL (see ``PostgresLedgerAddress``).
    public convenience init(url: String, keyStore: (any KeyStore)? = nil) throws {
        try self.init(address: PostgresLedgerAddress(url: url), keyStore: keyStore)
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

    private var lockName: String { "consentledger:" + address.schema }

    // MARK: - Sessions and transactions

    /// Checks once per store that the schema exists and is current, migrating it if it is older.
    private func ensureSchema(_ session: PostgresSession) throws {
        if schemaReady.withLock({ $0 }) { return }
        guard let version = try PostgresSchema.version(session, schema: address.schema) else {
            throw ConsentError.notFound(.ledger, "no ledger at \(address) (run 'consentctl init --store \(address)' to create one)")
        }
        if version != PostgresSchema.latestVersion {
            try transaction(session, exclusive: true) { try PostgresSchema.migrate(session, schema: address.schema, create: false) }
        }
        schemaReady.withLock { $0 = true }
    }

    private func transaction<T>(_ session: PostgresSession, exclusive: Bool, _ body: () throws -> T) throws -> T {
        try session.query(exclusive ? "BEGIN ISOLATION LEVEL READ COMMITTED" : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            if exclusive { try session.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", PostgresBindings(lockName)) }
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

    /// Runs `body` in a transaction of its own session.
    func inTransaction<T>(exclusive: Bool, _ body: (PostgresSession) throws -> T) throws -> T {
        try connections.withSession { session in
            try ensureSchema(session)
            return try transaction(session, exclusive: exclusive) { try body(session) }
        }
    }

    public func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T {
        try inTransaction(exclusive: false) { session in try body(PostgresLedgerTransaction(store: self, session: session)) }
    }

    public func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        var erased: (Bool, String?) = (false, nil)
        let result = try inTransaction(exclusive: true) { session in
            let transaction = PostgresLedgerTransaction(store: self, session: session)
            defer { erased = (transaction.erased, transaction.erasedBy) }
            return try body(transaction)
        }
        if erased.0 { try purgeErasedRows(deletedBy: erased.1) }
        return result
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
            try transaction(session, exclusive: true) {
                try PostgresSchema.migrate(session, schema: address.schema, create: true)
                guard try session.query("SELECT 1 FROM \(s).ledger").count == 0 else {
                    throw ConsentError.alreadyExists("a ledger already exists at \(address)")
                }
                try session.query("INSERT INTO \(s).ledger (catalog, public_key) VALUES ($1, $2)", PostgresBindings(setup.catalog.buffer, setup.publicKey.bytes.buffer))
                let transaction = PostgresLedgerTransaction(store: self, session: session)
                try transaction.insertEntries([setup.genesis.lineWithoutNewline], from: 0)
                try transaction.writeDerived(setup.derived)
                try transaction.writeHead(setup.head)
            }
        }
        schemaReady.withLock { $0 = true }
    }
}

/// A transaction on a PostgreSQL ledger: one session, one snapshot (reads) or the advisory lock
/// (the writer).
final class PostgresLedgerTransaction: LedgerWriteTransaction {
    let store: PostgresLedgerStore
    let session: PostgresSession
    private var state: LogState?

    init(store: PostgresLedgerStore, session: PostgresSession) {
        self.store = store
        self.session = session
    }

    private var s: String { store.s }
    private var address: PostgresLedgerAddress { store.address }

    private func integrity(_ problem: String, seq: Int? = nil, kind: IntegrityKind = .log) -> ConsentError {
        .integrity(IntegrityFailure(kind, line: seq.map { $0 + 1 }, seq: seq.map { UInt64($0) }, problem: "\(address): \(problem)"))
    }

    func metadata() throws -> (catalog: [UInt8], publicKey: PublicKey) {
        guard let row = try session.query("SELECT catalog, public_key FROM \(s).ledger").first else {
            throw integrity("the catalogue and public key (table ledger) are missing", kind: .ledgerFiles)
        }
        let (catalog, key) = try row.decode((ByteBuffer, ByteBuffer).self)
        guard let publicKey = PublicKey(bytes: key.bytes) else { throw integrity("the public key is not 32 bytes", kind: .ledgerFiles) }
        return (catalog.bytes, publicKey)
    }

    func logState() throws -> LogState {
        if let state { return state }
        guard let headRow = try session.query("SELECT seq, hash, note FROM \(s).head").first else {
            throw integrity("the head row is missing", kind: .head)
        }
        let (headSeq, headHash, note) = try headRow.decode((Int64, ByteBuffer, String?).self)
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
        guard let row = try session.query("SELECT seq, line FROM \(s).events ORDER BY seq DESC LIMIT 1").first else {
            throw integrity("the log is empty: the genesis event is missing", seq: 0)
        }
        let (seq, line) = try row.decode((Int64, ByteBuffer).self)
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
        let found = LogState(size: Int(seq) + 1, last: record, head: recorded, torn: nil)
        state = found
        return found
    }

    func entries(_ range: Range<Int>, batchSize: Int, indexedKeys: Bool, _ visit: (EntryBatch) throws -> Void) throws {
        var next = range.lowerBound
        while next < range.upperBound {
            let upper = range.upperBound - next > max(1, batchSize) ? next + max(1, batchSize) : range.upperBound
            let sql = indexedKeys
                ? "SELECT e.seq, e.line, i.subject FROM \(s).events e LEFT JOIN \(s).line_index i ON i.seq = e.seq WHERE e.seq >= $1 AND e.seq < $2 ORDER BY e.seq"
                : "SELECT seq, line, NULL::bytea FROM \(s).events WHERE seq >= $1 AND seq < $2 ORDER BY seq"
            let rows = try session.query(sql, PostgresBindings(Int64(next), Int64(min(upper, Int(Int64.max)))))
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
            try visit(EntryBatch(buffer: buffer, spans: spans, firstSeq: next, indexedKeys: indexedKeys ? keys : nil))
            next += spans.count
            if next < upper { break }
        }
        if let size = try? logState().size, next < min(range.upperBound, size) {
            throw integrity("the log has no entry \(next): its row is missing", seq: next)
        }
    }

    func derivedCounts() throws -> DerivedCounts {
        let row = try session.query(
            "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM \(s).line_index)::bigint, (SELECT coalesce(max(idx) + 1, 0) FROM \(s).tree_hashes)::bigint, (SELECT coalesce(max(idx) + 1, 0) FROM \(s).subject_map)::bigint").first!
        let (indexed, hashes, map) = try row.decode((Int64, Int64, Int64).self)
        guard indexed >= 0, hashes >= 0, map >= 0, indexed < Int64(Int32.max) * 1024 else { throw integrity("a derived table holds a negative or impossible index", kind: .derivedData) }
        return DerivedCounts(indexed: Int(indexed), treeHashes: hashes, subjectMapRecords: map)
    }

    func treeHashes(_ indexes: [Int64]) throws -> [Digest] {
        var found: [Int64: Digest] = [:]
        for row in try session.query("SELECT idx, hash FROM \(s).tree_hashes WHERE idx = ANY($1)", PostgresBindings(indexes)) {
            let (index, hash) = try row.decode((Int64, ByteBuffer).self)
            found[index] = Digest(bytes: hash.bytes)
        }
        return try indexes.map { index in
            guard let digest = found[index] else { throw integrity("the tree has no hash at index \(index) (\(store.names.derivedRepair))", kind: .derivedData) }
            return digest
        }
    }

    func subjectMapRecord(_ index: Int64) throws -> [UInt8] {
        guard let row = try session.query("SELECT record FROM \(s).subject_map WHERE idx = $1", PostgresBindings(index)).first else {
            throw integrity("table subject_map has no record \(index) (\(store.names.derivedRepair))", kind: .derivedData)
        }
        return try row.decode(ByteBuffer.self).bytes
    }

    func indexedEntries(of key: [UInt8], below limit: Int) throws -> [Int] {
        try session.query("SELECT seq FROM \(s).line_index WHERE subject = $1 AND seq < $2 ORDER BY seq", PostgresBindings(key.buffer, Int64(limit))).map { row in
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
        guard let row = try session.query("SELECT salt, sig FROM \(s).subjects WHERE subject_id = $1", PostgresBindings(id.utf8.buffer)).first else { return nil }
        let (salt, sig) = try row.decode((ByteBuffer, ByteBuffer?).self)
        return try record(salt: salt, sig: sig)
    }

    func subjectRecords() throws -> [SubjectID: SubjectRecord] {
        var records: [SubjectID: SubjectRecord] = [:]
        for row in try session.query("SELECT subject_id, salt, sig FROM \(s).subjects") {
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
        try session.query("SELECT size, note FROM \(s).checkpoints ORDER BY size").map { row in
            let (size, note) = try row.decode((Int64, String).self)
            return IssuedCheckpoint(size: size, note: note)
        }
    }

    func newestCheckpoint() throws -> IssuedCheckpoint? {
        try session.query("SELECT size, note FROM \(s).checkpoints ORDER BY recorded_at DESC, size DESC LIMIT 1").map { row in
            let (size, note) = try row.decode((Int64, String).self)
            return IssuedCheckpoint(size: size, note: note)
        }.first
    }

    // MARK: Writing

    /// Everything in the one transaction: it commits when the write's body returns.
    func commit(_ commit: LedgerCommit) throws -> String? {
        let size = try logState().size
        guard commit.firstSeq == size else {
            throw ConsentError.conflict("the log at \(address) has \(size) entries, not \(commit.firstSeq) as this write began; nothing was appended")
        }
        try commit.checkHead(following: size, at: "\(address)")
        try saveSubjects(commit.subjects)
        let resigned = commit.revisedSubjects.compactMap { r in r.record.map { (r.subjectID, $0) } }
        for chunk in stride(from: 0, to: resigned.count, by: 5000) {
            let part = resigned[chunk..<min(resigned.count, chunk + 5000)]
            try session.query(
                "UPDATE \(s).subjects AS r SET sig = t.sig FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS t(id, salt, sig) WHERE r.subject_id = t.id AND r.salt = t.salt",
                PostgresBindings(part.map { $0.0.utf8.buffer }, part.map { $0.1.salt.buffer }, part.map { ($0.1.signature?.bytes ?? []).buffer }))
        }
        let removed = commit.revisedSubjects.filter { $0.record == nil }.map(\.subjectID)
        if !removed.isEmpty {
            try session.query("DELETE FROM \(s).subjects WHERE subject_id = ANY($1::bytea[])", PostgresBindings(removed.map { $0.utf8.buffer }))
        }
        try insertEntries(commit.entries, from: commit.firstSeq)
        try writeDerived(commit.derived)
        if let head = commit.head { try writeHead(head) }
        if !commit.erasedSubjects.isEmpty {
            try session.query("DELETE FROM \(s).subjects WHERE subject_id = ANY($1::bytea[])", PostgresBindings(commit.erasedSubjects.map { $0.utf8.buffer }))
            // The transaction's id: snapshots older than it may still see the deleted row.
            erasedBy = try session.query("SELECT backend_xid::text FROM pg_stat_activity WHERE pid = pg_backend_pid()").first?.decode(String?.self) ?? nil
            erased = true
        }
        state = nil
        return nil
    }

    /// Whether this transaction deleted subject records: the store then purges their dead row
    /// versions once it has committed (VACUUM cannot run inside a transaction).
    private(set) var erased = false
    /// The id of the transaction that deleted them.
    private(set) var erasedBy: String?

    func insertEntries(_ entries: [[UInt8]], from first: Int) throws {
        for chunk in stride(from: 0, to: entries.count, by: 2000) {
            let range = chunk..<min(entries.count, chunk + 2000)
            try session.query(
                "INSERT INTO \(s).events (seq, line) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(range.map { Int64(first + $0) }, range.map { entries[$0].buffer }))
        }
    }

    private func saveSubjects(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) throws {
        for chunk in stride(from: 0, to: records.count, by: 5000) {
            let part = records[chunk..<min(records.count, chunk + 5000)]
            // An unsigned record (a format-1 ledger) is an empty array here and NULL in the row.
            try session.query(
                "INSERT INTO \(s).subjects (subject_id, salt, sig) SELECT id, salt, NULLIF(sig, ''::bytea) FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS t(id, salt, sig)",
                PostgresBindings(part.map { $0.subjectID.utf8.buffer }, part.map { $0.record.salt.buffer }, part.map { ($0.record.signature?.bytes ?? []).buffer }))
        }
    }

    func writeDerived(_ derived: DerivedUpdate) throws {
        if let subjectMap = derived.subjectMap {
            try session.query("DELETE FROM \(s).subject_map WHERE idx >= $1", PostgresBindings(subjectMap.at))
            for chunk in stride(from: 0, to: subjectMap.records.count, by: 5000) {
                let part = chunk..<min(subjectMap.records.count, chunk + 5000)
                try session.query(
                    "INSERT INTO \(s).subject_map (idx, record) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                    PostgresBindings(part.map { subjectMap.at + Int64($0) }, part.map { subjectMap.records[$0].buffer }))
            }
        }
        try session.query("DELETE FROM \(s).line_index WHERE seq >= $1", PostgresBindings(Int64(derived.indexFrom)))
        for chunk in stride(from: 0, to: derived.streamKeys.count, by: 5000) {
            let part = chunk..<min(derived.streamKeys.count, chunk + 5000)
            try session.query(
                "INSERT INTO \(s).line_index (seq, subject) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(part.map { Int64(derived.indexFrom + $0) }, part.map { derived.streamKeys[$0].buffer }))
        }
        try session.query("DELETE FROM \(s).tree_hashes WHERE idx >= $1", PostgresBindings(derived.treeFrom))
        for chunk in stride(from: 0, to: derived.treeHashes.count, by: 5000) {
            let part = derived.treeHashes[chunk..<min(derived.treeHashes.count, chunk + 5000)]
            try session.query(
                "INSERT INTO \(s).tree_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                PostgresBindings(part.indices.map { derived.treeFrom + Int64($0) }, part.map { $0.bytes.buffer }))
        }
    }

    func writeHead(_ head: SignedHead) throws {
        try session.query(
            "INSERT INTO \(s).head (seq, hash, note) VALUES ($1, $2, $3) ON CONFLICT (only_row) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, note = excluded.note",
            PostgresBindings(Int64(head.seq), head.chainHash.bytes.buffer, head.note))
    }

    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        try session.query(
            checkpoint.replaces
                ? "INSERT INTO \(s).checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO UPDATE SET note = EXCLUDED.note, recorded_at = clock_timestamp()"
                : "INSERT INTO \(s).checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO NOTHING",
            PostgresBindings(checkpoint.size, checkpoint.note))
    }
}

#endif
