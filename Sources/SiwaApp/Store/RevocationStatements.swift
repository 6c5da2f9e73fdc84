import SiwaCore
import SiwaPostgres

/// `siwa.revocations`: claimed with a lease in a short committed transaction, revoked at Apple
/// outside any transaction, the outcome recorded in another short one.
enum RevocationStatements {
    /// SQLSTATE of a lock not granted within `lock_timeout`.
    static let lockNotAvailable = "55P03"

    /// Opens the revoker's short transactions (claim, outcome): a row that another session holds
    /// (an operator's `SELECT … FOR UPDATE`, a long transaction) fails the statement after
    /// `lockTimeoutMilliseconds` instead of holding the revoker; transaction-local (`SET LOCAL`).
    /// Key lookups only (`WorkerStatements.keyLookupsOnly`): the claim reads the due index in order.
    static func begin(statementTimeoutMilliseconds: Int, lockTimeoutMilliseconds: Int) -> String {
        AdminStatements.begin(statementTimeoutMilliseconds: statementTimeoutMilliseconds, lockTimeoutMilliseconds: lockTimeoutMilliseconds)
            + "; " + WorkerStatements.keyLookupsOnly.sql
    }

    struct Job: Sendable {
        var id: Int64
        var sub: String
        var clientID: String
        var token: DeletionStatements.StoredToken?
        /// Counting this one.
        var attempts: Int
        /// Seconds since the job was queued (its retry window runs from then).
        var ageSeconds: Double
        /// `siwa.revocations.confirmation` when claimed: `pending` (Apple already answered the
        /// revoke with 200; only the validation is left), `unconfirmed`, or nil.
        var confirmation: String? = nil
    }

    /// Up to `$1` due jobs (pending, failed, or running with an expired lease), leased for `$2`
    /// seconds (`next_attempt_at` is the lease's end) and counted as an attempt. One user's jobs
    /// are never leased twice at once (`SKIP LOCKED` in one transaction; a leased job is no longer due).
    static let claim = Statement<(limit: Int, leaseSeconds: Double), Job>(
        "claim_revocations",
        """
        UPDATE siwa.revocations r SET status = 'running', attempts = r.attempts + 1,
            next_attempt_at = pg_catalog.now() + $2::double precision * interval '1 second'
        WHERE r.id = ANY (ARRAY(
            SELECT id FROM siwa.revocations
            WHERE status IN ('pending', 'running', 'failed') AND next_attempt_at <= pg_catalog.now()
            ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED))
        RETURNING r.id, r.apple_sub, r.client_id, r.key_id, r.ciphertext, r.attempts,
                  extract(epoch FROM pg_catalog.now() - r.created_at)::double precision AS age, r.confirmation
        """,
        bind: { [String($0.limit), String($0.leaseSeconds)] },
        decode: { row throws(PostgresError) in
            let keyID = try row.optionalText("key_id")
            let ciphertext = try row.optionalBytes("ciphertext")
            return Job(
                id: try row.int64("id"), sub: try row.text("apple_sub"), clientID: try row.text("client_id"),
                token: keyID.flatMap { k in ciphertext.map { DeletionStatements.StoredToken(keyID: k, ciphertext: $0) } },
                attempts: try row.int("attempts"), ageSeconds: try row.double("age"), confirmation: try row.optionalText("confirmation"))
        })

    /// The revocation is finished at Apple: the ciphertext is erased. `confirmed`: Apple refused
    /// the token after (or instead of) the revoke's 200 (`confirmation` `confirmed`); false for a
    /// job that had no token to revoke.
    /// The row is found by its primary key: the status test is written `COLLATE "C"` (the same
    /// test) so that the planner cannot match it to `revocations_due_idx`'s predicate, an index it
    /// scanned whole for one id when its statistics said the index was nearly empty.
    static let markDone = Statement<(id: Int64, confirmed: Bool), Void>(
        "revocation_done",
        """
        UPDATE siwa.revocations SET status = 'done', ciphertext = NULL, key_id = NULL, last_error = NULL,
            finished_at = pg_catalog.now(),
            confirmation = CASE WHEN $2::boolean THEN 'confirmed' ELSE confirmation END,
            confirmed_at = CASE WHEN $2::boolean THEN pg_catalog.now() ELSE confirmed_at END
        WHERE id = $1 AND status = 'running' COLLATE "C"
        """,
        bind: { [String($0.id), SQLEncoding.bool($0.confirmed)] })

