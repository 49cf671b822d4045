#if PostgreSQL
import ConsentDomain
import ConsentLedger
import PostgresNIO
import Synchronization

/// A ledger in a PostgreSQL schema: the same lines, derived data and head as a ledger folder
/// (``FileLedgerStore``), kept in tables (see ``PostgresSchema``).
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
/// **Acknowledged after commit.** ``withLock(exclusive:_:)`` commits when its body returns; the
/// ledger reports a command as done only after that. A failed statement or commit rolls the
/// whole command back. Readers use a `REPEATABLE READ READ ONLY` transaction: one snapshot,
/// never blocking or blocked by writers.
public final class PostgresLedgerStore: LedgerStore {
    /// Where the ledger lives.
    public let address: PostgresLedgerAddress
    private let connections: PostgresConnections
    private let schemaReady = Mutex(false)

    /// The session of the transaction each store holds on this thread, while in ``withLock``.
    private struct Bound: Sendable {
        let session: PostgresSession
        let exclusive: Bool
    }
    @TaskLocal private static var bound: [ObjectIdentifier: Bound] = [:]

    public init(address: PostgresLedgerAddress) throws {
        self.address = address
        self.connections = try PostgresConnections(address: address)
    }

    /// A store for a `postgres://` URL (see ``PostgresLedgerAddress``).
    public convenience init(url: String) throws {
        try self.init(address: PostgresLedgerAddress(url: url))
    }

    /// The URL without its password, for messages.
    public var location: String { address.description }

    public var checkpointsPlace: String { "table \(address.schema).checkpoints" }

    public var subjectsPlace: String { "table \(address.schema).subjects" }

    public var derivedRepair: String { "rebuild it: DELETE FROM \(address.schema).line_index, \(address.schema).tree_hashes and \(address.schema).subject_map, and the next write recomputes them from the events table" }

    /// The schema as SQL text (quoted).
    private var s: String { PostgresSchema.quoted(address.schema) }

    private var lockName: String { "consentledger:" + address.schema }

    // MARK: - Sessions and transactions

