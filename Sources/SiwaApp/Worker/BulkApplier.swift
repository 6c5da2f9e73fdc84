import SiwaCore
import SiwaPostgres

/// Applies claimed events — at most one per `sub` per call — with a handful of set-based
/// statements instead of several round trips per event: lock (or create) the accounts, decide with
/// `EventRules` (the pure core), write the accounts, revoke sessions, call the operator hook, mark
/// the events done. The worker calls it for a whole batch (fast path) and, under a savepoint per
/// event, for one event at a time when the batch fails (e.g. the hook raised for one of them), so
/// one bad event never fails the others.
enum BulkApplier {
    static let statements: [(String, String)] = [
        ("siwa_bulk_upsert", """
            INSERT INTO siwa.accounts (apple_sub) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING RETURNING apple_sub
            """),
        ("siwa_bulk_lock", """
            SELECT apple_sub, status, email, is_private_email, email_forwarding,
                   (extract(epoch FROM last_event_time) * 1000)::bigint,
                   (extract(epoch FROM email_event_time) * 1000)::bigint,
                   (extract(epoch FROM status_event_time) * 1000)::bigint
            FROM siwa.accounts WHERE apple_sub = ANY($1::text[]) ORDER BY apple_sub FOR UPDATE
            """),
        ("siwa_bulk_accounts", """
            UPDATE siwa.accounts a SET status = u.status, email = u.email, is_private_email = u.priv,
                email_forwarding = u.fwd,
                last_event_time = timestamptz 'epoch' + u.last_ms * interval '1 millisecond',
                email_event_time = timestamptz 'epoch' + u.email_ms * interval '1 millisecond',
                status_event_time = timestamptz 'epoch' + u.status_ms * interval '1 millisecond',
                updated_at = now(),
                deleted_at = CASE WHEN u.status = 'deleted' THEN coalesce(a.deleted_at, now()) ELSE a.deleted_at END
            FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::boolean[], $6::bigint[], $7::bigint[],
                        $8::bigint[]) AS u(sub, status, email, priv, fwd, last_ms, email_ms, status_ms)
            WHERE a.apple_sub = u.sub
            """),
        ("siwa_bulk_revoke", """
            UPDATE siwa.sessions s SET revoked_at = now(), revoked_reason = u.reason
            FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(sub, before_ms, reason)
            WHERE s.apple_sub = u.sub AND s.revoked_at IS NULL
              AND (u.before_ms IS NULL OR s.created_at <= timestamptz 'epoch' + u.before_ms * interval '1 millisecond')
            """),
        ("siwa_bulk_hook", """
            SELECT siwa.on_event(e, a) FROM siwa.events e JOIN siwa.accounts a ON a.apple_sub = e.sub
            WHERE e.id = ANY($1::bigint[]) ORDER BY e.event_time, e.id
            """),
        ("siwa_hook_is_default", """
            SELECT coalesce(bool_and(regexp_replace(p.prosrc, '[[:space:]]', '', 'g')
                                     = 'BEGIN--siwa-notify:default-hook(theworkerskipscallingitwhilethismarkerishere)END'), false)
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'siwa' AND p.proname = 'on_event'
            """),
        ("siwa_bulk_done", """
            UPDATE siwa.events e SET status = 'done', processed_at = now(), attempts = e.attempts + 1,
                outcome = u.outcome, last_error = NULL
            FROM unnest($1::bigint[], $2::text[]) AS u(id, outcome)
            WHERE e.id = u.id
            """),
    ]

    static func prepare(_ connection: PostgresConnection) throws(PostgresError) {
        for (name, sql) in statements {
            try connection.prepare(name, sql)
        }
    }

    /// Applies `events` (distinct subs); returns each one's decision, in order.
    static func apply(_ events: [EventApplier.Claimed], on c: PostgresConnection) throws(PostgresError) -> [AccountDecision] {
        // Sorted: concurrent workers then lock and insert accounts in one order (no deadlocks).
        let subs = events.map { $0.event.sub }.sorted()
        let created = Set(try c.executePrepared("siwa_bulk_upsert", [OutboxWriter.arrayLiteral(subs)]).rows.compactMap { $0[0] })
        var current: [String: AccountState] = [:]
        for row in try c.executePrepared("siwa_bulk_lock", [OutboxWriter.arrayLiteral(subs)]).rows {
            guard let sub = row[0], !created.contains(sub) else { continue }
            current[sub] = AccountState(status: AccountStatus(rawValue: row[1] ?? "active") ?? .active,
                                        email: row[2], isPrivateEmail: row[3].map { $0 == "t" },
                                        emailForwarding: row[4].map { $0 == "t" },
                                        lastEventTime: row[5].flatMap { Int64($0) },
                                        emailEventTime: row[6].flatMap { Int64($0) },
                                        statusEventTime: row[7].flatMap { Int64($0) })
        }
        var decisions: [AccountDecision] = []
        var changed: [(String, AccountState)] = []
        var revocations: [(sub: String, before: Int64?, reason: String)] = []
        for item in events {
            let decision = EventRules.apply(item.event, to: current[item.event.sub])
            decisions.append(decision)
            if decision.accountChanged { changed.append((item.event.sub, decision.newState)) }
            switch decision.revokeSessions {
            case .none: break
            case .all: revocations.append((item.event.sub, nil, decision.revokeReason ?? item.event.type.rawValue))
            case .createdAtOrBefore(let ms): revocations.append((item.event.sub, ms, decision.revokeReason ?? item.event.type.rawValue))
            }
        }
        let lit = OutboxWriter.arrayLiteral
        func bool(_ b: Bool?) -> String? { b.map { $0 ? "true" : "false" } }
        if !changed.isEmpty {
            try c.executePrepared("siwa_bulk_accounts", [
                lit(changed.map { $0.0 }), lit(changed.map { $0.1.status.rawValue }), lit(changed.map { $0.1.email }),
                lit(changed.map { bool($0.1.isPrivateEmail) }), lit(changed.map { bool($0.1.emailForwarding) }),
                lit(changed.map { $0.1.lastEventTime.map(String.init) }), lit(changed.map { $0.1.emailEventTime.map(String.init) }),
                lit(changed.map { $0.1.statusEventTime.map(String.init) }),
            ])
        }
        if !revocations.isEmpty {
            try c.executePrepared("siwa_bulk_revoke", [
                lit(revocations.map { $0.sub }), lit(revocations.map { $0.before.map(String.init) }), lit(revocations.map { $0.reason }),
            ])
        }
        let ids = lit(events.map { $0.id })
        // The shipped hook does nothing: calling it 1000 times costs more than the rest of the
        // batch. Any other body (checked every batch, whitespace aside) is always called.
        if try c.executePrepared("siwa_hook_is_default").scalar != "t" {
            try c.executePrepared("siwa_bulk_hook", [ids])
        }
        try c.executePrepared("siwa_bulk_done", [ids, lit(decisions.map { $0.outcome.rawValue })])
        return decisions
    }
}
