import Foundation
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import Synchronization

/// A loopback stand-in for a Firebase project's Identity Toolkit v1 API (`projects.accounts`
/// lookup, update, delete) and for Google's OAuth 2.0 token endpoint, written from the
/// discovery document (Fixtures/identitytoolkit-v1.json) and Google's error shapes: an unknown
/// user is `{"error":{"code":400,"message":"USER_NOT_FOUND",…}}`, a project without
/// Authentication `CONFIGURATION_NOT_FOUND`, a missing role a 403 `PERMISSION_DENIED`, an expired
/// or unknown access token a 401 `UNAUTHENTICATED`, a bad assertion `invalid_grant`. The token
/// endpoint checks each assertion as Google does (RS256 by the service account's key, `iss`,
/// `aud`, `scope`, an hour at most). Every API request is recorded for `discoveryLines`.
final class FakeFirebase: HTTPHandler {
    struct Identity: Sendable, Equatable {
        var providerID: String
        var rawID: String
    }

    struct User: Sendable, Equatable {
        var localID: String
        var identities: [Identity]
        var passwordHash: String?
        var phoneNumber: String?
        var validSince: Int64 = 0

        var json: JSONValue {
            var user: [String: JSONValue] = [
                "localId": .string(localID), "validSince": .string(String(validSince)),
                "providerUserInfo": .array(
                    identities.map {
                        .object(["providerId": .string($0.providerID), "rawId": .string($0.rawID), "federatedId": .string($0.rawID)])
                    }),
            ]
            if let passwordHash { user["passwordHash"] = .string(passwordHash) }
            if let phoneNumber { user["phoneNumber"] = .string(phoneNumber) }
            return .object(user)
        }
    }

    struct Request: Sendable {
        var method: String
        var path: String
        var body: [UInt8]
        var authorization: String?
        /// The fake's answer.
        var answer: HTTPResponse?
        var json: JSONValue? { try? JSONParser.parse(body) }
    }

    struct State: Sendable {
        var users: [User] = []
        /// Access token → when it expires (the clock's seconds).
        var tokens: [String: Int64] = [:]
        var tokensIssued = 0
        var assertionsRefused = 0
        var requests: [Request] = []
        /// Answered, in order, instead of the API's own answers: to the next request for that
        /// operation (`lookup`, `update`, `delete`), or to any when nil.
        var injected: [(operation: String?, answer: HTTPResponse)] = []
        /// The service account lacks the role.
        var permissionDenied = false
        /// Answered instead of the token endpoint's own answer.
        var tokenAnswer: HTTPResponse?
        /// The token endpoint answers once this is true (looked at every millisecond, 30 s at
        /// most): a test holds an exchange until what it races with is known to be there.
        var tokenHold: (@Sendable () -> Bool)?
        /// Token answers sent at the end of the 30 s instead of on their condition.
        var tokenHoldsTimedOut = 0
        /// Answered to every API request while set (the service down).
        var outage: HTTPResponse?
        /// The identities `deleteProvider` removed, in order.
        var unlinked: [Identity] = []
    }

    let projectID: String
    /// The service account's e-mail and public key; nil key: the Auth emulator (bearer `owner`).
    let clientEmail: String
    private let publicKey: RSAPublicKey?
    private let tokenLifetime: Int64
    private let pathPrefix: String
    private let clock: @Sendable () -> Int64
    private let state = Mutex(State())
    private let server = Mutex<HTTPServer?>(nil)
    private let boundPort = Atomic<Int>(0)

