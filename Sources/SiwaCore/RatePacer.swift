/// Spaces calls evenly: at most `rate` a second, and never two closer than `1/rate` apart, even
/// after an idle spell (no bursts). Pure: the caller gives the clock and waits itself.
public struct RatePacer: Sendable, Equatable {
    /// Seconds between two calls.
    public let spacing: Double
    private var nextSlot = -Double.infinity

    /// `rate`: calls a second (> 0).
    public init(perSecond rate: Double) {
        precondition(rate > 0 && rate.isFinite, "rate must be positive")
        spacing = 1 / rate
    }

    /// Reserves the next slot: the time (same clock as `now`) at which the call may start,
    /// never before `now`.
    public mutating func reserve(now: Double) -> Double {
        let slot = max(now, nextSlot)
        nextSlot = slot + spacing
        return slot
    }

    /// The time the next call may start (same clock as `now`), never before `now`; not reserved.
    public func slot(now: Double) -> Double { max(now, nextSlot) }

    /// Pushes every later slot to `time` at least (after a 429: the whole pace waits).
    public mutating func hold(until time: Double) {
        nextSlot = max(nextSlot, time)
    }
}
