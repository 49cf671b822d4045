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
    let chunks = min(count, ProcessInfoCores.count * 4)
    DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
        let start = count * chunk / chunks
        let end = count * (chunk + 1) / chunks
        for i in start..<end { results.set(i, transform(i)) }
    }
    return results.take()
}

/// Write-once slots shared by the workers of `parallelMap`; each slot is written by one worker.
private final class ResultSlots<T>: @unchecked Sendable {
    private var slots: [T?]

    init(count: Int) { slots = Array(repeating: nil, count: count) }

    func set(_ i: Int, _ value: T) {
        slots.withUnsafeMutableBufferPointer { $0[i] = value }
    }

    func take() -> [T] { slots.map { $0! } }
}

enum ProcessInfoCores {
    /// Online cores, read once.
    static let count: Int = {
        let n = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        return max(1, n)
    }()
}
