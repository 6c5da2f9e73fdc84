import Foundation
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import SiwaRuntime
import Synchronization

/// A loopback stand-in for Apple's REST API: `POST /auth/token` (authorization-code exchange,
/// refresh-token validation, `client_credentials` for `scope=user.migration`), `POST /auth/revoke`,
/// `POST /auth/usermigrationinfo` (app transfers between teams) and `GET /auth/keys`.
/// `siwa-notify dev-apple` runs it for local development; the integration tests use it as their
/// fake Apple. Two instances sharing a `TransferRegistry` play the two teams of an app transfer.
///
/// It checks every call like Apple does: a form body, a known `client_id` (any when
/// `clientIDs` is nil), and a `client_secret` that is an ES256 JWT signed by the team's key
/// (header `kid`; claims `iss` team, `aud` `https://appleid.apple.com`, `sub` client id,
/// `iat`/`exp` current and at most 180 days apart). Codes are registered with `addCode` and are
/// single-use (or resolved by `unknownCode`). id_tokens are RS256, signed by `signer`, whose
/// JWKS is served at `/auth/keys`. Every call is recorded. Never meant for production traffic.
public final class DevApple: Sendable {
    /// The `iss` of id_tokens and the `aud` of client secrets.
    public static let issuer = "https://appleid.apple.com"
    /// Longest client-secret lifetime Apple accepts: 180 days.
    public static let maxSecretLifetime: Int64 = 180 * 86_400

    /// The user an authorization code stands for.
    public struct User: Sendable, Equatable {
        public var sub: String
        public var email: String?
        public var isPrivateEmail: Bool?
        public var emailVerified: Bool?
        /// The nonce of the (imagined) authorization request, echoed in the id_token.
        public var nonce: String?
        /// When set, the exchange must send this `redirect_uri`.
        public var redirectURI: String?
        /// `transfer_sub` in the id_token: the user's identifier from the team the app came from.
        public var transferSub: String? = nil

        public init(
            sub: String, email: String? = nil, isPrivateEmail: Bool? = nil, emailVerified: Bool? = true,
            nonce: String? = nil, redirectURI: String? = nil
        ) {
            self.sub = sub
            self.email = email
            self.isPrivateEmail = isPrivateEmail
            self.emailVerified = emailVerified
            self.nonce = nonce
            self.redirectURI = redirectURI
        }
    }

    /// How the next calls are answered (after the checks are made and recorded).
    public enum Answer: Sendable, Equatable {
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
        /// 429 `{"error":"too_many_requests"}`, with `Retry-After` (seconds) when given.
        case throttled(retryAfter: Int?)
        /// Like `normal` (the call takes effect at once), but the answer is sent `seconds` later.
        case delay(Double)
        /// Apple's answer after the same checks (200 for a good revoke), but the call changes
        /// nothing: a revoke Apple answers 200 and does not perform (its 200 proves nothing), so
        /// the token still validates afterwards.
        case acceptWithoutEffect
    }

    /// The answers of one endpoint: the `first` ones in order, one per call, then `then` for good.
    struct AnswerPlan {
        var first: [Answer] = []
        var then = Answer.normal

        mutating func next() -> Answer {
            first.isEmpty ? then : first.removeFirst()
        }
    }

    /// One recorded request.
    public struct Call: Sendable {
        public var method: String
        public var path: String
        public var contentType: String?
        /// Decoded form fields; nil when the body is not a valid form.
        public var form: [String: String]?
        /// Why the client secret was refused; nil when it passed (or was absent on a non-form path).
        public var secretProblem: String?
        /// The status answered; 0 for a hung call.
        public var status: Int
        /// The error answered, if any.
        public var error: String?
        /// The user of the exchanged code or of the revoked refresh token, when known (for
        /// `/auth/usermigrationinfo`: the `sub` asked about, or the new `sub` answered).
        public var sub: String?
        /// The transfer identifier minted or asked about (`/auth/usermigrationinfo`).
        public var transferSub: String? = nil
        /// When the request came in (Unix seconds, the wall clock).
        public var at: Double = 0
    }

