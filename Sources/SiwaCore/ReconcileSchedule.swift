/// When reconciliation validates the stored refresh tokens (README "Missed notifications"): at most once per
/// `interval` per token, the calls spread evenly over the interval (with `n` tokens, one every
/// `interval / n` seconds: no bursts; with few tokens, a call may go every `maximumSpacing`
/// seconds when one is due, so a retry is not held for hours), a transient failure retried later
/// with backoff (never sooner than Apple's `Retry-After`, never later than one interval).
///
/// The pace is shared: every process takes the times of its calls (slots) from one row of the
/// database (`siwa.reconcile_pace`), one `spacing` apart, so the overall rate does not grow with
/// the number of processes: a slot is `max(now, the pace's next free slot)`, the next ones one
/// `spacing` apart, so there is no catch-up burst after an idle time or an outage either. A
/// claim takes `batchSize` tokens, each leased until `leaseMargin` seconds after its own slot:
/// the lease always covers the batch. A token validated is due again one interval later; a
/// token first seen, one interval after it was stored (it was valid then).
/// (`ReconcileStatements.claim` does the slot arithmetic in SQL, under the pace row's lock.)
/// Pure: the caller brings the clock and does the waiting.
public struct ReconcileSchedule: Sendable, Equatable {
    /// Between two validations of one token (`SIWA_RECONCILE_EVERY`).
    public let interval: Duration
    /// The least time between two calls whatever the token count (an upper bound on the rate).
    /// Default 1 ms (1,000 calls a second).
    public var minimumSpacing: Duration
    /// The most time between two calls when a token is due. Default 60 s.
    public var maximumSpacing: Duration
    /// The slots one claim takes at most (fewer tokens when the spacing is wide). Default 5 s.
    public var batchSpan: Duration
    /// Most tokens one claim takes. Default 100.
    public var maximumBatch: Int
    /// How long a claimed token stays leased after its slot: the call (at most its timeout), the
    /// recording of its answer, and some slack. Default 60 s.
    public var leaseMargin: Duration
    public var retry: AppleRetry

    public init(
        interval: Duration, minimumSpacing: Duration = .milliseconds(1), maximumSpacing: Duration = .seconds(60),
        batchSpan: Duration = .seconds(5), maximumBatch: Int = 100, leaseMargin: Duration = .seconds(60),
        retry: AppleRetry = AppleRetry(policy: RetryPolicy(maxAttempts: .max, baseDelay: .seconds(60), maxDelay: .seconds(6 * 3600)))
    ) {
        precondition(interval > .zero, "interval must be positive")
        self.interval = interval
        self.minimumSpacing = minimumSpacing
        self.maximumSpacing = maximumSpacing
        self.batchSpan = batchSpan
        self.maximumBatch = maximumBatch
        self.leaseMargin = leaseMargin
        self.retry = retry
    }

    /// The time between two calls (of all processes together) with `tokens` stored.
    public func spacing(tokens: Int) -> Duration {
        max(minimumSpacing, min(maximumSpacing, interval / max(tokens, 1)))
    }

    /// Tokens one claim takes at `spacing`: as many as fit in `batchSpan` of slots, at least
    /// one, at most `maximumBatch`.
    public func batchSize(spacing: Duration) -> Int {
        guard spacing > .zero else { return maximumBatch }
        return max(1, min(maximumBatch, Int((batchSpan / spacing).rounded(.down))))
    }

    /// How long after now a token whose validation failed transiently `failures` times in a row
    /// is tried again (Apple's `Retry-After` honoured, never later than one interval).
    public func retryDelay(failures: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        min(interval, retry.delay(afterAttempts: failures, retryAfter: retryAfter, jitter: jitter))
    }
}
