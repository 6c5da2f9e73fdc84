import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Revokes refresh tokens at Apple (`siwa.revocations`), apart from the worker's batches: a slow
/// or failing Apple never delays notifications. One loop with its own database connection claims
/// due revocations with a lease (committed), hands each to one of `Options.callsInFlight` threads
/// that call Apple outside any transaction, and records each outcome in a short transaction of its
/// own. A process killed mid-call leaves the job `running` until its lease ends; it is then
/// claimed again, counted as an attempt (revoking a revoked token is harmless: Apple answers 200).
///
/// Apple's revoke answers 200 to anything, so a revocation is proven: after the 200 the same
/// token is validated once (`grant_type=refresh_token`, in the same call slot, so the validation
/// is paced like the revoke). `invalid_grant` confirms it (`done`, `confirmed`); a token that still
/// works is `unconfirmed` and revoked again with backoff; a validation that got no answer is
/// retried alone (`pending`). Every call is recorded with Apple's status and its time.
public final class Revoker: Service {
    public struct Options: Sendable {
        /// Calls to Apple at once. Default 4.
        public var callsInFlight: Int = 4
        /// How long a claimed job is leased (longer than one call to Apple). Default 60 s.
        public var lease: Duration = .seconds(60)
        /// Between polls for due jobs. Default 1 s.
        public var pollInterval: Duration = .seconds(1)
        public var schedule = RevocationSchedule()
        /// How long a claim or an outcome waits for a row lock held by another session. Default 2 s.
        /// An outcome whose row stays locked is kept and recorded on a later round; the loop goes
        /// on meanwhile (other jobs are claimed and recorded).
        public var lockTimeout: Duration = .seconds(2)
        /// How long one of the revoker's statements may run. Default 10 s.
        public var statementTimeout: Duration = .seconds(10)
        /// How long a stop waits for the calls in flight, recording their outcomes as they come.
        /// Default 11 s: a call to Apple's timeout, and a second (a call still out then is
        /// claimed again once its lease ends).
        public var stopGrace: Duration = .seconds(11)
        public init() {}
    }

    private let loop: CallLoop<RevocationStatements.Job, Attempt>
    public var name: String { loop.name }

    enum Outcome {
        /// Finished: Apple refuses the token (`confirmed`), or there was no token to revoke.
        case revoked(confirmed: Bool)
        /// Retried with backoff, then dead. `confirmation`: the job's from now on.
        case failed(String, retryAfter: Duration?, confirmation: String?)
    }

    /// An attempt's outcome and the calls to Apple it made, in order.
    struct Attempt {
        var outcome: Outcome
        var calls: [RevocationStatements.Call] = []
    }

    /// `clock`: the time each call to Apple is recorded at.
    public init(
        conninfo: String, apple: AppleAPICredentials, options: Options = Options(), logger: Logger, metrics: Metrics,
        clock: WallClock = .system
    ) {
        let steps = Steps(apple: apple, options: options, logger: logger, metrics: metrics, clock: clock)
        loop = CallLoop(
            .init(
                name: "revoker", thread: "siwa-revoker", calls: "siwa-revoke", callsInFlight: options.callsInFlight,
                poll: options.pollInterval, stopGrace: options.stopGrace),
            logger: logger,
            connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify revoker") },
            claim: { c, limit, _ in
                try c.transaction(begin: steps.begin) { c throws(PostgresError) in
                    try c.rows(RevocationStatements.claim, (limit, options.lease.inSeconds))
                }
            },
            call: steps.revoke, record: steps.record)
    }

    public func start() { loop.start() }

    public func prepareToStop() { loop.prepareToStop() }

    /// Calls in flight get `stopGrace` to answer, each outcome recorded as it comes; those still
    /// out then, or at the deadline, are abandoned: their leases run out and the next process
    /// claims them again.
    public func stop(deadline: Deadline) { loop.stop(deadline: deadline) }
}

extension Revoker {
    /// The calls to Apple and the recording of their outcomes (the loop's steps).
    struct Steps: Sendable {
        let apple: AppleAPICredentials
        let options: Options
        let logger: Logger
        let metrics: Metrics
        let clock: WallClock

