import Dispatch
import Synchronization
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
/// chunks of them are offered to worker threads at once, so the caller's serial work and the
/// workers' overlap. ``finish()`` then has the caller compute every chunk no worker has taken
/// yet, alongside the workers, before it waits for theirs and returns the results in index
/// order.
///
/// Chunks are small enough that every core gets some of a group commit's few dozen events
/// (the group's leader would otherwise sign them all on its own while the other cores sleep),
/// and a chunk a worker has not started is the caller's to take, so a worker slow to wake
/// delays nothing. An input too small to share (one command's few events) is never offered:
/// waking a thread for it would cost more than the work.
package final class OverlappedMap<T: Sendable>: @unchecked Sendable {
    /// Inputs fewer than this are computed on the caller's thread alone.
    package static var minimumToShare: Int { 4 }
    /// The largest chunk: big batches still spread over every core in many pieces.
    static var largestChunk: Int { 64 }

    private let results: ResultSlots<T>
    private let count: Int
    private let chunk: Int
    private let shares: Bool
    private let transform: @Sendable (Int) -> T
    private let group = DispatchGroup()
    /// Chunks whose inputs are ready, and the next chunk to be taken (by a worker or the
    /// caller): chunks are taken in order, each once.
    private let progress = Mutex<(ready: Int, taken: Int)>((0, 0))

    /// `chunk`: the inputs per chunk; by default a size that gives each core two or more chunks,
    /// between 1 and 64 (``chunkSize(for:cores:)``).
    package init(count: Int, chunk: Int? = nil, _ transform: @escaping @Sendable (Int) -> T) {
        self.count = count
        self.chunk = max(1, chunk ?? Self.chunkSize(for: count, cores: ProcessInfoCores.count))
        self.shares = count >= Self.minimumToShare
        self.transform = transform
        results = ResultSlots(count: count)
    }

    /// A count's chunk size: at least two chunks per core, at most ``largestChunk`` inputs each.
    package static func chunkSize(for count: Int, cores: Int) -> Int {
        min(largestChunk, max(1, count / (2 * max(1, cores))))
    }

    private var chunks: Int { (count + chunk - 1) / chunk }

    /// Takes the next ready chunk, if any: its index.
    private func take() -> Int? {
        progress.withLock { p in
            guard p.taken < p.ready else { return nil }
            p.taken += 1
            return p.taken - 1
        }
    }

    private func compute(chunk c: Int) {
        for i in c * chunk..<min(count, (c + 1) * chunk) { results.set(i, transform(i)) }
    }

    /// Inputs `0..<available` are ready: whole chunks of them are offered to the workers.
    package func ready(_ available: Int) {
        guard shares else { return }
        let newlyReady = progress.withLock { p -> Int in
            let before = p.ready
            p.ready = max(p.ready, min(available, count) / chunk)
            return p.ready - before
        }
        // One task per chunk made ready; a task finds nothing to do if the caller took it.
        for _ in 0..<newlyReady {
            DispatchQueue.global().async(group: group) { [self] in
                if let c = take() { compute(chunk: c) }
            }
        }
    }

    /// Waits for the chunks taken and drops their results: for giving up part-way.
    package func abandon() {
        group.wait()
        results.discard(min(count, progress.withLock { $0.taken } * chunk))
    }

    /// Computes, on the caller's thread, every chunk no worker has taken (the last, partial one
    /// among them), waits for the workers', and returns every result (call once all inputs are
    /// ready).
    package func finish() -> [T] {
        progress.withLock { $0.ready = chunks }
        while let c = take() { compute(chunk: c) }
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
