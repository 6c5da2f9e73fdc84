import Dispatch
import Foundation
import Logging
import SiwaCore
import SiwaHTTP
import SiwaPostgres

/// `POST /apple/tokens` on the admin listener (never the public one): the app's backend hands over
/// the authorization code of a sign-in; siwa-notify exchanges it at Apple's `/auth/token`,
/// verifies the returned `id_token` (RS256 with Apple's key set: iss, aud = client id, exp,
/// nonce), stores the refresh token encrypted, creates the account if new, and answers the
/// verified claims. Runs off the listener's threads (the call to Apple may take seconds).
///
/// Request: `{"code": "...", "client_id": "<one of SIWA_AUDIENCES>", "redirect_uri"?: "...", "nonce"?: "..."}`.
/// Answers: 200 `{"sub","email","is_private_email","email_verified"}`; 400 `malformed_json`,
/// `missing_code`, `unknown_client_id`, `invalid_grant` (Apple refused the code); 502
/// `apple_unavailable`, `invalid_client`, `apple_rejected`, `invalid_id_token`; 503
/// `database_unavailable`.
public final class TokenExchange: Sendable {
    public static let path = "/apple/tokens"
    /// For a backend that exchanges codes itself: it hands over the refresh token here
    /// (`{"sub", "client_id", "refresh_token", "email"?, "is_private_email"?}`) and siwa-notify
    /// stores it encrypted (the key never enters the database, so this is not a SQL function).
    /// Answers 200 `{"stored":"created"|"updated"|"deleted"}`, 400 for a malformed request.
    public static let handoverPath = "/apple/refresh-tokens"

    private let revocation: InAppDeletion
    private let keys: KeyStore
    private let audiences: [String]
    private let pool: PostgresPool
    private let logger: Logger

    public init(revocation: InAppDeletion, keys: KeyStore, audiences: [String], pool: PostgresPool, logger: Logger) {
        self.revocation = revocation
        self.keys = keys
        self.audiences = audiences
        self.pool = pool
        self.logger = logger
    }

    /// Answers through `responder` from a background thread.
    public func handle(path: String = TokenExchange.path, body: [UInt8], responder: HTTPResponder) {
        DispatchQueue.global().async { [self] in
            let (status, json) = path == Self.handoverPath ? handOver(body) : exchange(body)
            responder.respond(.json(status, json))
        }
    }

    /// `POST /apple/refresh-tokens`: stores a refresh token the app's backend obtained itself.
    func handOver(_ body: [UInt8]) -> (Int, String) {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { return (400, Self.error("malformed_json")) }
        guard let sub = object["sub"]?.stringValue, !sub.isEmpty else { return (400, Self.error("missing_sub")) }
        guard let clientID = object["client_id"]?.stringValue, audiences.containsExactly(clientID) else {
            return (400, Self.error("unknown_client_id"))
        }
        guard let token = object["refresh_token"]?.stringValue, !token.isEmpty else { return (400, Self.error("missing_refresh_token")) }
        var email: String?
        if let value = object["email"] {
            guard let text = value.stringValue else { return (400, Self.error("malformed_json")) }
            email = text
        }
        let isPrivate: Bool?
        do {
            isPrivate = try IDTokenVerifier.flag(object["is_private_email"])
        } catch {
            return (400, Self.error("malformed_json"))
        }
        do {
            let sealed = try revocation.vault.seal(token, sub: sub, clientID: clientID)
            let stored = try pool.withConnection(timeout: 5) { c in
                try c.row(DeletionStatements.storeToken, (sub, clientID, sealed, email, isPrivate))
            }
            logger.info(
                "refresh token handed over",
                metadata: ["client_id": "\(clientID)", "sub_hash": "\(SubjectHash.of(sub))", "account": "\(stored?.rawValue ?? "unknown")"])
            if stored == .deleted { revokeUnstored(token, sub: sub, clientID: clientID) }
            return (200, "{\"stored\":\"\(stored?.rawValue ?? "unknown")\"}")
        } catch {
            logger.error("cannot store the refresh token", metadata: ["error": "\(error)"])
            return (503, Self.error("database_unavailable"))
        }
    }

    struct Request {
        var code: String
        var clientID: String
        var redirectURI: String?
        var nonce: String?
    }

    static func error(_ code: String) -> String { "{\"error\":\"\(code)\"}" }

