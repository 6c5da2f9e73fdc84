import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import Synchronization
import Testing

/// The Cognito admin client against moto's server (a local user pool: federated, linked and
/// other users, real refresh tokens), and against a loopback fake for what moto lacks
/// (AdminDisableProviderForUser, AdminLinkProviderForUser: moto answers 500) and for answers
/// moto never gives (throttling, 5xx, a refused credential). The fake checks each request's
/// signature against what arrived on the wire.
@Suite("Cognito admin client", .serialized)
struct CognitoClientTests {
    static let credentials = SigV4.Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    static let appleSub = "001234.5f3c8a9b0d1e4f2a8b7c6d5e4f3a2b1c.0042"
    static let linkedSub = "001234.aa11bb22cc33dd44ee55ff6677889900.0007"
    static let otherSub = "001234.99999999999999999999999999999999.0001"

    static func client(url: String, pool: String = "us-east-1_none", options: CognitoClient.Options = .init()) throws -> CognitoClient {
        try CognitoClient(
            region: "us-east-1", userPoolID: pool, credentials: credentials, url: url, options: options,
            logger: Logger(label: "cognito-test"))
    }

    /// `.done`'s value, or a recorded issue.
    static func value<T>(_ result: ProviderStep<T>, sourceLocation: SourceLocation = #_sourceLocation) -> T? {
        if case .done(let value, _) = result { return value }
        Issue.record("expected done, got \(result)", sourceLocation: sourceLocation)
        return nil
    }

    static func identities(_ entries: [(String, String)]) -> JSONValue {
        .string(
            JSONValue.array(
                entries.map {
                    .object(["providerName": .string($0.0), "providerType": .string($0.0), "userId": .string($0.1), "primary": .bool(false)])
                }
            ).serialized())
    }

    /// A pool on moto: the federated Apple user, 70 others, a native user linked to another Apple
    /// identity (last, so that finding it reads a second ListUsers page), and a user with other
    /// identities. moto has no AdminLinkProviderForUser: the linked user gets the `identities`
    /// attribute Cognito would give it.
    struct Pool {
        let moto: MotoServer
        let admin: CognitoClient
        let id: String

        init(moto: MotoServer, admin: CognitoClient, id: String) {
            self.moto = moto
            self.admin = admin
            self.id = id
        }

        init() throws {
            moto = try MotoServer()
            let setup = try CognitoClientTests.client(url: moto.url)
            let created = setup.call("CreateUserPool", ["PoolName": .string("siwa")])
            id = try #require(CognitoClientTests.value(created)??["UserPool"]?["Id"]?.stringValue)
            admin = try CognitoClientTests.client(url: moto.url, pool: id)
            func create(_ username: String, _ attributes: [String: JSONValue]) throws {
                let result = admin.call(
                    "AdminCreateUser",
                    [
                        "UserPoolId": .string(id), "Username": .string(username), "MessageAction": .string("SUPPRESS"),
                        "UserAttributes": .array(attributes.map { .object(["Name": .string($0.key), "Value": $0.value]) }),
                    ])
                _ = try #require(CognitoClientTests.value(result))
            }
            try create(Cognito.federatedUsername(sub: appleSub), ["identities": identities([("SignInWithApple", appleSub)])])
            for n in 0..<70 { try create("filler\(n)", ["email": .string("filler\(n)@example.com")]) }
            try create("alice", ["identities": identities([("SignInWithApple", linkedSub)])])
            try create("bob", ["identities": identities([("SignInWithApple", otherSub), ("Google", "g-1")])])
            for user in ["alice", "bob"] {
                _ = admin.call(
                    "AdminSetUserPassword",
                    ["UserPoolId": .string(id), "Username": .string(user), "Password": .string("Pa55word!long"), "Permanent": .bool(true)])
            }
        }

        /// A refresh token of `user` (ADMIN_USER_PASSWORD_AUTH through a new app client).
        func refreshToken(_ user: String) throws -> (token: String, clientID: String) {
            let appClient = admin.call(
                "CreateUserPoolClient",
                [
                    "UserPoolId": .string(id), "ClientName": .string("app"),
                    "ExplicitAuthFlows": .array([.string("ALLOW_ADMIN_USER_PASSWORD_AUTH"), .string("ALLOW_REFRESH_TOKEN_AUTH")]),
                ])
            let clientID = try #require(CognitoClientTests.value(appClient)??["UserPoolClient"]?["ClientId"]?.stringValue)
            let auth = admin.call(
                "AdminInitiateAuth",
                [
                    "UserPoolId": .string(id), "ClientId": .string(clientID), "AuthFlow": .string("ADMIN_USER_PASSWORD_AUTH"),
                    "AuthParameters": .object(["USERNAME": .string(user), "PASSWORD": .string("Pa55word!long")]),
                ])
            let token = try #require(CognitoClientTests.value(auth)??["AuthenticationResult"]?["RefreshToken"]?.stringValue)
            return (token, clientID)
        }

