import Foundation
import SiwaPostgres
import Testing

@testable import SiwaApp

/// `revoke_sessions` on its own, against a real database: each bound (the user, the creation
/// time, the app) decides alone which sessions go. (The worker's tests reach it through events;
/// this holds the same bounds one level down.)
@Suite("revoke_sessions statement", .needsDatabase)
struct RevokeSessionsStatementTests {
    @Test("a user's sessions of that app (or of none) created at or before the time go; later, other apps', other users' stay")
    func bounds() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        // name, sub, created (s since the epoch), aud
        let sessions: [(String, String, Int, String?)] = [
            ("before", "u.a", 1000, "app1"), ("at", "u.a", 2000, "app1"), ("after", "u.a", 3000, "app1"),
            ("no-app", "u.a", 1000, nil), ("other-app", "u.a", 1000, "app2"), ("other-user", "u.b", 1000, "app1"),
            ("other-user-late", "u.b", 3000, nil), ("already", "u.a", 1000, "app1"),
        ]
        var ids: [String: String] = [:]
        for (name, sub, created, aud) in sessions {
            ids[name] = try c.execute(
                "INSERT INTO siwa.sessions (apple_sub, created_at, aud) VALUES ($1, to_timestamp($2::bigint), $3) RETURNING id",
                [sub, String(created), aud]
            ).scalar
        }
        _ = try c.execute(
            "UPDATE siwa.sessions SET revoked_at = to_timestamp(5), revoked_reason = 'app' WHERE id = $1", [ids["already"]!])
        func revoked() throws -> [String: String] {
            var out: [String: String] = [:]
            for (name, id) in ids {
                if let reason = try c.execute("SELECT revoked_reason FROM siwa.sessions WHERE id = $1 AND revoked_at IS NOT NULL", [id]).scalar {
                    out[name] = reason
                }
            }
            return out
        }

        _ = try c.rows(WorkerStatements.revokeSessions, [.init(sub: "u.a", createdAtOrBefore: 2_000_000, reason: "consent-revoked", aud: "app1")])
        #expect(try revoked() == ["before": "consent-revoked", "at": "consent-revoked", "no-app": "consent-revoked", "already": "app"])

        // No time bound, no app: every live session of that user, and only of that user.
        _ = try c.rows(WorkerStatements.revokeSessions, [.init(sub: "u.b", createdAtOrBefore: nil, reason: "account-delete", aud: nil)])
        let after = try revoked()
        #expect(after["other-user"] == "account-delete" && after["other-user-late"] == "account-delete")
        #expect(after["after"] == nil && after["other-app"] == nil)
        #expect(try c.execute("SELECT extract(epoch FROM revoked_at)::int FROM siwa.sessions WHERE id = $1", [ids["already"]!]).scalar == "5")
    }
}
