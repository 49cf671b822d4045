import LedgerFormat
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A witness's memory: for each log it witnesses, the latest checkpoint it cosigned, as the
/// cosigned note. A folder with one file per log, named by the hex SHA-256 of the log's origin
/// (an origin may hold any character but a file name may not), each replaced atomically
/// (temporary file, sync, rename, folder sync), and a `lock` file that serialises the
/// check-then-record step across processes, as C2SP `tlog-witness` requires.
public struct WitnessStateStore: Sendable {
    public let directory: String

    /// Opens (creating it if needed) the state folder.
    public init(directory: String) throws {
        self.directory = directory
        switch PosixFile.ownKind(of: directory) {
        case .directory: break
        case .missing:
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw ConsentError.storage("cannot create the witness state folder \(directory): \(PosixFile.reason())")
            }
            try PosixFile.syncDirectory(PosixFile.parent(of: directory))
        default:
            throw ConsentError.invalidRequest("the witness state folder \(directory) is not a folder")
        }
    }

    func path(origin: String) -> String {
        directory + "/" + OpenSSLSHA256().sha256(Array(origin.utf8)).hex + ".checkpoint"
    }

    /// The note last recorded for `origin`, nil if none.
    public func latest(origin: String) throws -> String? {
        let path = path(origin: origin)
        let file: PosixFile
        do {
            file = try PosixFile(path: path, flags: O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        } catch ConsentError.notFound {
            return nil
        }
        let bytes = try file.read(at: 0, count: AddCheckpointRequest.maximumBytes + 1)
        guard bytes.count <= AddCheckpointRequest.maximumBytes, let note = String(validating: bytes, as: UTF8.self) else {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the witness state \(path) is not a checkpoint note"))
        }
        return note
    }

    /// Records `note` as the latest for `origin`, durably.
    public func record(_ note: String, origin: String) throws {
        try PosixFile.writeAtomically(Array(note.utf8), to: path(origin: origin), mode: 0o600)
    }

    /// Runs `body` holding the folder's exclusive lock.
    public func exclusively<T>(_ body: () throws -> T) throws -> T {
        let lock = try PosixFile(path: directory + "/lock", flags: O_RDWR | O_CREAT, mode: 0o600)
        try lock.lock(exclusive: true)
        defer { lock.unlock() }
        return try body()
    }
}
