import SiwaCore
import SiwaPostgres

/// Applies claimed events, at most one per `sub` per call, with a handful of set-based
/// statements instead of several round trips per event: create and lock the accounts, decide
/// with `EventRules` (the pure core), write the accounts, revoke sessions, erase a deleted user's
/// email from the outbox, mark the events done, call the operator hook. The worker calls it for
/// a whole batch (fast path) and, under a savepoint per event, for one event at a time when the
/// batch fails (e.g. the hook raised for one of them): the same statements either way.
enum BatchApplier {
    /// Whether `siwa.on_event` is the operator's (called) or the shipped no-op (skipped: calling a
    /// plpgsql function 1000 times costs more than the rest of a batch). Read once per transaction.
    enum Hook {
        case shippedNoOp, operators

        static func current(on c: PostgresConnection) throws(PostgresError) -> Hook {
            try c.row(WorkerStatements.hookIsDefault) == true ? .shippedNoOp : .operators
        }
    }

    /// Applies `events` (distinct subs) in the caller's transaction; returns each one's decision, in order.
    /// `forward`: queue a forward for each event that took effect (forwarding is on).
    /// `libraries`: the auth libraries' tables the events also apply to (`SIWA_APPLY_TO`).
    /// `providers`: the hosted providers a call is queued for (`SIWA_APPLY_TO`).
    static func apply(
        _ events: [ClaimedEvent], hook: Hook, forward: Bool = false, libraries: AuthLibraryTargets = .none,
        providers: ProviderTargets = .none, on c: PostgresConnection
    ) throws(PostgresError) -> [AccountDecision] {
        // Sorted: concurrent workers then lock and insert accounts in one order (no deadlocks).
        let subs = events.map { $0.event.sub }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        // What each event makes of a user seen for the first time: a sub without an account row
        // is inserted in that state, and this decision is the one applied (below).
        var asNew: [String: UserDecision] = [:]
        for item in events {
            asNew[item.event.sub] = AppAccountRules.apply(item.event, audience: item.audience, to: UserState(user: nil, apps: [:]))
        }
        let created = Set(
            try c.rows(WorkerStatements.createOrLockAccounts, subs.map { ($0, asNew[$0]?.user.newState ?? .new) }))
        var current: [String: AccountState] = [:]
        let existing = subs.filter { !created.contains($0) }
        if !existing.isEmpty {
            for (sub, state) in try c.rows(WorkerStatements.lockAccounts, existing) { current[sub] = state }
        }
        var apps: [String: [String: AccountState]] = [:]
        for (sub, aud, state) in try c.rows(WorkerStatements.lockAppAccounts, subs) { apps[sub, default: [:]][aud] = state }
        var decisions: [AccountDecision] = []
        var changed: [(sub: String, state: AccountState)] = []
        var changedApps: [(sub: String, aud: String, state: AccountState)] = []
        var sessionsToRevoke: [WorkerStatements.SessionsToRevoke] = []
        var deleted: [String] = []
        var comebacks: [WorkerStatements.Comeback] = []
        var moveTokens: [DeletionStatements.Deletion] = []
        var eraseTokens: [DeletionStatements.Erasure] = []
        for item in events {
            let sub = item.event.sub
            // A created account holds its first-seen state already, unless app accounts of that
            // user existed without it (an import): then the user is decided again, with them.
            let written = created.contains(sub) && apps[sub] == nil
            let userDecision =
                written
                ? asNew[sub]!
                : AppAccountRules.apply(item.event, audience: item.audience, to: UserState(user: current[sub], apps: apps[sub] ?? [:]))
            let decision = userDecision.user
            decisions.append(decision)
            if decision.accountChanged && !written { changed.append((sub, decision.newState)) }
            for (aud, state) in userDecision.apps.sorted(by: { $0.key < $1.key }) { changedApps.append((sub, aud, state)) }
            let reason = decision.revokeReason ?? item.event.type.rawValue
            let aud = userDecision.revokeAudience
            switch decision.revokeSessions {
            case .none: break
            case .all: sessionsToRevoke.append(.init(sub: sub, createdAtOrBefore: nil, reason: reason, aud: aud))
            case .createdAtOrBefore(let ms): sessionsToRevoke.append(.init(sub: sub, createdAtOrBefore: ms, reason: reason, aud: aud))
            }
            // Every event of a deleted user erases: also one that arrives after the deletion
            // (it may carry an email).
            if decision.newState.status == .deleted {
                deleted.append(sub)
            } else if item.event.type == .accountDelete || item.event.type == .deletionRequested {
                // Older than the sign-in the user came back with (the rules set `accountSince`):
                // what is older than the comeback was the deleted account's and goes.
                let since = decision.newState.accountSince ?? (item.event.eventTimeMillis + 1)
                comebacks.append(.init(sub: sub, sinceMillis: since))
            }
            // Tokens signed in at or before a deletion or consent-revoked, whatever its outcome (a
            // deletion made stale by a newer sign-in still ends what was held before it): an
            // in-app deletion revokes them at Apple (moved, encrypted, into siwa.revocations);
            // Apple's own account-delete and consent-revoked ended the grant: erased.
            switch TokenRules.effect(of: item.event, audience: item.audience, outcome: decision.outcome) {
            case .none: break
            case .revoke(let t, let clientID): moveTokens.append(.init(sub: sub, atMillis: t, clientID: clientID))
            case .erase(let t, let clientID): eraseTokens.append(.init(sub: sub, atMillis: t, clientID: clientID))
            }
        }
        if !changed.isEmpty { try c.affected(WorkerStatements.updateAccounts, changed) }
        // A new app account is inserted plainly, an existing one (locked above) rewritten.
        var newApps: [(sub: String, aud: String, state: AccountState)] = []
        var existingApps: [(sub: String, aud: String, state: AccountState)] = []
        for app in changedApps {
            if apps[app.sub]?[app.aud] == nil { newApps.append(app) } else { existingApps.append(app) }
        }
        if !newApps.isEmpty { try c.affected(WorkerStatements.insertAppAccounts, newApps) }
        if !existingApps.isEmpty { try c.affected(WorkerStatements.writeAppAccounts, existingApps) }
        if !sessionsToRevoke.isEmpty { try c.affected(WorkerStatements.revokeSessions, sessionsToRevoke) }
        try AuthLibraryApplier.apply(libraries, events: events, decisions: decisions, on: c)
        // Forwarding: queued with the effect (same transaction), before a deletion erases emails.
        // Sign-ins are not forwarded (the app made them); an in-app deletion goes as account-delete.
        if forward {
            let effective = zip(events, decisions).compactMap { (e, d) -> (event: ClaimedEvent, source: ForwardSource)? in
                guard d.outcome == .applied, e.event.type != .signIn else { return nil }
                return (e, e.forwardSource)
            }
            if !effective.isEmpty { try c.affected(ForwardStatements.enqueue, .init(events: effective)) }
        }
        // Hosted providers and email services: a call per effect and target, queued with the
        // effect (same transaction), before a deletion erases the address it needs.
        let calls = providers.calls(for: events, decisions: decisions, before: current)
        if !calls.isEmpty { try c.affected(ProviderCallStatements.enqueue, calls) }
        if !deleted.isEmpty {
            try c.affected(WorkerStatements.eraseEventEmails, deleted)
            try c.affected(ForwardStatements.eraseEmails, deleted)
        }
        for comeback in comebacks {
            try c.affected(WorkerStatements.eraseEventEmailsBefore, comeback)
            try c.affected(ForwardStatements.eraseEmailsBefore, comeback)
        }
        if !moveTokens.isEmpty { try c.affected(DeletionStatements.moveTokensToRevocation, moveTokens) }
        if !eraseTokens.isEmpty { try c.affected(DeletionStatements.eraseTokens, eraseTokens) }
        let ids = events.map(\.id)
        try c.affected(WorkerStatements.markDone, zip(ids, decisions).map { ($0, $1.outcome.rawValue) })
        // The operator's hook is always called, with the decision recorded; the shipped no-op is not.
        if hook == .operators {
            try c.affected(WorkerStatements.plannerDefaults, ())
            try c.affected(WorkerStatements.callHook, ids)
            try c.affected(WorkerStatements.keyLookupsOnly, ())
        }
        return decisions
    }
}