    struct Failure {
        var id: Int64
        var dead: Bool
        var error: String
        var retryInSeconds: Double
        /// The job's `confirmation` from now on: `pending` (revoked, not proven yet), `unconfirmed`
        /// (the token still worked after a 200), or nil.
        var confirmation: String? = nil
    }

    /// A failed attempt: `failed` (retried at `next_attempt_at`) or `dead` (kept, encrypted, for
    /// `replay`). By primary key, as `markDone`.
    static let markFailed = Statement<Failure, Void>(
        "revocation_failed",
        """
        UPDATE siwa.revocations SET status = $2, last_error = $3,
            next_attempt_at = pg_catalog.now() + $4::double precision * interval '1 second', confirmation = $5
        WHERE id = $1 AND status = 'running' COLLATE "C"
        """,
        bind: { [String($0.id), $0.dead ? "dead" : "failed", String($0.error.prefix(500)), String($0.retryInSeconds), $0.confirmation] })

    /// One call to Apple for a revocation (`siwa.revocation_calls`): the deletion's evidence.
    struct Call: Sendable, Equatable {
        /// `revoke` or `validate`.
        var kind: String
        /// When it was sent, Unix seconds.
        var at: Double
        /// Apple's HTTP status; nil when Apple did not answer.
        var httpStatus: Int?
        /// `success`, `invalid_grant`, `invalid_client`, `rejected` or `transient`.
        var outcome: String
        /// The failure's reason code (never a token).
        var detail: String?
    }

    /// The calls of one attempt, in the order they were made: one statement, arrays for the batch.
    static let recordCalls = Statement<(revocationID: Int64, calls: [Call]), Void>(
        "revocation_calls",
        """
        INSERT INTO siwa.revocation_calls (revocation_id, kind, at, http_status, outcome, detail)
        SELECT $1::bigint, u.kind, pg_catalog.to_timestamp(u.at), u.http_status, u.outcome, u.detail
        FROM ROWS FROM (pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::double precision[]),
            pg_catalog.unnest($4::integer[]),
            pg_catalog.unnest($5::text[]),
            pg_catalog.unnest($6::text[])) WITH ORDINALITY
            AS u(kind, at, http_status, outcome, detail, n)
        ORDER BY u.n
        """,
        bind: {
            [
                String($0.revocationID), SQLEncoding.array($0.calls.map(\.kind)), SQLEncoding.array($0.calls.map { String($0.at) }),
                SQLEncoding.array($0.calls.map { $0.httpStatus.map(Int64.init) }), SQLEncoding.array($0.calls.map(\.outcome)),
                SQLEncoding.array($0.calls.map { $0.detail.map { String($0.prefix(200)) } }),
            ]
        })

    /// Revocations whose token still worked at Apple after a 200 (`status`, `/metrics`, the alert):
    /// the maintained count, like the statuses below.
    static let unconfirmedCount = Statement<Void, Int>(
        "revocations_unconfirmed",
        "SELECT \(MaintainedCounts.sum("'revocations:unconfirmed'"))::int AS n",
        decode: { row throws(PostgresError) in try row.int("n") })

    /// Revocations by status (for `status`, `/metrics` and the console), the statuses that have
    /// any: the maintained counts (schema.sql "Maintained counts"), never a read of the table.
    static let counts = Statement<Void, (status: String, count: Int)>(
        "revocation_counts",
        """
        SELECT pg_catalog.substr(name, pg_catalog.length('revocations:') + 1) AS status, pg_catalog.sum(n)::int AS n
        FROM \(MaintainedCounts.rows) WHERE name LIKE 'revocations:%' AND name <> 'revocations:unconfirmed'
        GROUP BY name HAVING pg_catalog.sum(n)::bigint > 0
        """,
        decode: { row throws(PostgresError) in (try row.text("status"), try row.int("n")) })

    /// Dead revocations back in the queue with a fresh retry window; returns how many.
    static let replayDead = Statement<Void, Int>(
        "replay_revocations",
        """
        WITH r AS (UPDATE siwa.revocations SET status = 'pending', attempts = 0, next_attempt_at = pg_catalog.now(),
                       created_at = pg_catalog.now(), last_error = NULL
                   WHERE status = 'dead' RETURNING 1)
        SELECT pg_catalog.count(*)::int AS n FROM r
        """,
        decode: { row throws(PostgresError) in try row.int("n") })
}
