import SiwaPostgres

/// The console's named operators (`siwa.console_operators`): `operator add|list|remove` and
/// the console's sign-in.
enum ConsoleOperatorStatements {
    /// A new operator; no row when the name is taken.
    static let add = Statement<(name: String, tokenHash: String), Int64>(
        "console_operator_add",
        "INSERT INTO siwa.console_operators (name, token_hash) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING id",
        bind: { [$0.name, $0.tokenHash] },
        decode: { row throws(PostgresError) in try row.int64("id") })

    struct Listed: Equatable {
        var name: String
        var createdAt: String
        var lastSignInAt: String?
    }

    /// Every operator by name: never a token or its hash.
    static let list = Statement<Void, Listed>(
        "console_operator_list",
        """
        SELECT name, pg_catalog.to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS created,
               pg_catalog.to_char(last_sign_in_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS last_sign_in
        FROM siwa.console_operators ORDER BY name
        """,
        decode: { row throws(PostgresError) in
            Listed(name: try row.text("name"), createdAt: try row.text("created"), lastSignInAt: try row.optionalText("last_sign_in"))
        })

    struct Removed: Equatable {
        var removed: Bool
        /// Its sessions that were open (the foreign key deletes every session of the operator).
        var openSessions: Int
    }

    /// Removes the operator; its sessions go with it (`ON DELETE CASCADE`), counted first.
    static let remove = Statement<String, Removed>(
        "console_operator_remove",
        """
        WITH gone AS (DELETE FROM siwa.console_operators WHERE name = $1 RETURNING id)
        SELECT (SELECT pg_catalog.count(*) FROM gone) AS removed,
               (SELECT pg_catalog.count(*) FROM siwa.console_sessions s JOIN gone ON s.operator_id = gone.id
                WHERE s.ended_at IS NULL AND s.last_seen_at >= pg_catalog.now() - $2::float8 * interval '1 second') AS open
        """,
        bind: { [$0, String(ConsoleSecurity.idleLimitSeconds)] },
        decode: { row throws(PostgresError) in Removed(removed: try row.int("removed") > 0, openSessions: try row.int("open")) })
}
