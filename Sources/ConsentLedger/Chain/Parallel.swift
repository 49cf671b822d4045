import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Maps `0..<count` on all cores. Each index is computed exactly once, in no particular order;
/// the result keeps index order. Small inputs run on the calling thread.
func parallelMap<T: Sendable>(_ count: Int, minimumForParallel: Int = 64, _ transform: @Sendable (Int) -> T) -> [T] {
    if count < minimumForParallel {
        return (0..<count).map(transform)
    }
    let results = ResultSlots<T>(count: count)
    // Many small chunks: the last one to finish holds up the batch, so keep them short.
    let chunks = min(count, ProcessInfoCores.count * 32)
    DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
        let start = count * chunk / chunks
        let end = count * (chunk + 1) / chunks
        for i in start..<end { results.set(i, transform(i)) }
    }
    return results.take()
}

/// Write-once slots shared by the workers of `parallelMap`; each slot is written by exactly one
/// worker. The storage is a raw allocation made once: an Array's `withUnsafeMutableBufferPointer`
/// must not be entered from several threads at once.
private final class ResultSlots<T>: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<T>
    private let count: Int

    init(count: Int) {
        self.count = count
        slots = UnsafeMutablePointer<T>.allocate(capacity: count)
    }

    func set(_ i: Int, _ value: T) {
        (slots + i).initialize(to: value)
    }

    /// Moves every slot out; call once, after all are set.
    func take() -> [T] {
        Array(unsafeUninitializedCapacity: count) { buffer, initialized in
            buffer.baseAddress!.moveInitialize(from: slots, count: count)
            initialized = count
        }
    }

    deinit { slots.deallocate() }
}

enum ProcessInfoCores {
    /// Online cores, read once.
    static let count: Int = {
        let n = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        return max(1, n)
    }()
}
