import Foundation
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import Testing

/// The fake Apple's app-transfer endpoints over real HTTP: `client_credentials` for
/// `scope=user.migration`, then `/auth/usermigrationinfo` on the sending and the receiving team,
/// with Apple's field names and errors.
@Suite struct FakeAppleTransferTests {
    typealias S = AppleTestSetup
    static let receivingTeam = "TEAMB00000"
    static let receivingKey: ECPrivateKey = try! ECPrivateKey.generate()

    let helper = FakeAppleTests()

    /// Two teams sharing one registry: `S.teamID` sends, `receivingTeam` receives.
    func teams() throws -> (sending: FakeApple, receiving: FakeApple) {
        let registry = DevApple.TransferRegistry()
        let sending = try FakeApple(
            teamID: S.teamID, keyID: S.keyID, secretKey: S.teamKey.publicKey, clientIDs: [S.clientID], transfers: registry)
        let receiving = try FakeApple(
            teamID: Self.receivingTeam, keyID: S.keyID, secretKey: Self.receivingKey.publicKey, clientIDs: [S.clientID],
            transfers: registry)
        return (sending, receiving)
    }

    func accessToken(_ fake: FakeApple, secret: String) throws -> String {
        let r = try helper.post(
            fake, "/auth/token",
            [("client_id", S.clientID), ("client_secret", secret), ("grant_type", "client_credentials"), ("scope", "user.migration")])
        #expect(r.status == 200)
        let object = try JSONParser.parse(r.body)
        #expect(object["token_type"]?.stringValue == "Bearer" && object["expires_in"]?.int64Value == 3600)
        return try #require(object["access_token"]?.stringValue)
    }

    func migrate(_ fake: FakeApple, secret: String, bearer: String?, _ fields: [(String, String)]) throws -> FetchResponse {
        try helper.post(
            fake, "/auth/usermigrationinfo", [("client_id", S.clientID), ("client_secret", secret)] + fields, bearer: bearer)
    }

