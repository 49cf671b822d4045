import LedgerFormat
import Dispatch
import Synchronization
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ConsentDomain

/// The embedded default storage: a ledger folder on the local file system.
///
/// ```
/// DIR/ledger.jsonl    the log, one canonical JSON event per line (append-only), each commit
///                     followed by its signed head line {"head":NOTE}, NOTE a checkpoint note of
///                     the log with a 'chain HASH' line (older folders keep it in DIR/head)
/// DIR/catalog.json    the catalogue's canonical bytes, pinned by the genesis event
/// DIR/public.key      the Ed25519 public key, hex
/// DIR/secret.key      the Ed25519 seed, hex, mode 0600 (kept by ``FileKeyStore``, not here)
/// DIR/subjects.jsonl  subject records: id, pseudonym salt, signature (the only personal data)
/// DIR/lock            flock(2) target: shared for readers, exclusive for the writer
/// DIR/lines.idx       derived: per event, 32 bytes: offset (u64 LE), length (u32 LE), 4 zero
///                     bytes, stream key (16 bytes)
/// DIR/tree.hashes     derived: the Merkle tree's stored hashes, 32 bytes each, in tlog order
/// DIR/subjects.map    derived: the subject map's records, 88 bytes each
/// DIR/checkpoints.jsonl  signed checkpoints the ledger issued, one {"note":…,"size":…} per line
/// DIR/recovered/      torn tails removed after a crash, kept for inspection
/// ```
///
/// Byte offsets, torn tails and the order of fsyncs are this type's alone: the ledger sees
/// entries by sequence number. Reads never write (a read-only mount or a full disk does not
/// stop them): derived data that a crash left behind is found behind, and entries past it are
/// located by reading the log's tail.
public struct FileLedgerStore: LedgerStore {
    public let directory: String
    /// Bytes of the log read at a time, at most (small in tests, so that lines cross chunks;
    /// atomic, as tests running beside that one read it). Each chunk's lines are a batch that
    /// the ledger checks on all cores. A megabyte (about 2,000 events) rather than four: the
    /// first read of a small ledger faults in every page of the buffer and of the batch's
    /// results, and a replay of 21,000 events took 25 ms instead of 34 (the median of 15 runs
    /// each, in turn); at a million events the two measured the same.
    static let logReadChunk = Atomic<Int>(1 << 20)

    /// How many bytes to read next, with `left` bytes to read: the reads of a range are of
    /// (nearly) equal sizes of at most `chunk`. A last short read made a last batch of a few
    /// hundred lines, checked while the whole batch before it was applied in order: one core
    /// idled for most of that time.
    static func readSize(left: UInt64, chunk: Int) -> Int {
        let chunk = UInt64(max(1, chunk))
        let reads = (left + chunk - 1) / chunk
        return reads <= 1 ? Int(left) : Int((left + reads - 1) / reads)
    }
    /// How long a transaction waits for the ledger's lock, held by another process's write (or,
    /// for a write, by readers), before it fails with `ConsentError.storage` naming the holder.
    public let lockTimeout: Duration
    /// Ten seconds: longer than any one command takes, short enough that a stuck holder is
    /// reported rather than waited for without end.
    public static let defaultLockTimeout: Duration = .seconds(10)
    /// What this store's transactions have read of subjects.jsonl (``SubjectFileCache``).
    let subjectCache = SubjectFileCache()
    /// The log tail's last parsed head line and event (``TailParseCache``).
    let tailCache = TailParseCache()
    let temporarySweep = TemporaryFileSweep()
    /// Descriptors of the folder's files kept open between transactions (``OpenFileCache``).
    let openFiles = OpenFileCache()
    /// Makes compact copies of `subjects.map` off the commit path, once this store has committed
    /// often enough to be a long-running writer (``SubjectMapCompactor``).
    package let mapCompactor = SubjectMapCompactor()

    public init(directory: String, lockTimeout: Duration = FileLedgerStore.defaultLockTimeout) {
        var d = directory
        while d.count > 1 && d.hasSuffix("/") { d.removeLast() }
        self.directory = d
        self.lockTimeout = lockTimeout
    }

    public var names: StorageNames {
        StorageNames(
            location: directory,
            derivedRepair: "rebuild it: delete \(indexPath), \(treePath) and \(subjectMapPath), and the next write recomputes them from the log",
            checkpoints: "checkpoints.jsonl", subjects: "subjects.jsonl")
    }

    public var keyStore: (any KeyStore)? { FileKeyStore(path: secretKeyPath) }

    var logPath: String { directory + "/ledger.jsonl" }
    var headPath: String { directory + "/head" }
    var catalogPath: String { directory + "/catalog.json" }
    var publicKeyPath: String { directory + "/public.key" }
    var secretKeyPath: String { directory + "/secret.key" }
    var subjectsPath: String { directory + "/subjects.jsonl" }
    var lockPath: String { directory + "/lock" }
    var indexPath: String { directory + "/lines.idx" }
    var treePath: String { directory + "/tree.hashes" }
    var subjectMapPath: String { directory + "/subjects.map" }
    var subjectIndexPath: String { directory + "/subjects.idx" }
    var checkpointsPath: String { directory + "/checkpoints.jsonl" }

    static let newline: UInt8 = 0x0A

    // MARK: - Creating

    /// The files a ledger folder holds; a folder with only these and no log is a failed init.
    static let ledgerFiles: Set<String> = ["catalog.json", "public.key", "secret.key", "head", "subjects.jsonl", "lock", "lines.idx", "tree.hashes", "subjects.map", "subjects.idx"]

    public func create(_ setup: LedgerSetup) throws {
        var intoExisting = false
        switch PosixFile.ownKind(of: directory) {
        case .symlink:
            throw ConsentError.alreadyExists("\(directory) is a symbolic link; init does not follow links: name the real folder")
        case .file:
            throw ConsentError.alreadyExists("\(directory) exists and is a file, not a ledger folder")
        case .directory:
            let entries = PosixFile.directoryEntries(directory)
            if entries.contains("ledger.jsonl") { throw ConsentError.alreadyExists("a ledger already exists at \(directory)") }
            // A staging folder of an init that never finished: it is not ours to delete.
            if let staging = entries.sorted().first(where: { $0.hasPrefix(".init-") }) {
                throw ConsentError.alreadyExists("\(directory)/\(staging) is left from an init that did not finish; remove it, then run init again")
            }
            // Empty, or left by an init that crashed while moving its files in: use it as it is
            // (keeping its owner, mode and labels). Only regular files with a ledger file's name
            // are replaced; a link or anything else stops init.
            guard entries.allSatisfy({ Self.ledgerFiles.contains($0) && PosixFile.isRegularFile(directory + "/" + $0) }) else {
                throw ConsentError.alreadyExists("\(directory) exists and is not empty; choose a new folder")
            }
            intoExisting = true
        case .missing:
            break
        }
        let parent = PosixFile.parent(of: directory)
        guard PosixFile.kind(of: parent) == .directory else {
            throw ConsentError.notFound(.file, "cannot create \(directory): folder \(parent) does not exist")
        }
        // Build the whole ledger under a fresh random name, then move it into place with the log
        // last: a crash during init leaves no ledger (no log) rather than half of one. The staging
        // folder is made with mkdir, which fails on anything already there (a planted link
        // included), and every file in it is created through its descriptor: init never follows
        // a link and never deletes what it did not create.
        let suffix = "init-" + Hex.encode(Sodium().randomBytes(8))
        let staging = intoExisting
            ? "\(directory)/.\(suffix)"
            : "\(parent)/.\(directory.split(separator: "/").last ?? "ledger").\(suffix)"
        guard mkdir(staging, 0o700) == 0 else { throw ConsentError.storage("cannot create \(staging): \(PosixFile.reason())") }
        let stagingFD = open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard stagingFD >= 0 else {
            let why = PosixFile.reason()
            rmdir(staging)
            throw ConsentError.storage("cannot open \(staging): \(why)")
        }
        defer { close(stagingFD) }
        var created: [String] = []
        func removeStaging() {
            for name in created { unlinkat(stagingFD, name, 0) }
            rmdir(staging)
        }
        func writeNew(_ bytes: [UInt8], _ name: String, mode: mode_t = 0o644) throws {
            let file = try PosixFile(in: stagingFD, name: name, displayPath: staging + "/" + name, flags: O_WRONLY | O_CREAT | O_EXCL, mode: mode)
            created.append(name)
            try file.write(bytes, at: 0)
            try file.sync()
            guard fchmod(file.fd, mode) == 0 else { throw ConsentError.storage("cannot set mode of \(staging)/\(name): \(PosixFile.reason())") }
        }
        do {
            try writeNew(setup.catalog, "catalog.json")
            try writeNew(Array((setup.publicKey.hex + "\n").utf8), "public.key")
            // The log: the genesis event and the head line that vouches for it.
            try writeNew(setup.genesis.line + setup.head.logLine + [Self.newline], "ledger.jsonl")
            try writeNew([], "subjects.jsonl", mode: 0o600)
            try writeNew([], "lock")
            var index: [UInt8] = []
            Self.encodeLocation(offset: 0, length: UInt32(setup.genesis.line.count - 1), key: setup.derived.streamKeys[0], into: &index)
            try writeNew(index, "lines.idx")
            try writeNew(setup.derived.treeHashes.flatMap(\.bytes), "tree.hashes")
            try writeNew(setup.derived.subjectMap?.records.bytes ?? [], "subjects.map")
            guard fsync(stagingFD) == 0 else { throw ConsentError.storage("cannot sync folder \(staging): \(PosixFile.reason())") }
            if intoExisting {
                let target = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard target >= 0 else { throw ConsentError.storage("cannot open \(directory): \(PosixFile.reason())") }
                defer { close(target) }
                for name in ["catalog.json", "public.key", "subjects.jsonl", "lock", "lines.idx", "tree.hashes", "subjects.map", "ledger.jsonl"] {
                    guard renameat(stagingFD, name, target, name) == 0 else {
                        throw ConsentError.storage("cannot move \(name) into \(directory): \(PosixFile.reason())")
                    }
                    created.removeAll { $0 == name }
                }
                guard fsync(target) == 0 else { throw ConsentError.storage("cannot sync folder \(directory): \(PosixFile.reason())") }
                rmdir(staging)
            } else {
                guard rename(staging, directory) == 0 else {
                    throw ConsentError.storage("cannot move \(staging) to \(directory): \(PosixFile.reason())")
                }
                try PosixFile.syncDirectory(parent)
            }
        } catch {
            removeStaging()
            throw error
        }
    }

    // MARK: - Transactions

    /// A folder without a log holds no ledger. Anything else named like the log (a folder, a
    /// FIFO, a link) is refused when it is opened, as a file that is not what it should be.
    func requireLedger() throws {
        guard PosixFile.ownKind(of: logPath) != .missing else {
            throw ConsentError.notFound(.ledger, "no ledger at \(directory) (run 'consentctl init' to create one)")
        }
    }

