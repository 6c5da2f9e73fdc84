import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import Testing

/// The operator console over real HTTP (README "Console"): sign-in, the cookie, sessions in
/// PostgreSQL, CSRF and same-origin refusals, the rate limit, every page with data, and the
/// audit trail of each action.
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

        /// Signs in with `token`; keeps the cookie.
        mutating func signIn(_ token: String, extra: [String] = []) throws -> Reply {
            let reply = try post("/console/sign-in", [("token", token)], extra: extra)
            if let set = reply.header("Set-Cookie"), let value = set.split(separator: ";").first?.split(separator: "=", maxSplits: 1).last {
                cookie = String(value)
            }
            return reply
        }

        /// The CSRF token of a signed-in page.
        func csrf() throws -> String { try get("/console/audit").csrf ?? "" }
    }

    static func client(_ harness: DeletionHarness) -> Client { Client(port: harness.app.adminPort ?? 0) }

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

    @Test("sign-in: a wrong token gets one generic refusal; the right one a session cookie (HttpOnly, SameSite=Strict, Path=/console), stored hashed")
    func signIn() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        var client = Self.client(harness)
        let first = try client.get("/console")
        #expect(first.status == 303 && first.header("Location") == "/console/sign-in")
        let form = try client.get("/console/sign-in")
        #expect(form.status == 200)
        #expect(form.header("Content-Security-Policy") == "default-src 'self'; frame-ancestors 'none'")
        #expect(!form.body.contains("http://") && !form.body.contains("https://"), "no asset from another origin")

        let wrong = try client.signIn("not-the-token-" + harness.apiToken.dropFirst(14))
        #expect(wrong.status == 401 && wrong.body.contains("Sign-in refused.") && wrong.header("Set-Cookie") == nil)
        #expect(client.cookie == nil)

        let right = try client.signIn(harness.apiToken)
        #expect(right.status == 303 && right.header("Location") == "/console")
        let cookie = right.header("Set-Cookie") ?? ""
        #expect(cookie.contains("; Path=/console") && cookie.contains("; HttpOnly") && cookie.contains("; SameSite=Strict"))
        #expect(!cookie.contains("Secure"), "plain HTTP without SIWA_CONSOLE_SECURE_COOKIE")
        let session = try #require(client.cookie)
        #expect(session.count == 64)
        // Only the hash is stored; the API token appears nowhere.
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_sessions WHERE token_hash = $1", [session]) == "0")
        // The hash pinned, computed by the database: SHA-256 of the cookie under its purpose prefix.
        #expect(
            try harness.scalar(
                "SELECT count(*) FROM siwa.console_sessions WHERE token_hash = encode(sha256(convert_to('console-session:' || $1, 'UTF8')), 'hex')",
                [session]) == "1", "the session is not stored as the hash of its cookie")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_sessions WHERE ended_at IS NULL") == "1")
        let actions = try harness.query("SELECT action, coalesce(token_fingerprint, ''), client_address FROM siwa.operator_actions ORDER BY id")
            .rows.map { $0.map { $0 ?? "" } }
        #expect(actions.map { $0[0] } == ["sign-in-refused", "sign-in"])
        #expect(actions[1][1].hasPrefix("sha256:") && !actions[1][1].contains(harness.apiToken))
        #expect(actions[1][2] == "127.0.0.1")
        #expect(try client.get("/console").status == 200)

        // Behind a TLS-terminating proxy the cookie is Secure.
        var proxied = Self.client(harness)
        let secure = try proxied.signIn(harness.apiToken, extra: ["X-Forwarded-Proto: https"])
        #expect(secure.header("Set-Cookie")?.hasSuffix("; Secure") == true)
    }

    @Test("sign-in attempts are rate-limited per client address: the 11th within 5 minutes gets 429, even with the right token")
    func rateLimit() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        var client = Self.client(harness)
        for _ in 0..<10 { #expect(try client.signIn("wrong-token-0123456789").status == 401) }
        let limited = try client.signIn(harness.apiToken)
        #expect(limited.status == 429 && limited.header("Retry-After") != nil && limited.header("Set-Cookie") == nil)
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

        var client = Self.client(harness)
        _ = try client.signIn(harness.apiToken)
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
        #expect(try harness.scalar("SELECT target FROM siwa.operator_actions WHERE action = 'reveal-email'") == "user:" + hash)

        #expect(try client.get("/console/sync").status == 200)
        let audit = try client.get("/console/audit")
        #expect(audit.status == 200 && audit.body.contains("reveal-email") && audit.body.contains("user:" + hash))
        #expect(try client.get("/console/nope").status == 404)
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
        var client = Self.client(harness)
        _ = try client.signIn(harness.apiToken)
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
        var other = Self.client(harness)
        _ = try other.signIn(harness.apiToken)
        #expect(try other.post("/console/replay", fields).status == 403)
        #expect(try harness.scalar("SELECT status FROM siwa.events WHERE id = $1", [id]) == "dead")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE action = 'replay'") == "0")

        // The same-origin Referer (no Origin) with the right token: replayed, then applied.
        let ok = try client.post("/console/replay", fields, origin: .some(nil), extra: ["Referer: \(client.origin)/console/failures"])
        #expect(ok.status == 303 && ok.header("Location") == "/console/failures?notice=replayed-1-events")
        #expect(try harness.eventually { try harness.scalar("SELECT status FROM siwa.events WHERE id = $1", [id]) == "done" })
        #expect(try harness.scalar("SELECT target FROM siwa.operator_actions WHERE action = 'replay'") == "events:ids=\(id) (1)")
        #expect(try client.get("/console/failures?notice=replayed-1-events").body.contains("1 dead event put back in the queue."))
    }

    @Test("delete this user: a mistyped confirmation deletes nothing; the sub typed again deletes (in-app deletion) and is audited by hash")
    func deleteUser() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.console.delete"
        #expect(try harness.notify(type: "email-enabled", sub: sub, email: "d@privaterelay.appleid.com").status == 200)
        #expect(try harness.eventually { try harness.accountStatus(sub) == "active" })
        var client = Self.client(harness)
        _ = try client.signIn(harness.apiToken)
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

    @Test("a session ends: signed out, idle 8 h, or its token removed from the token file")
    func sessionsEnd() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        var client = Self.client(harness)
        _ = try client.signIn(harness.apiToken)
        let out = try client.post("/console/sign-out", [("csrf", try client.csrf())])
        #expect(out.status == 303 && out.header("Set-Cookie")?.contains("Max-Age=0") == true)
        #expect(try client.get("/console").status == 303, "the old cookie no longer works")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.operator_actions WHERE action = 'sign-out'") == "1")

        _ = try client.signIn(harness.apiToken)
        #expect(try client.get("/console").status == 200)
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '8 hours 1 minute' WHERE ended_at IS NULL")
        #expect(try client.get("/console").status == 303, "idle for more than 8 h")

        _ = try client.signIn(harness.apiToken)
        #expect(try client.get("/console").status == 200)
        _ = try harness.query("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '7 hours 59 minutes' WHERE ended_at IS NULL")
        #expect(try client.get("/console").status == 200, "idle for less than 8 h")
        try ("other_token_" + SHA256.hex(SecureRandom.bytes(8)) + "\n").write(toFile: harness.apiTokenFile, atomically: true, encoding: .utf8)
        #expect(try harness.app.reloadAPITokens() == 1)
        #expect(try client.get("/console").status == 303, "its token left the file")
    }
}
