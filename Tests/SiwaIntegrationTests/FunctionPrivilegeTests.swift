import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// Every function of schema `siwa` against PUBLIC and every role, with an explicit allow-list: a
/// function added later is checked without a new test (and fails here until it is listed).
@Suite("Function privileges", .needsDatabase)
struct FunctionPrivilegeTests {
    /// Who may execute what, besides the owner: "grantee function(argument types)". PUBLIC may
    /// execute nothing.
    static let allowed: Set<String> = [
        "siwa_dashboard siwa.subject_hash(text)",
        "siwa_dashboard siwa.user_report(text)",
        "siwa_api siwa.user_report(text)",
        "siwa_worker siwa.subject_hash(text)",
        "siwa_worker siwa.on_event(siwa.events,siwa.accounts)",
        "siwa_worker siwa.request_deletion(text,text)",
        "siwa_console siwa.subject_hash(text)",
        "siwa_console siwa.user_report(text)",
        "siwa_console siwa.console_sign_in(text,text,text,text)",
        "siwa_console siwa.console_session(text,boolean)",
        "siwa_console siwa.console_sign_out(text,text)",
        "siwa_console siwa.console_revealed_email(text,text,text)",
        "siwa_console siwa.console_request_deletion(text,text,text,text)",
        "siwa_console siwa.console_replay(text,text,text,text[],text)",
        "siwa_operator siwa.operator_add(text,text)",
        "siwa_operator siwa.operator_list()",
        "siwa_operator siwa.operator_remove(text,double precision)",
        "siwa_worker siwa.record_token_keys(text[])",
        "siwa_api siwa.map_transfer(text,text,text,text,boolean)",
        "siwa_api siwa.store_apple_token(text,text,text,bytea,text,boolean,timestamp with time zone)",
        "siwa_api siwa.queue_revocation(text,text,text,bytea)",
        "siwa_worker siwa.move_tokens_to_revocation(text[],bigint[],text[])",
        "siwa_receiver siwa.insert_events(text[],text[],text[],text[],bigint[],text[],boolean[],text[],text[])",
    ]
    static let roles = ["siwa_receiver", "siwa_worker", "siwa_dashboard", "siwa_api", "siwa_console"]

    static func strings(_ url: String, _ sql: String) throws -> [String] {
        try TestDatabase.query(url, sql).rows.compactMap { $0.first ?? nil }
    }

    @Test("the EXECUTE grants of every siwa function (PUBLIC and any role, owner aside) are exactly the allow-list")
    func grantsAreTheAllowList() throws {
        let url = try TestDatabase.create()
        let granted = try Self.strings(
            url,
            """
            SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END || ' ' || p.oid::regprocedure::text
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
            WHERE n.nspname = 'siwa' AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'
            """)
        let extra = Set(granted).subtracting(Self.allowed), missing = Self.allowed.subtracting(granted)
        #expect(extra.isEmpty, "granted but not allowed: \(extra.sorted())")
        #expect(missing.isEmpty, "allowed but not granted (update the list): \(missing.sorted())")
        #expect(granted.count == Set(granted).count)
    }

    @Test("each siwa role and PUBLIC may execute exactly what the allow-list gives it (memberships included)")
    func effectivePrivileges() throws {
        let url = try TestDatabase.create()
        let functions = try Self.strings(
            url,
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'siwa'")
        #expect(functions.count >= 10)
        for grantee in ["PUBLIC"] + Self.roles {
            let may = try Self.strings(
                url,
                """
                SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'siwa' AND has_function_privilege('\(grantee == "PUBLIC" ? "public" : grantee)', p.oid, 'EXECUTE')
                """)
            let expected = Set(
                functions.filter { Self.allowed.contains("\(grantee) \($0)") || Self.allowed.contains("PUBLIC \($0)") })
            #expect(Set(may) == expected, "\(grantee): may \(Set(may).subtracting(expected).sorted()), may not \(expected.subtracting(may).sorted())")
        }
    }

    @Test("every SECURITY DEFINER function pins its search_path")
    func definersPinSearchPath() throws {
        let url = try TestDatabase.create()
        let loose = try Self.strings(
            url,
            """
            SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'siwa' AND p.prosecdef
              AND NOT EXISTS (SELECT FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c LIKE 'search\\_path=%')
            """)
        #expect(loose.isEmpty, "definer functions without a pinned search_path: \(loose)")
    }

    @Test("a login in a siwa role calling a definer function not granted to it: permission denied (42501)")
    func callRefused() throws {
        let url = try TestDatabase.create()
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        for role in Self.roles {
            let login = "fn_\(role.dropFirst(5))_\(suffix)"
            _ = try TestDatabase.query(url, "CREATE ROLE \(login) LOGIN IN ROLE \(role)")
            defer { _ = try? TestDatabase.query(url, "DROP ROLE \(login)") }
            // Definer functions callable directly (trigger functions are not), with NULL arguments.
            let calls = try TestDatabase.query(
                url,
                """
                SELECT p.oid::regprocedure::text, 'SELECT ' || p.oid::regproc::text || '(' ||
                  coalesce((SELECT string_agg('NULL::' || format_type(t, NULL), ', ') FROM unnest(p.proargtypes::oid[]) t), '') || ')'
                FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'siwa' AND p.prosecdef AND p.prorettype <> 'trigger'::regtype
                """
            ).rows
            #expect(calls.count >= 3)
            for call in calls {
                guard let function = call[0], let sql = call[1], !Self.allowed.contains("\(role) \(function)") else { continue }
                do {
                    _ = try TestDatabase.query(url + " user=\(login)", sql)
                    Issue.record("\(role) executed \(function)")
                } catch let error as PostgresError {
                    #expect(error.sqlState == "42501", "\(role) \(function): \(error)")
                }
            }
        }
    }
}
