/// A user and their per-app accounts, as the worker reads them (locked) before an event.
public struct UserState: Sendable, Equatable {
    /// The user's row (`siwa.accounts`); nil: never seen.
    public var user: AccountState?
    /// The user's app accounts (`siwa.app_accounts`), by `aud`.
    public var apps: [String: AccountState]

    public init(user: AccountState? = nil, apps: [String: AccountState] = [:]) {
        self.user = user
        self.apps = apps
    }
}

/// What one event does to a user and their app accounts.
public struct UserDecision: Sendable, Equatable {
    /// The user's row: its new state, whether to write it, the sessions to revoke, the outcome.
    public var user: AccountDecision
    /// App accounts to write (created or changed), by `aud`.
    public var apps: [String: AccountState]
    /// Revoked sessions are limited to this app's (and those without an app); nil: every app's.
    public var revokeAudience: String?

    public init(user: AccountDecision, apps: [String: AccountState] = [:], revokeAudience: String? = nil) {
        self.user = user
        self.apps = apps
        self.revokeAudience = revokeAudience
    }
}

/// Apple's `sub` is one per user and team, but consent and the private relay address are per app
/// (the `aud`): one endpoint serves every app of the team. These rules apply `EventRules` per app
/// account for consent, email and sign-in (ordered per (sub, aud)), and per user for deletion
/// (ordered per sub), then derive the user's row so that it keeps its meaning for one-app teams:
/// - `status` is `consent_revoked` when every app account of the user is, `deleted` when the user is;
/// - the email columns follow the newest email event (or sign-in with an address) of any app;
/// - a `consent-revoked` revokes the sessions of that app (and those without an app);
/// - a deletion deletes the user and every app account; a sign-in newer than it starts a new
///   account, and events older than that sign-in (`accountSince`) change nothing, whatever app
///   they are for and whenever they arrive. A deletion that arrives after the sign-in that came
///   back erases what every account holds from before that sign-in.
/// A deleted app account of a user who came back is no account: an event newer than the
/// comeback starts that app's account afresh, as for an app never seen.
/// A user known before app accounts existed (a row, no app account) lends its state to the first
/// app account of each app, so an upgrade changes nothing for them.
public enum AppAccountRules {
    public static func apply(_ event: AppleEvent, audience: String, to current: UserState) -> UserDecision {
        let t = event.eventTimeMillis
        let userDecision = EventRules.apply(event, to: current.user)
        let user = current.user ?? .new

        switch event.type {
        case .unknown:
            return UserDecision(user: userDecision)

        case .accountDelete, .deletionRequested:
            if userDecision.outcome == .stale && !user.predates(t) {
                return cameBackSince(deletionAt: t, audience: audience, userDecision: userDecision, current)
            }
            guard userDecision.outcome == .applied, userDecision.newState.status == .deleted else {
                // Not applied (final, or older than a comeback): each app account decides alone.
                var apps: [String: AccountState] = [:]
                for (aud, app) in current.apps where !user.predates(t) {
                    let d = EventRules.apply(event, to: app)
                    if d.newState != app { apps[aud] = d.newState }
                }
                return UserDecision(user: userDecision, apps: apps)
            }
            var apps: [String: AccountState] = [:]
            var all = current.apps
            // The app that told us has an account too (deleted), even if it was never seen.
            if !audience.isEmpty && all[audience] == nil { all[audience] = .new }
            for (aud, app) in all where current.apps[aud] != deleted(app, at: t) {
                apps[aud] = deleted(app, at: t)
            }
            return UserDecision(user: userDecision, apps: apps)

        case .signIn, .consentRevoked, .emailDisabled, .emailEnabled:
            if user.status == .deleted && userDecision.outcome == .finalDeleted {
                return UserDecision(user: userDecision)
            }
            let comingBack = user.status == .deleted  // a sign-in newer than the deletion
            // The app account as it stands: after a deletion the old ones do not count.
            var existing = current.apps[audience]
            if user.predates(t) || existing.map({ $0.status == .deleted && $0.predates(t) }) == true {
                // The deleted account's event: nothing changes (a consent-revoked still revokes).
                let revokes = event.type == .consentRevoked
                let decision = AccountDecision(
                    newState: user, accountChanged: false, revokeSessions: revokes ? .createdAtOrBefore(t) : .none,
                    revokeReason: revokes ? "consent-revoked" : nil, outcome: .stale)
                return UserDecision(user: decision, revokeAudience: audience)
            }
            if existing?.status == .deleted { existing = nil }  // deleted before the comeback: no account
            let app: AccountState? = comingBack ? nil : existing ?? (current.apps.isEmpty ? current.user : nil)
            let appDecision = EventRules.apply(event, to: app)
            var apps = current.apps
            if comingBack {
                apps = apps.mapValues { deleted($0, at: user.statusEventTime ?? t) }
            }
            var appState = appDecision.newState
            if comingBack {
                // Events older than the sign-in belong to the old account.
                appState.setEmailEventTime(max(appState.emailEventTime ?? t, t))
                appState.statusEventTime = max(appState.statusEventTime ?? t, t)
            }
            apps[audience] = appState
            var changedApps: [String: AccountState] = [:]
            for (aud, state) in apps where current.apps[aud] != state { changedApps[aud] = state }

            // The user's row, derived.
            var newUser = comingBack ? userDecision.newState : user
            if !comingBack {
                if event.type == .emailDisabled || event.type == .emailEnabled || event.type == .signIn {
                    // The email columns follow the newest email event (or sign-in's address) of any app.
                    let emailState = userDecision.newState
                    newUser.email = emailState.email
                    newUser.isPrivateEmail = emailState.isPrivateEmail
                    newUser.emailForwarding = emailState.emailForwarding
                    newUser.emailEventTime = emailState.emailEventTime
                    newUser.addressEventTime = emailState.addressEventTime
                    if userDecision.outcome == .applied { newUser.lastEventTime = max(user.lastEventTime ?? t, t) }
                }
                if appDecision.outcome == .applied {
                    newUser.status = derivedStatus(apps)
                    if event.type != .emailDisabled && event.type != .emailEnabled {
                        newUser.statusEventTime = max(user.statusEventTime ?? t, t)
                    }
                    newUser.lastEventTime = max(user.lastEventTime ?? t, t)
                }
            }
            // Even a sign-in older than a consent-revoked happened: a deletion older than it no
            // longer ends the account.
            if event.type == .signIn && !comingBack { newUser.signedInAt = max(user.signedInAt ?? t, t) }
            let decision = AccountDecision(
                newState: newUser, accountChanged: current.user == nil || newUser != user,
                revokeSessions: appDecision.revokeSessions, revokeReason: appDecision.revokeReason, outcome: appDecision.outcome)
            return UserDecision(user: decision, apps: changedApps, revokeAudience: audience)
        }
    }

