/// One step of a provider call (a lookup, a sign-out, an unlink): what a client's single request
/// gave, before the steps of an effect make one `ProviderOutcome`.
public enum ProviderStep<Value: Sendable & Equatable>: Sendable, Equatable {
    /// Answered with success; `status` is the HTTP status.
    case done(Value, status: Int)
    /// The provider does not know the user.
    case userNotFound(status: Int)
    case retryLater(ProviderFailure)
    case refused(ProviderFailure)

    /// The same ending with another value type (for the non-`done` cases).
    public func map<Other: Sendable & Equatable>(_ transform: (Value) -> Other) -> ProviderStep<Other> {
        switch self {
        case .done(let value, let status): return .done(transform(value), status: status)
        case .userNotFound(let status): return .userNotFound(status: status)
        case .retryLater(let failure): return .retryLater(failure)
        case .refused(let failure): return .refused(failure)
        }
    }

    /// The call's outcome: `next` of the value when this step succeeded, else the step's ending.
    public func then(_ next: (Value, _ status: Int) -> ProviderOutcome) -> ProviderOutcome {
        switch self {
        case .done(let value, let status): return next(value, status)
        case .userNotFound(let status): return .userNotFound(status: status)
        case .retryLater(let failure): return .retryLater(failure)
        case .refused(let failure): return .refused(failure)
        }
    }
}

/// Where a provider call is (`siwa.provider_calls.state`).
public enum ProviderCallState: String, CaseIterable, Sendable, Equatable {
    /// Waiting for its first attempt or a retry.
    case pending
    /// Applied at the provider.
    case done
    /// The provider does not know the user: recorded, final, not an error.
    case userUnknown = "user_unknown"
    /// Given up: `replay --provider-calls` queues it again.
    case dead
}

/// Which effect the worker queues at a hosted provider for an event, derived from its decision for
/// `siwa.*` (the same order, stale and final rules as `AuthLibraryRules`):
/// - a `consent-revoked` that took effect ends every session of the user (a provider's sign-out
///   is global: a stale one, older than a sign-in, would end the sign-in that made it stale);
/// - an `account-delete` or in-app deletion that took effect unlinks the Apple identity, or with
///   `delete-user` deletes the user when Apple was their only way in (the provider decides that);
///   a later event finds the user deleted and changes nothing: deletion is final;
/// - email events, sign-ins, stale or duplicate events: nothing (no provider keeps Apple's relay
///   state in a way an admin API updates; docs/hosted-providers.md says so per provider).
public enum ProviderRules {
    public static func effect(of event: AppleEvent, decision: AccountDecision, policy: AccountDeletePolicy) -> ProviderEffect? {
        let library = AuthLibraryRules.effect(
            of: event, decision: decision, policy: policy, sessionsHaveCreationTime: false, recordsAddress: false)
        if library.unlinkApple { return library.deleteUserIfOnlyApple ? .deleteUser : .unlink }
        if library.sessions == .all { return .endSessions }
        return nil
    }

    /// The outcome to record for a call of `effect`. A user the provider does not know, for an
    /// unlink or a deletion, when an earlier attempt of the same call found this user
    /// (`foundBefore`): the attempt's answer was lost after the provider applied it, so the
    /// Apple identity is gone, which is what the call is for: already done, not an unknown user.
    /// Without that history nothing says the provider ever knew the user (a wrong target, an
    /// account never made there, one removed by someone else).
    public static func settled(_ outcome: ProviderOutcome, effect: ProviderEffect, foundBefore: Bool) -> ProviderOutcome {
        guard case .userNotFound(let status) = outcome, effect != .endSessions, foundBefore else { return outcome }
        return .done([.alreadyDone], status: status)
    }
}

/// When a provider call that did not succeed is tried again, and when it is given up.
public struct ProviderCallSchedule: Sendable, Equatable {
    /// What happens to the call after an attempt.
    public enum Next: Sendable, Equatable {
        case done
        case userUnknown
        case retry(after: Duration)
        case dead
    }

    /// How long a call is retried, from when it was queued (or replayed), before it is dead.
    public var retryFor: Duration
    /// Backoff; its `maxAttempts` is not used (time decides).
    public var backoff: RetryPolicy
    /// Longest wait a provider's answer is believed for (`Retry-After`, a rate-limit reset): a
    /// clock far off or a nonsense header must not park a call, or the provider, for days.
    public var longestWait: Duration = ProviderCallSchedule.defaultLongestWait

    public static let defaultLongestWait: Duration = .seconds(3600)

    /// Three days, as forwards: a provider down for a weekend loses nothing.
    public static let defaultRetryFor: Duration = .seconds(3 * 86_400)

    public init(
        retryFor: Duration = ProviderCallSchedule.defaultRetryFor,
        backoff: RetryPolicy = RetryPolicy(maxAttempts: .max, baseDelay: .seconds(2), maxDelay: .seconds(3600))
    ) {
        self.retryFor = retryFor
        self.backoff = backoff
    }

    /// Until when no call goes to a provider paused until `until`, after an answer with `status`
    /// that says `limit` at `now` (both since the Unix epoch, as `WallClock` reads it): the later
    /// of the two, the provider's wait bounded by `longestWait`.
    public static func pause(
        until: Duration, after limit: ProviderRateLimit, status: Int, now: Duration, longestWait: Duration = defaultLongestWait
    ) -> Duration {
        guard let wait = limit.providerWait(status: status) else { return until }
        return max(until, now + min(wait, longestWait))
    }

    /// After an attempt that ended in `outcome`, the `attempts`-th (this one included), `age`
    /// after the call was queued; `jitter` in [0, 1). The provider's `Retry-After` is honoured: a
    /// retry never comes before it. A request the provider refuses as such is dead at once (retrying
    /// sends the same); a refused credential, permission or tenant waits with backoff for the
    /// operator to fix it (a rotated credential, a policy), until the bound.
    public func next(after outcome: ProviderOutcome, attempts: Int, age: Duration, jitter: Double) -> Next {
        let failure: ProviderFailure
        switch outcome {
        case .done: return .done
        case .userNotFound: return .userUnknown
        case .retryLater(let f): failure = f
        case .refused(let f):
            if f.blame == nil || f.blame == .request { return .dead }
            failure = f
        }
        let left = retryFor - age
        guard left > .zero else { return .dead }
        // As forwards: the last retry comes at the bound, unless the provider asks for later.
        let asked = min(failure.retryAfter ?? .zero, longestWait)
        let delay = max(min(backoff.delay(afterAttempts: attempts, jitter: jitter), left), asked)
        guard delay <= left else { return .dead }
        return .retry(after: delay)
    }
}
