#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A pthread mutex with one condition variable: for state that threads wait on asleep, which
/// `Synchronization.Mutex` (it spins before it sleeps) does not suit when the wait can last a
/// whole commit. Used by ``GroupCommit`` and ``BlockingWorkers``; the state it guards is theirs.
final class ThreadCondition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Waits, with the lock held, until woken (or spuriously: callers loop on their condition).
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits like ``wait()`` for at most `seconds`; false when the time ran out.
    func wait(seconds: Int) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += seconds
        return pthread_cond_timedwait(condition, mutex, &deadline) != ETIMEDOUT
    }

    func signal() { pthread_cond_signal(condition) }
    func broadcast() { pthread_cond_broadcast(condition) }

    /// A condition of one waiter's own, used with this lock: for waking one thread of many
    /// without waking the others.
    final class Waiter: @unchecked Sendable {
        fileprivate let condition: UnsafeMutablePointer<pthread_cond_t>

        init() {
            condition = .allocate(capacity: 1)
            condition.initialize(to: pthread_cond_t())
            pthread_cond_init(condition, nil)
        }

        deinit {
            pthread_cond_destroy(condition)
            condition.deallocate()
        }
    }

    /// Waits on `waiter`'s condition, with the lock held, until it is signalled (or spuriously).
    func wait(on waiter: Waiter) { pthread_cond_wait(waiter.condition, mutex) }

    /// Wakes the thread waiting on `waiter`'s condition, if any.
    func signal(_ waiter: Waiter) { pthread_cond_signal(waiter.condition) }
}
