import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaPostgres
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The sign-in API's edges (issue 30): a sign-in older than the user's deletion is not a user, a
/// handed-over token must be bound to its user by Apple, a short lock never loses a sign-in, and
/// SIGHUP never kills the process nor loads a half-written token file.
@Suite("Sign-in guards", .serialized, .needsDatabase)
struct SignInGuardTests {
    typealias S = AppleTestSetup
    typealias H = DeletionHarness

    static func handOverBody(_ token: String, _ idToken: String) -> String {
        JSONValue.object(["client_id": .string(S.clientID), "refresh_token": .string(token), "id_token": .string(idToken)]).serialized()
    }

    @Test("a code exchanged or a token handed over, signed in before the user's deletion: 409 account_deleted, not the user; its token revoked")
    func signInOlderThanTheDeletion() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.latecode.0001"
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })

        // A code the user got a minute ago, before deleting the account, exchanged only now.
        h.fake.setClock(S.wallClock() - 60)
        let code = "c." + NotificationSigner.newJTI()
        h.fake.addCode(code, user: .init(sub: sub, email: "late@privaterelay.appleid.com", isPrivateEmail: true))
        let pair = try h.fake.issueTokens(for: .init(sub: sub), clientID: S.clientID)
        let reply = try h.exchange(code: code)
        #expect(reply.status == 409 && reply.error == "account_deleted", "\(reply.status) \(reply.body)")
        #expect(!reply.body.contains(sub) && !reply.body.contains("late@"), "the answer names the user")
        h.fake.setClock(nil)
        let handed = try h.api(TokenExchange.handoverPath, json: Self.handOverBody(pair.refreshToken, pair.idToken))
        #expect(handed.status == 409 && handed.error == "account_deleted", "\(handed.status) \(handed.body)")
        // Both grants are queued for revocation; the account stays deleted, nothing stored.
        #expect(try h.scalar("SELECT count(*) FROM siwa.revocations WHERE apple_sub = $1 AND reason = 'stale-sign-in'", [sub]) == "2")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "0")
        #expect(try h.accountStatus(sub) == "deleted")
    }

    @Test("a sign-in refused 409 whose id_token carries transfer_sub maps nobody and forwards no user-migrated")
    func refusedSignInMapsNobody() throws {
        let h = try H(forwardURL: "http://127.0.0.1:9/siwa")  // forwarding on; nothing listens: forwards wait
        defer { h.stop() }
        let sub = "001234.moved.0002"
        try h.signIn(sub: sub)
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.accountStatus(sub) == "deleted" })
        // A code from before the deletion, carrying the user's identifier from the old team.
        h.fake.setClock(S.wallClock() - 60)
        let code = "c." + NotificationSigner.newJTI()
        var user = DevApple.User(sub: sub, email: "m@privaterelay.appleid.com", isPrivateEmail: true)
        user.transferSub = "000999.old-team.0002"
        h.fake.addCode(code, user: user)
        let reply = try h.exchange(code: code)
        h.fake.setClock(nil)
        #expect(reply.status == 409 && reply.error == "account_deleted", "\(reply.status) \(reply.body)")
        #expect(try h.scalar("SELECT count(*) FROM siwa.transfers") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards WHERE type = 'user-migrated'") == "0")
    }

    @Test("a deletion requested but not applied yet: a sign-in from before it is refused all the same (409), one after it stored")
    func signInOlderThanAPendingDeletion() throws {
        let h = try H(roles: .receive)  // no worker: the deletion stays queued
        defer { h.stop() }
        let sub = "001234.pending.0001"
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        h.fake.setClock(S.wallClock() - 60)
        let code = "c." + NotificationSigner.newJTI()
        h.fake.addCode(code, user: .init(sub: sub))
        let before = try h.exchange(code: code)
        #expect(before.status == 409 && before.error == "account_deleted", "\(before.status) \(before.body)")
        h.fake.setClock(S.wallClock() + 2)
        let after = "c." + NotificationSigner.newJTI()
        h.fake.addCode(after, user: .init(sub: sub))
        #expect(try h.exchange(code: after).status == 200)
        h.fake.setClock(nil)
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "1")
    }

    @Test("a hand-over whose validation Apple answers without an id_token is refused: 400 unbound_refresh_token, nothing stored")
    func handOverNeedsApplesIDToken() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.unbound.0001"
        let pair = try h.fake.issueTokens(for: .init(sub: sub), clientID: S.clientID)
        h.fake.answerToken(.status(200, #"{"access_token":"a1","token_type":"Bearer","expires_in":3600}"#))
        let reply = try h.api(TokenExchange.handoverPath, json: Self.handOverBody(pair.refreshToken, pair.idToken))
        #expect(reply.status == 400 && reply.error == "unbound_refresh_token", "\(reply.status) \(reply.body)")
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "0")
        // With Apple's id_token naming the user, the same hand-over is stored.
        h.fake.answerToken(.normal)
        let stored = try h.api(TokenExchange.handoverPath, json: Self.handOverBody(pair.refreshToken, pair.idToken))
        #expect(stored.status == 200 && stored.json?["stored"]?.stringValue == "created", "\(stored.body)")
    }

    @Test("a worker's batch holding the account row for longer than the old 2 s lock timeout: the sign-in waits for it and succeeds")
    func signInWaitsForAShortLock() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.locked.0001"
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        // Another transaction holds the user's row, as a worker's batch does while it applies.
        let holder = try PostgresConnection(conninfo: h.conninfo)
        try holder.execute("BEGIN")
        try holder.execute("SELECT 1 FROM siwa.accounts WHERE apple_sub = $1 FOR UPDATE", [sub])
        let answer = AnswerSlot()
        let code = "c." + NotificationSigner.newJTI()
        h.fake.addCode(code, user: .init(sub: sub))
        Thread.detachNewThread {
            let reply = try? h.exchange(code: code)
            answer.value.withLock { $0 = reply.map { ($0.status, $0.error) } ?? (0, "no answer") }
        }
        // The sign-in waits for the holder's lock (a backend the holder blocks, not any lock
        // wait), and is still waiting 2.5 s into its statement: past the old 2 s lock timeout.
        let holderPID = try #require(try holder.execute("SELECT pg_backend_pid()").scalar)
        #expect(
            try h.eventually {
                try h.scalar(
                    "SELECT count(*) > 0 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)) "
                        + "AND clock_timestamp() - query_start > interval '2.5 seconds'", [holderPID]) == "t"
            }, "no backend waited 2.5 s for the holder's lock")
        #expect(answer.value.withLock { $0 } == nil, "the sign-in did not wait: \(String(describing: answer.value.withLock { $0 }))")
        try holder.execute("COMMIT")
        #expect(h.eventually(20) { answer.value.withLock { $0 } != nil })
        let final = answer.value.withLock { $0 }
        #expect(final?.status == 200, "\(String(describing: final))")
        #expect(try h.scalar("SELECT count(*) FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "0", "the fresh grant was revoked")
    }

    @Test("SIGHUP while serve starts (before its reload handler exists) never kills it; the signal is served once it runs")
    func hangUpDuringStart() throws {
        let h = try H(roles: .receive)
        defer { h.stop() }
        let (server, tokensURL) = try h.serve(hangUpUnblocked: true)
        defer { _ = server.terminate() }
        // From the moment it runs our code (a SIGHUP handler installed, or a first log line) until
        // it is up, a SIGHUP every few milliseconds.
        let pid = server.process.processIdentifier
        #expect(h.eventually(30) { Self.catchesHangUp(pid) || !server.log.isEmpty }, "never started")
        var sent = 0
        while !server.log.contains("worker started") && server.process.isRunning && sent < 5_000 {
            server.signal(SIGHUP)
            sent += 1
            Thread.sleep(forTimeInterval: 0.002)
        }
        #expect(server.process.isRunning, "killed by SIGHUP after \(sent) signals: \(server.log.suffix(400))")
        #expect(server.waitForLog("worker started"), "\(server.log.suffix(400))")
        #expect(
            server.waitForLog("API tokens reloaded"),
            "a SIGHUP during the start was not served (\(sent) sent; \(Self.signalMasks(pid))): \(server.log.suffix(600))")
        let status = try H.post(tokensURL, json: "{", token: h.apiToken).status
        #expect(status == 400)
        #expect(server.terminate() == 0)
    }

    /// The `Sig*` lines of `/proc/<pid>/status`.
    static func signalMasks(_ pid: Int32) -> String {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        return status.split(separator: "\n").filter { $0.hasPrefix("Sig") }.joined(separator: ", ")
    }

    /// True when the process has a handler for SIGHUP (bit 0 of `SigCgt`).
    static func catchesHangUp(_ pid: Int32) -> Bool {
        let line = signalMasks(pid).split(separator: ", ").first { $0.hasPrefix("SigCgt:") }
        let mask = line.flatMap { UInt64($0.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) } ?? 0
        return mask & 1 == 1
    }
}

/// The answer of a call made on another thread.
final class AnswerSlot: Sendable {
    let value = Mutex<(status: Int, error: String?)?>(nil)
}
