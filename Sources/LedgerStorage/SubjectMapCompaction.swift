import LedgerFormat
import Synchronization
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Compacts a folder's `subjects.map` off the commit path, for a writer that lives long.
///
/// The file only grows: each commit appends the map's nodes it changed. Once it holds far more
/// records than the map needs (``SubjectMap/wantsCompaction(recordCount:keyCount:)``), a compact
/// copy replaces it. Made inside a commit, that copy stalls every writer waiting for the commit:
/// at 5M events it gathered and wrote 150,000–200,000 nodes in 110–200 ms, once every ~24,000
/// commands. So a store that has committed ``backgroundAfterCommits`` times (a service,
/// `apply`, a bench; not a process of one command, which would exit before the copy is done)
/// makes the copy on a thread of its own:
///
/// 1. After a commit whose root record is record `r`, the thread reads records `0...r`, copies
///    the nodes reachable from `r` (children first, numbered from 0) and then `r` itself into a
///    temporary file, and syncs it. Records up to `r` are never rewritten: records are appended,
///    and a whole new map is a new file.
/// 2. The first commit after that, under the ledger's lock and after appending its own records:
///    if `subjects.map` is still the file the thread read, with record `r` unchanged, the
///    records after `r` (other commits', its own) are appended to the copy with their
///    references renumbered; the copy is synced and renamed over `subjects.map`, as a compaction
///    made in a commit is. Otherwise the copy is dropped, and the next commit may start another.
///
/// A reference past `r` moves down by the number of records the copy left out. A reference to a
/// record at or before `r` goes to that node's place in the copy: a record refers only to nodes
/// of the map it was written for, and a node no longer in a map never comes back, so a node
/// still used after `r` was in `r`'s map. References are not hashed: every hash stays as it was,
/// and readers check each node against the hash its parent records, as ever. A copy that went
/// wrong would be found, never believed; none is installed unless every reference resolves.
package final class SubjectMapCompactor: Sendable {
    /// Commits a store makes before it compacts in the background; settable for tests.
    package let backgroundAfterCommits: Atomic<Int>
    static let defaultBackgroundAfterCommits = 32

    /// Compact copies installed so far (for tests and benchmarks).
    package let installed = Atomic<Int>(0)
    /// Runs on the compaction's thread before it reads the map (tests hold it there).
    let beforeCopying = Mutex<(@Sendable () -> Void)?>(nil)

    /// A compact copy of the map at root record `rootIndex`, synced in `path`.
    private struct Copy: Sendable {
        let path: String
        let source: FileIdentity
        let rootIndex: Int64
        let rootRecord: [UInt8]
        /// Records in the copy.
        let count: Int64
        /// Each old record's index in the copy; -1 for one not in the copy.
        let moved: [Int64]
    }

    private enum Phase: Sendable {
        case idle
        case copying
        case copied(Copy)
    }

    /// Commits made, and the commit before which no copy is started again (after one failed).
    private let state = Mutex<(commits: Int, phase: Phase, notBefore: Int)>((0, .idle, 0))

    /// Commits after a copy that could not be made or installed before another is tried: a map
    /// that cannot be read, or a full disk, is not read whole again at every commit.
    static let retryAfterCommits = 64

    /// Records a map must hold before a copy is made off the commit path: a smaller one is
    /// compacted in its commit when it is overdue. Never binding with the default slack (a map
    /// wants compaction only past 65,536 records); tests lower it for the stores they watch,
    /// so that the stores of other tests never start threads of their own.
    package let minimumRecords = Atomic<Int64>(65_536)

    init(backgroundAfterCommits: Int = SubjectMapCompactor.defaultBackgroundAfterCommits) {
        self.backgroundAfterCommits = Atomic(backgroundAfterCommits)
    }

    /// Whether this store makes compact copies itself, so that its commits need not.
    var inBackground: Bool {
        state.withLock { $0.commits } >= backgroundAfterCommits.load(ordering: .relaxed)
    }

    /// Whether a copy is being made.
    var copying: Bool {
        state.withLock { if case .copying = $0.phase { true } else { false } }
    }

    /// Whether a copy is being made or waits to be installed.
    var busy: Bool {
        state.withLock { if case .idle = $0.phase { false } else { true } }
    }

    /// After a commit appended records to the map (`map`, at `path`, now `count` records, the
    /// last a root record, `last`), under the ledger's lock: installs a finished copy, or starts
    /// one when the map wants it. Never throws: a copy that cannot be made or installed is
    /// dropped, and the map stays as the commit left it.
    func appended(to map: PosixFile, path: String, count: Int64, last: [UInt8]) {
        let (commits, phase, notBefore) = state.withLock { state -> (Int, Phase, Int) in
            state.commits += 1
            let phase = state.phase
            if case .copied = phase { state.phase = .idle }
            return (state.commits, phase, state.notBefore)
        }
        switch phase {
        case .copying:
            return
        case .copied(let copy):
            if install(copy, over: map, path: path, count: count) {
                installed.add(1, ordering: .relaxed)
            } else {
                unlink(copy.path)
                failed()
            }
            return
        case .idle:
            break
        }
        guard commits >= backgroundAfterCommits.load(ordering: .relaxed), commits >= notBefore, count >= minimumRecords.load(ordering: .relaxed), count > 0,
              let root = try? SubjectMapRecord.decodeRoot(last),
              SubjectMap.wantsCompaction(recordCount: count, keyCount: root.keyCount),
              let source = FileIdentity(map) else { return }
        let started = state.withLock { state -> Bool in
            guard case .idle = state.phase else { return false }
            state.phase = .copying
            return true
        }
        guard started else { return }
        let made = onDetachedThread { [self] in
            // At the lowest priority: on a machine of few cores the copy takes a core the
            // commits would use (Linux sets the calling thread's nice value).
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
            let copy = makeCopy(path: path, source: source, rootIndex: count - 1, rootRecord: last)
            state.withLock { $0.phase = copy.map { .copied($0) } ?? .idle }
            if copy == nil { failed() }
        }
        if !made {
            state.withLock { $0.phase = .idle }
            failed()
        }
    }

    private func failed() {
        state.withLock { $0.notBefore = $0.commits + Self.retryAfterCommits }
    }

    /// The compact copy of the map rooted at record `rootIndex`, written and synced; nil when the
    /// file changed or cannot be read (the next commit may try again).
    private func makeCopy(path: String, source: FileIdentity, rootIndex: Int64, rootRecord: [UInt8]) -> Copy? {
        beforeCopying.withLock { $0 }?()
        let size = SubjectMapRecord.size
        guard let file = try? PosixFile.regular(path, flags: O_RDONLY), FileIdentity(file) == source,
              let records = try? file.read(at: 0, count: Int(rootIndex + 1) * size), records.count == Int(rootIndex + 1) * size,
              Array(records[(Int(rootIndex) * size)...]) == rootRecord,
              let root = try? SubjectMapRecord.decodeRoot(rootRecord) else { return nil }
        var out = SubjectMapRecords()
        // Each old record's index in the copy, -1 for one not copied (yet).
        var moved = [Int64](repeating: -1, count: Int(rootIndex) + 1)
        /// Copies the node of record `index` and everything under it, children first; its index
        /// in the copy. A child comes before its parent in the file, which bounds the walk on
        /// any bytes.
        func copy(_ index: Int64, below parent: Int64, depth: Int) -> Int64? {
            guard index >= 0, index < parent, depth <= 8 * SubjectMap.keyLength else { return nil }
            if moved[Int(index)] >= 0 { return moved[Int(index)] }
            let start = Int(index) * size
            guard let node = try? SubjectMapRecord.decodeNode(Array(records[start..<(start + size)])) else { return nil }
            switch node {
            case .leaf:
                out.append(node)
            case .inner(let left, let right, let leftHash, let rightHash):
                var placedLeft: Int64?, placedRight: Int64?
                if let left {
                    guard let placed = copy(left, below: index, depth: depth + 1) else { return nil }
                    placedLeft = placed
                }
                if let right {
                    guard let placed = copy(right, below: index, depth: depth + 1) else { return nil }
                    placedRight = placed
                }
                out.append(.inner(placedLeft, placedRight, leftHash, rightHash))
            }
            let placed = Int64(out.count - 1)
            moved[Int(index)] = placed
            return placed
        }
        var node: Int64?
        if let old = root.node {
            guard let placed = copy(old, below: rootIndex, depth: 0) else { return nil }
            node = placed
        }
        out.append(SubjectMapRecord.Root(coveredSize: root.coveredSize, node: node, hash: root.hash, keyCount: root.keyCount))
        // Named as the folder's temporaries are, but apart from a commit's own: one a crash
        // leaves is swept by a later writer once it is older than any copy still being made.
        let temporary = path + ".copy.tmp-" + Hex.encode(Sodium().randomBytes(6))
        do {
            let file = try PosixFile(path: temporary, flags: O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o644)
            try file.write(out.bytes, at: 0)
            try file.sync()
        } catch {
            unlink(temporary)
            return nil
        }
        moved[Int(rootIndex)] = Int64(out.count - 1)
        return Copy(path: temporary, source: source, rootIndex: rootIndex, rootRecord: rootRecord, count: Int64(out.count), moved: moved)
    }

    /// Appends the records after the copy's root, renumbered, to the copy and renames it over
    /// the map; false, with the map untouched, when the map is no longer the file copied or a
    /// reference does not resolve.
    private func install(_ copy: Copy, over map: PosixFile, path: String, count: Int64) -> Bool {
        let size = SubjectMapRecord.size
        guard FileIdentity(map) == copy.source, count > copy.rootIndex,
              let root = try? map.read(at: UInt64(copy.rootIndex) * UInt64(size), count: size), root == copy.rootRecord,
              let tail = try? map.read(at: UInt64(copy.rootIndex + 1) * UInt64(size), count: Int(count - copy.rootIndex - 1) * size),
              tail.count == Int(count - copy.rootIndex - 1) * size else { return false }
        let shift = copy.count - (copy.rootIndex + 1)
        func renumbered(_ index: Int64?) -> Int64?? {
            guard let index else { return .some(nil) }
            if index > copy.rootIndex { return .some(index + shift) }
            guard index >= 0, copy.moved[Int(index)] >= 0 else { return nil }
            return .some(copy.moved[Int(index)])
        }
        var out = SubjectMapRecords()
        for start in stride(from: 0, to: tail.count, by: size) {
            let record = Array(tail[start..<(start + size)])
            if SubjectMapRecord.isRoot(record) {
                guard let root = try? SubjectMapRecord.decodeRoot(record), let node = renumbered(root.node) else { return false }
                out.append(SubjectMapRecord.Root(coveredSize: root.coveredSize, node: node, hash: root.hash, keyCount: root.keyCount))
                continue
            }
            switch try? SubjectMapRecord.decodeNode(record) {
            case .leaf?:
                out.append(try! SubjectMapRecord.decodeNode(record))
            case .inner(let left, let right, let leftHash, let rightHash)?:
                guard let l = renumbered(left), let r = renumbered(right) else { return false }
                out.append(.inner(l, r, leftHash, rightHash))
            case nil:
                return false
            }
        }
        // Fewer records than the map had, always (the copy leaves out what the map no longer
        // uses): a writer that remembers the map by its record count sees that it changed.
        guard copy.count + Int64(out.count) < count else { return false }
        do {
            let file = try PosixFile(path: copy.path, flags: O_WRONLY | O_NOFOLLOW)
            try file.write(out.bytes, at: UInt64(copy.count) * UInt64(size))
            try file.sync()
        } catch {
            return false
        }
        guard FileFaults.call(.rename, path, { rename(copy.path, path) }) == 0 else { return false }
        // Renamed: the copy is the map now, whether or not the folder's sync below succeeds (the
        // old map and the new one are both whole, and hold the same map).
        _ = try? PosixFile.syncDirectory(PosixFile.parent(of: path))
        return true
    }
}

/// A file's device and inode: which file a descriptor is, whatever its name now.
struct FileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    init?(_ file: PosixFile) {
        var st = stat()
        guard fstat(file.fd, &st) == 0 else { return nil }
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }
}

