#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ConsentDomain

/// The embedded default store: a ledger folder on the local file system.
///
/// ```
/// DIR/ledger.jsonl    the log, one canonical JSON event per line (append-only)
/// DIR/head            the signed head: a checkpoint note of the log with a 'chain HASH' line
/// DIR/catalog.json    the catalogue's canonical bytes, pinned by the genesis event
/// DIR/public.key      the Ed25519 public key, hex
/// DIR/secret.key      the Ed25519 seed, hex, mode 0600
/// DIR/subjects.jsonl  subject id -> pseudonym salt (the only personal data; never in the log)
/// DIR/lock            flock(2) target: shared for readers, exclusive for the writer
/// DIR/lines.idx       derived: per event, 32 bytes: offset (u64 LE), length (u32 LE), 4 zero
///                     bytes, subject reference (16 bytes)
/// DIR/tree.hashes     derived: the Merkle tree's stored hashes, 32 bytes each, in tlog order
/// DIR/checkpoints.jsonl  signed checkpoints the ledger issued, one {"note":…,"size":…} per line
/// DIR/recovered/      torn tails removed after a crash, kept for inspection
/// ```
public struct FileLedgerStore: LedgerStore {
    public let directory: String

    public init(directory: String) {
        var d = directory
        while d.count > 1 && d.hasSuffix("/") { d.removeLast() }
        self.directory = d
    }

    public var location: String { directory }

    public var checkpointsPlace: String { "checkpoints.jsonl" }

    public var subjectsPlace: String { "subjects.jsonl" }

    public var derivedRepair: String { "rebuild it: delete \(indexPath), \(treePath) and \(subjectMapPath), and the next write recomputes them from the log" }

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
    var checkpointsPath: String { directory + "/checkpoints.jsonl" }

    // MARK: - Creating

    /// The files a ledger folder holds; a folder with only these and no log is a failed init.
    static let ledgerFiles: Set<String> = ["catalog.json", "public.key", "secret.key", "head", "subjects.jsonl", "lock", "lines.idx", "tree.hashes"]

