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

/// Waits between attempts of a call to Apple that failed transiently (429, 5xx, network):
/// exponential backoff with jitter, and never less than Apple's `Retry-After`.
public struct AppleRetry: Sendable, Equatable {
    public var policy: RetryPolicy
    /// Largest `Retry-After` honored, seconds (a bigger one is capped). Default 3600.
    public var maxRetryAfter: Double

    public init(policy: RetryPolicy = RetryPolicy(maxAttempts: 8, baseDelay: 1, maxDelay: 120), maxRetryAfter: Double = 3600) {
        self.policy = policy
        self.maxRetryAfter = maxRetryAfter
    }

    /// Seconds to wait after `attempts` failed attempts; `retryAfter` is Apple's header, if any.
    public func delay(afterAttempts attempts: Int, retryAfter: Int?, jitter: Double) -> Double {
        let backoff = policy.delay(afterAttempts: attempts, jitter: jitter)
        guard let retryAfter, retryAfter > 0 else { return backoff }
        return max(backoff, min(Double(retryAfter), maxRetryAfter))
    }

    /// True when no attempt is left after `attempts` failed ones.
    public func isExhausted(attempts: Int) -> Bool { policy.isExhausted(attempts: attempts) }
}

/// A cached bearer token and when to renew it: before it expires, with `margin` seconds left
/// (at most a tenth of its lifetime), so no call goes out with a token about to die.
public struct BearerTokenCache: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var token: String
        public var renewAt: Double
    }

    /// Seconds before expiry a token is renewed. Default 300.
    public var margin: Double
    public private(set) var entry: Entry?

    public init(margin: Double = 300) {
        self.margin = margin
    }

    /// The cached token while `now` is before its renewal time.
    public func valid(now: Double) -> String? {
        guard let entry, now < entry.renewAt else { return nil }
        return entry.token
    }

    /// Caches `token`, obtained at `now`, living `lifetime` seconds.
    public mutating func store(_ token: String, now: Double, lifetime: Double) {
        entry = Entry(token: token, renewAt: now + lifetime - min(margin, lifetime / 10))
    }

    /// Forgets the token (Apple refused it: 401).
    public mutating func invalidate() { entry = nil }
}