    /// Parses the request body; the error is a reason code.
    func parse(_ body: [UInt8]) -> Result<Request, ExchangeError> {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { return .failure(.init("malformed_json")) }
        guard let code = object["code"]?.stringValue, !code.isEmpty else { return .failure(.init("missing_code")) }
        guard let clientID = object["client_id"]?.stringValue,
            audiences.containsExactly(clientID)
        else {
            return .failure(.init("unknown_client_id"))
        }
        for optional in ["redirect_uri", "nonce"] {
            if let value = object[optional], value.stringValue == nil { return .failure(.init("malformed_json")) }
        }
        return .success(
            Request(
                code: code, clientID: clientID, redirectURI: object["redirect_uri"]?.stringValue,
                nonce: object["nonce"]?.stringValue))
    }

    struct ExchangeError: Error {
        var code: String
        init(_ code: String) { self.code = code }
    }

    func exchange(_ body: [UInt8]) -> (Int, String) {
        let request: Request
        switch parse(body) {
        case .success(let r): request = r
        case .failure(let e): return (400, Self.error(e.code))
        }
        let tokens: AppleTokenResponse
        switch revocation.client.exchange(code: request.code, clientID: request.clientID, redirectURI: request.redirectURI) {
        case .success(let response): tokens = response
        case .invalidGrant: return (400, Self.error("invalid_grant"))
        case .invalidClient: return (502, Self.error("invalid_client"))
        case .rejected: return (502, Self.error("apple_rejected"))
        case .transient: return (502, Self.error("apple_unavailable"))
        }
        let claims: IDTokenClaims
        do {
            claims = try IDTokenVerifier().verify(
                token: tokens.idToken, clientID: request.clientID, nonce: request.nonce,
                now: Int64(Date().timeIntervalSince1970)
            ) { kid, input, signature in
                keys.check(kid: kid, signingInput: input, signature: signature)
            }
        } catch {
            logger.warning("id_token from Apple refused", metadata: ["client_id": "\(request.clientID)", "reason": "\(error.rawValue)"])
            return (502, Self.error("invalid_id_token"))
        }
        do {
            let sealed = try revocation.vault.seal(tokens.refreshToken, sub: claims.sub, clientID: request.clientID)
            let stored = try pool.withConnection(timeout: 5) { c in
                try c.row(DeletionStatements.storeToken, (claims.sub, request.clientID, sealed, claims.email, claims.isPrivateEmail))
            }
            logger.info(
                stored == .deleted
                    ? "authorization code exchanged; the account is deleted, no token stored" : "authorization code exchanged, refresh token stored",
                metadata: [
                    "client_id": "\(request.clientID)", "sub_hash": "\(SubjectHash.of(claims.sub))",
                    "account": "\(stored?.rawValue ?? "unknown")",
                ])
            if stored == .deleted { revokeUnstored(tokens.refreshToken, sub: claims.sub, clientID: request.clientID) }
        } catch {
            logger.error("cannot store the refresh token", metadata: ["error": "\(error)"])
            return (503, Self.error("database_unavailable"))
        }
        var answer: [String: JSONValue] = ["sub": .string(claims.sub)]
        answer["email"] = claims.email.map { .string($0) } ?? .null
        answer["is_private_email"] = claims.isPrivateEmail.map { .bool($0) } ?? .null
        answer["email_verified"] = claims.emailVerified.map { .bool($0) } ?? .null
        return (200, JSONValue.object(answer).serialized())
    }

    /// A token for an account that is deleted (final) is not stored, so no deletion job would ever
    /// revoke it: revoke it at Apple now (once; a failure is logged, the grant then lapses at
    /// Apple's side only when the user removes the app).
    private func revokeUnstored(_ token: String, sub: String, clientID: String) {
        let outcome: String
        switch revocation.client.revoke(refreshToken: token, clientID: clientID) {
        case .success, .invalidGrant: outcome = "revoked"
        case .invalidClient: outcome = "invalid_client"
        case .rejected: outcome = "rejected"
        case .transient: outcome = "unreachable"
        }
        logger.log(
            level: outcome == "revoked" ? .info : .warning, "token for a deleted account revoked at Apple, not stored",
            metadata: ["client_id": "\(clientID)", "sub_hash": "\(SubjectHash.of(sub))", "outcome": "\(outcome)"])
    }
}
