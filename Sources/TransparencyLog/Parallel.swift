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
///
/// `alongside`, when given, runs once, on one of the same threads, while the others compute:
/// serial work (a pipeline's ordered stage, applying the results before these) that thereby
/// takes a core of its own instead of a third thread that competes with the workers for two.
/// It is started first, and returns before this call does.
///
/// With `pool`, the results' storage is taken from it and given back to it once they are all
/// moved out or dropped: a loop of batches then writes its results into memory it has touched
/// before. Fresh memory of a few megabytes each batch faulted in every page again (84,000 page
/// faults and 0.2 s of system time in a replay of a million events, against 11,000).
package func parallelResults<T: Sendable>(_ count: Int, minimumForParallel: Int = 64, alongside: (@Sendable () -> Void)? = nil, pool: ResultSlotsPool<T>? = nil, _ transform: @Sendable (Int) -> T) -> MovedResults<T> {
    let results = pool?.take(count: count) ?? ResultSlots<T>(count: count)
    if count < minimumForParallel {
        alongside?()
        for i in 0..<count { results.set(i, transform(i)) }
    } else {
        fill(results, count, alongside: alongside, transform)
    }
    return MovedResults(results, count: count, pool: pool)
}

private func fill<T>(_ results: ResultSlots<T>, _ count: Int, alongside: (@Sendable () -> Void)? = nil, _ transform: @Sendable (Int) -> T) {
    // Many small chunks: the last one to finish holds up the batch, so keep them short.
    let chunks = min(count, ProcessInfoCores.count * 32)
    // Iteration 0 is `alongside`'s: iterations are handed out in order, so it starts at once,
    // and the thread that runs it takes chunks when it is done.
    let first = alongside == nil ? 0 : 1
    DispatchQueue.concurrentPerform(iterations: chunks + first) { iteration in
        guard iteration >= first else { return alongside!() }
        let chunk = iteration - first
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
    /// Where the storage goes back to when these results are gone.
    private let pool: ResultSlotsPool<T>?

    init(_ slots: ResultSlots<T>, count: Int, pool: ResultSlotsPool<T>? = nil) {
        self.slots = slots
        self.count = count
        self.pool = pool
    }

    /// A copy of the first result, before any is taken.
    package var first: T? { count > 0 && taken == 0 ? slots.get(0) : nil }

    /// The next result, moved out of its slot; nil after the last.
    package func next() -> T? {
        guard taken < count else { return nil }
        defer { taken += 1 }
        return slots.move(taken)
    }

    deinit {
        slots.discard(taken..<count)
        pool?.giveBack(slots)
    }
}

/// Storage for the results of `parallelResults`, kept for the next batch of a loop (see there).
/// Holds at most two spare buffers: a pipeline has one batch's results being consumed while
/// the next is computed.
package final class ResultSlotsPool<T>: @unchecked Sendable {
    private let spare = Mutex<[ResultSlots<T>]>([])

    package init() {}

    /// A spare buffer of at least `count` slots (all uninitialized), or a new one.
    func take(count: Int) -> ResultSlots<T> {
        let reused = spare.withLock { list -> ResultSlots<T>? in
            guard let i = list.firstIndex(where: { $0.capacity >= count }) else { return nil }
            return list.remove(at: i)
        }
        return reused ?? ResultSlots<T>(count: count)
    }

    /// How many buffers wait to be lent again.
    package var spareCount: Int { spare.withLock { $0.count } }

    /// Takes back a buffer whose slots are all uninitialized.
    func giveBack(_ slots: ResultSlots<T>) {
        spare.withLock { if $0.count < 2 { $0.append(slots) } }
    }
}

/// Write-once slots shared by the workers of `parallelMap`; each slot is written by exactly one
/// worker. The storage is a raw allocation made once: an Array's `withUnsafeMutableBufferPointer`
/// must not be entered from several threads at once.
package final class ResultSlots<T>: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<T>
    private let count: Int
    /// How many slots the storage has.
    package var capacity: Int { count }

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

package enum ProcessInfoCores {
    /// Online cores, read once.
    package static let count: Int = {
        let n = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        return max(1, n)
    }()
}

/// Computes `transform` of inputs on other threads while the caller is still producing them:
/// the caller ``append(_:)``s inputs in order, as they become available (how many there will
/// be need not be known), and whole chunks of them are offered to worker threads at once, so
/// the caller's serial work and the workers' overlap. ``finish()`` then has the caller compute
/// the inputs not yet in a chunk and every chunk no worker has taken, alongside the workers,
/// before it waits for theirs and returns the results in input order.
///
/// A commit's events are signed this way while the commands after them are still being
/// decided. Chunks are small at first, so that every core gets some of a group commit's few
/// dozen events (the group's leader would otherwise sign them all on its own while the other
/// cores sleep), and grow with the inputs, up to ``largestChunk``. A chunk a worker has not
/// started is the caller's to take, so a worker slow to wake delays nothing. Fewer inputs than
/// ``minimumToShare`` (one command's few events) are never offered: waking a thread for them
/// would cost more than the work.
package final class OverlappedMap<Input: Sendable, T: Sendable>: @unchecked Sendable {
    /// Inputs fewer than this are computed on the caller's thread alone; it is also the
    /// smallest chunk.
    package static var minimumToShare: Int { 4 }
    /// The largest chunk: big batches still spread over every core in many pieces.
    static var largestChunk: Int { 64 }

    /// Consecutive inputs and, once one thread has taken and computed them, their results.
    private final class Chunk: @unchecked Sendable {
        var inputs: [Input]
        var results: [T] = []

        init(_ inputs: [Input]) { self.inputs = inputs }

        func compute(_ transform: (Input) -> T) {
            results.reserveCapacity(inputs.count)
            for input in inputs { results.append(transform(input)) }
            inputs = []
        }
    }

    private let transform: @Sendable (Input) -> T
    private let fixedChunk: Int?
    private let group = DispatchGroup()
    // The caller's alone: inputs not yet in a chunk, and how many were appended.
    private var pending: [Input] = []
    private var appended = 0
    /// The chunks offered so far, in input order, how many of them have been taken (by a
    /// worker or the caller: chunks are taken in order, each once), and the workers at work.
    private let offered = Mutex<(chunks: [Chunk], taken: Int, workers: Int)>(([], 0, 0))
    /// Workers at most: one core fewer than the machine has (one on a single core), since the
    /// caller is busy on its own (deciding and building what comes next), and every result
    /// waits for its serial work: one more worker could take turns with it on the cores.
    private let maxWorkers = max(1, ProcessInfoCores.count - 1)
    private var done = false

    /// `chunk`: the inputs per chunk; by default a size that gives each core two or more chunks
    /// of the inputs so far, between ``minimumToShare`` and ``largestChunk``
    /// (``chunkSize(after:cores:)``).
    package init(chunk: Int? = nil, _ transform: @escaping @Sendable (Input) -> T) {
        fixedChunk = chunk.map { max(1, $0) }
        self.transform = transform
    }

    /// The size of the next chunk once `appended` inputs have been appended.
    package static func chunkSize(after appended: Int, cores: Int) -> Int {
        min(largestChunk, max(minimumToShare, appended / (2 * max(1, cores))))
    }

    /// Takes the next offered chunk no one has taken, if any.
    private func take() -> Chunk? {
        offered.withLock { o in
            guard o.taken < o.chunks.count else { return nil }
            o.taken += 1
            return o.chunks[o.taken - 1]
        }
    }

    /// A worker's next chunk; when there is none, the worker stops (under the same lock as
    /// ``append(_:)`` counts the workers, so that no chunk is left without one).
    private func takeOrStop() -> Chunk? {
        offered.withLock { o in
            guard o.taken < o.chunks.count else {
                o.workers -= 1
                return nil
            }
            o.taken += 1
            return o.chunks[o.taken - 1]
        }
    }

    /// The next input, in order; whole chunks of them are offered to the workers.
    package func append(_ input: Input) {
        pending.append(input)
        appended += 1
        guard appended >= Self.minimumToShare else { return }
        let size = fixedChunk ?? Self.chunkSize(after: appended, cores: ProcessInfoCores.count)
        guard pending.count >= size else { return }
        let chunk = Chunk(pending)
        pending = []
        let startsWorker = offered.withLock { o -> Bool in
            o.chunks.append(chunk)
            guard o.workers < maxWorkers else { return false }
            o.workers += 1
            return true
        }
        // A worker takes chunks in order until none is left.
        if startsWorker {
            DispatchQueue.global().async(group: group) { [self] in
                while let chunk = takeOrStop() { chunk.compute(transform) }
            }
        }
    }

    /// Gives up part-way: no chunk is started any more, those started are waited for, and
    /// every result is destroyed.
    package func abandon() {
        guard !done else { return }
        done = true
        offered.withLock { $0.taken = $0.chunks.count }
        group.wait()
        pending = []
        offered.withLock { $0.chunks = [] }
    }

    /// Computes, on the caller's thread, the inputs not yet in a chunk and every chunk no
    /// worker has taken, waits for the workers', and returns every result in input order (call
    /// once, after the last input).
    package func finish() -> [T] {
        precondition(!done, "an overlapped map is finished once")
        done = true
        let last = Chunk(pending)
        pending = []
        last.compute(transform)
        while let chunk = take() { chunk.compute(transform) }
        group.wait()
        var results: [T] = []
        results.reserveCapacity(appended)
        for chunk in offered.withLock({ $0.chunks }) { results += chunk.results }
        results += last.results
        return results
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
