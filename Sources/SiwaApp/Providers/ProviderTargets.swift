import SiwaCore

/// The hosted providers the worker queues calls for (`SIWA_APPLY_TO`), and what a deletion does
/// there (`SIWA_ON_ACCOUNT_DELETE`).
public struct ProviderTargets: Sendable, Equatable {
    public var providers: [HostedProvider]
    public var policy: AccountDeletePolicy
    /// The email services kept in step with Apple's relay (`SIWA_EMAIL_SENDERS`).
    public var senders: [EmailSender]
    /// `SIWA_EMAIL_SENDERS_ALL_ADDRESSES`.
    public var allAddresses: Bool

    public init(providers: [HostedProvider] = [], policy: AccountDeletePolicy = .unlink, senders: [EmailSender] = [], allAddresses: Bool = false) {
        self.providers = providers
        self.policy = policy
        self.senders = senders
        self.allAddresses = allAddresses
    }

    public static let none = ProviderTargets()

    /// The calls a batch's decisions queue: per event, the effect `ProviderRules` derives, once per
    /// provider, and the one `EmailSenderRules` derives, once per email service, in the batch's
    /// order. `before`: each user's account before the batch (a deletion's address).
    func calls(
        for events: [ClaimedEvent], decisions: [AccountDecision], before: [String: AccountState] = [:]
    ) -> [ProviderCallStatements.Queued] {
        guard !providers.isEmpty || !senders.isEmpty else { return [] }
        var calls: [ProviderCallStatements.Queued] = []
        for (item, decision) in zip(events, decisions) {
            if let effect = ProviderRules.effect(of: item.event, decision: decision, policy: policy) {
                for provider in providers { calls.append(.init(target: .provider(provider), effect: .provider(effect), event: item)) }
            }
            guard !senders.isEmpty,
                let (effect, address) = EmailSenderRules.effect(
                    of: item.event, decision: decision, allAddresses: allAddresses, before: before[item.event.sub])
            else { continue }
            for sender in senders { calls.append(.init(target: .sender(sender), effect: .sender(effect), event: item, email: address)) }
        }
        return calls
    }
}
