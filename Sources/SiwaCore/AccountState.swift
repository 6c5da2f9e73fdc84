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

    /// Milliseconds: the event time of `email`/`isPrivateEmail`.
    public var addressTime: Int64? { addressEventTime ?? emailEventTime }

    /// Sets the address's time, kept only where it differs from `emailEventTime`.
    mutating func setAddressTime(_ t: Int64?) {
        addressEventTime = t == emailEventTime ? nil : t
    }

    /// Sets `emailEventTime`, keeping the address's own time.
    mutating func setEmailEventTime(_ t: Int64?) {
        let address = addressTime
        emailEventTime = t
        setAddressTime(address)
    }

    /// True when an event at `t` belongs to an account deleted before this one: older than the
    /// deletion of a deleted account (or at its time), older than the sign-in that came back.
    func predates(_ t: Int64) -> Bool {
        if status == .deleted { return t <= (statusEventTime ?? Int64.min) }
        return t < (accountSince ?? Int64.min)
    }

    /// This account as the user's deletion at `deletedAt` leaves it when a sign-in at `since`
    /// (newer than the deletion) has come back: what is older than `since` was the deleted
    /// account's (or reached it while deleted) and goes; what is newer stays. Nothing left: deleted.
    func erased(before since: Int64, deletedAt: Int64) -> AccountState {
        var s = self
        let address = addressTime.flatMap { $0 >= since ? $0 : nil }
        if (emailEventTime ?? Int64.min) < since {
            s.emailForwarding = nil
            s.emailEventTime = nil
        }
        if address == nil {
            s.email = nil
            s.isPrivateEmail = nil
        }
        s.setAddressTime(address)
        if (signedInAt ?? Int64.min) < since { s.signedInAt = nil }
        if (statusEventTime ?? Int64.min) < since {
            s.status = .active
            s.statusEventTime = nil
        }
        if s.email == nil && s.emailForwarding == nil && s.signedInAt == nil && s.statusEventTime == nil {
            return deleted(at: deletedAt)
        }
        return s
    }

    /// This account deleted at `t` (ms): the address and its flags erased.
    func deleted(at t: Int64) -> AccountState {
        var s = self
        s.status = .deleted
        s.email = nil
        s.isPrivateEmail = nil
        s.emailForwarding = nil
        s.addressEventTime = nil
        s.statusEventTime = t
        return s
    }
}
