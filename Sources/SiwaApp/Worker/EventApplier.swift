import SiwaCore
import SiwaPostgres

/// Applies one claimed outbox event inside the caller's transaction, following `EventRules`
/// (the pure core): lock the account row, compute the decision, write it, revoke sessions, call
/// the operator hook `siwa.on_event`, mark the event done. Exactly once in effect because it all
/// commits (or rolls back) with the `done` mark.
enum EventApplier {
    struct Claimed {
        var id: String
        var event: AppleEvent
        var attempts: Int
    }

    static let claimSQL = """
        SELECT id, sub, type, (extract(epoch FROM event_time) * 1000)::bigint AS event_ms,
               email, is_private_email, attempts
        FROM siwa.events
        WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
        ORDER BY next_attempt_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
        """

    static let statements: [(String, String)] = [
        ("siwa_claim", claimSQL),
        ("siwa_account_upsert", "INSERT INTO siwa.accounts (apple_sub) VALUES ($1) ON CONFLICT DO NOTHING"),
        ("siwa_account_lock", """
            SELECT status, email, is_private_email, email_forwarding,
                   (extract(epoch FROM last_event_time) * 1000)::bigint,
                   (extract(epoch FROM email_event_time) * 1000)::bigint,
                   (extract(epoch FROM status_event_time) * 1000)::bigint
            FROM siwa.accounts WHERE apple_sub = $1 FOR UPDATE
            """),
        ("siwa_account_update", """
            UPDATE siwa.accounts SET status = $2, email = $3, is_private_email = $4::boolean,
                email_forwarding = $5::boolean,
                last_event_time = timestamptz 'epoch' + $6::bigint * interval '1 millisecond',
                email_event_time = timestamptz 'epoch' + $7::bigint * interval '1 millisecond',
                status_event_time = timestamptz 'epoch' + $8::bigint * interval '1 millisecond',
                updated_at = now(),
                deleted_at = CASE WHEN $2 = 'deleted' THEN coalesce(deleted_at, now()) ELSE deleted_at END
            WHERE apple_sub = $1
            """),
        ("siwa_revoke_all", """
            UPDATE siwa.sessions SET revoked_at = now(), revoked_reason = $2
            WHERE apple_sub = $1 AND revoked_at IS NULL
            """),
        ("siwa_revoke_before", """
            UPDATE siwa.sessions SET revoked_at = now(), revoked_reason = $2
            WHERE apple_sub = $1 AND revoked_at IS NULL
              AND created_at <= timestamptz 'epoch' + $3::bigint * interval '1 millisecond'
            """),
        ("siwa_hook", """
            SELECT siwa.on_event(e, a) FROM siwa.events e JOIN siwa.accounts a ON a.apple_sub = e.sub
            WHERE e.id = $1
            """),
        ("siwa_done", """
            UPDATE siwa.events SET status = 'done', processed_at = now(), attempts = attempts + 1,
                outcome = $2, last_error = NULL
            WHERE id = $1
            """),
        ("siwa_failed", """
            UPDATE siwa.events SET status = $2, attempts = attempts + 1, last_error = $3,
                next_attempt_at = now() + $4::double precision * interval '1 second'
            WHERE id = $1
            """),
    ]

    static func prepare(_ connection: PostgresConnection) throws(PostgresError) {
        for (name, sql) in statements {
            try connection.prepare(name, sql)
        }
    }

    static func claim(limit: Int, on connection: PostgresConnection) throws(PostgresError) -> [Claimed] {
        let result = try connection.executePrepared("siwa_claim", [String(limit)])
        return result.rows.map { row in
            Claimed(id: row[0] ?? "",
                    event: AppleEvent(type: EventType(rawValue: row[2] ?? ""), sub: row[1] ?? "",
                                      eventTimeMillis: Int64(row[3] ?? "") ?? 0, email: row[4],
                                      isPrivateEmail: row[5].map { $0 == "t" }),
                    attempts: Int(row[6] ?? "") ?? 0)
        }
    }

    /// Applies `claimed`; returns the decision taken.
    static func apply(_ claimed: Claimed, on connection: PostgresConnection) throws(PostgresError) -> AccountDecision {
        let event = claimed.event
        let created = try connection.executePrepared("siwa_account_upsert", [event.sub]).affectedRows == 1
        let row = try connection.executePrepared("siwa_account_lock", [event.sub]).rows.first
        var current: AccountState?
        if !created, let row {
            current = AccountState(status: AccountStatus(rawValue: row[0] ?? "active") ?? .active,
                                   email: row[1], isPrivateEmail: row[2].map { $0 == "t" },
                                   emailForwarding: row[3].map { $0 == "t" },
                                   lastEventTime: row[4].flatMap { Int64($0) },
                                   emailEventTime: row[5].flatMap { Int64($0) },
                                   statusEventTime: row[6].flatMap { Int64($0) })
        }
        let decision = EventRules.apply(event, to: current)
        if decision.accountChanged {
            let s = decision.newState
            try connection.executePrepared("siwa_account_update", [
                event.sub, s.status.rawValue, s.email, s.isPrivateEmail.map { $0 ? "true" : "false" },
                s.emailForwarding.map { $0 ? "true" : "false" },
                s.lastEventTime.map(String.init), s.emailEventTime.map(String.init), s.statusEventTime.map(String.init),
            ])
        }
        let reason = decision.revokeReason ?? event.type.rawValue
        switch decision.revokeSessions {
        case .none: break
        case .all: try connection.executePrepared("siwa_revoke_all", [event.sub, reason])
        case .createdAtOrBefore(let ms): try connection.executePrepared("siwa_revoke_before", [event.sub, reason, String(ms)])
        }
        try connection.executePrepared("siwa_hook", [claimed.id])
        try connection.executePrepared("siwa_done", [claimed.id, decision.outcome.rawValue])
        return decision
    }

    static func markFailed(_ claimed: Claimed, status: String, error: String, retryIn seconds: Double,
                           on connection: PostgresConnection) throws(PostgresError) {
        try connection.executePrepared("siwa_failed", [claimed.id, status, String(error.prefix(500)), String(seconds)])
    }
}
