/// Exponential backoff with equal jitter for outbox deliveries.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts after which the item is given up (default 12).
    public var maxAttempts: Int
    /// Delay scale of the first retry (default 1 s).
    public var baseDelay: Duration
    /// Cap of the exponential delay (default 3600 s).
    public var maxDelay: Duration

    public init(maxAttempts: Int = 12, baseDelay: Duration = .seconds(1), maxDelay: Duration = .seconds(3600)) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// The wait after `attempts` failed attempts (values below 1 count as 1):
    /// `d = min(maxDelay, baseDelay * 2^(attempts-1))`, result `d/2 + jitter * d/2`.
    /// `jitter` is clamped to [0, 1); NaN counts as 0.
    public func delay(afterAttempts attempts: Int, jitter: Double) -> Duration {
        // In Double seconds: 2^(attempts-1) saturates to +inf where a Duration would overflow.
        let exponent = max(attempts, 1) - 1
        let factor = Double(sign: .plus, exponent: min(exponent, 2_000), significand: 1)  // saturates to +inf
        let d = min(maxDelay.inSeconds, baseDelay.inSeconds * factor)
        guard d.isFinite, d > 0 else { return .zero }
        let j = jitter.isNaN ? 0 : min(max(jitter, 0), 1.0.nextDown)
        return .seconds(d / 2 + j * d / 2)
    }

    /// True when `attempts >= maxAttempts`.
    public func isExhausted(attempts: Int) -> Bool {
        attempts >= maxAttempts
    }
}
