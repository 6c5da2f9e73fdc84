/// What one event does to an auth library's tables (README "Using Supabase Auth / Better Auth / Auth.js"), derived from the decision
/// `EventRules` made for `siwa.*`: the same order, the same stale and final rules.
public struct AuthLibraryEffect: Sendable, Equatable {
    public enum Sessions: Sendable, Equatable {
        case keep
        /// The user's sessions created at or before this time (ms).
        case createdAtOrBefore(Int64)
        /// Every session of the user (a library whose sessions record no creation time).
        case all
    }

    public var sessions: Sessions = .keep
    /// Remove the user's Apple identity (the user was deleted).
    public var unlinkApple = false
    /// Also delete the user when Apple was their only identity (`SIWA_ON_ACCOUNT_DELETE=delete-user`).
    public var deleteUserIfOnlyApple = false
    /// Record the user's address and forwarding state (email events, where the library keeps provider data).
    public var address: Address?

    public struct Address: Sendable, Equatable {
        public var email: String?
        public var isPrivateEmail: Bool?
        public var emailForwarding: Bool?

        public init(email: String?, isPrivateEmail: Bool?, emailForwarding: Bool?) {
            self.email = email
            self.isPrivateEmail = isPrivateEmail
            self.emailForwarding = emailForwarding
        }
    }

    public init(sessions: Sessions = .keep, unlinkApple: Bool = false, deleteUserIfOnlyApple: Bool = false, address: Address? = nil) {
        self.sessions = sessions
        self.unlinkApple = unlinkApple
        self.deleteUserIfOnlyApple = deleteUserIfOnlyApple
        self.address = address
    }

    public var isNone: Bool { self == AuthLibraryEffect() }
}

public enum AuthLibraryRules {
    /// - Sessions end whenever `siwa.sessions` are revoked (a stale `consent-revoked` too): those
    ///   created at or before the event. A library whose sessions record no creation time
    ///   (`sessionsHaveCreationTime` false) cannot tell a later sign-in from an earlier one: all
    ///   the user's sessions end, and only for an event that took effect (a stale one would end
    ///   the sign-in that made it stale).
    /// - A deletion that took effect (the user is now deleted) removes the Apple identity and, with
    ///   `delete-user`, the user when Apple was their only identity. A later event finds no
    ///   identity: deletion is final there too.
    /// - An email event that took effect records the user's address and forwarding state as the
    ///   decision left them (`recordsAddress`: the library keeps provider data).
    /// Sign-ins (siwa-notify's own records) and unknown types change nothing.
    public static func effect(
        of event: AppleEvent, decision: AccountDecision, policy: AccountDeletePolicy,
        sessionsHaveCreationTime: Bool, recordsAddress: Bool
    ) -> AuthLibraryEffect {
        var effect = AuthLibraryEffect()
        let applied = decision.outcome == .applied
        if decision.revokeSessions != .none {
            if sessionsHaveCreationTime {
                effect.sessions = .createdAtOrBefore(event.eventTimeMillis)
            } else if applied {
                effect.sessions = .all
            }
        }
        let deletion = event.type == .accountDelete || event.type == .deletionRequested
        if deletion && applied && decision.newState.status == .deleted {
            effect.unlinkApple = true
            effect.deleteUserIfOnlyApple = policy == .deleteUser
        }
        if recordsAddress && applied && (event.type == .emailDisabled || event.type == .emailEnabled) {
            let s = decision.newState
            effect.address = .init(email: s.email, isPrivateEmail: s.isPrivateEmail, emailForwarding: s.emailForwarding)
        }
        return effect
    }
}
