// The alternative a backend team would write instead of this ledger: one SQLite table of
// hash-chained, Ed25519-signed rows, one transaction per command, in WAL mode with
// synchronous=FULL, through SQLite's C API. Each command reads the chain's head and the
// subject's newest row, hashes and signs two events (a ledger command appends 1.75 on average
// in the bench's script) and inserts them, then commits: the same bytes, the same crypto and
// one sync, and nothing else.

import CSQLite
import TransparencyLog
import CSodium
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// SQLite's C API, the few calls the baseline needs.
final class SQLiteTable {
    private var db: OpaquePointer?
    private var head: OpaquePointer?
    private var subject: OpaquePointer?
    private var insert: OpaquePointer?

    init(path: String) throws {
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else {
            throw BenchError.failed("sqlite3_open_v2 \(path) failed")
        }
        sqlite3_busy_timeout(db, 60_000)
        try exec("PRAGMA journal_mode=WAL")
        try exec("PRAGMA synchronous=FULL")
        try exec("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, subject TEXT NOT NULL, line BLOB NOT NULL, hash BLOB NOT NULL, signature BLOB NOT NULL)")
        try exec("CREATE INDEX IF NOT EXISTS events_subject ON events (subject, seq)")
        head = try prepare("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")
        subject = try prepare("SELECT line FROM events WHERE subject = ?1 ORDER BY seq DESC LIMIT 1")
        insert = try prepare("INSERT INTO events (seq, subject, line, hash, signature) VALUES (?1, ?2, ?3, ?4, ?5)")
    }

    deinit {
        for statement in [head, subject, insert] { sqlite3_finalize(statement) }
        sqlite3_close_v2(db)
    }

    func exec(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
            throw BenchError.failed("sqlite: \(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else {
            throw BenchError.failed("sqlite: \(sql): \(String(cString: sqlite3_errmsg(db)))")
        }
        return statement
    }

    /// One command: its events chained onto the table's newest row, signed and inserted in one
    /// durable transaction.
    func command(subject id: String, lines: [[UInt8]], secretKey: [UInt8]) throws {
        try exec("BEGIN IMMEDIATE")
        var seq: Int64 = 0
        var previous = [UInt8](repeating: 0, count: 32)
        if sqlite3_step(head) == SQLITE_ROW {
            seq = sqlite3_column_int64(head, 0) + 1
            if let bytes = sqlite3_column_blob(head, 1) { previous = Array(UnsafeRawBufferPointer(start: bytes, count: 32)) }
        }
        sqlite3_reset(head)
        sqlite3_bind_text(subject, 1, id, -1, SQLITE_TRANSIENT)
        _ = sqlite3_step(subject)  // the subject's newest event: what a rule check reads
        sqlite3_reset(subject)
        for line in lines {
            var state = crypto_hash_sha256_state()
            crypto_hash_sha256_init(&state)
            crypto_hash_sha256_update(&state, previous, 32)
            crypto_hash_sha256_update(&state, line, UInt64(line.count))
            crypto_hash_sha256_final(&state, &previous)
            var signature = [UInt8](repeating: 0, count: 64)
            crypto_sign_detached(&signature, nil, line + previous, UInt64(line.count + 32), secretKey)
            sqlite3_bind_int64(insert, 1, seq)
            sqlite3_bind_text(insert, 2, id, -1, SQLITE_TRANSIENT)
            sqlite3_bind_blob(insert, 3, line, Int32(line.count), SQLITE_TRANSIENT)
            sqlite3_bind_blob(insert, 4, previous, 32, SQLITE_TRANSIENT)
            sqlite3_bind_blob(insert, 5, signature, 64, SQLITE_TRANSIENT)
            guard sqlite3_step(insert) == SQLITE_DONE else {
                let message = String(cString: sqlite3_errmsg(db))
                sqlite3_reset(insert)
                try? exec("ROLLBACK")
                throw BenchError.failed("sqlite insert: \(message)")
            }
            sqlite3_reset(insert)
            seq += 1
        }
        try exec("COMMIT")
    }
}

/// SQLITE_TRANSIENT: SQLite copies the bound bytes.
let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// `writers` threads, each with its own connection, each running `perWriter` commands of two
/// events taken from `lines` (the bench ledger's own event lines). Emits events, wall time and
/// the p50 and p99 of one command.
func phaseSQLite(dir: String, writers: Int, perWriter: Int, lines: [[UInt8]]) throws {
    let path = dir + "/baseline-\(writers).sqlite"
    for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
    _ = sodium_init()
    var pk = [UInt8](repeating: 0, count: 32), sk = [UInt8](repeating: 0, count: 64)
    crypto_sign_keypair(&pk, &sk)
    let secretKey = sk
    do {
        // Warm-up: the table and its WAL exist before the clock starts.
        let table = try SQLiteTable(path: path)
        for i in 0..<20 { try table.command(subject: "warm-\(i)", lines: [lines[0], lines[1 % lines.count]], secretKey: secretKey) }
    }
    let times = Mutex<[Double]>([])
    let failure = Mutex<String?>(nil)
    let start = now()
    onThreads(writers) { w in
        do {
            let table = try SQLiteTable(path: path)
            var mine: [Double] = []
            for i in 0..<perWriter {
                let k = (w * perWriter + i) * 2
                let t = now()
                try table.command(subject: "patient-\((w * perWriter + i) % 997)", lines: [lines[k % lines.count], lines[(k + 1) % lines.count]], secretKey: secretKey)
                mine.append(now() - t)
            }
            times.withLock { $0 += mine }
        } catch {
            failure.withLock { $0 = "\(error)" }
        }
    }
    let wall = now() - start
    if let message = failure.withLock({ $0 }) { throw BenchError.failed(message) }
    let sorted = times.withLock { $0 }.sorted()
    emit("sqlite", sorted.count * 2, wall, "commands=\(sorted.count) p50=\(sorted[sorted.count / 2]) p99=\(sorted[min(sorted.count - 1, sorted.count * 99 / 100)]) max=\(sorted.last!)")
}

/// Event lines of the bench ledger (after its genesis), for the baseline to store.
func eventLines(of dir: String, count: Int) throws -> [[UInt8]] {
    guard let file = fopen(dir + "/ledger.jsonl", "r") else { throw BenchError.failed("cannot read \(dir)/ledger.jsonl") }
    defer { fclose(file) }
    var lines: [[UInt8]] = []
    var buffer: UnsafeMutablePointer<CChar>? = nil
    var capacity = 0
    defer { free(buffer) }
    while lines.count < count + 1 {
        let n = getline(&buffer, &capacity, file)
        if n <= 0 { break }
        let line = UnsafeRawBufferPointer(start: buffer, count: n - 1)
        // Event lines, not the signed heads a folder's log keeps between commits.
        if line.starts(with: Array(#"{"body""#.utf8)) { lines.append(Array(line)) }
    }
    guard lines.count > 2 else { throw BenchError.failed("\(dir)/ledger.jsonl holds too few events") }
    return Array(lines.dropFirst())
}
