import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Maps `0..<count` on all cores. Each index is computed exactly once, in no particular order;
/// the result keeps index order. Small inputs run on the calling thread.
package func parallelMap<T: Sendable>(_ count: Int, minimumForParallel: Int = 64, _ transform: @Sendable (Int) -> T) -> [T] {
    if count < minimumForParallel {
        return (0..<count).map(transform)
    }
    let results = ResultSlots<T>(count: count)
    fill(results, count, transform)
    return results.take()
}

/// `parallelMap`, with the results handed over one at a time by moving them out: for large
/// results that the caller consumes in order, which copying out of an array would cost a copy
/// (and a retain and release of every reference in it) each.
package func parallelResults<T: Sendable>(_ count: Int, minimumForParallel: Int = 64, _ transform: @Sendable (Int) -> T) -> MovedResults<T> {
    let results = ResultSlots<T>(count: count)
    if count < minimumForParallel {
        for i in 0..<count { results.set(i, transform(i)) }
    } else {
        fill(results, count, transform)
    }
    return MovedResults(results, count: count)
}

private func fill<T>(_ results: ResultSlots<T>, _ count: Int, _ transform: @Sendable (Int) -> T) {
    // Many small chunks: the last one to finish holds up the batch, so keep them short.
    let chunks = min(count, ProcessInfoCores.count * 32)
    DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
        let start = count * chunk / chunks
        let end = count * (chunk + 1) / chunks
        for i in start..<end { results.set(i, transform(i)) }
    }
}

/// Results of `parallelResults`, all set, moved out in index order by ``next()``; those not
/// taken are destroyed with this object.
package final class MovedResults<T>: @unchecked Sendable {
    private let slots: ResultSlots<T>
    package let count: Int
    private var taken = 0

    init(_ slots: ResultSlots<T>, count: Int) {
        self.slots = slots
        self.count = count
    }

    /// A copy of the first result, before any is taken.
    package var first: T? { count > 0 && taken == 0 ? slots.get(0) : nil }

    /// The next result, moved out of its slot; nil after the last.
    package func next() -> T? {
        guard taken < count else { return nil }
        defer { taken += 1 }
        return slots.move(taken)
    }

    deinit { slots.discard(taken..<count) }
}

/// Write-once slots shared by the workers of `parallelMap`; each slot is written by exactly one
/// worker. The storage is a raw allocation made once: an Array's `withUnsafeMutableBufferPointer`
/// must not be entered from several threads at once.
package final class ResultSlots<T>: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<T>
    private let count: Int

    package init(count: Int) {
        self.count = count
        slots = UnsafeMutablePointer<T>.allocate(capacity: count)
    }

    package func set(_ i: Int, _ value: consuming T) {
        (slots + i).initialize(to: value)
    }

    /// Moves slot `i` out (it must be set, and is then uninitialized).
    package func move(_ i: Int) -> T { (slots + i).move() }

    /// Slot `i`, which must be set (and the set must happen before this read).
    package func get(_ i: Int) -> T { slots[i] }

    /// Destroys slots `0..<n` (all set): for giving up part-way.
    package func discard(_ n: Int) {
        slots.deinitialize(count: n)
    }

    /// Destroys the slots of `range` (all set).
    package func discard(_ range: Range<Int>) {
        (slots + range.lowerBound).deinitialize(count: range.count)
    }

    /// Moves every slot out; call once, after all are set.
    package func take() -> [T] {
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

/// Computes `transform(i)` for `0..<count` on other threads while the caller is still producing
/// the inputs: the caller calls ``ready(_:)`` as inputs become available, in order, and whole
/// chunks of them are handed to worker threads at once, so the caller's serial work and the
/// workers' overlap. ``finish()`` computes what is left (less than a chunk) on the caller's own
/// thread, waits, and returns the results in index order: a small input (one command's few
/// events) is never handed to another thread, which would cost more in waking it and waiting
/// than the work itself.
package final class OverlappedMap<T: Sendable>: @unchecked Sendable {
    private let results: ResultSlots<T>
    private let count: Int
    private let chunk: Int
    private let transform: @Sendable (Int) -> T
    private let group = DispatchGroup()
    private var submitted = 0

    package init(count: Int, chunk: Int = 64, _ transform: @escaping @Sendable (Int) -> T) {
        self.count = count
        self.chunk = chunk
        self.transform = transform
        results = ResultSlots(count: count)
    }

    /// Inputs `0..<available` are ready: whole chunks of them go to the workers.
    package func ready(_ available: Int) {
        while available - submitted >= chunk {
            let range = submitted..<min(available, submitted + chunk)
            let (results, transform) = (self.results, self.transform)
            DispatchQueue.global().async(group: group) {
                for i in range { results.set(i, transform(i)) }
            }
            submitted = range.upperBound
        }
    }

    /// Waits for the chunks handed out and drops their results: for giving up part-way.
    package func abandon() {
        group.wait()
        results.discard(submitted)
    }

    /// Computes the inputs not handed out on this thread, waits for the others, and returns
    /// every result (call once all inputs are ready).
    package func finish() -> [T] {
        ready(count)
        for i in submitted..<count { results.set(i, transform(i)) }
        submitted = count
        group.wait()
        return results.take()
    }
}

/// Runs `body(i)` for `i` in `0..<count`, each on a thread of its own, and waits for them all:
/// for many callers that block (writers waiting on a sync), which `DispatchQueue.concurrentPerform`
/// does not give, since it runs only as many at once as there are cores. (The bench, the torture
/// driver and the tests use it; the library itself does not.)
package func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    final class Work { let run: () -> Void; init(_ run: @escaping () -> Void) { self.run = run } }
    var threads: [pthread_t] = []
    for i in 0..<count {
        let work = Unmanaged.passRetained(Work { body(i) }).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { argument in
            Unmanaged<Work>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, work)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        threads.append(thread)
    }
    for thread in threads { pthread_join(thread, nil) }
}

/// Runs `body` on a thread of its own, not waited for (work a long-running process does off its
/// callers' path); false when no thread could be made, and `body` does not run.
package func onDetachedThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    final class Work { let run: () -> Void; init(_ run: @escaping () -> Void) { self.run = run } }
    let work = Unmanaged.passRetained(Work(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { argument in
        Unmanaged<Work>.fromOpaque(argument!).takeRetainedValue().run()
        return nil
    }, work)
    guard rc == 0 else {
        Unmanaged<Work>.fromOpaque(work).release()
        return false
    }
    pthread_detach(thread)
    return true
}
