#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Threads of its own for the ledger's blocking work, so that `async` callers never block a
/// thread of Swift's cooperative pool or of Dispatch's.
///
/// A ledger call blocks: on the disk's sync, on the storage's lock, and, for writes that share
/// a commit (group commit), on the commit that serves them. Dispatch runs about as many blocks
/// at once as there are cores and does not know that these are asleep, so with two cores two
/// writers waited for each other while the next requests queued behind them (a load test saw
/// p99 latencies of 900 ms). Here each waiting call has a thread: up to `maximum` threads are
/// started as work arrives, and a thread idle for ten seconds ends.
final class BlockingWorkers: @unchecked Sendable {
    private var jobs: [() -> Void] = []
    private var next = 0
    private var threads = 0
    private var idle = 0
    private let maximum: Int
    private let state = ThreadCondition()

    init(maximum: Int) {
        self.maximum = max(1, maximum)
    }

    /// Runs `job` on one of the threads, as soon as one is free.
    func submit(_ job: @escaping @Sendable () -> Void) {
        state.lock()
        jobs.append(job)
        if idle > 0 {
            state.signal()
        } else if threads < maximum {
            threads += 1
            start()
        }
        state.unlock()
    }

    private func start() {
        final class Box { let workers: BlockingWorkers; init(_ w: BlockingWorkers) { workers = w } }
        let box = Unmanaged.passRetained(Box(self)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { argument in
            Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().workers.work()
            return nil
        }, box)
        if rc == 0 {
            pthread_detach(thread)
        } else {
            // No thread could be started. Another thread, if one runs, takes the work; if none
            // does, the work runs here, on the caller's thread, rather than never.
            threads -= 1
            Unmanaged<Box>.fromOpaque(box).release()
            if threads == 0 {
                let pending = jobs[next...]
                jobs.removeAll()
                next = 0
                state.unlock()
                pending.forEach { $0() }
                state.lock()
            }
        }
    }

    private func work() {
        state.lock()
        while true {
            if next < jobs.count {
                let job = jobs[next]
                next += 1
                if next == jobs.count { jobs.removeAll(keepingCapacity: true); next = 0 }
                state.unlock()
                job()
                state.lock()
                continue
            }
            idle += 1
            let woken = state.wait(seconds: 10)
            idle -= 1
            if !woken, next >= jobs.count {
                threads -= 1
                state.unlock()
                return
            }
        }
    }
}
