import SiwaCore

/// The hosted providers the worker queues calls for (`SIWA_APPLY_TO`), and what a deletion does
/// there (`SIWA_ON_ACCOUNT_DELETE`).
public struct ProviderTargets: Sendable, Equatable {
    public var providers: [HostedProvider]
    public var policy: AccountDeletePolicy

    public init(providers: [HostedProvider] = [], policy: AccountDeletePolicy = .unlink) {
        self.providers = providers
        self.policy = policy
    }

    public static let none = ProviderTargets()

    /// The calls a batch's decisions queue: per event, the effect `ProviderRules` derives, once per
    /// provider, in the batch's order.
    func calls(for events: [ClaimedEvent], decisions: [AccountDecision]) -> [ProviderCallStatements.Queued] {
        guard !providers.isEmpty else { return [] }
        var calls: [ProviderCallStatements.Queued] = []
        for (item, decision) in zip(events, decisions) {
            guard let effect = ProviderRules.effect(of: item.event, decision: decision, policy: policy) else { continue }
            for provider in providers { calls.append(.init(target: provider, effect: effect, event: item)) }
        }
        return calls
    }
}
