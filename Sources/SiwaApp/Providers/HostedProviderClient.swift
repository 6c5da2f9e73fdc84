import SiwaCore
import Synchronization

/// A hosted identity provider's admin API, as the provider-call queue uses it. Each call blocks
/// its thread (libcurl) and ends in a `ProviderOutcome`; nothing is retried inside (the queue
/// retries, paces and orders). Implementations log the operation and the outcome, never a
/// credential, a user id, a `sub` or an address.
public protocol HostedProviderClient: Sendable {
    var provider: HostedProvider { get }

    /// The start-up check: the credential is accepted and the project, tenant or pool answers.
    /// `.done([], status:)` when usable; a refusal's `blame` says what to fix.
    func check() -> ProviderOutcome

    /// Applies `effect` to the user whose Apple identity is `sub`.
    func apply(_ effect: ProviderEffect, sub: String) -> ProviderOutcome

    /// Until when (since the Unix epoch) the provider asked not to be called (its rate limit).
    func pausedUntil() -> Duration

    /// How the provider's users are signed out, where it depends on the provider's plan and
    /// was learned (by `check()`); nil where there is one way.
    func signOutDescription() -> String?
}

extension HostedProviderClient {
    /// Until when (since the Unix epoch) the provider asked not to be called, by what its answers
    /// said of its rate limit (`ProviderCallSchedule.pause`); zero: never asked. The sender leases
    /// no call of a paused provider.
    public func pausedUntil() -> Duration { .zero }

    public func signOutDescription() -> String? { nil }
}

/// A provider's pause as its answers set it: the call threads note each answer, the sender reads
/// it before it leases.
final class ProviderPause: Sendable {
    private let until = Mutex<Duration>(.zero)

    /// Notes an answer with `status` that said `limit` at `now` (Unix seconds).
    func note(_ limit: ProviderRateLimit, status: Int, now: Double) {
        until.withLock { $0 = ProviderCallSchedule.pause(until: $0, after: limit, status: status, now: .seconds(now)) }
    }

    var value: Duration { until.withLock { $0 } }
}