    public func create(_ setup: LedgerSetup) throws {
        var intoExisting = false
        switch PosixFile.ownKind(of: directory) {
        case .symlink:
            throw LedgerError.alreadyExists("\(directory) is a symbolic link; init does not follow links: name the real folder")
        case .file:
            throw LedgerError.alreadyExists("\(directory) exists and is a file, not a ledger folder")
        case .directory:
            let entries = PosixFile.directoryEntries(directory)
            if entries.contains("ledger.jsonl") { throw LedgerError.alreadyExists("a ledger already exists at \(directory)") }
            // A staging folder of an init that never finished: it is not ours to delete.
            if let staging = entries.sorted().first(where: { $0.hasPrefix(".init-") }) {
                throw LedgerError.alreadyExists("\(directory)/\(staging) is left from an init that did not finish; remove it, then run init again")
            }
            // Empty, or left by an init that crashed while moving its files in: use it as it is
            // (keeping its owner, mode and labels). Only regular files with a ledger file's name
            // are replaced; a link or anything else stops init.
            guard entries.allSatisfy({ Self.ledgerFiles.contains($0) && PosixFile.isRegularFile(directory + "/" + $0) }) else {
                throw LedgerError.alreadyExists("\(directory) exists and is not empty; choose a new folder")
            }
            intoExisting = true
        case .missing:
            break
        }
        let parent = PosixFile.parent(of: directory)
        guard PosixFile.kind(of: parent) == .directory else {
            throw LedgerError.notFound("cannot create \(directory): folder \(parent) does not exist")
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
        guard mkdir(staging, 0o700) == 0 else { throw LedgerError.storage("cannot create \(staging): \(PosixFile.reason())") }
        let stagingFD = open(staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard stagingFD >= 0 else {
            let why = PosixFile.reason()
            rmdir(staging)
            throw LedgerError.storage("cannot open \(staging): \(why)")
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
            guard fchmod(file.fd, mode) == 0 else { throw LedgerError.storage("cannot set mode of \(staging)/\(name): \(PosixFile.reason())") }
        }
        do {
            try writeNew(setup.catalog, "catalog.json")
            try writeNew(Array((setup.publicKey.hex + "\n").utf8), "public.key")
            try writeNew(Array((Hex.encode(setup.secretSeed) + "\n").utf8), "secret.key", mode: 0o600)
            try writeNew(setup.genesis.line, "ledger.jsonl")
            try writeNew(Array(setup.head.note.utf8), "head")
            try writeNew([], "subjects.jsonl", mode: 0o600)
            try writeNew([], "lock")
            guard fsync(stagingFD) == 0 else { throw LedgerError.storage("cannot sync folder \(staging): \(PosixFile.reason())") }
            if intoExisting {
                let target = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard target >= 0 else { throw LedgerError.storage("cannot open \(directory): \(PosixFile.reason())") }
                defer { close(target) }
                for name in ["catalog.json", "public.key", "secret.key", "head", "subjects.jsonl", "lock", "ledger.jsonl"] {
                    guard renameat(stagingFD, name, target, name) == 0 else {
                        throw LedgerError.storage("cannot move \(name) into \(directory): \(PosixFile.reason())")
                    }
                    created.removeAll { $0 == name }
                }
                guard fsync(target) == 0 else { throw LedgerError.storage("cannot sync folder \(directory): \(PosixFile.reason())") }
                rmdir(staging)
            } else {
                guard rename(staging, directory) == 0 else {
                    throw LedgerError.storage("cannot move \(staging) to \(directory): \(PosixFile.reason())")
                }
                try PosixFile.syncDirectory(parent)
            }
        } catch {
            removeStaging()
            throw error
        }
    }

    // MARK: - Small files

    private func requireLedger() throws {
        guard PosixFile.kind(of: logPath) == .file else {
            throw LedgerError.notFound("no ledger at \(directory) (run 'consentctl init' to create one)")
        }
    }

    public func readCatalog() throws -> [UInt8] {
        try requireLedger()
        return try PosixFile(path: catalogPath, flags: O_RDONLY).readAll()
    }

    public func readPublicKey() throws -> PublicKey {
        try requireLedger()
        let text = try Self.trimmedText(PosixFile(path: publicKeyPath, flags: O_RDONLY).readAll())
        guard let key = PublicKey(hex: text) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(publicKeyPath) does not hold a 64-digit lowercase hex Ed25519 public key"))
        }
        return key
    }

    public func readSecretSeed() throws -> [UInt8] {
        try requireLedger()
        let text = try Self.trimmedText(PosixFile(path: secretKeyPath, flags: O_RDONLY).readAll())
        guard let seed = Hex.decode(text), seed.count == 32 else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(secretKeyPath) does not hold a 64-digit lowercase hex Ed25519 seed"))
        }
        return seed
    }

    private static func trimmedText(_ bytes: [UInt8]) -> String {
        var b = bytes
        while let last = b.last, last == 0x0A || last == 0x0D || last == 0x20 { b.removeLast() }
        return String(decoding: b, as: UTF8.self)
    }

