import SiwaPostgres

/// Reconciliation (README "Missed notifications"): which stored refresh token Apple validates next, and what its
/// answer changes. Every statement stands alone (autocommit): nothing is held open while Apple
/// is called.
enum ReconcileStatements {
    /// Tokens first seen get their first due time (one interval after they were stored; by
    /// `apple_tokens_unscheduled_idx`); returns how many tokens are stored, from the maintained
    /// count (schema.sql "Maintained counts": exact, without reading the table).
    static let schedule = Statement<Double, Int>(
        "reconcile_schedule",
        """
        WITH scheduled AS (
            UPDATE siwa.apple_tokens SET next_validation_at = updated_at + pg_catalog.make_interval(secs => $1)
            WHERE next_validation_at IS NULL RETURNING 1
        )
        SELECT \(MaintainedCounts.sum("'apple_tokens'")) + 0 * (SELECT pg_catalog.count(*) FROM scheduled) AS tokens
        """,
        bind: { [String($0)] },
        decode: { row throws(PostgresError) in try row.int("tokens") })

    /// Seconds until the earliest token is due (negative: overdue); nil when none is stored.
    static let earliestDue = Statement<Void, Double?>(
        "reconcile_earliest_due",
        "SELECT extract(epoch FROM pg_catalog.min(next_validation_at) - pg_catalog.now())::float8 AS seconds FROM siwa.apple_tokens",
        decode: { row throws(PostgresError) in try row.optionalDouble("seconds") })

    struct Claimed: Sendable {
        var sub: String
        var clientID: String
        var token: DeletionStatements.StoredToken
        /// The row's `updated_at` as text: the answer is recorded only if the token was not
        /// replaced meanwhile (a new sign-in).
        var version: String
        /// Transient failures in a row so far (the backoff's exponent).
        var failures: Int
        /// Seconds from the claim until this token's slot (its call's time in the shared pace).
        var slotIn: Double
    }

    struct Claim {
        /// Seconds between two calls of all processes together (`ReconcileSchedule.spacing`).
        var spacing: Double
        var limit: Int
        /// Seconds each token stays leased after its own slot.
        var leaseMargin: Double
    }

    /// Takes the `limit` most overdue tokens and as many slots of the shared pace
    /// (`siwa.reconcile_pace`, one row: every process takes its slots there, so the overall rate
    /// is one call every `spacing` seconds however many processes run): the first at the later
    /// of now and the pace's next free slot, the others one `spacing` apart. Each token is leased
    /// until `leaseMargin` seconds after its own slot (another process skips it meanwhile; a
    /// process that dies leaves it to come due again), so the lease covers the batch whatever the
    /// spacing. The pace row is locked only by this statement, after the tokens (no deadlock).
    /// Run under `WorkerStatements.beginKeyLookups`: the due index in order, then a probe per
    /// token (`= ANY (ARRAY[s.apple_sub])`, see `WorkerStatements`).
    static let claim = Statement<Claim, Claimed>(
        "reconcile_claim",
        """
        WITH due AS (
            SELECT apple_sub, client_id, next_validation_at FROM siwa.apple_tokens
            WHERE next_validation_at <= pg_catalog.now() ORDER BY next_validation_at LIMIT $2 FOR UPDATE SKIP LOCKED
        ), taken AS (
            SELECT pg_catalog.count(*)::float8 AS n FROM due
        ), pace AS (
            UPDATE siwa.reconcile_pace p
            SET next_slot = greatest(p.next_slot, pg_catalog.now()) + pg_catalog.make_interval(secs => $1::float8 * (SELECT n FROM taken))
            WHERE (SELECT n FROM taken) > 0::float8
            RETURNING p.next_slot - pg_catalog.make_interval(secs => $1::float8 * (SELECT n FROM taken)) AS first_slot
        ), slotted AS (
            SELECT d.apple_sub, d.client_id,
                   p.first_slot + pg_catalog.make_interval(secs => $1::float8
                       * (pg_catalog.row_number() OVER (ORDER BY d.next_validation_at, d.apple_sub, d.client_id) - 1)::float8) AS slot
            FROM due d CROSS JOIN pace p
        )
        UPDATE siwa.apple_tokens t SET next_validation_at = s.slot + pg_catalog.make_interval(secs => $3)
        FROM slotted s WHERE t.apple_sub = ANY (ARRAY[s.apple_sub]) AND t.client_id = ANY (ARRAY[s.client_id])
        RETURNING t.apple_sub, t.client_id, t.key_id, t.ciphertext, t.updated_at::text AS version, t.validation_failures,
                  extract(epoch FROM s.slot - pg_catalog.now())::float8 AS slot_in
        """,
        bind: { [String($0.spacing), String($0.limit), String($0.leaseMargin)] },
        decode: { row throws(PostgresError) in
            Claimed(
                sub: try row.text("apple_sub"), clientID: try row.text("client_id"),
                token: DeletionStatements.StoredToken(keyID: try row.text("key_id"), ciphertext: try row.bytes("ciphertext")),
                version: try row.text("version"), failures: try row.int("validation_failures"), slotIn: try row.double("slot_in"))
        })

