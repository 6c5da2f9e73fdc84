import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import Testing

/// The operator console over real HTTP (README "Console"): a named operator's sign-in, the
/// cookie, sessions in PostgreSQL, CSRF and same-origin refusals, the rate limits, every page
/// with data, and the audit trail of each action naming its operator.
@Suite(
    "Operator console", .serialized,
    .needsDatabase)
struct ConsoleTests {
    /// A browser-like client: raw requests (no redirects followed), the session cookie kept.
    struct Client {
        let port: UInt16
        var cookie: String?
        var host: String { "127.0.0.1:\(port)" }
        var origin: String { "http://" + host }

        struct Reply {
            var status: Int
            var headers: [(String, String)]
            var body: String
            func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
            /// The CSRF token of the page's forms.
            var csrf: String? {
                guard let r = body.range(of: "name=\"csrf\" value=\"") else { return nil }
                return String(body[r.upperBound...].prefix { $0 != "\"" })
            }
        }

        func request(_ method: String, _ path: String, body: String = "", headers: [String] = []) throws -> Reply {
            var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n"
            if let cookie { head += "Cookie: siwa_console=\(cookie)\r\n" }
            for h in headers { head += h + "\r\n" }
            if method == "POST" { head += "Content-Length: \(body.utf8.count)\r\n" }
            let raw = try RawHTTP(port: port).exchange(head + "\r\n", body: Array(body.utf8))
            guard let split = raw.range(of: "\r\n\r\n") else { throw RawHTTP.Failure(description: "no answer: \(raw)") }
            let lines = raw[..<split.lowerBound].components(separatedBy: "\r\n")
            let headers = lines.dropFirst().compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            return Reply(status: RawHTTP.status(raw) ?? 0, headers: headers, body: String(raw[split.upperBound...]))
        }

        func get(_ path: String) throws -> Reply { try request("GET", path) }

        /// A same-origin form post (the browser's `Origin`), unless told otherwise.
        func post(_ path: String, _ fields: [(String, String)], origin: String?? = .none, extra: [String] = []) throws -> Reply {
            var headers = ["Content-Type: application/x-www-form-urlencoded"] + extra
            switch origin {
            case .none: headers.append("Origin: " + self.origin)
            case .some(.some(let o)): headers.append("Origin: " + o)
            case .some(.none): break
            }
            return try request("POST", path, body: FormURLEncoding.encode(fields), headers: headers)
        }

        /// Signs in as `name` with `token`; keeps the cookie.
        mutating func signIn(_ name: String, _ token: String, extra: [String] = []) throws -> Reply {
            let reply = try post("/console/sign-in", [("operator", name), ("token", token)], extra: extra)
            if let set = reply.header("Set-Cookie"), let value = set.split(separator: ";").first?.split(separator: "=", maxSplits: 1).last {
                cookie = String(value)
            }
            return reply
        }

        /// The CSRF token of a signed-in page.
        func csrf() throws -> String { try get("/console/audit").csrf ?? "" }
    }

    static func client(_ harness: DeletionHarness) -> Client { Client(port: harness.app.adminPort ?? 0) }

    /// A new operator of the harness's database: their token.
    static func add(_ harness: DeletionHarness, _ name: String = "alice") throws -> String {
        try ConsoleOperators.add(name: name, conninfo: harness.conninfo)
    }

    /// A client signed in as a new operator `name`.
    static func signedIn(_ harness: DeletionHarness, _ name: String = "alice") throws -> Client {
        var client = client(harness)
        let reply = try client.signIn(name, try add(harness, name))
        #expect(reply.status == 303 && client.cookie != nil, "signed in as \(name)")
        return client
    }

    @Test("off without the API: every console path answers 404")
    func offWithoutAPI() throws {
        let harness = try TestHarness()
        defer { harness.stop() }
        let client = Client(port: harness.app.adminPort ?? 0)
        #expect(try client.get("/console").status == 404)
        #expect(try client.get("/console/sign-in").status == 404)
        #expect(try client.post("/console/sign-in", [("token", "x")]).status == 404)
        #expect(try client.get("/console/assets/console.css").status == 404)
    }

