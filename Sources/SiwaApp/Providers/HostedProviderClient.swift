import SiwaCore

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
}