    public func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T {
        try withLock(exclusive: false) { try body(FileLedgerTransaction(store: self)) }
    }

    /// While a shared lock taken without waiting is held: the transactions `body` opens take
    /// their own shared locks, which no writer can hold meanwhile. Nil when a writer holds the
    /// lock, and when the lock file cannot be opened (the waiting path reports why).
    public func readingWithoutWaiting<T>(_ body: () throws -> T) throws -> T? {
        try requireLedger()
        guard let lent = try? openFiles.borrowLockFile(lockPath) else { return nil }
        defer { openFiles.returnLockFile(lent) }
        guard try lent.file.lock(exclusive: false, timeout: .zero) else { return nil }
        defer { lent.file.unlock() }
        return try body()
    }

    public func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        try withLock(exclusive: true) {
            if temporarySweep.claim() { sweepTemporaryFiles() }
            return try body(FileLedgerTransaction(store: self))
        }
    }

    /// Removes the temporary files that a writer killed part-way left in the folder (a new
    /// head, subject file or subject map that it never renamed into place). Run by a process's
    /// first write, under the lock, so that no living writer's file is taken: those are made
    /// only under the lock. A key file's temporary is made outside it (`key passphrase`), and so
    /// is a compact copy of the subject map (``SubjectMapCompactor``), so only one older than
    /// ten minutes is removed.
    func sweepTemporaryFiles() {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for name in PosixFile.directoryEntries(directory) {
            guard let base = Self.temporaryBase(name) else { continue }
            let path = directory + "/" + name
            // A key file's temporary is made outside the lock, and so is a compact copy of the
            // subject map made off the commit path (``SubjectMapCompactor``).
            if base.hasPrefix("secret.key") || base == "subjects.map.copy" {
                var st = stat()
                guard lstat(path, &st) == 0, now.tv_sec - st.st_mtim.tv_sec > 600 else { continue }
            }
            unlink(path)
        }
    }

    /// The file whose temporary `name` is, for the names `writeAtomically` gives temporary
    /// files of the folder's files (`head.tmp-0a1b2c3d4e5f` is one of `head`); nil for others.
    static func temporaryBase(_ name: String) -> String? {
        let bytes = Array(name.utf8), marker = Array(".tmp-".utf8)
        guard bytes.count > marker.count + 12 else { return nil }
        let cut = bytes.count - 12 - marker.count
        guard Array(bytes[cut..<(cut + marker.count)]) == marker else { return nil }
        let suffix = bytes[(cut + marker.count)...]
        guard suffix.allSatisfy({ isLowercaseHex($0) }) else { return nil }
        let base = String(decoding: bytes[..<cut], as: UTF8.self)
        return temporaryBases.contains(base) ? base : nil
    }

    static let temporaryBases: Set<String> = ["head", "subjects.jsonl", "subjects.idx", "subjects.map", "subjects.map.copy", "secret.key", "secret.key.next"]

    static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66)
    }

    private func withLock<T>(exclusive: Bool, _ body: () throws -> T) throws -> T {
        try requireLedger()
        let lent: OpenFileCache.LentLockFile
        do {
            lent = try openFiles.borrowLockFile(lockPath)
        } catch {
            // A read-only copy (an auditor's, say) can still be read without the lock; any other
            // failure to lock is an error.
            if exclusive || !(errno == EROFS || errno == EACCES) { throw error }
            return try body()
        }
        let file = lent.file
        guard try file.lock(exclusive: exclusive, timeout: lockTimeout) else {
            let holders = file.lockHolders()
            let who = holders.isEmpty ? "another process" : holders.joined(separator: " and ")
            let milliseconds = PosixFile.nanoseconds(lockTimeout) / 1_000_000
            let seconds = milliseconds % 1000 == 0 ? "\(milliseconds / 1000)" : "\(Double(milliseconds) / 1000)"
            throw ConsentError.storage("the ledger \(directory) is locked by \(who), and stayed locked for \(seconds) s (its lock file is \(lockPath)); nothing was \(exclusive ? "written" : "read"): try again once it is done, or wait longer (consentctl --lock-timeout SECONDS)")
        }
        defer {
            file.unlock()
            openFiles.returnLockFile(lent)
        }
        return try body()
    }

    // MARK: - Formats of the files

    static let locationSize = 32

    /// A lines.idx record: offset (u64 LE), length (u32 LE), 4 zero bytes, stream key.
    static func encodeLocation(offset: UInt64, length: UInt32, key: [UInt8], into out: inout [UInt8]) {
        for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: offset >> (8 * UInt64(i)))) }
        for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: length >> (8 * UInt32(i)))) }
        out += [0, 0, 0, 0]
        out += key
    }

    static func decodeLocation(_ b: ArraySlice<UInt8>) -> (offset: UInt64, length: UInt32, key: [UInt8]) {
        let s = b.startIndex
        var offset: UInt64 = 0
        for i in 0..<8 { offset |= UInt64(b[s + i]) << (8 * UInt64(i)) }
        var length: UInt32 = 0
        for i in 0..<4 { length |= UInt32(b[s + 8 + i]) << (8 * UInt32(i)) }
        return (offset, length, Array(b[(s + 16)..<(s + 32)]))
    }

    /// One line of subjects.jsonl: canonical `{"id":ID,"salt":"<32 hex>"}`, or with
    /// `,"sig":"<128 hex>"` before the `}`. The shape is fixed, so the salt and signature are
    /// read from the end and only the id is parsed as a JSON string.
    /// A line of spaces only: the remains of a record an erasure overwrote.
    /// The index just after each newline of `bytes`, found with memchr.
    static func lineEnds(in bytes: [UInt8]) -> [Int] {
        var ends: [Int] = []
        bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            var from = 0
            while from < buffer.count, let hit = memchr(base + from, Int32(newline), buffer.count - from) {
                let end = UnsafeRawPointer(hit).assumingMemoryBound(to: UInt8.self) - base + 1
                ends.append(end)
                from = end
            }
        }
        return ends
    }

    static func isErasedLine(_ line: some Collection<UInt8>) -> Bool {
        !line.isEmpty && line.allSatisfy { $0 == 0x20 }
    }

    /// Whether a line of `subjects.jsonl` is no record and no sign of damage, but skipped: an
    /// erased record's line of spaces, or a line that holds a zero byte, bytes of an append into
    /// the file's reserve that a crash cut short (a page of it never written), never
    /// acknowledged (`Spec/ledger-format.md`, subjects.jsonl).
    static func isSkippedRecordLine(_ line: some Collection<UInt8>) -> Bool {
        if line.first == 0x20, isErasedLine(line) { return true }
        return line.withContiguousStorageIfAvailable { !$0.isEmpty && memchr($0.baseAddress!, 0, $0.count) != nil } ?? line.contains(0)
    }

    static func decodeSubjectLine(_ line: [UInt8]) -> (String, SubjectRecord)? {
        let prefix = Array(#"{"id":"#.utf8), middle = Array(#","salt":""#.utf8), sigMiddle = Array(#"","sig":""#.utf8)
        var body = line[...]
        var signature: Signature?
        // ,"sig":"<128 hex>"} at the end: split it off, leaving ..."<salt>"}.
        let signedTail = sigMiddle.count + 128 + 2
        if body.count > signedTail, body[(body.endIndex - signedTail)..<(body.endIndex - 130)].elementsEqual(sigMiddle),
            body[body.endIndex - 2] == 0x22, body[body.endIndex - 1] == 0x7D
        {
            guard let bytes = line.withUnsafeBufferPointer({ Hex.decode(buffer: UnsafeBufferPointer(rebasing: $0[(body.endIndex - 130)..<(body.endIndex - 2)])) }), let sig = Signature(bytes: bytes) else { return nil }
            signature = sig
            body = body[body.startIndex..<(body.endIndex - signedTail + 1)] + [0x7D]
        }
        let plain = Array(body)
        let tail = middle.count + 32 + 2
        guard plain.count >= prefix.count + 2 + tail, plain.starts(with: prefix),
            plain[(plain.count - tail)..<(plain.count - 34)].elementsEqual(middle), plain[plain.count - 2] == 0x22, plain[plain.count - 1] == 0x7D,
            let salt = plain.withUnsafeBufferPointer({ Hex.decode(buffer: UnsafeBufferPointer(rebasing: $0[(plain.count - 34)..<(plain.count - 2)])) }), salt.count == 16
        else { return nil }
        let idBytes = Array(plain[prefix.count..<(plain.count - tail)])
        return idBytes.withUnsafeBufferPointer { buffer -> (String, SubjectRecord)? in
            var parser = CanonicalJSON.Parser(bytes: buffer, canonical: true)
            guard let id = try? parser.parseString(), parser.index == buffer.count else { return nil }
            return (id, SubjectRecord(salt: salt, signature: signature))
        }
    }

    static func encodeSubjectLines(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) -> [UInt8] {
        var lines: [UInt8] = []
        for (id, record) in records {
            var members: [String: JSONValue] = ["id": .string(id.text), "salt": .string(Hex.encode(record.salt))]
            if let signature = record.signature { members["sig"] = .string(signature.hex) }
            CanonicalJSON.serialize(.object(members), into: &lines)
            lines.append(newline)
        }
        return lines
    }

    static func trimmedText(_ bytes: [UInt8]) -> String {
        var b = bytes
        while let last = b.last, last == 0x0A || last == 0x0D || last == 0x20 { b.removeLast() }
        return String(decoding: b, as: UTF8.self)
    }

    /// 1-based number of the line that starts at or contains `offset` (for error messages).
    func lineNumber(atOffset offset: UInt64) -> Int {
        guard let file = try? PosixFile.regular(logPath, flags: O_RDONLY) else { return 0 }
        var line = 1
        var position: UInt64 = 0
        while position < offset {
            guard let chunk = try? file.read(at: position, count: Int(min(UInt64(4 << 20), offset - position))), !chunk.isEmpty else { break }
            line += chunk.reduce(0) { $0 + ($1 == Self.newline ? 1 : 0) }
            position += UInt64(chunk.count)
        }
        return line
    }

    /// Whether `haystack` contains `needle` (memchr for the first byte, then memcmp).
    static func contains(_ haystack: UnsafeRawBufferPointer, _ needle: [UInt8]) -> Bool {
        guard let first = needle.first, haystack.count >= needle.count, let base = haystack.baseAddress else { return needle.isEmpty }
        var start = 0
        let lastStart = haystack.count - needle.count
        return needle.withUnsafeBytes { n in
            while start <= lastStart {
                guard let hit = memchr(base + start, Int32(first), lastStart - start + 1) else { return false }
                let at = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(base + at, n.baseAddress!, needle.count) == 0 { return true }
                start = at + 1
            }
            return false
        }
    }
}

