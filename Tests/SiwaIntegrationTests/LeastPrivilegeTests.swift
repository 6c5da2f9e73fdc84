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
}
