import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import Testing

/// App-initiated deletion end to end: the code exchange on the admin listener, `request_deletion`,
/// the worker's revocation at (a fake) Apple over real HTTP, retries, dead letters, replay, a
/// worker killed mid-call, bad keys at start, and `dev-apple` with `serve --dev`.
@Suite("In-app deletion", .serialized, .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
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

    // MARK: a. Code exchange

    @Test("POST /apple/tokens: admin listener only, verified claims, encrypted token, every refusal")
    func exchange() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.exchange.0001", email = "x7@privaterelay.appleid.com"
        let code = Self.code()
        h.fake.addCode(
            code,
            user: .init(
                sub: sub, email: email, isPrivateEmail: true, nonce: "n-1",
                redirectURI: "https://app.example/cb"))
        let body = H.exchangeBody(code: code, redirectURI: "https://app.example/cb", nonce: "n-1")

        // The public listener does not know the path; nothing reaches Apple.
        let onPublic = try H.post(h.baseURL + "/apple/tokens", json: body)
        #expect(onPublic.status == 404)
        #expect(h.fake.calls(to: "/auth/token").isEmpty)

        let reply = try H.post(h.adminURL + "/apple/tokens", json: body)
        #expect(reply.status == 200, "\(reply.body)")
        let json = try #require(reply.json)
        #expect(json["sub"]?.stringValue == sub && json["email"]?.stringValue == email)
        #expect(json["is_private_email"]?.boolValue == true && json["email_verified"]?.boolValue == true)
        let form = try #require(h.fake.calls(to: "/auth/token").last?.form)
        #expect(form["code"] == code && form["client_id"] == S.clientID && form["grant_type"] == "authorization_code")
        #expect(form["redirect_uri"] == "https://app.example/cb")
        #expect(h.fake.calls(to: "/auth/token").last?.secretProblem == nil)

        // One row, encrypted with the current token key; the token's bytes are nowhere in it.
        let token = try #require(h.fake.issuedRefreshTokens.first?.key)
        let rows = try h.query(
            """
            SELECT apple_sub, client_id, key_id, position(convert_to($1, 'UTF8') IN ciphertext) AS at,
                   length(ciphertext) AS bytes
            FROM siwa.apple_tokens
            """, [token])
        #expect(rows.rows.count == 1)
        #expect(rows.value(0, "apple_sub") == sub && rows.value(0, "client_id") == S.clientID)
        #expect(rows.value(0, "key_id") == h.tokenKey.id)
        #expect(rows.value(0, "at") == "0")
        #expect(Int(rows.value(0, "bytes") ?? "0")! > token.utf8.count)
        let account = try h.query("SELECT status, email, is_private_email FROM siwa.accounts WHERE apple_sub = $1", [sub])
        #expect(account.rows.count == 1 && account.value(0, "status") == "active" && account.value(0, "email") == email)
        #expect(account.value(0, "is_private_email") == "t")

        // A second sign-in of the same user replaces the token, the account stays one.
        let again = Self.code()
        h.fake.addCode(again, user: .init(sub: sub, email: email))
        #expect(try h.exchange(code: again).status == 200)
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "1")
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts") == "1")

        // Refusals.
        let wrongNonce = Self.code()
        h.fake.addCode(wrongNonce, user: .init(sub: sub, nonce: "n-2"))
        let nonceReply = try h.exchange(code: wrongNonce, nonce: "n-other")
        #expect(nonceReply.status == 502 && nonceReply.error == "invalid_id_token")
        let unknownCode = Self.code()
        let refused = try h.exchange(code: unknownCode)
        #expect(refused.status == 400 && refused.body == #"{"error":"invalid_grant"}"#)
        let tokenCalls = h.fake.calls(to: "/auth/token").count
        let unknownClient = try h.exchange(code: Self.code(), clientID: "com.example.unknown")
        #expect(unknownClient.status == 400 && unknownClient.error == "unknown_client_id")
        #expect(try H.post(h.adminURL + "/apple/tokens", json: "{").error == "malformed_json")
        #expect(try H.post(h.adminURL + "/apple/tokens", json: #"{"client_id":"\#(S.clientID)"}"#).error == "missing_code")
        #expect(h.fake.calls(to: "/auth/token").count == tokenCalls, "refused before calling Apple")
        h.fake.answerToken(.invalidClient)
        let badClient = try h.exchange(code: Self.code())
        #expect(badClient.status == 502 && badClient.error == "invalid_client")
        h.fake.answerToken(.status(503, #"{"error":"temporarily_unavailable"}"#))
        let unavailable = try h.exchange(code: Self.code())
        #expect(unavailable.status == 502 && unavailable.error == "apple_unavailable")

        // Apple hangs: the client's timeout (10 s), then 502.
        h.fake.answerToken(.hang)
        let hung = try h.exchange(code: Self.code())
        #expect(hung.status == 502 && hung.error == "apple_unavailable")
        #expect(h.fake.hungCalls == 1)

        // The dashboard role cannot read the tokens.
        let connection = try PostgresConnection(conninfo: h.conninfo)
        _ = try connection.execute("SET ROLE siwa_dashboard")
        do {
            _ = try connection.execute("SELECT ciphertext FROM siwa.apple_tokens")
            Issue.record("siwa_dashboard read siwa.apple_tokens")
        } catch {
            #expect(error.sqlState == "42501")
        }

        // Apple unreachable.
        h.fake.stop()
        let unreachable = try h.exchange(code: Self.code())
        #expect(unreachable.status == 502 && unreachable.error == "apple_unavailable")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "1")

        Self.expectNothingSecret(
            in: h.logText, fake: h.fake, codes: [code, again, wrongNonce, unknownCode],
            subs: [sub], emails: [email])
        #expect(h.logText.contains("authorization code exchanged, refresh token stored"))
    }

    // MARK: b. Revocation

    @Test("request_deletion: one revocation at Apple, the account deleted like account-delete, later notifications are no-ops")
    func revoke() throws {
        let h = try H()
        defer { h.stop() }
        try h.installLoggingHook()
        let sub = "001234.revoke.0001", email = "revoke.me@example.com"
        let token = try h.signIn(sub: sub, email: email)
        // An email event puts the address in the outbox too; a session of the user.
        #expect(try h.notify(type: "email-disabled", sub: sub, email: email).status == 200)
        #expect(try eventually { try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "1" })
        let session = try h.scalar(
            """
            INSERT INTO siwa.sessions (apple_sub, expires_at) VALUES ($1, now() + interval '30 days') RETURNING id
            """, [sub])

        // The app's own delete and the request share a transaction: rolled back, nothing is queued.
        let app = try PostgresConnection(conninfo: h.conninfo)
        _ = try app.execute("BEGIN")
        #expect(try app.execute("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID]).scalar == "1")
        _ = try app.execute("ROLLBACK")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'deletion-requested'") == "0")
        _ = try app.execute("BEGIN")
        _ = try app.execute("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        _ = try app.execute("COMMIT")

        #expect(try eventually { try h.jobStatus(sub) == "done" })
        let revokes = h.fake.calls(to: "/auth/revoke")
        #expect(revokes.count == 1)
        #expect(revokes.first?.status == 200 && revokes.first?.secretProblem == nil)
        #expect(revokes.first?.form?["token"] == token && revokes.first?.form?["token_type_hint"] == "refresh_token")
        #expect(revokes.first?.form?["client_id"] == S.clientID)
        #expect(h.fake.revokedTokens == [token])

        let account = try h.query("SELECT status, email, deleted_at IS NOT NULL AS stamped FROM siwa.accounts WHERE apple_sub = $1", [sub])
        #expect(account.value(0, "status") == "deleted" && account.value(0, "email") == nil && account.value(0, "stamped") == "t")
        #expect(try h.scalar("SELECT revoked_at IS NOT NULL FROM siwa.sessions WHERE id = $1", [session]) == "t")
        #expect(
            try h.scalar(
                """
                SELECT count(*) FROM siwa.events WHERE sub = $1 AND (email IS NOT NULL OR position($2 IN claims::text) > 0)
                """, [sub, email]) == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "0")
        let job = try h.query("SELECT outcome, attempts, last_error FROM siwa.events WHERE type = 'deletion-requested'")
        #expect(job.value(0, "outcome") == "applied" && job.value(0, "attempts") == "1" && job.value(0, "last_error") == nil)
        let hook = try h.query("SELECT outcome, account_status FROM hook_log WHERE type = 'deletion-requested'")
        #expect(hook.rows.count == 1 && hook.value(0, "outcome") == "applied" && hook.value(0, "account_status") == "deleted")

        // Apple's own notifications for that user afterwards: applied as no-ops.
        #expect(try h.notify(type: "account-delete", sub: sub).status == 200)
        #expect(try h.notify(type: "consent-revoked", sub: sub).status == 200)
        #expect(
            try eventually {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE type IN ('account-delete', 'consent-revoked') AND status = 'done'") == "2"
            })
        #expect(
            try h.scalar(
                """
                SELECT string_agg(DISTINCT outcome, ',') FROM siwa.events WHERE type IN ('account-delete', 'consent-revoked')
                """) == "final_deleted")
        #expect(h.fake.calls(to: "/auth/revoke").count == 1)
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")

        Self.expectNothingSecret(in: h.logText, fake: h.fake, subs: [sub], emails: [email])
        #expect(h.logText.contains("deletion applied: Apple tokens revoked, account deleted"))
    }

    @Test("POST /apple/refresh-tokens: a token the backend obtained itself is stored encrypted and revoked at deletion")
    func handOver() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.handover.0001", refresh = "r.handed-over." + NotificationSigner.newJTI()
        let url = h.adminURL + TokenExchange.handoverPath
        // Refusals first: nothing stored.
        #expect(try H.post(url, json: "{").error == "malformed_json")
        #expect(try H.post(url, json: #"{"sub":"\#(sub)","client_id":"com.other","refresh_token":"x"}"#).error == "unknown_client_id")
        #expect(try H.post(url, json: #"{"sub":"\#(sub)","client_id":"\#(S.clientID)"}"#).error == "missing_refresh_token")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        let reply = try H.post(
            url, json: #"{"sub":"\#(sub)","client_id":"\#(S.clientID)","refresh_token":"\#(refresh)","email":"h@example.com"}"#)
        #expect(reply.status == 200 && reply.json?["stored"]?.stringValue == "created")
        #expect(
            try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1 AND position($2::bytea in ciphertext) = 0", [sub, refresh])
                == "1")
        // Revocation at deletion sends it to Apple.
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try eventually { try h.jobStatus(sub) == "done" })
        #expect(h.fake.calls(to: "/auth/revoke").last?.form?["token"] == refresh)
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "0")
        // A deleted account takes no new token.
        let again = try H.post(url, json: #"{"sub":"\#(sub)","client_id":"\#(S.clientID)","refresh_token":"r.later"}"#)
        #expect(again.json?["stored"]?.stringValue == "deleted")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "0")
        // Not stored, so no job would ever revoke it: it is revoked at Apple at once.
        #expect(h.fake.calls(to: "/auth/revoke").last?.form?["token"] == "r.later")
    }

    @Test("a stored token of a client id no longer in SIWA_AUDIENCES: dead unknown_client_id, Apple not called")
    func unknownClientID() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.removed.0001"
        _ = try h.query(
            "INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) VALUES ($1, 'com.example.removed', 'k', '\\x00')",
            [sub])
        _ = try h.query("SELECT siwa.request_deletion($1, 'com.example.removed')", [sub])
        #expect(try eventually { try h.jobStatus(sub) == "dead" })
        #expect(try h.scalar("SELECT last_error FROM siwa.events WHERE sub = $1", [sub])?.hasPrefix("unknown_client_id") == true)
        #expect(h.fake.calls(to: "/auth/revoke").isEmpty)
    }

    @Test("request_deletion(sub) without aud revokes the token of every client id once, and the account is deleted once")
    func everyClientID() throws {
        let h = try H()
        defer { h.stop() }
        try h.installLoggingHook()
        let sub = "001234.two-apps.0001"
        let first = try h.signIn(sub: sub, clientID: S.clientID)
        let second = try h.signIn(sub: sub, clientID: S.otherClientID)
        #expect(try h.scalar("SELECT siwa.request_deletion($1)", [sub]) == "2")
        #expect(
            try eventually {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'deletion-requested' AND status = 'done'") == "2"
            })
        #expect(Set(h.fake.revokedTokens) == [first, second] && h.fake.revokedTokens.count == 2)
        #expect(Set(h.fake.calls(to: "/auth/revoke").compactMap { $0.form?["client_id"] }) == [S.clientID, S.otherClientID])
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        #expect(try h.scalar("SELECT string_agg(outcome, ',' ORDER BY outcome) FROM hook_log") == "applied,final_deleted")
        #expect(try h.scalar("SELECT count(*) FROM siwa.dead_letters") == "0")
    }

    // MARK: c. Transient failure

    @Test("Apple answers 503, then 200: failed with last_error, retried, applied once")
    func retriedAfter503() throws {
        let h = try H(retryBaseDelay: 0.3)
        defer { h.stop() }
        try h.installLoggingHook()
        let sub = "001234.retry.0001"
        let token = try h.signIn(sub: sub)
        h.fake.answerRevoke(.status(503, #"{"error":"temporarily_unavailable"}"#))
        _ = try h.scalar("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try eventually { try h.jobStatus(sub) == "failed" })
        let error = try h.scalar("SELECT last_error FROM siwa.events WHERE type = 'deletion-requested'") ?? ""
        #expect(error.hasPrefix("transient: http_503 (HTTP 503)"), "\(error)")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "active")
        h.fake.answerRevoke(.normal)
        #expect(try eventually { try h.jobStatus(sub) == "done" })

        let revokes = h.fake.calls(to: "/auth/revoke")
        #expect(revokes.filter { $0.status == 200 }.count == 1)
        #expect(revokes.last?.status == 200 && revokes.dropLast().allSatisfy { $0.status == 503 })
        #expect(h.fake.revokedTokens == [token])
        #expect(try h.scalar("SELECT attempts FROM siwa.events WHERE type = 'deletion-requested'") == String(revokes.count))
        #expect(try h.scalar("SELECT count(*) FROM hook_log WHERE type = 'deletion-requested'") == "1")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")
        Self.expectNothingSecret(in: h.logText, fake: h.fake, subs: [sub])
        #expect(h.logText.contains("deletion failed, will retry"))
    }

    @Test("the operator's hook raises on the deletion: the job fails with its error, retried with backoff (attempts counted), then applied once")
    func hookRaisesOnDeletion() throws {
        let h = try H(retryBaseDelay: 0.3)
        defer { h.stop() }
        _ = try h.query("CREATE TABLE hook_gate (open boolean NOT NULL); INSERT INTO hook_gate VALUES (false);")
        _ = try h.query(
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                IF event.type = 'deletion-requested' AND NOT (SELECT open FROM hook_gate) THEN
                    RAISE EXCEPTION 'operator table is locked';
                END IF;
            END $$;
            """)
        let sub = "001234.hook.0001"
        _ = try h.signIn(sub: sub)
        _ = try h.scalar("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try eventually { try h.jobStatus(sub) == "failed" })
        let error = try h.scalar("SELECT last_error FROM siwa.events WHERE type = 'deletion-requested'") ?? ""
        #expect(error.contains("operator table is locked"), "\(error)")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "active")
        // Retried with backoff, not claimed again at once: after 1 s, a handful of attempts at most.
        Thread.sleep(forTimeInterval: 1)
        let attempts = Int(try h.scalar("SELECT attempts FROM siwa.events WHERE type = 'deletion-requested'") ?? "") ?? 0
        #expect((1...4).contains(attempts), "\(attempts) attempts in ~1 s")
        #expect(!h.logText.contains("worker database error"), "the hook's error broke the batch")
        _ = try h.query("UPDATE hook_gate SET open = true")
        #expect(try eventually { try h.jobStatus(sub) == "done" })
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "0")
    }

    // MARK: d. Permanent failure, dead letter, replay

    @Test("invalid_client: dead with a clear last_error in dead_letters, status and /metrics; replay applies it")
    func invalidClientDeadThenReplay() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.dead.0001"
        let token = try h.signIn(sub: sub)
        h.fake.answerRevoke(.invalidClient)
        _ = try h.scalar("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try eventually { try h.jobStatus(sub) == "dead" })
        #expect(h.fake.calls(to: "/auth/revoke").count == 1, "a permanent refusal is not retried")

        let dead = try h.query("SELECT type, sub_hash, attempts, last_error FROM siwa.dead_letters")
        #expect(dead.rows.count == 1 && dead.value(0, "type") == "deletion-requested" && dead.value(0, "attempts") == "1")
        #expect(dead.value(0, "sub_hash") == SubjectHash.of(sub))
        let lastError = dead.value(0, "last_error") ?? ""
        #expect(
            lastError.hasPrefix("invalid_client: Apple refused the client authentication (check SIWA_TEAM_ID, SIWA_KEY_ID"),
            "\(lastError)")
        #expect(lastError.contains(S.clientID))

        let report = try OutboxAdmin.status(conninfo: h.conninfo, inAppDeletion: true)
        #expect(report.deletionJobsDead == 1 && report.deletionJobsWaiting == 0 && report.dead == 1)
        #expect(OutboxAdmin.render(report).split(separator: "\n").contains { $0.hasPrefix("in-app deletion") && $0.hasSuffix(" on") })
        #expect(OutboxAdmin.render(report).split(separator: "\n").contains { $0.hasPrefix("deletion jobs dead") && $0.hasSuffix(" 1") })
        let metrics = try h.admin("/metrics").body
        #expect(metrics.contains("siwa_outbox_dead 1\n"))
        #expect(metrics.contains(#"siwa_events_total{outcome="dead",type="deletion-requested"} 1"#))
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "active")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "1")

        // Configuration fixed: replay by type, and it applies.
        h.fake.answerRevoke(.normal)
        #expect(try OutboxAdmin.replay(.type("deletion-requested"), conninfo: h.conninfo) == 1)
        #expect(try eventually { try h.jobStatus(sub) == "done" })
        #expect(h.fake.revokedTokens == [token])
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")
        #expect(try OutboxAdmin.status(conninfo: h.conninfo, inAppDeletion: true).deletionJobsDead == 0)
        #expect(try h.admin("/metrics").body.contains(#"siwa_events_total{outcome="applied",type="deletion-requested"} 1"#))
        Self.expectNothingSecret(in: h.logText, fake: h.fake, subs: [sub])
        #expect(h.logText.contains("deletion dead-lettered"))
    }

    // MARK: e. Missing token

    @Test("no stored token: dead missing_token; none needed once Apple deleted the account")
    func missingToken() throws {
        let h = try H()
        defer { h.stop() }
        let unknown = "001234.never-signed-in.0001"
        #expect(try h.scalar("SELECT siwa.request_deletion($1)", [unknown]) == "1")
        #expect(try h.scalar("SELECT siwa.request_deletion($1, $2)", [unknown, S.clientID]) == "1")
        #expect(
            try eventually {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'deletion-requested' AND status = 'dead'") == "2"
            })
        let errors = try h.query("SELECT last_error FROM siwa.dead_letters ORDER BY id")
        #expect(errors.rows.count == 2)
        for row in 0..<errors.rows.count {
            #expect(errors.value(row, "last_error")?.hasPrefix("missing_token: no refresh token is stored") == true)
        }
        #expect(h.fake.calls(to: "/auth/revoke").isEmpty)
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE apple_sub = $1", [unknown]) == "0")

        // Apple's account-delete erases the token; a later request has nothing to revoke: done, final_deleted.
        let gone = "001234.deleted-at-apple.0001"
        try h.signIn(sub: gone)
        #expect(try h.notify(type: "account-delete", sub: gone).status == 200)
        #expect(try eventually { try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [gone]) == "deleted" })
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [gone]) == "0")
        _ = try h.scalar("SELECT siwa.request_deletion($1, $2)", [gone, S.clientID])
        #expect(try eventually { try h.jobStatus(gone) == "done" })
        #expect(try h.scalar("SELECT outcome FROM siwa.events WHERE type = 'deletion-requested' AND sub = $1", [gone]) == "final_deleted")
        #expect(h.fake.calls(to: "/auth/revoke").isEmpty)
    }

    // MARK: f. kill -9 mid-call

    @Test("kill -9 of a work process while Apple holds the revoke call: the next worker applies it exactly once")
    func killedMidCall() throws {
        // The in-process half only exchanges codes (no worker); the real binary revokes.
        let h = try H(roles: .receive)
        defer { h.stop() }
        try h.installLoggingHook()
        let sub = "001234.kill.0001"
        let token = try h.signIn(sub: sub, email: "kill@example.com")
        h.fake.answerRevoke(.hang)
        _ = try h.scalar("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])

        let first = try ServerProcess(["work"], environment: h.environment)
        #expect(first.waitForLog("worker started"), "\(first.log)")
        // Precondition: the worker is inside the call when it dies.
        #expect(eventually(timeout: 30) { h.fake.hungCalls == 1 }, "the fake never received the revoke call: \(first.log)")
        #expect(h.fake.calls(to: "/auth/revoke").first?.form?["token"] == token)
        first.kill9()
        #expect(try h.jobStatus(sub) == "pending")
        #expect(try h.scalar("SELECT attempts FROM siwa.events WHERE type = 'deletion-requested'") == "0")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "active")
        #expect(try h.scalar("SELECT count(*) FROM hook_log") == "0")

        h.fake.answerRevoke(.normal)
        let second = try ServerProcess(["work"], environment: h.environment)
        #expect(try eventually(timeout: 30) { try h.jobStatus(sub) == "done" }, "\(second.log)")
        #expect(second.terminate() == 0)

        let job = try h.query("SELECT attempts, outcome FROM siwa.events WHERE type = 'deletion-requested'")
        #expect(job.value(0, "attempts") == "1" && job.value(0, "outcome") == "applied")
        #expect(try h.scalar("SELECT count(*) FROM hook_log WHERE type = 'deletion-requested'") == "1")
        #expect(try h.scalar("SELECT count(*) FROM hook_log") == "1")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "deleted")
        #expect(h.fake.calls(to: "/auth/revoke").map(\.status) == [0, 200])
        #expect(h.fake.revokedTokens == [token])
        Self.expectNothingSecret(in: first.log + second.log, fake: h.fake, subs: [sub], emails: ["kill@example.com"])
        #expect(second.log.contains("deletion applied"))
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
        let dir = NSTemporaryDirectory() + "siwa-devapple-\(UInt64.random(in: 0...UInt64.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sub = "000000.devapple.0001"
        let apple = try LineReadingProcess(["dev-apple", "--port", "0", "--sub", sub], environment: ["SIWA_DATA_DIR": dir])
        defer { _ = apple.terminate() }
        #expect(eventually(timeout: 30) { apple.stdout.contains("export SIWA_APPLE_URL=") }, "\(apple.stdout) \(apple.stderr)")
        var printed: [String: String] = [:]
        for line in apple.stdout.split(separator: "\n") where line.hasPrefix("export ") {
            let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { printed[String(pair[0])] = String(pair[1]) }
        }
        #expect(Set(printed.keys) == ["SIWA_TEAM_ID", "SIWA_KEY_ID", "SIWA_PRIVATE_KEY_FILE", "SIWA_TOKEN_KEY_FILE", "SIWA_APPLE_URL"])
        #expect(FileManager.default.fileExists(atPath: printed["SIWA_PRIVATE_KEY_FILE"] ?? "/nonexistent"))
        #expect(FileManager.default.fileExists(atPath: printed["SIWA_TOKEN_KEY_FILE"] ?? "/nonexistent"))
        #expect(FileManager.default.fileExists(atPath: DevKey.path(dataDirectory: dir)))

        // serve --dev runs on its embedded database only (under SIWA_DATA_DIR).
        let conninfo = "host=\(dir)/postgres/run port=5432 user=postgres dbname=postgres"
        let adminPort = ServerProcess.freePort()
        let env = printed.merging([
            "SIWA_DATA_DIR": dir, "SIWA_DATABASE_URL": "", "SIWA_LISTEN": "127.0.0.1:0",
            "SIWA_ADMIN_LISTEN": "127.0.0.1:\(adminPort)",
            "SIWA_JWKS_URL": (printed["SIWA_APPLE_URL"] ?? "") + "/auth/keys",
        ]) { _, new in new }
        let server = try ServerProcess(["serve", "--dev"], environment: env)
        #expect(server.waitForLog("worker started", timeout: 60), "\(server.log)")
        #expect(server.log.contains("in-app deletion on"))

        let reply = try H.post(
            "http://127.0.0.1:\(adminPort)/apple/tokens",
            json: H.exchangeBody(code: "any-code-at-all", clientID: ServerConfiguration.devAudience))
        #expect(reply.status == 200, "\(reply.body) \(server.log)")
        #expect(reply.json?["sub"]?.stringValue == sub)
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.apple_tokens").scalar == "1")

        let revoked = try OperatorCommandTests.run(["revoke", "--sub", sub], environment: env)
        #expect(revoked.status == 0 && revoked.output.contains("queued 1 deletion job"), "\(revoked.output)")
        #expect(
            try eventually(timeout: 30) {
                try TestDatabase.query(conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]).scalar == "deleted"
            }, "\(server.log)")
        #expect(eventually { apple.stdout.contains("POST /auth/revoke 200") })
        #expect(apple.stdout.contains("(refresh token revoked)"))
        #expect(apple.stdout.contains("sub_hash=\(SubjectHash.of(sub))") && !apple.stdout.contains(sub))
        #expect(server.terminate() == 0)
        #expect(apple.terminate() == 0)
    }
}
