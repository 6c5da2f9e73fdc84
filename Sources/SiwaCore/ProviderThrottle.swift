/// Which hosted-provider targets wait after one of them said "too many requests". A throttled
/// answer holds every call to its target, not only the refused one, until the provider's
/// `Retry-After` (or a short pause without one): a burst then spends the provider's limit on
/// calls that can succeed rather than on 429s, and the calls refused meanwhile do not pile up
/// attempts (and their backoff) for nothing. Other targets are not held.
public struct ProviderThrottle: Sendable, Equatable {
    /// The hold when the provider gives no `Retry-After`: the schedule's first backoff step.
    public static let pauseWithoutRetryAfter: Duration = .seconds(2)
    /// The longest hold believed (a provider's reset an hour away holds an hour at most).
    public static let longestHold: Duration = .seconds(3600)

    private var heldUntil: [HostedProvider: Deadline] = [:]

    public init() {}

    /// Notes the outcome of a call to `target` answered at `now`: a throttle holds the target.
    /// - Returns: the end of the hold when this outcome started or lengthened it.
    @discardableResult
    public mutating func note(_ outcome: ProviderOutcome, of target: HostedProvider, at now: Deadline) -> Deadline? {
        guard case .retryLater(let failure) = outcome, failure.isThrottle else { return nil }
        let hold = min(failure.retryAfter ?? Self.pauseWithoutRetryAfter, Self.longestHold)
        let until = now.adding(max(hold, .zero))
        if let held = heldUntil[target], held >= until { return nil }
        heldUntil[target] = until
        return until
    }

    /// Until when `target` is held, if it is at `now`.
    public func heldUntil(_ target: HostedProvider, at now: Deadline) -> Deadline? {
        guard let until = heldUntil[target], !until.hasPassed(at: now) else { return nil }
        return until
    }

    /// The targets of `targets` whose calls may start at `now`.
    public func open(_ targets: [HostedProvider], at now: Deadline) -> [HostedProvider] {
        targets.filter { heldUntil($0, at: now) == nil }
    }
}

extension ProviderFailure {
    /// Error codes by which the providers say "too many requests" without a 429 (Cognito answers
    /// 400 with its throttling exceptions; Google names quota refusals).
    static let throttleReasons: Set<String> = [
        "TooManyRequestsException", "ThrottlingException", "QUOTA_EXCEEDED",
        "TOO_MANY_ATTEMPTS_TRY_LATER", "RESOURCE_EXHAUSTED",
    ]

    /// The provider refused for its rate limit (429, or a throttling error code).
    public var isThrottle: Bool { status == 429 || Self.throttleReasons.contains(reason) }
}
