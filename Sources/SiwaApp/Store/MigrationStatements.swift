import Foundation
import SiwaPostgres

/// What a migration asks before it takes any lock, and the text it runs.
enum MigrationStatements {
    /// True when the current role may apply the schema: without schema `siwa`, it may create
    /// schemas in this database; with it, it has the privileges of the owner of the schema and of
    /// every table, view, sequence and function in it (DDL on an object needs its owner).
    /// Reads the catalogs only: no lock on any of siwa's tables.
    static let mayMigrate = Statement<Void, Bool>(
        "may_migrate",
        """
        SELECT CASE
            WHEN n.oid IS NULL THEN pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')
            ELSE pg_catalog.pg_has_role(n.nspowner, 'USAGE')
                 AND NOT EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid
                                 AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND NOT pg_catalog.pg_has_role(c.relowner, 'USAGE'))
                 AND NOT EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace = n.oid AND NOT pg_catalog.pg_has_role(p.proowner, 'USAGE'))
            END AS allowed
        FROM (SELECT 1) AS one LEFT JOIN pg_namespace n ON n.nspname = 'siwa'
        """,
        decode: { row throws(PostgresError) in try row.bool("allowed") })

    /// True when every role may create objects in schema `public` (PostgreSQL 14 and earlier by
    /// default, and every database upgraded from them): any login can then plant a function that
    /// shadows a built-in for whoever's search_path includes `public`.
    static let publicWritable = Statement<Void, Bool>(
        "public_writable",
        """
        SELECT EXISTS (SELECT FROM pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                       WHERE n.nspname = 'public' AND a.grantee = 0 AND a.privilege_type = 'CREATE') AS writable
        """,
        decode: { row throws(PostgresError) in try row.bool("writable") })

    /// The current role's name (for the "not allowed" message).
    static let currentRole = Statement<Void, String>(
        "current_role", "SELECT current_user AS role", decode: { row throws(PostgresError) in try row.text("role") })

    /// SQLSTATEs after which a migration attempt is retried: `lock_not_available` (its
    /// `lock_timeout` ran out) and `deadlock_detected`.
    static let retryableStates: Set<String> = ["55P03", "40P01"]

    /// `schema` (which opens its transaction with a line `BEGIN;` and ends it with a line
    /// `COMMIT;`) with `SET LOCAL lock_timeout` right after `BEGIN;`, so every lock it waits
    /// for (the advisory lock, `LOCK TABLE siwa.events`, each DDL's) gives up after
    /// `lockTimeoutMilliseconds`, and the release recorded right before `COMMIT;` (`recording`),
    /// in the same transaction. Nil when `schema` does not have that shape.
    static func applying(_ schema: String, lockTimeoutMilliseconds: Int, recording: [String]) -> String? {
        var lines = schema.split(separator: "\n", omittingEmptySubsequences: false)
        guard let begin = lines.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "BEGIN;" }),
            let commit = lines.lastIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "COMMIT;" }),
            begin < commit
        else { return nil }
        lines.insert(contentsOf: recording.map { Substring($0) }, at: commit)
        lines.insert("SET LOCAL lock_timeout = '\(max(1, lockTimeoutMilliseconds))ms';", at: begin + 1)
        return lines.joined(separator: "\n")
    }

    /// Ends the transaction an attempt left aborted.
    static let rollback = "ROLLBACK"
}
