/// When reconciliation validates the next stored refresh token (contract §10): at most once per
/// `interval` per token, the calls spread evenly over the interval (with `n` tokens, one every
/// `interval / n` seconds, never two closer: no bursts; with few tokens, a call may go every
/// `maximumSpacing` seconds when one is due, so a retry is not held for hours), a transient
/// failure retried later with backoff (never sooner than Apple's `Retry-After`, never later than
/// one interval).
/// Pure: the caller brings the clock (seconds) and does the waiting.
public struct ReconcileSchedule: Sendable, Equatable {
    /// Seconds between two validations of one token (`SIWA_RECONCILE_EVERY`).
    public let interval: Double
    /// Least seconds between two calls whatever the token count (an upper bound on the rate).
    /// Default 0.001 (1,000 calls a second).
    public var minimumSpacing: Double
    /// Most seconds between two calls when a token is due. Default 60.
    public var maximumSpacing: Double
    public var retry: AppleRetry
    private var lastSlot = -Double.infinity

    public init(
        interval: Double, minimumSpacing: Double = 0.001, maximumSpacing: Double = 60,
        retry: AppleRetry = AppleRetry(policy: RetryPolicy(maxAttempts: .max, baseDelay: 60, maxDelay: 6 * 3600))
    ) {
        precondition(interval > 0, "interval must be positive")
        self.interval = interval
        self.minimumSpacing = minimumSpacing
        self.maximumSpacing = maximumSpacing
        self.retry = retry
    }

    /// Seconds between two calls with `tokens` stored.
    public func spacing(tokens: Int) -> Double {
        max(minimumSpacing, min(maximumSpacing, interval / Double(max(tokens, 1))))
    }

    /// Reserves the next call's time (never before `now`, never closer than `spacing` to the
    /// previous one).
    public mutating func nextSlot(now: Double, tokens: Int) -> Double {
        let slot = max(now, lastSlot + spacing(tokens: tokens))
        lastSlot = slot
        return slot
    }

    /// When a token validated (or found gone) at `now` is due again.
    public func nextDue(validatedAt now: Double) -> Double { now + interval }

    /// When a token first seen (stored at `storedAt`) is first due: a token was valid when stored
    /// (a code exchange, a hand-over validated at Apple), so not before one interval.
    public func firstDue(storedAt: Double) -> Double { storedAt + interval }

    /// When a token whose validation failed transiently `failures` times in a row is tried again.
    public func retryAt(now: Double, failures: Int, retryAfter: Int?, jitter: Double) -> Double {
        now + min(interval, retry.delay(afterAttempts: failures, retryAfter: retryAfter, jitter: jitter))
    }
}
