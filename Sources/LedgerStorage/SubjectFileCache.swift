import LedgerFormat
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a long-running process has read of `subjects.jsonl`, so that looking up one subject's
/// record does not scan the whole file every time.
///
/// Between rewrites the file only grows: writers append new records, and an erasure or a key
/// revocation writes a whole new file and renames it into place (a new inode). So the records
/// read up to an offset of the same inode are still the file's, and a lookup reads only what was
/// appended since. Anything else (another inode, a file shorter than what was read) reads the
/// file afresh. The cache holds the file it read open, so that its inode cannot be freed and
/// given to a later file while the cache still names it. Records are checked where they are used (their signature), never here: what this
/// keeps are the bytes the file held.
///
/// Lookups that `subjects.idx` answers (``SubjectIndexFile``) do not come here. Of the others
/// (an id without a record, a stale or missing index), a process's first two scan the file as
/// before and keep nothing, since a short-lived
/// command looks up one subject, at most twice (`prove-state` and `export` check that it has
/// events, then read it): keeping would decode every record, which took 120 ms at 50,000
/// subjects. From the third lookup on (a writer that goes on) it keeps what it reads.
final class SubjectFileCache: Sendable {
    struct Snapshot {
        /// A descriptor of the file read, kept open (see above).
        var held: Int32
        var device: UInt64
        var inode: UInt64
        /// Bytes read: through the last complete line.
        var covered: Int
        var lines = 0
        var records: [SubjectID: SubjectRecord] = [:]
        var repeated: Set<SubjectID> = []
        /// Lines shaped like a record that do not decode: one might have been the id asked for.
        var undecodable: [[UInt8]] = []
        /// The first line not even shaped like a record (nor an erased record's spaces).
        var firstShapeless: Int?
    }

    private let state = Mutex<(snapshot: Snapshot?, lookups: Int)>((nil, 0))
    private let scanCount = Mutex(0)

    /// How many lookups of this store read every line of the file (for tests: a lookup that
    /// `subjects.idx` answered reads one line).
    var scans: Int { scanCount.withLock { $0 } }

    func noteScan() { scanCount.withLock { $0 += 1 } }

    deinit {
        state.withLock { if let held = $0.snapshot?.held { close(held) } }
    }

    /// Whether it keeps what it read (for tests).
    var isKeeping: Bool { state.withLock { $0.snapshot != nil } }

    /// Lookups that scan and keep nothing before the cache starts keeping what it reads.
    static let scansBeforeKeeping = 2

    /// `body` applied to the snapshot of the file open as `file`, brought up to its end; nil on
    /// a process's first lookups (``scansBeforeKeeping``), which scan instead. All under the lock, so the snapshot is
    /// updated in place, never copied, and no descriptor is closed while another holds it.
    func withSnapshot<T>(of file: PosixFile, _ body: (Snapshot) throws -> T) throws -> T? {
        // Its identity and size without its times (``PosixFile/Identity``): reading those would
        // make the records file's next append write its inode too.
        guard let identity = file.identity(), let end = try? file.size() else { return nil }
        let (device, inode, size) = (identity.device, identity.inode, Int(end))
        return try state.withLock { s throws -> T? in
            s.lookups += 1
            let usable = s.snapshot.map { $0.device == device && $0.inode == inode && $0.covered <= size } ?? false
            if !usable {
                guard s.lookups > Self.scansBeforeKeeping else { return nil }
                let held = dup(file.fd)
                guard held >= 0 else { return nil }
                if let old = s.snapshot?.held { close(old) }
                s.snapshot = Snapshot(held: held, device: device, inode: inode, covered: 0)
            }
            // The file may end in zero bytes reserved for appends: a first byte that is zero
            // means nothing was appended since (appends are written where the lines end), and
            // the reserve is not read again on every lookup.
            if s.snapshot!.covered < size, try file.read(at: UInt64(s.snapshot!.covered), count: 1) != [0] {
                let bytes = try file.read(at: UInt64(s.snapshot!.covered), count: size - s.snapshot!.covered)
                Self.take(bytes, into: &s.snapshot!)
            }
            return try body(s.snapshot!)
        }
    }

    /// Reads the complete lines of `bytes` (the file from `snapshot.covered` on) into `snapshot`.
    static func take(_ bytes: [UInt8], into snapshot: inout Snapshot) {
        let shape = Array(#"{"id":""#.utf8)
        var lineStart = 0
        for lineEnd in FileLedgerStore.lineEnds(in: bytes) {
            let line = Array(bytes[lineStart..<(lineEnd - 1)])
            lineStart = lineEnd
            snapshot.lines += 1
            if FileLedgerStore.isSkippedRecordLine(line) { continue }
            let shaped = line.count > shape.count + 2 && line.starts(with: shape) && line[line.count - 2] == 0x22 && line[line.count - 1] == 0x7D
            if !shaped {
                snapshot.firstShapeless = snapshot.firstShapeless ?? snapshot.lines
                continue
            }
            guard let (id, record) = FileLedgerStore.decodeSubjectLine(line) else {
                snapshot.undecodable.append(line)
                continue
            }
            let subject = SubjectID(id)
            if snapshot.records[subject] != nil { snapshot.repeated.insert(subject) } else { snapshot.records[subject] = record }
        }
        snapshot.covered += lineStart
    }
}

/// The last head line and event line a transaction of this store parsed at the log's tail, with
/// what they parsed to. Every transaction reads the tail's bytes again; only when a line's bytes
/// are exactly those parsed last time is the parse reused (parsing is a function of the bytes,
/// so nothing that reads differently can be answered from here). A long-running writer then
/// parses the head line and the last event once per commit it sees, not once per transaction
/// that finds them unchanged.
final class TailParseCache: Sendable {
    private let head = Mutex<(line: [UInt8], head: SignedHead)?>(nil)

    private let event = Mutex<(line: [UInt8], record: EventRecord)?>(nil)

    func head<E: Error>(_ line: [UInt8], parse: ([UInt8]) throws(E) -> SignedHead) throws(E) -> SignedHead {
        if let cached = head.withLock({ $0 }), cached.line == line { return cached.head }
        let parsed = try parse(line)
        head.withLock { $0 = (line, parsed) }
        return parsed
    }

    /// The head line a commit of this process just wrote, with the head it was made from: the
    /// next transaction reads exactly those bytes, and need not parse them back.
    func wrote(_ line: [UInt8], head signed: SignedHead) {
        head.withLock { $0 = (line, signed) }
    }

    func event<E: Error>(_ line: [UInt8], parse: ([UInt8]) throws(E) -> EventRecord) throws(E) -> EventRecord {
        if let cached = event.withLock({ $0 }), cached.line == line { return cached.record }
        let parsed = try parse(line)
        event.withLock { $0 = (line, parsed) }
        return parsed
    }
}

/// Whether this store has swept the folder's stray temporary files yet: once per process (per
/// store value), by its first write (``FileLedgerStore/sweepTemporaryFiles()``).
final class TemporaryFileSweep: Sendable {
    private let done = Mutex(false)

    /// True the first time only.
    func claim() -> Bool {
        done.withLock { swept in
            defer { swept = true }
            return !swept
        }
    }
}
