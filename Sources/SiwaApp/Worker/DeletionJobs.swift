import Foundation
import Logging
import SiwaCore
import SiwaPostgres

/// Deletion jobs (`siwa.request_deletion`): one per transaction, because each waits on Apple.
/// The job row stays locked while the worker calls `/auth/revoke`; on success the account is
/// deleted exactly as for Apple's `account-delete` (sessions revoked, email erased, final), the
/// tokens are erased and the job is `done`, all in that one transaction. A worker killed during
/// the call leaves the job pending (its transaction rolls back); the next attempt calls Apple
/// again, which is harmless: revoking a revoked token succeeds. So the revocation takes effect
/// exactly once.
extension Worker {
    /// Most jobs handled between two event batches (each may wait on Apple up to its timeout).
    static let deletionsPerRound = 20

    /// Handles due deletion jobs (none while in-app deletion is off); returns how many.
    func processDeletions(on connection: PostgresConnection) throws(PostgresError) -> Int {
        guard let revocation else { return 0 }
        var handled = 0
        while handled < Self.deletionsPerRound, !wakeups.isStopped, try processDeletion(on: connection, revocation: revocation) {
            handled += 1
        }
        return handled
    }

    private enum JobResult {
        case deleted(AccountDecision)
        case failed(message: String, permanent: Bool, retryAfter: Int?)
    }

    /// One job in one transaction; false when none was due (true when it was put back because a
    /// sibling job of the same user is running).
    private func processDeletion(on connection: PostgresConnection, revocation: InAppDeletion) throws(PostgresError) -> Bool {
        var outcome: (job: ClaimedEvent, result: JobResult, attempts: Int, dead: Bool)?
        var postponed = false
        try connection.transaction(begin: beginBatch) { c throws(PostgresError) in
            outcome = nil
            postponed = false
            guard let job = try c.row(DeletionStatements.claim) else { return }
            guard try c.row(DeletionStatements.tryLockUser, job.event.sub) == true else {
                // A sibling job of this user is at Apple right now: after it, this one finds
                // the account deleted and nothing left to revoke.
                try c.affected(DeletionStatements.postpone, (job.id, 2))
                postponed = true
                return
            }
            let result = try revoke(job, revocation: revocation, on: c)
            switch result {
            case .deleted(let decision):
                outcome = (job, .deleted(decision), job.attempts + 1, false)
            case .failed(let message, let permanent, let retryAfter):
                let attempts = job.attempts + 1
                let dead = permanent || options.retry.isExhausted(attempts: attempts)
                var delay = options.retry.delay(afterAttempts: attempts, jitter: Double.random(in: 0..<1))
                if let retryAfter { delay = max(delay, Double(retryAfter)) }
                try c.affected(
                    WorkerStatements.markFailed,
                    .init(
                        id: job.id, status: dead ? .dead : .failed, error: message,
                        retryInSeconds: delay))
                outcome = (job, result, attempts, dead)
            }
        }
        guard let outcome else { return postponed }
        let type = DeletionStatements.jobType
        let subHash = SubjectHash.of(outcome.job.event.sub)
        switch outcome.result {
        case .deleted(let decision):
            metrics.event(outcome: "applied", type: type)
            logger.info(
                "deletion applied: Apple tokens revoked, account deleted",
                metadata: [
                    "event_id": "\(outcome.job.id)", "type": "\(type)", "sub_hash": "\(subHash)",
                    "client_id": "\(outcome.job.audience)", "outcome": "\(decision.outcome.rawValue)",
                ])
        case .failed(let message, _, _):
            metrics.event(outcome: outcome.dead ? "dead" : "failed", type: type)
            logger.warning(
                outcome.dead ? "deletion dead-lettered" : "deletion failed, will retry",
                metadata: [
                    "event_id": "\(outcome.job.id)", "type": "\(type)", "sub_hash": "\(subHash)",
                    "client_id": "\(outcome.job.audience)", "attempts": "\(outcome.attempts)", "error": "\(message)",
                ])
        }
        return true
    }

