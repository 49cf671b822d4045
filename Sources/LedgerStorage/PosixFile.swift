import CLinux
import ConsentDomain
import LedgerFormat
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A thin wrapper over a POSIX file descriptor. Every failure becomes a `ConsentError.storage(_:)`
/// that names the path and the system's reason.
final class PosixFile {
    let fd: Int32
    let path: String

    init(path: String, flags: Int32, mode: mode_t = 0o644) throws {
        self.path = path
        let fd = FileFaults.call(.open, path) { open(path, flags | O_CLOEXEC, mode) }
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw ConsentError.notFound(.file, "no such file: \(path)") }
            throw ConsentError.storage("cannot open \(path): \(PosixFile.reason(code))")
        }
        self.fd = fd
    }

    /// Opens `name` inside the open folder `directory`, never through a symlink: the folder is
    /// pinned by its descriptor, so nobody can swap a path component under us.
    init(in directory: Int32, name: String, displayPath: String, flags: Int32, mode: mode_t = 0o644) throws {
        self.path = displayPath
        let fd = FileFaults.call(.open, displayPath) { openat(directory, name, flags | O_CLOEXEC | O_NOFOLLOW, mode) }
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT { throw ConsentError.notFound(.file, "no such file: \(displayPath)") }
            throw ConsentError.storage("cannot open \(displayPath): \(PosixFile.reason(code))")
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Opens a file of a ledger folder, which must be a regular file: never through a symbolic
    /// link (it could name a file outside the folder, which a write would then change), and
    /// never blocking on a FIFO put in its place (a read would wait for a writer for ever). A
    /// directory, FIFO, device or link is a storage error that says what it found.
    static func regular(_ path: String, flags: Int32, mode: mode_t = 0o644) throws -> PosixFile {
        let file: PosixFile
        do {
            file = try PosixFile(path: path, flags: flags | O_NOFOLLOW | O_NONBLOCK, mode: mode)
        } catch ConsentError.storage(let message) {
            // The caller may look at errno (a read-only folder): keep open's.
            let code = errno
            defer { errno = code }
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) != S_IFREG else { throw ConsentError.storage(message) }
            throw ConsentError.storage("\(path) is \(describe(mode: st.st_mode)), not a regular file: a ledger's files are files of their own; nothing was changed")
        }
        guard let identity = file.identity() else { throw ConsentError.storage("cannot stat \(path): \(reason())") }
        guard identity.isRegularFile else {
            throw ConsentError.storage("\(path) is \(describe(mode: identity.mode)), not a regular file: a ledger's files are files of their own; nothing was changed")
        }
        _ = fcntl(file.fd, F_SETFL, fcntl(file.fd, F_GETFL) & ~O_NONBLOCK)
        return file
    }

    /// A file's type and identity, asked without its times. Since Linux 6.13 a `stat` that
    /// reads a file's times marks them as seen, and the next write then stamps the file with a
    /// fine-grained time, which dirties its inode: the log's `fdatasync` after it writes the
    /// inode too, one more write the sync waits for (measured: two block requests per sync
    /// instead of one). The log is asked about in every transaction, so its type, identity
    /// and size are asked without its times (`statx` with the type and inode only; `lseek`).
    struct Identity: Equatable {
        let mode: mode_t
        let device: UInt64
        let inode: UInt64

        var isRegularFile: Bool { mode & S_IFMT == S_IFREG }
    }

    /// What `path` names (not followed, if it is a symbolic link, unless `followingLinks`);
    /// nil when nothing does or it cannot be asked.
    static func identity(of path: String, followingLinks: Bool = false) -> Identity? {
        var mode: UInt32 = 0, device: UInt64 = 0, inode: UInt64 = 0
        guard consentledger_identity(AT_FDCWD, path, followingLinks ? 0 : AT_SYMLINK_NOFOLLOW, &mode, &device, &inode) == 0 else { return nil }
        return Identity(mode: mode_t(mode), device: device, inode: inode)
    }

    /// What this descriptor is open on.
    func identity() -> Identity? {
        var mode: UInt32 = 0, device: UInt64 = 0, inode: UInt64 = 0
        guard consentledger_descriptor_identity(fd, &mode, &device, &inode) == 0 else { return nil }
        return Identity(mode: mode_t(mode), device: device, inode: inode)
    }

    static func reason(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

    /// The file's size, from `lseek` to its end (which reads no times: ``Identity``). Reads and
    /// writes name their offsets (`pread`, `pwrite`), so moving the descriptor's own is harmless.
    func size() throws -> UInt64 {
        let end = lseek(fd, 0, SEEK_END)
        guard end >= 0 else { throw ConsentError.storage("cannot stat \(path): \(PosixFile.reason())") }
        return UInt64(end)
    }

    /// Reads up to `count` bytes at `offset`; fewer only at the end of the file.
    /// The array is not zeroed first: for a file of megabytes (`subjects.jsonl` at 5M events),
    /// zeroing it was 16% of a `prove-state`.
    package func read(at offset: UInt64, count: Int) throws -> [UInt8] {
        guard offset <= UInt64(Int64.max) - UInt64(count) else {
            throw ConsentError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "offset \(offset) in \(path) is out of range"))
        }
        var failure: ConsentError?
        let out = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            do throws(ConsentError) {
                initialized = count == 0 ? 0 : try Self.read(fd, at: offset, into: buffer.baseAddress!, count: count, path: path)
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure { throw failure }
        return out
    }

    /// Reads up to `count` bytes at `offset` into `buffer` (reused between calls) from its
    /// index `start` on; returns how many were read.
    package func read(at offset: UInt64, into buffer: inout [UInt8], startingAt start: Int = 0, count: Int) throws -> Int {
        precondition(start + count <= buffer.count)
        guard offset <= UInt64(Int64.max) - UInt64(count) else {
            throw ConsentError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "offset \(offset) in \(path) is out of range"))
        }
        return try buffer.withUnsafeMutableBytes { raw in
            try Self.read(fd, at: offset, into: raw.baseAddress! + start, count: count, path: path)
        }
    }

    /// Reads up to `count` bytes at `offset` into `destination`; fewer only where the file ends.
    private static func read(_ fd: Int32, at offset: UInt64, into destination: UnsafeMutableRawPointer, count: Int, path: String) throws(ConsentError) -> Int {
        var done = 0
        while done < count {
            let n = pread(fd, destination + done, count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw ConsentError.storage("cannot read \(path): \(PosixFile.reason())")
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// ``read(at:into:startingAt:count:)`` in pieces of 1 MiB or more read at once, one per
    /// core. Replay and verify once read the log in chunks of 4 MiB between the batches they
    /// decoded on every core, and copying a chunk from the page cache on one core, the other
    /// waiting, was 4.5% of a replay's CPU. (They now read a megabyte at most, beside the batch
    /// before, so their reads are of one piece.) The count is of the bytes read from the start:
    /// a piece that comes back short (the file ended) ends it there.
    package func readInParts(at offset: UInt64, into buffer: inout [UInt8], startingAt start: Int, count: Int) throws -> Int {
        let parts = min(ProcessInfoCores.count, count >> 20)
        guard parts > 1 else { return try read(at: offset, into: &buffer, startingAt: start, count: count) }
        precondition(start + count <= buffer.count)
        guard offset <= UInt64(Int64.max) - UInt64(count) else {
            throw ConsentError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "offset \(offset) in \(path) is out of range"))
        }
        let (fd, path) = (self.fd, self.path)
        let pieces = buffer.withUnsafeMutableBytes { raw in
            // The address as a number: the pieces are disjoint, each written by one worker.
            let address = UInt(bitPattern: raw.baseAddress! + start)
            return parallelMap(parts, minimumForParallel: 2) { i -> (wanted: Int, read: Result<Int, ConsentError>) in
                let (from, to) = (count * i / parts, count * (i + 1) / parts)
                let destination = UnsafeMutableRawPointer(bitPattern: address)! + from
                return (to - from, Result { () throws(ConsentError) in try Self.read(fd, at: offset + UInt64(from), into: destination, count: to - from, path: path) })
            }
        }
        var done = 0
        for piece in pieces {
            let got = try piece.read.get()
            done += got
            if got < piece.wanted { break }
        }
        return done
    }

    func readAll() throws -> [UInt8] {
        try read(at: 0, count: Int(try size()))
    }

    /// Reads the file's complete lines (each ending in a newline) in chunks of about
    /// `chunkSize` bytes through one buffer, and calls `body` with each chunk's run of whole
    /// lines; a last line without its newline is left out. A scan of a large file thus touches
    /// one small buffer instead of faulting in a copy of the whole file (at 8.5 MB, those page
    /// faults were most of a lookup's time).
    func forEachLines(chunkSize: Int = 256 << 10, _ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        let end = try size()
        var buffer = [UInt8](repeating: 0, count: chunkSize)
        var offset: UInt64 = 0
        var kept = 0
        while offset < end {
            if kept == buffer.count { buffer += [UInt8](repeating: 0, count: buffer.count) }
            let got = try read(at: offset, into: &buffer, startingAt: kept, count: min(buffer.count - kept, Int(end - offset)))
            if got == 0 { break }
            offset += UInt64(got)
            let filled = kept + got
            let whole = try buffer.withUnsafeBufferPointer { all -> Int in
                var whole = filled
                while whole > 0, all[whole - 1] != 0x0A { whole -= 1 }
                guard whole > 0 else { return 0 }
                try body(UnsafeBufferPointer(rebasing: all[0..<whole]))
                return whole
            }
            kept = filled - whole
            if kept > 0, whole > 0 {
                buffer.withUnsafeMutableBytes { raw in
                    _ = memmove(raw.baseAddress!, raw.baseAddress! + whole, kept)
                }
            }
        }
    }

    func write(_ bytes: [UInt8], at offset: UInt64) throws {
        var done = 0
        try bytes.withUnsafeBytes { buffer in
            while done < buffer.count {
                let n = FileFaults.failure(.write, path).map { code -> Int in errno = code; return -1 } ?? pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw ConsentError.storage("cannot write \(path): \(PosixFile.reason())")
                }
                done += n
            }
        }
    }

    /// An append that failed: `cutBack` says whether the file was cut back to where it was
    /// (and that synced), so that nothing of it can still be read or reach the disk.
    struct AppendFailed: Error {
        let error: any Error
        let cutBack: Bool
    }

    /// Writes `bytes` at `offset`, where the file's content ends, and syncs them. On failure the file is cut
    /// back to `offset` (best effort) before ``AppendFailed`` is thrown: bytes that failed to
    /// reach the disk are never left where a later reader would adopt them.
    ///
    /// `restoring`: the file's size before the write, when it ended in zero bytes reserved for
    /// appends (the log, the records): on failure the file is cut back to `offset` and then
    /// given that size again, its end zero bytes as before (a hole, which takes no space on a
    /// full disk), so that a failed write leaves the file as it was, byte for byte.
    func appendDurably(_ bytes: [UInt8], at offset: UInt64, restoring size: UInt64? = nil) throws(AppendFailed) {
        do {
            try write(bytes, at: offset)
            try sync()
        } catch {
            let cutBack = (try? truncate(to: offset)) != nil && (size.map { $0 <= offset || (try? truncate(to: $0)) != nil } ?? true) && (try? sync()) != nil
            throw AppendFailed(error: error, cutBack: cutBack)
        }
    }

    /// Where the file's content ends: before the run of zero bytes at its end, if any (the
    /// log's space reserved for appends, ``FileLedgerStore``). Reads back from `size` a block
    /// at a time; 0 when every byte is zero.
    func contentEnd(size: UInt64) throws -> UInt64 {
        let block: UInt64 = 16 << 10
        var end = size
        while end > 0 {
            let start = end > block ? end - block : 0
            let bytes = try read(at: start, count: Int(end - start))
            // The file is never cut under the lock this is read in; if it was, what remains.
            if let last = PosixFile.lastNonZero(bytes) { return start + UInt64(last) + 1 }
            end = start
        }
        return 0
    }

    /// The index of the last byte that is not zero, a word at a time (a reserve of tens of
    /// kilobytes is skipped on every transaction that reads the log's tail).
    static func lastNonZero(_ bytes: [UInt8]) -> Int? {
        bytes.withUnsafeBytes { raw -> Int? in
            var i = raw.count
            while i >= 8 {
                if raw.loadUnaligned(fromByteOffset: i - 8, as: UInt64.self) != 0 { break }
                i -= 8
            }
            while i > 0 {
                if raw[i - 1] != 0 { return i - 1 }
                i -= 1
            }
            return nil
        }
    }

    /// Forces the file's data (and the metadata needed to read it back) to disk.
    func sync() throws {
        guard FileFaults.call(.sync, path, { fdatasync(fd) }) == 0 else { throw ConsentError.storage("cannot sync \(path): \(PosixFile.reason())") }
    }

    func truncate(to size: UInt64) throws {
        guard ftruncate(fd, off_t(size)) == 0 else { throw ConsentError.storage("cannot truncate \(path): \(PosixFile.reason())") }
    }

    func lock(exclusive: Bool) throws {
        while flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0 {
            if errno == EINTR { continue }
            throw ConsentError.storage("cannot lock \(path): \(PosixFile.reason())")
        }
    }

    /// Takes the lock, waiting at most `timeout`; false when another holder kept it that long.
    /// (A blocking `flock` cannot be given a deadline; this polls, from 50 µs between tries up
    /// to 5 ms, so that a lock freed soon is taken soon.)
    func lock(exclusive: Bool, timeout: Duration) throws -> Bool {
        let operation = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB
        func attempt() throws -> Bool {
            while flock(fd, operation) != 0 {
                if errno == EINTR { continue }
                if errno == EWOULDBLOCK { return false }
                throw ConsentError.storage("cannot lock \(path): \(PosixFile.reason())")
            }
            return true
        }
        if try attempt() { return true }
        let deadline = PosixFile.monotonicNanoseconds() + Self.nanoseconds(timeout)
        var pause: UInt64 = 50_000
        while true {
            let now = PosixFile.monotonicNanoseconds()
            guard now < deadline else { return false }
            var request = timespec(tv_sec: 0, tv_nsec: Int(min(pause, deadline - now)))
            _ = nanosleep(&request, nil)
            if try attempt() { return true }
            pause = min(pause * 2, 5_000_000)
        }
    }

    /// What a file's type is, for messages.
    static func describe(mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a folder"
        case S_IFLNK: "a symbolic link"
        case S_IFIFO: "a FIFO"
        case S_IFCHR, S_IFBLK: "a device"
        case S_IFSOCK: "a socket"
        default: "a file"
        }
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        return UInt64(min(seconds, 1 << 32)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// The processes that hold a lock on this file, as Linux lists them in /proc/locks: "process
    /// 4242 (consentctl)". Empty where that is not known.
    func lockHolders() -> [String] {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return [] }
        let device = UInt64(st.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let hex = { (n: UInt64) in n < 16 ? "0" + String(n, radix: 16) : String(n, radix: 16) }
        let wanted = "\(hex(major)):\(hex(minor)):\(st.st_ino)"
        guard let table = try? PosixFile.readProcFile("/proc/locks") else { return [] }
        var holders: [String] = []
        for line in table.split(separator: "\n") {
            // "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123 0 EOF"; a waiter's line has "->".
            let fields = line.split(separator: " ")
            guard fields.count >= 6, !fields.contains("->"), fields[1] == "FLOCK", fields[5] == Substring(wanted), let pid = Int32(fields[4]) else { continue }
            guard pid != getpid() else { continue }
            let name = (try? PosixFile.readProcFile("/proc/\(pid)/comm"))?.split(separator: "\n").first.map(String.init) ?? "?"
            let what = fields[3] == "WRITE" ? "writing" : "reading"
            holders.append("process \(pid) (\(Terminal.escaped(name)), \(what))")
        }
        return holders
    }

    /// A small file of /proc, whose size reads as 0: read to its end (at most 1 MiB).
    static func readProcFile(_ path: String) throws -> String {
        let file = try PosixFile(path: path, flags: O_RDONLY)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while bytes.count < 1 << 20 {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(file.fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    func unlock() { _ = flock(fd, LOCK_UN) }

    // MARK: - Whole files and folders

    /// Writes a file durably: to a temporary name, synced, renamed over `path`, folder synced.
    static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws {
        // A fresh name each time, created exclusively and never through a symlink.
        let temporary = path + ".tmp-" + Hex.encode(Sodium().randomBytes(6))
        do {
            let file = try PosixFile(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode)
            do {
                try file.write(bytes, at: 0)
                try file.sync()
            } catch {
                // A full disk, say: leave no half-written temporary file behind.
                unlink(temporary)
                throw error
            }
        }
        guard FileFaults.call(.rename, path, { rename(temporary, path) }) == 0 else {
            let why = reason()
            unlink(temporary)
            throw ConsentError.storage("cannot rename \(temporary) to \(path): \(why)")
        }
        try syncDirectory(parent(of: path))
    }

    /// Creates a file that must not exist yet, writes it and syncs it.
    static func writeNew(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws {
        let file = try PosixFile(path: path, flags: O_WRONLY | O_CREAT | O_EXCL, mode: mode)
        try file.write(bytes, at: 0)
        try file.sync()
        guard fchmod(file.fd, mode) == 0 else { throw ConsentError.storage("cannot set mode of \(path): \(reason())") }
    }

    static func syncDirectory(_ path: String) throws {
        let fd = FileFaults.call(.open, path + "/") { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { throw ConsentError.storage("cannot open folder \(path): \(reason())") }
        defer { close(fd) }
        guard FileFaults.call(.sync, path + "/", { fsync(fd) }) == 0 else { throw ConsentError.storage("cannot sync folder \(path): \(reason())") }
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let p = String(path[..<slash])
        return p.isEmpty ? "/" : p
    }

    enum Kind { case missing, file, directory, symlink }

    static func kind(of path: String) -> Kind {
        guard let identity = identity(of: path, followingLinks: true) else { return .missing }
        return identity.mode & S_IFMT == S_IFDIR ? .directory : .file
    }

    /// What is at `path` itself, without following a symlink there.
    static func ownKind(of path: String) -> Kind {
        guard let identity = identity(of: path) else { return .missing }
        switch identity.mode & S_IFMT {
        case S_IFDIR: return .directory
        case S_IFLNK: return .symlink
        default: return .file
        }
    }

    /// Whether `path` is a regular file (not a symlink, folder, FIFO or device).
    static func isRegularFile(_ path: String) -> Bool {
        identity(of: path)?.isRegularFile ?? false
    }

    static func directoryEntries(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}

/// Reading a whole local file, for inputs such as a catalogue.
public enum LocalFile {
    /// How long a pipe or FIFO given as an input may stay silent before the read gives up: a
    /// writer such as `<(command)` starts at once, a FIFO nobody writes to would wait for ever.
    public static let pipeSilence = 5

    /// The file's bytes; at most `limit` bytes are accepted. A pipe or FIFO (`<(command)`,
    /// `/dev/stdin`) is read to its end, as long as it never stays silent for ``pipeSilence``
    /// seconds; a folder or another kind of file is a usage error.
    public static func read(_ path: String, limit: Int = 16 << 20) throws -> [UInt8] {
        let file: PosixFile
        do {
            // Never blocking in open: a FIFO without a writer would block here for ever.
            file = try PosixFile(path: path, flags: O_RDONLY | O_NONBLOCK)
        } catch ConsentError.notFound {
            throw ConsentError.invalidRequest("\(path): no such file")
        }
        var st = stat()
        guard fstat(file.fd, &st) == 0 else { throw ConsentError.storage("cannot stat \(path): \(PosixFile.reason())") }
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            _ = fcntl(file.fd, F_SETFL, fcntl(file.fd, F_GETFL) & ~O_NONBLOCK)
            let size = try file.size()
            guard size <= UInt64(limit) else { throw ConsentError.invalidRequest("\(path) is larger than \(limit) bytes") }
            return try file.readAll()
        case S_IFIFO, S_IFCHR:
            return try readStream(file, limit: limit)
        default:
            throw ConsentError.invalidRequest("\(path) is \(PosixFile.describe(mode: st.st_mode)), not a file to read")
        }
    }

    /// Reads a pipe, FIFO or character device to its end, waiting at most ``pipeSilence``
    /// seconds for each chunk.
    static func readStream(_ file: PosixFile, limit: Int) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var waitedForWriter = false
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(file.fd, $0.baseAddress, $0.count) }
            if n > 0 {
                bytes += chunk[0..<n]
                guard bytes.count <= limit else { throw ConsentError.invalidRequest("\(file.path) is larger than \(limit) bytes") }
                continue
            }
            if n == 0 {
                // End of input, or a FIFO that no writer has opened yet: wait for one, once
                // (`/dev/null` is always readable, and always at its end).
                if bytes.isEmpty, !waitedForWriter {
                    waitedForWriter = true
                    if try waitForInput(file) { continue }
                }
                return bytes
            }
            if errno == EINTR { continue }
            guard errno == EAGAIN || errno == EWOULDBLOCK else { throw ConsentError.storage("cannot read \(file.path): \(PosixFile.reason())") }
            guard try waitForInput(file) else { return bytes }
        }
    }

    /// Waits for `file` to be readable; throws after ``pipeSilence`` seconds of silence. False
    /// when the writer hung up.
    static func waitForInput(_ file: PosixFile) throws -> Bool {
        var poller = pollfd(fd: file.fd, events: Int16(POLLIN), revents: 0)
        var ready: Int32
        repeat { ready = poll(&poller, 1, Int32(pipeSilence * 1000)) } while ready < 0 && errno == EINTR
        guard ready > 0 else {
            throw ConsentError.invalidRequest("\(file.path) is a pipe or FIFO, and nothing was written to it for \(pipeSilence) s; give a file, or start the command that writes it")
        }
        return poller.revents & Int16(POLLIN) != 0
    }
}

extension LocalFile {
    /// Writes a file durably and atomically (temporary name, sync, rename), readable by its
    /// owner only: exports and reports hold subject ids.
    /// A device or a FIFO already at `path` (`/dev/null`, `/dev/stdout`, a named pipe) is
    /// written to as it is: renaming a file over it would replace the device itself.
    public static func write(_ bytes: [UInt8], to path: String) throws {
        var st = stat()
        if stat(path, &st) == 0, case let type = st.st_mode & S_IFMT, type == S_IFCHR || type == S_IFIFO {
            // Non-blocking open: a FIFO nobody reads fails at once instead of hanging.
            let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { throw ConsentError.storage("cannot open \(path) for writing: \(PosixFile.reason())") }
            defer { close(fd) }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
            var done = 0
            try bytes.withUnsafeBytes { raw in
                while done < raw.count {
                    let n = Glibc.write(fd, raw.baseAddress! + done, raw.count - done)
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw ConsentError.storage("cannot write \(path): \(PosixFile.reason())")
                    }
                    done += n
                }
            }
            return
        }
        try PosixFile.writeAtomically(bytes, to: path, mode: 0o600)
    }
}

/// An input file read in place: a regular file is mapped read-only, so a large one (an export
/// bundle of the whole ledger, 200 MB for 150,000 events) is never copied into memory, and the
/// pages a reader is done with are given back (``release(below:)``): what stays resident is
/// what is being read. A pipe or FIFO cannot be mapped; it is read into memory, up to
/// `streamLimit` bytes (``LocalFile/read(_:limit:)``).
public final class InputFile {
    public let path: String
    private let base: UnsafeMutableRawPointer?
    private let copy: [UInt8]?
    public let count: Int
    private var released = 0
    private static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Opens `path`: a regular file of at most `limit` bytes is mapped; a pipe, FIFO or
    /// character device is read, at most `streamLimit` bytes.
    public init(path: String, limit: Int, streamLimit: Int) throws {
        self.path = path
        var st = stat()
        guard stat(path, &st) == 0 else {
            if errno == ENOENT { throw ConsentError.invalidRequest("\(path): no such file") }
            throw ConsentError.storage("cannot stat \(path): \(PosixFile.reason())")
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            let bytes = try LocalFile.read(path, limit: streamLimit)
            (base, copy, count) = (nil, bytes, bytes.count)
            return
        }
        let file = try PosixFile(path: path, flags: O_RDONLY | O_NONBLOCK)
        var fst = stat()
        guard fstat(file.fd, &fst) == 0 else { throw ConsentError.storage("cannot stat \(path): \(PosixFile.reason())") }
        // Replaced by something else between the two looks: read it as LocalFile reads it.
        guard fst.st_mode & S_IFMT == S_IFREG else {
            let bytes = try LocalFile.read(path, limit: streamLimit)
            (base, copy, count) = (nil, bytes, bytes.count)
            return
        }
        let size = Int(fst.st_size)
        guard size <= limit else { throw ConsentError.invalidRequest("\(path) is larger than \(limit) bytes") }
        guard size > 0 else {
            (base, copy, count) = (nil, [], 0)
            return
        }
        guard let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE, file.fd, 0), mapped != MAP_FAILED else {
            throw ConsentError.storage("cannot map \(path) (\(size) bytes): \(PosixFile.reason())")
        }
        // Read front to back: the kernel reads ahead.
        _ = madvise(mapped, size, MADV_SEQUENTIAL)
        (base, copy, count) = (mapped, nil, size)
    }

    deinit {
        if let base { munmap(base, count) }
    }

    /// The file's bytes, valid while `body` runs.
    public func withBytes<R, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> R) throws(E) -> R {
        if let base { return try body(UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: count)) }
        return try copy!.withUnsafeBufferPointer { (b) throws(E) -> R in try body(b) }
    }

    /// The bytes below `offset` will not be read again soon: their pages leave this process's
    /// memory (a later read maps them in again, from the page cache or the disk).
    public func release(below offset: Int) {
        guard let base else { return }
        let end = min(offset, count) / Self.pageSize * Self.pageSize
        // A reader that starts again from the front (a second pass) gives back from there.
        if end < released { released = 0 }
        guard end > released else { return }
        _ = madvise(base + released, end - released, MADV_DONTNEED)
        released = end
    }
}
