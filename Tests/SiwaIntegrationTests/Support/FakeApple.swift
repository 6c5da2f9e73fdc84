import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools

/// The tests' Apple: a thin wrapper over the product's `DevApple` (the server `siwa-notify
/// dev-apple` runs), a real HTTP server on loopback playing `POST /auth/token`, `POST
/// /auth/revoke` and `GET /auth/keys`, checking every call like Apple does (form body, known
/// `client_id`, ES256 `client_secret` signed by the team's key) and recording it; with
/// `client_credentials` and `/auth/usermigrationinfo` for app transfers. Codes are
/// registered with `addCode` and are single-use; id_tokens are RS256, signed by a test RSA key
/// whose JWKS is served at `/auth/keys`.
final class FakeApple: Sendable {
    typealias User = DevApple.User
    typealias Answer = DevApple.Answer
    typealias Call = DevApple.Call

    static let issuer = DevApple.issuer
    static let maxSecretLifetime = DevApple.maxSecretLifetime
    static let sharedIDTokenKey: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)

    let apple: DevApple

    init(
        teamID: String, keyID: String, secretKey: ECPublicKey, clientIDs: Set<String>,
        idTokenKey: RSAPrivateKey = FakeApple.sharedIDTokenKey, idTokenKid: String = "fake-apple-key",
        transfers: DevApple.TransferRegistry = DevApple.TransferRegistry(),
        unknownRefreshToken: (@Sendable (String) -> String?)? = nil
    ) throws {
        var configuration = DevApple.Configuration(
            teamID: teamID, keyID: keyID, secretKey: secretKey, clientIDs: clientIDs,
            signer: NotificationSigner(key: idTokenKey, kid: idTokenKid))
        configuration.transfers = transfers
        configuration.unknownRefreshToken = unknownRefreshToken
        apple = try DevApple(configuration)
    }

    /// `SIWA_APPLE_URL` for this fake.
    var baseURL: String { apple.baseURL }
    var jwksURL: String { apple.jwksURL }
    /// The JWKS publishing the id_token key.
    var jwks: String { apple.jwks }
    var signer: NotificationSigner { apple.signer }

    /// Registers a single-use authorization code.
    func addCode(_ code: String, user: User) { apple.addCode(code, user: user) }
    /// `first` answers the next calls, one each; then `answer` for good.
    func answerToken(_ answer: Answer, first: [Answer] = []) { apple.answerToken(answer, first: first) }
    func answerRevoke(_ answer: Answer, first: [Answer] = []) { apple.answerRevoke(answer, first: first) }
    func answerClientCredentials(_ answer: Answer, first: [Answer] = []) { apple.answerClientCredentials(answer, first: first) }
    func answerMigration(_ answer: Answer, first: [Answer] = []) { apple.answerMigration(answer, first: first) }
    /// Pins the fake's clock (Unix seconds) for the client-secret and id_token times; nil = wall clock.
    func setClock(_ now: Int64?) { apple.setClock(now) }

    var calls: [Call] { apple.calls }
    func calls(to path: String) -> [Call] { apple.calls(to: path) }
    /// Refresh tokens issued (answered 200), with the client id they belong to.
    var issuedRefreshTokens: [String: String] { apple.issuedRefreshTokens }
    /// Refresh tokens revoked (answered 200), in order.
    var revokedTokens: [String] { apple.revokedTokens }
    /// Calls being held by `.hang`.
    var hungCalls: Int { apple.hungCalls }

    /// A refresh token and id_token for `user`, as a backend exchanging codes itself gets them.
    func issueTokens(for user: User, clientID: String) throws -> (refreshToken: String, idToken: String) {
        try apple.issueTokens(for: user, clientID: clientID)
    }
    /// The user stops using Apple sign-in: the token validates `invalid_grant` from now on.
    func revokeGrant(_ refreshToken: String) { apple.revokeGrant(refreshToken) }

    // App transfers (TN3159): two fakes sharing a `DevApple.TransferRegistry` are the two teams.
    var teamID: String { apple.teamID }
    func addUser(_ user: User) { apple.addUser(user) }
    /// The user stops using Apple sign-in: tokens `invalid_grant`, transfers `invalid_request`.
    func revokeUser(sub: String) { apple.revokeUser(sub: sub) }
    func acceptTransfer(transferSub: String, user: User) { apple.acceptTransfer(transferSub: transferSub, user: user) }
    var accessTokensIssued: Int { apple.accessTokensIssued }
    func expireAccessTokens() { apple.expireAccessTokens() }

    /// Answers hung calls with 503 and stops the listener.
    func stop() { apple.stop() }

    /// nil when `token` is a client secret Apple would accept for `clientID` at `now`; else the reason.
    static func problem(
        withSecret token: String, clientID: String, teamID: String, keyID: String,
        key: ECPublicKey, now: Int64
    ) -> String? {
        DevApple.problem(withSecret: token, clientID: clientID, teamID: teamID, keyID: keyID, key: key, now: now)
    }
}

/// The identifiers and keys the Apple-API tests share.
enum AppleTestSetup {
    static let teamID = "TEAM123456"
    static let keyID = "KEY7654321"
    static let clientID = "com.example.siwa.tests"
    static let otherClientID = "com.example.siwa.web"
    static let teamKey: ECPrivateKey = try! ECPrivateKey.generate()

    /// A started fake that knows `teamKey` and both client ids.
    static func fake(key: ECPublicKey = teamKey.publicKey, unknownRefreshToken: (@Sendable (String) -> String?)? = nil) throws -> FakeApple {
        try FakeApple(
            teamID: teamID, keyID: keyID, secretKey: key, clientIDs: [clientID, otherClientID], unknownRefreshToken: unknownRefreshToken)
    }

    /// A client secret signed with `key`.
    static func secret(
        clientID: String = clientID, key: ECPrivateKey = teamKey, now: Int64 = wallClock(),
        lifetime: Int64 = ClientSecret.defaultLifetime, keyID: String = keyID, teamID: String = teamID
    ) throws -> String {
        let secret = try ClientSecret(teamID: teamID, keyID: keyID, clientID: clientID, now: now, lifetime: lifetime)
        return secret.assemble(signature: try key.signES256(message: secret.signingInput))
    }

    static func wallClock() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// A signature check over the JWKS document `jwks` (as `KeyStore.check` does).
    static func signatureCheck(jwks: [UInt8]) throws -> @Sendable (String, [UInt8], [UInt8]) -> SignatureCheck {
        var keys: [String: RSAPublicKey] = [:]
        for jwk in try JWKSet.parseRSAKeys(jwks) {
            keys[jwk.kid] = try RSAPublicKey(modulus: jwk.modulus, exponent: jwk.exponent)
        }
        let known = keys
        return { kid, input, signature in
            guard let key = known[kid] else { return .unknownKey }
            return key.verifyRS256(message: input, signature: signature) ? .valid : .invalid
        }
    }
}
