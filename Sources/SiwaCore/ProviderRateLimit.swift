/// What one answer of a hosted provider says of its rate limit: `Retry-After` (seconds or an
/// HTTP-date; Clerk documents it on its 429s, any provider may send it), Auth0's
/// `x-ratelimit-remaining` and `x-ratelimit-reset` (Unix seconds), and Google's `RetryInfo`
/// error detail (`retryDelay`), which the Firebase client reads from the body. The client
/// parses it; the sender's schedule decides with it (`ProviderCallSchedule`).
public struct ProviderRateLimit: Sendable, Equatable {
    /// `Retry-After`, or Google's `retryDelay`.
    public var retryAfter: Duration?
    /// `x-ratelimit-remaining`: calls left in the window.
    public var remaining: Int?
    /// `x-ratelimit-reset` less now: when the window refills (zero when already past).
    public var reset: Duration?

    public init(retryAfter: Duration? = nil, remaining: Int? = nil, reset: Duration? = nil) {
        self.retryAfter = retryAfter
        self.remaining = remaining
        self.reset = reset
    }

    /// Reads the headers (names lowercased) at `now` (Unix seconds). A malformed value is
    /// ignored: the backoff decides instead.
    public init(headers: [String: String], now: Double) {
        retryAfter = headers["retry-after"].flatMap { RetryAfter.wait($0, now: now) }
        remaining = headers["x-ratelimit-remaining"].flatMap { Int(ServerConfiguration.trim($0)) }
        if let stamp = headers["x-ratelimit-reset"].flatMap({ Double(ServerConfiguration.trim($0)) }), stamp.isFinite, now.isFinite {
            let wait = (stamp - now).rounded(.up)
            reset = wait <= 0 ? .zero : .seconds(Int64(min(wait, Double(RetryAfter.longestSaid))))
        }
    }

    /// How long the call that got this answer waits before it is made again: `Retry-After`,
    /// else the window's reset when the window is spent (no call left, or a 429 that gives no
    /// count). A reset while calls are left belongs to another limit than the one that refused
    /// (Auth0 counts per endpoint and per tenant): waiting for it would be a guess.
    public func callWait(status: Int) -> Duration? {
        if let retryAfter { return retryAfter }
        guard let reset else { return nil }
        if let remaining { return remaining <= 0 ? reset : nil }
        return status == 429 ? reset : nil
    }

    /// How long no call at all goes to the provider after this answer: until the reset when the
    /// window is spent, even after a success (the next call would be refused); for as long as a
    /// 429 or 503 says (Clerk blocks the endpoint that long). nil: the provider may be called.
    public func providerWait(status: Int) -> Duration? {
        let throttled = status == 429 || status == 503
        if let remaining, remaining <= 0, let reset { return max(reset, throttled ? retryAfter ?? .zero : .zero) }
        return throttled ? callWait(status: status) : nil
    }
}
