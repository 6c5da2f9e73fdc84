import SiwaCore
import SiwaPostgres

/// siwa-notify's record of the suppressions it added at the email services
/// (`siwa.email_suppressions`, docs/email-senders.md): what `email-enabled` may lift and an
/// account deletion erases. Written by the call sender in the transaction that records the calls'
/// outcomes.
enum EmailSuppressionStatements {
    /// One change of the record.
    struct Change {
        var target: EmailSender
        var sub: String
        var entry: SuppressionEntry
        var callID: Int64
    }

    private static func bind(_ rows: [Change]) -> [String?] {
        [
            SQLEncoding.array(rows.map(\.target.rawValue)), SQLEncoding.array(rows.map(\.sub)),
            SQLEncoding.array(rows.map(\.entry.address)), SQLEncoding.array(rows.map(\.entry.scope)),
            SQLEncoding.array(rows.map(\.callID)),
        ]
    }

    private static let rows = """
        ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::text[]),
            pg_catalog.unnest($5::bigint[])) AS u(target, sub, email, scope, call_id)
        """

    /// Records entries siwa-notify added (for their user and call).
    static let recordAdded = Statement<[Change], Void>(
        "record_email_suppressions",
        """
        INSERT INTO siwa.email_suppressions (target, apple_sub, email, scope, call_id)
        SELECT DISTINCT ON (u.target, u.email, u.scope) u.target, u.sub, u.email, u.scope, u.call_id FROM \(rows)
        ORDER BY u.target, u.email, u.scope, u.call_id DESC
        ON CONFLICT (target, email, scope) DO UPDATE SET apple_sub = EXCLUDED.apple_sub, call_id = EXCLUDED.call_id,
            added_at = pg_catalog.now()
        """,
        bind: { bind($0) })

    /// Forgets entries gone from the service.
    static let forgetRemoved = Statement<[Change], Void>(
        "forget_email_suppressions_removed",
        """
        DELETE FROM siwa.email_suppressions s USING \(rows)
        WHERE s.target = u.target AND s.email = u.email AND s.scope = u.scope
        """,
        bind: { bind($0) })

    /// After an `erase` call finished, for each (target, sub): nothing of the user's addresses is
    /// kept for that service, neither in the record nor in the user's finished calls.
    static let forget = Statement<[(target: EmailSender, sub: String)], Void>(
        "forget_email_suppressions",
        """
        WITH u AS (
            SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS u(target, sub)),
        gone AS (
            DELETE FROM siwa.email_suppressions s USING u WHERE s.target = u.target AND s.apple_sub = u.sub)
        UPDATE siwa.provider_calls p SET email = NULL
        FROM u
        WHERE p.target = u.target AND p.apple_sub = u.sub AND p.state <> 'pending' AND p.email IS NOT NULL
        """,
        bind: { rows in [SQLEncoding.array(rows.map(\.target.rawValue)), SQLEncoding.array(rows.map(\.sub))] })
}
