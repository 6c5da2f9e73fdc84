import Glibc
import SiwaCore

/// Where the loops read the time and wait for it: the system's monotonic clock in the product,
/// a `ManualClock` in tests (no sleeps: the test moves the time and the waits end).
public protocol MonotonicClock: Sendable {
    /// The current moment.
    var now: Deadline { get }
    /// Blocks on `condition` (locked by the caller) until it is signalled or `deadline` is
    /// reached on this clock; may return early (callers check their condition again).
    func wait(on condition: Condition, until deadline: Deadline)
}

/// The process's monotonic clock (`CLOCK_MONOTONIC`):
/// the only place the time is read. Wall-clock time (`Date`) is for timestamps others read,
/// never for a timeout, a pace or a budget.
public struct SystemClock: MonotonicClock {
    public static let shared = SystemClock()

    public init() {}

    public var now: Deadline {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Deadline(uptimeNanoseconds: UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec))
    }

    public func wait(on condition: Condition, until deadline: Deadline) {
        condition.waitLocked(until: deadline)
    }
}

extension Deadline {
    /// The current moment of the system's monotonic clock.
    public static var now: Deadline { SystemClock.shared.now }

    /// `duration` from now on the system clock (negative: now; too large: `never`).
    public init(after duration: Duration) {
        self = Deadline.now.adding(duration)
    }

    /// Time left on the system clock (zero once passed).
    public var timeLeft: Duration { timeLeft(at: .now) }
}
