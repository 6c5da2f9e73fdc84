import SiwaCore
import SiwaPostgres

/// The receiver's statements on `siwa.events`.
enum OutboxStatements {
    /// Inserts verified notifications (none duplicated among them) with one multi-row statement;
    /// returns the `jti` of each new row. A row whose `jti` or (`sub`, `type`, `event_time`,
    /// `aud`) is already stored is skipped (ON CONFLICT DO NOTHING): a duplicate. Rows go in `sub`
    /// byte order, the order in which workers lock accounts: an `ignored` row takes a share lock on
    /// its account (`siwa.erase_ignored_email`), and two of them in one statement never wait for a
    /// worker in the opposite order (no deadlock). The INSERT is `siwa.insert_events` (schema.sql),
    /// whose plan the server keeps: sent by itself it was planned again for every batch.
    static let insert = Statement<[VerifiedNotification], String>(
        "insert_events",
        """
        SELECT jti FROM siwa.insert_events($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
                                           $7::boolean[], $8::text[], $9::text[]) AS jti
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map { $0.jti }),
                SQLEncoding.array(rows.map { $0.audience }),
                SQLEncoding.array(rows.map { $0.event.sub }),
                SQLEncoding.array(rows.map { $0.event.type.rawValue }),
                SQLEncoding.array(rows.map { $0.event.eventTimeMillis }),
                SQLEncoding.array(rows.map { $0.event.email }),
                SQLEncoding.array(rows.map { $0.event.isPrivateEmail }),
                SQLEncoding.array(rows.map { ($0.event.type.isKnown ? EventStatus.pending : .ignored).rawValue }),
                SQLEncoding.array(rows.map { $0.claimsJSON }),
            ]
        },
        decode: { row throws(PostgresError) in try row.text("jti") })
}
