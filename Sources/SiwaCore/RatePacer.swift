/// Spaces calls evenly: at most `rate` a second, and never two closer than `1/rate` apart, even
/// after an idle spell (no bursts). Pure: the caller gives the monotonic clock's `now` and waits
/// itself.
public struct RatePacer: Sendable, Equatable {
    /// Between two calls.
    public let spacing: Duration
    /// The earliest the next call may start (nil: no call yet).
    private var nextSlot: Deadline?

    /// `rate`: calls a second (> 0).
    public init(perSecond rate: Double) {
        precondition(rate > 0 && rate.isFinite, "rate must be positive")
        spacing = .seconds(1 / rate)
    }

    /// Reserves the next slot: the moment at which the call may start, never before `now`.
    public mutating func reserve(now: Deadline) -> Deadline {
        let slot = slot(now: now)
        nextSlot = slot.adding(spacing)
        return slot
    }

    /// The moment the next call may start, never before `now`; not reserved.
    public func slot(now: Deadline) -> Deadline { max(now, nextSlot ?? now) }

    /// Pushes every later slot to `time` at least (after a 429: the whole pace waits).
    public mutating func hold(until time: Deadline) {
        nextSlot = max(nextSlot ?? time, time)
    }
}
