/// When the scheduled (TTL) key set refresh is due, and which fetch results are worth a log line.
///
/// A pure state machine fed with the monotonic clock's time. While fetches fail, the scheduled refresh
/// backs off: the first retry `baseDelay` after the failure, then doubling up to `maxDelay`
/// (`KeyFetchPolicy`'s minimum interval still applies on top). Only a change of state is
/// reported (`.failing` on the first failure after a success or at start, `.recovered` on the
/// first success after failures), so an unreachable key endpoint logs one warning, not one
/// per try.
public struct KeyRefreshBackoff: Sendable, Equatable {
    /// What a completed fetch changed.
    public enum Transition: Sendable, Equatable {
        /// Nothing worth a log line: still fine, or still failing.
        case none
        /// Fetches started failing.
        case failing
        /// A fetch succeeded after `failures` failed ones.
        case recovered(failures: Int)
    }

    public let baseDelay: Duration
    public let maxDelay: Duration
    /// Fetches failed in a row.
    public private(set) var failures = 0
    /// While failing: the earliest time of the next scheduled try.
    public private(set) var retryAt: Deadline?

    /// Default `maxDelay`: five minutes.
    public static let defaultMaxDelay = Duration.seconds(300)

    public init(baseDelay: Duration, maxDelay: Duration = KeyRefreshBackoff.defaultMaxDelay) {
        self.baseDelay = max(.milliseconds(1), baseDelay)
        self.maxDelay = max(self.baseDelay, maxDelay)
    }

    /// The delay before the next try after `failures` failures in a row (>= 1).
    public func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        var delay = baseDelay
        for _ in 1..<min(failures, 64) {
            delay *= 2
            if delay >= maxDelay { return maxDelay }
        }
        return min(delay, maxDelay)
    }

    /// True when a scheduled refresh should run: while failing, once the backoff has passed;
    /// otherwise once the key set's TTL (`expiresAt`; nil: none loaded yet) has run out.
    public func isDue(now: Deadline, expiresAt: Deadline?) -> Bool {
        if let retryAt { return now >= retryAt }
        guard let expiresAt else { return true }
        return now >= expiresAt
    }

    /// A fetch (scheduled or not) completed at `now`.
    public mutating func fetchCompleted(succeeded: Bool, now: Deadline) -> Transition {
        if succeeded {
            let failed = failures
            failures = 0
            retryAt = nil
            return failed > 0 ? .recovered(failures: failed) : .none
        }
        failures += 1
        retryAt = now.adding(delay(afterFailures: failures))
        return failures == 1 ? .failing : .none
    }
}