    func readHead() throws -> RecordedHead {
        let file: PosixFile
        do {
            file = try PosixFile(path: headPath, flags: O_RDONLY)
        } catch LedgerError.notFound {
            // The head is only ever replaced by rename, never removed: its absence is damage.
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(headPath) is missing"))
        }
        let bytes = try file.read(at: 0, count: 64 << 10)
        guard let head = RecordedHead.parse(String(decoding: bytes, as: UTF8.self)) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(headPath) is not a signed head (a checkpoint note with a 'chain' line) or 'SEQ HASH'"))
        }
        return head
    }

    // MARK: - Locking

    public func withLock<T>(exclusive: Bool, _ body: () throws -> T) throws -> T {
        try requireLedger()
        let file: PosixFile
        do {
            // The lock file is not ledger data: a copied ledger may lack it, so make it on demand.
            file = try PosixFile(path: lockPath, flags: O_RDONLY | O_CREAT)
        } catch {
            // A read-only copy (an auditor's, say) can still be read without the lock; any other
            // failure to lock is an error.
            if exclusive || !(errno == EROFS || errno == EACCES) { throw error }
            return try body()
        }
        try file.lock(exclusive: exclusive)
        defer { file.unlock() }
        return try body()
    }

    // MARK: - The log

    private static let newline: UInt8 = 0x0A

    public func readFirstLine() throws -> [UInt8] {
        try requireLedger()
        let file = try PosixFile(path: logPath, flags: O_RDONLY)
        var count = 4096
        while true {
            let bytes = try file.read(at: 0, count: count)
            if let end = bytes.firstIndex(of: Self.newline) { return Array(bytes[..<end]) }
            guard bytes.count == count else {
                throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the genesis line is incomplete (no newline)"))
            }
            count *= 4
        }
    }

    /// 1-based number of the line that starts at or contains `offset` (for error messages).
    func lineNumber(atOffset offset: UInt64) -> Int {
        guard let file = try? PosixFile(path: logPath, flags: O_RDONLY) else { return 0 }
        var line = 1
        var position: UInt64 = 0
        while position < offset {
            guard let chunk = try? file.read(at: position, count: Int(min(UInt64(4 << 20), offset - position))), !chunk.isEmpty else { break }
            line += chunk.reduce(0) { $0 + ($1 == Self.newline ? 1 : 0) }
            position += UInt64(chunk.count)
        }
        return line
    }

    public func completeLinesExtent() throws -> LogCursor {
        try requireLedger()
        let file = try PosixFile(path: logPath, flags: O_RDONLY)
        let size = try file.size()
        var position = size
        while position > 0 {
            let start = position >= 65_536 ? position - 65_536 : 0
            let bytes = try file.read(at: start, count: Int(position - start))
            if let last = bytes.lastIndex(of: Self.newline) { return LogCursor(offset: start + UInt64(last) + 1, lines: 0) }
            position = start
        }
        return .start
    }

    public func logState() throws -> LogState {
        try requireLedger()
        // The head first: a writer may append between the two reads, and a log ahead of the
        // head is the allowed direction, a head ahead of the log is not.
        let recordedHead = try readHead()
        let file = try PosixFile(path: logPath, flags: O_RDONLY)
        let size = try file.size()
        guard size > 0 else {
            throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the log is empty: the genesis event is missing"))
        }
        // Read backwards in growing windows until the last complete command is in view.
        var window = min(size, 65_536)
        while true {
            let start = size - window
            let bytes = try file.read(at: start, count: Int(window))
            if let state = try tailState(bytes: bytes, windowStart: start, fileSize: size, recordedHead: recordedHead) {
                return state
            }
            guard window < size else {
                throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the log holds no complete event"))
            }
            window = min(size, window * 4)
        }
    }

    /// Works out the tail from the last `bytes` of the log. Returns nil when the window is too
    /// small to see the start of the last command.
    private func tailState(bytes: [UInt8], windowStart: UInt64, fileSize: UInt64, recordedHead: RecordedHead) throws -> LogState? {
        // Line boundaries inside the window: ends[i] is the index just after a newline.
        var lineEnds: [Int] = []
        for (i, b) in bytes.enumerated() where b == Self.newline { lineEnds.append(i + 1) }
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
                throw LedgerError.integrity(IntegrityFailure(line: lineNumber(atOffset: offset), seq: nil, problem: "malformed event at byte offset \(offset): \(error.problem)"))
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
                    throw LedgerError.integrity(IntegrityFailure(line: lineNumber(atOffset: windowStart + UInt64(lineStart(k) ?? 0)), seq: previous.event.seq, problem: "the last command's events are not contiguous"))
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
                throw LedgerError.integrity(IntegrityFailure(line: lineNumber(atOffset: windowStart + UInt64(lineStart(k) ?? 0)), seq: before.event.seq, problem: "the last commit's events are not contiguous"))
            }
            last = before
        }
        let endOffset = windowStart + UInt64(lineEnds[k])
        let torn: TornTail? = (tornLines > 0 || partialBytes > 0)
            ? TornTail(offset: endOffset, byteCount: Int(fileSize - endOffset), completeLines: tornLines)
            : nil
        return LogState(end: LogCursor(offset: endOffset, lines: Int(last.event.seq) + 1), last: last, head: recordedHead, torn: torn)
    }

    public func scan(from cursor: LogCursor, to end: LogCursor, batchSize: Int, containing needle: [UInt8]?, _ visit: (LineBatch) throws -> Void) throws {
        guard cursor.offset < end.offset else { return }
        let file = try PosixFile(path: logPath, flags: O_RDONLY)
        let chunkSize = 4 << 20
        var offset = cursor.offset
        var lineNumber = cursor.lines
        var carry: [UInt8] = []
        while offset < end.offset {
            let chunk = try file.read(at: offset, count: Int(min(UInt64(chunkSize), end.offset - offset)))
            guard !chunk.isEmpty else {
                throw LedgerError.integrity(IntegrityFailure(line: lineNumber + 1, seq: nil, problem: "the log ended while being read"))
            }
            offset += UInt64(chunk.count)
            let bufferOffset = offset - UInt64(chunk.count) - UInt64(carry.count)
            let buffer = carry.isEmpty ? chunk : carry + chunk
            var lines: [(start: Int, end: Int, number: Int)] = []
            var consumed = 0
            buffer.withUnsafeBufferPointer { all in
                let base = all.baseAddress!
                var start = 0
                while start < all.count, let hit = memchr(base + start, Int32(Self.newline), all.count - start) {
                    let stop = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                    lineNumber += 1
                    if needle == nil || Self.contains(UnsafeRawBufferPointer(start: base + start, count: stop - start), needle!) {
                        lines.append((start, stop, lineNumber))
                    }
                    start = stop + 1
                }
                consumed = start
            }
            carry = Array(buffer[consumed...])
            var first = 0
            while first < lines.count {
                let last = min(lines.count, first + batchSize)
                try visit(LineBatch(buffer: buffer, fileOffset: bufferOffset, lines: Array(lines[first..<last])))
                first = last
            }
        }
        guard carry.isEmpty else {
            throw LedgerError.integrity(IntegrityFailure(line: lineNumber + 1, seq: nil, problem: "the log does not end with a newline where a command should end"))
        }
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

    public func append(_ lines: [UInt8], lineCount: Int, at expected: LogCursor) throws -> LogCursor {
        let file = try PosixFile(path: logPath, flags: O_RDWR)
        let size = try file.size()
        if size < expected.offset {
            throw LedgerError.integrity(IntegrityFailure(line: expected.lines, seq: nil, problem: "the log is shorter than when it was read (\(size) < \(expected.offset) bytes); refusing to append"))
        }
        if size > expected.offset {
            // A torn tail from a crash: keep its bytes for inspection, then cut it off.
            let torn = try file.read(at: expected.offset, count: Int(size - expected.offset))
            try saveRecovered(torn, offset: expected.offset)
            try file.truncate(to: expected.offset)
            try file.sync()
        }
        do {
            try file.write(lines, at: expected.offset)
            try file.sync()
        } catch {
            // Never leave bytes that failed to reach the disk where a later reader would adopt
            // them: cut them off (best effort) before reporting the failure.
            try? file.truncate(to: expected.offset)
            _ = try? file.sync()
            throw error
        }
        return LogCursor(offset: expected.offset + UInt64(lines.count), lines: expected.lines + lineCount)
    }

    public func syncLog() throws {
        try PosixFile(path: logPath, flags: O_RDONLY).sync()
    }

    public func writeHead(_ head: SignedHead) throws {
        try PosixFile.writeAtomically(Array(head.note.utf8), to: headPath)
    }

    // MARK: - Derived data

    static let locationSize = 32

    private func openDerived(_ path: String, write: Bool = false) throws -> PosixFile {
        try PosixFile(path: path, flags: write ? (O_RDWR | O_CREAT) : (O_RDONLY | O_CREAT))
    }

    public func derivedCounts() throws -> (lines: Int, treeHashes: Int64) {
        try requireLedger()
        let lines = try openDerived(indexPath).size() / UInt64(Self.locationSize)
        let hashes = try openDerived(treePath).size() / 32
        return (Int(lines), Int64(hashes))
    }

    static func decodeLocation(_ b: ArraySlice<UInt8>) -> LineLocation {
        let s = b.startIndex
        var offset: UInt64 = 0
        for i in 0..<8 { offset |= UInt64(b[s + i]) << (8 * UInt64(i)) }
        var length: UInt32 = 0
        for i in 0..<4 { length |= UInt32(b[s + 8 + i]) << (8 * UInt32(i)) }
        return LineLocation(offset: offset, length: length, subject: Array(b[(s + 16)..<(s + 32)]))
    }

    static func encodeLocation(_ l: LineLocation, into out: inout [UInt8]) {
        for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: l.offset >> (8 * UInt64(i)))) }
        for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: l.length >> (8 * UInt32(i)))) }
        out += [0, 0, 0, 0]
        out += l.subject
    }

    public func readLineLocations(_ range: Range<Int>) throws -> [LineLocation] {
        guard !range.isEmpty else { return [] }
        let bytes = try openDerived(indexPath).read(at: UInt64(range.lowerBound * Self.locationSize), count: range.count * Self.locationSize)
        guard bytes.count == range.count * Self.locationSize else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: UInt64(range.lowerBound), problem: "\(indexPath) is shorter than the log"))
        }
        return (0..<range.count).map { Self.decodeLocation(bytes[($0 * Self.locationSize)..<(($0 + 1) * Self.locationSize)]) }
    }

    public func findLineLocations(subject: [UInt8]) throws -> [(seq: Int, location: LineLocation)] {
        let file = try openDerived(indexPath)
        let size = try file.size()
        let chunk = Self.locationSize * 131_072
        var found: [(seq: Int, location: LineLocation)] = []
        var position: UInt64 = 0
        var bytes = [UInt8](repeating: 0, count: chunk)
        while position < size {
            let count = try file.read(at: position, into: &bytes, count: Int(min(UInt64(chunk), size - position)))
            let records = count / Self.locationSize
            bytes.withUnsafeBytes { raw in
                subject.withUnsafeBytes { s in
                    for r in 0..<records where memcmp(raw.baseAddress! + r * Self.locationSize + 16, s.baseAddress!, 16) == 0 {
                        found.append((Int(position) / Self.locationSize + r, Self.decodeLocation(bytes[(r * Self.locationSize)..<((r + 1) * Self.locationSize)])))
                    }
                }
            }
            position += UInt64(records * Self.locationSize)
            if records == 0 { break }
        }
        return found
    }

    public func readTreeHashes(_ indexes: [Int64]) throws -> [Digest] {
        let file = try openDerived(treePath)
        return try indexes.map { index in
            let bytes = try file.read(at: UInt64(index) * 32, count: 32)
            guard let digest = Digest(bytes: bytes) else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(treePath) has no hash at index \(index)"))
            }
            return digest
        }
    }

    public func subjectMapCount() throws -> Int64 {
        try requireLedger()
        return Int64(try openDerived(subjectMapPath).size() / UInt64(SubjectMapRecord.size))
    }

    public func readSubjectMap(_ index: Int64) throws -> [UInt8] {
        let size = SubjectMapRecord.size
        guard index >= 0, index < Int64.max / Int64(size) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectMapPath) refers to record \(index), which cannot exist (\(derivedRepair))"))
        }
        let bytes = try openDerived(subjectMapPath).read(at: UInt64(index) * UInt64(size), count: size)
        guard bytes.count == size else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectMapPath) has no record \(index) (\(derivedRepair))"))
        }
        return bytes
    }

    public func writeDerived(locations: [LineLocation], at lineStart: Int, treeHashes: [Digest], at treeStart: Int64, subjectMap: (records: SubjectMapRecords, at: Int64)?) throws {
        let index = try openDerived(indexPath, write: true)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(locations.count * Self.locationSize)
        for l in locations { Self.encodeLocation(l, into: &bytes) }
        let indexEnd = UInt64(lineStart * Self.locationSize + bytes.count)
        try index.write(bytes, at: UInt64(lineStart * Self.locationSize))
        if try index.size() > indexEnd { try index.truncate(to: indexEnd) }
        try index.sync()
        let tree = try openDerived(treePath, write: true)
        var hashes: [UInt8] = []
        hashes.reserveCapacity(treeHashes.count * 32)
        for h in treeHashes { hashes += h.bytes }
        let treeEnd = UInt64(treeStart) * 32 + UInt64(hashes.count)
        try tree.write(hashes, at: UInt64(treeStart) * 32)
        if try tree.size() > treeEnd { try tree.truncate(to: treeEnd) }
        try tree.sync()
        if let subjectMap, subjectMap.at == 0 {
            // A whole map (a rebuild, or a compaction): written aside and renamed over the old
            // one, so a crash leaves one or the other, never a mixture.
            try PosixFile.writeAtomically(subjectMap.records.bytes, to: subjectMapPath)
        } else if let subjectMap {
            let map = try openDerived(subjectMapPath, write: true)
            let start = UInt64(subjectMap.at) * UInt64(SubjectMapRecord.size)
            let bytes = subjectMap.records.bytes
            try map.write(bytes, at: start)
            if try map.size() > start + UInt64(bytes.count) { try map.truncate(to: start + UInt64(bytes.count)) }
            try map.sync()
        }
    }

    public func readLine(at location: LineLocation) throws -> [UInt8] {
        let file = try PosixFile(path: logPath, flags: O_RDONLY)
        // Subtraction, not addition: a tampered offset near 2^64 must be an integrity error, not
        // an arithmetic trap.
        let size = try file.size()
        guard location.offset < size, UInt64(location.length) <= size - location.offset else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the line index points past the end of the log (\(derivedRepair))"))
        }
        let bytes = try file.read(at: location.offset, count: Int(location.length))
        guard bytes.count == Int(location.length) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the line index points past the end of the log"))
        }
        return bytes
    }

    private func saveRecovered(_ bytes: [UInt8], offset: UInt64) throws {
        let folder = directory + "/recovered"
        if PosixFile.kind(of: folder) == .missing {
            guard mkdir(folder, 0o755) == 0 else { throw LedgerError.storage("cannot create \(folder): \(PosixFile.reason())") }
            try PosixFile.syncDirectory(directory)
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

    // MARK: - Subjects

    public func readSubjectRecords() throws -> [SubjectID: SubjectRecord] {
        try requireLedger()
        let bytes = try PosixFile(path: subjectsPath, flags: O_RDONLY).readAll()
        var records: [SubjectID: SubjectRecord] = [:]
        var lineNumber = 0
        // A trailing line without a newline was never acknowledged (a crash mid-write): ignored.
        for line in bytes.split(separator: Self.newline, omittingEmptySubsequences: false).dropLast() {
            lineNumber += 1
            guard let (id, record) = Self.decodeSubjectLine(Array(line)) else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectsPath) line \(lineNumber) is not {\"id\":…,\"salt\":…[,\"sig\":…]}"))
            }
            guard records.updateValue(record, forKey: SubjectID(id)) == nil else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectsPath) line \(lineNumber) repeats subject id '\(id)'"))
            }
        }
        return records
    }

    public func readSubjectRecord(_ id: SubjectID) throws -> SubjectRecord? {
        try requireLedger()
        let bytes = try PosixFile(path: subjectsPath, flags: O_RDONLY).readAll()
        // The line of `id` starts with exactly these bytes (canonical JSON): compared at each
        // line start, without parsing the other lines.
        var needle = Array(#"{"id":"#.utf8)
        CanonicalJSON.writeString(id.text, into: &needle)
        needle += Array(#","salt":""#.utf8)
        // Complete lines only: a partial last line was never acknowledged.
        let end = (bytes.lastIndex(of: Self.newline) ?? -1) + 1
        var found: SubjectRecord?
        var malformed: Int?
        var lineStart = 0
        var lineNumber = 0
        let shape = Array(#"{"id":""#.utf8)
        while lineStart < end {
            let lineEnd = bytes[lineStart..<end].firstIndex(of: Self.newline)!
            lineNumber += 1
            // A line not even shaped like a record might have been this subject's.
            if malformed == nil, !(bytes[lineStart..<lineEnd].starts(with: shape) && lineEnd - lineStart > shape.count + 2 && bytes[lineEnd - 2] == 0x22 && bytes[lineEnd - 1] == 0x7D) {
                malformed = lineNumber
            }
            let matches = lineEnd - lineStart > needle.count && bytes.withUnsafeBytes { all in
                needle.withUnsafeBytes { n in memcmp(all.baseAddress! + lineStart, n.baseAddress!, n.count) == 0 }
            }
            if matches {
                guard let (lineID, record) = Self.decodeSubjectLine(Array(bytes[lineStart..<lineEnd])), SubjectID(lineID) == id else {
                    throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectsPath) has a malformed line for subject id '\(id.text)'"))
                }
                guard found == nil else {
                    throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectsPath) repeats subject id '\(id.text)'"))
                }
                found = record
            }
            lineStart = lineEnd + 1
        }
        if found == nil, let malformed {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(subjectsPath) line \(malformed) is not a subject record, and subject id '\(id.text)' has none: it may have been that line"))
        }
        return found
    }

    /// One line of subjects.jsonl: canonical `{"id":ID,"salt":"<32 hex>"}`, or with
    /// `,"sig":"<128 hex>"` before the `}`. The shape is fixed, so the salt and signature are
    /// read from the end and only the id is parsed as a JSON string.
    static func decodeSubjectLine(_ line: [UInt8]) -> (String, SubjectRecord)? {
        let prefix = Array(#"{"id":"#.utf8), middle = Array(#","salt":""#.utf8), sigMiddle = Array(#"","sig":""#.utf8)
        var body = line[...]
        var signature: Signature?
        // ,"sig":"<128 hex>"} at the end: split it off, leaving ..."<salt>"}.
        let signedTail = sigMiddle.count + 128 + 2
        if body.count > signedTail, body[(body.endIndex - signedTail)..<(body.endIndex - 130)].elementsEqual(sigMiddle),
            body[body.endIndex - 2] == 0x22, body[body.endIndex - 1] == 0x7D
        {
            guard let bytes = Hex.decode(bytes: body[(body.endIndex - 130)..<(body.endIndex - 2)]), let sig = Signature(bytes: bytes) else { return nil }
            signature = sig
            body = body[body.startIndex..<(body.endIndex - signedTail + 1)] + [0x7D]
        }
        let plain = Array(body)
        let tail = middle.count + 32 + 2
        guard plain.count >= prefix.count + 2 + tail, plain.starts(with: prefix),
            plain[(plain.count - tail)..<(plain.count - 34)].elementsEqual(middle), plain[plain.count - 2] == 0x22, plain[plain.count - 1] == 0x7D,
            let salt = Hex.decode(bytes: plain[(plain.count - 34)..<(plain.count - 2)]), salt.count == 16
        else { return nil }
        let idBytes = Array(plain[prefix.count..<(plain.count - tail)])
        return idBytes.withUnsafeBufferPointer { buffer -> (String, SubjectRecord)? in
            var parser = CanonicalJSON.Parser(bytes: buffer, canonical: true)
            guard let id = try? parser.parseString(), parser.index == buffer.count else { return nil }
            return (id, SubjectRecord(salt: salt, signature: signature))
        }
    }

    public func saveSubjectRecords(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) throws {
        guard !records.isEmpty else { return }
        var lines: [UInt8] = []
        for (id, record) in records {
            var members: [String: JSONValue] = ["id": .string(id.text), "salt": .string(Hex.encode(record.salt))]
            if let signature = record.signature { members["sig"] = .string(signature.hex) }
            CanonicalJSON.serialize(.object(members), into: &lines)
            lines.append(Self.newline)
        }
        _ = try appendLines(lines, to: subjectsPath, create: false)
    }

    /// Appends complete lines to a line file and syncs it, first cutting off a partial line that
    /// a crash left (it was never acknowledged). Returns the offset the lines were written at.
    private func appendLines(_ lines: [UInt8], to path: String, create: Bool) throws -> UInt64 {
        let file = try PosixFile(path: path, flags: create ? O_RDWR | O_CREAT : O_RDWR)
        var size = try file.size()
        if size > 0, try file.read(at: size - 1, count: 1) != [Self.newline] {
            let bytes = try file.readAll()
            let keep = bytes.lastIndex(of: Self.newline).map { $0 + 1 } ?? 0
            try file.truncate(to: UInt64(keep))
            size = UInt64(keep)
        }
        try file.write(lines, at: size)
        try file.sync()
        return size
    }

    // MARK: - Issued checkpoints

    public func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        try requireLedger()
        if try readCheckpoints().contains(where: { $0.size == checkpoint.size }) { return }
        var line: [UInt8] = []
        CanonicalJSON.serialize(.object(["note": .string(checkpoint.note), "size": .int(checkpoint.size)]), into: &line)
        line.append(Self.newline)
        // The file may be new: sync the folder so that its name is durable too.
        if try appendLines(line, to: checkpointsPath, create: true) == 0 { try PosixFile.syncDirectory(directory) }
    }

    public func readCheckpoints() throws -> [IssuedCheckpoint] {
        try requireLedger()
        let bytes: [UInt8]
        do {
            bytes = try PosixFile(path: checkpointsPath, flags: O_RDONLY).readAll()
        } catch LedgerError.notFound {
            return []
        }
        var checkpoints: [IssuedCheckpoint] = []
        var lineNumber = 0
        for line in bytes.split(separator: Self.newline, omittingEmptySubsequences: false).dropLast() {
            lineNumber += 1
            guard case .object(let members)? = try? CanonicalJSON.parse(Array(line), canonical: true), members.count == 2,
                case .string(let note)? = members["note"], case .int(let size)? = members["size"], size >= 0
            else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "\(checkpointsPath) line \(lineNumber) is not {\"note\":…,\"size\":…}"))
            }
            checkpoints.append(IssuedCheckpoint(size: size, note: note))
        }
        // Lines are in the order they were recorded, which concurrent writers may interleave.
        return checkpoints.sorted { $0.size < $1.size }
    }
}
