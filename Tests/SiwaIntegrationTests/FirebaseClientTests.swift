import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import SiwaRuntime
import Synchronization
import Testing

/// The Firebase Authentication client against a loopback fake of the Identity Toolkit v1 API
/// and Google's token endpoint (no emulator is reachable here): each effect, the users it must
/// leave alone, Google's refusals, throttling and token expiry, the Auth emulator's mode. Every
/// request the fake saw is checked against Google's discovery document
/// (`scripts/discovery-check`).
@Suite("Firebase Authentication client", .serialized)
struct FirebaseClientTests {
    static let key: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)
    static let appleSub = "001234.5f3c8a9b0d1e4f2a8b7c6d5e4f3a2b1c.0042"
    static let otherSub = "001234.99999999999999999999999999999999.0001"
    static let email = "siwa@siwa-test.iam.gserviceaccount.com"

    /// Unix seconds the client and the fake share; tests move it.
    final class Clock: Sendable {
        private let seconds = Atomic<Int64>(1_800_000_000)
        /// The client's reads (`wall`), not the fake's.
        let clientReads = Atomic<Int>(0)
        var now: Int64 { seconds.load(ordering: .relaxed) }
        func advance(_ by: Int64) { seconds.add(by, ordering: .relaxed) }
        var read: @Sendable () -> Int64 { { [self] in now } }
        var wall: WallClock {
            WallClock { [self] in
                clientReads.add(1, ordering: .relaxed)
                return .seconds(now)
            }
        }
    }

    static func keyFile(email: String = email, key: RSAPrivateKey = key, tokenURI: String) -> [UInt8] {
        Array(
            JSONValue.object([
                "type": .string("service_account"), "project_id": .string("siwa-test"), "private_key_id": .string("k1"),
                "private_key": .string(key.pemRepresentation), "client_email": .string(email), "token_uri": .string(tokenURI),
            ]).serialized().utf8)
    }

    struct Setup {
        let fake: FakeFirebase
        let client: FirebaseClient
        let clock: Clock
        let logs = LogSink.capturing()

        init(projectID: String = "siwa-test", signingKey: RSAPrivateKey = FirebaseClientTests.key) throws {
            clock = Clock()
            fake = try FakeFirebase(key: FirebaseClientTests.key, clock: clock.read)
            let credential = try FirebaseCredential(json: FirebaseClientTests.keyFile(key: signingKey, tokenURI: fake.tokenURL))
            client = try FirebaseClient(
                projectID: projectID, credential: credential, url: fake.url, logger: TestHarness.logger(into: logs), clock: clock.wall)
        }

        /// The Apple-only user of `appleSub`, a user with a password and another Apple identity,
        /// and a Google user.
        func addUsers() {
            fake.add(.init(localID: "u-apple", identities: [.init(providerID: "apple.com", rawID: FirebaseClientTests.appleSub)]))
            fake.add(
                .init(
                    localID: "u-other", identities: [.init(providerID: "apple.com", rawID: FirebaseClientTests.otherSub)],
                    passwordHash: "aGFzaA=="))
            fake.add(.init(localID: "u-google", identities: [.init(providerID: "google.com", rawID: "g-1")]))
        }

        /// The fake's requests are all the discovery document's.
        func validate(
            unmodelled: (FakeFirebase.Request) -> Bool = { _ in false }, sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            try FirebaseClientTests.validate(fake, unmodelled: unmodelled, sourceLocation: sourceLocation)
        }
    }

    /// Checks the fake's recorded requests and answers against the discovery document, but those
    /// `unmodelled` takes.
    static func validate(
        _ fake: FakeFirebase, unmodelled: (FakeFirebase.Request) -> Bool = { _ in false }, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let lines = fake.discoveryLines(unmodelled: unmodelled)
        #expect(!lines.isEmpty, "no request recorded", sourceLocation: sourceLocation)
        let result = try discoveryCheck(lines)
        #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
    }

    static func discoveryCheck(_ lines: [String]) throws -> (status: Int32, output: String) {
        let file = NSTemporaryDirectory() + "siwa-discovery-\(UInt64.random(in: 0...UInt64.max)).jsonl"
        try lines.joined().write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        return try OpenAPITests.python([
            "scripts/discovery-check", "Tests/SiwaIntegrationTests/Fixtures/identitytoolkit-v1.json", file,
        ])
    }

    @Test("the discovery check refuses what the document does not describe: a field, a type, a path, a method, an answer")
    func discoveryCheckRefuses() throws {
        func line(_ method: String, _ path: String, _ body: String) -> String {
            JSONValue.object(["method": .string(method), "path": .string(path), "body": .string(body)]).serialized() + "\n"
        }
        let good = line("POST", "/v1/projects/p/accounts:update", #"{"localId":"u","validSince":"5","deleteProvider":["apple.com"]}"#)
        #expect(try Self.discoveryCheck([good]).status == 0)
        let bad = [
            line("POST", "/v1/projects/p/accounts:lookup", #"{"federatedUserIds":[]}"#),
            line("POST", "/v1/projects/p/accounts:update", #"{"localId":"u","validSince":5}"#),
            line("POST", "/v1/projects/p/accounts:lookup", #"{"federatedUserId":[{"providerId":"apple.com","uid":"x"}]}"#),
            line("POST", "/v1/projects/p/accounts:revoke", "{}"),
            line("GET", "/v1/projects/p/accounts:delete", ""),
        ]
        for request in bad {
            let result = try Self.discoveryCheck([good, request])
            #expect(result.status == 1, "\(request)")
            #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        }
        // The fake's answers: a 2xx against the method's response schema, an error against
        // Google's JSON error format (the document describes none).
        func answered(_ path: String, _ status: Int, _ answer: String) -> String {
            JSONValue.object([
                "method": .string("POST"), "path": .string(path), "body": .string("{}"), "status": .number(Double(status)),
                "response_body": .string(answer),
            ]).serialized() + "\n"
        }
        let goodAnswers = [
            answered("/v1/projects/p/accounts:lookup", 200, #"{"kind":"identitytoolkit#GetAccountInfoResponse","users":[{"localId":"u"}]}"#),
            answered("/v1/projects/p/accounts:delete", 400, #"{"error":{"code":400,"message":"USER_NOT_FOUND","errors":[{"reason":"invalid"}]}}"#),
        ]
        #expect(try Self.discoveryCheck(goodAnswers).status == 0)
        let badAnswers = [
            answered("/v1/projects/p/accounts:lookup", 200, #"{"users":[{"localId":"u","password":"x"}]}"#),
            answered("/v1/projects/p/accounts:lookup", 200, #"{"users":[{"localId":5}]}"#),
            answered("/v1/projects/p/accounts:delete", 400, #"{"error":{"code":403,"message":"m"}}"#),
            answered("/v1/projects/p/accounts:delete", 503, #"{"error":{"code":503,"message":"m","status":"DOWN"}}"#),
            answered("/v1/projects/p/accounts:delete", 400, #"{"errors":[{"code":"x"}]}"#),
        ]
        for answer in badAnswers {
            let result = try Self.discoveryCheck(goodAnswers + [answer])
            #expect(result.status == 1, "\(answer)")
            #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        }
    }

    @Test("consent-revoked: the Apple user found by its federated id gets validSince = now; nobody else changes")
    func endSessions() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(s.fake.user("u-apple")?.validSince == s.clock.now)
        #expect(s.fake.user("u-apple")?.identities.map(\.providerID) == ["apple.com"])
        #expect(s.fake.user("u-other")?.validSince == 0)
        #expect(s.fake.user("u-google")?.validSince == 0)
        let requests = s.fake.requests
        #expect(requests.map(\.path) == ["/v1/projects/siwa-test/accounts:lookup", "/v1/projects/siwa-test/accounts:update"])
        let lookup = requests.first?.json?["federatedUserId"]?.arrayValue?.first
        #expect(lookup?["providerId"]?.stringValue == "apple.com")
        #expect(lookup?["rawId"]?.stringValue == Self.appleSub)
        #expect(requests.last?.json?["localId"]?.stringValue == "u-apple")
        #expect(requests.last?.json?["validSince"]?.stringValue == String(s.clock.now))
        #expect(requests.last?.json?["deleteProvider"] == nil)
        #expect(requests.allSatisfy { $0.authorization?.hasPrefix("Bearer ya29.fake-") == true })
        try s.validate()
    }

    @Test("account-delete: sessions end and apple.com is unlinked; the password stays; a second time finds nobody")
    func unlink() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        #expect(s.client.apply(.unlink, sub: Self.otherSub) == .done([.signedOut, .unlinked], status: 200))
        let user = try #require(s.fake.user("u-other"))
        #expect(user.identities.isEmpty)
        #expect(user.passwordHash != nil)
        #expect(user.validSince == s.clock.now)
        #expect(s.fake.requests.last?.json?["deleteProvider"]?.arrayValue == [.string("apple.com")])
        #expect(s.fake.user("u-apple")?.identities.count == 1)
        #expect(s.client.apply(.unlink, sub: Self.otherSub) == .userNotFound(status: 200))
        try s.validate()
    }

    @Test("delete-user: an Apple-only user is deleted, a user with another way in is unlinked, deleted twice is not an error")
    func deleteUser() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        s.fake.add(
            .init(
                localID: "u-linked",
                identities: [.init(providerID: "apple.com", rawID: "001.linked.1"), .init(providerID: "google.com", rawID: "g-2")]))
        s.fake.add(.init(localID: "u-phone", identities: [.init(providerID: "apple.com", rawID: "001.phone.1")], phoneNumber: "+15555550100"))

        #expect(s.client.apply(.deleteUser, sub: Self.appleSub) == .done([.deleted], status: 200))
        #expect(s.fake.user("u-apple") == nil)
        #expect(s.fake.requests.last?.path == "/v1/projects/siwa-test/accounts:delete")
        #expect(s.fake.requests.last?.json == .object(["localId": .string("u-apple")]))
        #expect(s.client.apply(.deleteUser, sub: Self.appleSub) == .userNotFound(status: 200))

        #expect(s.client.apply(.deleteUser, sub: Self.otherSub) == .done([.signedOut, .unlinked], status: 200))
        #expect(s.fake.user("u-other")?.passwordHash != nil)
        #expect(s.client.apply(.deleteUser, sub: "001.linked.1") == .done([.signedOut, .unlinked], status: 200))
        #expect(s.fake.user("u-linked")?.identities.map(\.providerID) == ["google.com"])
        #expect(s.client.apply(.deleteUser, sub: "001.phone.1") == .done([.signedOut, .unlinked], status: 200))
        #expect(s.fake.user("u-phone") != nil)
        #expect(s.fake.user("u-google")?.identities.count == 1)

        // Deleted between the lookup and the delete: what the call was for holds.
        s.fake.add(.init(localID: "u-gone", identities: [.init(providerID: "apple.com", rawID: "001.gone.1")]))
        s.fake.inject(FakeFirebase.googleError(400, "USER_NOT_FOUND"), for: "delete")
        #expect(s.client.apply(.deleteUser, sub: "001.gone.1") == .done([.alreadyDone], status: 400))
        try s.validate()
    }

    @Test("a sub Firebase does not know is recorded as such, and nothing is updated")
    func unknownUser() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        for effect in ProviderEffect.allCases {
            #expect(s.client.apply(effect, sub: "001234.00000000000000000000000000000000.0000") == .userNotFound(status: 200))
        }
        #expect(s.fake.requests.allSatisfy { $0.path.hasSuffix(":lookup") })
        // The same sub at another provider is not the Apple user.
        #expect(s.client.apply(.deleteUser, sub: "g-1") == .userNotFound(status: 200))
        #expect(s.fake.user("u-google") != nil)
        // Deleted between the lookup and the update.
        s.fake.inject(FakeFirebase.googleError(400, "USER_NOT_FOUND"), for: "update")
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .userNotFound(status: 400))
        try s.validate()
    }

    @Test("a 429 with Retry-After, a 400 quota and a 5xx are tried later; Google's message is never kept")
    func throttled() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        var quota = FakeFirebase.googleError(429, "QUOTA_EXCEEDED : Exceeded quota for user u-apple", status: "RESOURCE_EXHAUSTED")
        quota.headers.append(HTTPHeader("Retry-After", "30"))
        s.fake.inject(quota)
        #expect(
            s.client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 429, reason: "QUOTA_EXCEEDED", retryAfter: .seconds(30))))
        s.fake.inject(FakeFirebase.googleError(400, "TOO_MANY_ATTEMPTS_TRY_LATER"), for: "update")
        #expect(
            s.client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 400, reason: "TOO_MANY_ATTEMPTS_TRY_LATER", progress: [])))
        s.fake.inject(FakeFirebase.googleError(503, "The service is currently unavailable.", status: "UNAVAILABLE"))
        #expect(s.client.apply(.unlink, sub: Self.appleSub) == .retryLater(ProviderFailure(status: 503, reason: "UNAVAILABLE")))
        s.fake.inject(.text(502, "<html>Bad Gateway</html>"))
        #expect(s.client.apply(.unlink, sub: Self.appleSub) == .retryLater(ProviderFailure(status: 502, reason: "http_502")))
        s.fake.inject(.text(200, "not json"))
        #expect(s.client.apply(.unlink, sub: Self.appleSub) == .retryLater(ProviderFailure(status: 200, reason: "malformed_response")))
        #expect(s.fake.user("u-apple")?.validSince == 0)
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        // The proxy's page and the malformed answer are no JSON: no description covers them.
        try s.validate { request in request.answer.map { !$0.body.isEmpty && (try? JSONParser.parse($0.body)) == nil } ?? false }
    }

    @Test("the access token is reused until shortly before it expires; a refused one is dropped and the next call gets another")
    func tokenExpiry() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(s.client.apply(.endSessions, sub: Self.otherSub) == .done([.signedOut], status: 200))
        #expect(s.fake.snapshot.tokensIssued == 1)
        #expect(s.client.accessTokensObtained == 1)
        // 3599 s tokens are renewed 300 s before they expire.
        s.clock.advance(3599 - 300 - 1)
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(s.fake.snapshot.tokensIssued == 1)
        s.clock.advance(1)
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(s.fake.snapshot.tokensIssued == 2)
        // Google stops accepting it (revoked, or our clock is behind): later, with a new one.
        s.fake.expireTokens()
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .retryLater(ProviderFailure(status: 401, reason: "UNAUTHENTICATED")))
        #expect(s.client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(s.fake.snapshot.tokensIssued == 3)
        try s.validate()
    }

    @Test("threads that need a token at once wait for one exchange")
    func oneExchangeAtATime() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        // The first exchange is held until every thread has looked for a cached token and found
        // none: the exchanging thread reads the client's clock twice (the cache, the assertion's
        // iat), each of the other seven once; a thread past that look either waits for the
        // exchange in flight or makes its own.
        let clock = s.clock
        s.fake.change { $0.tokenHold = { clock.clientReads.load(ordering: .relaxed) >= 2 + 7 } }
        let outcomes = Mutex<[ProviderOutcome]>([])
        let group = DispatchGroup()
        for _ in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                let outcome = s.client.apply(.endSessions, sub: Self.appleSub)
                outcomes.withLock { $0.append(outcome) }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 30) == .success, "the applies did not end within 30 s")
        #expect(outcomes.withLock { $0 } == Array(repeating: .done([.signedOut], status: 200), count: 8))
        #expect(s.fake.snapshot.tokensIssued == 1)
        #expect(s.fake.snapshot.tokenHoldsTimedOut == 0, "the threads never all looked for a token")
        try s.validate()
    }

    @Test("the logs name the operation and the outcome, never a sub, a user id, a token or Google's message")
    func logsCarryNoSecrets() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        s.addUsers()
        _ = s.client.apply(.endSessions, sub: Self.appleSub)
        s.fake.inject(FakeFirebase.googleError(400, "INVALID_ARGUMENT : user u-apple is bad"), for: "update")
        _ = s.client.apply(.unlink, sub: Self.appleSub)
        s.fake.expireTokens()
        _ = s.client.apply(.deleteUser, sub: Self.appleSub)
        _ = s.client.apply(.deleteUser, sub: Self.appleSub)
        _ = s.client.apply(.endSessions, sub: Self.otherSub)
        let lines = s.logs.lines
        #expect(lines.contains { $0.contains("INVALID_ARGUMENT") })
        #expect(lines.contains { $0.contains("token_refused") })
        let secrets = [Self.appleSub, Self.otherSub, "u-apple", "u-other", "ya29.", "is bad", "BEGIN PRIVATE KEY"]
        for line in lines {
            for secret in secrets { #expect(!line.contains(secret), "\(line)") }
        }
        try s.validate()
    }

    @Test("check(): passes on the project; blames the project, the role or the credential when Google refuses")
    func check() throws {
        let s = try Setup()
        defer { s.fake.stop() }
        #expect(s.client.check() == .done([], status: 200))
        #expect(s.fake.requests.last?.json == .object(["localId": .array([.string(Firebase.checkLocalID)])]))

        let other = try FirebaseClient(
            projectID: "no-such-project", credential: FirebaseCredential(json: Self.keyFile(tokenURI: s.fake.tokenURL)), url: s.fake.url,
            logger: Logger(label: "t"), clock: s.clock.wall)
        #expect(other.check() == .refused(ProviderFailure(status: 400, reason: "CONFIGURATION_NOT_FOUND", blame: .tenant)))

        s.fake.change { $0.permissionDenied = true }
        #expect(s.client.check() == .refused(ProviderFailure(status: 403, reason: "PERMISSION_DENIED", blame: .permission)))
        #expect(
            s.client.apply(.endSessions, sub: Self.appleSub)
                == .refused(ProviderFailure(status: 403, reason: "PERMISSION_DENIED", blame: .permission)))
        s.fake.change { $0.permissionDenied = false }

        // A key Google does not know (deleted, or another account's): the assertion is refused.
        let stranger = try RSAPrivateKey.generate(bits: 2048)
        let wrong = try Setup(signingKey: stranger)
        defer { wrong.fake.stop() }
        #expect(wrong.client.check() == .refused(ProviderFailure(status: 400, reason: "invalid_grant", blame: .credential)))
        #expect(
            wrong.client.apply(.endSessions, sub: Self.appleSub)
                == .refused(ProviderFailure(status: 400, reason: "invalid_grant", blame: .credential)))
        #expect(wrong.fake.snapshot.assertionsRefused == 2)
        #expect(wrong.fake.requests.isEmpty)

        // The token endpoint down: later.
        s.fake.change { $0.tokenAnswer = HTTPResponse(status: 503, headers: [HTTPHeader("Retry-After", "5")]) }
        #expect(s.client.check() == .retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(5))))
        s.fake.change { $0.tokenAnswer = .json(200, #"{"token_type":"Bearer"}"#) }
        #expect(s.client.check() == .retryLater(ProviderFailure(status: 200, reason: "malformed_token_response")))
        try s.validate()
    }

    @Test("the Auth emulator: no credential, the bearer `owner`, the API below its path")
    func emulator() throws {
        let clock = Clock()
        let fake = try FakeFirebase(key: nil, pathPrefix: "/identitytoolkit.googleapis.com", clock: clock.read)
        defer { fake.stop() }
        fake.add(.init(localID: "u-apple", identities: [.init(providerID: "apple.com", rawID: Self.appleSub)]))
        let client = try FirebaseClient(projectID: "demo-siwa", credential: nil, url: fake.url, logger: Logger(label: "t"), clock: clock.wall)
        #expect(client.check() == .refused(ProviderFailure(status: 400, reason: "CONFIGURATION_NOT_FOUND", blame: .tenant)))
        let emulated = try FirebaseClient(projectID: "siwa-test", credential: nil, url: fake.url, logger: Logger(label: "t"), clock: clock.wall)
        #expect(emulated.check() == .done([], status: 200))
        #expect(emulated.apply(.deleteUser, sub: Self.appleSub) == .done([.deleted], status: 200))
        #expect(fake.requests.allSatisfy { $0.authorization == "Bearer owner" })
        #expect(emulated.accessTokensObtained == 0)
        // The emulator's bearer cannot be renewed: a 401 is not worth a retry.
        fake.inject(FakeFirebase.unauthenticated)
        #expect(
            emulated.apply(.endSessions, sub: Self.appleSub) == .refused(ProviderFailure(status: 401, reason: "UNAUTHENTICATED", blame: .credential)))
        try Self.validate(fake)
    }

    @Test("construction: no credential without an emulator's URL, http:// off loopback, a bad project id")
    func construction() throws {
        func problem(_ make: () throws(ConfigurationError) -> FirebaseClient) -> String? {
            do throws(ConfigurationError) {
                _ = try make()
                return nil
            } catch {
                return error.variable
            }
        }
        let logger = Logger(label: "t")
        let credential = try FirebaseCredential(json: Self.keyFile(tokenURI: "https://oauth2.googleapis.com/token"))
        #expect(problem { () throws(ConfigurationError) in try FirebaseClient(projectID: "p", credential: nil, logger: logger) } == "credential")
        #expect(
            problem { () throws(ConfigurationError) in
                try FirebaseClient(projectID: "p", credential: credential, url: "http://firebase.example.com/", logger: logger)
            } == "url")
        #expect(
            problem { () throws(ConfigurationError) in
                try FirebaseClient(projectID: "p", credential: credential, tokenURL: "http://oauth.example.com/token", logger: logger)
            } == "tokenURL")
        #expect(
            problem { () throws(ConfigurationError) in try FirebaseClient(projectID: "a/b", credential: credential, logger: logger) } == "projectID")
        let client = try FirebaseClient(projectID: "siwa-test", credential: credential, logger: logger)
        #expect(client.url == Firebase.defaultURL)
        // Nobody listening: later.
        let closed = try FirebaseClient(
            projectID: "p", credential: nil, url: "http://127.0.0.1:\(ServerProcess.freePort())/", logger: logger)
        #expect(closed.check() == .retryLater(ProviderFailure(reason: "couldNotConnect")))
    }

    @Test("a bad key file is refused naming the field, never quoting the key")
    func badKeyFile() throws {
        let pem = Self.key.pemRepresentation
        func refusal(_ fields: [String: JSONValue]) -> FirebaseCredentialError? {
            do throws(FirebaseCredentialError) {
                _ = try FirebaseCredential(json: Array(JSONValue.object(fields).serialized().utf8))
                return nil
            } catch {
                return error
            }
        }
        let good: [String: JSONValue] = [
            "type": .string("service_account"), "private_key": .string(pem), "client_email": .string(Self.email),
            "token_uri": .string("https://oauth2.googleapis.com/token"),
        ]
        #expect(refusal(good) == nil)
        var noKey = good
        noKey["private_key"] = nil
        #expect(refusal(noKey)?.description == #"has no "private_key""#)
        var garbled = good
        let body = pem.split(separator: "\n").dropFirst().dropLast().joined()
        garbled["private_key"] = .string("-----BEGIN PRIVATE KEY-----\n" + String(body.reversed()) + "\n-----END PRIVATE KEY-----\n")
        let bad = try #require(refusal(garbled))
        #expect(bad.reason == "invalid_private_key")
        #expect(!bad.description.contains(String(body.prefix(16))) && !bad.description.contains(String(body.reversed().prefix(16))))
        var user = good
        user["type"] = .string("authorized_user")
        #expect(refusal(user)?.reason == "not_service_account")
        var plainHTTP = good
        plainHTTP["token_uri"] = .string("http://oauth2.example.com/token")
        #expect(refusal(plainHTTP)?.description.hasPrefix(#"has a "token_uri" that"#) == true)
        #expect(throws: FirebaseCredentialError(reason: "unreadable", problem: "cannot be read")) {
            try FirebaseCredential(path: "/nonexistent/siwa-firebase.json")
        }
        #expect(throws: FirebaseCredentialError.self) { try FirebaseCredential(json: Array(pem.utf8)) }
    }
}
