/// The event semantics as a pure function of (event, current account state).
///
/// - A deleted account is final: nothing changes, no revocation (`.finalDeleted`).
/// - Unknown types change nothing (`.ignored`), even for an unknown sub.
/// - An event older than the sign-in that came back after a deletion (`accountSince`) was the
///   deleted account's: it changes nothing (`.stale`; a consent-revoked or a deletion still
///   revokes the sessions created at or before it).
/// - email-disabled/-enabled set the forwarding flag iff not older than the newest applied email
///   event, and the address iff not older than the event that set the address (an email event or
///   a sign-in); never revoke.
/// - consent-revoked always revokes sessions created at or before the event time; the status
///   changes iff not older than the newest applied status event.
/// - account-delete (and an in-app `deletion-requested`) applies even late, unless older than the
///   newest sign-in: then the user was deleted and came back (at that sign-in): what the account
///   holds from before the sign-in is erased, the rest stays (`.stale`: the account the user came
///   back to is not deleted; only sessions created at or before the deletion are revoked). An
///   applied deletion revokes all sessions.
/// - a sign-in re-activates a consent-revoked account when newer than the consent-revoked; newer
///   than the deletion of a deleted account it starts a new account (`active`, nothing of the old
///   one restored); it records the id_token's email when not older than the address.
///   A deleted account is otherwise final.
/// For an unknown sub (`current == nil`) and a known type, the row must be created: `accountChanged` is true.
public enum EventRules {
    /// Decides what `event` does to an account currently in state `current` (nil: never seen).
    public static func apply(_ event: AppleEvent, to current: AccountState?) -> AccountDecision {
        let old = current ?? .new
        let t = event.eventTimeMillis
        let isDeletion = event.type == .accountDelete || event.type == .deletionRequested

        if old.status == .deleted && isDeletion && !old.predates(t) {
            // Deleted again, later: only a sign-in newer than this deletion starts a new account.
            var state = old
            state.statusEventTime = t
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return AccountDecision(
                newState: state, accountChanged: true, revokeSessions: .all, revokeReason: "account-delete", outcome: .finalDeleted)
        }
        if old.status == .deleted && !(event.type == .signIn && !old.predates(t)) {
            return AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .finalDeleted)
        }

        func decision(_ state: AccountState, _ revoke: SessionRevocation, _ reason: String?, _ outcome: ApplyOutcome) -> AccountDecision {
            AccountDecision(
                newState: state, accountChanged: current == nil || state != old,
                revokeSessions: revoke, revokeReason: reason, outcome: outcome)
        }

        if case .unknown = event.type {
            return AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .ignored)
        }
        if old.status != .deleted && old.predates(t) {
            // The deleted account's event, arriving after the user came back.
            switch event.type {
            case .consentRevoked: return decision(old, .createdAtOrBefore(t), "consent-revoked", .stale)
            case .accountDelete, .deletionRequested: return decision(old, .createdAtOrBefore(t), "account-delete", .stale)
            default: return decision(old, .none, nil, .stale)
            }
        }

        var state = old
        switch event.type {
        case .unknown:
            return AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .ignored)

        case .emailDisabled, .emailEnabled:
            let forwarding = t >= (old.emailEventTime ?? Int64.min)
            let address = event.email != nil && t >= (old.addressTime ?? Int64.min)
            guard forwarding || address else { return decision(old, .none, nil, .stale) }
            if forwarding {
                state.emailForwarding = event.type == .emailEnabled
                // An event without an address (Apple's always carry one) keeps the address as of now.
                if event.email == nil { state.emailEventTime = t } else { state.setEmailEventTime(t) }
            }
            if address { state.setAddress(event, at: t) }
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
                    lastEventTime: t, emailEventTime: t, statusEventTime: t, signedInAt: t, accountSince: t)
                return decision(fresh, .none, nil, .applied)
            }
            // Whether or not it is older than a consent-revoked, the user did sign in then: a
            // deletion older than this sign-in no longer ends the account, and its address counts.
            state.signedInAt = max(old.signedInAt ?? t, t)
            if event.email != nil, t >= (old.addressTime ?? Int64.min) { state.setAddress(event, at: t) }
            if let last = old.statusEventTime, t < last {
                return decision(state, .none, nil, .stale)
            }
            state.status = .active
            state.statusEventTime = t
            state.lastEventTime = max(old.lastEventTime ?? t, t)
            return decision(state, .none, nil, .applied)

        case .accountDelete, .deletionRequested:
            if let back = old.signedInAt, t < back {
                // The user was deleted at t and came back, at the latest at `back`: what the
                // account holds from before is the deleted account's.
                var erased = old.erased(before: back, deletedAt: t)
                erased.accountSince = max(old.accountSince ?? back, back)
                return decision(erased, .createdAtOrBefore(t), "account-delete", .stale)
            }
            return decision(old.deleted(at: t, after: old), .all, "account-delete", .applied)
        }
    }
}

extension AccountState {
    /// Records the event's address (`email`, and `is_private_email` when it says) as of `t`.
    mutating func setAddress(_ event: AppleEvent, at t: Int64) {
        email = event.email
        isPrivateEmail = event.isPrivateEmail ?? isPrivateEmail
        setAddressTime(t)
    }

    /// An applied deletion at `t`: the account `deleted`, its address erased, `lastEventTime` the newest.
    func deleted(at t: Int64, after old: AccountState) -> AccountState {
        var state = deleted(at: t)
        state.lastEventTime = max(old.lastEventTime ?? t, t)
        return state
    }
}
