import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaRuntime
import Synchronization
import Testing

@testable import SiwaApp

/// A settable clock (Unix seconds) shared between a client and the test.
final class TestClock: Sendable {
    private let value: Atomic<Int64>
    init(_ start: Int64) { value = Atomic(start) }
    var now: Int64 { value.load(ordering: .relaxed) }
    func set(_ t: Int64) { value.store(t, ordering: .relaxed) }
}

/// AppleClient against FakeApple over real HTTP.
@Suite struct AppleClientTests {
    typealias S = AppleTestSetup

    /// A client for `fake` whose clock is `clock` (Unix seconds), logging into `logs`.
    static func client(
        _ fake: FakeApple, key: ECPrivateKey = S.teamKey, clock: TestClock? = nil,
        timeout: Double = 5, logs: LogSink = .capturing(), baseURL: String? = nil
    ) -> AppleClient {
        var options = AppleClient.Options()
        options.timeout = .seconds(timeout)
        let configuration = AppleAPIConfiguration(
            teamID: S.teamID, keyID: S.keyID, privateKeyFile: "/unused.p8",
            tokenKeyFile: "/unused.key", baseURL: baseURL ?? fake.baseURL)
        let logger = Logger(label: "apple") { LineLogHandler(label: $0, level: .debug, format: .json, sink: logs) }
        if let clock {
            return AppleClient(
                configuration: configuration, privateKey: key, options: options, logger: logger,
                clock: WallClock { .seconds(clock.now) })
        }
        return AppleClient(configuration: configuration, privateKey: key, options: options, logger: logger)
    }

    @Test func exchangeAndRevoke() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let logs = LogSink.capturing()
        let client = Self.client(fake, logs: logs)
        fake.addCode(
            "c.ok",
            user: .init(
                sub: "001234.client.0001", email: "u@example.com", isPrivateEmail: false,
                nonce: "n-1", redirectURI: "https://app.example/cb"))
        guard case .success(let tokens) = client.exchange(code: "c.ok", clientID: S.clientID, redirectURI: "https://app.example/cb") else {
            Issue.record("exchange failed: \(fake.calls.last.map { "\($0.status) \($0.error ?? "") \($0.secretProblem ?? "")" } ?? "")")
            return
        }
        let check = try S.signatureCheck(jwks: Array(fake.jwks.utf8))
        let claims = try IDTokenVerifier().verify(
            token: tokens.idToken, clientID: S.clientID, nonce: "n-1",
            now: S.wallClock(), checkSignature: check)
        #expect(claims.sub == "001234.client.0001" && claims.email == "u@example.com" && claims.isPrivateEmail == false)
        let form = try #require(fake.calls.last?.form)
        #expect(form["grant_type"] == "authorization_code" && form["code"] == "c.ok" && form["client_id"] == S.clientID)
        #expect(form["redirect_uri"] == "https://app.example/cb")

        guard case .success = client.revoke(refreshToken: tokens.refreshToken, clientID: S.clientID) else {
            Issue.record("revoke failed")
            return
        }
        #expect(fake.revokedTokens == [tokens.refreshToken])
        #expect(fake.calls.last?.form?["token_type_hint"] == "refresh_token")
        // One secret for both calls.
        #expect(client.secretsMinted == 1)
        #expect(fake.calls[0].form?["client_secret"] == fake.calls[1].form?["client_secret"])