/// A transaction on a ledger folder, under its lock (shared to read, exclusive to write). It
/// keeps its files open and remembers where entries lie, for as long as it lasts.
final class FileLedgerTransaction: LedgerWriteTransaction {
    let store: FileLedgerStore
    private var log: PosixFile?
    private var index: PosixFile?
    /// The log state and the byte offset where its complete commits end.
    private var state: (log: LogState, end: UInt64)?
    /// The log file's size, and where its content ends: before the zero bytes reserved for
    /// appends (``reserveStep``). Read with ``state``.
    private var logSizes: (file: UInt64, content: UInt64)?
    /// Index records that may be used to find entries: below the head and the log's end.
    private var usableIndex: Int?
    /// Where the entries past the usable index lie (found by reading the log), from `usableIndex`.
    private var cachedTailLocations: [(offset: UInt64, length: UInt32)]?
    /// Whether the signed heads are lines of the log (the current layout) rather than a `head`
    /// file (the older layout, still read and written in its own way).
    private var headsInLog: Bool?

    init(store: FileLedgerStore) { self.store = store }

    var compactsSubjectMapInBackground: Bool { store.mapCompactor.inBackground }

    private func logFile() throws -> PosixFile {
        if let log { return log }
        let file = try store.openFiles.file(store.logPath, writable: false)
        log = file
        return file
    }

    /// A derived file for reading; nil when it does not exist (never created by a read).
    private func derivedFile(_ path: String) throws -> PosixFile? {
        do {
            return try store.openFiles.file(path, writable: false)
        } catch ConsentError.notFound {
            return nil
        }
    }

    private func indexFile() throws -> PosixFile? {
        if let index { return index }
        index = try derivedFile(store.indexPath)
        return index
    }

    private func integrity(_ problem: String, line: Int? = nil, seq: Int? = nil, kind: IntegrityKind = .log) -> ConsentError {
        .integrity(IntegrityFailure(kind, line: line, seq: seq.map { UInt64($0) }, problem: problem))
    }

    /// The layout: a folder without a `head` file keeps its heads in the log.
    func headIsInLog() -> Bool {
        if let headsInLog { return headsInLog }
        let inLog = PosixFile.ownKind(of: store.headPath) == .missing
        headsInLog = inLog
        return inLog
    }

    // MARK: Small files

    func metadata() throws -> (catalog: [UInt8], publicKey: PublicKey) {
        let catalog = try PosixFile.regular(store.catalogPath, flags: O_RDONLY).readAll()
        let text = FileLedgerStore.trimmedText(try PosixFile.regular(store.publicKeyPath, flags: O_RDONLY).readAll())
        guard let key = PublicKey(hex: text) else {
            throw integrity("\(store.publicKeyPath) does not hold a 64-digit lowercase hex Ed25519 public key", kind: .ledgerFiles)
        }
        return (catalog, key)
    }

    func readHead() throws -> RecordedHead {
        let file: PosixFile
        do {
            file = try PosixFile.regular(store.headPath, flags: O_RDONLY)
        } catch ConsentError.notFound {
            // The head is only ever replaced by rename, never removed: its absence is damage.
            throw integrity("\(store.headPath) is missing", kind: .head)
        }
        let bytes = try file.read(at: 0, count: 64 << 10)
        guard let head = RecordedHead.parse(String(decoding: bytes, as: UTF8.self)) else {
            throw integrity("\(store.headPath) is not a signed head (a checkpoint note with a 'chain' line) or 'SEQ HASH'", kind: .head)
        }
        return head
    }

    // MARK: The log

    func logState() throws -> LogState { try currentState().log }

    /// Where the log's content ends, before its reserve: as the log's state was read, or (a
    /// damaged log being examined, whose state cannot be read) from the file.
    private func logContentEnd() throws -> UInt64 {
        if let logSizes { return logSizes.content }
        let file = try logFile()
        return try file.contentEnd(size: try file.size())
    }

    private func currentState() throws -> (log: LogState, end: UInt64) {
        if let state { return state }
        // The older layout: the head file first, since a writer may append between the two
        // reads, and a log ahead of the head is the allowed direction, a head ahead of the log
        // is not. In the current layout the head is the log's own newest head line.
        let recordedHead = headIsInLog() ? nil : try readHead()
        let file = try logFile()
        let fileSize = try file.size()
        // The zero bytes at the end are space reserved for appends, never content.
        let size = try file.contentEnd(size: fileSize)
        guard size > 0 else { throw integrity("the log is empty: the genesis event is missing", line: 1, seq: 0) }
        // Read backwards in growing windows until the last complete commit is in view: the
        // first is small, since every transaction reads it and a usual commit (one command and
        // its head line) is about a kilobyte.
        var window = min(size, 8_192)
        while true {
            let start = size - window
            let bytes = try file.read(at: start, count: Int(window))
            let tail = try recordedHead.map { try tailState(bytes: bytes, windowStart: start, fileSize: size, recordedHead: $0) }
                ?? tailStateWithHeadLines(bytes: bytes, windowStart: start, fileSize: size)
            if let found = tail {
                guard found.0.last.event.seq >= found.0.recordedHead.seq else {
                    let last = found.0.last.event.seq
                    throw integrity("the log ends at seq \(last) but seq \(found.0.recordedHead.seq) was acknowledged: acknowledged events are missing (truncated log)", line: Int(last) + 2, seq: Int(last) + 1, kind: .head)
                }
                state = found
                logSizes = (fileSize, size)
                return found
            }
            guard window < size else { throw integrity("the log holds no complete event", line: 1, seq: 0) }
            window = min(size, window * 4)
        }
    }

    /// Works out the tail of a log that holds its heads. The recorded head is the newest head
    /// line. Complete lines after it must be events; those that make up complete commits (the
    /// last event of each carries the subject map's root, format 2, or ends its command, format
    /// 1) are kept, ahead of the head: a commit whose head line never reached the disk, or was
    /// cut, is signed event by event and loses nothing. The rest is torn: a commit a crash cut
    /// short, never acknowledged. Returns nil when the window is too small to see the newest
    /// head line and the event before it.
    private func tailStateWithHeadLines(bytes: [UInt8], windowStart: UInt64, fileSize: UInt64) throws -> (LogState, UInt64)? {
        let lineEnds = FileLedgerStore.lineEnds(in: bytes)
        guard !lineEnds.isEmpty else { return nil }
        func lineStart(_ k: Int) -> Int? { k > 0 ? lineEnds[k - 1] : (windowStart == 0 ? 0 : nil) }
        func offset(_ k: Int) -> UInt64 { windowStart + UInt64(lineStart(k) ?? 0) }
        func line(_ k: Int) -> [UInt8] { Array(bytes[lineStart(k)!..<(lineEnds[k] - 1)]) }
        func event(_ k: Int, after problem: String) throws -> EventRecord {
            do {
                return try store.tailCache.event(line(k)) { (bytes) throws(EventDecodingError) in try EventCodec.decode(line: bytes) }
            } catch {
                throw integrity("the line at byte offset \(offset(k)) (line \(store.lineNumber(atOffset: offset(k))))\(problem): \(error.problem)", kind: .log)
            }
        }
        func isHeadLine(_ k: Int) -> Bool {
            bytes[lineStart(k)!..<(lineEnds[k] - 1)].withContiguousStorageIfAvailable(SignedHead.isLogLine) == true
        }
        func holdsZero(_ range: Range<Int>) -> Bool {
            bytes.withUnsafeBufferPointer { memchr($0.baseAddress! + range.lowerBound, 0, range.count) != nil }
        }
        var k = lineEnds.count - 1
        while true {
            guard lineStart(k) != nil else { return nil }
            // The newest head line whose commit (its lines since the head line before it) holds
            // no zero byte: acknowledged lines never hold one, and a zero byte marks a write
            // into the log's reserve that a crash cut short, a page of it never written.
            if isHeadLine(k) {
                var p = k - 1
                while p >= 0, lineStart(p) != nil, !isHeadLine(p) { p -= 1 }
                if p >= 0, lineStart(p) == nil { return nil }
                if !holdsZero((p >= 0 ? lineEnds[p] : 0)..<lineEnds[k]) { break }
            }
            k -= 1
            if k < 0 {
                guard windowStart == 0 else { return nil }
                throw integrity("the log holds no head line: the signed head that ends every commit is missing", kind: .head)
            }
        }
        let head: SignedHead
        do {
            head = try store.tailCache.head(line(k)) { try SignedHead(logLine: $0) }
        } catch {
            throw integrity("the head line at byte offset \(offset(k)) (line \(store.lineNumber(atOffset: offset(k)))) is not a signed head: \(error)", kind: .head)
        }
        // The event it follows: the nearest event line before it (a head line of a commit of no
        // entries may stand between).
        var e = k - 1
        while e >= 0, lineStart(e) != nil, isHeadLine(e) { e -= 1 }
        if e < 0 {
            guard windowStart == 0 else { return nil }
            throw integrity("the log begins with a head line, not the genesis event", line: 1, seq: 0)
        }
        guard lineStart(e) != nil else { return nil }
        var last = try event(e, after: ", the event before the newest head line, is malformed")
        guard last.event.seq == head.seq else {
            throw integrity("the head line at byte offset \(offset(k)) covers \(head.checkpoint.size) entries, but follows the event of seq \(last.event.seq)", seq: Int(last.event.seq), kind: .head)
        }
        // After the head: events only, in sequence; complete commits kept, the rest torn. The
        // content ends at the first zero byte after the head: what follows it was written into
        // the reserve by a write a crash cut short, never acknowledged.
        var end = lineEnds[k]
        var tornLines = 0
        var previous = last.event.seq
        let firstZero = bytes[end...].firstIndex(of: 0) ?? bytes.count
        for j in (k + 1)..<lineEnds.count where lineEnds[j] <= firstZero {
            let next = try event(j, after: ", after the log's newest head line, is neither an event nor a head line")
            defer { previous = next.event.seq }
            guard next.event.seq == previous + 1 else {
                throw integrity("the events after the newest head line are not contiguous: seq \(next.event.seq) at byte offset \(offset(j))", seq: Int(next.event.seq))
            }
            tornLines += 1
            let endsCommit = next.event.seq == next.event.command.last && (next.version < 2 || next.stream.root != nil)
            if endsCommit {
                last = next
                end = lineEnds[j]
                tornLines = 0
            }
        }
        let endOffset = windowStart + UInt64(end)
        let torn: TornTail? = endOffset < fileSize
            ? TornTail(offset: endOffset, byteCount: Int(fileSize - endOffset), completeLines: tornLines)
            : nil
        return (LogState(size: Int(last.event.seq) + 1, last: last, head: .signed(head), torn: torn), endOffset)
    }

