import SiwaCore
import SiwaPostgres

/// The statements that apply events to an auth library's own tables (README "Using Supabase Auth / Better Auth / Auth.js"), built per
/// batch from the names resolved once at start (`AuthLibrarySchema`; every name quoted), and the catalog
/// reads of the start-up check. Batch statements take the batch's subs as arrays and reach rows
/// through index probes driven from the batch: the identity by (`provider`, `sub`), the
/// sessions by user. They name provider `apple` in every probe of the identities, and never
/// read a session token, a password or another provider's identity data.
enum AuthLibraryStatements {
    struct Ending {
        var sub: String
        /// Sessions created at or before this time (ms); nil: all of them.
        var beforeMillis: Int64?
    }

    /// Ends the sessions of the users whose Apple identity is `sub`. The user is looked up in a
    /// correlated subquery per element (a SubPlan: the sessions can only be the inner side,
    /// probed by user), as `WorkerStatements.revokeSessions` does. Supabase's refresh tokens
    /// of those sessions go in the same statement (by `session_id`, whether or not the
    /// foreign key cascades). A session without a creation time counts as old.
    static func endSessions(_ s: AuthLibrarySchema) -> Statement<[Ending], Void> {
        let i = s.identities, x = s.sessions
        let created =
            x.createdAt.map {
                "AND (u.before_ms IS NULL OR s.\(q($0)) IS NULL OR s.\(q($0)) <= \(SQLEncoding.timestamp(millis: "u.before_ms")))"
            } ?? ""
        let delete = """
            DELETE FROM \(x.table.quoted) s
            USING ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::bigint[])) AS u(sub, before_ms)
            WHERE s.\(q(x.user)) = ANY (ARRAY(
                SELECT i.\(q(i.user)) FROM \(i.table.quoted) i
                WHERE i.\(q(i.subject)) = u.sub AND i.\(q(i.provider)) = 'apple'))
              \(created)
            """
        let sql: String
        if let tokens = x.refreshTokens, let id = x.id {
            sql = """
                WITH ended AS (
                \(delete)
                RETURNING s.\(q(id)) AS id)
                DELETE FROM \(tokens.table.quoted) r WHERE r.\(q(tokens.session)) = ANY (ARRAY(SELECT e.id FROM ended e))
                """
        } else {
            sql = delete
        }
        return Statement(
            "\(s.kind.rawValue)_end_sessions", sql,
            bind: { rows in [SQLEncoding.array(rows.map(\.sub)), SQLEncoding.array(rows.map(\.beforeMillis))] })
    }

    /// Removes the Apple identities of `subs` and, with `deleteUsers`, each of their users that
    /// has no other identity left (the identity rows as they were before this statement: the
    /// ones removed here are excluded by name).
    static func unlink(_ s: AuthLibrarySchema, deleteUsers: Bool) -> Statement<[String], Void> {
        let i = s.identities
        let unlink = "DELETE FROM \(i.table.quoted) i WHERE i.\(q(i.provider)) = 'apple' AND i.\(q(i.subject)) = ANY ($1::text[])"
        let sql =
            deleteUsers
            ? """
            WITH gone AS (\(unlink) RETURNING i.\(q(i.user)) AS user_id)
            DELETE FROM \(s.users.quoted) usr
            WHERE usr.\(q(s.userID)) = ANY (ARRAY(SELECT DISTINCT g.user_id FROM gone g))
              AND NOT EXISTS (
                SELECT FROM \(i.table.quoted) o
                WHERE o.\(q(i.user)) = usr.\(q(s.userID))
                  AND NOT (o.\(q(i.provider)) = 'apple' AND o.\(q(i.subject)) = ANY ($1::text[])))
            """
            : unlink
        return Statement(
            "\(s.kind.rawValue)_unlink\(deleteUsers ? "_delete_users" : "")", sql, bind: { [SQLEncoding.array($0)] })
    }

    struct Address {
        var sub: String
        var email: String?
        var isPrivateEmail: Bool?
        var emailForwarding: Bool?
    }

    /// Records the address and forwarding state in the Apple identity's provider data (Supabase's
    /// `identity_data`: `email`, `is_private_email`, `email_forwarding`; a null leaves the key as
    /// it was). Each element probes its identity in a correlated subquery (a SubPlan), so the
    /// batch is the outer side: with the identities outside (an `= ANY($1)` probe), the inner
    /// `unnest` is evaluated again for every identity (bench/README "authlib"). An identity that
    /// already holds these values is not written (no new row version, no WAL), e.g. a second app's
    /// event with the same address and state.
    /// nil when the library keeps no provider data.
    static func recordAddress(_ s: AuthLibrarySchema) -> Statement<[Address], Void>? {
        let i = s.identities
        guard let data = i.data else { return nil }
        let touched = i.updatedAt.map { ", \(q($0)) = pg_catalog.now()" } ?? ""
        // The values given (a null leaves its key): held already when the data contains them
        // (each is a scalar, so containment is equality).
        let given =
            "pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('email', u.email, 'is_private_email', u.priv, 'email_forwarding', u.fwd))"
        return Statement(
            "\(s.kind.rawValue)_record_address",
            """
            UPDATE \(i.table.quoted) i
            SET \(q(data)) = coalesce(i.\(q(data)), '{}'::jsonb) || \(given)\(touched)
            FROM ROWS FROM (pg_catalog.unnest($1::text[]),
                pg_catalog.unnest($2::text[]),
                pg_catalog.unnest($3::boolean[]),
                pg_catalog.unnest($4::boolean[])) AS u(sub, email, priv, fwd)
            WHERE i.\(q(i.provider)) = 'apple' AND i.\(q(i.subject)) = ANY (ARRAY(SELECT u.sub))
              AND (i.\(q(data)) IS NULL OR NOT i.\(q(data)) @> \(given))
            """,
            bind: { rows in
                [
                    SQLEncoding.array(rows.map(\.sub)), SQLEncoding.array(rows.map(\.email)),
                    SQLEncoding.array(rows.map(\.isPrivateEmail)), SQLEncoding.array(rows.map(\.emailForwarding)),
                ]
            })
    }

