import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime

/// The two sign-in endpoints of the API (README "In-app account deletion"). Nothing the caller says about a user is
/// believed: the user, email and flags come from an `id_token` Apple signed.
///
/// - `POST /apple/tokens` `{"code", "client_id", "redirect_uri"?, "nonce"?}`: exchanges the code
///   at Apple's `/auth/token`, verifies the returned `id_token` (RS256 with Apple's key set: iss,
///   aud = client id, exp, nonce), stores the refresh token encrypted and records the sign-in.
///   Answers 200 `{"sub","email","is_private_email","email_verified"}`; 400 `malformed_json`,
///   `missing_code`, `unknown_client_id`, `invalid_grant`, `nonce_mismatch`; 502
///   `apple_unavailable`, `invalid_client`, `apple_rejected`, `invalid_id_token`; 503
///   `keys_unavailable`, `database_unavailable`; 409 `account_deleted` (a sign-in not newer than
///   the user's deletion: not a user). Once Apple redeemed the code, a failure never drops the
///   refresh token: it is queued for revocation (durably).
/// - `POST /apple/refresh-tokens` `{"client_id", "refresh_token", "id_token"}`, for a backend that
///   exchanges codes itself: the `id_token` (issued at most an hour ago) is verified as above; the
///   refresh token is validated once at Apple (`grant_type=refresh_token`; refused: 400
///   `invalid_refresh_token`; Apple's answer must carry an `id_token`, else 400
///   `unbound_refresh_token`, naming the same user). Answers 200 `{"stored":"created"|"updated"}`;
///   409 `account_deleted` as above.
public final class TokenExchange: Sendable {
    public static let path = "/apple/tokens"
    public static let handoverPath = "/apple/refresh-tokens"
    /// Oldest handed-over id_token accepted, in seconds.
    public static let handoverMaxAge: Int64 = 3600

    private let apple: AppleAPICredentials
    private let keys: KeyStore
    private let audiences: [String]
    private let pool: PostgresPool
    private let logger: Logger
    private let clock: WallClock
    /// Keys trusted for some client ids only (the `--dev` key: the dev audience), as for notifications.
    private let keyAudiences: [String: Set<String>]
    /// Forwarding is on (`SIWA_FORWARD_URL`): a sign-in that maps a `transfer_sub` queues its
    /// `user-migrated` forward, as `transfer import` does.
    private let forwarding: Bool

    public init(
        apple: AppleAPICredentials, keys: KeyStore, audiences: [String], pool: PostgresPool, logger: Logger,
        keyAudiences: [String: Set<String>] = [:], forwarding: Bool = false,
        clock: WallClock = .system
    ) {
        self.forwarding = forwarding
        self.keyAudiences = keyAudiences
        self.apple = apple
        self.keys = keys
        self.audiences = audiences
        self.pool = pool
        self.logger = logger
        self.clock = clock
    }

    /// An answer: status, JSON body, and `Retry-After` seconds for a 503 (an `Error` too: a
    /// step that fails returns the answer to give).
    public struct Answer: Error, Sendable, Equatable {
        public var status: Int
        public var body: String
        public var retryAfter: Int?

        static func error(_ status: Int, _ code: String, retryAfter: Int? = nil) -> Answer {
            Answer(status: status, body: "{\"error\":\"\(code)\"}", retryAfter: retryAfter)
        }
    }

    /// Handles one call (blocking: run it on the API's executor).
    public func handle(path: String, body: [UInt8]) -> Answer {
        path == Self.handoverPath ? handOver(body) : exchange(body)
    }

    // MARK: - Code exchange