    /// A token Apple validated, `ago` seconds before it is recorded.
    struct Valid: Sendable {
        var sub: String
        var clientID: String
        var ago: Double
    }

    /// Apple validated these tokens: each due again one interval (`$4`) after its validation
    /// (the database's clock minus `ago`: no clock of another host is trusted). A probe per token,
    /// under `WorkerStatements.beginKeyLookups`.
    static let recordValid = Statement<(tokens: [Valid], interval: Double), Void>(
        "reconcile_record_valid",
        """
        UPDATE siwa.apple_tokens t SET validated_at = pg_catalog.now() - pg_catalog.make_interval(secs => v.ago),
               next_validation_at = pg_catalog.now() - pg_catalog.make_interval(secs => v.ago) + pg_catalog.make_interval(secs => $4), validation_failures = 0
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::float8[])) AS v(apple_sub, client_id, ago)
        WHERE t.apple_sub = ANY (ARRAY[v.apple_sub]) AND t.client_id = ANY (ARRAY[v.client_id])
        """,
        bind: {
            [
                SQLEncoding.array($0.tokens.map(\.sub)), SQLEncoding.array($0.tokens.map(\.clientID)),
                SQLEncoding.array($0.tokens.map { String($0.ago) }), String($0.interval),
            ]
        })

    /// The validation failed (429, 5xx, network, a key that does not open it): tried again in `$3` seconds.
    static let recordFailure = Statement<(sub: String, clientID: String, retryIn: Double), Void>(
        "reconcile_record_failure",
        """
        UPDATE siwa.apple_tokens SET next_validation_at = pg_catalog.now() + pg_catalog.make_interval(secs => $3),
               validation_failures = validation_failures + 1
        WHERE apple_sub = $1 AND client_id = $2
        """,
        bind: { [$0.sub, $0.clientID, String($0.retryIn)] })

    /// Apple answered `invalid_grant`: the user's grant for that app is gone (a missed
    /// `consent-revoked`). If the token is still the one validated (not replaced by a sign-in
    /// since), it is erased (it is dead, and a `consent-revoked` erases it anyway) and a
    /// `consent-revoked` of that app is queued in the outbox, applied by the worker with the same
    /// rules as Apple's. Returns 1 when queued, 0 when the token changed meanwhile.
    static let recordGone = Statement<(sub: String, clientID: String, version: String), Int>(
        "reconcile_record_gone",
        """
        WITH token AS (
            DELETE FROM siwa.apple_tokens
            WHERE apple_sub = $1 AND client_id = $2 AND updated_at::text = $3
            RETURNING apple_sub, client_id
        ), queued AS (
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            SELECT 'siwa-reconcile-' || pg_catalog.gen_random_uuid()::text, client_id, apple_sub, 'consent-revoked', pg_catalog.now(),
                   pg_catalog.jsonb_build_object('source', 'reconcile', 'client_id', client_id)
            FROM token
            ON CONFLICT DO NOTHING
            RETURNING 1
        )
        SELECT pg_catalog.count(*) AS queued FROM queued
        """,
        bind: { [$0.sub, $0.clientID, $0.version] },
        decode: { row throws(PostgresError) in try row.int("queued") })

    /// What `status` shows: tokens validated at least once, grants found gone (events still kept),
    /// tokens whose last validation failed. The token counts are maintained; the gone grants are
    /// the entries of their own partial index (`events_reconcile_gone_idx`).
    static let counts = Statement<Void, (validated: Int, gone: Int, failing: Int)>(
        "reconcile_counts",
        """
        SELECT \(MaintainedCounts.sum("'apple_tokens:validated'")) AS validated,
               (SELECT pg_catalog.count(*) FROM siwa.events WHERE jti LIKE 'siwa-reconcile-%') AS gone,
               \(MaintainedCounts.sum("'apple_tokens:failing'")) AS failing
        """,
        decode: { row throws(PostgresError) in (try row.int("validated"), try row.int("gone"), try row.int("failing")) })
}