    /// Runs `body` in the transaction this thread holds on this store, or else in a session
    /// of its own (one statement, one snapshot).
    @discardableResult
    private func run<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        if let bound = Self.bound[ObjectIdentifier(self)] { return try body(bound.session) }
        return try connections.withSession { session in
            try ensureSchema(session)
            return try body(session)
        }
    }

    /// Checks once per store that the schema exists and is current, migrating it if it is older.
    private func ensureSchema(_ session: PostgresSession) throws {
        if schemaReady.withLock({ $0 }) { return }
        guard let version = try PostgresSchema.version(session, schema: address.schema) else {
            throw LedgerError.notFound("no ledger at \(address) (run 'consentctl init --store \(address)' to create one)")
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
                throw LedgerError.storage("PostgreSQL at \(address) rolled the transaction back; nothing was changed")
            }
            return result
        } catch {
            _ = try? session.query("ROLLBACK")
            throw error
        }
    }

    public func withLock<T>(exclusive: Bool, _ body: () throws -> T) throws -> T {
        let key = ObjectIdentifier(self)
        if let bound = Self.bound[key] {
            guard bound.exclusive || !exclusive else {
                throw LedgerError.storage("cannot take the exclusive lock inside a read-only transaction")
            }
            return try body()
        }
        return try connections.withSession { session in
            try ensureSchema(session)
            return try transaction(session, exclusive: exclusive) {
                var all = Self.bound
                all[key] = Bound(session: session, exclusive: exclusive)
                return try Self.$bound.withValue(all) { try body() }
            }
        }
    }

    // MARK: - Creating

    public func create(_ setup: LedgerSetup) throws {
        try connections.withSession { session in
            try transaction(session, exclusive: true) {
                try PostgresSchema.migrate(session, schema: address.schema, create: true)
                guard try session.query("SELECT 1 FROM \(s).ledger").count == 0 else {
                    throw LedgerError.alreadyExists("a ledger already exists at \(address)")
                }
                try session.query("INSERT INTO \(s).ledger (catalog, public_key) VALUES ($1, $2)", PostgresBindings(setup.catalog.buffer, setup.publicKey.bytes.buffer))
                try session.query("INSERT INTO \(s).signing_key (seed) VALUES ($1)", PostgresBindings(setup.secretSeed.buffer))
                try session.query("INSERT INTO \(s).events (seq, byte_offset, line) VALUES (0, 0, $1)", PostgresBindings(setup.genesis.lineWithoutNewline.buffer))
                try session.query("INSERT INTO \(s).head (seq, hash, note) VALUES ($1, $2, $3)", PostgresBindings(Int64(setup.head.seq), setup.head.chainHash.bytes.buffer, setup.head.note))
            }
        }
        schemaReady.withLock { $0 = true }
    }

    // MARK: - Ledger files

    private func single(_ sql: String, what: String) throws -> [UInt8] {
        try run { session in
            guard let row = try session.query(sql).first else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): \(what) is missing"))
            }
            return try row.decode(ByteBuffer.self).bytes
        }
    }

    public func readCatalog() throws -> [UInt8] {
        try single("SELECT catalog FROM \(s).ledger", what: "the catalogue (table ledger)")
    }

    public func readPublicKey() throws -> PublicKey {
        let bytes = try single("SELECT public_key FROM \(s).ledger", what: "the public key (table ledger)")
        guard let key = PublicKey(bytes: bytes) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the public key is not 32 bytes"))
        }
        return key
    }

    public func readSecretSeed() throws -> [UInt8] {
        let seed = try single("SELECT seed FROM \(s).signing_key", what: "the signing key (table signing_key)")
        guard seed.count == 32 else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the signing key is not a 32-byte Ed25519 seed"))
        }
        return seed
    }

    public func readFirstLine() throws -> [UInt8] {
        try run { session in
            guard let row = try session.query("SELECT line FROM \(s).events WHERE seq = 0").first else {
                throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the log is empty: the genesis event is missing"))
            }
            return try row.decode(ByteBuffer.self).bytes
        }
    }

    // MARK: - The log

    /// The newest row of the log.
    private func lastRow(_ session: PostgresSession) throws -> (seq: Int64, offset: Int64, line: [UInt8]) {
        guard let row = try session.query("SELECT seq, byte_offset, line FROM \(s).events ORDER BY seq DESC LIMIT 1").first else {
            throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the log is empty: the genesis event is missing"))
        }
        let (seq, offset, line) = try row.decode((Int64, Int64, ByteBuffer).self)
        guard seq >= 0, offset >= 0 else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the newest row of the log has a negative seq or byte offset"))
        }
        return (seq, offset, line.bytes)
    }

    private static func end(of row: (seq: Int64, offset: Int64, line: [UInt8])) -> LogCursor {
        LogCursor(offset: UInt64(row.offset) + UInt64(row.line.count) + 1, lines: Int(row.seq) + 1)
    }

    public func logState() throws -> LogState {
        try run { session in
            guard let headRow = try session.query("SELECT seq, hash, note FROM \(s).head").first else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the head row is missing"))
            }
            let (headSeq, headHash, note) = try headRow.decode((Int64, ByteBuffer, String?).self)
            guard headSeq >= 0, let hash = Digest(bytes: headHash.bytes) else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the head row is not a sequence number and a 32-byte hash"))
            }
            // The note is the head; seq and hash are kept beside it for SQL and must agree.
            var recorded = RecordedHead.unsigned(ChainHead(seq: UInt64(headSeq), hash: hash))
            if let note {
                guard case .signed(let signed)? = RecordedHead.parse(note), signed.chainHead == recorded.chainHead else {
                    throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the head row's note is not a signed head of seq \(headSeq)"))
                }
                recorded = .signed(signed)
            }
            let last = try lastRow(session)
            let record: EventRecord
            do {
                record = try EventCodec.decode(line: last.line)
            } catch let error as EventDecodingError {
                throw LedgerError.integrity(IntegrityFailure(line: Int(last.seq) + 1, seq: UInt64(last.seq), problem: "malformed event: \(error.problem)"))
            }
            let head = recorded.chainHead
            guard record.event.seq >= head.seq else {
                throw LedgerError.integrity(IntegrityFailure(line: Int(last.seq) + 1, seq: record.event.seq, problem: "the log ends at seq \(record.event.seq) but seq \(head.seq) was acknowledged: acknowledged events are missing"))
            }
            return LogState(end: Self.end(of: last), last: record, head: recorded, torn: nil)
        }
    }

    public func completeLinesExtent() throws -> LogCursor {
        try run { session in Self.end(of: try lastRow(session)) }
    }

    public func scan(from cursor: LogCursor, to end: LogCursor, batchSize: Int, containing needle: [UInt8]?, _ visit: (LineBatch) throws -> Void) throws {
        try run { session in
            var next = cursor.lines
            var offset = cursor.offset
            while next < end.lines {
                let upper = min(end.lines, next + max(1, batchSize))
                let rows = try session.query(
                    "SELECT seq, byte_offset, line FROM \(s).events WHERE seq >= $1 AND seq < $2 ORDER BY seq",
                    PostgresBindings(Int64(next), Int64(upper)))
                var buffer: [UInt8] = []
                var lines: [(start: Int, end: Int, number: Int)] = []
                let batchOffset = offset
                for row in rows {
                    let (seq, rowOffset, line) = try row.decode((Int64, Int64, ByteBuffer).self)
                    guard seq == Int64(next + lines.count) else {
                        throw LedgerError.integrity(IntegrityFailure(line: next + lines.count + 1, seq: nil, problem: "the log has no line \(next + lines.count + 1): its row is missing"))
                    }
                    guard rowOffset == Int64(offset) else {
                        throw LedgerError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: nil, problem: "the row's byte offset is \(rowOffset), not \(offset) as the lines before it add up to"))
                    }
                    let start = buffer.count
                    buffer.append(contentsOf: line.readableBytesView)
                    lines.append((start, buffer.count, Int(seq) + 1))
                    buffer.append(0x0A)
                    offset += UInt64(line.readableBytes) + 1
                }
                guard lines.count == upper - next else {
                    throw LedgerError.integrity(IntegrityFailure(line: next + lines.count + 1, seq: nil, problem: "the log ended while being read: line \(next + lines.count + 1) is missing"))
                }
                if let needle {
                    lines = lines.filter { buffer[$0.start..<$0.end].firstRange(of: needle) != nil }
                }
                if !lines.isEmpty { try visit(LineBatch(buffer: buffer, fileOffset: batchOffset, lines: lines)) }
                next = upper
            }
        }
    }

    public func append(_ bytes: [UInt8], lineCount: Int, at expected: LogCursor) throws -> LogCursor {
        var seqs: [Int64] = []
        var offsets: [Int64] = []
        var lines: [ByteBuffer] = []
        var start = 0
        for (i, byte) in bytes.enumerated() where byte == 0x0A {
            seqs.append(Int64(expected.lines + lines.count))
            offsets.append(Int64(expected.offset) + Int64(start))
            lines.append(ByteBuffer(bytes: bytes[start..<i]))
            start = i + 1
        }
        guard start == bytes.count, lines.count == lineCount else {
            throw LedgerError.storage("append: \(lineCount) line(s) expected, each ending with a newline")
        }
        return try run { session in
            let last = try lastRow(session)
            guard Self.end(of: last) == expected else {
                throw LedgerError.storage("conflict: the log ends at line \(last.seq + 1), not where this write began (line \(expected.lines)); nothing was appended")
            }
            for chunk in stride(from: 0, to: lines.count, by: 2000) {
                let range = chunk..<min(lines.count, chunk + 2000)
                try session.query(
                    "INSERT INTO \(s).events (seq, byte_offset, line) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])",
                    PostgresBindings(Array(seqs[range]), Array(offsets[range]), Array(lines[range])))
            }
            return LogCursor(offset: expected.offset + UInt64(bytes.count), lines: expected.lines + lineCount)
        }
    }

    /// Nothing to do: rows are durable once their transaction commits, and invisible before.
    public func syncLog() throws {}

    public func writeHead(_ head: SignedHead) throws {
        try run { session in
            try session.query(
                "INSERT INTO \(s).head (seq, hash, note) VALUES ($1, $2, $3) ON CONFLICT (only_row) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, note = excluded.note",
                PostgresBindings(Int64(head.seq), head.chainHash.bytes.buffer, head.note))
        }
    }

    // MARK: - Derived data

    public func derivedCounts() throws -> (lines: Int, treeHashes: Int64) {
        try run { session in
            let row = try session.query(
                "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM \(s).line_index)::bigint, (SELECT coalesce(max(idx) + 1, 0) FROM \(s).tree_hashes)::bigint").first!
            let (lines, hashes) = try row.decode((Int64, Int64).self)
            return (Int(lines), hashes)
        }
    }

    private static func location(_ row: PostgresRow) throws -> (seq: Int, location: LineLocation) {
        let (seq, offset, length, subject) = try row.decode((Int64, Int64, Int32, ByteBuffer).self)
        guard offset >= 0, length >= 0 else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: UInt64(max(seq, 0)), problem: "the line index holds a negative offset or length"))
        }
        return (Int(seq), LineLocation(offset: UInt64(offset), length: UInt32(length), subject: subject.bytes))
    }

    public func readLineLocations(_ range: Range<Int>) throws -> [LineLocation] {
        try run { session in
            let rows = try session.query(
                "SELECT seq, byte_offset, length, subject FROM \(s).line_index WHERE seq >= $1 AND seq < $2 ORDER BY seq",
                PostgresBindings(Int64(range.lowerBound), Int64(range.upperBound)))
            let found = try rows.map(Self.location)
            guard found.count == range.count, found.enumerated().allSatisfy({ $0.element.seq == range.lowerBound + $0.offset }) else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: UInt64(range.lowerBound), problem: "the line index is shorter than the log"))
            }
            return found.map(\.location)
        }
    }

    public func findLineLocations(subject: [UInt8]) throws -> [(seq: Int, location: LineLocation)] {
        try run { session in
            try session.query(
                "SELECT seq, byte_offset, length, subject FROM \(s).line_index WHERE subject = $1 ORDER BY seq",
                PostgresBindings(subject.buffer)
            ).map(Self.location)
        }
    }

    public func readTreeHashes(_ indexes: [Int64]) throws -> [Digest] {
        try run { session in
            var found: [Int64: Digest] = [:]
            for row in try session.query("SELECT idx, hash FROM \(s).tree_hashes WHERE idx = ANY($1)", PostgresBindings(indexes)) {
                let (index, hash) = try row.decode((Int64, ByteBuffer).self)
                found[index] = Digest(bytes: hash.bytes)
            }
            return try indexes.map { index in
                guard let digest = found[index] else {
                    throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): the tree has no hash at index \(index)"))
                }
                return digest
            }
        }
    }

    public func subjectMapCount() throws -> Int64 {
        try run { session in
            try session.query("SELECT coalesce(max(idx) + 1, 0)::bigint FROM \(s).subject_map").first!.decode(Int64.self)
        }
    }

    public func readSubjectMap(_ index: Int64) throws -> [UInt8] {
        try run { session in
            guard let row = try session.query("SELECT record FROM \(s).subject_map WHERE idx = $1", PostgresBindings(index)).first else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): table subject_map has no record \(index) (\(derivedRepair))"))
            }
            return try row.decode(ByteBuffer.self).bytes
        }
    }

    public func writeDerived(locations: [LineLocation], at lineStart: Int, treeHashes: [Digest], at treeStart: Int64, subjectMap: (records: SubjectMapRecords, at: Int64)?) throws {
        try run { session in
            if let subjectMap {
                try session.query("DELETE FROM \(s).subject_map WHERE idx >= $1", PostgresBindings(subjectMap.at))
                for chunk in stride(from: 0, to: subjectMap.records.count, by: 5000) {
                    let part = chunk..<min(subjectMap.records.count, chunk + 5000)
                    try session.query(
                        "INSERT INTO \(s).subject_map (idx, record) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                        PostgresBindings(part.map { subjectMap.at + Int64($0) }, part.map { subjectMap.records[$0].buffer }))
                }
            }
            try session.query("DELETE FROM \(s).line_index WHERE seq >= $1", PostgresBindings(Int64(lineStart)))
            for chunk in stride(from: 0, to: locations.count, by: 5000) {
                let part = locations[chunk..<min(locations.count, chunk + 5000)]
                try session.query(
                    "INSERT INTO \(s).line_index (seq, byte_offset, length, subject) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::bytea[])",
                    PostgresBindings(
                        part.indices.map { Int64(lineStart + $0) }, part.map { Int64($0.offset) }, part.map { Int32($0.length) },
                        part.map { $0.subject.buffer }))
            }
            try session.query("DELETE FROM \(s).tree_hashes WHERE idx >= $1", PostgresBindings(treeStart))
            for chunk in stride(from: 0, to: treeHashes.count, by: 5000) {
                let part = treeHashes[chunk..<min(treeHashes.count, chunk + 5000)]
                try session.query(
                    "INSERT INTO \(s).tree_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
                    PostgresBindings(part.indices.map { treeStart + Int64($0) }, part.map { $0.bytes.buffer }))
            }
        }
    }

    public func readLine(at location: LineLocation) throws -> [UInt8] {
        try run { session in
            guard let row = try session.query("SELECT seq, line FROM \(s).events WHERE byte_offset = $1", PostgresBindings(Int64(location.offset))).first else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the line index points to byte offset \(location.offset), where no line starts"))
            }
            let (seq, line) = try row.decode((Int64, ByteBuffer).self)
            guard line.readableBytes == Int(location.length) else {
                throw LedgerError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: nil, problem: "the line index gives length \(location.length), but the line has \(line.readableBytes) bytes"))
            }
            return line.bytes
        }
    }

    // MARK: - Subjects

    private func record(salt: ByteBuffer, sig: ByteBuffer?) throws -> SubjectRecord {
        guard let sig else { return SubjectRecord(salt: salt.bytes, signature: nil) }
        guard let signature = Signature(bytes: sig.bytes) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): a subject record's signature in table \(address.schema).subjects is not 64 bytes"))
        }
        return SubjectRecord(salt: salt.bytes, signature: signature)
    }

    public func readSubjectRecord(_ id: SubjectID) throws -> SubjectRecord? {
        try run { session in
            guard let row = try session.query("SELECT salt, sig FROM \(s).subjects WHERE subject_id = $1", PostgresBindings(id.utf8.buffer)).first else { return nil }
            let (salt, sig) = try row.decode((ByteBuffer, ByteBuffer?).self)
            return try record(salt: salt, sig: sig)
        }
    }

    public func readSubjectRecords() throws -> [SubjectID: SubjectRecord] {
        try run { session in
            var records: [SubjectID: SubjectRecord] = [:]
            for row in try session.query("SELECT subject_id, salt, sig FROM \(s).subjects") {
                let (id, salt, sig) = try row.decode((ByteBuffer, ByteBuffer, ByteBuffer?).self)
                guard let text = String(validating: id.readableBytesView, as: UTF8.self) else {
                    throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(address): a subject id in table subjects is not UTF-8"))
                }
                records[SubjectID(text)] = try record(salt: salt, sig: sig)
            }
            return records
        }
    }

    public func saveSubjectRecords(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) throws {
        guard !records.isEmpty else { return }
        try run { session in
            for chunk in stride(from: 0, to: records.count, by: 5000) {
                let part = records[chunk..<min(records.count, chunk + 5000)]
                // An unsigned record (a format-1 ledger) is an empty array here and NULL in the row.
                try session.query(
                    "INSERT INTO \(s).subjects (subject_id, salt, sig) SELECT id, salt, NULLIF(sig, ''::bytea) FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS t(id, salt, sig)",
                    PostgresBindings(part.map { $0.subjectID.utf8.buffer }, part.map { $0.record.salt.buffer }, part.map { ($0.record.signature?.bytes ?? []).buffer }))
            }
        }
    }

    // MARK: - Issued checkpoints

    public func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        try run { session in
            try session.query(
                "INSERT INTO \(s).checkpoints (size, note) VALUES ($1, $2) ON CONFLICT (size) DO NOTHING",
                PostgresBindings(checkpoint.size, checkpoint.note))
        }
    }

    public func readCheckpoints() throws -> [IssuedCheckpoint] {
        try run { session in
            try session.query("SELECT size, note FROM \(s).checkpoints ORDER BY size").map { row in
                let (size, note) = try row.decode((Int64, String).self)
                return IssuedCheckpoint(size: size, note: note)
            }
        }
    }
}
#endif
