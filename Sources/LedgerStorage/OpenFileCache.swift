import LedgerFormat
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Descriptors of a ledger folder's files, kept open between one store's transactions.
///
/// Opening a file the careful way (``PosixFile/regular(_:flags:mode:)``: open without following
/// a link, `fstat` that it is a regular file, two `fcntl`s to make it blocking) and closing it
/// again was five system calls per file per transaction: about 70 of a durable command's 100,
/// and half of a one-subject read's. A kept descriptor costs one `statx` of its path instead,
/// for its type and identity only (``PosixFile/Identity``: not its times, so that the log's
/// sync does not write its inode).
///
/// Why that one call is enough: a ledger's files are changed in place or replaced by `rename`
/// (a rewritten subject file, a compacted subject map, a repair), and a replaced path names a
/// new inode. A kept descriptor is handed out only while its path, not followed if it is a
/// link, still names a regular file with the kept file's device and inode. The descriptor
/// itself holds that inode, so its number cannot be given to another file while it is kept.
/// Anything else (a new inode, a link, a missing file) opens the path afresh as before, with
/// the same checks and the same errors, and keeps the new descriptor if that succeeds.
///
/// A descriptor is shared by the transactions that use it; `pread` and `pwrite` carry their
/// offsets, so sharing changes nothing. It is closed when the cache lets it go and the last
/// transaction holding it is done (``PosixFile`` closes on release).
///
/// The lock is different: an `flock` belongs to an open file description, so two transactions
/// of one process that shared one would share its lock. Lock files are therefore lent, one to a
/// transaction at a time (``borrowLockFile(_:)``), and given back unlocked.
final class OpenFileCache: Sendable {
    fileprivate struct Kept: @unchecked Sendable {
        // `PosixFile` is immutable (a descriptor and a path); it is shared read-only here.
        let file: PosixFile
        let device: UInt64
        let inode: UInt64
    }

    private struct Key: Hashable {
        let path: String
        let writable: Bool
    }

    private let kept = Mutex<[Key: Kept]>([:])
    private let idleLocks = Mutex<[Kept]>([])
    /// Lock files kept idle at most: more than this many transactions of one store at once
    /// open their own and close them. Small, since a process may hold many stores, each with
    /// its data files open too.
    static let idleLockLimit = 2

    /// The file at `path`, open for reading (and writing, if `writable`), created if missing and
    /// `create`. The same errors as opening it afresh.
    func file(_ path: String, writable: Bool, create: Bool = false) throws -> PosixFile {
        let key = Key(path: path, writable: writable)
        if let found = PosixFile.identity(of: path), found.isRegularFile {
            let (device, inode) = (found.device, found.inode)
            if let hit = kept.withLock({ k -> Kept? in
                guard let entry = k[key], entry.device == device, entry.inode == inode else { return nil }
                return entry
            }) {
                return hit.file
            }
        }
        let flags = (writable ? O_RDWR : O_RDONLY) | (create ? O_CREAT : 0)
        let file = try PosixFile.regular(path, flags: flags)
        if let entry = Self.kept(file) {
            kept.withLock { $0[key] = entry }
        }
        return file
    }

    /// A lock file lent to one transaction, with the device and inode it was found at when
    /// it was an idle one (given back without asking the file system again).
    struct LentLockFile {
        let file: PosixFile
        fileprivate let kept: Kept?
    }

    /// A lock file of its own for one transaction: an idle one whose path still names it, or
    /// one opened afresh. Give it back with ``returnLockFile(_:)`` once unlocked.
    func borrowLockFile(_ path: String) throws -> LentLockFile {
        if let found = PosixFile.identity(of: path), found.isRegularFile {
            let (device, inode) = (found.device, found.inode)
            let idle = idleLocks.withLock { locks -> Kept? in
                // Lock files of a replaced path are let go: they no longer exclude anyone.
                locks.removeAll { $0.device != device || $0.inode != inode }
                return locks.popLast()
            }
            if let idle { return LentLockFile(file: idle.file, kept: idle) }
        }
        // The lock file is not ledger data: a copied ledger may lack it, so make it on demand.
        return LentLockFile(file: try PosixFile.regular(path, flags: O_RDONLY | O_CREAT), kept: nil)
    }

    /// Takes back a lock file lent by ``borrowLockFile(_:)``, which its transaction unlocked.
    func returnLockFile(_ lent: LentLockFile) {
        guard let entry = lent.kept ?? Self.kept(lent.file) else { return }
        idleLocks.withLock { locks in
            if locks.count < Self.idleLockLimit { locks.append(entry) }
        }
    }

    private static func kept(_ file: PosixFile) -> Kept? {
        guard let identity = file.identity() else { return nil }
        return Kept(file: file, device: identity.device, inode: identity.inode)
    }
}