        /// The older layout (a `head` file): works out the tail from the last `bytes` of the
        /// log. Returns nil when the window is too small to see the start of the last command.
        private func tailState(bytes: [UInt8], windowStart: UInt64, fileSize: UInt64, recordedHead: RecordedHead) throws -> (LogState, UInt64)? {
            // Line boundaries inside the window: ends[i] is the index just after a newline.
            let lineEnds = FileLedgerStore.lineEnds(in: bytes)
            guard let lastEnd = lineEnds.last else { return nil }
            let partialBytes = bytes.count - lastEnd
            // Complete lines from the end: line k spans lineEnds[k-1]..<lineEnds[k] - 1.
            func lineStart(_ k: Int) -> Int? { k > 0 ? lineEnds[k - 1] : (windowStart == 0 ? 0 : nil) }
            func decodeLine(_ k: Int) throws -> EventRecord? {
                guard let s = lineStart(k) else { return nil }
                let line = Array(bytes[s..<(lineEnds[k] - 1)])
                do {
                    return try EventCodec.decode(line: line)
                } catch {
                    let offset = windowStart + UInt64(s)
                    throw ConsentError.integrity(IntegrityFailure(line: store.lineNumber(atOffset: offset), seq: nil, problem: "malformed event at byte offset \(offset): \(error.problem)"))
                }
            }
            var k = lineEnds.count - 1
            guard let newest = try decodeLine(k) else { return nil }
            var tornLines = 0
            var last = newest
            if newest.event.seq != newest.event.command.last {
                // The newest command is incomplete: walk back to its first event, then one more line.
                let first = newest.event.command.first
                while last.event.seq != first {
                    k -= 1
                    guard k >= 0 else { return nil }
                    guard let previous = try decodeLine(k) else { return nil }
                    guard previous.event.command == newest.event.command, previous.event.seq + 1 == last.event.seq else {
                        throw ConsentError.integrity(IntegrityFailure(line: store.lineNumber(atOffset: windowStart + UInt64(lineStart(k) ?? 0)), seq: previous.event.seq, problem: "the last command's events are not contiguous"))
                    }
                    last = previous
                }
                tornLines = lineEnds.count - k
                k -= 1
                guard k >= 0, let before = try decodeLine(k) else { return nil }
                last = before
            }
            // Format 2: a commit (a batch of commands) is atomic too, and ends with the event that
            // carries the subject map's root. Complete commands after the last such event belong to
            // a commit a crash cut short: they were never acknowledged.
            while last.version >= 2, last.stream.root == nil {
                tornLines = lineEnds.count - k
                k -= 1
                guard k >= 0, let before = try decodeLine(k) else { return nil }
                guard before.event.seq + 1 == last.event.seq else {
                    throw ConsentError.integrity(IntegrityFailure(line: store.lineNumber(atOffset: windowStart + UInt64(lineStart(k) ?? 0)), seq: before.event.seq, problem: "the last commit's events are not contiguous"))
                }
                last = before
            }
            let endOffset = windowStart + UInt64(lineEnds[k])
            let torn: TornTail? = (tornLines > 0 || partialBytes > 0)
                ? TornTail(offset: endOffset, byteCount: Int(fileSize - endOffset), completeLines: tornLines)
                : nil
            return (LogState(size: Int(last.event.seq) + 1, last: last, head: recordedHead, torn: torn), endOffset)
        }


    /// Where entry `seq` starts in the log: from lines.idx below the head, past it by reading
    /// the log's tail. Offsets read from lines.idx are range-checked, never trusted to add up.
    private func startOffset(of seq: Int) throws -> UInt64 {
        guard seq > 0 else { return 0 }
        let (log, end) = try currentState()
        let usable = try usableIndexCount()
        if seq < usable {
            let (offset, _, _) = try indexRecord(seq)
            guard offset < end else {
                throw integrity("lines.idx places entry \(seq) at offset \(offset), past the log's \(end) bytes (\(store.names.derivedRepair))", line: seq + 1, seq: seq, kind: .derivedData)
            }
            return offset
        }
        guard seq <= log.size else { throw integrity("the log has no entry \(seq)", line: seq + 1, seq: seq) }
        let tail = try tailLocations()
        guard seq - usable < tail.count else { return end }
        return tail[seq - usable].offset
    }

    /// One entry in two reads, when the line index places it: its record (offset and length),
    /// then the line and its newline. Anything else (past the usable index, a record that does
    /// not land on one whole event line) is read as a batch of one, which finds the line from the
    /// offset alone. Either way the ledger authenticates the bytes (by the Merkle tree): the
    /// index only says where to look.
    func entry(_ seq: Int) throws -> [UInt8] {
        guard seq > 0, seq < (try usableIndexCount()), let file = try indexFile() else { return try entryFromBatch(seq) }
        let size = FileLedgerStore.locationSize
        let record = try file.read(at: UInt64(seq) * UInt64(size), count: size)
        guard record.count == size else { return try entryFromBatch(seq) }
        let (offset, length, _) = FileLedgerStore.decodeLocation(record[...])
        let (_, end) = try currentState()
        // A length past one read chunk (a damaged index) is not allocated: the batch path reads
        // the line a chunk at a time.
        guard offset < end, UInt64(length) < end - offset, Int(length) < FileLedgerStore.logReadChunk.load(ordering: .relaxed) else { return try entryFromBatch(seq) }
        var line = try logFile().read(at: offset, count: Int(length) + 1)
        let whole = line.count == Int(length) + 1 && line.last == FileLedgerStore.newline
            && line.withUnsafeBufferPointer { memchr($0.baseAddress!, Int32(FileLedgerStore.newline), Int(length)) == nil && !SignedHead.isLogLine(UnsafeBufferPointer(rebasing: $0[..<Int(length)])) }
        guard whole else { return try entryFromBatch(seq) }
        line.removeLast()
        return line
    }

    private func usableIndexCount() throws -> Int {
        if let usableIndex { return usableIndex }
        let (log, _) = try currentState()
        let indexed = Int(try indexFile()?.size() ?? 0) / FileLedgerStore.locationSize
        // Records past the head may be from a write a crash cut short.
        let usable = min(indexed, log.size, Int(log.recordedHead.seq) + 1)
        usableIndex = usable
        return usable
    }

    private func indexRecord(_ seq: Int) throws -> (offset: UInt64, length: UInt32, key: [UInt8]) {
        let size = FileLedgerStore.locationSize
        guard let file = try indexFile() else { throw integrity("\(store.indexPath) is missing", kind: .derivedData) }
        let bytes = try file.read(at: UInt64(seq) * UInt64(size), count: size)
        guard bytes.count == size else { throw integrity("\(store.indexPath) is shorter than the log (\(store.names.derivedRepair))", seq: seq, kind: .derivedData) }
        return FileLedgerStore.decodeLocation(bytes[...])
    }

    /// Where the entries past the usable index lie, read from the log itself: each event line's
    /// offset and length, head lines skipped.
    private func tailLocations() throws -> [(offset: UInt64, length: UInt32)] {
        if let cachedTailLocations { return cachedTailLocations }
        let (_, end) = try currentState()
        let usable = try usableIndexCount()
        var position: UInt64 = 0
        if usable > 0 {
            let (offset, length, _) = try indexRecord(usable - 1)
            // Subtraction, not addition: a tampered offset near 2^64 must not trap.
            guard offset < end, UInt64(length) < end - offset else {
                throw integrity("lines.idx places entry \(usable - 1) at offset \(offset), length \(length), past the log's \(end) bytes (\(store.names.derivedRepair))", line: usable, seq: usable - 1, kind: .derivedData)
            }
            position = offset + UInt64(length) + 1
        }
        var locations: [(offset: UInt64, length: UInt32)] = []
        try forEachLines(from: position, to: end, eventsOnly: true) { buffer, bufferOffset, spans in
            for span in spans { locations.append((bufferOffset + UInt64(span.lowerBound), UInt32(span.count))) }
            return true
        }
        cachedTailLocations = locations
        return locations
    }

    /// Whether a line is a head line, in a layout whose log holds them (in the older layout
    /// every line is an event, and one that is not is damage the ledger reports).
    private func isHeadLine(_ buffer: [UInt8], _ span: Range<Int>) -> Bool {
        guard headIsInLog() else { return false }
        return buffer.withUnsafeBufferPointer { SignedHead.isLogLine(UnsafeBufferPointer(rebasing: $0[span])) }
    }

    /// Reads the log's lines in `[from, to)` in chunks of a few MiB: `visit` gets each chunk
    /// (with any partial line carried over from the one before), its offset in the file, and
    /// the spans of the complete lines in it, without their 0x0A (only its event lines when
    /// `eventsOnly`, in a layout with head lines); it returns false to stop. Only the bytes the
    /// spans cover are this chunk's lines: the buffer is reused, and longer than them.
    private func forEachLines(from: UInt64, to stop: UInt64, eventsOnly: Bool = false, _ visit: ([UInt8], UInt64, [Range<Int>]) throws -> Bool) throws {
        let skipHeads = eventsOnly && headIsInLog()
        let file = try logFile()
        let chunkSize = FileLedgerStore.logReadChunk.load(ordering: .relaxed)
        // Two buffers: the visitor's chunk in one while the next is read into the other, on
        // another thread, after the partial line the visitor's chunk ends with. Read between
        // the visits, on the visiting thread, the reads kept a core idle for a tenth of a
        // replay (the visitor's work, decoding a batch, runs on every core). A visitor that
        // keeps a buffer gets its own copy.
        var buffer = [UInt8](repeating: 0, count: Int(min(UInt64(chunkSize), stop - min(stop, from))))
        var spare: [UInt8] = []
        var offset = from
        var bufferOffset = from
        guard offset < stop else { return }
        var chunk = try LogChunk.read(file, into: &buffer, carryFrom: nil, at: offset, count: FileLedgerStore.readSize(left: stop - offset, chunk: chunkSize), skipHeads: skipHeads)
        // Made when a second chunk is to be read.
        var readQueue: DispatchQueue?
        while true {
            guard chunk.read > 0 else { throw integrity("the log ended while being read (at byte offset \(offset))") }
            offset += UInt64(chunk.read)
            var ahead: LogChunk.ReadAhead?
            if offset < stop {
                readQueue = readQueue ?? DispatchQueue(label: "ConsentLedger.log-read-ahead")
                let next = LogChunk.ReadAhead(file: file, buffer: spare, carry: buffer, carried: chunk.consumed..<chunk.filled, at: offset, count: FileLedgerStore.readSize(left: stop - offset, chunk: chunkSize), skipHeads: skipHeads, queue: readQueue!)
                spare = []
                next.start()
                ahead = next
            }
            let more: Bool
            do {
                more = try visit(buffer, bufferOffset, chunk.spans)
            } catch {
                ahead?.wait()
                throw error
            }
            guard let ahead else { return }
            let (next, nextBuffer) = ahead.wait()
            guard more else { return }
            spare = buffer
            buffer = nextBuffer
            bufferOffset += UInt64(chunk.consumed)
            chunk = try next.get()
        }
    }