    func exchange(_ body: [UInt8]) -> Answer {
        let request: CodeExchangeRequest
        do {
            request = try CodeExchangeRequest.parse(body, audiences: audiences)
        } catch {
            return .error(400, error.rawValue)
        }
        let (clientID, nonce) = (request.clientID, request.nonce)
        let tokens: AppleTokenResponse
        switch apple.client.exchange(code: request.code, clientID: clientID, redirectURI: request.redirectURI) {
        case .success(let response): tokens = response
        case .invalidGrant: return .error(400, "invalid_grant")
        case .invalidClient: return .error(502, "invalid_client")
        case .rejected: return .error(502, "apple_rejected")
        case .transient: return .error(502, "apple_unavailable")
        }
        // From here Apple has issued a refresh token: every failure queues its revocation.
        let claims: IDTokenClaims
        switch verify(tokens.idToken, clientID: clientID, nonce: nonce, maxAge: nil) {
        case .success(let c): claims = c
        case .failure(let refusal):
            discard(tokens.refreshToken, sub: unverifiedSub(tokens.idToken), clientID: clientID)
            return refusal
        }
        switch store(tokens.refreshToken, claims: claims, clientID: clientID, action: "authorization code exchanged") {
        case .failure(let refusal):
            discard(tokens.refreshToken, sub: claims.sub, clientID: clientID)
            return refusal
        case .success(.deleted):
            // Older than the user's deletion: not a user (the token is queued for revocation).
            return .error(409, "account_deleted")
        case .success:
            var answer: [String: JSONValue] = ["sub": .string(claims.sub)]
            answer["email"] = claims.email.map { .string($0) } ?? .null
            answer["is_private_email"] = claims.isPrivateEmail.map { .bool($0) } ?? .null
            answer["email_verified"] = claims.emailVerified.map { .bool($0) } ?? .null
            return Answer(status: 200, body: JSONValue.object(answer).serialized())
        }
    }

    // MARK: - Hand-over

    func handOver(_ body: [UInt8]) -> Answer {
        let request: HandOverRequest
        do {
            request = try HandOverRequest.parse(body, audiences: audiences)
        } catch {
            return .error(400, error.rawValue)
        }
        let (clientID, token, idToken) = (request.clientID, request.refreshToken, request.idToken)
        let claims: IDTokenClaims
        switch verify(idToken, clientID: clientID, nonce: nil, maxAge: Self.handoverMaxAge) {
        case .success(let c): claims = c
        case .failure(let refusal): return refusal.status == 502 ? .error(400, "invalid_id_token") : refusal
        }
        // The token must be alive at Apple, and Apple's own id_token must name the same user.
        switch apple.client.validate(refreshToken: token, clientID: clientID) {
        case .success(let validation):
            // Only Apple's own id_token binds the refresh token to the user: without one, nothing
            // says the caller did not pair another user's id_token with it.
            guard let fresh = validation.idToken else {
                logger.warning(
                    "refresh token handed over without an id_token in Apple's answer refused",
                    metadata: ["client_id": "\(clientID)", "sub_hash": "\(SubjectHash.of(claims.sub))"])
                return .error(400, "unbound_refresh_token")
            }
            if unverifiedSub(fresh) != claims.sub {
                logger.warning(
                    "refresh token handed over for another user refused",
                    metadata: ["client_id": "\(clientID)", "sub_hash": "\(SubjectHash.of(claims.sub))"])
                return .error(400, "invalid_refresh_token")
            }
        case .invalidGrant: return .error(400, "invalid_refresh_token")
        case .invalidClient: return .error(502, "invalid_client")
        case .rejected: return .error(502, "apple_rejected")
        case .transient: return .error(502, "apple_unavailable")
        }
        switch store(token, claims: claims, clientID: clientID, action: "refresh token handed over") {
        case .failure(let refusal): return refusal
        case .success(.deleted): return .error(409, "account_deleted")
        case .success(let stored): return Answer(status: 200, body: "{\"stored\":\"\(stored.rawValue)\"}")
        }
    }

    // MARK: - Shared steps

