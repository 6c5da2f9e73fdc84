/// The result of applying one event to an account.
public struct AccountDecision: Sendable, Equatable {
    public var newState: AccountState
    /// True when the account row must be written (created or updated).
    public var accountChanged: Bool
    public var revokeSessions: SessionRevocation
    /// "consent-revoked" or "account-delete" when sessions are revoked.
    public var revokeReason: String?
    public var outcome: ApplyOutcome

    public init(newState: AccountState, accountChanged: Bool, revokeSessions: SessionRevocation, revokeReason: String?, outcome: ApplyOutcome) {
        self.newState = newState
        self.accountChanged = accountChanged
        self.revokeSessions = revokeSessions
        self.revokeReason = revokeReason
        self.outcome = outcome
    }
}
