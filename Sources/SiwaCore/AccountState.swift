/// Lifecycle status of an account.
public enum AccountStatus: String, Sendable {
    case active
    case consentRevoked = "consent_revoked"
    /// Final: no later event changes a deleted account.
    case deleted
}

/// What the service knows about one Apple `sub`.
public struct AccountState: Sendable, Equatable {
    public var status: AccountStatus
    public var email: String?
    public var isPrivateEmail: Bool?
    /// Whether Apple forwards mail to the private relay address (from email-enabled/-disabled).
    public var emailForwarding: Bool?
    /// Milliseconds: newest event that changed the account.
    public var lastEventTime: Int64?
    /// Milliseconds: newest applied email-disabled/email-enabled.
    public var emailEventTime: Int64?
    /// Milliseconds: newest applied consent-revoked/account-delete.
    public var statusEventTime: Int64?
    /// The newest applied sign-in (ms): events older than it never undo it.
    public var signedInAt: Int64?
    /// Milliseconds: the event that set `email`/`isPrivateEmail` (an email event or a sign-in's
    /// `id_token`), when it is not `emailEventTime` (nil: the newest email event's, the only
    /// kind that set them before sign-ins carried an address).
    public var addressEventTime: Int64?
    /// Milliseconds: when the current account began after a deletion (the sign-in that came
    /// back). Events older than it were the deleted account's: they change nothing. Nil: never
    /// deleted and back.
    public var accountSince: Int64?

    /// A never-seen account: active, everything else nil.
    public static let new = AccountState(status: .active)

    public init(
        status: AccountStatus, email: String? = nil, isPrivateEmail: Bool? = nil, emailForwarding: Bool? = nil,
        lastEventTime: Int64? = nil, emailEventTime: Int64? = nil, statusEventTime: Int64? = nil,
        signedInAt: Int64? = nil, addressEventTime: Int64? = nil, accountSince: Int64? = nil
    ) {
        self.signedInAt = signedInAt
        self.status = status
        self.email = email
        self.isPrivateEmail = isPrivateEmail
        self.emailForwarding = emailForwarding
        self.lastEventTime = lastEventTime
        self.emailEventTime = emailEventTime
        self.statusEventTime = statusEventTime
        self.addressEventTime = addressEventTime
        self.accountSince = accountSince
    }
}
