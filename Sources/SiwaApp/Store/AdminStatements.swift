import SiwaPostgres

/// How the admin listener's database connections open their transactions: statement and lock
/// timeouts, transaction-local (`SET LOCAL`: nothing lingers on a pooled connection, and it
/// works through PgBouncer's transaction pooling, where session `SET`s and the `options`
/// startup parameter do not).
enum AdminStatements {
    /// The admin pool (API calls, the key set's persistence): 5 s per statement, 2 s for a lock.
    static let beginAdmin = begin(statementTimeoutMilliseconds: 5000, lockTimeoutMilliseconds: 2000)

    /// The console's pages: the admin pool's timeouts, and key lookups only (no table read whole
    /// because the statistics made it look small: `WorkerStatements.keyLookupsOnly`).
    static let beginConsole = beginAdmin + "; " + WorkerStatements.keyLookupsOnly.sql

    /// The readiness and gauge probe: 2 s per statement, 1 s for a lock.
    static let beginProbe = begin(statementTimeoutMilliseconds: 2000, lockTimeoutMilliseconds: 1000)

    /// Storing a sign-in (`siwa.store_apple_token`) waits up to 15 s for the account's row lock
    /// (a worker's batch applying that user's events holds it) instead of the pool's 2 s, within
    /// the API call's budget: past that, the function decides without the lock (schema.sql says
    /// why that is safe) rather than fail and have the fresh grant revoked.
    static let signInLockWait = "SET LOCAL lock_timeout = 15000; SET LOCAL statement_timeout = 20000"

    /// Which of the relations `$1` the login may read (a relation that does not exist, or in a
    /// schema it may not use, is not): the probe reads only those, so a login without a gauge's
    /// grant never writes a "permission denied" into PostgreSQL's log every round.
    static let readable = Statement<[String], String>(
        "admin_readable",
        """
        SELECT r AS relation FROM pg_catalog.unnest($1::text[]) AS r
        WHERE CASE WHEN pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(pg_catalog.split_part(r, '.', 1)), 'USAGE')
                   THEN pg_catalog.has_table_privilege(pg_catalog.to_regclass(r), 'SELECT') ELSE false END
        """,
        bind: { [SQLEncoding.array($0)] },
        decode: { row throws(PostgresError) in try row.text("relation") })

    static func begin(statementTimeoutMilliseconds: Int, lockTimeoutMilliseconds: Int) -> String {
        "BEGIN; SET LOCAL statement_timeout = \(statementTimeoutMilliseconds); SET LOCAL lock_timeout = \(lockTimeoutMilliseconds)"
    }
}
