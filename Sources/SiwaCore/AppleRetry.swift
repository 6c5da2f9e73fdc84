/// Waits between attempts of a call to Apple that failed transiently (429, 5xx, network):
/// exponential backoff with jitter, and never less than Apple's `Retry-After`.
public struct AppleRetry: Sendable, Equatable {
    public var policy: RetryPolicy
    /// Largest `Retry-After` honored (a bigger one is capped). Default 3600 s.
    public var maxRetryAfter: Duration

    public init(
        policy: RetryPolicy = RetryPolicy(maxAttempts: 8, baseDelay: .seconds(1), maxDelay: .seconds(120)), maxRetryAfter: Duration = .seconds(3600)
    ) {
        self.policy = policy
        self.maxRetryAfter = maxRetryAfter
    }

    /// The wait after `attempts` failed attempts; `retryAfter` is Apple's header, if any.
    public func delay(afterAttempts attempts: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        let backoff = policy.delay(afterAttempts: attempts, jitter: jitter)
        guard let retryAfter, retryAfter > .zero else { return backoff }
        return max(backoff, min(retryAfter, maxRetryAfter))
    }

    /// True when no attempt is left after `attempts` failed ones.
    public func isExhausted(attempts: Int) -> Bool { policy.isExhausted(attempts: attempts) }
}