    func entries(_ range: Range<Int>, batchSize: Int, indexedKeys: Bool, _ visit: (EntryBatch) throws -> Void) throws {
        guard !range.isEmpty else { return }
        // Up to the end of the complete commits, or (a damaged tail being examined) of the
        // complete lines.
        var stop: UInt64
        let offset: UInt64
        if range.lowerBound == 0, (try? currentState()) == nil {
            stop = try logContentEnd()
            offset = 0
        } else {
            let (log, end) = try currentState()
            offset = try startOffset(of: range.lowerBound)
            stop = range.upperBound <= log.size ? end : try logContentEnd()
            // Only the bytes of the entries asked for: up to where the next entry starts, when
            // lines.idx says so plausibly (else the lines are counted up to the end: the entries
            // found are the log's either way, and the ledger checks what they are).
            if range.upperBound < log.size, let next = try? startOffset(of: range.upperBound), next > offset, next <= end { stop = next }
        }
        var seq = range.lowerBound
        try forEachLines(from: offset, to: stop, eventsOnly: true) { buffer, bufferOffset, lines in
            let spans = lines.count <= range.upperBound - seq ? lines : Array(lines.prefix(range.upperBound - seq))
            var first = 0
            while first < spans.count {
                let last = min(spans.count, first + max(1, batchSize))
                let part = Array(spans[first..<last])
                let keys = indexedKeys ? try checkedIndexKeys(firstSeq: seq, spans: part, bufferOffset: bufferOffset) : nil
                try visit(EntryBatch(buffer: buffer, spans: part, firstSeq: seq, indexedKeys: keys))
                seq += part.count
                first = last
            }
            return seq < range.upperBound
        }
        if seq < range.upperBound, range.upperBound <= (state?.log.size ?? 0) {
            throw integrity("the log does not end with a newline where a commit should end", line: seq + 1)
        }
    }

    /// The index's stream keys for entries, after checking that its offsets and lengths are
    /// where the entries lie.
    private func checkedIndexKeys(firstSeq: Int, spans: [Range<Int>], bufferOffset: UInt64) throws -> [[UInt8]] {
        let size = FileLedgerStore.locationSize
        guard let file = try indexFile() else { throw integrity("\(store.indexPath) is missing", kind: .derivedData) }
        let bytes = try file.read(at: UInt64(firstSeq * size), count: spans.count * size)
        guard bytes.count == spans.count * size else {
            throw integrity("\(store.indexPath) is shorter than the log (\(store.names.derivedRepair))", seq: firstSeq, kind: .derivedData)
        }
        return try spans.enumerated().map { i, span in
            let record = FileLedgerStore.decodeLocation(bytes[(i * size)..<((i + 1) * size)])
            guard record.offset == bufferOffset + UInt64(span.lowerBound), Int(record.length) == span.count else {
                throw integrity("the line index entry differs from the log (\(store.names.derivedRepair))", line: firstSeq + i + 1, seq: firstSeq + i, kind: .derivedData)
            }
            return record.key
        }
    }

    // MARK: Derived data

    func derivedCounts() throws -> DerivedCounts {
        let sizes = try derivedSizes()
        return DerivedCounts(indexed: Int(sizes.index / UInt64(FileLedgerStore.locationSize)), treeHashes: Int64(sizes.tree / 32), subjectMapRecords: Int64(sizes.map / UInt64(SubjectMapRecord.size)))
    }

    /// The derived files' sizes in bytes, read once per transaction (a write reads them twice,
    /// for its view and for the subject map's records; under the lock no other process
    /// changes them) and forgotten at its commit.
    private var knownDerivedSizes: (index: UInt64, tree: UInt64, map: UInt64)?

    private func derivedSizes() throws -> (index: UInt64, tree: UInt64, map: UInt64) {
        if let knownDerivedSizes { return knownDerivedSizes }
        let sizes = (index: try indexFile()?.size() ?? 0, tree: try treeFile()?.size() ?? 0, map: try mapFile()?.size() ?? 0)
        knownDerivedSizes = sizes
        return sizes
    }

    // The derived files this transaction reads, each opened (its path checked) once: under the
    // lock no other process replaces them, and this transaction's own commit, which may, forgets
    // them.
    private var tree: PosixFile??
    private var map: PosixFile??

    private func treeFile() throws -> PosixFile? {
        if tree == nil { tree = .some(try derivedFile(store.treePath)) }
        return tree!
    }

    private func mapFile() throws -> PosixFile? {
        if map == nil { map = .some(try derivedFile(store.subjectMapPath)) }
        return map!
    }

    func treeHashes(_ indexes: [Int64]) throws -> [Digest] {
        func missing(_ index: Int64) -> ConsentError {
            integrity("\(store.treePath) has no hash at index \(index) (\(store.names.derivedRepair))", kind: .derivedData)
        }
        if let bad = indexes.first(where: { $0 < 0 || $0 >= Int64.max / 32 }) { throw missing(bad) }
        guard let file = try treeFile() else {
            if let first = indexes.first { throw missing(first) }
            return []
        }
        // Hashes within a few KB of each other are read in one call: a proof's lower siblings lie
        // next to its leaf, the proofs of a stream's events share them, and one read of 4 KB costs
        // what one of 32 bytes does.
        let span: Int64 = 128
        let order = indexes.indices.sorted { indexes[$0] < indexes[$1] }
        var hashes = [Digest](repeating: .zero, count: indexes.count)
        var bytes: [UInt8] = []
        var i = 0
        while i < order.count {
            let first = indexes[order[i]]
            var end = i + 1
            while end < order.count, indexes[order[end]] - first < span { end += 1 }
            let count = Int(indexes[order[end - 1]] - first + 1) * 32
            if bytes.count < count { bytes = [UInt8](repeating: 0, count: count) }
            let got = try file.read(at: UInt64(first) * 32, into: &bytes, count: count)
            try bytes.withUnsafeBytes { raw in
                for k in i..<end {
                    let offset = Int(indexes[order[k]] - first) * 32
                    guard offset + 32 <= got else { throw missing(indexes[order[k]]) }
                    hashes[order[k]] = Digest(copying: raw.baseAddress! + offset)
                }
            }
            i = end
        }
        return hashes
    }

    func subjectMapRecord(_ index: Int64) throws -> [UInt8] {
        let size = SubjectMapRecord.size
        guard index >= 0, index < Int64.max / Int64(size), let file = try mapFile() else {
            throw integrity("\(store.subjectMapPath) has no record \(index) (\(store.names.derivedRepair))", kind: .derivedData)
        }
        let bytes = try file.read(at: UInt64(index) * UInt64(size), count: size)
        guard bytes.count == size else { throw integrity("\(store.subjectMapPath) has no record \(index) (\(store.names.derivedRepair))", kind: .derivedData) }
        return bytes
    }

    func indexedEntries(of key: [UInt8], below limit: Int) throws -> [Int] {
        guard let file = try indexFile() else { return [] }
        let recordSize = FileLedgerStore.locationSize
        let size = min(try file.size(), UInt64(max(0, limit)) * UInt64(recordSize))
        let chunk = recordSize * 131_072
        var found: [Int] = []
        var position: UInt64 = 0
        var bytes = [UInt8](repeating: 0, count: chunk)
        while position < size {
            let count = try file.read(at: position, into: &bytes, count: Int(min(UInt64(chunk), size - position)))
            let records = count / recordSize
            bytes.withUnsafeBytes { raw in
                key.withUnsafeBytes { k in
                    for r in 0..<records where memcmp(raw.baseAddress! + r * recordSize + 16, k.baseAddress!, 16) == 0 {
                        found.append(Int(position) / recordSize + r)
                    }
                }
            }
            position += UInt64(records * recordSize)
            if records == 0 { break }
        }
        return found
    }

    // MARK: Subjects and checkpoints

    /// Destroys subject records (an erasure): each one's bytes are overwritten in place with
    /// spaces and synced, so the file's blocks no longer hold them, and then the file is
    /// rewritten without those lines (temporary file, sync, rename, folder sync). A crash between
    /// the two leaves lines of spaces, which readers skip and the next destruction drops.
    private func destroySubjectRecords(_ ids: Set<SubjectID>) throws {
        let file = try store.openFiles.file(store.subjectsPath, writable: true)
        let bytes = try file.readAll()
        var kept: [UInt8] = []
        var overwritten = false, blank = false
        var start = 0
        while let end = bytes[start...].firstIndex(of: FileLedgerStore.newline) {
            let line = Array(bytes[start..<end])
            if FileLedgerStore.isSkippedRecordLine(line) {
                blank = true
            } else if let (id, _) = FileLedgerStore.decodeSubjectLine(line), ids.contains(SubjectID(id)) {
                try file.write([UInt8](repeating: 0x20, count: line.count), at: UInt64(start))
                overwritten = true
            } else {
                kept += line
                kept.append(FileLedgerStore.newline)
            }
            start = end + 1
        }
        guard overwritten || blank else { return }
        if overwritten { try file.sync() }
        // The index holds a hash of each id: overwritten in place as well, before the index is
        // written afresh without them (after the commit), so that its blocks do not keep it.
        if overwritten, let index = try? store.openFiles.file(store.subjectIndexPath, writable: true),
           try SubjectIndexFile.erase(ids.map { SubjectIndexFile.key(quotedID: SubjectIndexFile.quoted($0)) }, in: index)
        {
            try index.sync()
        }
        try PosixFile.writeAtomically(kept, to: store.subjectsPath, mode: 0o600)
    }

    /// Replaces stored records (same id and salt, another signature) and removes those without a
    /// record, by rewriting the file whole (temporary file, sync, rename, folder sync): a crash
    /// leaves the old file or the new one.
    private func reviseSubjectRecords(_ records: [(subjectID: SubjectID, record: SubjectRecord?)]) throws {
        let replacements = Dictionary(records.map { ($0.subjectID, $0.record) }, uniquingKeysWith: { $1 })
        let bytes = try store.openFiles.file(store.subjectsPath, writable: false).readAll()
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var start = 0
        while let end = bytes[start...].firstIndex(of: FileLedgerStore.newline) {
            let line = Array(bytes[start..<end])
            if let (id, old) = FileLedgerStore.decodeSubjectLine(line), let revised = replacements[SubjectID(id)], revised?.salt ?? old.salt == old.salt {
                if let revised { out += FileLedgerStore.encodeSubjectLines([(SubjectID(id), revised)]) }
            } else if !FileLedgerStore.isSkippedRecordLine(line) {
                out += line
                out.append(FileLedgerStore.newline)
            }
            start = end + 1
        }
        try PosixFile.writeAtomically(out, to: store.subjectsPath, mode: 0o600)
    }

