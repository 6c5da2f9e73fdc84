import Foundation
import SiwaApp
import SiwaPostgres
import Testing

@Suite("Least privilege", .needsDatabase)
struct LeastPrivilegeTests {
    /// A new database and, for each of siwa_receiver, siwa_worker and siwa_api, a login role that
    /// is a member of it (as a deployment gives its processes): the conninfo of each, by group role.
    static func databaseWithLoginRoles() throws -> (url: String, login: [String: String]) {
        let url = try TestDatabase.create()
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        var login: [String: String] = [:]
        for group in ["siwa_receiver", "siwa_worker", "siwa_api"] {
            let name = group.replacingOccurrences(of: "siwa_", with: "") + "_" + suffix
            _ = try TestDatabase.query(url, "CREATE ROLE \(name) LOGIN IN ROLE \(group)")
            login[group] = url + " user=\(name)"
        }
        return (url, login)
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
        let metrics = try receiver.admin("/metrics").body
        #expect(metrics.contains("siwa_outbox_backlog"))
        // The receiver's key set was persisted with its own rights.
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets").scalar == "1")
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
                    _ = try c.execute("SELECT siwa.store_apple_token($1, 'app', 'k', '\\x00', 'forger@example.com', false, now())", [sub])
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
        #expect(try api.execute("SELECT siwa.store_apple_token('000739.legit.0003', 'app', 'k', '\\x00', NULL, NULL, now())").scalar == "created")
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

    /// Each role's privileges in schema `siwa`, as the README's "Grants" table lists them: the allow-list.
    /// `role PRIVILEGE object`; a column grant names its columns, `object(col,...)`; `PUBLIC` is
    /// everyone (nothing of siwa's); `MEMBER` a membership between siwa's roles (none); `ATTRIBUTE`
    /// a role attribute (LOGIN, SUPERUSER, ...: none, the roles are NOLOGIN groups).
    static let expectedGrants: Set<String> = [
        "siwa_api USAGE schema siwa", "siwa_api EXECUTE store_apple_token", "siwa_api EXECUTE map_transfer",
        "siwa_api EXECUTE queue_revocation", "siwa_api SELECT backlog",
        "siwa_dashboard USAGE schema siwa", "siwa_dashboard EXECUTE subject_hash",
        "siwa_dashboard SELECT account_status_summary", "siwa_dashboard SELECT app_account_status_summary",
        "siwa_dashboard SELECT backlog", "siwa_dashboard SELECT dead_forwards", "siwa_dashboard SELECT operator_actions",
        "siwa_dashboard SELECT dead_letters",
        "siwa_dashboard SELECT events_per_day", "siwa_dashboard SELECT forward_backlog",
        "siwa_receiver USAGE schema siwa",
        "siwa_receiver INSERT events(aud,claims,email,event_time,is_private_email,jti,status,sub,type)",
        "siwa_receiver SELECT events(jti)", "siwa_receiver EXECUTE insert_events", "siwa_receiver SELECT backlog",
        "siwa_receiver INSERT key_sets", "siwa_receiver SELECT key_sets", "siwa_receiver UPDATE key_sets",
        "siwa_worker USAGE schema siwa",
        "siwa_worker EXECUTE on_event", "siwa_worker EXECUTE request_deletion", "siwa_worker EXECUTE subject_hash",
        "siwa_worker SELECT accounts", "siwa_worker INSERT accounts", "siwa_worker UPDATE accounts",
        "siwa_worker SELECT app_accounts", "siwa_worker INSERT app_accounts", "siwa_worker UPDATE app_accounts",
        "siwa_worker SELECT apple_tokens", "siwa_worker INSERT apple_tokens", "siwa_worker UPDATE apple_tokens",
        "siwa_worker DELETE apple_tokens", "siwa_worker SELECT counts", "siwa_worker SELECT count_changes",
        "siwa_worker SELECT events", "siwa_worker INSERT events", "siwa_worker UPDATE events", "siwa_worker DELETE events",
        "siwa_worker SELECT event_queue", "siwa_worker UPDATE event_queue", "siwa_worker DELETE event_queue",
        "siwa_worker SELECT forwards", "siwa_worker INSERT forwards", "siwa_worker UPDATE forwards",
        "siwa_worker DELETE forwards", "siwa_worker SELECT forward_backlog", "siwa_worker SELECT dead_forwards",
        "siwa_worker SELECT reconcile_pace", "siwa_worker UPDATE reconcile_pace",
        "siwa_worker SELECT revocations", "siwa_worker UPDATE revocations", "siwa_worker EXECUTE move_tokens_to_revocation",
        "siwa_worker SELECT sessions", "siwa_worker UPDATE sessions", "siwa_worker SELECT backlog",
        // Revocation proof and the user report.
        "siwa_worker INSERT revocation_calls", "siwa_dashboard EXECUTE user_report", "siwa_api EXECUTE user_report",
        "siwa_dashboard SELECT revocation_proofs", "siwa_api SELECT revocation_proofs",
        "siwa_dashboard SELECT unconfirmed_revocations", "siwa_api SELECT unconfirmed_revocations",
        // The auth libraries' tokens adopted (their hash only).
        "siwa_worker SELECT library_tokens", "siwa_worker INSERT library_tokens", "siwa_worker UPDATE library_tokens",
    ]

    /// Every privilege on schema `siwa` and its objects held by PUBLIC or a `siwa_` role, read from
    /// the catalogs (ACLs, default ACLs where none is set, column ACLs, memberships, attributes).
    static let catalogMatrix = """
        WITH objects AS (
            SELECT c.relname::text AS name, coalesce(c.relacl, acldefault('r', c.relowner)) AS acl, c.relowner AS owner
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'siwa' AND c.relkind IN ('r', 'v', 'm', 'S', 'p', 'f')
            UNION ALL
            SELECT p.proname::text, coalesce(p.proacl, acldefault('f', p.proowner)), p.proowner
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'siwa'
            UNION ALL
            SELECT 'schema ' || n.nspname, coalesce(n.nspacl, acldefault('n', n.nspowner)), n.nspowner
            FROM pg_namespace n WHERE n.nspname = 'siwa'
        ), granted AS (
            SELECT o.name, x.grantee, x.privilege_type FROM objects o, aclexplode(o.acl) x WHERE x.grantee <> o.owner
            UNION ALL
            SELECT c.relname::text || '(' || string_agg(a.attname::text, ',' ORDER BY a.attname::text) || ')', x.grantee, x.privilege_type
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace,
                 aclexplode(a.attacl) x
            WHERE n.nspname = 'siwa' AND a.attacl IS NOT NULL
            GROUP BY c.relname, x.grantee, x.privilege_type
        )
        SELECT CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE r.rolname::text END || ' ' || g.privilege_type || ' ' || g.name
        FROM granted g LEFT JOIN pg_roles r ON r.oid = g.grantee
        WHERE g.grantee = 0 OR r.rolname LIKE 'siwa\\_%'
        UNION ALL
        SELECT m.rolname || ' MEMBER ' || r.rolname
        FROM pg_auth_members am JOIN pg_roles r ON r.oid = am.roleid JOIN pg_roles m ON m.oid = am.member
        WHERE r.rolname LIKE 'siwa\\_%' AND m.rolname LIKE 'siwa\\_%'
        UNION ALL
        SELECT rolname || ' ATTRIBUTE ' || concat_ws(',', CASE WHEN rolsuper THEN 'SUPERUSER' END,
            CASE WHEN rolcanlogin THEN 'LOGIN' END, CASE WHEN rolbypassrls THEN 'BYPASSRLS' END,
            CASE WHEN rolcreaterole THEN 'CREATEROLE' END, CASE WHEN rolcreatedb THEN 'CREATEDB' END)
        FROM pg_roles WHERE rolname IN ('siwa_receiver', 'siwa_worker', 'siwa_dashboard', 'siwa_api')
          AND (rolsuper OR rolcanlogin OR rolbypassrls OR rolcreaterole OR rolcreatedb)
        """

    @Test("each role's privileges, read from the catalogs, are exactly the allow-list and the README's table")
    func grantsMatchTheReadme() throws {
        let url = try TestDatabase.create()
        let rows = Set(try TestDatabase.query(url, Self.catalogMatrix).rows.compactMap { $0.first ?? nil })
        let extra = rows.subtracting(Self.expectedGrants), missing = Self.expectedGrants.subtracting(rows)
        #expect(extra.isEmpty && missing.isEmpty, "extra: \(extra.sorted()), missing: \(missing.sorted())")
        // The README's table lists the same, no more, no less.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let section = readme.components(separatedBy: "### Grants").dropFirst().first ?? ""
        let listed = Set(
            section.split(separator: "\n").prefix { !$0.hasPrefix("#") }.compactMap { line -> String? in
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 3, cells[0].hasPrefix("`siwa_") || cells[0] == "PUBLIC" else { return nil }
                let unquote = { (s: String) in s.replacingOccurrences(of: "`", with: "") }
                return "\(unquote(cells[0])) \(cells[1]) \(unquote(cells[2]))"
            })
        #expect(
            listed == Self.expectedGrants,
            "README extra: \(listed.subtracting(Self.expectedGrants).sorted()), lacks: \(Self.expectedGrants.subtracting(listed).sorted())")
    }
}