        // Nothing secret in the logs.
        let text = logs.lines.joined(separator: "\n")
        #expect(!text.isEmpty)
        for secret in ["c.ok", tokens.refreshToken, tokens.idToken, form["client_secret"]!, "u@example.com", "001234.client.0001"] {
            #expect(!text.contains(secret))
        }
    }

    @Test func refusals() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let client = Self.client(fake)
        // Unknown (or already used) code.
        guard case .invalidGrant = client.exchange(code: "c.unknown", clientID: S.clientID) else {
            Issue.record("expected invalid_grant")
            return
        }
        // A revoke Apple refuses with invalid_grant.
        fake.answerRevoke(.invalidGrant)
        guard case .invalidGrant = client.revoke(refreshToken: "r.x", clientID: S.clientID) else {
            Issue.record("expected invalid_grant")
            return
        }
        // Another 4xx is permanent.
        fake.answerToken(.status(400, #"{"error":"invalid_request"}"#))
        let r = client.exchange(code: "c.x", clientID: S.clientID)
        guard case .rejected(let failure) = r else {
            Issue.record("expected rejected, got \(r)")
            return
        }
        #expect(failure == AppleCallFailure(status: 400, reason: "apple_error", detail: "invalid_request"))
        #expect(!r.isRetryable)
        // A key Apple does not know: invalid_client, and the cached secret is dropped.
        let stranger = Self.client(fake, key: try ECPrivateKey.generate())
        fake.answerToken(.normal)
        fake.addCode("c.2", user: .init(sub: "s"))
        guard case .invalidClient = stranger.exchange(code: "c.2", clientID: S.clientID) else {
            Issue.record("expected invalid_client")
            return
        }
        #expect(fake.calls.last?.secretProblem == "bad signature")
        _ = stranger.exchange(code: "c.2", clientID: S.clientID)
        #expect(stranger.secretsMinted == 2)
    }

    @Test func transientFailures() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let client = Self.client(fake, timeout: 1)
        fake.answerToken(.status(503, "Service Unavailable"))
        let unavailable = client.exchange(code: "c", clientID: S.clientID)
        guard case .transient(let failure) = unavailable else {
            Issue.record("expected transient, got \(unavailable)")
            return
        }
        #expect(failure.status == 503 && failure.reason == "http_503" && unavailable.isRetryable)

        fake.answerRevoke(.status(429, #"{"error":"rate_limited"}"#))
        guard case .transient(let limited) = client.revoke(refreshToken: "r", clientID: S.clientID) else {
            Issue.record("expected transient")
            return
        }
        #expect(limited.status == 429)

        // A 200 that is not a token response.
        fake.answerToken(.status(200, #"{"id_token":"x"}"#))
        guard case .transient(let malformed) = client.exchange(code: "c", clientID: S.clientID) else {
            Issue.record("expected transient")
            return
        }
        #expect(malformed.reason == "malformed_response" && malformed.detail == "missing_refresh_token")

        // Apple hangs: the call times out and may be retried.
        fake.answerToken(.hang)
        let hung = client.exchange(code: "c", clientID: S.clientID)
        guard case .transient(let timedOut) = hung else {
            Issue.record("expected transient, got \(hung)")
            return
        }
        #expect(timedOut.reason == "timedOut" && timedOut.status == nil)
        #expect(eventually { fake.hungCalls == 1 })
    }

    @Test func unreachableAppleIsTransient() throws {
        let gone = try S.fake()
        let url = gone.baseURL
        gone.stop()
        let fake = try S.fake()
        defer { fake.stop() }
        let client = Self.client(fake, baseURL: url)
        guard case .transient(let failure) = client.exchange(code: "c", clientID: S.clientID) else {
            Issue.record("expected transient")
            return
        }
        #expect(failure.reason == "couldNotConnect")
    }

    @Test func secretsAreCachedPerClientAndRenewedBeforeExpiry() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let start = S.wallClock()
        let clock = TestClock(start)
        func set(_ t: Int64) {
            clock.set(t)
            fake.setClock(t)
        }
        set(start)
        let client = Self.client(fake, clock: clock)
        func revoke(_ clientID: String = S.clientID) -> String? {
            guard case .success = client.revoke(refreshToken: "r", clientID: clientID) else { return nil }
            return fake.calls.last?.form?["client_secret"]
        }
        let day: Int64 = 86_400
        let first = try #require(revoke())
        #expect(try #require(revoke()) == first)
        set(start + 28 * day)
        #expect(try #require(revoke()) == first)  // 2 days left: still used
        #expect(client.secretsMinted == 1)
        // A second client id gets its own secret.
        let other = try #require(revoke(S.otherClientID))
        #expect(other != first && client.secretsMinted == 2)
        // Less than one day left: renewed, and Apple (the fake, at the same time) accepts the new one.
        set(start + 29 * day + 1)
        let renewed = try #require(revoke())
        #expect(renewed != first && client.secretsMinted == 3)
        #expect(try CompactJWS.parse(renewed).claims["iat"]?.int64Value == start + 29 * day + 1)
        // Without renewal the old secret would now be refused as expired.
        set(start + 30 * day + 1)
        #expect(
            FakeApple.problem(
                withSecret: first, clientID: S.clientID, teamID: S.teamID, keyID: S.keyID,
                key: S.teamKey.publicKey, now: start + 30 * day + 1) == "expired")
        #expect(try #require(revoke()) == renewed)
        // The clock set back before the secret's iat: renewed rather than sent "from the future".
        set(start + 29 * day)
        #expect(try #require(revoke()) != renewed)
        #expect(fake.calls.allSatisfy { $0.status == 200 })
    }

    @Test func classification() {
        func classify(_ status: Int, _ body: String, headers: [String: String] = [:]) -> AppleCallResult<Void> {
            AppleClient.classify(status: status, headers: headers, body: Array(body.utf8)) { _ in .success(()) }
        }
        if case .success = classify(200, "") {} else { Issue.record("200") }
        if case .success = classify(204, "") {} else { Issue.record("204") }
        if case .invalidGrant = classify(400, #"{"error":"invalid_grant"}"#) {} else { Issue.record("invalid_grant") }
        if case .invalidClient = classify(401, #"{"error":"invalid_client"}"#) {} else { Issue.record("invalid_client") }
        if case .rejected(let f) = classify(403, "Forbidden") { #expect(f.reason == "http_403") } else { Issue.record("403") }
        if case .transient(let f) = classify(429, "", headers: ["retry-after": "30"]) {
            #expect(f.retryAfter == .seconds(30))
        } else {
            Issue.record("429")
        }
        for status in [500, 502, 503, 504, 302, 100] {
            #expect(classify(status, "").isRetryable, "\(status)")
        }
    }
}