    /// - Parameters:
    ///   - key: the service account's private key (its public half checks assertions); nil for
    ///     the emulator.
    ///   - pathPrefix: where the API sits below the root (`/identitytoolkit.googleapis.com` as
    ///     in the emulator).
    init(
        projectID: String = "siwa-test", clientEmail: String = "siwa@siwa-test.iam.gserviceaccount.com", key: RSAPrivateKey?,
        tokenLifetime: Int64 = 3599, pathPrefix: String = "", clock: @escaping @Sendable () -> Int64
    ) throws {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.publicKey = try key?.publicKey()
        self.tokenLifetime = tokenLifetime
        self.pathPrefix = pathPrefix
        self.clock = clock
        let s = try HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2), handler: self)
        boundPort.store(Int(s.port), ordering: .relaxed)
        server.withLock { $0 = s }
    }

    var root: String { "http://127.0.0.1:\(boundPort.load(ordering: .relaxed))" }
    /// The API's base URL for this fake.
    var url: String { root + pathPrefix + "/" }
    /// The service account's `token_uri`.
    var tokenURL: String { root + "/token" }

    func stop() {
        let s = server.withLock { s -> HTTPServer? in
            defer { s = nil }
            return s
        }
        s?.shutdown(grace: .zero)
    }

    func add(_ user: User) { state.withLock { $0.users.append(user) } }
    func user(_ localID: String) -> User? { state.withLock { s in s.users.first { $0.localID == localID } } }
    func inject(_ answers: HTTPResponse..., for operation: String? = nil) {
        state.withLock { $0.injected += answers.map { (operation, $0) } }
    }
    func change(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }
    var snapshot: State { state.withLock { $0 } }
    /// The API requests (not the token endpoint's).
    var requests: [Request] { state.withLock { $0.requests } }
    /// Whether a refresh token the user of `localID` got at `issuedAt` (Unix seconds) still
    /// refreshes: Google's token service refuses it (`TOKEN_EXPIRED`) once the account's
    /// `validSince` is after it, and (`USER_NOT_FOUND`) once the account is gone.
    func refreshes(localID: String, issuedAt: Int64) -> Bool {
        guard let user = user(localID) else { return false }
        return issuedAt >= user.validSince
    }
    /// Every access token stops working, as when it expires or is revoked.
    func expireTokens() { state.withLock { $0.tokens.removeAll() } }

    /// The recorded API requests as `scripts/discovery-check` reads them, but those `unmodelled`
    /// takes (answers no description covers).
    func discoveryLines(unmodelled: (Request) -> Bool = { _ in false }) -> [String] {
        requests.filter { !unmodelled($0) }.map { request in
            var object: [String: Any] = ["method": request.method, "path": request.path, "body": String(decoding: request.body, as: UTF8.self)]
            if let answer = request.answer {
                object["status"] = answer.status
                object["response_body"] = String(decoding: answer.body, as: UTF8.self)
            }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            return String(decoding: data, as: UTF8.self) + "\n"
        }
    }

    // MARK: - Google's answers

    static func googleError(_ code: Int, _ message: String, status: String? = nil) -> HTTPResponse {
        var error: [String: JSONValue] = [
            "code": .number(Double(code)), "message": .string(message),
            "errors": .array([.object(["message": .string(message), "domain": .string("global"), "reason": .string("invalid")])]),
        ]
        if let status { error["status"] = .string(status) }
        return .json(code, JSONValue.object(["error": .object(error)]).serialized())
    }

    static let unauthenticated = googleError(
        401,
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        status: "UNAUTHENTICATED")
    static let permissionDenied = googleError(
        403, "Caller does not have required permission to use project siwa-test. Grant the caller the required role.",
        status: "PERMISSION_DENIED")

    static func invalidGrant(_ description: String) -> HTTPResponse {
        .json(400, JSONValue.object(["error": .string("invalid_grant"), "error_description": .string(description)]).serialized())
    }

    // MARK: - HTTPHandler

    func head(_ head: HTTPRequestHead) -> HTTPResponse? { head.method == "POST" ? nil : HTTPResponse(status: 405) }
    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        if request.head.path == "/token" {
            let answer = token(request)
            guard let hold = state.withLock({ $0.tokenHold }) else { return responder.respond(answer) }
            Thread.detachNewThread { [self] in
                let giveUp = Date().addingTimeInterval(30)
                while !hold() {
                    if Date() >= giveUp {
                        state.withLock { $0.tokenHoldsTimedOut += 1 }
                        break
                    }
                    usleep(1000)
                }
                responder.respond(answer)
            }
            return
        }
        responder.respond(api(request))
    }

    private func token(_ request: HTTPRequest) -> HTTPResponse {
        if let answer = state.withLock({ $0.tokenAnswer }) { return answer }
        guard let publicKey, request.head.contentType?.hasPrefix(FormURLEncoding.contentType) == true,
            let form = FormURLEncoding.decodeUnique(request.body), form["grant_type"] == Firebase.jwtBearerGrant,
            let assertion = form["assertion"], let jws = try? CompactJWS.parse(assertion)
        else { return .json(400, #"{"error":"invalid_request","error_description":"Invalid assertion"}"#) }
        let now = clock()
        let refusal: String?
        if jws.header["alg"]?.stringValue != "RS256" || !publicKey.verifyRS256(message: jws.signingInput, signature: jws.signature) {
            refusal = "Invalid JWT Signature."
        } else if jws.claims["iss"]?.stringValue != clientEmail || jws.claims["aud"]?.stringValue != tokenURL {
            refusal = "Invalid JWT: issuer or audience"
        } else if jws.claims["scope"]?.stringValue?.split(separator: " ").contains(Substring(Firebase.scope)) != true {
            refusal = "Invalid JWT: scope"
        } else if let iat = jws.claims["iat"]?.int64Value, let exp = jws.claims["exp"]?.int64Value, exp - iat <= 3600, iat <= now + 60,
            exp > now
        {
            refusal = nil
        } else {
            refusal = "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        }
        if let refusal {
            state.withLock { $0.assertionsRefused += 1 }
            return Self.invalidGrant(refusal)
        }
        let token = state.withLock { s -> String in
            s.tokensIssued += 1
            let token = "ya29.fake-\(s.tokensIssued)-\(UInt32.random(in: 0...UInt32.max))"
            s.tokens[token] = now + tokenLifetime
            return token
        }
        return .json(
            200,
            JSONValue.object(["access_token": .string(token), "expires_in": .number(Double(tokenLifetime)), "token_type": .string("Bearer")])
                .serialized())
    }

    private func api(_ request: HTTPRequest) -> HTTPResponse {
        guard request.head.path.hasPrefix(pathPrefix + "/") else { return HTTPResponse(status: 404) }
        let path = String(request.head.path.dropFirst(pathPrefix.count))
        let now = clock()
        return state.withLock { s -> HTTPResponse in
            s.requests.append(Request(method: request.head.method, path: path, body: request.body, authorization: request.head.authorization))
            let answer = api(request, path: path, now: now, &s)
            s.requests[s.requests.count - 1].answer = answer
            return answer
        }
    }

    /// The API's answer to one request, the state locked.
    private func api(_ request: HTTPRequest, path: String, now: Int64, _ s: inout State) -> HTTPResponse {
        let operation = path.split(separator: ":").last.map(String.init)
        if let index = s.injected.firstIndex(where: { $0.operation == nil || $0.operation == operation }) {
            return s.injected.remove(at: index).answer
        }
        if let outage = s.outage { return outage }
        let bearer = request.head.authorization.flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        if publicKey == nil {
            guard bearer == Firebase.emulatorBearer else { return Self.unauthenticated }
        } else {
            guard let bearer, let expiry = s.tokens[bearer], now < expiry else { return Self.unauthenticated }
        }
        if s.permissionDenied { return Self.permissionDenied }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "v1", parts[2] == "projects", parts[4].hasPrefix("accounts:") else {
            return Self.googleError(404, "Not Found", status: "NOT_FOUND")
        }
        guard parts[3] == projectID else { return Self.googleError(400, "CONFIGURATION_NOT_FOUND") }
        guard request.head.contentType?.hasPrefix("application/json") == true, let body = try? JSONParser.parse(request.body) else {
            return Self.googleError(400, "Invalid JSON payload received.", status: "INVALID_ARGUMENT")
        }
        switch parts[4].dropFirst("accounts:".count) {
        case "lookup": return Self.lookup(body, in: s)
        case "update": return Self.update(body, now: now, in: &s)
        case "delete":
            guard let localID = body["localId"]?.stringValue else { return Self.googleError(400, "MISSING_LOCAL_ID") }
            guard let index = s.users.firstIndex(where: { $0.localID == localID }) else { return Self.googleError(400, "USER_NOT_FOUND") }
            s.users.remove(at: index)
            return .json(200, #"{"kind":"identitytoolkit#DeleteAccountResponse"}"#)
        default:
            return Self.googleError(404, "Not Found", status: "NOT_FOUND")
        }
    }

    private static func lookup(_ body: JSONValue, in s: State) -> HTTPResponse {
        let localIDs = Set(body["localId"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        let federated = (body["federatedUserId"]?.arrayValue ?? []).compactMap { entry -> Identity? in
            guard let provider = entry["providerId"]?.stringValue, let raw = entry["rawId"]?.stringValue else { return nil }
            return Identity(providerID: provider, rawID: raw)
        }
        let found = s.users.filter { user in localIDs.contains(user.localID) || user.identities.contains { federated.contains($0) } }
        var answer: [String: JSONValue] = ["kind": .string("identitytoolkit#GetAccountInfoResponse")]
        if !found.isEmpty { answer["users"] = .array(found.map(\.json)) }
        return .json(200, JSONValue.object(answer).serialized())
    }

    private static func update(_ body: JSONValue, now: Int64, in s: inout State) -> HTTPResponse {
        guard let localID = body["localId"]?.stringValue else { return googleError(400, "MISSING_LOCAL_ID") }
        guard let index = s.users.firstIndex(where: { $0.localID == localID }) else { return googleError(400, "USER_NOT_FOUND") }
        if let since = body["validSince"] {
            guard let text = since.stringValue, let seconds = Int64(text) else {
                return googleError(400, "Invalid value at 'valid_since'", status: "INVALID_ARGUMENT")
            }
            s.users[index].validSince = seconds
        }
        let removed = Set(body["deleteProvider"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        s.unlinked += s.users[index].identities.filter { removed.contains($0.providerID) }
        s.users[index].identities.removeAll { removed.contains($0.providerID) }
        let user = s.users[index]
        return .json(
            200,
            JSONValue.object([
                "kind": .string("identitytoolkit#SetAccountInfoResponse"), "localId": .string(user.localID),
                "providerUserInfo": user.json["providerUserInfo"] ?? .array([]),
            ]).serialized())
    }
}