    /// What the server is and whom it trusts.
    public struct Configuration: Sendable {
        /// The team id client secrets must name (`iss`).
        public var teamID: String
        /// The key id client secrets must name (header `kid`).
        public var keyID: String
        /// The public half of the team's `.p8` key.
        public var secretKey: ECPublicKey
        /// Accepted client ids; nil accepts any. Default nil.
        public var clientIDs: Set<String>?
        /// Signs id_tokens; its JWKS is served at `/auth/keys`.
        public var signer: NotificationSigner
        /// Listen host. Default 127.0.0.1 (loopback only).
        public var host: String = "127.0.0.1"
        /// Listen port; 0 lets the kernel pick. Default 0.
        public var port: UInt16 = 0
        /// The user of a code that was not registered with `addCode`; nil refuses it
        /// (`invalid_grant`). Default nil.
        public var unknownCode: (@Sendable (String) -> User?)?
        /// The owner (`sub`) of a refresh token this fake never issued, for validation; nil (the
        /// default) answers `invalid_grant` for every unknown token. For load tests.
        public var unknownRefreshToken: (@Sendable (String) -> String?)?
        /// Called after every recorded call (from a listener thread). Default nil.
        public var onCall: (@Sendable (Call) -> Void)?
        /// Where transfer identifiers minted by a sending team are found by the receiving team;
        /// give two instances the same one to play an app transfer. Default: one of its own.
        public var transfers = TransferRegistry()
        /// Seconds a `client_credentials` access token lives. Default 3600, as Apple's.
        public var accessTokenLifetime: Int64 = 3600

        public init(
            teamID: String, keyID: String, secretKey: ECPublicKey, clientIDs: Set<String>? = nil,
            signer: NotificationSigner
        ) {
            self.teamID = teamID
            self.keyID = keyID
            self.secretKey = secretKey
            self.clientIDs = clientIDs
            self.signer = signer
        }
    }

    private let endpoint: Endpoint
    private let server: HTTPServer

