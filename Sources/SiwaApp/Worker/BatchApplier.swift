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
    /// `forward`: queue a forward (with this source) for each event that took effect; nil: forwarding is off.
    static func apply(
        _ events: [ClaimedEvent], hook: Hook, forward: ForwardSource? = nil, on c: PostgresConnection
    ) throws(PostgresError) -> [AccountDecision] {
        // Sorted: concurrent workers then lock and insert accounts in one order (no deadlocks).
        let subs = events.map { $0.event.sub }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let created = Set(try c.rows(WorkerStatements.createOrLockAccounts, subs))
        var current: [String: AccountState] = [:]
        for (sub, state) in try c.rows(WorkerStatements.lockAccounts, subs) where !created.contains(sub) {
            current[sub] = state
        }
        var decisions: [AccountDecision] = []
        var changed: [(sub: String, state: AccountState)] = []
        var revocations: [WorkerStatements.Revocation] = []
        var deleted: [String] = []
        for item in events {
            let sub = item.event.sub
            let decision = EventRules.apply(item.event, to: current[sub])
            decisions.append(decision)
            if decision.accountChanged { changed.append((sub, decision.newState)) }
            let reason = decision.revokeReason ?? item.event.type.rawValue
            switch decision.revokeSessions {
            case .none: break
            case .all: revocations.append(.init(sub: sub, createdAtOrBefore: nil, reason: reason))
            case .createdAtOrBefore(let ms): revocations.append(.init(sub: sub, createdAtOrBefore: ms, reason: reason))
            }
            // Every event of a deleted user erases: also one that arrives after the deletion
            // (it may carry an email), and tokens stored after it.
            if decision.newState.status == .deleted { deleted.append(sub) }
        }
        if !changed.isEmpty { try c.affected(WorkerStatements.updateAccounts, changed) }
        if !revocations.isEmpty { try c.affected(WorkerStatements.revokeSessions, revocations) }
        // Forwarding: queued with the effect (same transaction), before a deletion erases emails.
        let effective = zip(events, decisions).filter { $0.1.outcome == .applied }.map(\.0)
        if let forward, !effective.isEmpty { try c.affected(ForwardStatements.enqueue, .init(source: forward, events: effective)) }
        if !deleted.isEmpty {
            try c.affected(WorkerStatements.eraseEventEmails, deleted)
            try c.affected(DeletionStatements.eraseTokens, deleted)
            try c.affected(ForwardStatements.eraseEmails, deleted)
        }
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