        /// The calls to Apple of one attempt (the revoke unless Apple already accepted it, then the
        /// validation that proves it), no database.
        func revoke(_ job: RevocationStatements.Job) -> Attempt {
            guard let stored = job.token else { return Attempt(outcome: .revoked(confirmed: false)) }
            let kept = job.confirmation
            if !apple.audiences.isEmpty && !apple.audiences.containsExactly(job.clientID) {
                return Attempt(
                    outcome: .failed("unknown_client_id: the token's client id is not in SIWA_AUDIENCES", retryAfter: nil, confirmation: kept))
            }
            let token: String
            do {
                token = try apple.vault.open(stored, sub: job.sub, clientID: job.clientID)
            } catch {
                return Attempt(outcome: .failed("\(error)", retryAfter: nil, confirmation: kept))
            }
            var calls: [RevocationStatements.Call] = []
            if job.confirmation != "pending" {
                // Wall-clock time: the call's timestamp in its evidence (read by operators), no timeout.
                let sent = clock.sinceEpoch.inSeconds
                let result = apple.client.revoke(refreshToken: token, clientID: job.clientID)
                calls.append(Self.call("revoke", at: sent, result))
                switch result {
                case .success: break
                case .invalidGrant:
                    // Apple refuses the token itself: nothing is left to revoke, and that is the proof.
                    return Attempt(outcome: .revoked(confirmed: true), calls: calls)
                case .invalidClient:
                    return Attempt(outcome: .failed(Self.invalidClient, retryAfter: nil, confirmation: kept), calls: calls)
                case .rejected(let failure):
                    return Attempt(outcome: .failed("rejected: \(failure)", retryAfter: nil, confirmation: kept), calls: calls)
                case .transient(let failure):
                    return Attempt(outcome: .failed("transient: \(failure)", retryAfter: failure.retryAfter, confirmation: kept), calls: calls)
                }
            }
            // Apple said 200, which it says to anything: the same token, validated once, proves it.
            let sent = clock.sinceEpoch.inSeconds
            let check = apple.client.validate(refreshToken: token, clientID: job.clientID)
            calls.append(Self.call("validate", at: sent, check))
            switch check {
            case .invalidGrant:
                return Attempt(outcome: .revoked(confirmed: true), calls: calls)
            case .success:
                return Attempt(
                    outcome: .failed(
                        "unconfirmed: Apple answered the revoke with 200 but the token still works; revoking again", retryAfter: nil,
                        confirmation: "unconfirmed"),
                    calls: calls)
            case .invalidClient:
                return Attempt(
                    outcome: .failed("not proven: validation " + Self.invalidClient, retryAfter: nil, confirmation: "pending"), calls: calls)
            case .rejected(let failure):
                return Attempt(
                    outcome: .failed("not proven: validation rejected: \(failure)", retryAfter: nil, confirmation: "pending"), calls: calls)
            case .transient(let failure):
                return Attempt(
                    outcome: .failed("not proven: validation transient: \(failure)", retryAfter: failure.retryAfter, confirmation: "pending"),
                    calls: calls)
            }
        }

        private static let invalidClient =
            "invalid_client: Apple refused the client authentication (check SIWA_TEAM_ID, SIWA_KEY_ID, the .p8 key)"

        /// A call's evidence: Apple's status and outcome, never the token.
        private static func call<T>(_ kind: String, at: Double, _ result: AppleCallResult<T>) -> RevocationStatements.Call {
            switch result {
            case .success: return .init(kind: kind, at: at, httpStatus: 200, outcome: "success")
            case .invalidGrant: return .init(kind: kind, at: at, httpStatus: 400, outcome: "invalid_grant")
            case .invalidClient: return .init(kind: kind, at: at, httpStatus: 400, outcome: "invalid_client")
            case .rejected(let f): return .init(kind: kind, at: at, httpStatus: f.status, outcome: "rejected", detail: f.description)
            case .transient(let f): return .init(kind: kind, at: at, httpStatus: f.status, outcome: "transient", detail: f.description)
            }
        }

