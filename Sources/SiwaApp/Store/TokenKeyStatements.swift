import SiwaPostgres

/// The keys of the stored refresh tokens (`siwa.apple_tokens.key_id`, and `siwa.revocations.key_id`
/// of the tokens waiting there, encrypted, to be revoked at Apple): the start-up check that every
/// key in use is configured and opens a token, and `rekey`.
enum TokenKeyStatements {
    /// One stored token.
    struct Row: Sendable, Hashable {
        var sub: String
        var clientID: String
        var token: DeletionStatements.StoredToken
    }

    static func row(_ row: RowReader) throws(PostgresError) -> Row {
        Row(
            sub: try row.text("apple_sub"), clientID: try row.text("client_id"),
            token: DeletionStatements.StoredToken(keyID: try row.text("key_id"), ciphertext: try row.bytes("ciphertext")))
    }

    /// `last_error` of a waiting revocation whose token does not open (set dead at start).
    static let quarantineReason = "token_undecryptable: set aside at start (the token does not open with its key)"

    /// Sets a stored token that does not open aside (`quarantined_at`): never validated nor sent
    /// to Apple; the same row only (a sign-in meanwhile replaced it: nothing).
    static let quarantine = Statement<Row, Void>(
        "quarantine_token",
        """
        UPDATE siwa.apple_tokens SET quarantined_at = pg_catalog.now()
        WHERE apple_sub = $1 AND client_id = $2 AND key_id = $3 AND ciphertext = $4::bytea AND quarantined_at IS NULL
        """,
        bind: { [$0.sub, $0.clientID, $0.token.keyID, SQLEncoding.bytea($0.token.ciphertext)] })

    /// A waiting revocation whose token does not open: dead, with the reason (the console lists it).
    static let quarantineRevocation = Statement<Row, Void>(
        "quarantine_revocation",
        """
        UPDATE siwa.revocations SET status = 'dead', last_error = '\(quarantineReason)'
        WHERE apple_sub = $1 AND client_id = $2 AND key_id = $3 AND ciphertext = $4::bytea AND status IN ('pending', 'failed', 'dead')
        """,
        bind: { [$0.sub, $0.clientID, $0.token.keyID, SQLEncoding.bytea($0.token.ciphertext)] })

    /// The tokens set aside, oldest first (at most `$1`): `doctor`, the console.
    static let quarantined = Statement<Int, (sub: String, clientID: String, keyID: String, at: String)>(
        "quarantined_tokens",
        """
        SELECT apple_sub, client_id, key_id, pg_catalog.to_char(quarantined_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS at
        FROM siwa.apple_tokens WHERE quarantined_at IS NOT NULL ORDER BY quarantined_at, apple_sub LIMIT $1
        """,
        bind: { [String($0)] },
        decode: { r throws(PostgresError) in (try r.text("apple_sub"), try r.text("client_id"), try r.text("key_id"), try r.text("at")) })

    /// How many tokens are set aside (`/metrics`), by the partial index of them.
    static let quarantinedCount = Statement<Void, Int>(
        "quarantined_token_count", "SELECT pg_catalog.count(*)::int AS n FROM siwa.apple_tokens WHERE quarantined_at IS NOT NULL",
        decode: { r throws(PostgresError) in try r.int("n") })

    /// Records the ids of the keys this process holds (`siwa.record_token_keys`: the owner's and
    /// the worker's role); returns how many were new.
    static let record = Statement<[String], Int>(
        "record_token_keys", "SELECT siwa.record_token_keys($1::text[]) AS added", bind: { [SQLEncoding.array($0)] },
        decode: { r throws(PostgresError) in try r.int("added") })

    /// Whether a key id is recorded (the ids the API's functions store a token under).
    static let isRecorded = Statement<String, Bool>(
        "token_key_recorded", "SELECT EXISTS (SELECT FROM siwa.token_keys WHERE key_id = $1) AS recorded", bind: { [$0] },
        decode: { r throws(PostgresError) in try r.bool("recorded") })

    /// One stored token per distinct `key_id`, with how many tokens use that key (a skip scan
    /// over `apple_tokens_key_id`: one index probe per key, however many tokens there are).
    static let onePerKey = Statement<Void, (row: Row, count: Int)>(
        "one_token_per_key",
        """
        WITH RECURSIVE ids AS (
            (SELECT key_id FROM siwa.apple_tokens ORDER BY key_id LIMIT 1)
            UNION ALL
            SELECT (SELECT t.key_id FROM siwa.apple_tokens t WHERE t.key_id > ids.key_id ORDER BY t.key_id LIMIT 1)
            FROM ids WHERE ids.key_id IS NOT NULL
        )
        SELECT t.apple_sub, t.client_id, ids.key_id, t.ciphertext,
               (SELECT pg_catalog.count(*) FROM siwa.apple_tokens c WHERE c.key_id = ids.key_id) AS tokens
        FROM ids CROSS JOIN LATERAL (
            SELECT apple_sub, client_id, ciphertext FROM siwa.apple_tokens s
            WHERE s.key_id = ids.key_id AND s.quarantined_at IS NULL LIMIT 1
        ) t
        WHERE ids.key_id IS NOT NULL
        ORDER BY ids.key_id
        """,
        decode: { r throws(PostgresError) in (try row(r), try r.int("tokens")) })

