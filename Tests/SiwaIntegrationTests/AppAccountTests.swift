import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// One endpoint serves every app of a team: consent and the relay address per app
/// (`siwa.app_accounts`), `siwa.accounts` as before for one-app teams, and the upgrade of a
/// database made by the previous release.
@Suite("Several apps", .serialized, .needsDatabase)
struct AppAccountTests {
    static let a = TestHarness.audience, b = TestHarness.otherAudience

    @Test("two apps: consent-revoked for one revokes only its sessions; each app keeps its relay address")
    func twoApps() throws {
        let h = try TestHarness(retryBaseDelay: 0.2)
        defer { h.stop() }
        let sub = "000739.apps.0001"
        let sessions = try TestDatabase.query(
            h.conninfo,
            """
            INSERT INTO siwa.sessions (apple_sub, aud, created_at) VALUES
              ($1, $2, now() - interval '1 hour'), ($1, $3, now() - interval '1 hour'), ($1, NULL, now() - interval '1 hour')
            RETURNING id, aud
            """, [sub, Self.a, Self.b])
        #expect(sessions.rows.count == 3)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        for (aud, email, type, t) in [
            (Self.a, "a@privaterelay.appleid.com", "email-disabled", now - 3000), (Self.b, "b@privaterelay.appleid.com", "email-enabled", now - 2000),
        ] {
            #expect(
                try h.post(token: try h.token(type: type, sub: sub, eventTimeMillis: t, email: email, isPrivateEmail: true, audience: aud)).code
                    == "accepted")
        }
        #expect(try h.post(token: try h.token(type: "consent-revoked", sub: sub, eventTimeMillis: now - 1000, audience: Self.a)).code == "accepted")
        #expect(
            eventually {
                (try? TestDatabase.query(h.conninfo, "SELECT count(*) FROM siwa.events WHERE status = 'done'").scalar) == "3"
            })
        let apps = try TestDatabase.query(
            h.conninfo, "SELECT aud, status, email, email_forwarding FROM siwa.app_accounts WHERE apple_sub = $1 ORDER BY aud", [sub])
        #expect(apps.rows.count == 2)
        #expect(apps.value(0, "aud") == Self.a && apps.value(0, "status") == "consent_revoked")
        #expect(apps.value(0, "email") == "a@privaterelay.appleid.com" && apps.value(0, "email_forwarding") == "f")
        #expect(apps.value(1, "aud") == Self.b && apps.value(1, "status") == "active")
        #expect(apps.value(1, "email") == "b@privaterelay.appleid.com" && apps.value(1, "email_forwarding") == "t")
        // The user: active while app B has consent; the newest email event's address.
        let user = try TestDatabase.query(h.conninfo, "SELECT status, email FROM siwa.accounts WHERE apple_sub = $1", [sub])
        #expect(user.value(0, "status") == "active" && user.value(0, "email") == "b@privaterelay.appleid.com")
        // App A's session and the one without an app are revoked; app B's lives.
        let live = try TestDatabase.query(
            h.conninfo, "SELECT coalesce(aud, '-') FROM siwa.sessions WHERE apple_sub = $1 AND revoked_at IS NULL", [sub])
        #expect(live.rows.compactMap { $0.first ?? nil } == [Self.b])
        // App B revokes too: now the user is consent_revoked (as a one-app team always saw it).
        #expect(try h.post(token: try h.token(type: "consent-revoked", sub: sub, eventTimeMillis: now - 500, audience: Self.b)).code == "accepted")
        #expect(
            eventually {
                (try? TestDatabase.query(h.conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar) == "consent_revoked"
            })
        let summary = try TestDatabase.query(
            h.conninfo, "SELECT aud, status, accounts FROM siwa.app_account_status_summary WHERE status = 'consent_revoked' ORDER BY aud")
        #expect(summary.rows.count == 2)
        let report = try OutboxAdmin.status(conninfo: h.conninfo)
        #expect(report.apps?.filter { $0.status == "consent_revoked" && $0.accounts == 1 }.map(\.aud) == [Self.a, Self.b])
        #expect(OutboxAdmin.render(report).contains(Self.b))
        // An account-delete of the user deletes every app account.
        #expect(try h.post(token: try h.token(type: "account-delete", sub: sub, eventTimeMillis: now, audience: Self.a)).code == "accepted")
        #expect(
            eventually {
                (try? TestDatabase.query(
                    h.conninfo, "SELECT string_agg(status || ':' || coalesce(email, '-'), ',') FROM siwa.app_accounts WHERE apple_sub = $1",
                    [sub]
                ).scalar) == "deleted:-,deleted:-"
            })
    }

    @Test("a database made by the previous release: accounts move to the app of their events; siwa.accounts unchanged")
    func upgradeFromThePreviousRelease() throws {
        let url = try TestDatabase.createEmpty()
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/schema-previous-release.sql")
        let connection = try PostgresConnection(conninfo: url)
        try connection.execute(try String(contentsOf: fixture, encoding: .utf8))
        _ = try connection.execute(
            """
            INSERT INTO siwa.accounts (apple_sub, email, is_private_email, email_forwarding, status, status_event_time)
            VALUES ('old.1', 'o@privaterelay.appleid.com', true, false, 'consent_revoked', '2025-07-01'),
                   ('old.2', NULL, NULL, NULL, 'active', NULL), ('old.3', NULL, NULL, NULL, 'deleted', '2025-06-01');
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims, status)
            VALUES ('j1', 'com.example.app', 'old.1', 'consent-revoked', '2025-07-01', '{}', 'done'),
                   ('j2', 'com.example.app', 'old.3', 'account-delete', '2025-06-01', '{}', 'done');
            INSERT INTO siwa.sessions (apple_sub) VALUES ('old.1');
            """)
        let before = try connection.execute("SELECT apple_sub, status, email, email_forwarding FROM siwa.accounts ORDER BY 1").rows
        try Migrator.migrate(conninfo: url)
        #expect(try connection.execute("SELECT apple_sub, status, email, email_forwarding FROM siwa.accounts ORDER BY 1").rows == before)
        let apps = try connection.execute("SELECT apple_sub, aud, status, email FROM siwa.app_accounts ORDER BY 1")
        #expect(apps.rows.count == 2, "one per account and app of its events; old.2 has none")
        #expect(apps.value(0, "apple_sub") == "old.1" && apps.value(0, "aud") == "com.example.app")
        #expect(apps.value(0, "status") == "consent_revoked" && apps.value(0, "email") == "o@privaterelay.appleid.com")
        #expect(apps.value(1, "status") == "deleted")
        #expect(try connection.execute("SELECT count(*) FROM siwa.sessions WHERE aud IS NULL").scalar == "1")
        // Migrating again (a later deploy) changes nothing.
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try connection.execute("SELECT count(*) FROM siwa.app_accounts").scalar == "2")
    }
}