    @Test func transferBetweenTwoTeams() throws {
        let (sending, receiving) = try teams()
        defer {
            sending.stop()
            receiving.stop()
        }
        let sendingSecret = try S.secret()
        let receivingSecret = try S.secret(key: Self.receivingKey, teamID: Self.receivingTeam)
        sending.addUser(.init(sub: "001.shared", email: "ann@example.com", isPrivateEmail: false))
        sending.addUser(.init(sub: "001.relay", email: "x1@privaterelay.appleid.com", isPrivateEmail: true))
        sending.revokeUser(sub: "001.gone")

        let token = try accessToken(sending, secret: sendingSecret)
        var transferSubs: [String: String] = [:]
        for sub in ["001.shared", "001.relay", "001.unknown"] {
            let r = try migrate(sending, secret: sendingSecret, bearer: token, [("sub", sub), ("target", Self.receivingTeam)])
            #expect(r.status == 200)
            let object = try JSONParser.parse(r.body)
            #expect(object.objectValue?.keys.sorted() == ["transfer_sub"])
            let transferSub = try #require(object["transfer_sub"]?.stringValue)
            #expect(!transferSub.contains(sub))
            transferSubs[sub] = transferSub
        }
        // Stable per user and recipient, as Apple's.
        let again = try migrate(sending, secret: sendingSecret, bearer: token, [("sub", "001.shared"), ("target", Self.receivingTeam)])
        #expect(try JSONParser.parse(again.body)["transfer_sub"]?.stringValue == transferSubs["001.shared"])
        // A user who revoked: invalid_request.
        let gone = try migrate(sending, secret: sendingSecret, bearer: token, [("sub", "001.gone"), ("target", Self.receivingTeam)])
        #expect(gone.status == 400 && helper.errorOf(gone) == "invalid_request")

        // The receiving team exchanges them with its own access token and client secret.
        let receivingToken = try accessToken(receiving, secret: receivingSecret)
        func resolve(_ transferSub: String) throws -> JSONValue {
            let r = try migrate(receiving, secret: receivingSecret, bearer: receivingToken, [("transfer_sub", transferSub)])
            #expect(r.status == 200)
            return try JSONParser.parse(r.body)
        }
        let shared = try resolve(try #require(transferSubs["001.shared"]))
        #expect(shared["sub"]?.stringValue == DevApple.transferredSub(sub: "001.shared", team: Self.receivingTeam))
        #expect(shared["email"]?.stringValue == "ann@example.com" && shared["is_private_email"] == .bool(false))
        let relay = try resolve(try #require(transferSubs["001.relay"]))
        #expect(relay["is_private_email"] == .bool(true))
        #expect(relay["email"]?.stringValue?.hasSuffix("@privaterelay.appleid.com") == true)
        #expect(relay["email"]?.stringValue != "x1@privaterelay.appleid.com")  // a new relay address
        // Told directly: acceptTransfer wins.
        receiving.acceptTransfer(transferSub: "t.direct", user: .init(sub: "002.direct", email: "d@example.com", isPrivateEmail: false))
        #expect(try resolve("t.direct")["sub"]?.stringValue == "002.direct")
        // Unknown, or meant for another team: invalid_request.
        let unknown = try migrate(receiving, secret: receivingSecret, bearer: receivingToken, [("transfer_sub", "t.nobody")])
        #expect(unknown.status == 400 && helper.errorOf(unknown) == "invalid_request")
        let wrongTeam = try migrate(sending, secret: sendingSecret, bearer: token, [("transfer_sub", transferSubs["001.shared"]!)])
        #expect(wrongTeam.status == 400 && helper.errorOf(wrongTeam) == "invalid_request")
        #expect(sending.calls(to: "/auth/usermigrationinfo").filter { $0.status == 200 }.count == 4)
    }

    @Test func refusesWhatAppleRefuses() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let secret = try S.secret()
        func credentials(_ fields: [(String, String)]) throws -> FetchResponse {
            try helper.post(fake, "/auth/token", [("client_id", S.clientID), ("grant_type", "client_credentials")] + fields)
        }
        #expect(helper.errorOf(try credentials([("client_secret", secret)])) == "invalid_request")
        #expect(helper.errorOf(try credentials([("client_secret", secret), ("scope", "name email")])) == "invalid_scope")
        #expect(
            helper.errorOf(try credentials([("client_secret", try S.secret(key: ECPrivateKey.generate())), ("scope", "user.migration")]))
                == "invalid_client")
        #expect(fake.accessTokensIssued == 0)

        // No, an unknown, or an expired access token: 401, whatever the rest.
        let target = [("sub", "001.a"), ("target", "TEAMB00000")]
        #expect(try migrate(fake, secret: secret, bearer: nil, target).status == 401)
        #expect(try migrate(fake, secret: secret, bearer: "a-made-up-token", target).status == 401)
        let token = try accessToken(fake, secret: secret)
        #expect(try migrate(fake, secret: secret, bearer: token, target).status == 200)
        fake.expireAccessTokens()
        #expect(try migrate(fake, secret: secret, bearer: token, target).status == 401)
        // A live token but a bad client secret: invalid_client; a missing field: invalid_request.
        let fresh = try accessToken(fake, secret: secret)
        let badSecret = try migrate(fake, secret: try S.secret(key: ECPrivateKey.generate()), bearer: fresh, target)
        #expect(badSecret.status == 400 && helper.errorOf(badSecret) == "invalid_client")
        #expect(helper.errorOf(try migrate(fake, secret: secret, bearer: fresh, [("sub", "001.a")])) == "invalid_request")
        #expect(helper.errorOf(try migrate(fake, secret: secret, bearer: fresh, [("sub", "001.a"), ("target", S.teamID)])) == "invalid_request")
    }

    @Test func configurableAnswers() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let secret = try S.secret()
        fake.answerClientCredentials(.normal, first: [.throttled(retryAfter: 7), .status(503, "{}")])
        let fields = [("client_id", S.clientID), ("client_secret", secret), ("grant_type", "client_credentials"), ("scope", "user.migration")]
        let throttled = try helper.post(fake, "/auth/token", fields)
        #expect(throttled.status == 429 && throttled.headers["retry-after"] == "7")
        #expect(try helper.post(fake, "/auth/token", fields).status == 503)
        let token = try accessToken(fake, secret: secret)
        fake.answerMigration(.hang, first: [.normal, .throttled(retryAfter: nil)])
        let target = [("sub", "001.a"), ("target", "TEAMB00000")]
        #expect(try migrate(fake, secret: secret, bearer: token, target).status == 200)
        #expect(try migrate(fake, secret: secret, bearer: token, target).status == 429)
        do {
            _ = try helper.post(
                fake, "/auth/usermigrationinfo", [("client_id", S.clientID), ("client_secret", secret)] + target, timeout: 0.5,
                bearer: token)
            Issue.record("a hung call returned")
        } catch let error as FetchError {
            #expect(error.code == .timedOut)
        }
        // The refresh-token grant keeps its own answers.
        #expect(fake.calls(to: "/auth/token").map(\.status) == [429, 503, 200])
    }
}
