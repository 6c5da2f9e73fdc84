import Foundation
import SiwaApp
import SiwaPostgres
import Testing

@Suite("Least privilege", .needsDatabase)
struct LeastPrivilegeTests {
    /// A new database and, for each of siwa_receiver, siwa_worker, siwa_api and siwa_console, a
    /// login role that is a member of it alone: the conninfo of each, by group role.
    static func databaseWithLoginRoles() throws -> (url: String, login: [String: String]) {
        let url = try TestDatabase.create()
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        var login: [String: String] = [:]
        for group in ["siwa_receiver", "siwa_worker", "siwa_api", "siwa_console"] {
            let name = group.replacingOccurrences(of: "siwa_", with: "") + "_" + suffix
            _ = try TestDatabase.query(url, "CREATE ROLE \(name) LOGIN IN ROLE \(group)")
            login[group] = url + " user=\(name)"
        }
        try RecordedTokenKey.record(url)
        return (url, login)
    }

    @Test("a command refused a privilege names the object and the roles that grant it; the login the docs name for it works")
    func permissionNamed() throws {
        let (url, login) = try Self.databaseWithLoginRoles()
        let refused = #expect(throws: PostgresError.self) { try OutboxAdmin.status(conninfo: login["siwa_worker"]!) }
        #expect(refused?.sqlState == "42501")
        #expect(
            "\(PermissionDenied.explained(try #require(refused)))"
                == #"permission denied for view app_account_status_summary (42501): a member of siwa_dashboard may (docs/configuration.md, "Which login for each command")"#
        )
        let other = PostgresError(code: .queryFailed, sqlState: "23505", serverMessage: "duplicate key")
        #expect("\(PermissionDenied.explained(other))" == "\(other)", "other errors as they are")
        // A replay names the privilege it needs: siwa_console reads siwa.events, only siwa_worker updates it.
        let update = PostgresError(code: .queryFailed, sqlState: "42501", serverMessage: "permission denied for table events")
        #expect("\(PermissionDenied.explained(update))".contains("a member of siwa_console or siwa_worker may"))
        #expect("\(PermissionDenied.explained(update, privilege: "UPDATE"))".contains("(42501): a member of siwa_worker may"))
        // docs/configuration.md: `status` with a login in siwa_dashboard and siwa_console.
        let ops = "ops_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(url, "CREATE ROLE \(ops) LOGIN IN ROLE siwa_dashboard, siwa_console")
        _ = try OutboxAdmin.status(conninfo: url + " user=\(ops)")

