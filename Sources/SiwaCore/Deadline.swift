import Dispatch

/// A moment on the monotonic clock (`DispatchTime.uptimeNanoseconds`) by which something must be
/// done: a request's commit timeout, a key wait, the shutdown budget, a pool checkout. The one
/// type for every timeout and budget of the receive path, so none is mixed up with wall-clock
/// time (`Date`) or with a duration in seconds.
///
/// The arithmetic is pure and saturating (`remaining(at:)`, `adding(seconds:)`, `hasPassed(at:)`
/// take the current time as an argument, for tests without a clock); only `now`, `init(seconds:)`
/// and `remaining` read the clock.
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let uptimeNanoseconds: UInt64

    public init(uptimeNanoseconds: UInt64) {
        self.uptimeNanoseconds = uptimeNanoseconds
    }

    /// Never reached.
    public static let never = Deadline(uptimeNanoseconds: .max)

    /// The current moment of the monotonic clock.
    public static var now: Deadline { Deadline(uptimeNanoseconds: DispatchTime.now().uptimeNanoseconds) }

    /// `seconds` from now (negative or NaN: now; too large: `never`).
    public init(secondsFromNow seconds: Double) {
        self = Deadline.now.adding(seconds: seconds)
    }

    /// This deadline moved `seconds` later (negative or NaN: unchanged), saturating at `never`.
    public func adding(seconds: Double) -> Deadline {
        guard seconds > 0 else { return self }
        let nanos = seconds * 1e9
        guard nanos < Double(UInt64.max - uptimeNanoseconds) else { return .never }
        return Deadline(uptimeNanoseconds: uptimeNanoseconds + UInt64(nanos))
    }

    /// Seconds left at `now` (0 once passed).
    public func remaining(at now: Deadline) -> Double {
        now >= self ? 0 : Double(uptimeNanoseconds - now.uptimeNanoseconds) / 1e9
    }

    /// Seconds left (0 once passed).
    public var remaining: Double { remaining(at: .now) }

    /// True once `now` is at or after the deadline.
    public func hasPassed(at now: Deadline) -> Bool { now >= self }

    /// For `DispatchGroup.wait(timeout:)` and `DispatchSemaphore.wait(timeout:)`.
    public var dispatchTime: DispatchTime {
        self == .never ? .distantFuture : DispatchTime(uptimeNanoseconds: uptimeNanoseconds)
    }

    public static func < (a: Deadline, b: Deadline) -> Bool { a.uptimeNanoseconds < b.uptimeNanoseconds }

    public var description: String {
        self == .never ? "never" : "uptime \(Double(uptimeNanoseconds) / 1e9)s"
    }
}
