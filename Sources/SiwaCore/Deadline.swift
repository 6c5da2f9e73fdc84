/// A moment on the monotonic clock (nanoseconds of `CLOCK_MONOTONIC`) by which something must be
/// done: a request's commit timeout, a key wait, the shutdown budget, a pool checkout. The one
/// type for every timeout and budget of the receive path, so none is mixed up with wall-clock
/// time (`Date`) or with a duration in seconds.
///
/// The arithmetic is pure and saturating: every function takes the current time as an argument.
/// The clock is read by `SiwaClock.MonotonicClock`, which adds `now`.
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let uptimeNanoseconds: UInt64

    public init(uptimeNanoseconds: UInt64) {
        self.uptimeNanoseconds = uptimeNanoseconds
    }

    /// Never reached.
    public static let never = Deadline(uptimeNanoseconds: .max)

    /// This deadline moved `duration` later (negative: unchanged), saturating at `never`.
    public func adding(_ duration: Duration) -> Deadline {
        guard duration > .zero else { return self }
        let (seconds, attoseconds) = duration.components
        let nanos = UInt64(clamping: seconds).multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanos.overflow else { return .never }
        let (sum, overflow) = uptimeNanoseconds.addingReportingOverflow(nanos.partialValue &+ UInt64(attoseconds / 1_000_000_000))
        return overflow || sum == .max ? .never : Deadline(uptimeNanoseconds: sum)
    }

    /// Time left at `now` (zero once passed).
    public func timeLeft(at now: Deadline) -> Duration {
        now >= self ? .zero : .nanoseconds(Int64(clamping: uptimeNanoseconds - now.uptimeNanoseconds))
    }

    /// True once `now` is at or after the deadline.
    public func hasPassed(at now: Deadline) -> Bool { now >= self }

    public static func < (a: Deadline, b: Deadline) -> Bool { a.uptimeNanoseconds < b.uptimeNanoseconds }

    public var description: String {
        self == .never ? "never" : "uptime \(Double(uptimeNanoseconds) / 1e9)s"
    }
}

extension Duration {
    /// In seconds, for logs and for the SQL that takes seconds.
    public var inSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