    @Test(
        "sign-in: an API token or a wrong one gets one generic refusal; the operator's token a session cookie (HttpOnly, SameSite=Strict, Path=/console), stored hashed, naming the operator"
    )
    func signIn() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let token = try Self.add(harness, "alice")
        var client = Self.client(harness)
        let first = try client.get("/console")
        #expect(first.status == 303 && first.header("Location") == "/console/sign-in")
        let form = try client.get("/console/sign-in")
        #expect(form.status == 200 && form.body.contains("name=\"operator\"") && form.body.contains("name=\"token\""))
        #expect(form.header("Content-Security-Policy") == "default-src 'self'; frame-ancestors 'none'")
        #expect(!form.body.contains("http://") && !form.body.contains("https://"), "no asset from another origin")

        // The API's bearer token opens the API, not the console, whatever name comes with it.
        let api = try client.signIn("alice", harness.apiToken)
        #expect(api.status == 401 && api.body.contains("Sign-in refused.") && api.header("Set-Cookie") == nil)
        let wrong = try client.signIn("alice", String(token.dropLast()) + (token.hasSuffix("0") ? "1" : "0"))
        #expect(wrong.status == 401 && wrong.body.contains("Sign-in refused.") && wrong.header("Set-Cookie") == nil)
        let otherName = try client.signIn("bob", token)
        #expect(otherName.status == 401 && otherName.header("Set-Cookie") == nil, "a token opens its own operator only")
        let noName = try client.post("/console/sign-in", [("token", token)])
        #expect(noName.status == 401 && noName.header("Set-Cookie") == nil)
        #expect(client.cookie == nil)