    /// One token waiting in `siwa.revocations` per distinct `key_id`, with how many wait under
    /// that key (the partial index `revocations_key_id` holds only the encrypted ones).
    static let revocationOnePerKey = Statement<Void, (row: Row, count: Int)>(
        "one_revocation_per_key",
        """
        SELECT DISTINCT ON (key_id) apple_sub, client_id, key_id, ciphertext, pg_catalog.count(*) OVER (PARTITION BY key_id) AS tokens
        FROM siwa.revocations WHERE ciphertext IS NOT NULL AND key_id IS NOT NULL
          AND (status <> 'dead' OR last_error IS DISTINCT FROM '\(quarantineReason)')
        ORDER BY key_id, id
        """,
        decode: { r throws(PostgresError) in (try row(r), try r.int("tokens")) })

    /// Tokens (stored, or waiting to be revoked) under key `$1`.
    static let countUnderKey = Statement<String, Int>(
        "count_tokens_under_key",
        """
        SELECT (SELECT pg_catalog.count(*) FROM siwa.apple_tokens WHERE key_id = $1)
             + (SELECT pg_catalog.count(*) FROM siwa.revocations WHERE key_id = $1 AND ciphertext IS NOT NULL) AS tokens
        """,
        bind: { [$0] }, decode: { r throws(PostgresError) in try r.int("tokens") })

    /// Tokens (stored, or waiting to be revoked) not under key `$1`.
    static let countNotUnder = Statement<String, Int>(
        "count_tokens_not_under_key",
        """
        SELECT (SELECT pg_catalog.count(*) FROM siwa.apple_tokens WHERE key_id <> $1)
             + (SELECT pg_catalog.count(*) FROM siwa.revocations WHERE key_id <> $1 AND ciphertext IS NOT NULL) AS tokens
        """,
        bind: { [$0] }, decode: { r throws(PostgresError) in try r.int("tokens") })

    /// The next tokens not under key `$1`, after (`$2`, `$3`) in primary-key order (from the
    /// start when `$2` is NULL), locked for the batch's transaction (tokens in use by a deletion
    /// job are skipped, not waited for).
    static let nextNotUnder = Statement<(keyID: String, after: (sub: String, clientID: String)?, limit: Int), Row>(
        "tokens_not_under_key",
        """
        SELECT apple_sub, client_id, key_id, ciphertext FROM siwa.apple_tokens
        WHERE key_id <> $1 AND ($2::text IS NULL OR (apple_sub, client_id) > ($2::text COLLATE "C", $3::text))
        ORDER BY apple_sub, client_id
        LIMIT $4
        FOR UPDATE SKIP LOCKED
        """,
        bind: { [$0.keyID, $0.after?.sub, $0.after?.clientID, String($0.limit)] },
        decode: { r throws(PostgresError) in try row(r) })

    /// Replaces one token's ciphertext and key, if it is still under the key it was read with.
    static let replace = Statement<(row: Row, with: DeletionStatements.StoredToken), Void>(
        "rekey_token",
        """
        UPDATE siwa.apple_tokens SET key_id = $3, ciphertext = $4::bytea, updated_at = pg_catalog.now()
        WHERE apple_sub = $1 AND client_id = $2 AND key_id = $5
        """,
        bind: {
            [$0.row.sub, $0.row.clientID, $0.with.keyID, SQLEncoding.bytea($0.with.ciphertext), $0.row.token.keyID]
        })

    /// A token waiting in `siwa.revocations` (AAD: its `apple_sub` and `client_id`, as in `apple_tokens`).
    struct WaitingRevocation: Sendable, Equatable {
        var id: Int64
        var row: Row
    }

    /// The next waiting revocations whose token is not under key `$1`, after id `$2`, locked for
    /// the batch's transaction (one the revoker is recording right now is skipped, not waited for).
    static let nextRevocationsNotUnder = Statement<(keyID: String, afterID: Int64, limit: Int), WaitingRevocation>(
        "revocations_not_under_key",
        """
        SELECT id, apple_sub, client_id, key_id, ciphertext FROM siwa.revocations
        WHERE ciphertext IS NOT NULL AND key_id <> $1 AND id > $2
        ORDER BY id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
        """,
        bind: { [$0.keyID, String($0.afterID), String($0.limit)] },
        decode: { r throws(PostgresError) in WaitingRevocation(id: try r.int64("id"), row: try row(r)) })

    /// Replaces one waiting revocation's ciphertext and key, if it still waits under the key it was
    /// read with (a revocation done meanwhile has no ciphertext left and stays so).
    static let replaceRevocation = Statement<(waiting: WaitingRevocation, with: DeletionStatements.StoredToken), Void>(
        "rekey_revocation",
        """
        UPDATE siwa.revocations SET key_id = $2, ciphertext = $3::bytea
        WHERE id = $1 AND key_id = $4 AND ciphertext IS NOT NULL
        """,
        bind: {
            [String($0.waiting.id), $0.with.keyID, SQLEncoding.bytea($0.with.ciphertext), $0.waiting.row.token.keyID]
        })
}
