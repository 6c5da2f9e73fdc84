import Foundation
import SiwaApp
import Testing

@Suite("Least privilege", .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
struct LeastPrivilegeTests {
    @Test("receive runs as a member of siwa_receiver and work as a member of siwa_worker")
    func splitRoles() throws {
        let url = try TestDatabase.create()
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(
            url,
            """
            CREATE ROLE recv_\(suffix) LOGIN IN ROLE siwa_receiver;
            CREATE ROLE work_\(suffix) LOGIN IN ROLE siwa_worker;
            """)
        let receiver = try TestHarness(conninfo: url + " user=recv_\(suffix)", roles: .receive)
        defer { receiver.stop() }
        let worker = try TestHarness(conninfo: url + " user=work_\(suffix)", roles: .work)
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

    /// Each role's grants, as the README's "Grants" table lists them.
    static let expectedGrants: Set<String> = [
        "siwa_api EXECUTE store_apple_token", "siwa_api INSERT revocations", "siwa_api SELECT backlog",
        "siwa_dashboard EXECUTE subject_hash", "siwa_dashboard SELECT account_status_summary", "siwa_dashboard SELECT backlog",
        "siwa_dashboard SELECT dead_letters", "siwa_dashboard SELECT events_per_day",
        "siwa_receiver INSERT events", "siwa_receiver INSERT key_sets", "siwa_receiver SELECT backlog",
        "siwa_receiver SELECT key_sets", "siwa_receiver UPDATE key_sets",
        "siwa_worker DELETE apple_tokens", "siwa_worker DELETE events", "siwa_worker EXECUTE on_event",
        "siwa_worker EXECUTE request_deletion", "siwa_worker EXECUTE subject_hash", "siwa_worker INSERT accounts",
        "siwa_worker INSERT apple_tokens", "siwa_worker INSERT revocations", "siwa_worker SELECT accounts",
        "siwa_worker SELECT apple_tokens", "siwa_worker SELECT backlog", "siwa_worker SELECT events",
        "siwa_worker SELECT revocations", "siwa_worker SELECT sessions", "siwa_worker UPDATE accounts",
        "siwa_worker UPDATE apple_tokens", "siwa_worker UPDATE events", "siwa_worker UPDATE revocations",
        "siwa_worker UPDATE sessions", "siwa_worker SELECT forwards", "siwa_worker INSERT forwards",
        "siwa_worker UPDATE forwards", "siwa_worker DELETE forwards", "siwa_worker SELECT forward_backlog",
        "siwa_worker SELECT dead_forwards", "siwa_dashboard SELECT forward_backlog", "siwa_dashboard SELECT dead_forwards",
        "siwa_worker SELECT app_accounts", "siwa_worker INSERT app_accounts", "siwa_worker UPDATE app_accounts",
        "siwa_dashboard SELECT app_account_status_summary", "siwa_api EXECUTE map_transfer", "siwa_worker INSERT events",
        "siwa_worker SELECT reconcile_pace", "siwa_worker UPDATE reconcile_pace",
        "siwa_worker SELECT event_queue", "siwa_worker UPDATE event_queue", "siwa_worker DELETE event_queue",
    ]

    @Test("each role's grants are exactly the README's; PUBLIC executes nothing of siwa's; the receiver only inserts events")
    func grantsMatchTheReadme() throws {
        let url = try TestDatabase.create()
        let rows = try TestDatabase.query(
            url,
            """
            SELECT grantee || ' ' || privilege_type || ' ' || table_name FROM information_schema.role_table_grants
            WHERE table_schema = 'siwa' AND grantee LIKE 'siwa\\_%'
            UNION
            SELECT grantee || ' EXECUTE ' || routine_name FROM information_schema.role_routine_grants
            WHERE routine_schema = 'siwa' AND grantee LIKE 'siwa\\_%'
            """
        ).rows.compactMap { $0.first ?? nil }
        let extra = Set(rows).subtracting(Self.expectedGrants), missing = Self.expectedGrants.subtracting(rows)
        #expect(extra.isEmpty && missing.isEmpty, "extra: \(extra), missing: \(missing)")
        let publicExecute = try TestDatabase.query(
            url,
            """
            SELECT string_agg(p.proname, ',' ORDER BY p.proname) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'siwa' AND p.proname IN ('on_event', 'store_apple_token', 'request_deletion')
              AND has_function_privilege('public', p.oid, 'EXECUTE')
            """
        ).scalar
        #expect(publicExecute == nil, "PUBLIC may execute \(publicExecute ?? "")")
        // The README lists the same grants.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        for grant in Self.expectedGrants {
            let parts = grant.split(separator: " ")
            #expect(readme.contains("| `\(parts[0])` | \(parts[1]) | `\(parts[2])` |"), "README lacks the grant \(grant)")
        }
    }
}
