import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A test seam of the file storage: makes the Nth call of chosen kinds (`open`, `write`, a sync,
/// `rename`) on paths under one folder fail with a chosen `errno` (EIO, ENOSPC, EROFS), as a
/// failing disk would, so that tests can walk a command's whole path one failure at a time.
/// Disarmed, it costs one relaxed atomic load per call. Only the folder named is affected, so
/// tests of other folders may run meanwhile; one plan is armed at a time.
package enum FileFaults {
    package enum Call: Sendable, Hashable {
        case open, write, sync, rename
    }

    struct Plan {
        var folder: String
        var calls: Set<Call>
        /// The call (1-based, counting only `calls` under `folder`) that fails; 0 fails none.
        var failAt: Int
        var code: Int32
        var seen = 0
        var failed = false
    }

    private static let armed = Atomic<Bool>(false)
    private static let plan = Mutex<Plan?>(nil)

    /// From now on, the `failAt`th call of `calls` under `folder` fails with `code` (0 counts
    /// the calls and fails none).
    package static func arm(folder: String, calls: Set<Call>, failAt: Int, code: Int32) {
        plan.withLock { $0 = Plan(folder: folder.hasSuffix("/") ? folder : folder + "/", calls: calls, failAt: failAt, code: code) }
        armed.store(true, ordering: .sequentiallyConsistent)
    }

    /// Ends the plan; returns how many of its calls were made and whether one failed.
    @discardableResult
    package static func disarm() -> (calls: Int, failed: Bool) {
        armed.store(false, ordering: .sequentiallyConsistent)
        return plan.withLock { p in
            defer { p = nil }
            return (p?.seen ?? 0, p?.failed ?? false)
        }
    }

    /// The errno that this call fails with, or nil to make it.
    static func failure(_ call: Call, _ path: String) -> Int32? {
        guard armed.load(ordering: .relaxed) else { return nil }
        return plan.withLock { p -> Int32? in
            guard var current = p, current.calls.contains(call), path.hasPrefix(current.folder) else { return nil }
            current.seen += 1
            defer { p = current }
            guard current.seen == current.failAt else { return nil }
            current.failed = true
            return current.code
        }
    }

    /// `body`'s result, or -1 with `errno` set when the plan fails this call.
    static func call(_ kind: Call, _ path: String, _ body: () -> Int32) -> Int32 {
        if let code = failure(kind, path) {
            errno = code
            return -1
        }
        return body()
    }
}
