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
