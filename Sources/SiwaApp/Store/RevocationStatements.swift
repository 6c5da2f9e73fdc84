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
    static func begin(statementTimeoutMilliseconds: Int, lockTimeoutMilliseconds: Int) -> String {
        AdminStatements.begin(statementTimeoutMilliseconds: statementTimeoutMilliseconds, lockTimeoutMilliseconds: lockTimeoutMilliseconds)
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
    }

    /// Up to `$1` due jobs (pending, failed, or running with an expired lease), leased for `$2`
    /// seconds (`next_attempt_at` is the lease's end) and counted as an attempt. One user's jobs
    /// are never leased twice at once (`SKIP LOCKED` in one transaction; a leased job is no longer due).
    static let claim = Statement<(limit: Int, leaseSeconds: Double), Job>(
        "claim_revocations",
        """
        UPDATE siwa.revocations r SET status = 'running', attempts = r.attempts + 1,
            next_attempt_at = now() + $2::double precision * interval '1 second'
        FROM (SELECT id FROM siwa.revocations
              WHERE status IN ('pending', 'running', 'failed') AND next_attempt_at <= now()
              ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) due
        WHERE r.id = due.id
        RETURNING r.id, r.apple_sub, r.client_id, r.key_id, r.ciphertext, r.attempts,
                  extract(epoch FROM now() - r.created_at)::double precision AS age
        """,
        bind: { [String($0.limit), String($0.leaseSeconds)] },
        decode: { row throws(PostgresError) in
            let keyID = try row.optionalText("key_id")
            let ciphertext = try row.optionalBytes("ciphertext")
            return Job(
                id: try row.int64("id"), sub: try row.text("apple_sub"), clientID: try row.text("client_id"),
                token: keyID.flatMap { k in ciphertext.map { DeletionStatements.StoredToken(keyID: k, ciphertext: $0) } },
                attempts: try row.int("attempts"), ageSeconds: try row.double("age"))
        })

    /// Apple accepted the revocation (or the token was already gone): the ciphertext is erased.
    static let markDone = Statement<Int64, Void>(
        "revocation_done",
        """
        UPDATE siwa.revocations SET status = 'done', ciphertext = NULL, key_id = NULL, last_error = NULL,
            finished_at = now() WHERE id = $1 AND status = 'running'
        """,
        bind: { [String($0)] })

    struct Failure {
        var id: Int64
        var dead: Bool
        var error: String
        var retryInSeconds: Double
    }

    /// A failed attempt: `failed` (retried at `next_attempt_at`) or `dead` (kept, encrypted, for `replay`).
    static let markFailed = Statement<Failure, Void>(
        "revocation_failed",
        """
        UPDATE siwa.revocations SET status = $2, last_error = $3,
            next_attempt_at = now() + $4::double precision * interval '1 second'
        WHERE id = $1 AND status = 'running'
        """,
        bind: { [String($0.id), $0.dead ? "dead" : "failed", String($0.error.prefix(500)), String($0.retryInSeconds)] })

    /// Revocations by status (for `status` and `/metrics`).
    static let counts = Statement<Void, (status: String, count: Int)>(
        "revocation_counts",
        "SELECT status, count(*)::int AS n FROM siwa.revocations GROUP BY status",
        decode: { row throws(PostgresError) in (try row.text("status"), try row.int("n")) })

    /// Dead revocations back in the queue with a fresh retry window; returns how many.
    static let replayDead = Statement<Void, Int>(
        "replay_revocations",
        """
        WITH r AS (UPDATE siwa.revocations SET status = 'pending', attempts = 0, next_attempt_at = now(),
                       created_at = now(), last_error = NULL
                   WHERE status = 'dead' RETURNING 1)
        SELECT count(*)::int AS n FROM r
        """,
        decode: { row throws(PostgresError) in try row.int("n") })
}
