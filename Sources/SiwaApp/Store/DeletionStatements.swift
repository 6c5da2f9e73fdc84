import SiwaCore
import SiwaPostgres

/// App-initiated deletion: refresh tokens (encrypted by the caller) and deletion jobs
/// (`siwa.request_deletion` queues them as `siwa.events` rows of type `deletion-requested`).
enum DeletionStatements {
    /// The `siwa.events.type` of a deletion job.
    static let jobType = "deletion-requested"

    struct StoredToken: Sendable, Equatable {
        var keyID: String
        var ciphertext: [UInt8]
    }

    static let loadToken = Statement<(sub: String, clientID: String), StoredToken>(
        "load_token", "SELECT key_id, ciphertext FROM siwa.apple_tokens WHERE apple_sub = $1 AND client_id = $2",
        bind: { [$0.sub, $0.clientID] },
        decode: { row throws(PostgresError) in StoredToken(keyID: try row.text("key_id"), ciphertext: try row.bytes("ciphertext")) })

    /// The user's stored tokens of the other client ids (the account deletion erases them all, so
    /// the job revokes them first).
    static let loadOtherTokens = Statement<(sub: String, clientID: String), (clientID: String, token: StoredToken)>(
        "load_other_tokens",
        "SELECT client_id, key_id, ciphertext FROM siwa.apple_tokens WHERE apple_sub = $1 AND client_id <> $2 ORDER BY client_id",
        bind: { [$0.sub, $0.clientID] },
        decode: { row throws(PostgresError) in
            (try row.text("client_id"), StoredToken(keyID: try row.text("key_id"), ciphertext: try row.bytes("ciphertext")))
        })

    /// Takes the user's deletion lock for the job's transaction, without waiting (true when
    /// taken): jobs of one user (one per client id after `request_deletion(sub)`) run one after
    /// the other, in any number of loops and processes, so a second job sees the first one's
    /// outcome (tokens erased, account deleted) instead of revoking the same tokens again. An
    /// advisory lock, not the account row: the job holds it while it waits on Apple, and events
    /// of that user (which lock the account) and token hand-overs must not wait that long.
    static let tryLockUser = Statement<String, Bool>(
        "try_lock_user_for_deletion", "SELECT pg_try_advisory_xact_lock(hashtextextended('siwa-deletion:' || $1, 0)) AS locked",
        bind: { [$0] },
        decode: { row throws(PostgresError) in try row.bool("locked") })

    /// Puts a job back for `$2` seconds without counting an attempt (a sibling job of the same
    /// user holds its deletion lock).
    static let postpone = Statement<(id: Int64, seconds: Double), Void>(
        "postpone_deletion",
        "UPDATE siwa.events SET next_attempt_at = now() + $2::double precision * interval '1 second' WHERE id = $1",
        bind: { [String($0.id), String($0.seconds)] })

    /// True when the user's account exists and is deleted.
    static let accountDeleted = Statement<String, Bool>(
        "account_deleted", "SELECT status = 'deleted' AS deleted FROM siwa.accounts WHERE apple_sub = $1",
        bind: { [$0] },
        decode: { row throws(PostgresError) in try row.bool("deleted") })

    /// Erases every stored token of these users (revoked, or deleted at Apple).
    static let eraseTokens = Statement<[String], Void>(
        "erase_tokens", "DELETE FROM siwa.apple_tokens WHERE apple_sub = ANY($1::text[])",
        bind: { [SQLEncoding.array($0)] })

    /// What storing a token after a code exchange did (`siwa.store_apple_token`).
    enum TokenStored: String, Sendable {
        case created, updated
        /// The account is deleted (final): nothing was stored.
        case deleted
    }

    /// `siwa.store_apple_token`: the account of the user who signed in (created if new) and the
    /// encrypted refresh token, unless the account is deleted.
    static let storeToken = Statement<(sub: String, clientID: String, token: StoredToken, email: String?, isPrivateEmail: Bool?), TokenStored>(
        "store_apple_token",
        "SELECT siwa.store_apple_token($1, $2, $3, $4::bytea, $5, $6::boolean) AS stored",
        bind: {
            [$0.sub, $0.clientID, $0.token.keyID, SQLEncoding.bytea($0.token.ciphertext), $0.email, $0.isPrivateEmail.map(SQLEncoding.bool)]
        },
        decode: { row throws(PostgresError) in try row.value("stored", as: TokenStored.self) })

    /// `siwa.request_deletion(sub, aud)`: returns how many jobs were queued.
    static let request = Statement<(sub: String, clientID: String?), Int>(
        "request_deletion", "SELECT siwa.request_deletion($1, $2) AS queued",
        bind: { [$0.sub, $0.clientID] },
        decode: { row throws(PostgresError) in try row.int("queued") })

    /// One due deletion job, locked for the worker's transaction.
    static let claim = Statement<Void, ClaimedEvent>(
        "claim_deletion",
        """
        SELECT id, aud, sub, \(SQLEncoding.millis("event_time")) AS event_ms, attempts
        FROM siwa.events
        WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() AND type = '\(jobType)'
        ORDER BY next_attempt_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
        """,
        decode: { row throws(PostgresError) in
            ClaimedEvent(
                id: try row.int64("id"), audience: try row.text("aud"),
                event: AppleEvent(
                    type: EventType(rawValue: jobType), sub: try row.text("sub"),
                    eventTimeMillis: try row.int64("event_ms")),
                attempts: try row.int("attempts"))
        })

    /// Deletion jobs waiting and dead (for `status`).
    static let jobCounts = Statement<Void, (waiting: Int, dead: Int)>(
        "deletion_job_counts",
        """
        SELECT count(*) FILTER (WHERE status IN ('pending', 'failed')) AS waiting,
               count(*) FILTER (WHERE status = 'dead') AS dead
        FROM siwa.events WHERE type = '\(jobType)' AND status IN ('pending', 'failed', 'dead')
        """,
        decode: { row throws(PostgresError) in (try row.int("waiting"), try row.int("dead")) })
}
