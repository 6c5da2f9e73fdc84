/// The hosted identity providers whose users the worker's effects reach (`SIWA_APPLY_TO`,
/// docs/hosted-providers.md). Raw values are the names `SIWA_APPLY_TO` takes and the
/// `target` stored with each provider call.
public enum HostedProvider: String, CaseIterable, Sendable, Equatable {
    case firebase
    case auth0
    case clerk
    case cognito
}

/// What the worker decided for an Apple user at a provider. Each is idempotent at the provider:
/// repeating it after it took effect is a success.
public enum ProviderEffect: String, CaseIterable, Sendable, Equatable {
    /// `consent-revoked`: every session and refresh token of the user ends.
    case endSessions = "end_sessions"
    /// `account-delete` or an in-app deletion: the sessions end and the Apple identity is
    /// unlinked, so it can no longer sign in; other ways in stay.
    case unlink
    /// The same with `SIWA_ON_ACCOUNT_DELETE=delete-user`: the user is deleted when Apple was
    /// their only way in, otherwise as `unlink`.
    case deleteUser = "delete_user"
}

/// What a provider call did, in the order done (recorded with the call, shown to operators).
public enum ProviderAction: String, Sendable, Equatable {
    /// Every session and refresh token of the user ended by the provider's own sign-out.
    case signedOut = "signed_out"
    /// Every refresh token of the user revoked one by one (Auth0's device credentials).
    case refreshTokensRevoked = "refresh_tokens_revoked"
    /// The user blocked, which ends its session at the provider (Auth0 below Enterprise).
    case blocked
    /// The block lifted: the user can sign in again with whatever way in it keeps.
    case unblocked
    case unlinked
    case deleted
    /// The effect was already in place (an identity already unlinked, a user already deleted).
    case alreadyDone = "already_done"
}

/// What a refused call says to fix.
public enum ProviderBlame: String, Sendable, Equatable {
    /// The credential is unknown, malformed, expired or revoked.
    case credential
    /// The credential is valid but lacks the scope, role or policy for the call.
    case permission
    /// The project, tenant or user pool does not exist or does not answer as one.
    case tenant
    /// Anything else the provider refuses: a bug of ours, not worth a retry.
    case request
}

/// Why a call did not succeed: the provider's error code or an HTTP or network code. Never
/// holds a credential, a user id, an e-mail address or the provider's message (which can
/// quote them).
public struct ProviderFailure: Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status when the provider answered.
    public var status: Int?
    /// The provider's error code (`TooManyRequestsException`, `USER_NOT_FOUND`), `http_<status>`,
    /// or a network code.
    public var reason: String
    /// The provider's `Retry-After` (or its rate-limit reset), if it gave one.
    public var retryAfter: Duration?
    public var blame: ProviderBlame?
    /// What the call did before it failed, once it had found the user (`[]`: found, nothing done
    /// yet); nil when it had not. Recorded with the call, so that a retry that no longer finds
    /// the user knows the provider had them (`ProviderRules.settled`).
    public var progress: [ProviderAction]?

    public init(
        status: Int? = nil, reason: String, retryAfter: Duration? = nil, blame: ProviderBlame? = nil, progress: [ProviderAction]? = nil
    ) {
        self.status = status
        self.reason = reason
        self.retryAfter = retryAfter
        self.blame = blame
        self.progress = progress
    }

    public var description: String {
        var text = reason
        if let status { text += " (HTTP \(status))" }
        if let blame { text += " [\(blame.rawValue)]" }
        return text
    }
}

/// How one provider call ended.
public enum ProviderOutcome: Sendable, Equatable {
    /// Applied; `status` is the last HTTP status the provider answered.
    case done([ProviderAction], status: Int)
    /// The provider does not know the user: recorded, final, not an error.
    case userNotFound(status: Int)
    /// Throttled, a 5xx, an expired access token or the network: the same call later, not
    /// before `retryAfter`.
    case retryLater(ProviderFailure)
    /// Permanent until someone fixes what `blame` says.
    case refused(ProviderFailure)

    /// The outcome of a call that had found the user and done `actions`: a failure says so,
    /// unless a later step already did.
    public func reached(_ actions: [ProviderAction]) -> ProviderOutcome {
        switch self {
        case .retryLater(var failure):
            failure.progress = failure.progress ?? actions
            return .retryLater(failure)
        case .refused(var failure):
            failure.progress = failure.progress ?? actions
            return .refused(failure)
        case .done, .userNotFound: return self
        }
    }
}