        // A process on the superuser's login says so at start, with the fix.
        let h = try TestHarness(conninfo: url)
        defer { h.stop() }
        let warnings = h.logs.lines.filter { $0.contains("this process connects as a superuser") }
        #expect(warnings.count == 1 && warnings[0].contains("\"level\":\"warning\""), "\(h.logs.lines)")
    }

    @Test("receive runs as a member of siwa_receiver and work as a member of siwa_worker")
    func splitRoles() throws {
        let (url, login) = try Self.databaseWithLoginRoles()
        let receiver = try TestHarness(conninfo: login["siwa_receiver"]!, roles: .receive)
        defer { receiver.stop() }
        let worker = try TestHarness(conninfo: login["siwa_worker"]!, roles: .work)
        defer { worker.stop() }
        let sub = "000739.roles.0001"
        _ = try TestDatabase.query(url, "INSERT INTO siwa.sessions (apple_sub, created_at) VALUES ($1, now() - interval '1 hour')", [sub])
        #expect(try receiver.post(token: try receiver.token(type: "consent-revoked", sub: sub)).code == "accepted")
        let applied = eventually(timeout: 10) {
            (try? TestDatabase.query(url, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar) == "consent_revoked"
        }
        #expect(applied)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NULL").scalar == "0")
        #expect(try receiver.admin("/readyz").status == 200)
        #expect(!receiver.logs.lines.contains { $0.contains("this process connects as") }, "no owner warning on a login of its own")
        // `work` holds the key set too (its refresher keeps it): the gauge says so.
        #expect(
            try eventually(timeout: 10) {
                try worker.admin("/metrics").body.split(separator: "\n").contains { $0.hasPrefix("siwa_keys_loaded ") && !$0.hasSuffix(" 0") }
            }, "siwa_keys_loaded counts the keys work holds")
        let metrics = try receiver.admin("/metrics").body
        #expect(metrics.contains("siwa_outbox_backlog"))
        // The worker keeps the key set the receivers fall back on (their role may only read it).
        #expect(eventually { (try? TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets").scalar) == "1" })
    }

    @Test("the receiver's role stores notifications and nothing else: each privileged row refused, the verified paths still work")
    func receiverCannotSpeakForUsers() throws {
        let (url, login) = try Self.databaseWithLoginRoles()
        let sub = "000739.speak.0001"
        // The user was deleted; a forged sign-in would bring them back with an address of the forger's choosing.
        _ = try TestDatabase.query(
            url,
            "INSERT INTO siwa.accounts (apple_sub, status, status_event_time, deleted_at) VALUES ($1, 'deleted', now() - interval '1 day', now())",
            [sub])
        _ = try TestDatabase.query(
            url, "INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) VALUES ('000739.other.0002', 'app', 'k', '\\x00')")
        func insert(
            _ c: PostgresConnection, jti: String, type: String, status: String = "pending", claims: String = "{}",
            extra: (column: String, value: String)? = nil
        ) throws(PostgresError) {
            let columns = "jti, aud, sub, type, event_time, email, status, claims" + (extra.map { ", " + $0.column } ?? "")
            let values = "$1, 'app', $2, $3, now(), 'forger@example.com', $4, $5::jsonb" + (extra.map { ", " + $0.value } ?? "")
            _ = try c.execute("INSERT INTO siwa.events (\(columns)) VALUES (\(values))", [jti, sub, type, status, claims])
        }
        let forgeries: [(String, (PostgresConnection) throws(PostgresError) -> Void)] = [
            ("a sign-in", { c throws(PostgresError) in try insert(c, jti: "f1", type: "sign-in", claims: #"{"source":"sign-in"}"#) }),
            ("a sign-in without a source", { c throws(PostgresError) in try insert(c, jti: "f2", type: "sign-in") }),
            ("a deletion request", { c throws(PostgresError) in try insert(c, jti: "f3", type: "deletion-requested") }),
            ("an ignored deletion request", { c throws(PostgresError) in try insert(c, jti: "f4", type: "deletion-requested", status: "ignored") }),
            (
                "a reconcile",
                { c throws(PostgresError) in
                    try insert(c, jti: "f5", type: "consent-revoked", claims: #"{"source":"reconcile","client_id":"app"}"#)
                }
            ),
            (
                "a faked in-app source",
                { c throws(PostgresError) in try insert(c, jti: "f6", type: "account-delete", claims: #"{"source":"in-app"}"#) }
            ),
            ("a row born done", { c throws(PostgresError) in try insert(c, jti: "f7", type: "consent-revoked", status: "done") }),
            (
                "a row born dead (replay would apply it)",
                { c throws(PostgresError) in try insert(c, jti: "f8", type: "email-enabled", status: "dead") }
            ),
            ("a row born failed", { c throws(PostgresError) in try insert(c, jti: "f9", type: "email-enabled", status: "failed") }),
            (
                "a progress column",
                { c throws(PostgresError) in
                    try insert(c, jti: "f10", type: "email-enabled", extra: ("next_attempt_at", "now() + interval '1 year'"))
                }
            ),
            ("an outcome", { c throws(PostgresError) in try insert(c, jti: "f11", type: "email-enabled", extra: ("outcome", "'applied'")) }),
            ("a deletion through the function", { c throws(PostgresError) in _ = try c.execute("SELECT siwa.request_deletion($1, 'app')", [sub]) }),
            (
                "a token through the function",
                { c throws(PostgresError) in
                    _ = try c.execute(
                        "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), 'forger@example.com', false, now())",
                        [sub])
                }
            ),
            (
                "a revocation of another user's token",
                { c throws(PostgresError) in
                    _ = try c.execute(
                        "INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ('000739.other.0002', 'app', 'in-app-deletion')")
                }
            ),
            ("an event rewritten", { c throws(PostgresError) in _ = try c.execute("UPDATE siwa.events SET type = 'sign-in'") }),
        ]
        // As a login role that is a member of siwa_receiver, and as siwa_receiver itself (SET ROLE).
        let member = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        let owner = try PostgresConnection(conninfo: url)
        try owner.execute("SET ROLE siwa_receiver")
        for c in [member, owner] {
            for (what, forge) in forgeries {
                do {
                    try forge(c)
                    Issue.record("the receiver's role recorded \(what)")
                } catch {
                    #expect(error.sqlState == "42501", "\(what): \(error)")
                }
            }
        }
        try owner.execute("RESET ROLE")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events").scalar == "0")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.revocations").scalar == "0")

        // What it is for: Apple's four types pending and an unknown type ignored, in one statement.
        _ = try member.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
            SELECT 'ok' || g, 'app', 's' || g, t, now(), NULL, NULL, CASE WHEN g = 5 THEN 'ignored' ELSE 'pending' END,
                   '{"iss":"https://appleid.apple.com","events":"{}"}'
            FROM unnest(ARRAY['email-disabled', 'email-enabled', 'consent-revoked', 'account-delete', 'made-up-type']) WITH ORDINALITY AS u(t, g)
            ON CONFLICT DO NOTHING RETURNING jti
            """)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE jti LIKE 'ok%'").scalar == "5")

        // The verified paths still write what they write: a sign-in through the API's function, a
        // deletion request through the worker's, the reconciler's consent-revoked as the worker.
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        #expect(
            try api.execute(
                "SELECT siwa.store_apple_token('000739.legit.0003', 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now())"
            ).scalar == "created")
        let worker = try PostgresConnection(conninfo: login["siwa_worker"]!)
        #expect(try worker.execute("SELECT siwa.request_deletion('000739.legit.0004', 'app')").scalar == "1")
        _ = try worker.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            VALUES ('siwa-reconcile-1', 'app', '000739.legit.0005', 'consent-revoked', now(), '{"source":"reconcile","client_id":"app"}')
            """)
        // ... and nothing else of that kind, even as the worker.
        #expect(throws: PostgresError.self) {
            _ = try worker.execute(
                "INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims) VALUES ('w1', 'app', $1, 'sign-in', now(), '{}')", [sub])
        }
        #expect(
            try TestDatabase.query(url, "SELECT string_agg(type, ',' ORDER BY type) FROM siwa.events WHERE jti NOT LIKE 'ok%'").scalar
                == "consent-revoked,deletion-requested,sign-in")
        #expect(try TestDatabase.query(url, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar == "deleted")
    }

    @Test("each role's privileges, read from the catalogs, are exactly the allow-list and the table of docs/security.md")
    func grantsMatchTheDocs() throws {
        let url = try TestDatabase.create()
        let rows = try GrantMatrix.read(conninfo: url)
        let extra = rows.subtracting(GrantMatrix.expected), missing = GrantMatrix.expected.subtracting(rows)
        #expect(extra.isEmpty && missing.isEmpty, "extra: \(extra.sorted()), missing: \(missing.sorted())")
        // The table of docs/security.md lists the same, no more, no less.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("docs/security.md"), encoding: .utf8)
        let section = guide.components(separatedBy: "\n## Grants\n").dropFirst().first ?? ""
        let listed = Set(
            section.split(separator: "\n").prefix { !$0.hasPrefix("#") }.compactMap { line -> String? in
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 3, cells[0].hasPrefix("`siwa_") || cells[0] == "PUBLIC" else { return nil }
                let unquote = { (s: String) in s.replacingOccurrences(of: "`", with: "") }
                return "\(unquote(cells[0])) \(cells[1]) \(unquote(cells[2]))"
            })
        #expect(
            listed == GrantMatrix.expected,
            "docs/security.md extra: \(listed.subtracting(GrantMatrix.expected).sorted()), lacks: \(GrantMatrix.expected.subtracting(listed).sorted())"
        )
        // The same, read apart from the product's query: a grant to any other role fails here.
        let independent = try Self.grantsReadApart(url)
        #expect(
            independent == GrantMatrix.expected,
            "read apart, extra: \(independent.subtracting(GrantMatrix.expected).sorted()), missing: \(GrantMatrix.expected.subtracting(independent).sorted())"
        )
        // A role added beside siwa's, with a grant of its own: both reads see it.
        let added = "siwa_added_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(url, "CREATE ROLE \(added) NOLOGIN; GRANT SELECT ON siwa.accounts TO \(added)")
        defer { _ = try? TestDatabase.query(url, "REVOKE ALL ON siwa.accounts FROM \(added); DROP ROLE \(added)") }
        #expect(try GrantMatrix.read(conninfo: url).subtracting(GrantMatrix.expected) == ["\(added) SELECT accounts"], "doctor's read")
        #expect(try Self.grantsReadApart(url).subtracting(GrantMatrix.expected) == ["\(added) SELECT accounts"], "the read apart")
    }

    /// Every grant on schema `siwa` and its objects to a role other than their owner, read from
    /// information_schema and the privilege functions rather than the ACLs `GrantMatrix.read`
    /// explodes, spelled as `GrantMatrix.expected`: tables, views and sequences, columns granted
    /// without their table, functions, and the schema to every `siwa_*` role that cannot log in;
    /// with the memberships between those roles and any attribute of a role holding a grant.
    static func grantsReadApart(_ url: String) throws -> Set<String> {
        let rows = try TestDatabase.query(
            url,
            """
            WITH tables AS (
                SELECT grantee, privilege_type, table_name FROM information_schema.role_table_grants
                WHERE table_schema = 'siwa' AND grantee <> current_user
                UNION
                SELECT grantee, privilege_type, object_name FROM information_schema.usage_privileges
                WHERE object_schema = 'siwa' AND object_type = 'SEQUENCE' AND grantee <> current_user
            ), columns AS (
                SELECT c.grantee, c.privilege_type, c.table_name || '(' || string_agg(c.column_name, ',' ORDER BY c.column_name) || ')' AS object
                FROM information_schema.role_column_grants c
                WHERE c.table_schema = 'siwa' AND c.grantee <> current_user
                  AND NOT EXISTS (SELECT FROM tables t WHERE t.grantee = c.grantee AND t.privilege_type = c.privilege_type
                                                         AND t.table_name = c.table_name)
                GROUP BY c.grantee, c.privilege_type, c.table_name
            ), granted AS (
                SELECT grantee, privilege_type || ' ' || table_name AS what FROM tables
                UNION ALL SELECT grantee, privilege_type || ' ' || object FROM columns
                UNION ALL
                SELECT grantee, privilege_type || ' ' || routine_name FROM information_schema.role_routine_grants
                WHERE routine_schema = 'siwa' AND grantee <> current_user
                UNION ALL
                SELECT r.rolname, p.privilege || ' schema siwa' FROM pg_roles r, unnest(ARRAY['USAGE', 'CREATE']) p(privilege)
                WHERE r.rolname LIKE 'siwa\\_%' AND NOT r.rolcanlogin AND has_schema_privilege(r.oid, 'siwa', p.privilege)
            )
            SELECT DISTINCT grantee || ' ' || what FROM granted
            UNION ALL
            SELECT m.rolname || ' MEMBER ' || g.rolname FROM pg_auth_members a
                JOIN pg_roles g ON g.oid = a.roleid JOIN pg_roles m ON m.oid = a.member
            WHERE g.rolname LIKE 'siwa\\_%' AND m.rolname LIKE 'siwa\\_%' AND NOT m.rolcanlogin
            UNION ALL
            SELECT rolname || ' ATTRIBUTE ' || concat_ws(',', CASE WHEN rolsuper THEN 'SUPERUSER' END,
                CASE WHEN rolcanlogin THEN 'LOGIN' END, CASE WHEN rolbypassrls THEN 'BYPASSRLS' END,
                CASE WHEN rolcreaterole THEN 'CREATEROLE' END, CASE WHEN rolcreatedb THEN 'CREATEDB' END)
            FROM pg_roles WHERE rolname IN (SELECT grantee FROM granted)
              AND (rolsuper OR rolcanlogin OR rolbypassrls OR rolcreaterole OR rolcreatedb)
            """)
        return Set(rows.rows.compactMap { $0[0] })
    }
}
