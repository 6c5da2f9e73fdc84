import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import Synchronization

/// A real HTTP server on loopback (our libmicrohttpd listener) playing Apple's REST API:
/// `POST /auth/token` (authorization-code exchange), `POST /auth/revoke` and `GET /auth/keys`.
///
/// It checks every call like Apple does: a form body, a known `client_id`, and a `client_secret`
/// that is an ES256 JWT signed by the team's key (header `kid`; claims `iss` team, `aud`
/// `https://appleid.apple.com`, `sub` client id, `iat`/`exp` current and at most 180 days apart).
/// Codes are registered with `addCode` and are single-use. id_tokens are RS256, signed by a test
/// RSA key whose JWKS is served at `/auth/keys`. Every call is recorded.
final class FakeApple: Sendable {
    static let issuer = "https://appleid.apple.com"
    static let maxSecretLifetime: Int64 = 180 * 86_400
    static let sharedIDTokenKey: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)

    /// The user an authorization code stands for.
    struct User: Sendable {
        var sub: String
        var email: String? = nil
        var isPrivateEmail: Bool? = nil
        var emailVerified: Bool? = true
        /// The nonce of the (imagined) authorization request, echoed in the id_token.
        var nonce: String? = nil
        /// When set, the exchange must send this `redirect_uri`.
        var redirectURI: String? = nil
    }

    /// How the next calls are answered (after the checks are made and recorded).
    enum Answer: Sendable, Equatable {
        /// Like Apple: 200 when every check passes, else Apple's error.
        case normal
        /// 400 `{"error":"invalid_grant"}`.
        case invalidGrant
        /// 400 `{"error":"invalid_client"}`.
        case invalidClient
        /// Any status and body.
        case status(Int, String)
        /// Never answer (until `stop()`).
        case hang
    }

    /// One recorded request.
    struct Call: Sendable {
        var method: String
        var path: String
        var contentType: String?
        /// Decoded form fields; nil when the body is not a valid form.
        var form: [String: String]?
        /// Why the client secret was refused; nil when it passed (or was absent on a non-form path).
        var secretProblem: String?
        /// The status answered; 0 for a hung call.
        var status: Int
        /// The error answered, if any.
        var error: String?
    }

    let endpoint: FakeAppleEndpoint
    let server: HTTPServer

    init(teamID: String, keyID: String, secretKey: ECPublicKey, clientIDs: Set<String>,
         idTokenKey: RSAPrivateKey = FakeApple.sharedIDTokenKey, idTokenKid: String = "fake-apple-key") throws {
        endpoint = FakeAppleEndpoint(teamID: teamID, keyID: keyID, secretKey: secretKey, clientIDs: clientIDs,
                                     signer: NotificationSigner(key: idTokenKey, kid: idTokenKid))
        server = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2,
                                                                       connectionTimeout: 30, maxBody: 16 * 1024),
                                handler: endpoint)
    }

    /// `SIWA_APPLE_URL` for this fake.
    var baseURL: String { "http://127.0.0.1:\(server.port)" }
    var jwksURL: String { baseURL + "/auth/keys" }
    /// The JWKS publishing the id_token key.
    var jwks: String { endpoint.signer.jwks }
    var signer: NotificationSigner { endpoint.signer }

    /// Registers a single-use authorization code.
    func addCode(_ code: String, user: User) { endpoint.state.withLock { $0.codes[code] = user } }
    func answerToken(_ answer: Answer) { endpoint.state.withLock { $0.tokenAnswer = answer } }
    func answerRevoke(_ answer: Answer) { endpoint.state.withLock { $0.revokeAnswer = answer } }
    /// Pins the fake's clock (Unix seconds) for the client-secret and id_token times; nil = wall clock.
    func setClock(_ now: Int64?) { endpoint.state.withLock { $0.clock = now } }

    var calls: [Call] { endpoint.state.withLock { $0.calls } }
    func calls(to path: String) -> [Call] { calls.filter { $0.path == path } }
    /// Refresh tokens issued, with the client id they belong to.
    var issuedRefreshTokens: [String: String] { endpoint.state.withLock { $0.issued } }
    /// Refresh tokens revoked, in order.
    var revokedTokens: [String] { endpoint.state.withLock { $0.revoked } }
    /// Calls being held by `.hang`.
    var hungCalls: Int { endpoint.state.withLock { $0.hung.count } }

    /// Answers hung calls with 503 and stops the listener.
    func stop() {
        let hung = endpoint.state.withLock { state -> [HTTPResponder] in
            defer { state.hung.removeAll() }
            return state.hung
        }
        for responder in hung { responder.respond(.json(503, #"{"error":"shutting_down"}"#)) }
        server.shutdown(grace: 1)
    }

    /// nil when `token` is a client secret Apple would accept for `clientID` at `now`; else the reason.
    static func problem(withSecret token: String, clientID: String, teamID: String, keyID: String,
                        key: ECPublicKey, now: Int64) -> String? {
        guard let jws = try? CompactJWS.parse(token) else { return "not a compact JWS" }
        guard jws.header["alg"]?.stringValue == "ES256" else { return "alg is not ES256" }
        guard jws.header["kid"]?.stringValue == keyID else { return "kid is not the key id" }
        guard key.verifyES256(message: jws.signingInput, signature: jws.signature) else { return "bad signature" }
        let c = jws.claims
        guard c["iss"]?.stringValue == teamID else { return "iss is not the team id" }
        guard c["aud"]?.stringValue == issuer else { return "aud is not \(issuer)" }
        guard c["sub"]?.stringValue == clientID else { return "sub is not the client id" }
        guard let iat = c["iat"]?.int64Value, let exp = c["exp"]?.int64Value else { return "iat or exp missing" }
        guard iat <= now + 60 else { return "iat is in the future" }
        guard exp > now else { return "expired" }
        guard exp > iat, exp - iat <= maxSecretLifetime else { return "exp more than 180 days after iat" }
        return nil
    }
}

final class FakeAppleEndpoint: HTTPHandler {
    struct State {
        var codes: [String: FakeApple.User] = [:]
        var tokenAnswer = FakeApple.Answer.normal
        var revokeAnswer = FakeApple.Answer.normal
        var clock: Int64?
        var calls: [FakeApple.Call] = []
        var issued: [String: String] = [:]
        var revoked: [String] = []
        var hung: [HTTPResponder] = []
    }

    let teamID: String
    let keyID: String
    let secretKey: ECPublicKey
    let clientIDs: Set<String>
    let signer: NotificationSigner
    let state = Mutex(State())

    init(teamID: String, keyID: String, secretKey: ECPublicKey, clientIDs: Set<String>, signer: NotificationSigner) {
        self.teamID = teamID
        self.keyID = keyID
        self.secretKey = secretKey
        self.clientIDs = clientIDs
        self.signer = signer
    }

    func head(_ head: HTTPRequestHead) -> HTTPResponse? { nil }

    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { .json(413, #"{"error":"invalid_request"}"#) }

    private var now: Int64 { state.withLock { $0.clock } ?? Int64(Date().timeIntervalSince1970) }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let head = request.head
        var call = FakeApple.Call(method: head.method, path: head.path, contentType: head.contentType, form: nil,
                                  secretProblem: nil, status: 0, error: nil)
        let answer: FakeApple.Answer
        let response: HTTPResponse
        switch (head.method, head.path) {
        case ("GET", "/auth/keys"):
            answer = .normal
            response = .json(200, signer.jwks)
        case ("POST", "/auth/token"), ("POST", "/auth/revoke"):
            answer = state.withLock { head.path == "/auth/token" ? $0.tokenAnswer : $0.revokeAnswer }
            response = apple(request, call: &call)
        default:
            answer = .normal
            response = .json(404, #"{"error":"not_found"}"#)
        }

        let final: HTTPResponse?
        switch answer {
        case .normal: final = response
        case .invalidGrant: final = .json(400, #"{"error":"invalid_grant"}"#)
        case .invalidClient: final = .json(400, #"{"error":"invalid_client"}"#)
        case .status(let status, let body): final = .json(status, body)
        case .hang: final = nil
        }
        if let final {
            call.status = final.status
            call.error = AppleErrorCode.parse(final.body)?.description
        }
        state.withLock {
            $0.calls.append(call)
            if final == nil { $0.hung.append(responder) }
        }
        if let final { responder.respond(final) }
    }

    private static func error(_ code: String) -> HTTPResponse { .json(400, "{\"error\":\"\(code)\"}") }

    /// Apple's own checks and answer for the two form endpoints.
    private func apple(_ request: HTTPRequest, call: inout FakeApple.Call) -> HTTPResponse {
        guard let type = request.head.contentType?.lowercased(), type.hasPrefix(FormURLEncoding.contentType),
              let form = FormURLEncoding.decodeUnique(request.body)
        else { return Self.error("invalid_request") }
        call.form = form
        guard let clientID = form["client_id"], clientIDs.contains(clientID) else { return Self.error("invalid_client") }
        let now = self.now
        guard let secret = form["client_secret"] else {
            call.secretProblem = "missing"
            return Self.error("invalid_client")
        }
        if let problem = FakeApple.problem(withSecret: secret, clientID: clientID, teamID: teamID, keyID: keyID,
                                           key: secretKey, now: now) {
            call.secretProblem = problem
            return Self.error("invalid_client")
        }

        if request.head.path == "/auth/revoke" {
            guard let token = form["token"], !token.isEmpty, form["token_type_hint"] == "refresh_token" else {
                return Self.error("invalid_request")
            }
            state.withLock { $0.revoked.append(token) }
            return HTTPResponse(status: 200)
        }

        guard form["grant_type"] == "authorization_code" else { return Self.error("unsupported_grant_type") }
        guard let code = form["code"], !code.isEmpty else { return Self.error("invalid_request") }
        let user: FakeApple.User? = state.withLock { state in
            guard let user = state.codes[code], user.redirectURI == nil || user.redirectURI == form["redirect_uri"] else {
                return nil
            }
            state.codes[code] = nil           // single use
            return user
        }
        guard let user else { return Self.error("invalid_grant") }

        var claims: [String: JSONValue] = [
            "iss": .string(FakeApple.issuer), "aud": .string(clientID), "sub": .string(user.sub),
            "iat": .number(Double(now)), "exp": .number(Double(now + 600)), "auth_time": .number(Double(now)),
            "at_hash": .string(Base64URL.encode(SecureRandom.bytes(16))), "nonce_supported": .bool(true),
        ]
        if let email = user.email { claims["email"] = .string(email) }
        if let p = user.isPrivateEmail { claims["is_private_email"] = .string(p ? "true" : "false") }
        if let v = user.emailVerified { claims["email_verified"] = .bool(v) }
        if let nonce = user.nonce { claims["nonce"] = .string(nonce) }
        guard let idToken = try? signer.sign(claims: claims) else { return .json(500, #"{"error":"server_error"}"#) }
        let refreshToken = "r" + SHA256.hex(SecureRandom.bytes(16)) + ".0.sr." + Base64URL.encode(SecureRandom.bytes(16))
        state.withLock { $0.issued[refreshToken] = clientID }
        let body: [String: JSONValue] = [
            "access_token": .string("a" + SHA256.hex(SecureRandom.bytes(16))), "token_type": .string("Bearer"),
            "expires_in": .number(3600), "refresh_token": .string(refreshToken), "id_token": .string(idToken),
        ]
        return .json(200, JSONValue.object(body).serialized())
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
    static func fake(key: ECPublicKey = teamKey.publicKey) throws -> FakeApple {
        try FakeApple(teamID: teamID, keyID: keyID, secretKey: key, clientIDs: [clientID, otherClientID])
    }

    /// A client secret signed with `key`.
    static func secret(clientID: String = clientID, key: ECPrivateKey = teamKey, now: Int64 = wallClock(),
                       lifetime: Int64 = ClientSecret.defaultLifetime, keyID: String = keyID, teamID: String = teamID) throws -> String {
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
