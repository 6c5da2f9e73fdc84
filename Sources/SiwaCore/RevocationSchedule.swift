/// When a failed revocation at Apple is tried again: backoff with jitter, capped at an hour
/// between tries, for `retryFor` from when the revocation was queued (Apple down for a
/// day must not lose a grant); after that it is dead (`replay` brings it back).
public struct RevocationSchedule: Sendable, Equatable {
    /// From queueing to dead. Default 7 days (`SIWA_REVOKE_RETRY_FOR`).
    public var retryFor: Duration
    /// Backoff: 1 s doubling, capped at 3600 s, half of it jittered.
    public var backoff: RetryPolicy

    public init(
        retryFor: Duration = .seconds(7 * 86_400),
        backoff: RetryPolicy = RetryPolicy(maxAttempts: Int.max, baseDelay: .seconds(1), maxDelay: .seconds(3600))
    ) {
        self.retryFor = retryFor
        self.backoff = backoff
    }

    public enum Next: Sendable, Equatable {
        case retry(in: Duration)
        case dead
    }

    /// After attempt number `attempts` failed, `age` after the revocation was queued.
    /// `retryAfter` (Apple's `Retry-After`) is honoured, within the window.
    public func next(afterAttempts attempts: Int, age: Duration, retryAfter: Duration?, jitter: Double) -> Next {
        let left = retryFor - age
        guard left > .zero else { return .dead }
        var delay = backoff.delay(afterAttempts: attempts, jitter: jitter)
        if let retryAfter { delay = max(delay, retryAfter) }
        // The last try falls at the end of the window, not after it.
        return .retry(in: min(delay, left))
    }
}
