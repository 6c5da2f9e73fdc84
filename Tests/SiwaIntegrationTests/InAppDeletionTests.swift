import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import SiwaPostgres
import SiwaRuntime
import Synchronization
import Testing

/// App-initiated deletion end to end: the code exchange on the admin listener, `request_deletion`,
/// the worker's revocation at (a fake) Apple over real HTTP, retries, dead letters, replay, a
/// worker killed mid-call, bad keys at start, and `dev-apple` with `serve --dev`.
@Suite("In-app deletion", .serialized, .needsDatabase)
struct InAppDeletionTests {
    typealias S = AppleTestSetup
    typealias H = DeletionHarness

    /// Neither a refresh token, an authorization code, a client secret, a raw sub nor an email in `log`.
    static func expectNothingSecret(
        in log: String, fake: FakeApple, codes: [String] = [], subs: [String] = [],
        emails: [String] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(!log.isEmpty, sourceLocation: sourceLocation)
        var secrets = Array(fake.issuedRefreshTokens.keys) + fake.revokedTokens + codes + subs + emails
        secrets += fake.calls.compactMap { $0.form?["client_secret"] }
        secrets += fake.calls.compactMap { $0.form?["token"] }
        for secret in Set(secrets) where !secret.isEmpty {
            #expect(
                !log.contains(secret), "the log contains a secret or personal value (\(secret.prefix(6))...)",
                sourceLocation: sourceLocation)
        }
    }

    static func code() -> String { "c." + NotificationSigner.newJTI() }

    // MARK: a. The API and the code exchange

    @Test("the API: 404 without a token file, 401 + WWW-Authenticate, 415, 405; any line of the file admits")
    func apiAuthentication() throws {
        let h = try H()
        defer { h.stop() }
        let url = h.adminURL + "/apple/tokens"
        let body = H.exchangeBody(code: Self.code())
        let none = try H.post(url, json: body)
        #expect(none.status == 401 && none.error == "unauthorized")
        let wrong = try H.post(url, json: body, token: h.apiToken + "x")
        #expect(wrong.status == 401)
        let bad = try Fetcher.perform(
            FetchRequest(
                url: url, method: "POST", headers: ["Content-Type: application/json", "Authorization: Basic \(h.apiToken)"],
                body: Array(body.utf8), allowedSchemes: [.http]))
        #expect(bad.status == 401 && bad.headers["www-authenticate"] == "Bearer")
        let form = try H.post(url, json: "code=x", token: h.apiToken, contentType: "application/x-www-form-urlencoded")
        #expect(form.status == 415)
        #expect(h.fake.calls(to: "/auth/token").isEmpty, "nothing reached Apple")
        // Rotation: a second line admits too, after a reload.
        let second = "second_" + SHA256.hex(SecureRandom.bytes(16))
        try (h.apiToken + "\n" + second + "\n").write(toFile: h.apiTokenFile, atomically: true, encoding: .utf8)
        #expect(try h.app.reloadAPITokens() == 2)
        #expect(try H.post(url, json: "{", token: second).error == "malformed_json")
        #expect(h.logText.contains("API tokens reloaded"))
        // A file that became invalid is refused, with a line saying so; the tokens in use stay.
        try "too-short\n".write(toFile: h.apiTokenFile, atomically: true, encoding: .utf8)
        #expect(throws: (any Error).self) { try h.app.reloadAPITokens() }
        #expect(h.logText.contains("API tokens not reloaded; the previous ones stay"))
        #expect(try H.post(url, json: "{", token: second).error == "malformed_json")
        #expect(try H.post(url, json: "{", token: "too-short").status == 401)
        // Another method: 405 with Allow: POST (whatever the token).
        for token in [h.apiToken, "none"] {
            let get = try Fetcher.perform(FetchRequest(url: url, headers: ["Authorization: Bearer \(token)"], allowedSchemes: [.http]))
            #expect(get.status == 405 && get.headers["allow"] == "POST", "\(get.status) \(get.headers)")
            #expect(String(decoding: get.body, as: UTF8.self) == #"{"error":"method_not_allowed"}"#)
        }

        // Without SIWA_API_TOKEN_FILE the API does not exist.
        var config = ServerConfiguration()
        config.databaseURL = h.conninfo
        config.audiences = [S.clientID]
        config.jwksURL = h.fake.jwksURL
        config.listen = ListenAddress(host: "127.0.0.1", port: 0)
        config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
        config.appleAPI = AppleAPIConfiguration(
            teamID: S.teamID, keyID: S.keyID, privateKeyFile: h.privateKeyFile, tokenKeyFile: h.tokenKeyFile, baseURL: h.fake.baseURL)
        let off = Application(configuration: config, roles: .receive, logger: TestHarness.logger(into: LogSink.capturing()))
        try off.start()
        defer { off.shutdown() }
        let offURL = "http://127.0.0.1:\(off.adminPort ?? 0)"
        #expect(try H.post(offURL + "/apple/tokens", json: body, token: h.apiToken).status == 404)
        #expect(try H.post(offURL + "/apple/refresh-tokens", json: body, token: h.apiToken).status == 404)
    }

    @Test(
        "SIGHUP makes a running `serve` re-read SIWA_API_TOKEN_FILE; an invalid or half-written file keeps the tokens in use, with a line saying so"
    )
    func apiTokensReloadOnSIGHUP() throws {
        let h = try H(roles: .receive)
        defer { h.stop() }
        let (server, url) = try h.serve()
        defer { _ = server.terminate() }
        #expect(server.waitForLog("worker started"), "\(server.log)")
        /// 400 malformed_json: admitted; 401: refused.
        func status(_ token: String) throws -> Int { try H.post(url, json: "{", token: token).status }
        let rotated = "rotated_" + SHA256.hex(SecureRandom.bytes(16))
        #expect(try status(h.apiToken) == 400 && status(rotated) == 401)

        try (rotated + "\n").write(toFile: h.apiTokenFile, atomically: true, encoding: .utf8)
        server.signal(SIGHUP)
        #expect(server.waitForLog("API tokens reloaded"), "\(server.log)")
        #expect(try status(rotated) == 400 && status(h.apiToken) == 401)

        try "too-short\n".write(toFile: h.apiTokenFile, atomically: true, encoding: .utf8)
        server.signal(SIGHUP)
        #expect(server.waitForLog("API tokens not reloaded; the previous ones stay"), "\(server.log)")
        #expect(server.log.contains("too_short") || server.log.contains("at least 16"), "the line says why")
        #expect(try status(rotated) == 400 && status("too-short") == 401)

        // `echo $TOKEN > file` caught midway (truncated, 24 characters written): never loaded.
        let third = "third_" + SHA256.hex(SecureRandom.bytes(16))
        func lines(_ text: String) -> Int { server.log.components(separatedBy: text).count - 1 }
        let file = try #require(FileHandle(forWritingAtPath: h.apiTokenFile))
        try file.truncate(atOffset: 0)
        try file.write(contentsOf: Data(third.prefix(24).utf8))
        try file.synchronize()
        server.signal(SIGHUP)
        #expect(h.eventually(30) { lines("API tokens not reloaded") == 2 }, "\(server.log.suffix(400))")
        #expect(try status(rotated) == 400, "the tokens in use were dropped")
        #expect(try status(String(third.prefix(24))) == 401, "a half-written token admits")
        try file.write(contentsOf: Data((third.dropFirst(24) + "\n").utf8))
        try file.close()
        server.signal(SIGHUP)
        #expect(h.eventually(30) { lines("API tokens reloaded") == 2 }, "\(server.log.suffix(400))")
        #expect(try status(third) == 400 && status(rotated) == 401)
        #expect(!server.log.contains(rotated) && !server.log.contains(h.apiToken) && !server.log.contains(third.prefix(24)), "no token in the log")
        #expect(server.terminate() == 0)
    }

    @Test("the API's own executor: beyond SIWA_API_CONCURRENCY calls in flight, 503 busy with Retry-After")
    func apiBusy() throws {
        let h = try H(apiConcurrency: 1)
        defer { h.stop() }
        h.fake.answerToken(.hang)
        let first = Thread { _ = try? h.exchange(code: Self.code()) }
        first.start()
        #expect(h.eventually { h.fake.hungCalls == 1 })
        let response = try Fetcher.perform(
            FetchRequest(
                url: h.adminURL + "/apple/tokens", method: "POST",
                headers: ["Content-Type: application/json", "Authorization: Bearer \(h.apiToken)"],
                body: Array(H.exchangeBody(code: Self.code()).utf8), allowedSchemes: [.http]))
        #expect(response.status == 503 && response.headers["retry-after"] == "1")
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":"busy"}"#)
        // /healthz is not held by the API.
        #expect(try h.admin("/healthz").status == 200)
    }

    @Test("POST /apple/tokens: verified claims, encrypted token, the sign-in applied, every refusal; a redeemed code's token is never dropped")
    func exchange() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.exchange.0001", email = "x7@privaterelay.appleid.com"
        let code = Self.code()
        h.fake.addCode(code, user: .init(sub: sub, email: email, isPrivateEmail: true, nonce: "n-1", redirectURI: "https://app.example/cb"))
        let body = H.exchangeBody(code: code, redirectURI: "https://app.example/cb", nonce: "n-1")
        #expect(try H.post(h.baseURL + "/apple/tokens", json: body, token: h.apiToken).status == 404, "not on the public listener")

        let reply = try h.api("/apple/tokens", json: body)
        #expect(reply.status == 200, "\(reply.body)")
        let json = try #require(reply.json)
        #expect(json["sub"]?.stringValue == sub && json["email"]?.stringValue == email)
        #expect(json["is_private_email"]?.boolValue == true && json["email_verified"]?.boolValue == true)
        let token = try #require(h.fake.issuedRefreshTokens.first?.key)
        let rows = try h.query(
            "SELECT apple_sub, key_id, position(convert_to($1, 'UTF8') IN ciphertext) AS at, signed_in_at IS NOT NULL AS signed FROM siwa.apple_tokens",
            [token])
        #expect(rows.rows.count == 1 && rows.value(0, "apple_sub") == sub && rows.value(0, "key_id") == h.tokenKey.id)
        #expect(rows.value(0, "at") == "0" && rows.value(0, "signed") == "t")
        // The sign-in is an event: the worker creates the account from it.
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == email)
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'sign-in' AND sub = $1", [sub]) == "1")

        // Refusals before Apple.
        let tokenCalls = h.fake.calls(to: "/auth/token").count
        #expect(try h.exchange(code: Self.code(), clientID: "com.example.unknown").error == "unknown_client_id")
        #expect(try h.api("/apple/tokens", json: "{").error == "malformed_json")
        #expect(try h.api("/apple/tokens", json: #"{"client_id":"\#(S.clientID)"}"#).error == "missing_code")
        #expect(h.fake.calls(to: "/auth/token").count == tokenCalls)
        let refused = try h.exchange(code: Self.code())
        #expect(refused.status == 400 && refused.error == "invalid_grant")
        h.fake.answerToken(.status(503, #"{"error":"temporarily_unavailable"}"#))
        #expect(try h.exchange(code: Self.code()).error == "apple_unavailable")
        h.fake.answerToken(.normal)

        // A wrong nonce is the caller's error (400), and the token Apple issued is revoked, durably.
        let wrongNonce = Self.code()
        h.fake.addCode(wrongNonce, user: .init(sub: "001234.nonce.0001", nonce: "n-2"))
        let before = Set(h.fake.issuedRefreshTokens.keys)
        let nonceReply = try h.exchange(code: wrongNonce, nonce: "n-other")
        #expect(nonceReply.status == 400 && nonceReply.error == "nonce_mismatch")
        let issued = try #require(Set(h.fake.issuedRefreshTokens.keys).subtracting(before).first)
        #expect(h.eventually { h.fake.revokedTokens.contains(issued) })
        #expect(try h.eventually { try h.revocations("001234.nonce.0001") == ["done"] })
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = '001234.nonce.0001'") == "0")

        Self.expectNothingSecret(in: h.logText, fake: h.fake, codes: [code, wrongNonce], subs: [sub], emails: [email])
    }

    @Test("keys unavailable after Apple redeemed the code: 503 keys_unavailable, and the issued refresh token is queued and revoked")
    func exchangeKeysUnavailable() throws {
        // The key set the app trusts holds another key, and fetching it again fails: the
        // id_token's kid (the fake's) cannot be checked.
        let other = NotificationSigner(key: try RSAPrivateKey.generate(bits: 2048), kid: "some-other-key")
        let keys = try JWKSServer(body: other.jwks)
        defer { keys.stop() }
        let h = try H(jwksURL: keys.url)
        defer { h.stop() }
        keys.set { $0.status = 503 }
        let sub = "001234.nokeys.0001"
        let code = Self.code()
        h.fake.addCode(code, user: .init(sub: sub, email: "k@example.com"))
        let reply = try h.exchange(code: code)
        #expect(reply.status == 503 && reply.error == "keys_unavailable", "\(reply.status) \(reply.body)")
        let issued = try #require(h.fake.issuedRefreshTokens.first?.key, "Apple redeemed the code")
        // Never dropped: queued in siwa.revocations (encrypted), then revoked at Apple.
        #expect(try h.scalar("SELECT reason FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "exchange-failed")
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(h.fake.revokedTokens == [issued])
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts") == "0", "nothing of the user was stored")
        Self.expectNothingSecret(in: h.logText, fake: h.fake, codes: [code], subs: [sub], emails: ["k@example.com"])
    }

    @Test("the database down when the redeemed code's token is stored: 503 database_unavailable, the token revoked at Apple at once")
    func exchangeDatabaseDown() throws {
        try TestDatabase.withEmbedded("storefails") { database in
            let h = try H(conninfo: database.conninfo)
            defer { h.stop() }
            try h.signIn(sub: "001234.storefails.warmup")  // the key set is loaded, the path works
            database.stop()  // down: connections are refused

            let sub = "001234.storefails.0001"
            let code = Self.code()
            h.fake.addCode(code, user: .init(sub: sub))
            let before = Set(h.fake.issuedRefreshTokens.keys)
            let started = Date()
            let reply = try h.exchange(code: code)
            let seconds = Date().timeIntervalSince(started)
            #expect(reply.status == 503 && reply.error == "database_unavailable", "\(reply.status) \(reply.body)")
            let issued = try #require(Set(h.fake.issuedRefreshTokens.keys).subtracting(before).first, "Apple redeemed the code")
            // Nowhere to queue it: revoked at Apple before the answer.
            #expect(h.fake.revokedTokens == [issued])
            #expect(h.logText.contains("revoked at Apple directly"))
            print("exchange with the database down: 503 after \(String(format: "%.2f", seconds)) s, the issued token revoked at Apple at once")
            Self.expectNothingSecret(in: h.logText, fake: h.fake, codes: [code], subs: [sub])
        }
    }

    @Test("POST /apple/refresh-tokens believes Apple, not the caller: id_token verified, token validated at Apple")
    func handOver() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.handover.0001", victim = "001234.victim.0001"
        let pair = try h.fake.issueTokens(for: .init(sub: sub, email: "h@privaterelay.appleid.com", isPrivateEmail: true), clientID: S.clientID)
        func body(_ token: String, _ idToken: String, client: String = S.clientID) -> String {
            JSONValue.object(["client_id": .string(client), "refresh_token": .string(token), "id_token": .string(idToken)]).serialized()
        }
        let path = TokenExchange.handoverPath
        // The old shape (sub and email from the caller) is refused: no id_token.
        let old = try h.api(path, json: #"{"sub":"\#(victim)","client_id":"\#(S.clientID)","refresh_token":"junk","email":"attacker@evil.test"}"#)
        #expect(old.status == 400 && old.error == "missing_id_token")
        // A junk token with a real id_token: Apple says invalid_grant.
        let junk = try h.api(path, json: body("junk", pair.idToken))
        #expect(junk.status == 400 && junk.error == "invalid_refresh_token")
        // A forged id_token (not Apple's signature).
        let forged = try NotificationSigner(key: RSAPrivateKey.generate(bits: 2048), kid: "fake-apple-key").sign(claims: [
            "iss": .string(FakeApple.issuer), "aud": .string(S.clientID), "sub": .string(victim),
            "iat": .number(Double(S.wallClock())), "exp": .number(Double(S.wallClock() + 600)),
        ])
        #expect(try h.api(path, json: body(pair.refreshToken, forged)).error == "invalid_id_token")
        // Someone else's real token with the attacker's id_token: Apple's id_token names another user.
        let other = try h.fake.issueTokens(for: .init(sub: victim), clientID: S.clientID)
        #expect(try h.api(path, json: body(other.refreshToken, pair.idToken)).error == "invalid_refresh_token")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts") == "0")

        let reply = try h.api(path, json: body(pair.refreshToken, pair.idToken))
        #expect(reply.status == 200 && reply.json?["stored"]?.stringValue == "created", "\(reply.body)")
        #expect(h.fake.calls(to: "/auth/token").last?.form?["grant_type"] == "refresh_token")
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "h@privaterelay.appleid.com")
    }

    @Test(
        "a sign-in whose id_token carries transfer_sub maps that identifier to the user (siwa.transfers), and with forwarding on queues it as user-migrated"
    )
    func signInMapsTransferSub() throws {
        // Forwarding on, to a port nothing listens on: the forward is queued and waits.
        let h = try H(forwardURL: "http://127.0.0.1:9/siwa")
        defer { h.stop() }
        let code = Self.code()
        var user = DevApple.User(sub: "001234.moved.0001", email: "m@privaterelay.appleid.com", isPrivateEmail: true)
        user.transferSub = "000999.old-team.0001"
        h.fake.addCode(code, user: user)
        #expect(try h.exchange(code: code).status == 200)
        let row = try h.query(
            "SELECT direction, new_sub, migrated_at IS NOT NULL AS mapped FROM siwa.transfers WHERE transfer_sub = $1",
            [
                "000999.old-team.0001"
            ])
        #expect(row.rows.count == 1 && row.value(0, "direction") == "import")
        #expect(row.value(0, "new_sub") == "001234.moved.0001" && row.value(0, "mapped") == "t")
        let forward = try h.query(
            "SELECT sub, aud, type, source FROM siwa.forwards WHERE transfer_sub = $1", ["000999.old-team.0001"])
        #expect(forward.rows == [["001234.moved.0001", S.clientID, "user-migrated", "transfer"]])
    }

    // MARK: b. Deletion: local first, revocation for days

    @Test("Apple down: the user is deleted locally at once; the revocation retries, then succeeds and erases the token")
    func localDeletionFirst() throws {
        let h = try H(retryBaseDelay: 0.3)
        defer { h.stop() }
        try h.installLoggingHook()
        let sub = "001234.revoke.0001", email = "revoke.me@example.com"
        let token = try h.signIn(sub: sub, email: email)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try h.notify(type: "email-disabled", sub: sub, email: email).status == 200)
        let session = try h.scalar("INSERT INTO siwa.sessions (apple_sub) VALUES ($1) RETURNING id", [sub])
        h.fake.answerRevoke(.status(503, #"{"error":"temporarily_unavailable"}"#))

        // In the app's own transaction: rolled back, nothing queued.
        let app = try PostgresConnection(conninfo: h.conninfo)
        _ = try app.execute("BEGIN")
        #expect(try app.execute("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID]).scalar == "1")
        _ = try app.execute("ROLLBACK")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'deletion-requested'") == "0")
        let started = Date()
        _ = try app.execute("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })
        let localSeconds = Date().timeIntervalSince(started)
        #expect(try h.scalar("SELECT revoked_at IS NOT NULL FROM siwa.sessions WHERE id = $1", [session]) == "t")
        #expect(try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == nil)
        #expect(
            try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = $1 AND (email IS NOT NULL OR position($2 IN claims::text) > 0)", [sub, email])
                == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0", "the token left the live slot")
        #expect(try h.eventually { try h.revocations(sub) == ["failed"] })
        #expect(try h.scalar("SELECT ciphertext IS NOT NULL FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "t")
        #expect(try h.scalar("SELECT last_error FROM siwa.revocations WHERE apple_sub = $1", [sub])?.hasPrefix("transient: http_503") == true)
        #expect(try h.scalar("SELECT outcome FROM hook_log WHERE type = 'deletion-requested'") == "applied")
        print("local deletion with Apple answering 503: account deleted \(Int(localSeconds * 1000)) ms after request_deletion")

        h.fake.answerRevoke(.normal)
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(h.fake.revokedTokens == [token])
        #expect(try h.scalar("SELECT ciphertext IS NULL AND key_id IS NULL FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "t")
        #expect(try h.admin("/metrics").body.contains(#"siwa_revocations_total{outcome="revoked"} 1"#))
        Self.expectNothingSecret(in: h.logText, fake: h.fake, subs: [sub], emails: [email])
    }

    @Test("no stored token: the user is deleted all the same, the revocation ends no_token (counted in status)")
    func noToken() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.notoken.0001"
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })
        #expect(try h.revocations(sub) == ["no_token"])
        let report = try OutboxAdmin.status(conninfo: h.conninfo, inAppDeletion: true)
        #expect(report.revocationsNoToken == 1 && report.revocationsDead == 0)
        #expect(h.fake.calls(to: "/auth/revoke").isEmpty)
        // /metrics counts it apart from failures (its gauges are a snapshot: refreshed within 0.2 s here).
        #expect(h.eventually { (try? h.admin("/metrics"))?.body.contains("\nsiwa_revocations_no_token 1\n") == true })
        let metrics = try h.admin("/metrics").body
        #expect(metrics.contains("\nsiwa_revocations_dead 0\n") && metrics.contains("\nsiwa_revocations_waiting 0\n"), "\(metrics)")
    }

    @Test("revocation retries past its window end dead; replay --revocations brings it back")
    func deadThenReplay() throws {
        let h = try H(retryBaseDelay: 0.2)
        defer { h.stop() }
        let sub = "001234.dead.0001"
        try h.signIn(sub: sub)
        h.fake.answerRevoke(.invalidClient)
        _ = try h.query("SELECT siwa.request_deletion($1)", [sub])
        #expect(try h.eventually { try h.revocations(sub) == ["failed"] })
        // The retry window ran out (as if queued 8 days ago).
        _ = try h.query("UPDATE siwa.revocations SET created_at = now() - interval '8 days', next_attempt_at = now()")
        #expect(try h.eventually { try h.revocations(sub) == ["dead"] })
        #expect(try OutboxAdmin.status(conninfo: h.conninfo).revocationsDead == 1)
        // The gauge the SiwaRevocationsDead alert reads.
        #expect(h.eventually { (try? h.admin("/metrics"))?.body.contains("\nsiwa_revocations_dead 1\n") == true })
        #expect(try h.admin("/metrics").body.contains("\nsiwa_revocations_no_token 0\n"))
        h.fake.answerRevoke(.normal)
        #expect(try OutboxAdmin.replayRevocations(conninfo: h.conninfo) == 1)
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(h.eventually { (try? h.admin("/metrics"))?.body.contains("\nsiwa_revocations_dead 0\n") == true })
    }

    @Test("a sign-in after the deletion is the user coming back: a new account that keeps its token; the old grant is still revoked")
    func comeBackAfterDeletion() throws {
        let h = try H(retryBaseDelay: 0.3)
        defer { h.stop() }
        let sub = "001234.comeback.0001"
        let old = try h.signIn(sub: sub, email: "old@example.com")
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        h.fake.answerRevoke(.status(503, "{}"))
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })
        untilNextSecond()
        let new = try h.signIn(sub: sub, email: "new@example.com")
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "new@example.com")
        #expect(try h.scalar("SELECT deleted_at FROM siwa.accounts WHERE apple_sub = $1", [sub]) == nil)
        h.fake.answerRevoke(.normal)
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(h.fake.revokedTokens == [old], "only the grant held when the deletion took effect")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "1")
        // A late account-delete older than the sign-in does not undo it.
        #expect(try h.notify(type: "account-delete", sub: sub, eventTimeMillis: S.wallClock() * 1000 - 60_000).status == 200)
        #expect(try h.eventually { try h.scalar("SELECT outcome FROM siwa.events WHERE type = 'account-delete'") == "stale" })
        #expect(try h.accountStatus(sub) == "active")
        _ = new
    }

    @Test(
        "a late account-delete older than the sign-in the user came back with: the account stays, the old account's emails leave its events and forwards, the new ones stay"
    )
    func lateDeletionErasesTheOldAccount() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.late.0001"
        let old = "old@privaterelay.appleid.com", between = "between@privaterelay.appleid.com", new = "new@example.com"
        let now = S.wallClock() * 1000
        /// Rows of `sub` holding `email`: events (column or claims), forwards.
        func holding(_ email: String) throws -> [Int] { [try h.eventsHolding(email, sub: sub), try h.forwardsHolding(email, sub: sub)] }
        // Two email events of the account: before the deletion (at -60 s, not known yet) and
        // after it, before the user came back (at 0 s): both the deleted account's.
        for (type, email, at) in [("email-enabled", old, now - 120_000), ("email-disabled", between, now - 30_000)] {
            #expect(try h.notify(type: type, sub: sub, email: email, eventTimeMillis: at).status == 200)
            #expect(try h.eventually { try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == email })
        }
        // Their forwards still waiting (as forwarding would have queued them), and one of the new account.
        for (id, at, email) in [("f-old", now - 120_000, old), ("f-between", now - 30_000, between), ("f-new", now + 1_000, new)] {
            _ = try h.query(
                """
                INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source, email)
                VALUES ($1, $2, $3, 'email-enabled', timestamptz 'epoch' + $4::bigint * interval '1 millisecond', 'apple', $5)
                """, [id, sub, S.clientID, String(at), email])
        }
        try h.signIn(sub: sub, email: new)
        #expect(try h.eventually { try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == new })
        #expect(try holding(old) == [1, 1] && holding(between) == [1, 1])

        // Apple's account-delete of a minute ago arrives now: the user deleted the account, then came back.
        #expect(try h.notify(type: "account-delete", sub: sub, eventTimeMillis: now - 60_000).status == 200)
        #expect(try h.eventually { try h.scalar("SELECT outcome FROM siwa.events WHERE sub = $1 AND type = 'account-delete'", [sub]) == "stale" })
        #expect(try h.accountStatus(sub) == "active")
        #expect(try holding(old) == [0, 0], "the deleted account's email stayed")
        #expect(try holding(between) == [0, 0], "an email event between the deletion and the comeback kept its email")
        #expect(try h.scalar("SELECT email FROM siwa.accounts WHERE apple_sub = $1", [sub]) == new)
        #expect(try holding(new) == [1, 1], "the new account's sign-in and forward keep their email")
    }

    @Test(
        "an ignored event inserted while the deletion of a user never seen before commits: the insert sees no account to wait for, the worker's sweep erases its email"
    )
    func ignoredEventRacingADeletion() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.raced.0001", email = "raced@example.com"
        // A worker's batch applying the account-delete of a user with no account row: the row is
        // created as deleted, not yet committed.
        let worker = try PostgresConnection(conninfo: h.conninfo)
        _ = try worker.execute("BEGIN")
        _ = try worker.execute("INSERT INTO siwa.accounts (apple_sub, status, deleted_at) VALUES ($1, 'deleted', now())", [sub])
        let at = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(try h.notify(type: "future-type", sub: sub, email: email, eventTimeMillis: at).json?["status"]?.stringValue == "ignored")
        #expect(try h.scalar("SELECT email FROM siwa.events WHERE sub = $1", [sub]) == email, "the insert did not race")
        _ = try worker.execute("COMMIT")
        #expect(try h.eventually(15) { try h.eventsHolding(email, sub: sub) == 0 }, "the ignored event kept the deleted user's email")
    }

    @Test(
        "a receiver login that keeps its insert of an ignored event open does not stall the worker on that user; the sweep erases the email once it commits"
    )
    func ignoredInsertHeldOpen() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.held.0001", email = "held@example.com"
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        // The receiver's role inserts an event of a type siwa-notify does not know, for that
        // user, and holds its transaction open.
        let receiver = try PostgresConnection(conninfo: h.conninfo)
        _ = try receiver.execute("BEGIN; SET LOCAL ROLE siwa_receiver")
        let at = Int64(Date().timeIntervalSince1970 * 1000)
        _ = try receiver.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, status, claims)
            VALUES ('held-open-1', $1, $2, 'future-type', timestamptz 'epoch' + $3::bigint * interval '1 millisecond', $4,
                    'ignored', jsonb_build_object('events', jsonb_build_object('type', 'future-type', 'email', $4::text)))
            """, [S.clientID, sub, String(at), email])

        // Apple's deletion of that user applies meanwhile (no lock of the insert to wait for).
        #expect(try h.notify(type: "account-delete", sub: sub).status == 200)
        #expect(try h.eventually(20) { try h.accountStatus(sub) == "deleted" }, "the worker waited for the receiver's open transaction")
        _ = try receiver.execute("COMMIT")
        #expect(try h.eventually(15) { try h.eventsHolding(email, sub: sub) == 0 }, "the ignored event kept the deleted user's email")
    }

    @Test(
        "an ignored event (unknown type) keeps no email once its user is deleted: stored before the deletion, or arriving after it; after a new sign-in it keeps it"
    )
    func ignoredEventsOfDeletedUsers() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.ignored.0001"
        let before = "before@example.com", after = "after@example.com", back = "back@example.com"
        func holding(_ email: String) throws -> Int { try h.eventsHolding(email, sub: sub) }
        /// Waits for a batch of the worker that began after this call (another user's event applied).
        func nextBatch() throws {
            let other = "001234.ignored.other." + NotificationSigner.newJTI()
            #expect(try h.notify(type: "consent-revoked", sub: other).status == 200)
            #expect(try h.eventually { try h.accountStatus(other) == "consent_revoked" })
        }
        /// An event of a type siwa-notify does not know, carrying `email` (its own event time:
        /// the same one twice would be a duplicate); the receiver's answer.
        var sent = 0
        func ignored(_ email: String) throws -> String? {
            sent += 1
            let at = Int64(Date().timeIntervalSince1970 * 1000) + Int64(sent)
            return try h.notify(type: "future-type", sub: sub, email: email, eventTimeMillis: at).json?["status"]?.stringValue
        }
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try ignored(before) == "ignored")
        #expect(try holding(before) == 1)

        // Stored before the deletion: erased when it applies.
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })
        #expect(try holding(before) == 0)
        // Arriving after it: never applied, erased all the same (no later than the next batch).
        #expect(try ignored(after) == "ignored")
        try nextBatch()
        #expect(try holding(after) == 0, "an ignored event of a deleted user kept its email")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = $1 AND status = 'ignored'", [sub]) == "2")

        // A sign-in newer than the deletion is a new account: its ignored events keep their email.
        untilNextSecond()
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        #expect(try ignored(back) == "ignored")
        try nextBatch()
        #expect(try h.scalar("SELECT email FROM siwa.events WHERE sub = $1 AND status = 'ignored' ORDER BY id DESC LIMIT 1", [sub]) == back)
        #expect(try holding(back) == 1)
    }

    @Test(
        "consent-revoked for app A, then a newer sign-in to A: A active again (B never touched); an older consent-revoked arriving later changes nothing"
    )
    func signInAfterConsentRevoked() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.consent.0001"
        func app(_ aud: String) throws -> String? {
            try h.scalar("SELECT status FROM siwa.app_accounts WHERE apple_sub = $1 AND aud = $2", [sub, aud])
        }
        try h.signIn(sub: sub, clientID: S.clientID)
        try h.signIn(sub: sub, clientID: S.otherClientID)
        #expect(try h.eventually { try app(S.clientID) == "active" && app(S.otherClientID) == "active" })

        // Apple: the user stopped using Apple sign-in with app A.
        let revokedAt = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(try h.notify(type: "consent-revoked", sub: sub, eventTimeMillis: revokedAt).status == 200)
        #expect(try h.eventually { try app(S.clientID) == "consent_revoked" })
        #expect(try app(S.otherClientID) == "active" && h.accountStatus(sub) == "active", "app B and the user are untouched")

        // The user signs in to app A again (auth_time has one-second precision: a later second).
        untilNextSecond()
        try h.signIn(sub: sub, clientID: S.clientID)
        #expect(try h.eventually { try app(S.clientID) == "active" })
        let session = try h.scalar("INSERT INTO siwa.sessions (apple_sub, aud) VALUES ($1, $2) RETURNING id", [sub, S.clientID])

        // An older consent-revoked of app A (a delayed retry of Apple's) arrives after the sign-in.
        #expect(try h.notify(type: "consent-revoked", sub: sub, eventTimeMillis: revokedAt - 500).status == 200)
        #expect(
            try h.eventually {
                try h.scalar("SELECT status FROM siwa.events WHERE type = 'consent-revoked' AND sub = $1 ORDER BY id DESC LIMIT 1", [sub]) == "done"
            })
        #expect(
            try h.scalar("SELECT outcome FROM siwa.events WHERE type = 'consent-revoked' AND sub = $1 ORDER BY id DESC LIMIT 1", [sub]) == "stale")
        #expect(try app(S.clientID) == "active" && app(S.otherClientID) == "active" && h.accountStatus(sub) == "active")
        #expect(try h.scalar("SELECT revoked_at IS NULL FROM siwa.sessions WHERE id = $1", [session]) == "t", "the new session survives")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "2", "both apps' grants kept")
    }

    @Test("a sign-in stored before the deletion took effect is revoked with it")
    func signInBeforeDeletionIsRevoked() throws {
        let h = try H(roles: .receive)  // no worker yet: the deletion takes effect when one starts
        defer { h.stop() }
        let sub = "001234.before.0001"
        let token = try h.signIn(sub: sub)
        untilNextSecond()
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        let worker = Application(
            configuration: h.app.configuration, roles: .work, options: TestHarness.options(retryBaseDelay: 0.2),
            logger: TestHarness.logger(into: LogSink.capturing()))
        try worker.start()
        defer { worker.shutdown() }
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(h.fake.revokedTokens == [token])
        #expect(try h.accountStatus(sub) == "deleted")
    }

    @Test("Apple hangs on a revocation: 1,000 notifications are applied meanwhile at the usual speed")
    func notificationsNeverWaitForApple() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.hang.0001"
        try h.signIn(sub: sub)
        h.fake.answerRevoke(.hang)
        _ = try h.query("SELECT siwa.request_deletion($1)", [sub])
        #expect(h.eventually { h.fake.hungCalls == 1 })
        let started = Date()
        // Four clients, as Apple sends them (the held call times out after 10 s: the 1,000 must be in well before).
        let accepted = Atomic<Int>(0)
        let clients = (0..<4).map { client in
            let done = WakeSignal()
            Thread {
                for k in stride(from: client, to: 1000, by: 4) where (try? h.notify(type: "consent-revoked", sub: "001234.crowd.\(k)"))?.status == 200
                {
                    accepted.add(1, ordering: .relaxed)
                }
                done.stop()
            }.start()
            return done
        }
        #expect(clients.allSatisfy { $0.wait(for: .seconds(60)) })
        #expect(accepted.load(ordering: .relaxed) == 1000)
        #expect(
            try h.eventually(30) {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'consent-revoked' AND status = 'done'") == "1000"
            })
        let seconds = Date().timeIntervalSince(started)
        // All applied WHILE Apple still held the revocation: the call has not been answered (nor
        // timed out and retried) and its job is still running. A loop shared with the revocations
        // would have applied nothing until the call's 10 s timeout.
        let held = h.fake.hungCalls, calls = h.fake.calls(to: "/auth/revoke").count
        let job = try h.revocations(sub)
        #expect(held == 1 && calls == 1, "Apple held \(held) calls, \(calls) made: the call ended before the notifications were applied")
        #expect(job == ["running"], "\(job)")
        print(
            "1,000 consent-revoked posted and applied in \(String(format: "%.2f", seconds)) s while Apple held a revocation "
                + "(still held: \(held), revocation \(job.first ?? "-"))")
        // Each hung call times out after 10 s and is retried: never more than one at a time for one token.
        #expect(h.fake.hungCalls >= 1 && h.fake.calls(to: "/auth/revoke").count <= Int(Date().timeIntervalSince(started) / 10) + 2)
        #expect(try h.accountStatus(sub) == "deleted")
    }

    // MARK: g. Bad keys and partial configuration

    @Test("a bad .p8, a bad token key or a partial configuration stops serve and work with one line naming the variable")
    func badKeysStopTheStart() throws {
        let conninfo = try TestDatabase.create()
        let dir = NSTemporaryDirectory() + "siwa-badkeys-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        openssl.arguments = ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", dir + "/p384.p8"]
        try openssl.run()
        openssl.waitUntilExit()
        #expect(openssl.terminationStatus == 0)
        try RSAPrivateKey.generate(bits: 2048).pemRepresentation.write(toFile: dir + "/rsa.p8", atomically: true, encoding: .utf8)
        try "this is not a key\n".write(toFile: dir + "/garbage.p8", atomically: true, encoding: .utf8)
        try S.teamKey.pkcs8PEM().write(toFile: dir + "/good.p8", atomically: true, encoding: .utf8)
        try (SHA256.hex(SecureRandom.bytes(32)) + "\n").write(toFile: dir + "/token.key", atomically: true, encoding: .utf8)
        try "a-password-of-32-characters-----".write(toFile: dir + "/weak.key", atomically: true, encoding: .utf8)
        try "{\"keys\":[]}".write(toFile: dir + "/jwks.json", atomically: true, encoding: .utf8)
        let base = [
            "SIWA_DATABASE_URL": conninfo, "SIWA_AUDIENCES": S.clientID, "SIWA_DATA_DIR": dir,
            "SIWA_JWKS_URL": "file://\(dir)/jwks.json", "SIWA_LISTEN": "127.0.0.1:0", "SIWA_ADMIN_LISTEN": "127.0.0.1:0",
        ]
        let apple = [
            "SIWA_TEAM_ID": S.teamID, "SIWA_KEY_ID": S.keyID, "SIWA_PRIVATE_KEY_FILE": dir + "/good.p8",
            "SIWA_TOKEN_KEY_FILE": dir + "/token.key",
        ]
        let cases: [(String, [String: String], String, String)] = [
            ("P-384 key", ["SIWA_PRIVATE_KEY_FILE": dir + "/p384.p8"], "SIWA_PRIVATE_KEY_FILE", "wrong_curve"),
            ("RSA key", ["SIWA_PRIVATE_KEY_FILE": dir + "/rsa.p8"], "SIWA_PRIVATE_KEY_FILE", "rsa_key"),
            ("garbage", ["SIWA_PRIVATE_KEY_FILE": dir + "/garbage.p8"], "SIWA_PRIVATE_KEY_FILE", "not_pem"),
            ("missing file", ["SIWA_PRIVATE_KEY_FILE": dir + "/absent.p8"], "SIWA_PRIVATE_KEY_FILE", "unreadable_file"),
            ("weak token key", ["SIWA_TOKEN_KEY_FILE": dir + "/weak.key"], "SIWA_TOKEN_KEY_FILE", "weak_key"),
        ]
        for command in ["serve", "work"] {
            for (name, change, variable, reason) in cases {
                let env = base.merging(apple.merging(change) { _, new in new }) { _, new in new }
                let result = try OperatorCommandTests.run([command], environment: env)
                #expect(result.status != 0, "\(command) with a \(name) started")
                let lines = result.output.split(separator: "\n").filter { $0.contains(variable) }
                #expect(lines.count == 1, "\(command), \(name): \(result.output)")
                #expect(lines.first?.contains(reason) == true, "\(command), \(name): \(result.output)")
                if let pem = try? String(contentsOfFile: change["SIWA_PRIVATE_KEY_FILE"] ?? "/nonexistent", encoding: .utf8),
                    let material = pem.split(separator: "\n").dropFirst().first
                {
                    #expect(!result.output.contains(material), "no key material in the output")
                }
            }
            // Only SIWA_TEAM_ID: the first missing variable is named.
            let partial = try OperatorCommandTests.run([command], environment: base.merging(["SIWA_TEAM_ID": S.teamID]) { _, n in n })
            #expect(partial.status != 0)
            let lines = partial.output.split(separator: "\n").filter { $0.contains("SIWA_KEY_ID") }
            #expect(
                lines.count == 1 && lines.first?.contains("is required for app-initiated deletion") == true,
                "\(command): \(partial.output)")
        }
        // The same keys, all good: the worker starts.
        let good = try ServerProcess(["work"], environment: base.merging(apple) { _, n in n })
        #expect(good.waitForLog("worker started"), "\(good.log)")
        #expect(good.log.contains("in-app deletion on"))
        #expect(good.terminate() == 0)
    }

    // MARK: dev-apple

    @Test("dev-apple + serve --dev with the printed environment: exchange a code, `revoke`, the account is deleted")
    func devAppleWithServeDev() throws {
        let sub = "000000.devapple.0001"
        let session = try DevAppleSession(sub: sub)
        let (apple, server, printed, conninfo) = (session.apple, session.server, session.printed, session.conninfo)
        #expect(Set(printed.keys) == ["SIWA_TEAM_ID", "SIWA_KEY_ID", "SIWA_PRIVATE_KEY_FILE", "SIWA_TOKEN_KEY_FILE", "SIWA_APPLE_URL"])
        #expect(FileManager.default.fileExists(atPath: printed["SIWA_PRIVATE_KEY_FILE"] ?? "/nonexistent"))
        #expect(FileManager.default.fileExists(atPath: printed["SIWA_TOKEN_KEY_FILE"] ?? "/nonexistent"))
        #expect(FileManager.default.fileExists(atPath: DevKey.path(dataDirectory: session.directory)))
        #expect(server.log.contains("in-app deletion on"))
        #expect(server.log.contains("DEVELOPMENT API TOKEN"))

        let reply = try session.signIn()
        #expect(reply.status == 200, "\(reply.body) \(server.log)")
        #expect(reply.json?["sub"]?.stringValue == sub)
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.apple_tokens").scalar == "1")
        untilNextSecond()  // the deletion after the sign-in's second

        let operatorEnv = session.environment.merging(["SIWA_DATABASE_URL": conninfo]) { _, n in n }
        let revoked = try OperatorCommandTests.run(["revoke", "--sub", sub], environment: operatorEnv)
        #expect(revoked.status == 0 && revoked.output.contains("queued 1 deletion"), "\(revoked.output)")
        #expect(
            try eventually(timeout: 30) {
                try TestDatabase.query(conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar == "deleted"
            }, "\(server.log)")
        #expect(eventually { apple.stdout.contains("POST /auth/revoke 200") })
        #expect(apple.stdout.contains("(refresh token revoked)"))
        #expect(apple.stdout.contains("sub_hash=\(SubjectHash.of(sub))") && !apple.stdout.contains(sub))
        let stopped = session.stop()
        #expect(stopped.server == 0 && stopped.apple == 0)
    }

    @Test("README's missed notifications, locally: dev-apple revokes a grant without notifying, serve --dev finds it by reconciliation")
    func devAppleMissedNotification() throws {
        let sub = "000000.devapple.0002"
        let session = try DevAppleSession(sub: sub, serveEnvironment: ["SIWA_RECONCILE_EVERY": "5s"])
        let (apple, server, conninfo) = (session.apple, session.server, session.conninfo)
        #expect(server.waitForLog("reconciliation on"), "\(server.log)")
        let appleURL = try #require(session.printed["SIWA_APPLE_URL"])
        #expect(apple.stdout.contains("curl -d sub=SUB \(appleURL)/dev/revoke-grant"))
        #expect(try session.signIn().status == 200, "\(server.log)")
        _ = try TestDatabase.query(
            conninfo, "INSERT INTO siwa.sessions (apple_sub, aud, created_at) VALUES ($1, $2, now())", [sub, ServerConfiguration.devAudience])

        // The user stops using Apple sign-in; Apple's notification never comes.
        let revoked = try DeletionHarness.post(
            appleURL + "/dev/revoke-grant", json: "sub=\(sub)", contentType: "application/x-www-form-urlencoded")
        #expect(revoked.status == 200 && revoked.body == #"{"revoked_tokens":1}"#, "\(revoked.body)")
        let started = Date()
        let found = try eventually(timeout: 40) {
            try TestDatabase.query(conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar == "consent_revoked"
        }
        #expect(found, "\(server.log)")
        print("missed notification found by reconciliation \(Date().timeIntervalSince(started)) s after the grant was revoked")
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NULL").scalar == "0")
        #expect(apple.stdout.contains("POST /dev/revoke-grant 200") && apple.stdout.contains("error=invalid_grant"))
        #expect(!apple.stdout.contains(sub))
        let status = try OperatorCommandTests.run(
            ["status"], environment: session.environment.merging(["SIWA_DATABASE_URL": conninfo]) { _, n in n })
        let gone = status.output.split(separator: "\n").first { $0.hasPrefix("reconcile: grants gone") }
        #expect(gone?.split(separator: " ").last == "1", "\(status.output)")
        let stopped = session.stop()
        #expect(stopped.server == 0 && stopped.apple == 0)
    }
}
