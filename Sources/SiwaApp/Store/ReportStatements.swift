import SiwaPostgres

/// `siwa.user_report(sub)`: a user's timeline for a reviewer (events, effects, deletion evidence;
/// emails masked, no token), as `user-report` prints it and the console shows it.
enum ReportStatements {
    struct UserReport: Sendable {
        /// The report, indented JSON.
        var json: String
        /// Something is stored about the user (an account, an event, a revocation or a provider call).
        var known: Bool
    }

    static let userReport = Statement<String, UserReport>(
        "user_report",
        """
        SELECT pg_catalog.jsonb_pretty(r) AS report,
               (r -> 'account'::text <> 'null'::jsonb OR pg_catalog.jsonb_array_length(r -> 'events'::text) > 0
                OR pg_catalog.jsonb_array_length(r -> 'revocations'::text) > 0
                OR pg_catalog.jsonb_array_length(r -> 'provider_calls'::text) > 0) AS known
        FROM siwa.user_report($1) AS r
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in UserReport(json: try row.text("report"), known: try row.bool("known")) })
}
