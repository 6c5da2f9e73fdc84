import SiwaClock
import SiwaCore

/// Wakes a waiting thread early: `wake()` (e.g. a NOTIFY arrived) or `stop()` (shutdown) end a
/// wait at once; otherwise it returns at its deadline (the poll that finds retries falling due).
/// A wake with nobody waiting is remembered for the next wait. Used without `wake()` it is a
/// one-way stop flag that threads wait on.
public final class WakeSignal: @unchecked Sendable {
    // @unchecked: `pending` and `stopped` are only touched with `condition` locked.
    private let condition = Condition()
    private var pending = false
    private var stopped = false
    public let clock: any MonotonicClock

    public init(clock: any MonotonicClock = SystemClock.shared) {
        self.clock = clock
    }

    public func wake() {
        condition.withLock {
            pending = true
            condition.broadcast()
        }
    }

    public func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    public var isStopped: Bool { condition.withLock { stopped } }

    /// Waits until a wake, a stop or `deadline` (on this signal's clock); consumes a pending
    /// wake. Returns true when stopped (at once if it already was).
    @discardableResult
    public func wait(until deadline: Deadline) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !pending && !stopped && clock.now < deadline {
            clock.wait(on: condition, until: deadline)
        }
        pending = false
        return stopped
    }

    /// Waits up to `duration` (see `wait(until:)`).
    @discardableResult
    public func wait(for duration: Duration) -> Bool {
        wait(until: clock.now.adding(duration))
    }
}