    /// Calls Apple with the stored token (then with the user's tokens of other client ids, which
    /// the account deletion erases); on success applies the deletion in `c`'s transaction.
    /// No token but an account already deleted (a sibling job of `request_deletion(sub)` revoked
    /// every token, or Apple's account-delete erased them): nothing is left to revoke, the job is
    /// done (outcome `final_deleted`).
    private func revoke(_ job: ClaimedEvent, revocation: InAppDeletion, on c: PostgresConnection) throws(PostgresError) -> JobResult {
        let sub = job.event.sub, clientID = job.audience
        let stored = clientID.isEmpty ? nil : try c.row(DeletionStatements.loadToken, (sub, clientID))
        if let stored {
            if let failure = revokeAtApple(stored, sub: sub, clientID: clientID, revocation: revocation) { return failure }
            for other in try c.rows(DeletionStatements.loadOtherTokens, (sub, clientID)) {
                if let failure = revokeAtApple(other.token, sub: sub, clientID: other.clientID, revocation: revocation) {
                    return failure
                }
            }
        } else if try c.row(DeletionStatements.accountDeleted, sub) != true {
            return .failed(
                message: "missing_token: no refresh token is stored for this user and client id "
                    + "(exchange the authorization code at sign-in: POST /apple/tokens)", permanent: true, retryAfter: nil)
        }
        var deletion = job
        deletion.event = AppleEvent(type: .accountDelete, sub: sub, eventTimeMillis: job.event.eventTimeMillis)
        // The account is deleted now: BatchApplier erases the user's tokens with the email. Under
        // a savepoint: a hook that raises (or a lock timeout) is this job's failure, counted and
        // retried with backoff like any event's, not a broken batch claimed again at once.
        do throws(PostgresError) {
            let hook = try BatchApplier.Hook.current(on: c)
            let decision = try c.withSavepoint("siwa_job") { c throws(PostgresError) in
                try BatchApplier.apply([deletion], hook: hook, forward: forwardSource(.inApp), on: c)[0]
            }
            return .deleted(decision)
        } catch {
            if !c.isHealthy { throw error }
            return .failed(
                message: "\(error.sqlState ?? "?????"): \(Redaction.withoutEmails(error.serverMessage))", permanent: false,
                retryAfter: nil)
        }
    }

    /// Revokes one stored token at Apple; nil on success (or `invalid_grant`: already revoked).
    private func revokeAtApple(
        _ stored: DeletionStatements.StoredToken, sub: String, clientID: String,
        revocation: InAppDeletion
    ) -> JobResult? {
        // Every call's client_id is one of SIWA_AUDIENCES (when this process knows them).
        if !revocation.audiences.isEmpty && !revocation.audiences.containsExactly(clientID) {
            return .failed(
                message: "unknown_client_id: the stored token's client id \(clientID) is not in SIWA_AUDIENCES", permanent: true,
                retryAfter: nil)
        }
        let token: String
        do {
            token = try revocation.vault.open(stored, sub: sub, clientID: clientID)
        } catch {
            return .failed(message: "\(error)", permanent: true, retryAfter: nil)
        }
        switch revocation.client.revoke(refreshToken: token, clientID: clientID) {
        case .success, .invalidGrant:
            // invalid_grant: the token is no longer valid at Apple (revoked already): nothing left to revoke.
            return nil
        case .invalidClient:
            return .failed(
                message: "invalid_client: Apple refused the client authentication (check SIWA_TEAM_ID, "
                    + "SIWA_KEY_ID, the .p8 key and that \(clientID) belongs to the team)", permanent: true, retryAfter: nil)
        case .rejected(let failure):
            return .failed(message: "rejected: \(failure)", permanent: true, retryAfter: nil)
        case .transient(let failure):
            return .failed(message: "transient: \(failure)", permanent: false, retryAfter: failure.retryAfter)
        }
    }
}