    /// A deletion at `t` older than a sign-in that already happened: the user was deleted at `t`
    /// and came back at the first sign-in after it, taken as the oldest of the apps' newest
    /// sign-ins after `t`. Every account loses what it holds from before that sign-in; an app
    /// account with nothing newer is deleted; the user stays (`.stale`: only the sessions created
    /// at or before the deletion are revoked).
    static func cameBackSince(deletionAt t: Int64, audience: String, userDecision: AccountDecision, _ current: UserState) -> UserDecision {
        let user = current.user ?? .new
        let signIns = current.apps.values.compactMap { $0.status == .deleted ? nil : $0.signedInAt }.filter { $0 > t }
        let since = signIns.min() ?? user.signedInAt ?? t
        var apps: [String: AccountState] = [:]
        for (aud, app) in current.apps where app.status != .deleted {
            let erased = app.erased(before: since, deletedAt: t)
            if erased != app { apps[aud] = erased }
        }
        // The app that told us had an account then (deleted), even if it was never seen.
        if !audience.isEmpty && current.apps[audience] == nil { apps[audience] = AccountState.new.deleted(at: t) }
        var newUser = user.erased(before: since, deletedAt: t)
        newUser.status = user.status
        newUser.statusEventTime = user.statusEventTime
        newUser.signedInAt = user.signedInAt
        newUser.accountSince = max(user.accountSince ?? since, since)
        let merged = current.apps.merging(apps) { $1 }
        if !merged.isEmpty { newUser.status = derivedStatus(merged) }
        var decision = userDecision
        decision.newState = newUser
        decision.accountChanged = newUser != user
        return UserDecision(user: decision, apps: apps)
    }

    /// The user's status from the app accounts: `consent_revoked` when every live one is.
    static func derivedStatus(_ apps: [String: AccountState]) -> AccountStatus {
        let live = apps.values.filter { $0.status != .deleted }
        return !live.isEmpty && live.allSatisfy { $0.status == .consentRevoked } ? .consentRevoked : .active
    }

    /// `app` deleted with its user at `t` (ms).
    static func deleted(_ app: AccountState, at t: Int64) -> AccountState {
        app.status == .deleted ? app : app.deleted(at: t)
    }
}