        /// Whether the refresh token still gets new tokens.
        func refreshes(_ token: String, clientID: String) -> ProviderStep<Bool> {
            admin.call(
                "AdminInitiateAuth",
                [
                    "UserPoolId": .string(id), "ClientId": .string(clientID), "AuthFlow": .string("REFRESH_TOKEN_AUTH"),
                    "AuthParameters": .object(["REFRESH_TOKEN": .string(token)]),
                ]
            ).map { $0?["AuthenticationResult"]?["AccessToken"] != nil }
        }

        func exists(_ username: String) -> Bool {
            if case .done = admin.call("AdminGetUser", ["UserPoolId": .string(id), "Username": .string(username)]) { return true }
            return false
        }
    }

    @Test("moto: the federated Apple user by its name, the linked native user through its identities, an unknown sub")
    func findsUsers() throws {
        let pool = try Pool()
        defer { pool.moto.stop() }
        #expect(
            pool.admin.findUser(sub: Self.appleSub)
                == .done(CognitoUser(username: Cognito.federatedUsername(sub: Self.appleSub), linked: false, appleOnly: true), status: 200))
        #expect(pool.admin.findUser(sub: Self.linkedSub) == .done(CognitoUser(username: "alice", linked: true, appleOnly: false), status: 200))
        #expect(pool.admin.findUser(sub: "001234.00000000000000000000000000000000.0000") == .userNotFound(status: 200))
        // One page does not reach alice: the search says so rather than "no such user".
        var onePage = CognitoClient.Options()
        onePage.maxScanPages = 1
        let short = try Self.client(url: pool.moto.url, pool: pool.id, options: onePage)
        #expect(short.findUser(sub: Self.linkedSub) == .refused(ProviderFailure(reason: "linked_user_search_limit", blame: .request)))
    }

    @Test("moto: a global sign-out ends the user's refresh tokens, and only that user's")
    func globalSignOut() throws {
        let pool = try Pool()
        defer { pool.moto.stop() }
        let alice = try pool.refreshToken("alice")
        let bob = try pool.refreshToken("bob")
        #expect(pool.refreshes(alice.token, clientID: alice.clientID) == .done(true, status: 200))
        #expect(pool.admin.globalSignOut(username: "alice") == .done(true, status: 200))
        guard case .refused(let failure) = pool.refreshes(alice.token, clientID: alice.clientID) else {
            Issue.record("alice's refresh token still works after the sign-out")
            return
        }
        #expect(failure.reason == "NotAuthorizedException")
        #expect(pool.refreshes(bob.token, clientID: bob.clientID) == .done(true, status: 200))
        #expect(pool.admin.globalSignOut(username: "nobody") == .userNotFound(status: 400))
    }

    @Test("moto: deleting removes only that user, and deleting it again is success")
    func deleteUser() throws {
        let pool = try Pool()
        defer { pool.moto.stop() }
        let federated = Cognito.federatedUsername(sub: Self.appleSub)
        #expect(pool.admin.deleteUser(username: federated) == .done(true, status: 200))
        #expect(!pool.exists(federated))
        #expect(pool.exists("alice") && pool.exists("bob"))
        #expect(pool.admin.deleteUser(username: federated) == .done(false, status: 400))
        #expect(pool.admin.findUser(sub: Self.appleSub) == .userNotFound(status: 200))
    }

    @Test("moto: the start-up check passes on the pool and blames the pool id for another")
    func startUpCheck() throws {
        let pool = try Pool()
        defer { pool.moto.stop() }
        #expect(pool.admin.check() == .done([], status: 200))
        let wrong = try Self.client(url: pool.moto.url, pool: "us-east-1_doesnotexist")
        guard case .refused(let failure) = wrong.check() else {
            Issue.record("a missing pool passed the check")
            return
        }
        #expect(failure.blame == .tenant)
        #expect(failure.reason == "ResourceNotFoundException")
    }

    @Test("fake: AdminDisableProviderForUser names the provider and subject, signed as it went on the wire")
    func disableProvider() throws {
        let fake = try FakeCognito { _ in .json(200, "{}") }
        defer { fake.stop() }
        let client = try Self.client(url: fake.url, pool: "us-east-1_pool")
        #expect(client.disableAppleProvider(sub: Self.linkedSub) == .done(true, status: 200))
        let seen = try #require(fake.requests.first)
        #expect(seen.target == "AWSCognitoIdentityProviderService.AdminDisableProviderForUser")
        #expect(seen.contentType == "application/x-amz-json-1.1")
        #expect(seen.signatureMatches)
        #expect(seen.json?["UserPoolId"]?.stringValue == "us-east-1_pool")
        #expect(seen.json?["User"]?["ProviderName"]?.stringValue == "SignInWithApple")
        #expect(seen.json?["User"]?["ProviderAttributeName"]?.stringValue == "Cognito_Subject")
        #expect(seen.json?["User"]?["ProviderAttributeValue"]?.stringValue == Self.linkedSub)
        try fake.expectModelled()
    }

    @Test("fake: a temporary credential's token is sent and signed")
    func sessionToken() throws {
        let fake = try FakeCognito { _ in .json(200, "{}") }
        defer { fake.stop() }
        var credentials = Self.credentials
        credentials.sessionToken = "session-token-value"
        let client = try CognitoClient(
            region: "us-east-1", userPoolID: "us-east-1_pool", credentials: credentials, url: fake.url, logger: Logger(label: "t"))
        #expect(client.check() == .done([], status: 200))
        let seen = try #require(fake.requests.first)
        #expect(seen.securityToken == "session-token-value")
        #expect(seen.signatureMatches)
        try fake.expectModelled()
    }

    @Test("fake: throttling and 5xx are retried later with Retry-After; a refused credential or permission says so")
    func failures() throws {
        let answer = Mutex<HTTPResponse>(.json(200, "{}"))
        let fake = try FakeCognito { _ in answer.withLock { $0 } }
        defer { fake.stop() }
        let client = try Self.client(url: fake.url)
        answer.withLock {
            $0 = .json(400, #"{"__type":"TooManyRequestsException","message":"Too many requests"}"#, headers: [HTTPHeader("Retry-After", "3")])
        }
        #expect(
            client.globalSignOut(username: "u")
                == .retryLater(ProviderFailure(status: 400, reason: "TooManyRequestsException", retryAfter: .seconds(3))))
        answer.withLock { $0 = HTTPResponse(status: 503) }
        #expect(client.deleteUser(username: "u") == .retryLater(ProviderFailure(status: 503, reason: "http_503")))
        answer.withLock { $0 = .json(400, #"{"__type":"UnrecognizedClientException","message":"The security token is invalid"}"#) }
        #expect(client.check() == .refused(ProviderFailure(status: 400, reason: "UnrecognizedClientException", blame: .credential)))
        answer.withLock { $0 = .json(400, #"{"__type":"AccessDeniedException","message":"not authorized to perform"}"#) }
        #expect(client.deleteUser(username: "u") == .refused(ProviderFailure(status: 400, reason: "AccessDeniedException", blame: .permission)))
        answer.withLock { $0 = .text(200, "not json") }
        #expect(client.findUser(sub: "s") == .retryLater(ProviderFailure(status: 200, reason: "malformed_response")))
        // The 503 without a body comes from in front of the API, and the text is no JSON answer:
        // neither is the model's to describe.
        try fake.expectModelled { $0.answer?.status == 503 || $0.answer?.body == Array("not json".utf8) }
    }

    @Test("the botocore check refuses what the model does not describe: an operation, a member, a pattern, an answer, an error")
    func botocoreCheckRefuses() throws {
        func line(_ operation: String, _ body: String, _ status: Int = 200, _ answer: String = "{}") -> String {
            JSONValue.object([
                "target": .string(Cognito.targetPrefix + operation), "body": .string(body), "status": .number(Double(status)),
                "response_body": .string(answer),
            ]).serialized() + "\n"
        }
        func check(_ lines: [String]) throws -> (status: Int32, output: String) {
            let file = NSTemporaryDirectory() + "siwa-botocore-\(UInt64.random(in: 0...UInt64.max)).jsonl"
            try lines.joined().write(toFile: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: file) }
            return try OpenAPITests.python([
                "scripts/botocore-check", "requests", "Tests/SiwaIntegrationTests/Fixtures/providers/cognito-idp-service-2.json", file,
            ])
        }
        let good = [
            line("ListUsers", #"{"UserPoolId":"us-east-1_pool","Limit":1}"#),
            line("AdminGetUser", #"{"UserPoolId":"us-east-1_pool","Username":"u"}"#, 400, #"{"__type":"UserNotFoundException","message":"m"}"#),
        ]
        #expect(try check(good).status == 0)
        let bad = [
            line("AdminRemoveUser", "{}"),
            line("ListUsers", #"{"UserPoolId":"us-east-1_pool","Limt":1}"#),
            line("ListUsers", #"{"UserPoolId":"pool"}"#),
            line("AdminGetUser", #"{"UserPoolId":"us-east-1_pool","Username":"u"}"#),
            line("AdminGetUser", #"{"UserPoolId":"us-east-1_pool","Username":"u"}"#, 400, #"{"__type":"NoSuchUser","message":"m"}"#),
        ]
        for request in bad {
            let result = try check(good + [request])
            #expect(result.status == 1, "\(request)")
            #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        }
    }

    @Test("nobody listening is retried later; an http:// address off loopback is refused at construction")
    func addresses() throws {
        let closed = ServerProcess.freePort()
        let client = try Self.client(url: "http://127.0.0.1:\(closed)/")
        #expect(client.check() == .retryLater(ProviderFailure(reason: "couldNotConnect")))
        #expect(throws: ConfigurationError.self) { try Self.client(url: "http://cognito.example.com/") }
        let regional = try CognitoClient(region: "eu-west-1", userPoolID: "p", credentials: Self.credentials, logger: Logger(label: "t"))
        #expect(regional.url == "https://cognito-idp.eu-west-1.amazonaws.com/")
    }
}

/// A loopback stand-in for Cognito's API: records each request and recomputes its signature
/// from the headers and body that arrived, so a signed header the transfer changed shows.
final class FakeCognito: HTTPHandler {
    struct Seen: Sendable {
        var target: String?
        var contentType: String?
        var securityToken: String?
        var json: JSONValue?
        var signatureMatches: Bool
        var body = ""
        /// The fake's answer.
        var answer: HTTPResponse?

        /// One line for `scripts/botocore-check requests`.
        var line: String {
            var fields: [String: JSONValue] = ["target": target.map(JSONValue.string) ?? .null, "body": .string(body)]
            if let answer {
                fields["status"] = .number(Double(answer.status))
                fields["response_body"] = .string(String(decoding: answer.body, as: UTF8.self))
            }
            return JSONValue.object(fields).serialized() + "\n"
        }
    }

    private let server = Mutex<HTTPServer?>(nil)
    private let seen = Mutex<[Seen]>([])
    private let answer: @Sendable (Seen) -> HTTPResponse
    private let boundPort = Atomic<Int>(0)
    var port: UInt16 { UInt16(boundPort.load(ordering: .relaxed)) }

    init(answer: @escaping @Sendable (Seen) -> HTTPResponse) throws {
        self.answer = answer
        let s = try HTTPServer(
            configuration: HTTPServerConfiguration(
                host: "127.0.0.1", port: 0, threads: 2,
                keptHeaders: ["host", "x-amz-target", "x-amz-date", "x-amz-security-token", "authorization"]),
            handler: self)
        boundPort.store(Int(s.port), ordering: .relaxed)
        server.withLock { $0 = s }
    }

    var url: String { "http://127.0.0.1:\(port)/" }
    var requests: [Seen] { seen.withLock { $0 } }

    func stop() {
        let s = server.withLock { s -> HTTPServer? in
            defer { s = nil }
            return s
        }
        s?.shutdown(grace: .zero)
    }

    func head(_ head: HTTPRequestHead) -> HTTPResponse? { head.method == "POST" ? nil : HTTPResponse(status: 405) }
    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let head = request.head
        var headers: [(String, String)] = []
        for name in ["host", "x-amz-target"] { if let value = head.header(name) { headers.append((name, value)) } }
        if let type = head.contentType { headers.append(("content-type", type)) }
        var credentials = CognitoClientTests.credentials
        credentials.sessionToken = head.header("x-amz-security-token")
        let signed = SigV4.sign(
            SigV4.Request(method: head.method, path: "/", headers: headers, body: request.body), credentials: credentials,
            region: "us-east-1", service: Cognito.service, amzDate: head.header("x-amz-date") ?? "", sha256: SHA256.hash,
            hmac: HMACSHA256.authenticate)
        let entry = Seen(
            target: head.header("x-amz-target"), contentType: head.contentType, securityToken: head.header("x-amz-security-token"),
            json: try? JSONParser.parse(request.body), signatureMatches: signed.authorization == head.header("authorization"),
            body: String(decoding: request.body, as: UTF8.self))
        let index = seen.withLock { seen in
            seen.append(entry)
            return seen.count - 1
        }
        let reply = answer(entry)
        seen.withLock { $0[index].answer = reply }
        responder.respond(reply)
    }

    /// Checks the recorded requests and answers against botocore's model of Cognito (the used
    /// subset, Fixtures/providers/cognito-idp-service-2.json) with `scripts/botocore-check`.
    /// `unmodelled`: answers the model cannot describe (a bare 503 from in front of the API, a
    /// body that is not JSON), left out.
    func expectModelled(unmodelled: (Seen) -> Bool = { _ in false }, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let file = NSTemporaryDirectory() + "siwa-botocore-\(UInt64.random(in: 0...UInt64.max)).jsonl"
        try requests.filter { !unmodelled($0) }.map(\.line).joined().write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try OpenAPITests.python([
            "scripts/botocore-check", "requests", "Tests/SiwaIntegrationTests/Fixtures/providers/cognito-idp-service-2.json", file,
        ])
        #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
    }
}
