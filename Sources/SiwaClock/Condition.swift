import Glibc
import SiwaCore

/// A mutex and a condition variable whose timed waits run on `CLOCK_MONOTONIC` (a wall-clock
/// step never shortens or stretches a timeout, as it would with `NSCondition.wait(until: Date)`).
/// The one place a thread blocks with a deadline: every wait of the runtime goes through it.
public final class Condition: @unchecked Sendable {
    // @unchecked: the pthread objects are used only through the pthread calls, which are
    // thread-safe; they live as long as the object.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        cond.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` with the lock held.
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    public func signal() { pthread_cond_signal(cond) }
    public func broadcast() { pthread_cond_broadcast(cond) }

    /// Waits (the lock held) until signalled; may wake spuriously.
    public func waitLocked() { pthread_cond_wait(cond, mutex) }

    /// Waits (the lock held) until signalled or `deadline` on the monotonic clock; may wake
    /// spuriously. `Deadline.never` waits without a timeout.
    public func waitLocked(until deadline: Deadline) {
        guard deadline != .never else { return waitLocked() }
        var ts = timespec(
            tv_sec: Int(deadline.uptimeNanoseconds / 1_000_000_000), tv_nsec: Int(deadline.uptimeNanoseconds % 1_000_000_000))
        pthread_cond_timedwait(cond, mutex, &ts)
    }
}