    /// Starts listening.
    public init(_ configuration: Configuration) throws {
        endpoint = Endpoint(configuration)
        server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                host: configuration.host, port: configuration.port,
                threads: 2, connectionTimeout: .seconds(30), maxBody: 16 * 1024),
            handler: endpoint)
    }

    /// The bound port.
    public var port: UInt16 { server.port }
    /// `SIWA_APPLE_URL` for this server.
    public var baseURL: String { "http://\(endpoint.configuration.host):\(server.port)" }
    /// Where the id_token key set is served.
    public var jwksURL: String { baseURL + "/auth/keys" }
    /// The JWKS publishing the id_token key.
    public var jwks: String { endpoint.configuration.signer.jwks }
    public var signer: NotificationSigner { endpoint.configuration.signer }

    /// Registers a single-use authorization code.
    public func addCode(_ code: String, user: User) { endpoint.state.withLock { $0.codes[code] = user } }
    /// How `/auth/token` answers the authorization-code and refresh-token grants: `first` for the
    /// next calls, one each, then `answer`.
    public func answerToken(_ answer: Answer, first: [Answer] = []) {
        endpoint.state.withLock { $0.tokenAnswer = AnswerPlan(first: first, then: answer) }
    }
    public func answerRevoke(_ answer: Answer, first: [Answer] = []) {
        endpoint.state.withLock { $0.revokeAnswer = AnswerPlan(first: first, then: answer) }
    }
    /// How `/auth/token` answers `grant_type=client_credentials`.
    public func answerClientCredentials(_ answer: Answer, first: [Answer] = []) {
        endpoint.state.withLock { $0.credentialsAnswer = AnswerPlan(first: first, then: answer) }
    }
    /// How `/auth/usermigrationinfo` answers.
    public func answerMigration(_ answer: Answer, first: [Answer] = []) {
        endpoint.state.withLock { $0.migrationAnswer = AnswerPlan(first: first, then: answer) }
    }
    /// Pins the clock (Unix seconds) for the client-secret and id_token times; nil = wall clock.
    public func setClock(_ now: Int64?) { endpoint.state.withLock { $0.clock = now } }

    /// Every call so far, in order.
    public var calls: [Call] { endpoint.state.withLock { $0.calls } }
    public func calls(to path: String) -> [Call] { calls.filter { $0.path == path } }
    /// Refresh tokens issued (answered with 200), with the client id they belong to.
    public var issuedRefreshTokens: [String: String] { endpoint.state.withLock { $0.issued.mapValues(\.clientID) } }
    /// Refresh tokens revoked (answered with 200), in order.
    public var revokedTokens: [String] { endpoint.state.withLock { $0.revoked } }
    /// Calls being held by `.hang`.
    public var hungCalls: Int { endpoint.state.withLock { $0.hung.count } }

    /// A refresh token and its id_token for `user`, as if a backend had exchanged a code with Apple
    /// itself (what it then hands over at `POST /apple/refresh-tokens`).
    public func issueTokens(for user: User, clientID: String) throws -> (refreshToken: String, idToken: String) {
        try endpoint.issue(user, clientID: clientID, now: endpoint.now)
    }

    /// The user revokes the grant at Apple (Settings → Sign in with Apple → Stop using): the
    /// refresh token validates `invalid_grant` from now on.
    public func revokeGrant(_ refreshToken: String) { endpoint.state.withLock { $0.revoked.append(refreshToken) } }

    /// The user `sub` stops using Apple sign-in with the app `clientID` (every app when nil): each
    /// refresh token issued for them (to that app) validates `invalid_grant` from now on, and
    /// Apple sends no notification (a missed `consent-revoked`). Returns how many tokens.
    @discardableResult
    public func revokeGrant(sub: String, clientID: String? = nil) -> Int { endpoint.revokeGrant(sub: sub, clientID: clientID) }

    /// The development endpoint that does `revokeGrant(sub:clientID:)` over HTTP (form fields
    /// `sub`, optional `client_id`; answers `{"revoked_tokens":N}`), for trying reconciliation
    /// locally: `curl -d sub=S http://127.0.0.1:9180/dev/revoke-grant`. Apple has no such
    /// endpoint; the fake listens on loopback only.
    public static let revokeGrantPath = "/dev/revoke-grant"

    /// The team id this fake plays.
    public var teamID: String { endpoint.configuration.teamID }

    /// Tells the fake about a user of this team (the email a transfer carries to the receiving
    /// team). Users never told about are private-relay users.
    public func addUser(_ user: User) { endpoint.state.withLock { $0.users[user.sub] = user } }

    /// The user stops using Apple sign-in with this team's apps: every refresh token issued for
    /// `sub` validates `invalid_grant`, and a transfer identifier for them is refused
    /// (`invalid_request`), as Apple refuses users who revoked before a transfer.
    public func revokeUser(sub: String) {
        endpoint.state.withLock { state in
            state.revokedUsers.insert(sub)
            state.revoked.append(contentsOf: state.issued.filter { $0.value.sub == sub }.map(\.key))
        }
    }

    /// The receiving team's side of a transfer, told directly: `transferSub` resolves to `user`
    /// (its new `sub` and email) at `/auth/usermigrationinfo`. Without this, transfer identifiers
    /// minted for this team by a fake sharing the `TransferRegistry` resolve to a `sub` derived
    /// from the sending team's one (`DevApple.transferredSub`).
    public func acceptTransfer(transferSub: String, user: User) {
        endpoint.state.withLock { $0.accepted[transferSub] = user }
    }

    /// Access tokens issued by `client_credentials` so far.
    public var accessTokensIssued: Int { endpoint.state.withLock { $0.accessTokens.count } }

    /// Every access token issued so far expires now (the next `/auth/usermigrationinfo` is a 401).
    public func expireAccessTokens() {
        endpoint.state.withLock { state in
            for key in state.accessTokens.keys { state.accessTokens[key]?.expiresAt = Int64.min }
        }
    }

    /// Answers hung calls with 503 and stops the listener.
    public func stop() {
        let hung = endpoint.state.withLock { state -> [HTTPResponder] in
            defer { state.hung.removeAll() }
            return state.hung
        }
        for responder in hung { responder.respond(.json(503, #"{"error":"shutting_down"}"#)) }
        server.shutdown(grace: .seconds(1))
    }

    /// nil when `token` is a client secret Apple would accept for `clientID` at `now`; else the reason.
    public static func problem(
        withSecret token: String, clientID: String, teamID: String, keyID: String,
        key: ECPublicKey, now: Int64
    ) -> String? {
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

    /// A stable development `sub` for an authorization code (Apple's shape: `000000.<32 hex>.0000`).
    public static func devSub(forCode code: String) -> String {
        "000000." + String(SHA256.hex(SHA256.hash(Array(code.utf8))).prefix(32)) + ".0000"
    }
}

extension DevApple {
    final class Endpoint: HTTPHandler {
        struct Issued {
            var clientID: String
            var sub: String
        }

        struct AccessGrant {
            var clientID: String
            var expiresAt: Int64
        }

        struct State {
            var codes: [String: User] = [:]
            var tokenAnswer = AnswerPlan()
            var revokeAnswer = AnswerPlan()
            var credentialsAnswer = AnswerPlan()
            var migrationAnswer = AnswerPlan()
            var accessTokens: [String: AccessGrant] = [:]
            var users: [String: User] = [:]
            var revokedUsers: Set<String> = []
            var accepted: [String: User] = [:]
            var clock: Int64?
            var calls: [Call] = []
            var issued: [String: Issued] = [:]
            var revoked: [String] = []
            var hung: [HTTPResponder] = []
        }

        let configuration: Configuration
        let state = Mutex(State())

        init(_ configuration: Configuration) {
            self.configuration = configuration
        }

        func head(_ head: HTTPRequestHead) -> HTTPResponse? { nil }

        func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { .json(413, #"{"error":"invalid_request"}"#) }

        var now: Int64 { state.withLock { $0.clock } ?? Int64(Date().timeIntervalSince1970) }

        func handle(_ request: HTTPRequest, responder: HTTPResponder) {
            let head = request.head
            var call = Call(
                method: head.method, path: head.path, contentType: head.contentType, form: nil,
                secretProblem: nil, status: 0, error: nil, sub: nil, at: Date().timeIntervalSince1970)
            let answer: Answer
            let response: HTTPResponse
            switch (head.method, head.path) {
            case ("GET", "/auth/keys"):
                answer = .normal
                response = .json(200, configuration.signer.jwks)
            case ("POST", DevApple.revokeGrantPath):
                answer = .normal
                response = revokeGrant(request, call: &call)
            case ("POST", "/auth/token"), ("POST", "/auth/revoke"), ("POST", "/auth/usermigrationinfo"):
                let grant = FormURLEncoding.decodeUnique(request.body)?["grant_type"]
                answer = state.withLock { state in
                    switch head.path {
                    case "/auth/revoke": return state.revokeAnswer.next()
                    case "/auth/usermigrationinfo": return state.migrationAnswer.next()
                    default: return grant == "client_credentials" ? state.credentialsAnswer.next() : state.tokenAnswer.next()
                    }
                }
                // The checks always run (and are recorded); only a normal (or delayed) answer changes state.
                var effective = answer == .normal
                if case .delay = answer { effective = true }
                response = apple(request, call: &call, effective: effective)
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
            case .delay, .acceptWithoutEffect: final = response
            case .throttled(let retryAfter):
                final = .json(
                    429, #"{"error":"too_many_requests"}"#,
                    headers: retryAfter.map { [HTTPHeader("Retry-After", "\($0)")] } ?? [])
            }
            if let final {
                call.status = final.status
                call.error = AppleErrorCode.parse(final.body)?.description
            }
            let recorded = call
            state.withLock {
                $0.calls.append(recorded)
                if final == nil { $0.hung.append(responder) }
            }
            configuration.onCall?(recorded)
            if case .delay(let seconds) = answer, let final {
                // A thread of its own: the answer comes late whatever else the process waits on.
                _ = LoopThread(name: "dev-apple-late") {
                    WakeSignal().wait(until: Deadline.now.adding(.seconds(seconds)))
                    responder.respond(final)
                }
            } else if let final {
                responder.respond(final)
            }
        }

        private static func error(_ code: String) -> HTTPResponse { .json(400, "{\"error\":\"\(code)\"}") }

        func revokeGrant(sub: String, clientID: String?) -> Int {
            state.withLock { state in
                let tokens = state.issued.filter { $0.value.sub == sub && (clientID == nil || $0.value.clientID == clientID) }.map(\.key)
                state.revoked.append(contentsOf: tokens)
                return tokens.count
            }
        }

        /// `POST /dev/revoke-grant` (`sub`, optional `client_id`, as a form).
        func revokeGrant(_ request: HTTPRequest, call: inout Call) -> HTTPResponse {
            guard let form = FormURLEncoding.decodeUnique(request.body), let sub = form["sub"], !sub.isEmpty else {
                return Self.error("invalid_request")
            }
            call.form = form
            call.sub = sub
            let count = revokeGrant(sub: sub, clientID: form["client_id"].flatMap { $0.isEmpty ? nil : $0 })
            return .json(200, "{\"revoked_tokens\":\(count)}")
        }

        /// An id_token about `user` for `clientID`, as Apple signs them.
        func idToken(for user: User, clientID: String, now: Int64) throws -> String {
            var claims: [String: JSONValue] = [
                "iss": .string(DevApple.issuer), "aud": .string(clientID), "sub": .string(user.sub),
                "iat": .number(Double(now)), "exp": .number(Double(now + 600)), "auth_time": .number(Double(now)),
                "at_hash": .string(Base64URL.encode(SecureRandom.bytes(16))), "nonce_supported": .bool(true),
            ]
            if let email = user.email { claims["email"] = .string(email) }
            if let p = user.isPrivateEmail { claims["is_private_email"] = .string(p ? "true" : "false") }
            if let v = user.emailVerified { claims["email_verified"] = .bool(v) }
            if let nonce = user.nonce { claims["nonce"] = .string(nonce) }
            if let transferSub = user.transferSub { claims["transfer_sub"] = .string(transferSub) }
            return try configuration.signer.sign(claims: claims)
        }

        /// A new refresh token and its id_token (recorded as issued when `effective`).
        func issue(_ user: User, clientID: String, now: Int64, effective: Bool = true) throws -> (refreshToken: String, idToken: String) {
            let idToken = try idToken(for: user, clientID: clientID, now: now)
            let refreshToken = "r" + SHA256.hex(SecureRandom.bytes(16)) + ".0.sr." + Base64URL.encode(SecureRandom.bytes(16))
            if effective {
                state.withLock { state in
                    state.issued[refreshToken] = Issued(clientID: clientID, sub: user.sub)
                    if user.email != nil { state.users[user.sub] = user }
                }
            }
            return (refreshToken, idToken)
        }

        /// Apple's own checks and answer for the two form endpoints; state changes (a code used,
        /// a token issued or revoked) only when `effective`.
        private func apple(_ request: HTTPRequest, call: inout Call, effective: Bool) -> HTTPResponse {
            // The access token first: a request without a live one never reaches the other checks.
            var grant: AccessGrant?
            if request.head.path == "/auth/usermigrationinfo" {
                guard let granted = accessGrant(request.head.authorization) else {
                    return .json(401, #"{"error":"invalid_token"}"#, headers: [HTTPHeader("WWW-Authenticate", "Bearer")])
                }
                grant = granted
            }
            guard let type = request.head.contentType?.lowercased(), type.hasPrefix(FormURLEncoding.contentType),
                let form = FormURLEncoding.decodeUnique(request.body)
            else { return Self.error("invalid_request") }
            call.form = form
            guard let clientID = form["client_id"], configuration.clientIDs?.contains(clientID) ?? !clientID.isEmpty else {
                return Self.error("invalid_client")
            }
            let now = self.now
            guard let secret = form["client_secret"] else {
                call.secretProblem = "missing"
                return Self.error("invalid_client")
            }
            if let problem = DevApple.problem(
                withSecret: secret, clientID: clientID, teamID: configuration.teamID,
                keyID: configuration.keyID, key: configuration.secretKey, now: now)
            {
                call.secretProblem = problem
                return Self.error("invalid_client")
            }

            if let grant {
                guard grant.clientID == clientID else { return Self.error("invalid_client") }
                return migration(form, call: &call, effective: effective)
            }
            if form["grant_type"] == "client_credentials" {
                guard let scope = form["scope"] else { return Self.error("invalid_request") }
                guard scope == "user.migration" else { return Self.error("invalid_scope") }
                let token = "a" + SHA256.hex(SecureRandom.bytes(16))
                let lifetime = configuration.accessTokenLifetime
                if effective {
                    state.withLock { $0.accessTokens[token] = AccessGrant(clientID: clientID, expiresAt: now + lifetime) }
                }
                let body: [String: JSONValue] = [
                    "access_token": .string(token), "token_type": .string("Bearer"), "expires_in": .number(Double(lifetime)),
                ]
                return .json(200, JSONValue.object(body).serialized())
            }

            if request.head.path == "/auth/revoke" {
                guard let token = form["token"], !token.isEmpty, form["token_type_hint"] == "refresh_token" else {
                    return Self.error("invalid_request")
                }
                call.sub = state.withLock { state in
                    if effective { state.revoked.append(token) }
                    return state.issued[token]?.sub
                }
                return HTTPResponse(status: 200)
            }

            if form["grant_type"] == "refresh_token" {
                // Validation: alive while issued to this client id and not revoked.
                guard let token = form["refresh_token"], !token.isEmpty else { return Self.error("invalid_request") }
                let owner: Issued? = state.withLock { state in
                    guard !state.revoked.contains(token) else { return nil }
                    guard let issued = state.issued[token] else {
                        return configuration.unknownRefreshToken?(token).map { Issued(clientID: clientID, sub: $0) }
                    }
                    return issued.clientID == clientID ? issued : nil
                }
                guard let owner else { return Self.error("invalid_grant") }
                call.sub = owner.sub
                guard let idToken = try? idToken(for: User(sub: owner.sub, emailVerified: nil), clientID: clientID, now: now) else {
                    return .json(500, #"{"error":"server_error"}"#)
                }
                let body: [String: JSONValue] = [
                    "access_token": .string("a" + SHA256.hex(SecureRandom.bytes(16))), "token_type": .string("Bearer"),
                    "expires_in": .number(3600), "id_token": .string(idToken),
                ]
                return .json(200, JSONValue.object(body).serialized())
            }
            guard form["grant_type"] == "authorization_code" else { return Self.error("unsupported_grant_type") }
            guard let code = form["code"], !code.isEmpty else { return Self.error("invalid_request") }
            let (known, registered): (Bool, User?) = state.withLock { state in
                guard let user = state.codes[code] else { return (false, nil) }
                guard user.redirectURI == nil || user.redirectURI == form["redirect_uri"] else { return (true, nil) }
                if effective { state.codes[code] = nil }  // single use
                return (true, user)
            }
            guard let user = known ? registered : configuration.unknownCode?(code),
                user.redirectURI == nil || user.redirectURI == form["redirect_uri"]
            else {
                return Self.error("invalid_grant")
            }
            call.sub = user.sub
            guard let pair = try? issue(user, clientID: clientID, now: now, effective: effective) else {
                return .json(500, #"{"error":"server_error"}"#)
            }
            let body: [String: JSONValue] = [
                "access_token": .string("a" + SHA256.hex(SecureRandom.bytes(16))), "token_type": .string("Bearer"),
                "expires_in": .number(3600), "refresh_token": .string(pair.refreshToken), "id_token": .string(pair.idToken),
            ]
            return .json(200, JSONValue.object(body).serialized())
        }
    }
}
