import SiwaCore
import SiwaPostgres

/// The worker's queue statements: claiming due events and recording a failed attempt. Applying
/// claimed events is `BulkApplier` (for one event or many: the same statements, so the fast path
/// and the event-by-event fallback cannot drift apart).
enum EventApplier {
    struct Claimed {
        var id: String
        var event: AppleEvent
        var attempts: Int
    }

    static let statements: [(String, String)] = [
        ("siwa_claim", """
            SELECT id, sub, type, (extract(epoch FROM event_time) * 1000)::bigint AS event_ms,
                   email, is_private_email, attempts
            FROM siwa.events
            WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
            ORDER BY next_attempt_at, id
            LIMIT $1
            FOR UPDATE SKIP LOCKED
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

    static func markFailed(_ claimed: Claimed, status: String, error: String, retryIn seconds: Double,
                           on connection: PostgresConnection) throws(PostgresError) {
        try connection.executePrepared("siwa_failed", [claimed.id, status, String(error.prefix(500)), String(seconds)])
    }
}
