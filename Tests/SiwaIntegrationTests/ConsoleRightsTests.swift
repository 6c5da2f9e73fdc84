import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// What a login of `siwa_console` alone can do in the database, on a real PostgreSQL: nothing but
/// what the console does, through the owner's `console_*` functions (docs/security.md "Roles").
@Suite("Console rights", .serialized, .needsDatabase)
struct ConsoleRightsTests {
    /// A cookie as the console makes one: 64 lowercase hex digits.
    static func cookie() -> String { (0..<4).map { _ in String(format: "%016llx", UInt64.random(in: 0...UInt64.max)) }.joined() }

    static func expectRefused(_ c: PostgresConnection, _ sql: String, _ parameters: [String?] = [], state: String = "42501") {
        do {
            _ = try c.execute(sql, parameters)
            Issue.record("the console's role ran: \(sql)")
        } catch {
            #expect(error.sqlState == state, "\(sql): \(error)")
        }
    }

    /// One event, forward, revocation and provider call in each status the console may meet.
    static func seed(_ url: String) throws -> (deadEvent: String, pendingEvent: String, revocation: String, forward: String, call: String) {
        let deadEvent = try #require(
            try TestDatabase.query(
                url,
                """
                INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
                VALUES ('rights-dead', 'app', 'sub.dead', 'account-delete', now() - interval '1 minute', 'dead', '{}') RETURNING id
                """
            ).scalar)
        let pendingEvent = try #require(
            try TestDatabase.query(
                url,
                """
                INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
                VALUES ('rights-pending', 'app', 'sub.pending', 'account-delete', now() - interval '1 minute', '{}') RETURNING id
                """
            ).scalar)
        let revocation = try #require(
            try TestDatabase.query(
                url,
                """
                INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason, status)
                VALUES ('sub.pending', 'app', 'k', '\\x0102', 'in-app-deletion', 'pending') RETURNING id
                """
            ).scalar)
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source, status)
            VALUES ('msg_rights', 'sub.pending', 'app', 'account-delete', now(), 'apple', 'pending')
            """)
        let call = try #require(
            try TestDatabase.query(
                url,
                """
                INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time)
                VALUES ('auth0', 'sub.pending', 'end_sessions', $1, 'account-delete', now()) RETURNING id
                """, [pendingEvent]
            ).scalar)
        return (deadEvent, pendingEvent, revocation, "msg_rights", call)
    }

    @Test(
        "siwa_console alone: no event, forward, revocation or provider call changed but dead → pending; no ciphertext read; no session or audit row without an operator's token"
    )
    func consoleLoginAlone() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let rows = try Self.seed(url)
        let operatorToken = try ConsoleOperators.add(name: "alice", conninfo: url)
        let console = try PostgresConnection(conninfo: login["siwa_console"]!)

        // Its pages' reads still work (the tokens set aside included); the token column of a
        // revocation is not its to read.
        #expect(try console.execute("SELECT apple_sub, client_id, key_id, quarantined_at FROM siwa.apple_tokens").rows.isEmpty)
        #expect(try console.execute("SELECT id, status, created_at FROM siwa.revocations").rows.count == 1)
        for sql in [
            "SELECT ciphertext FROM siwa.revocations",
            "SELECT * FROM siwa.revocations",
            "SELECT ciphertext FROM siwa.apple_tokens",
            "SELECT token_hash FROM siwa.console_sessions",
            "SELECT token_hash FROM siwa.console_operators",
            // Every change of the queues but dead → pending, and any change of a row's identity.
            "UPDATE siwa.events SET status = 'done' WHERE id = \(rows.pendingEvent)",
            "UPDATE siwa.events SET status = 'pending' WHERE id = \(rows.deadEvent)",
            "UPDATE siwa.revocations SET status = 'done' WHERE id = \(rows.revocation)",
            "UPDATE siwa.revocations SET created_at = now() - interval '1 year'",
            "UPDATE siwa.forwards SET status = 'delivered'",
            "UPDATE siwa.provider_calls SET state = 'done'",
            // Sessions, operators and the audit trail: the functions' only.
            "INSERT INTO siwa.console_sessions (token_hash, token_fingerprint, operator_id, operator) SELECT 'h', 'f', 1, 'alice'",
            "UPDATE siwa.console_sessions SET last_seen_at = now()",
            "DELETE FROM siwa.console_sessions",
            "UPDATE siwa.console_operators SET last_sign_in_at = now()",
            "INSERT INTO siwa.operator_actions (operator, action) VALUES ('alice', 'replay')",
            "SELECT siwa.request_deletion('sub.pending', NULL)",
        ] {
            Self.expectRefused(console, sql)
        }

        // Without a live session, no function acts nor writes an audit row.
        let stranger = Self.cookie()
        for (sql, parameters) in [
            ("SELECT siwa.console_replay($1, 'x', 'events', NULL, NULL)", [stranger]),
            ("SELECT siwa.console_request_deletion($1, 'x', 'sub.pending', NULL)", [stranger]),
            ("SELECT siwa.console_revealed_email($1, 'x', 'sub.pending')", [stranger]),
        ] {
            Self.expectRefused(console, sql, parameters)
        }
        #expect(try console.execute("SELECT * FROM siwa.console_session($1, true)", [stranger]).rows.isEmpty)
        #expect(try console.execute("SELECT siwa.console_sign_out($1, 'x')", [stranger]).scalar == "f")

        // A sign-in with a wrong token, an API-like token or another operator's name: no session,
        // one refusal naming nobody.
        let session = Self.cookie()
        for (name, token) in [("alice", "siwa_console_" + String(repeating: "0", count: 64)), ("alice", ""), ("bob", operatorToken)] {
            #expect(try console.execute("SELECT * FROM siwa.console_sign_in($1, $2, $3, 'x')", [name, token, session]).rows.isEmpty)
        }
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.console_sessions").scalar == "0")
        #expect(
            try TestDatabase.query(url, "SELECT string_agg(action || ':' || coalesce(operator, '-'), ',' ORDER BY id) FROM siwa.operator_actions")
                .scalar == "sign-in-refused:-,sign-in-refused:-,sign-in-refused:-")
        // The stored hash of a session is not its cookie.
        let signedIn = try console.execute("SELECT * FROM siwa.console_sign_in('alice', $1, $2, 'x')", [operatorToken, session]).rows
        #expect(signedIn.count == 1 && signedIn.first?.first == "alice")
        let storedHash = try #require(try TestDatabase.query(url, "SELECT token_hash FROM siwa.console_sessions").scalar)
        #expect(try console.execute("SELECT * FROM siwa.console_session($1, true)", [storedHash]).rows.isEmpty)
        #expect(try console.execute("SELECT * FROM siwa.console_session($1, true)", [session]).rows.first?.first == "alice")

        // With the live session: only the dead rows move, only to pending; the audit row names the session's operator.
        _ = try TestDatabase.query(url, "UPDATE siwa.revocations SET status = 'dead', created_at = now() - interval '9 days'")
        _ = try TestDatabase.query(url, "UPDATE siwa.forwards SET status = 'dead'")
        for (kind, ids, expected) in [
            ("events", "{\(rows.deadEvent),\(rows.pendingEvent)}", "1"), ("revocations", nil, "1"), ("forwards", nil, "1"),
            ("provider-calls", nil, "0"),
        ] {
            let moved = try console.execute("SELECT siwa.console_replay($1, 'x', $2, $3::text[], NULL)", [session, kind, ids]).scalar
            #expect(moved == expected, "\(kind)")
        }
        #expect(
            try TestDatabase.query(url, "SELECT string_agg(status, ',' ORDER BY id) FROM siwa.events").scalar == "pending,pending",
            "the dead event is pending again, the pending one untouched")
        #expect(
            try TestDatabase.query(url, "SELECT status || ' ' || (created_at > now() - interval '1 minute') FROM siwa.revocations").scalar
                == "pending true")
        #expect(try TestDatabase.query(url, "SELECT state FROM siwa.provider_calls").scalar == "pending")
        Self.expectRefused(console, "SELECT siwa.console_replay($1, 'x', 'accounts', NULL, NULL)", [session], state: "22023")
        #expect(
            try TestDatabase.query(
                url, "SELECT string_agg(operator || ' ' || target, ',' ORDER BY id) FROM siwa.operator_actions WHERE action = 'replay'"
            ).scalar
                == "alice events:ids=\(rows.deadEvent),\(rows.pendingEvent) (1),alice revocations:all (1),alice forwards:all (1),alice provider-calls:all (0)"
        )
    }

    @Test("a console session ends 12 h after its sign-in however active it stays")
    func absoluteLifetime() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        var client = ConsoleTests.client(harness)
        _ = try client.signIn("alice", try ConsoleTests.add(harness))
        _ = try harness.query("UPDATE siwa.console_sessions SET created_at = now() - interval '11 hours 59 minutes'")
        #expect(try client.get("/console").status == 200, "within its lifetime")
        _ = try harness.query("UPDATE siwa.console_sessions SET created_at = now() - interval '12 hours 1 minute'")
        #expect(try client.get("/console").status == 303, "past its lifetime, though seen a moment ago")
        #expect(try harness.scalar("SELECT ended_at IS NOT NULL FROM siwa.console_sessions") == "t")
    }
}