    func subjectRecords() throws -> [SubjectID: SubjectRecord] {
        let bytes = try store.openFiles.file(store.subjectsPath, writable: false).readAll()
        var records: [SubjectID: SubjectRecord] = [:]
        var lineNumber = 0
        // A trailing line without a newline was never acknowledged (a crash mid-write): ignored.
        for line in bytes.split(separator: FileLedgerStore.newline, omittingEmptySubsequences: false).dropLast() {
            lineNumber += 1
            if FileLedgerStore.isSkippedRecordLine(line) { continue }
            guard let (id, record) = FileLedgerStore.decodeSubjectLine(Array(line)) else {
                throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) line \(lineNumber) is not {\"id\":…,\"salt\":…[,\"sig\":…]}"))
            }
            guard records.updateValue(record, forKey: SubjectID(id)) == nil else {
                throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) line \(lineNumber) repeats subject id '\(id)'"))
            }
        }
        return records
    }

    func subjectRecord(_ id: SubjectID) throws -> SubjectRecord? {
        let file = try store.openFiles.file(store.subjectsPath, writable: false)
        // The line of `id` starts with exactly these bytes (canonical JSON): compared at each
        // line start, without parsing the other lines.
        var needle = Array(#"{"id":"#.utf8)
        CanonicalJSON.writeString(id.text, into: &needle)
        needle += Array(#","salt":""#.utf8)
        // The same answers as the scan below, from what the process has read.
        func fromCache() throws -> SubjectRecord?? {
            try store.subjectCache.withSnapshot(of: file) { snapshot throws -> SubjectRecord? in
                if snapshot.undecodable.contains(where: { $0.count > needle.count && $0.starts(with: needle) }) {
                    throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) has a malformed line for subject id '\(id.text)'"))
                }
                if snapshot.repeated.contains(id) {
                    throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) repeats subject id '\(id.text)'"))
                }
                if let record = snapshot.records[id] { return record }
                if let malformed = snapshot.firstShapeless {
                    throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) line \(malformed) is not a subject record, and subject id '\(id.text)' has none: it may have been that line"))
                }
                return nil
            }
        }
        // From memory when the process keeps the file; else through the index; else the cache
        // counts a lookup the index did not answer (from the third it keeps what it reads), or
        // every line is read.
        if store.subjectCache.isKeeping, let cached = try fromCache() { return cached }
        if let indexed = indexedSubjectRecord(id, in: file, needle: needle) { return indexed }
        if let cached = try fromCache() { return cached }
        store.subjectCache.noteScan()
        var found: SubjectRecord?
        var malformed: Int?
        var lineNumber = 0
        let shape = Array(#"{"id":""#.utf8)
        // One pass over raw bytes (memchr for line ends, memcmp for line starts), a chunk at a
        // time, complete lines only (a partial last line was never acknowledged): the file
        // holds every subject, and this runs for every command of a subject the process has not
        // seen.
        try file.forEachLines { all in
            let base = all.baseAddress!
            let end = all.count
            var lineStart = 0
            while lineStart < end {
                let lineEnd = UnsafeRawPointer(memchr(base + lineStart, Int32(FileLedgerStore.newline), end - lineStart)!).assumingMemoryBound(to: UInt8.self) - base
                let length = lineEnd - lineStart
                lineNumber += 1
                // A line of spaces is an erased record's remains; one holding a zero byte, an
                // unacknowledged append's.
                if FileLedgerStore.isSkippedRecordLine(UnsafeBufferPointer(start: base + lineStart, count: length)) {
                    lineStart = lineEnd + 1
                    continue
                }
                // A line not even shaped like a record might have been this subject's.
                if malformed == nil {
                    let shaped = length > shape.count + 2 && memcmp(base + lineStart, shape, shape.count) == 0 && base[lineEnd - 2] == 0x22 && base[lineEnd - 1] == 0x7D
                    if !shaped { malformed = lineNumber }
                }
                if length > needle.count, memcmp(base + lineStart, needle, needle.count) == 0 {
                    guard let (lineID, record) = FileLedgerStore.decodeSubjectLine(Array(UnsafeBufferPointer(start: base + lineStart, count: length))), SubjectID(lineID) == id else {
                        throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) has a malformed line for subject id '\(id.text)'"))
                    }
                    guard found == nil else {
                        throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) repeats subject id '\(id.text)'"))
                    }
                    found = record
                }
                lineStart = lineEnd + 1
            }
        }
        if found == nil, let malformed {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(store.subjectsPath) line \(malformed) is not a subject record, and subject id '\(id.text)' has none: it may have been that line"))
        }
        return found
    }

    /// The record of `id` at a line `subjects.idx` points at, if that line is a complete line of
    /// `subjects.jsonl` that starts as `id`'s line does (`needle`) and decodes as its record; nil
    /// otherwise, and the caller reads every line (``SubjectIndexFile``). A line that starts as
    /// `id`'s but does not decode is left to that reading too, which refuses it.
    private func indexedSubjectRecord(_ id: SubjectID, in file: PosixFile, needle: [UInt8]) -> SubjectRecord? {
        guard let index = try? store.openFiles.file(store.subjectIndexPath, writable: false) else { return nil }
        let quoted = Array(needle[#"{"id":"#.utf8.count..<(needle.count - #","salt":""#.utf8.count)])
        let offsets = SubjectIndexFile.offsets(for: SubjectIndexFile.key(quotedID: quoted), in: index)
        guard !offsets.isEmpty, let size = try? file.size() else { return nil }
        // After the id: the salt, the signature, their quotes and names, the brace and newline.
        let rest = 32 + #"","sig":""#.utf8.count + 128 + 3
        for offset in offsets where offset < size {
            // From the byte before the line (a newline, unless the line is the file's first).
            let from = offset == 0 ? 0 : offset - 1
            guard let bytes = try? file.read(at: from, count: Int(min(size - from, UInt64(1 + needle.count + rest)))) else { return nil }
            // The file may have been cut since its size was read: `bytes` may be short.
            guard let line = SubjectIndexFile.completeLine(in: bytes, at: Int(offset - from), atFileStart: offset == 0, startingWith: needle),
                  let (lineID, record) = FileLedgerStore.decodeSubjectLine(Array(line)), SubjectID(lineID) == id
            else { continue }
            return record
        }
        return nil
    }

    func heads(_ visit: (SignedHead) throws -> Void) throws {
        let (log, end) = try currentState()
        guard headIsInLog() else {
            if let head = log.signedHead { try visit(head) }
            return
        }
        var entries = 0
        try forEachLines(from: 0, to: end) { buffer, bufferOffset, spans in
            for span in spans {
                guard isHeadLine(buffer, span) else {
                    entries += 1
                    continue
                }
                let at = bufferOffset + UInt64(span.lowerBound)
                let head: SignedHead
                do {
                    head = try SignedHead(logLine: Array(buffer[span]))
                } catch {
                    throw integrity("the head line at byte offset \(at) (line \(store.lineNumber(atOffset: at))) is not a signed head: \(error)", kind: .head)
                }
                guard head.checkpoint.size == Int64(entries) else {
                    throw integrity("the head line at byte offset \(at) (line \(store.lineNumber(atOffset: at))) covers \(head.checkpoint.size) entries but follows \(entries)", seq: entries, kind: .head)
                }
                try visit(head)
            }
            return true
        }
    }

    func newestCheckpoint() throws -> IssuedCheckpoint? {
        let file: PosixFile
        do {
            file = try PosixFile.regular(store.checkpointsPath, flags: O_RDONLY)
        } catch ConsentError.notFound {
            return nil
        }
        // The last complete line, read from the end: a record is a note and a size, far less
        // than the block read (a longer last line is read whole).
        let size = try file.size()
        var block = min(size, 64 << 10)
        while true {
            let tail = try file.read(at: size - block, count: Int(block))
            guard let end = tail.lastIndex(of: FileLedgerStore.newline) else { return nil }
            if let start = tail[..<end].lastIndex(of: FileLedgerStore.newline) ?? (block == size ? -1 : nil) {
                let line = Array(tail[(start + 1)..<end])
                guard case .object(let members)? = try? CanonicalJSON.parse(line, canonical: true), members.count == 2,
                    case .string(let note)? = members["note"], case .int(let recorded)? = members["size"], recorded >= 0
                else {
                    throw integrity("the last line of \(store.checkpointsPath) is not {\"note\":…,\"size\":…}", kind: .head)
                }
                return IssuedCheckpoint(size: recorded, note: note)
            }
            block = min(size, block * 2)
        }
    }

    func checkpoints() throws -> [IssuedCheckpoint] {
        let bytes: [UInt8]
        do {
            bytes = try PosixFile.regular(store.checkpointsPath, flags: O_RDONLY).readAll()
        } catch ConsentError.notFound {
            return []
        }
        // A later line of a size replaces an earlier one: the same checkpoint, witnessed since.
        var checkpoints: [Int64: IssuedCheckpoint] = [:]
        var lineNumber = 0
        for line in bytes.split(separator: FileLedgerStore.newline, omittingEmptySubsequences: false).dropLast() {
            lineNumber += 1
            guard case .object(let members)? = try? CanonicalJSON.parse(Array(line), canonical: true), members.count == 2,
                case .string(let note)? = members["note"], case .int(let size)? = members["size"], size >= 0
            else {
                throw integrity("\(store.checkpointsPath) line \(lineNumber) is not {\"note\":…,\"size\":…}", kind: .head)
            }
            checkpoints[size] = IssuedCheckpoint(size: size, note: note)
        }
        // Lines are in the order they were recorded, which concurrent writers may interleave.
        return checkpoints.values.sorted { $0.size < $1.size }
    }

    // MARK: Writing

    /// Derived files are synced (for a crash of the machine, not just the process) when a commit
    /// takes the log past a multiple of this many entries, or rewrites entries it did not add: a
    /// reader after a power loss catches up at most about this many entries from the log.
    static let derivedSyncInterval = 16_384

    /// In order: the new subject records, synced; then the log (a torn tail cut off first, kept
    /// in `recovered/`) with the commit's entries and its signed head line, in one write and one
    /// `fdatasync`, which acknowledges the commit; then the derived data, written but synced only
    /// every ``derivedSyncInterval`` entries (derived data a crash leaves behind is caught up from
    /// the log). In the older layout (a `head` file) the derived data is synced and the head
    /// renamed into place after the log, as that layout was written.
    func commit(_ commit: LedgerCommit) throws -> String? {
        let (log, end) = try currentState()
        guard commit.firstSeq == log.size else {
            throw ConsentError.conflict("a commit at entry \(commit.firstSeq) does not follow the log's \(log.size) entries: another writer appended first; nothing was written")
        }
        try commit.checkHead(following: log.size, at: store.directory)
        let inLog = headIsInLog()
        var headLine: [UInt8] = []
        if inLog, let head = commit.head, !(commit.entries.isEmpty && head == log.signedHead) {
            headLine = head.logLine + [FileLedgerStore.newline]
        }
        // Where each entry the index is rewritten for lies: old entries from the log, new ones
        // from the append.
        let derived = commit.derived
        var locations: [(offset: UInt64, length: UInt32)] = []
        if derived.indexFrom < log.size, !derived.streamKeys.isEmpty {
            locations = try entryLocations(derived.indexFrom..<min(log.size, derived.indexFrom + derived.streamKeys.count))
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(commit.entries.reduce(headLine.count) { $0 + $1.count + 1 })
        for entry in commit.entries {
            locations.append((end + UInt64(bytes.count), UInt32(entry.count)))
            bytes += entry
            bytes.append(FileLedgerStore.newline)
        }
        bytes += headLine
        // Cutting a torn tail must never drop events a signed checkpoint covers: only a crash
        // leaves a torn tail, and nothing unfinished was ever signed.
        if log.torn != nil, let signed = try checkpoints().map(\.size).max(), signed > Int64(log.size) {
            throw integrity("the log's complete commits end at \(log.size) entries, but \(store.checkpointsPath) records a signed checkpoint of \(signed): the bytes after them are not a torn tail; refusing to cut them", kind: .head)
        }
        // Where the new subject records start: a commit that fails before its entries are
        // durable takes them out again, so that a failed command (a full disk) changes nothing.
        // (A crash in between leaves them: records without events, which are allowed.)
        var recordsFrom: UInt64?
        var recordsSize: UInt64 = 0
        let recordLines = FileLedgerStore.encodeSubjectLines(commit.subjects)
        if !commit.subjects.isEmpty {
            (recordsFrom, recordsSize) = try appendRecords(recordLines)
        }
        func withdrawRecords() {
            guard let recordsFrom, let subjects = try? store.openFiles.file(store.subjectsPath, writable: true) else { return }
            // Its reserve as it was: zeros up to the size it had.
            try? subjects.truncate(to: recordsFrom)
            if recordsSize > recordsFrom { try? subjects.truncate(to: recordsSize) }
            _ = try? subjects.sync()
        }
        if !commit.revisedSubjects.isEmpty { try reviseSubjectRecords(commit.revisedSubjects) }
        let file: PosixFile
        do {
            file = try store.openFiles.file(store.logPath, writable: true)
        } catch {
            withdrawRecords()
            throw error
        }
        if !bytes.isEmpty {
            do {
                try append(bytes, to: file, at: end, line: log.size + 1)
            } catch let failed as PosixFile.AppendFailed {
                // Only once the log is surely back where it was: entries that may still be
                // there need their subjects' records.
                if failed.cutBack { withdrawRecords() }
                throw failed.error
            } catch {
                withdrawRecords()
                throw error
            }
            if let head = commit.head, !headLine.isEmpty { store.tailCache.wrote(Array(headLine.dropLast()), head: head) }
        } else if !inLog, log.size > Int(log.recordedHead.seq) + 1 {
            // Entries past the head may be a dead writer's, never synced: durable before the
            // derived data vouches for them.
            try file.sync()
        }
        // A large commit's head line is written once more, alone, once the commit is durable
        // (so never before the lines it vouches for): a reader finds the log's end from the
        // newest head line and the lines since the one before it, which are then that line
        // alone, not the whole commit (a bulk import's megabytes, read by every reader until
        // the next write). Not part of the commit: when it fails, the commit stands, with a
        // warning, and a crash that tears it leaves a torn tail the next write cuts.
        var repeatFailure: (any Error)?
        if inLog, !headLine.isEmpty, bytes.count > Self.headRepeatedAfter {
            do {
                logSizes = nil
                try append(headLine, to: file, at: end + UInt64(bytes.count), line: log.size + commit.entries.count + 1)
            } catch {
                repeatFailure = error
            }
        }
        // An erasure's event is durable: now the record goes.
        if !commit.erasedSubjects.isEmpty { try destroySubjectRecords(Set(commit.erasedSubjects)) }
        updateSubjectIndex(appended: recordLines, at: recordsFrom, rewritten: !commit.revisedSubjects.isEmpty || !commit.erasedSubjects.isEmpty)
        // Nothing cached describes the log any more. The derived files are as they were until
        // they are written below: their sizes tell whether a write must cut what lies after it.
        let derivedSizesBefore = knownDerivedSizes
        knownDerivedSizes = nil
        state = nil
        logSizes = nil
        usableIndex = nil
        cachedTailLocations = nil
        index = nil
        tree = nil
        map = nil
        do {
            let newSize = log.size + commit.entries.count
            let interval = Self.derivedSyncInterval
            let sync = !inLog || newSize / interval != log.size / interval || derived.indexFrom < log.size || derived.treeFrom < Int64(MerkleTree.storedHashCount(Int64(log.size)))
            try writeDerived(derived, locations: locations, sync: sync, sizesBefore: derivedSizesBefore)
            if !inLog, let head = commit.head { try PosixFile.writeAtomically(Array(head.note.utf8), to: store.headPath) }
            if let repeatFailure { throw repeatFailure }
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// Brings `subjects.idx` up to date after a commit: the records it appended added in place,
    /// or the index written afresh when the file was rewritten, or the index describes another
    /// size of it (a commit of a writer that crashed before updating it, or none yet). A hint
    /// (``SubjectIndexFile``): a failure here leaves it stale, which costs reads of every line
    /// until a commit writes it afresh, and is not the command's.
    private func updateSubjectIndex(appended lines: [UInt8], at offset: UInt64?, rewritten: Bool) {
        guard rewritten || offset != nil, let subjects = try? store.openFiles.file(store.subjectsPath, writable: false) else { return }
        if !rewritten, let offset, let index = try? store.openFiles.file(store.subjectIndexPath, writable: true) {
            let added = lines.withUnsafeBytes { SubjectIndexFile.entries(ofLines: $0, at: offset) }
            if (try? SubjectIndexFile.insert(added, into: index, covered: offset, newCovered: offset + UInt64(lines.count))) == true { return }
        }
        guard let bytes = try? subjects.readAll() else { return }
        try? PosixFile.writeAtomically(SubjectIndexFile.build(from: bytes), to: store.subjectIndexPath, mode: 0o600)
    }

    /// Where entries of the log lie: from lines.idx where it may be used, the rest read from
    /// the log.
    private func entryLocations(_ range: Range<Int>) throws -> [(offset: UInt64, length: UInt32)] {
        let usable = try usableIndexCount()
        let (_, end) = try currentState()
        var locations: [(offset: UInt64, length: UInt32)] = []
        locations.reserveCapacity(range.count)
        for seq in range.lowerBound..<min(range.upperBound, usable) {
            let (offset, length, _) = try indexRecord(seq)
            guard offset < end, UInt64(length) < end - offset else {
                throw integrity("lines.idx places entry \(seq) at offset \(offset), length \(length), past the log's \(end) bytes (\(store.names.derivedRepair))", line: seq + 1, seq: seq, kind: .derivedData)
            }
            locations.append((offset, length))
        }
        if range.upperBound > usable {
            let tail = try tailLocations()
            let from = max(range.lowerBound, usable) - usable
            guard range.upperBound - usable <= tail.count else { throw integrity("the log has fewer entries than \(range.upperBound)", seq: range.upperBound - 1) }
            locations += tail[from..<(range.upperBound - usable)]
        }
        return locations
    }

    /// The log (of the current layout) keeps zero bytes after its content, reserved for
    /// appends, and grows in steps of this many bytes. An append into the reserve leaves the
    /// file's size as it was, so its `fdatasync` writes the data and flushes the disk's cache;
    /// an append that changes the size also writes the inode first, a third write waited for
    /// in turn (on ext4, 0.09 against 0.145 ms for a kilobyte on the bench's machine), and so
    /// does one after the file's times were read (``PosixFile/Identity``). Readers take the
    /// content to end before the zeros (`Spec/ledger-format.md`, "The log file").
    static let reserveStep: UInt64 = 32 << 10

    /// A commit of more bytes than this has its head line written once more after it (see
    /// ``commit(_:)``). A group commit of 16 writers (about 20 KB) stays below it and pays no
    /// second sync; a reader finds the end of a commit below it in windows of at most 128 KiB.
    static let headRepeatedAfter = 64 << 10

    private func append(_ bytes: [UInt8], to file: PosixFile, at expected: UInt64, line: Int) throws {
        let size = try file.size()
        if size < expected {
            throw integrity("the log is shorter than when it was read (\(size) < \(expected) bytes); refusing to append", line: line)
        }
        // As this transaction read the log, unless the file changed size since.
        let content = try logSizes.flatMap { $0.file == size ? $0.content : nil } ?? file.contentEnd(size: size)
        var reserved = size
        if content > expected {
            // A torn tail from a crash: keep its bytes for inspection, then cut it off, with
            // the reserve after it.
            let torn = try file.read(at: expected, count: Int(content - expected))
            try saveRecovered(torn, offset: expected)
            try file.truncate(to: expected)
            try file.sync()
            reserved = expected
        }
        let end = expected + UInt64(bytes.count)
        // The older layout is written as it was: appended, without a reserve.
        if end <= reserved || !headIsInLog() {
            try file.appendDurably(bytes, at: expected, restoring: reserved)
        } else {
            // Past the reserve: a new one, written and synced with the entries (the size
            // changes once, for the next appends of about a step).
            try file.appendDurably(bytes + Self.newReserve(after: end), at: expected, restoring: reserved)
        }
    }

    /// The zero bytes of a new reserve after content that ends at `end`: up to the next
    /// multiple of ``reserveStep`` (at least one).
    static func newReserve(after end: UInt64) -> Repeated<UInt8> {
        repeatElement(0, count: Int((end / reserveStep + 1) * reserveStep - end))
    }

    /// `sizesBefore`, when this transaction read them: the files' sizes before the commit, so
    /// that a file known to end where the new data does is not asked its size again.
    private func writeDerived(_ derived: DerivedUpdate, locations: [(offset: UInt64, length: UInt32)], sync: Bool, sizesBefore: (index: UInt64, tree: UInt64, map: UInt64)?) throws {
        let size = FileLedgerStore.locationSize
        // The index may stay behind the log (a copy appending in parts), never run past it.
        guard derived.streamKeys.count <= locations.count else {
            throw ConsentError.storage("\(derived.streamKeys.count) stream keys for \(locations.count) entries from entry \(derived.indexFrom)")
        }
        let index = try store.openFiles.file(store.indexPath, writable: true, create: true)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(locations.count * size)
        for (location, key) in zip(locations, derived.streamKeys) {
            FileLedgerStore.encodeLocation(offset: location.offset, length: location.length, key: key, into: &bytes)
        }
        let indexEnd = UInt64(derived.indexFrom * size + bytes.count)
        try index.write(bytes, at: UInt64(derived.indexFrom * size))
        if sizesBefore.map({ $0.index > indexEnd }) ?? true, try index.size() > indexEnd { try index.truncate(to: indexEnd) }
        if sync { try index.sync() }
        let tree = try store.openFiles.file(store.treePath, writable: true, create: true)
        var hashes: [UInt8] = []
        hashes.reserveCapacity(derived.treeHashes.count * 32)
        for h in derived.treeHashes { hashes += h.bytes }
        let treeEnd = UInt64(derived.treeFrom) * 32 + UInt64(hashes.count)
        try tree.write(hashes, at: UInt64(derived.treeFrom) * 32)
        if sizesBefore.map({ $0.tree > treeEnd }) ?? true, try tree.size() > treeEnd { try tree.truncate(to: treeEnd) }
        if sync { try tree.sync() }
        if let subjectMap = derived.subjectMap, subjectMap.at == 0 {
            // A whole map (a rebuild, or a compaction): written aside and renamed over the old
            // one, so a crash leaves one or the other, never a mixture.
            try PosixFile.writeAtomically(subjectMap.records.bytes, to: store.subjectMapPath)
        } else if let subjectMap = derived.subjectMap {
            let map = try store.openFiles.file(store.subjectMapPath, writable: true, create: true)
            let start = UInt64(subjectMap.at) * UInt64(SubjectMapRecord.size)
            let bytes = subjectMap.records.bytes
            try map.write(bytes, at: start)
            let end = start + UInt64(bytes.count)
            if sizesBefore.map({ $0.map > end }) ?? true, try map.size() > end { try map.truncate(to: end) }
            if sync { try map.sync() }
            if subjectMap.records.count > 0 {
                store.mapCompactor.appended(to: map, path: store.subjectMapPath, count: subjectMap.at + Int64(subjectMap.records.count), last: subjectMap.records[subjectMap.records.count - 1])
            }
        }
    }

    private func saveRecovered(_ bytes: [UInt8], offset: UInt64) throws {
        let folder = store.directory + "/recovered"
        if PosixFile.kind(of: folder) == .missing {
            guard mkdir(folder, 0o755) == 0 else { throw ConsentError.storage("cannot create \(folder): \(PosixFile.reason())") }
            try PosixFile.syncDirectory(store.directory)
        }
        var n = 0
        var path = "\(folder)/torn-at-\(offset).bin"
        while PosixFile.kind(of: path) != .missing {
            n += 1
            path = "\(folder)/torn-at-\(offset).\(n).bin"
        }
        try PosixFile.writeNew(bytes, to: path)
        try PosixFile.syncDirectory(folder)
    }

    /// Appends subject records to `subjects.jsonl` and syncs it. Like the log, the file keeps
    /// zero bytes reserved after its lines, and records are written over them where the lines
    /// end: the sync of an append that leaves the file's size as it was writes the data alone,
    /// not the inode too (``reserveStep``). A command for a new subject syncs its record before
    /// its events, so this is half of such a command's syncs. A partial line a crash left at the
    /// end (never acknowledged) is cut off first. Returns the offset the lines were written at
    /// and the file's size before.
    private func appendRecords(_ lines: [UInt8]) throws -> (offset: UInt64, sizeBefore: UInt64) {
        let file = try store.openFiles.file(store.subjectsPath, writable: true, create: false)
        var size = try file.size()
        var end = try file.contentEnd(size: size)
        if end > 0, try file.read(at: end - 1, count: 1) != [FileLedgerStore.newline] {
            let bytes = try file.read(at: 0, count: Int(end))
            end = UInt64(bytes.lastIndex(of: FileLedgerStore.newline).map { $0 + 1 } ?? 0)
            try file.truncate(to: end)
            size = end
        }
        var bytes = lines
        let stop = end + UInt64(lines.count)
        // Past the reserve: a new one, in the same write and sync.
        if stop > size { bytes += Self.newReserve(after: stop) }
        do {
            try file.appendDurably(bytes, at: end, restoring: size)
        } catch {
            throw error.error
        }
        return (end, size)
    }

    /// Appends complete lines to a line file and syncs it, first cutting off a partial line that
    /// a crash left (it was never acknowledged). Returns the offset the lines were written at.
    private func appendLines(_ lines: [UInt8], to path: String, create: Bool) throws -> UInt64 {
        let file = try store.openFiles.file(path, writable: true, create: create)
        var size = try file.size()
        if size > 0, try file.read(at: size - 1, count: 1) != [FileLedgerStore.newline] {
            let bytes = try file.readAll()
            let keep = bytes.lastIndex(of: FileLedgerStore.newline).map { $0 + 1 } ?? 0
            try file.truncate(to: UInt64(keep))
            size = UInt64(keep)
        }
        do {
            try file.appendDurably(lines, at: size)
        } catch {
            throw error.error
        }
        return size
    }

    /// O(1) for a checkpoint of the growing log: one of its size, if recorded, is the newest
    /// line. Only a checkpoint older than the newest is looked for in the whole file. Then one
    /// append and one sync (and the folder's, when the file is new).
    ///
    /// The newest line is kept the largest size's: a line of an older size (a checkpoint that
    /// witnesses cosigned after a newer one was recorded) is followed, in the same append, by
    /// the largest size's line again, so that the next checkpoint is still decided by the last
    /// line alone and never appended over a cosigned one of its size.
    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        let newest = try newestCheckpoint()
        if let newest, newest.size >= checkpoint.size {
            let recorded = newest.size == checkpoint.size ? [newest] : try checkpoints().filter { $0.size == checkpoint.size }
            if recorded.contains(where: { $0.note == checkpoint.note || !checkpoint.replaces }) { return }
        }
        var lines: [UInt8] = []
        for record in [checkpoint] + (newest.map { $0.size > checkpoint.size ? [$0] : [] } ?? []) {
            CanonicalJSON.serialize(.object(["note": .string(record.note), "size": .int(record.size)]), into: &lines)
            lines.append(FileLedgerStore.newline)
        }
        // The file may be new: sync the folder so that its name is durable too.
        if try appendLines(lines, to: store.checkpointsPath, create: true) == 0 { try PosixFile.syncDirectory(store.directory) }
    }
}

/// The signing key in a file of its own (`Spec/key-file.md`), mode 0600.
public struct FileKeyStore: KeyStore {
    public let path: String

    public init(path: String) { self.path = path }

    public var keyLocation: String { path }

    /// Where a rotation keeps the new key until the event that names it is committed.
    public var pendingPath: String { path + ".next" }

    public func loadKeyFile() throws -> SecretBytes {
        try Self.loadKeyFile(at: path)
    }

    static func loadKeyFile(at path: String) throws -> SecretBytes {
        let file: PosixFile
        do {
            // Never through a symlink (someone else's file), never blocking on a FIFO.
            file = try PosixFile(path: path, flags: O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        } catch ConsentError.notFound {
            throw ConsentError.notFound(.signingKey, "no signing key at \(path): this ledger can be read and verified, but not written")
        } catch ConsentError.storage where PosixFile.ownKind(of: path) == .symlink {
            throw ConsentError.invalidRequest("the signing key \(path) is a symbolic link; it must be a file of its own, readable by its owner only: replace the link with the file it names (mv \"$(readlink -f \(path))\" \(path))")
        }
        try Self.checkPrivate(file)
        // One byte more than a key file may have, so that an over-long file is seen as such.
        var raw = try file.read(at: 0, count: SigningKeyFile.maximumSize + 1)
        defer { zeroize(&raw) }
        return SecretBytes(copying: raw)
    }

    /// The key must be a regular file that only its owner can read or write: a key that group
    /// or others can read may already be copied, and one they can write may be swapped.
    static func checkPrivate(_ file: PosixFile) throws {
        var st = stat()
        guard fstat(file.fd, &st) == 0 else { throw ConsentError.storage("cannot stat \(file.path): \(PosixFile.reason())") }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw ConsentError.invalidRequest("the signing key \(file.path) is not a regular file; put the key file there (mode 0600)")
        }
        let mode = st.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw ConsentError.invalidRequest("the signing key \(file.path) can be read or written by group or others (mode 0\(String(mode, radix: 8))); make it private to its owner: chmod 600 \(file.path)")
        }
    }

    public func saveKeyFile(_ file: SecretBytes) throws {
        var bytes = file.withUnsafeBytes { Array($0) }
        defer { zeroize(&bytes) }
        do {
            try PosixFile.writeNew(bytes, to: path, mode: 0o600)
        } catch ConsentError.storage(let why) where PosixFile.kind(of: path) != .missing {
            throw ConsentError.alreadyExists("\(path) already exists (\(why)); a new ledger's key is never written over another")
        }
        try PosixFile.syncDirectory(PosixFile.parent(of: path))
    }

    public func replaceKeyFile(_ file: SecretBytes) throws {
        // The old key must be there and be private: replacing is for the same key, sealed anew.
        _ = try loadKeyFile()
        var bytes = file.withUnsafeBytes { Array($0) }
        defer { zeroize(&bytes) }
        try PosixFile.writeAtomically(bytes, to: path, mode: 0o600)
    }

    public func savePendingKeyFile(_ file: SecretBytes) throws {
        var bytes = file.withUnsafeBytes { Array($0) }
        defer { zeroize(&bytes) }
        try PosixFile.writeAtomically(bytes, to: pendingPath, mode: 0o600)
    }

    public func loadPendingKeyFile() throws -> SecretBytes? {
        guard PosixFile.ownKind(of: pendingPath) != .missing else { return nil }
        return try Self.loadKeyFile(at: pendingPath)
    }

    public func promotePendingKeyFile() throws {
        _ = try Self.loadKeyFile(at: pendingPath)
        // The retired key's bytes are overwritten before its name goes to the new key. A crash
        // in between leaves a key file of zeros, which the pending file (the key the log names
        // now) replaces on the next write.
        if PosixFile.ownKind(of: path) == .file, let old = try? PosixFile(path: path, flags: O_WRONLY | O_NOFOLLOW | O_NONBLOCK) {
            try old.write([UInt8](repeating: 0, count: Int(try old.size())), at: 0)
            try old.sync()
        }
        guard FileFaults.call(.rename, path, { rename(pendingPath, path) }) == 0 else {
            throw ConsentError.storage("cannot rename \(pendingPath) to \(path): \(PosixFile.reason())")
        }
        try PosixFile.syncDirectory(PosixFile.parent(of: path))
    }
}
