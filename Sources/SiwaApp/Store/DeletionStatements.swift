import SiwaCore
import SiwaPostgres

/// Refresh tokens (encrypted by the caller), in-app deletion (`siwa.request_deletion` queues a
/// `deletion-requested` event the worker applies) and revocations at Apple (`siwa.revocations`).
enum DeletionStatements {
    /// The `siwa.events.type` of an in-app deletion.
    static let jobType = "deletion-requested"

    struct StoredToken: Sendable, Hashable {
        var keyID: String
        var ciphertext: [UInt8]
    }

    /// What storing a token after a sign-in did (`siwa.store_apple_token`).
    enum TokenStored: String, Sendable {
        case created, updated
        /// The sign-in is not newer than the user's deletion: its token was queued for revocation.
        case deleted
    }

    struct SignIn: Sendable {
        var sub: String
        var clientID: String
        var token: StoredToken
        var email: String?
        var isPrivateEmail: Bool?
        /// Unix seconds (id_token `auth_time`, else `iat`).
        var signedInAt: Int64
    }

    /// `siwa.store_apple_token`: the encrypted refresh token and the sign-in event, unless the
    /// sign-in is not newer than the user's deletion (then the token is queued for revocation).
    static let storeToken = Statement<SignIn, TokenStored>(
        "store_apple_token",
        "SELECT siwa.store_apple_token($1, $2, $3, $4::bytea, $5, $6::boolean, pg_catalog.to_timestamp($7::bigint)) AS stored",
        bind: {
            [
                $0.sub, $0.clientID, $0.token.keyID, SQLEncoding.bytea($0.token.ciphertext), $0.email,
                $0.isPrivateEmail.map(SQLEncoding.bool), String($0.signedInAt),
            ]
        },
        decode: { row throws(PostgresError) in try row.value("stored", as: TokenStored.self) })

    /// A token Apple issued that siwa-notify could not keep (the exchange failed after Apple
    /// redeemed the code): revoked at Apple in the background, durably (`siwa.queue_revocation`:
    /// the API's role writes no revocation row itself).
    static let queueRevocation = Statement<(sub: String, clientID: String, token: StoredToken), Void>(
        "queue_revocation",
        "SELECT siwa.queue_revocation($1, $2, $3, $4::bytea)",
        bind: { [$0.sub, $0.clientID, $0.token.keyID, SQLEncoding.bytea($0.token.ciphertext)] })

    /// `siwa.request_deletion(sub, aud)`: returns how many deletions were queued (1).
    static let request = Statement<(sub: String, clientID: String?), Int>(
        "request_deletion", "SELECT siwa.request_deletion($1, $2) AS queued",
        bind: { [$0.sub, $0.clientID] },
        decode: { row throws(PostgresError) in try row.int("queued") })

    struct Deletion {
        var sub: String
        /// The deletion's time (ms): tokens signed in at or before it go.
        var atMillis: Int64
        /// The app that asked (`aud` of the request); empty when not known.
        var clientID: String
    }

    /// In-app deletions taking effect: the users' tokens signed in at or before the deletion (and
    /// those adopted from an auth library) move, still encrypted, into `siwa.revocations`; a user
    /// with none gets one `no_token` row (`siwa.move_tokens_to_revocation`: the worker's role
    /// inserts no revocation row itself).
    static let moveTokensToRevocation = Statement<[Deletion], Void>(
        "move_tokens_to_revocation",
        "SELECT siwa.move_tokens_to_revocation($1::text[], $2::bigint[], $3::text[])",
        bind: { rows in
            [
                SQLEncoding.array(rows.map(\.sub)), SQLEncoding.array(rows.map { $0.atMillis }),
                SQLEncoding.array(rows.map(\.clientID)),
            ]
        })

    struct Erasure {
        var sub: String
        var atMillis: Int64
        /// Only this app's tokens; nil: every app's.
        var clientID: String?
    }

    /// Erases tokens signed in at or before the event (Apple's account-delete: every app's;
    /// consent-revoked: that app's). Apple ended the grant: nothing to revoke. (A probe per
    /// element, as `moveTokensToRevocation`.)
    static let eraseTokens = Statement<[Erasure], Void>(
        "erase_tokens",
        """
        DELETE FROM siwa.apple_tokens t
        USING ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::bigint[]),
            pg_catalog.unnest($3::text[])) AS u(sub, at_ms, client_id)
        WHERE t.apple_sub = ANY (ARRAY[u.sub]) AND (u.client_id IS NULL OR t.client_id = u.client_id)
          AND coalesce(t.signed_in_at, t.created_at) <= \(SQLEncoding.timestamp(millis: "u.at_ms"))
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map(\.sub)), SQLEncoding.array(rows.map { $0.atMillis }),
                SQLEncoding.array(rows.map(\.clientID)),
            ]
        })
}