    private func verify(_ idToken: String, clientID: String, nonce: String?, maxAge: Int64?) -> Result<IDTokenClaims, Answer> {
        do {
            let claims = try IDTokenVerifier(keyAudiences: keyAudiences).verify(
                token: idToken, clientID: clientID, nonce: nonce, now: clock.unixSeconds, maxAgeSeconds: maxAge
            ) { kid, input, signature in
                keys.check(kid: kid, signingInput: input, signature: signature)
            }
            return .success(claims)
        } catch {
            logger.warning("id_token refused", metadata: ["client_id": "\(clientID)", "reason": "\(error.rawValue)"])
            switch error {
            case .nonceMismatch: return .failure(.error(400, "nonce_mismatch"))
            case .keysUnavailable: return .failure(.error(503, "keys_unavailable", retryAfter: 10))
            default: return .failure(.error(502, "invalid_id_token"))
            }
        }
    }

    private func store(
        _ refreshToken: String, claims: IDTokenClaims, clientID: String, action: String
    ) -> Result<DeletionStatements.TokenStored, Answer> {
        do {
            let sealed = try apple.vault.seal(refreshToken, sub: claims.sub, clientID: clientID)
            let signIn = DeletionStatements.SignIn(
                sub: claims.sub, clientID: clientID, token: sealed, email: claims.email,
                isPrivateEmail: claims.isPrivateEmail, signedInAt: claims.signedInAt)
            let teamID = apple.client.configuration.teamID
            let stored = try pool.withConnection(timeout: .seconds(5)) { c -> DeletionStatements.TokenStored? in
                // A worker's batch may hold the account row for seconds: wait for it within the
                // call's budget rather than lose the sign-in to the pool's 2 s lock timeout.
                try c.execute(AdminStatements.signInLockWait)
                let stored = try c.row(DeletionStatements.storeToken, signIn)
                // For 60 days after an app transfer the id_token names the user's identifier from
                // the old team: that identifier is this user (`siwa.transfers`, as `transfer import`),
                // unless the sign-in is refused (in the same transaction as its verdict).
                if let transferSub = claims.transferSub, stored != nil, stored != .deleted {
                    _ = try c.row(TransferStatements.mapOnSignIn, (transferSub, claims.sub, teamID, clientID, forwarding))
                }
                return stored
            }
            guard let stored else {
                return .failure(.error(503, "database_unavailable", retryAfter: 5))
            }
            logger.info(
                stored == .deleted ? "\(action); the sign-in is older than the user's deletion: token queued for revocation" : "\(action)",
                metadata: ["client_id": "\(clientID)", "sub_hash": "\(SubjectHash.of(claims.sub))", "account": "\(stored.rawValue)"])
            return .success(stored)
        } catch {
            logger.error("cannot store the refresh token", metadata: ["client_id": "\(clientID)", "error": "\(error)"])
            return .failure(.error(503, "database_unavailable", retryAfter: 5))
        }
    }

    /// A refresh token Apple issued that is not kept: queued for revocation in the database (the
    /// revoker retries it for days); when even that fails, revoked at Apple once, now.
    private func discard(_ refreshToken: String, sub: String?, clientID: String) {
        let owner = sub ?? ""
        do {
            let sealed = try apple.vault.seal(refreshToken, sub: owner, clientID: clientID)
            _ = try pool.withConnection(timeout: .seconds(5)) { c in
                try c.affected(DeletionStatements.queueRevocation, (owner, clientID, sealed))
            }
            logger.info("refresh token not kept; queued for revocation at Apple", metadata: ["client_id": "\(clientID)"])
        } catch {
            let result = apple.client.revoke(refreshToken: refreshToken, clientID: clientID)
            logger.log(
                level: result.isRetryable ? .error : .warning,
                "refresh token not kept and its revocation could not be queued; revoked at Apple directly",
                metadata: ["client_id": "\(clientID)", "queue_error": "\(error)", "retryable_failure": "\(result.isRetryable)"])
        }
    }

    /// The `sub` of an id_token without verifying it (to label a token that is being revoked, or
    /// to compare with a verified one); nil when unreadable.
    private func unverifiedSub(_ token: String) -> String? {
        (try? CompactJWS.parse(token))?.claims["sub"]?.stringValue
    }
}