        /// The revoker's transactions: statement and lock timeouts (`Options`).
        var begin: String {
            RevocationStatements.begin(
                statementTimeoutMilliseconds: Int(options.statementTimeout.inSeconds * 1000),
                lockTimeoutMilliseconds: Int(options.lockTimeout.inSeconds * 1000))
        }

        /// Records the outcomes of finished calls, each in a short transaction. An outcome whose row
        /// another session holds locked (past the lock timeout) is kept for a later round; the others
        /// are recorded, and the loop goes on claiming.
        func record(on connection: PostgresConnection, _ rounds: inout CallRounds<RevocationStatements.Job, Attempt>) throws {
            let done = rounds.takeAnswers()
            var waiting: [(RevocationStatements.Job, Attempt)] = []
            defer { if !waiting.isEmpty { rounds.keep(waiting) } }
            for (index, (job, outcome)) in done.enumerated() {
                do throws(PostgresError) {
                    let report = try connection.transaction(begin: begin) { c throws(PostgresError) in try record(job, outcome, on: c) }
                    report()
                } catch  where error.sqlState == RevocationStatements.lockNotAvailable && connection.isHealthy {
                    logger.warning(
                        "revocation outcome not recorded: another session holds its row locked; kept for the next round",
                        metadata: ["revocation_id": "\(job.id)", "lock_timeout": "\(options.lockTimeout)"])
                    waiting.append((job, outcome))
                } catch {
                    // Not recorded: kept with the rest (the lease keeps the job from running twice meanwhile).
                    waiting.append(contentsOf: done[index...])
                    throw error
                }
            }
        }

        /// Writes one outcome in the caller's transaction; returns what to count and log once it committed.
        private func record(
            _ job: RevocationStatements.Job, _ attempt: Attempt, on c: PostgresConnection
        ) throws(PostgresError) -> () -> Void {
            let subHash = SubjectHash.of(job.sub)
            if !attempt.calls.isEmpty {
                try c.affected(RevocationStatements.recordCalls, (job.id, attempt.calls))
            }
            switch attempt.outcome {
            case .revoked(let confirmed):
                try c.affected(RevocationStatements.markDone, (job.id, confirmed))
                return {
                    metrics.revocation(outcome: "revoked")
                    logger.info(
                        confirmed
                            ? "refresh token revoked at Apple, confirmed (Apple refuses it now)" : "revocation without a token: nothing to revoke",
                        metadata: [
                            "revocation_id": "\(job.id)", "sub_hash": "\(subHash)", "client_id": "\(job.clientID)", "attempts": "\(job.attempts)",
                        ])
                }
            case .failed(let message, let retryAfter, let confirmation):
                let next = options.schedule.next(
                    afterAttempts: job.attempts, age: .seconds(job.ageSeconds), retryAfter: retryAfter, jitter: Double.random(in: 0..<1))
                let dead = next == .dead
                let delay: Duration
                if case .retry(let wait) = next { delay = wait } else { delay = .zero }
                try c.affected(
                    RevocationStatements.markFailed,
                    .init(id: job.id, dead: dead, error: message, retryInSeconds: delay.inSeconds, confirmation: confirmation))
                let unconfirmed = confirmation == "unconfirmed" && attempt.calls.last?.kind == "validate"
                return {
                    metrics.revocation(outcome: dead ? "dead" : unconfirmed ? "unconfirmed" : "failed")
                    logger.warning(
                        dead
                            ? "revocation at Apple dead-lettered"
                            : unconfirmed
                                ? "revocation at Apple unconfirmed: the token still works after Apple's 200; revoking again"
                                : "revocation at Apple failed, will retry",
                        metadata: [
                            "revocation_id": "\(job.id)", "sub_hash": "\(subHash)", "client_id": "\(job.clientID)",
                            "attempts": "\(job.attempts)", "error": "\(message)", "retry_in": "\(dead ? 0 : delay.inSeconds)",
                        ])
                }
            }
        }
    }
}
