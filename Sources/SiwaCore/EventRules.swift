/// The event semantics as a pure function of (event, current account state).
///
/// - A deleted account is final: nothing changes, no revocation (`.finalDeleted`).
/// - Unknown types change nothing (`.ignored`), even for an unknown sub.
/// - email-disabled/-enabled apply iff not older than the newest applied email event; never revoke.
/// - consent-revoked always revokes sessions created at or before the event time; the status
///   changes iff not older than the newest applied status event.
/// - account-delete (and an in-app `deletion-requested`) applies even late, unless older than the
///   newest sign-in (the user came back after it: only sessions created at or before it are
///   revoked); it revokes all sessions.
/// - a sign-in re-activates a consent-revoked account when newer than the consent-revoked; newer
///   than the deletion of a deleted account it starts a new account (`active`, nothing of the old
///   one restored); it records the id_token's email when not older than the newest email event.
///   A deleted account is otherwise final.
/// For an unknown sub (`current == nil`) and a known type, the row must be created: `accountChanged` is true.
public enum EventRules {
    /// Decides what `event` does to an account currently in state `current` (nil: never seen).
    public static func apply(_ event: AppleEvent, to current: AccountState?) -> AccountDecision {
        let old = current ?? .new
        let t = event.eventTimeMillis

        if old.status == .deleted && (event.type == .accountDelete || event.type == .deletionRequested)
            && t > (old.statusEventTime ?? Int64.min)
        {
            // Deleted again, later: only a sign-in newer than this deletion starts a new account.
            var state = old
            state.statusEventTime = t
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return AccountDecision(
                newState: state, accountChanged: true, revokeSessions: .all, revokeReason: "account-delete", outcome: .finalDeleted)
        }
        if old.status == .deleted && !(event.type == .signIn && t > (old.statusEventTime ?? Int64.min)) {
            return AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .finalDeleted)
        }

        func decision(_ state: AccountState, _ revoke: SessionRevocation, _ reason: String?, _ outcome: ApplyOutcome) -> AccountDecision {
            AccountDecision(
                newState: state, accountChanged: current == nil || state != old,
                revokeSessions: revoke, revokeReason: reason, outcome: outcome)
        }

        var state = old
        switch event.type {
        case .unknown:
            return AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .ignored)

        case .emailDisabled, .emailEnabled:
            if let last = old.emailEventTime, t < last {
                return decision(old, .none, nil, .stale)
            }
            state.emailForwarding = event.type == .emailEnabled
            state.email = event.email ?? old.email
            state.isPrivateEmail = event.isPrivateEmail ?? old.isPrivateEmail
            state.emailEventTime = t
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return decision(state, .none, nil, .applied)

        case .consentRevoked:
            let reason = "consent-revoked"
            if let last = old.statusEventTime, t < last {
                return decision(old, .createdAtOrBefore(t), reason, .stale)
            }
            state.status = .consentRevoked
            state.statusEventTime = t
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return decision(state, .createdAtOrBefore(t), reason, .applied)

        case .signIn:
            if old.status == .deleted {
                // The user came back: a new account, nothing of the old one (events older than
                // the sign-in belong to the old one: stale for the new one, email events too).
                let fresh = AccountState(
                    status: .active, email: event.email, isPrivateEmail: event.isPrivateEmail, emailForwarding: nil,
                    lastEventTime: t, emailEventTime: t, statusEventTime: t, signedInAt: t)
                return decision(fresh, .none, nil, .applied)
            }
            if let last = old.statusEventTime, t < last {
                // Older than a consent-revoked: the status stays, but the user did sign in then,
                // so a deletion older than this sign-in no longer ends the account.
                state.signedInAt = max(old.signedInAt ?? t, t)
                return decision(state, .none, nil, .stale)
            }
            state.status = .active
            state.statusEventTime = t
            state.signedInAt = max(old.signedInAt ?? t, t)
            if event.email != nil, (old.emailEventTime ?? Int64.min) <= t {
                state.email = event.email
                state.isPrivateEmail = event.isPrivateEmail ?? old.isPrivateEmail
            }
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return decision(state, .none, nil, .applied)

        case .accountDelete, .deletionRequested:
            if let back = old.signedInAt, t < back {
                // The user was deleted at t and came back at `back`: the email flags of events
                // before the comeback were the old account's.
                if (old.emailEventTime ?? Int64.min) < back {
                    state.emailForwarding = nil
                    state.emailEventTime = back
                }
                return decision(state, .createdAtOrBefore(t), "account-delete", .stale)
            }
            state.status = .deleted
            state.email = nil
            state.isPrivateEmail = nil
            state.emailForwarding = nil
            state.statusEventTime = t  // the deletion's own time: only a sign-in newer than it comes back
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return decision(state, .all, "account-delete", .applied)
        }
    }
}