        let right = try client.signIn("alice", token)
        #expect(right.status == 303 && right.header("Location") == "/console")
        let cookie = right.header("Set-Cookie") ?? ""
        #expect(cookie.contains("; Path=/console") && cookie.contains("; HttpOnly") && cookie.contains("; SameSite=Strict"))
        #expect(!cookie.contains("Secure"), "plain HTTP without SIWA_CONSOLE_SECURE_COOKIE")
        let session = try #require(client.cookie)
        #expect(session.count == 64)
        // Only hashes are stored; neither token appears anywhere.
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_sessions WHERE token_hash = $1", [session]) == "0")
        // The hash pinned, computed by the database: SHA-256 of the cookie under its purpose prefix.
        #expect(
            try harness.scalar(
                "SELECT count(*) FROM siwa.console_sessions WHERE token_hash = encode(sha256(convert_to('console-session:' || $1, 'UTF8')), 'hex')",
                [session]) == "1", "the session is not stored as the hash of its cookie")
        #expect(try harness.scalar("SELECT operator FROM siwa.console_sessions WHERE ended_at IS NULL") == "alice")
        #expect(
            try harness.scalar("SELECT count(*) FROM siwa.console_operators WHERE token_hash = $1 OR token_hash = $2", [token, harness.apiToken])
                == "0")
        let actions = try harness.query(
            "SELECT action, coalesce(operator, ''), coalesce(token_fingerprint, ''), client_address, coalesce(target, '') FROM siwa.operator_actions ORDER BY id"
        ).rows.map { $0.map { $0 ?? "" } }
        #expect(actions.map { $0[0] } == ["sign-in-refused", "sign-in-refused", "sign-in-refused", "sign-in-refused", "sign-in"])
        #expect(actions.prefix(4).allSatisfy { $0[1].isEmpty && $0[2].isEmpty }, "a refused sign-in proves no operator")
        #expect(actions.map { $0[4] }.prefix(4) == ["operator:alice", "operator:alice", "operator:bob", ""])
        #expect(actions[4][1] == "alice" && actions[4][2] == "sha256:" + SHA256.hexDigest(token).prefix(16) && !actions[4][2].contains(token))
        #expect(actions[4][3] == "127.0.0.1")
        let overview = try client.get("/console")
        #expect(overview.status == 200 && overview.body.contains("<span title=\"signed in as\">alice</span>"))
        #expect(try harness.scalar("SELECT last_sign_in_at IS NOT NULL FROM siwa.console_operators WHERE name = 'alice'") == "t")

        // Behind a TLS-terminating proxy the cookie is Secure.
        var proxied = Self.client(harness)
        let secure = try proxied.signIn("alice", token, extra: ["X-Forwarded-Proto: https"])
        #expect(secure.header("Set-Cookie")?.hasSuffix("; Secure") == true)
    }

    @Test(
        "without SIWA_TRUSTED_PROXIES sign-ins are limited per peer address, X-Forwarded-For ignored: the 11th within 5 minutes gets 429, even with the right token"
    )
    func rateLimitPerAddress() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let token = try Self.add(harness, "alice")
        var client = Self.client(harness)
        for i in 0..<10 {
            #expect(try client.signIn("name\(i)", "wrong-token-0123456789", extra: ["X-Forwarded-For: 198.51.100.\(i)"]).status == 401)
        }
        let limited = try client.signIn("alice", token, extra: ["X-Forwarded-For: 198.51.100.99"])
        #expect(limited.status == 429 && limited.header("Retry-After") != nil && limited.header("Set-Cookie") == nil)
        #expect(try harness.scalar("SELECT string_agg(DISTINCT client_address, ',') FROM siwa.operator_actions") == "127.0.0.1")
    }

    @Test(
        "behind a trusted proxy: limited per forwarded address, a name's failures slow it without refusing its right token; the audit trail records the forwarded address, every X-Forwarded-For line read"
    )
    func rateLimitBehindProxy() throws {
        let harness = try DeletionHarness(trustedProxies: try TrustedProxies.parse("127.0.0.1"))
        defer { harness.stop() }
        let alice = try Self.add(harness, "alice")
        let bob = try Self.add(harness, "bob")
        var client = Self.client(harness)
        // Ten wrong tokens for alice, each from another address (the client's own X-Forwarded-For
        // entries left of the proxy's are ignored).
        for i in 0..<10 {
            let reply = try client.signIn("alice", "wrong-token-0123456789", extra: ["X-Forwarded-For: 10.9.9.9, 198.51.100.\(i)"])
            #expect(reply.status == 401)
        }
        let slowed = Date()
        let aliceSlowed = try client.signIn("alice", alice, extra: ["X-Forwarded-For: 198.51.100.50"])
        #expect(aliceSlowed.status == 303 && aliceSlowed.header("Set-Cookie") != nil, "a name's failures never refuse its right token")
        #expect(Date().timeIntervalSince(slowed) >= 1, "but they slow it, across addresses")
        let fresh = Date()
        let bobOK = try client.signIn("bob", bob, extra: ["X-Forwarded-For: 198.51.100.50"])
        #expect(bobOK.status == 303, "another operator from a fresh address signs in")
        #expect(Date().timeIntervalSince(fresh) < 1, "a name without failures is not slowed")
        #expect(try harness.scalar("SELECT client_address FROM siwa.operator_actions WHERE action = 'sign-in'") == "198.51.100.50")
        #expect(try harness.scalar("SELECT client_address FROM siwa.console_sessions") == "198.51.100.50")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE client_address = '10.9.9.9'") == "0")
        // A proxy that appends its own line (HAProxy's `option forwardfor`): the client's own line, left
        // of it, is not believed; the right-most untrusted address of every line is.
        var proxied = Self.client(harness)
        #expect(try proxied.signIn("bob", bob, extra: ["X-Forwarded-For: 192.0.2.66", "X-Forwarded-For: 198.51.100.77"]).status == 303)
        #expect(
            try harness.scalar("SELECT client_address FROM siwa.operator_actions WHERE action = 'sign-in' ORDER BY id DESC LIMIT 1")
                == "198.51.100.77")

        // One address trying many names is limited by its address.
        var other = Self.client(harness)
        for i in 0..<10 {
            #expect(try other.signIn("nobody\(i)", "wrong-token-0123456789", extra: ["X-Forwarded-For: 203.0.113.7"]).status == 401)
        }
        let addressLimited = try other.signIn("bob", bob, extra: ["X-Forwarded-For: 203.0.113.7"])
        #expect(addressLimited.status == 429 && addressLimited.header("Retry-After") != nil)
        let elsewhere = try other.signIn("bob", bob, extra: ["X-Forwarded-For: 203.0.113.8"])
        #expect(elsewhere.status == 303)
    }

    @Test("every page answers 200 with data: overview numbers equal SQL, emails masked until revealed (audited)")
    func pages() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.console.\(UInt32.random(in: 0...UInt32.max))"
        let email = "jane.console@privaterelay.appleid.com"
        #expect(try harness.notify(type: "email-disabled", sub: sub, email: email).status == 200)
        #expect(try harness.notify(type: "consent-revoked", sub: "000739.console.other").status == 200)
        #expect(try harness.eventually { try harness.accountStatus(sub) != nil })
        #expect(try harness.eventually { try harness.scalar("SELECT count(*) FROM siwa.event_queue") == "0" })
        _ = try harness.query("UPDATE siwa.events SET status = 'dead', last_error = 'test <b>boom</b>' WHERE sub = '000739.console.other'")

        let client = try Self.signedIn(harness)
        let overview = try client.get("/console")
        #expect(overview.status == 200)
        let dead = try #require(try harness.scalar("SELECT dead FROM siwa.backlog"))
        #expect(dead == "1" && overview.body.contains("<div class=\"label\">Dead</div><div class=\"value\">\(dead)</div>"))
        #expect(overview.body.contains("<svg") && overview.body.contains("events/min") && overview.body.contains("events/h"))
        // The commit's durability as the database reports it (the test server has no standby).
        #expect(overview.body.contains("<div class=\"label\">Commit durability</div><div class=\"value\">this server</div>"))
        #expect(overview.body.contains("synchronous_commit=on, no standby streams"))

        let events = try client.get("/console/events")
        #expect(events.status == 200 && events.body.contains("email-disabled") && events.body.contains("consent-revoked"))
        let hash = SubjectHash.of(sub)
        let byHash = try client.get("/console/events?q=\(hash)")
        #expect(byHash.body.contains("<td>email-disabled</td>") && !byHash.body.contains("<td>consent-revoked</td>"))
        let id = try #require(try harness.scalar("SELECT id FROM siwa.events WHERE sub = $1", [sub]))
        let event = try client.get("/console/events/\(id)")
        #expect(event.status == 200 && event.body.contains("j•••@privaterelay.appleid.com") && !event.body.contains(email))

        let failures = try client.get("/console/failures")
        #expect(failures.status == 200 && failures.body.contains("test &lt;b&gt;boom&lt;/b&gt;") && !failures.body.contains("<b>boom"))

        let user = try client.get("/console/users?q=\(hash)")
        #expect(user.status == 200 && user.body.contains(sub) && user.body.contains("j•••@privaterelay.appleid.com") && !user.body.contains(email))
        // The reviewer's evidence, as `user-report` prints it: masked, escaped, no raw email.
        #expect(user.body.contains("Evidence for a reviewer") && user.body.contains("&quot;sub_hash&quot;: &quot;\(hash)&quot;"))
        #expect(try client.get("/console/users?q=0000000000000000").status == 404)
        let revealed = try client.post("/console/users/reveal", [("csrf", user.csrf ?? ""), ("sub", sub)])
        #expect(revealed.status == 200 && revealed.body.contains(email))
        #expect(
            try harness.scalar("SELECT operator || ' ' || target FROM siwa.operator_actions WHERE action = 'reveal-email'") == "alice user:" + hash)

        #expect(try client.get("/console/sync").status == 200)
        let audit = try client.get("/console/audit")
        #expect(audit.status == 200 && audit.body.contains("reveal-email") && audit.body.contains("user:" + hash))
        #expect(audit.body.contains("<td>alice</td>"), "the audit trail names the operator")
        #expect(try client.get("/console/nope").status == 404)
    }

    @Test(
        "as the console's role (`receive` with the API, its login IN ROLE siwa_receiver, siwa_api, siwa_console): sign-in, every page, reveal, replays, a deletion; what the role is not granted is refused"
    )
    func consoleRole() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let recv = "recv_console_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(url, "CREATE ROLE \(recv) LOGIN IN ROLE siwa_receiver, siwa_api, siwa_console")
        let harness = try DeletionHarness(roles: .receive, conninfo: url + " user=\(recv)")
        defer { harness.stop() }
        let sub = "000739.role.\(UInt32.random(in: 0...UInt32.max))", other = "000739.role.other"
        let email = "jane.role@privaterelay.appleid.com"
        #expect(try harness.notify(type: "email-disabled", sub: sub, email: email).status == 200)
        #expect(try harness.notify(type: "consent-revoked", sub: other).status == 200)
        // As a worker would have left them (none runs here): one applied, one dead.
        _ = try TestDatabase.query(url, "INSERT INTO siwa.accounts (apple_sub, email) VALUES ($1, $2)", [sub, email])
        _ = try TestDatabase.query(url, "UPDATE siwa.events SET status = 'done', processed_at = now() WHERE sub = $1", [sub])
        _ = try TestDatabase.query(url, "UPDATE siwa.events SET status = 'dead', last_error = 'boom' WHERE sub = $1", [other])
        let dead = try #require(try TestDatabase.query(url, "SELECT id FROM siwa.events WHERE sub = $1", [other]).scalar)
        // As the provider sender would have left them: a dead call to Clerk, a call to Auth0 waiting for two hours.
        let deadCall = try #require(
            try TestDatabase.query(
                url,
                """
                INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, state, attempts, last_status, last_reason)
                VALUES ('clerk', $1, 'end_sessions', $2, 'consent-revoked', now(), 'dead', 7, 503, 'service_unavailable') RETURNING id
                """, [other, dead]
            ).scalar)
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, attempts, created_at)
            VALUES ('auth0', $1, 'end_sessions', $2, 'consent-revoked', now(), 3, now() - interval '2 hours')
            """, [other, dead])
        // The hourly charts' rollup (every 5 s, in the background) has counted both.
        #expect(
            eventually(timeout: 15) { (try? TestDatabase.query(url, "SELECT last_id FROM siwa.console_rollup").scalar) == dead },
            "the console's rollup did not run as its role")

        var client = Self.client(harness)
        let signedIn = try client.signIn("alice", try ConsoleOperators.add(name: "alice", conninfo: url))
        #expect(signedIn.status == 303 && client.cookie != nil, "\(signedIn.status) \(signedIn.body)")
        let hash = SubjectHash.of(sub)
        for path in [
            "/console", "/console/events", "/console/events/\(dead)", "/console/failures", "/console/users?q=\(hash)", "/console/sync",
            "/console/audit",
        ] {
            let page = try client.get(path)
            #expect(page.status == 200, "\(path): \(page.status) \(page.body.prefix(300))")
        }
        // The overview's provider card: per provider with calls, waiting, in flight, dead, the oldest waiting one's age.
        let overview = try client.get("/console").body
        #expect(
            overview.contains(
                "<tr><td>auth0 <span class=\"muted\">(not configured)</span></td><td>1</td><td>0</td><td>0</td><td>2 h</td><td>0</td></tr>"),
            "\(overview)")
        #expect(
            overview.contains(
                "<tr><td>clerk <span class=\"muted\">(not configured)</span></td><td>0</td><td>0</td><td><span class=\"badge bad\">1</span></td><td>–</td><td>0</td></tr>"
            ))
        // The failures page lists the dead call with its replay button.
        let failures = try client.get("/console/failures").body
        #expect(failures.contains("Dead provider calls <span class=\"count\">1</span>") && failures.contains("service_unavailable"))
        #expect(failures.contains("<button type=\"submit\" name=\"one\" value=\"\(deadCall)\" class=\"small\">Replay</button>"))
        #expect(failures.contains("Replay all clerk (1)"))
        let csrf = try client.csrf()
        let revealed = try client.post("/console/users/reveal", [("csrf", csrf), ("sub", sub)])
        #expect(revealed.status == 200 && revealed.body.contains(email), "\(revealed.status)")
        for fields in [
            [("kind", "events"), ("one", dead)], [("kind", "events"), ("scope", "all"), ("type", "consent-revoked")],
            [("kind", "revocations"), ("scope", "all")], [("kind", "revocations"), ("one", "1")],
            [("kind", "forwards"), ("scope", "all")], [("kind", "forwards"), ("one", "msg_none")],
            [("kind", "provider-calls"), ("scope", "all"), ("type", "auth0")],
        ] {
            let replay = try client.post("/console/replay", [("csrf", csrf)] + fields)
            #expect(replay.status == 303 && replay.header("Location")?.contains("replayed-") == true, "\(fields): \(replay.status)")
        }
        #expect(try TestDatabase.query(url, "SELECT status FROM siwa.events WHERE id = $1", [dead]).scalar == "pending")
        // The dead call, replayed by its own button: back in the queue with a fresh retry bound, audited, said so.
        #expect(try TestDatabase.query(url, "SELECT state FROM siwa.provider_calls WHERE id = $1", [deadCall]).scalar == "dead")
        let replayed = try client.post("/console/replay", [("csrf", csrf), ("kind", "provider-calls"), ("one", deadCall)])
        #expect(replayed.header("Location") == "/console/failures?notice=replayed-1-provider-calls")
        #expect(
            try TestDatabase.query(
                url, "SELECT state || ' ' || attempts || ' ' || (retry_since > now() - interval '1 minute') FROM siwa.provider_calls WHERE id = $1",
                [deadCall]
            ).scalar == "pending 0 true")
        #expect(
            try TestDatabase.query(url, "SELECT target FROM siwa.operator_actions WHERE action = 'replay' ORDER BY id DESC LIMIT 1").scalar
                == "provider-calls:ids=\(deadCall) (1)")
        #expect(try client.get("/console/failures?notice=replayed-1-provider-calls").body.contains("1 dead provider call put back in the queue."))
        let deleted = try client.post("/console/users/delete", [("csrf", csrf), ("sub", sub), ("confirm", sub)])
        #expect(deleted.status == 303, "\(deleted.status) \(deleted.body.prefix(300))")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE sub = $1 AND type = 'deletion-requested'", [sub]).scalar == "1")
        #expect(try client.post("/console/sign-out", [("csrf", csrf)]).status == 303)
        #expect(
            try TestDatabase.query(url, "SELECT string_agg(action, ',' ORDER BY id) FROM siwa.operator_actions").scalar
                == "sign-in,reveal-email,replay,replay,replay,replay,replay,replay,replay,replay,delete-user,sign-out")
        let refused = harness.logs.lines.filter { $0.contains("42501") || $0.contains("permission denied") }
        #expect(refused.isEmpty, "\(refused)")

        // The console's role alone: no operator made or changed, no token read, no event or account written.
        let console = try PostgresConnection(conninfo: login["siwa_console"]!)
        for sql in [
            "INSERT INTO siwa.console_operators (name, token_hash) VALUES ('mallory', 'x')",
            "UPDATE siwa.console_operators SET token_hash = 'x'",
            "SELECT ciphertext FROM siwa.apple_tokens",
            "UPDATE siwa.events SET type = 'account-delete'",
            "INSERT INTO siwa.events (jti, aud, sub, type, event_time) VALUES ('c1', 'app', 's', 'account-delete', now())",
            "UPDATE siwa.accounts SET status = 'deleted'",
            "UPDATE siwa.provider_calls SET apple_sub = 'someone', effect = 'delete_user'",
            "UPDATE siwa.operator_actions SET operator = 'someone'",
            "DELETE FROM siwa.operator_actions",
            "SELECT siwa.store_apple_token('s', 'app', 'k', '\\x00', NULL, NULL, now())",
        ] {
            do {
                _ = try console.execute(sql)
                Issue.record("the console's role ran: \(sql)")
            } catch {
                #expect(error.sqlState == "42501", "\(sql): \(error)")
            }
        }
    }

    @Test("a change without the session's CSRF token, from another origin, or without Origin/Referer is refused (403) and changes nothing")
    func csrfAndOrigin() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.console.csrf"
        #expect(try harness.notify(type: "consent-revoked", sub: sub).status == 200)
        #expect(try harness.eventually { try harness.accountStatus(sub) == "consent_revoked" })
        _ = try harness.query("UPDATE siwa.events SET status = 'dead' WHERE sub = $1", [sub])
        let id = try #require(try harness.scalar("SELECT id FROM siwa.events WHERE sub = $1", [sub]))
        let client = try Self.signedIn(harness)
        let csrf = try client.csrf()
        #expect(csrf.count == 64)
        let fields = [("csrf", csrf), ("kind", "events"), ("one", id)]

        #expect(try client.post("/console/replay", [("kind", "events"), ("one", id)]).status == 403)
        #expect(try client.post("/console/replay", [("csrf", String(repeating: "0", count: 64)), ("kind", "events"), ("one", id)]).status == 403)
        #expect(try client.post("/console/replay", fields, origin: "http://evil.example").status == 403)
        #expect(try client.post("/console/replay", fields, origin: "null").status == 403)
        #expect(try client.post("/console/replay", fields, origin: .some(nil)).status == 403)
        #expect(try client.post("/console/replay", fields, origin: .some(nil), extra: ["Referer: http://evil.example/console"]).status == 403)
        // Another session's CSRF token does not do either.
        let other = try Self.signedIn(harness, "bob")
        #expect(try other.post("/console/replay", fields).status == 403)
        #expect(try harness.scalar("SELECT status FROM siwa.events WHERE id = $1", [id]) == "dead")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE action = 'replay'") == "0")

        // The same-origin Referer (no Origin) with the right token: replayed, then applied.
        let ok = try client.post("/console/replay", fields, origin: .some(nil), extra: ["Referer: \(client.origin)/console/failures"])
        #expect(ok.status == 303 && ok.header("Location") == "/console/failures?notice=replayed-1-events")
        #expect(try harness.eventually { try harness.scalar("SELECT status FROM siwa.events WHERE id = $1", [id]) == "done" })
        #expect(
            try harness.scalar("SELECT operator || ' ' || target FROM siwa.operator_actions WHERE action = 'replay'") == "alice events:ids=\(id) (1)")
        #expect(try client.get("/console/failures?notice=replayed-1-events").body.contains("1 dead event put back in the queue."))
    }

    @Test("delete this user: a mistyped confirmation deletes nothing; the sub typed again deletes (in-app deletion) and is audited by hash")
    func deleteUser() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.console.delete"
        #expect(try harness.notify(type: "email-enabled", sub: sub, email: "d@privaterelay.appleid.com").status == 200)
        #expect(try harness.eventually { try harness.accountStatus(sub) == "active" })
        let client = try Self.signedIn(harness)
        let csrf = try client.csrf()
        let wrong = try client.post("/console/users/delete", [("csrf", csrf), ("sub", sub), ("confirm", sub + "x")])
        #expect(wrong.status == 422 && wrong.body.contains("does not match"))
        #expect(try harness.jobStatus(sub) == nil)

        let done = try client.post("/console/users/delete", [("csrf", csrf), ("sub", sub), ("confirm", sub)])
        #expect(done.status == 303 && done.header("Location") == "/console/users?q=\(SubjectHash.of(sub))&notice=deletion-requested")
        #expect(try harness.eventually { try harness.accountStatus(sub) == "deleted" })
        let evidence = try client.get("/console/users?q=\(SubjectHash.of(sub))")
        #expect(evidence.body.contains("&quot;deletions&quot;: [") && evidence.body.contains("&quot;requested_at&quot;"))
        let target = try harness.scalar("SELECT target FROM siwa.operator_actions WHERE action = 'delete-user'")
        #expect(target == "user:" + SubjectHash.of(sub))
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE target LIKE $1", ["%" + sub + "%"]) == "0")
    }

    @Test("a session ends: signed out, or idle 8 h")
    func sessionsEnd() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let token = try Self.add(harness)
        var client = Self.client(harness)
        _ = try client.signIn("alice", token)
        let out = try client.post("/console/sign-out", [("csrf", try client.csrf())])
        #expect(out.status == 303 && out.header("Set-Cookie")?.contains("Max-Age=0") == true)
        #expect(try client.get("/console").status == 303, "the old cookie no longer works")
        #expect(try harness.scalar("SELECT operator FROM siwa.operator_actions WHERE action = 'sign-out'") == "alice")

        _ = try client.signIn("alice", token)
        #expect(try client.get("/console").status == 200)
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '8 hours 1 minute' WHERE ended_at IS NULL")
        #expect(try client.get("/console").status == 303, "idle for more than 8 h")

        _ = try client.signIn("alice", token)
        #expect(try client.get("/console").status == 200)
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '7 hours 59 minutes' WHERE ended_at IS NULL")
        #expect(try client.get("/console").status == 200, "idle for less than 8 h")
        #expect(try harness.scalar("SELECT last_seen_at > now() - interval '1 minute' FROM siwa.console_sessions WHERE ended_at IS NULL") == "t")
    }

    @Test("an open tab's automatic refresh is not activity: the idle limit ends a forgotten session that keeps refreshing")
    func autoRefreshIsNotActivity() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let client = try Self.signedIn(harness)
        let refresh = "X-Console-Refresh: 1"
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '7 hours 58 minutes' WHERE ended_at IS NULL")
        let refreshed = try client.request("GET", "/console", headers: [refresh])
        #expect(refreshed.status == 200, "the page still refreshes within the limit")
        #expect(
            try harness.scalar("SELECT last_seen_at < now() - interval '7 hours 57 minutes' FROM siwa.console_sessions WHERE ended_at IS NULL")
                == "t",
            "the refresh left the idle clock alone")
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '8 hours 1 minute' WHERE ended_at IS NULL")
        let ended = try client.request("GET", "/console", headers: [refresh])
        #expect(ended.status == 303 && ended.header("Location") == "/console/sign-in", "past 8 h the refresh meets the sign-in form")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_sessions WHERE ended_at IS NULL") == "0")
        #expect(try client.get("/console").status == 303, "ended for good")
    }

    @Test("removing an operator ends their sessions at once; another operator's session lives on")
    func removedOperator() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let alice = try Self.signedIn(harness, "alice")
        let bob = try Self.signedIn(harness, "bob")
        #expect(try alice.get("/console").status == 200 && bob.get("/console").status == 200)
        #expect(try ConsoleOperators.remove(name: "alice", conninfo: harness.conninfo) == 1)
        #expect(try alice.get("/console").status == 303, "signed out at the next request")
        #expect(try alice.post("/console/sign-out", [("csrf", "x")]).status == 403)
        #expect(try bob.get("/console").status == 200)
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_sessions WHERE operator = 'alice'") == "0")
        #expect(throws: ConsoleOperators.Failure.unknownName("alice")) { try ConsoleOperators.remove(name: "alice", conninfo: harness.conninfo) }
    }

    @Test("revealing emails audits the user found (canonical sub), whether typed with spaces or as its hash")
    func revealAuditsTheUserFound() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.reveal.\(UInt32.random(in: 0...UInt32.max))"
        #expect(try harness.notify(type: "email-disabled", sub: sub, email: "r@privaterelay.appleid.com").status == 200)
        #expect(try harness.eventually { try harness.accountStatus(sub) != nil })
        let client = try Self.signedIn(harness)
        let csrf = try client.csrf()
        let hash = SubjectHash.of(sub)
        for typed in ["  " + sub + " ", hash, " " + hash] {
            let page = try client.post("/console/users/reveal", [("csrf", csrf), ("sub", typed)])
            #expect(page.status == 200 && page.body.contains("r@privaterelay.appleid.com"), "\(typed)")
        }
        let targets = try harness.query("SELECT target FROM siwa.operator_actions WHERE action = 'reveal-email' ORDER BY id").rows.map { $0[0] ?? "" }
        #expect(targets == Array(repeating: "user:" + hash, count: 3))
        // Nobody found: nothing shown, nothing recorded.
        #expect(try client.post("/console/users/reveal", [("csrf", csrf), ("sub", "0000000000000000")]).status == 404)
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE action = 'reveal-email'") == "3")
    }

    @Test("upgrade: migrate ends every session opened with an API token, adds the operator columns, and stays idempotent")
    func upgradeEndsAPITokenSessions() throws {
        let url = try TestDatabase.create()
        // The tables as the previous version left them, with a live session of an API token.
        _ = try TestDatabase.query(
            url,
            """
            ALTER TABLE siwa.console_sessions DROP COLUMN operator_id, DROP COLUMN operator;
            ALTER TABLE siwa.operator_actions DROP COLUMN operator;
            INSERT INTO siwa.console_sessions (token_hash, token_fingerprint, client_address) VALUES ('old-session', 'sha256:0123456789abcdef', '127.0.0.1');
            INSERT INTO siwa.operator_actions (token_fingerprint, client_address, action) VALUES ('sha256:0123456789abcdef', '127.0.0.1', 'sign-in');
            """)
        try Migrator.migrate(conninfo: url, force: true)
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.console_sessions").scalar == "0")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.operator_actions WHERE operator IS NULL").scalar == "1", "the trail is kept")
        let columns = try TestDatabase.query(
            url,
            """
            SELECT string_agg(column_name || ':' || is_nullable, ',' ORDER BY column_name) FROM information_schema.columns
            WHERE table_schema = 'siwa' AND table_name = 'console_sessions' AND column_name IN ('operator', 'operator_id')
            """
        ).scalar
        #expect(columns == "operator:NO,operator_id:NO")
        #expect(
            try TestDatabase.query(
                url, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'siwa.console_sessions'::regclass AND contype = 'f'"
            ).scalar == "1")
        // A session without an operator is refused by the column migrate made NOT NULL.
        let anonymous = DatabaseTrustTests.refusal {
            _ = try TestDatabase.query(url, "INSERT INTO siwa.console_sessions (token_hash, token_fingerprint) VALUES ('x', 'sha256:0')")
        }
        #expect(anonymous.hasPrefix("23502 ") && anonymous.contains("\"operator_id\""), "\(anonymous)")
    }
}