    // MARK: What the operator runs (docs/auth-libraries.md, "Privileges on the libraries' tables")

    static func grantUsage(onSchema schema: String, to role: String) -> String {
        "GRANT USAGE ON SCHEMA \(q(schema)) TO \(role);"
    }

    /// Column-level SELECT (and UPDATE), and DELETE, on one table.
    static func grant(on table: TableName, select: [String], update: [String], to role: String) -> String {
        let cols: ([String]) -> String = { $0.map(q).joined(separator: ", ") }
        let updates = update.isEmpty ? "" : "UPDATE (\(cols(update))), "
        return "GRANT SELECT (\(cols(select))), \(updates)DELETE ON \(table.quotedAsConfigured) TO \(role);"
    }

    static func createIndex(on table: TableName, _ columns: [String]) -> String {
        "CREATE INDEX ON \(table.quotedAsConfigured) (\(columns.map(q).joined(separator: ", ")))"
    }

    /// `"name"` (names come from the configuration's identifiers or the libraries' own).
    private static func q(_ name: String) -> String { "\"\(name)\"" }

    // MARK: The start-up check

    struct TableFacts {
        var oid: String
        /// Row-level security hides rows from this role: on, not the owner, no BYPASSRLS, and no
        /// policy for all commands `USING (true)` names the role (or PUBLIC). A narrower policy
        /// would hide a user's other identities, and `delete-user` would take them for none.
        var rowsHidden: Bool
        var schemaUsage: Bool
        var delete: Bool
    }

    /// Where a table named without a schema lives for the login as the library's app finds it:
    /// `qualify` runs after this, in the one transaction that sets the login's own search_path
    /// back (every other transaction pins it, and resolves only the qualified names found here).
    /// The lookup calls no operator or function by an unqualified name.
    static let loginSearchPath = "SET LOCAL search_path TO DEFAULT"

    static let qualify = Statement<String, String>(
        "auth_library_qualify",
        """
        SELECT n.nspname AS schema_name
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in try row.text("schema_name") })

    /// The table `$1` (a quoted name, found through the search path when unqualified); no row
    /// when it does not exist.
    static let table = Statement<String, TableFacts>(
        "auth_library_table",
        """
        SELECT c.oid::bigint AS oid,
               c.relrowsecurity AND NOT (pg_catalog.pg_has_role(c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)
                 AND NOT (SELECT r.rolbypassrls OR r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
                 AND NOT EXISTS (
                   SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polpermissive AND p.polcmd = '*'
                     AND (p.polqual IS NULL OR pg_catalog.pg_get_expr(p.polqual, p.polrelid) = 'true')
                     AND (0::oid = ANY (p.polroles) OR EXISTS (SELECT FROM pg_catalog.unnest(p.polroles) pr(r) WHERE pg_catalog.pg_has_role(pr.r, 'USAGE'))))
                 AS rows_hidden,
               pg_catalog.has_schema_privilege(c.relnamespace, 'USAGE') AS schema_usage,
               pg_catalog.has_table_privilege(c.oid, 'DELETE') AS can_delete
        FROM pg_class c WHERE c.oid = pg_catalog.to_regclass($1)
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in
            TableFacts(
                oid: try row.text("oid"), rowsHidden: try row.bool("rows_hidden"), schemaUsage: try row.bool("schema_usage"),
                delete: try row.bool("can_delete"))
        })

    struct ColumnFacts {
        var name: String
        var select: Bool
        var update: Bool
    }

    /// The columns of table `$1` (an oid) and this role's rights on each.
    static let columns = Statement<String, ColumnFacts>(
        "auth_library_columns",
        """
        SELECT a.attname AS name, pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT') AS can_select,
               pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'UPDATE') AS can_update
        FROM pg_attribute a WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in
            ColumnFacts(name: try row.text("name"), select: try row.bool("can_select"), update: try row.bool("can_update"))
        })

    /// The key columns of each valid, non-partial index of table `$1` (an oid), in order,
    /// comma-separated (an expression key is an empty name).
    static let indexes = Statement<String, [String]>(
        "auth_library_indexes",
        """
        SELECT pg_catalog.array_to_string(ARRAY(
                   SELECT coalesce(a.attname, '') FROM pg_catalog.unnest(x.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
                   LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
                   ORDER BY k.ord), ',', '') AS keys
        FROM pg_index x WHERE x.indrelid = $1::bigint::oid AND x.indisvalid AND x.indpred IS NULL
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in try row.text("keys").split(separator: ",", omittingEmptySubsequences: false).map(String.init) })
}
