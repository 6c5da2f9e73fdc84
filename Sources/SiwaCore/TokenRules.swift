/// What an event does to the refresh tokens stored for its user (`siwa.apple_tokens`).
public enum TokenEffect: Sendable, Equatable {
    case none
    /// An in-app deletion: every token of the user signed in at or before `atMillis` moves, still
    /// encrypted, to revocation at Apple (`clientID`: the app that asked, recorded on a `no_token` row).
    case revoke(atMillis: Int64, clientID: String)
    /// Apple ended the grant (account-delete: every app's, `clientID` nil; consent-revoked: that
    /// app's): the tokens signed in at or before `atMillis` are erased.
    case erase(atMillis: Int64, clientID: String?)
}

/// Which tokens an event ends. A token belongs to the account the user held when it was signed
/// in: a deletion (or Apple's end of a grant) at `t` ends every token signed in at or before `t`,
/// whatever the event's outcome for the account. A newer sign-in that was applied first (the
/// deletion failed and was retried, another worker took the sign-in) makes the deletion `stale`
/// for the account (the user came back), not for the tokens held before it: those still go, and
/// the sign-in's own token, signed in after `t`, stays.
public enum TokenRules {
    public static func effect(of event: AppleEvent, audience: String, outcome: ApplyOutcome) -> TokenEffect {
        guard outcome != .ignored else { return .none }
        let t = event.eventTimeMillis
        switch event.type {
        case .deletionRequested: return .revoke(atMillis: t, clientID: audience)
        case .accountDelete: return .erase(atMillis: t, clientID: nil)
        case .consentRevoked: return .erase(atMillis: t, clientID: audience)
        case .signIn, .emailDisabled, .emailEnabled, .unknown: return .none
        }
    }
}
