import SiwaPostgres

/// The console's named operators (`siwa.console_operators`): `operator add|list|remove`, through
/// the owner's `siwa.operator_*` functions (a login in `siwa_operator`, or the owner).
enum ConsoleOperatorStatements {
    /// A new operator; no row when the name is taken.
    static let add = Statement<(name: String, tokenHash: String), Int64>(
        "console_operator_add",
        "SELECT id FROM siwa.operator_add($1, $2) AS added(id) WHERE id IS NOT NULL",
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
        FROM siwa.operator_list() ORDER BY name
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
        "SELECT removed, open_sessions AS open FROM siwa.operator_remove($1, $2::float8)",
        bind: { [$0, String(ConsoleSecurity.idleLimitSeconds)] },
        decode: { row throws(PostgresError) in Removed(removed: try row.int("removed") > 0, openSessions: try row.int("open")) })
}
