import Foundation
import Logging
import SiwaCore
import SiwaFetch
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Delivers queued forwards (`siwa.forwards`) to `SIWA_FORWARD_URL`. One dispatcher thread owns
/// a database connection: it leases due forwards (a committed `UPDATE … RETURNING`, one short
/// transaction), hands them to `Options.concurrency` sender threads that POST them outside any
/// transaction, and records what they answered (another short transaction). So at most
/// `concurrency` calls are in flight, and a slow or dead receiver never holds a lock or a
/// transaction. Each sender thread keeps its connection to the receiver open between POSTs
/// (`FetchSession`). A sender killed mid-call leaves its lease to expire: the forward is sent again
/// (same `webhook-id`). Per sub, only the earliest waiting forward is ever due
/// (`ForwardStatements.claim`).
public final class ForwardSender: Service {
    public struct Options: Sendable {
        /// POSTs in flight at most (sender threads). Default 32.
        public var concurrency: Int = 32
        /// Most forwards leased per claim. Default 100.
        public var batchSize: Int = 100
        /// Between polls when no NOTIFY arrives (retries fall due without one). Default 1 s.
        public var pollInterval: Duration = .seconds(1)
        /// How long a POST may take. Default 10 s.
        public var timeout: Duration = .seconds(10)
        /// How long a stop waits for the POSTs in flight, recording their answers as they come.
        /// Default 11 s: a POST's timeout, and a second.
        public var stopGrace: Duration = .seconds(11)
        /// Backoff after a failed attempt (until `SIWA_FORWARD_RETRY_FOR`).
        public var backoff = RetryPolicy(maxAttempts: .max, baseDelay: .seconds(1), maxDelay: .seconds(3600))
        public init() {}
    }

    private let loop: CallLoop<ClaimedForward, ForwardDelivery.Attempt>
    public var name: String { loop.name }
    /// Woken by new forwards (NOTIFY), by answers of the sender threads, and by `stop`.
    public var wakeups: WakeSignal { loop.wakeups }
    /// The POSTs' half of the shutdown budget: the listeners stop after it.
    public var stopBudget: StopBudget { loop.stopBudget }

    public init(
        conninfo: String, delivery: ForwardDelivery, retryFor: Duration, options: Options = Options(), logger: Logger,
        metrics: Metrics
    ) {
        let steps = Steps(
            schedule: ForwardSchedule(retryFor: retryFor, backoff: options.backoff), lease: options.timeout + .seconds(5),
            logger: logger, metrics: metrics)
        var settings = CallLoop<ClaimedForward, ForwardDelivery.Attempt>.Settings(
            name: "forward sender", thread: "siwa-forwards", calls: "siwa-forward", callsInFlight: options.concurrency,
            poll: options.pollInterval, stopGrace: options.stopGrace)
        settings.batchSize = options.batchSize
        settings.budget = .halfOfWhatIsLeft
        loop = CallLoop(
            settings, logger: logger,
            connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify forwards") },
            // The answers are recorded in the claim's transaction: one commit a round.
            claim: { c, limit, rounds in try steps.cycle(&rounds, claimLimit: limit, on: c) },
            // Each sender thread keeps its connection to the receiver open between POSTs.
            makeLocal: { FetchSession() },
            call: { item, session in delivery.send(item.message, session: session) },
            record: { c, rounds in _ = try steps.cycle(&rounds, claimLimit: 0, on: c) })
    }

    public func start() { loop.start() }

    public func prepareToStop() { loop.prepareToStop() }

    /// Stops leasing; waits for the POSTs in flight and records their answers. What is still
    /// unanswered then is sent again by whoever runs next, once its lease expires.
    public func stop(deadline: Deadline) { loop.stop(deadline: deadline) }
}

extension ForwardSender {
    /// What the sender threads answered, as the outcomes to record and what each one means.
    struct Recorded {
        var done: [(ClaimedForward, ForwardDelivery.Attempt)]
        var outcomes: [ForwardStatements.Outcome] = []
        var verdicts: [ForwardSchedule.Next?] = []

        init(_ done: [(ClaimedForward, ForwardDelivery.Attempt)], schedule: ForwardSchedule) {
            self.done = done
            for (item, attempt) in done {
                if attempt.delivered {
                    outcomes.append(.init(id: item.message.id, status: "delivered", error: nil, retryInSeconds: 0, deliveryMillis: nil))
                    verdicts.append(nil)
                } else {
                    let next = schedule.next(afterAttempts: item.attempts + 1, age: .seconds(item.ageSeconds), jitter: Double.random(in: 0..<1))
                    let delay: Duration
                    if case .retry(let d) = next { delay = d } else { delay = .zero }
                    outcomes.append(
                        .init(
                            id: item.message.id, status: next == .dead ? "dead" : "failed", error: attempt.error, retryInSeconds: delay.inSeconds,
                            deliveryMillis: nil))
                    verdicts.append(next)
                }
            }
        }
    }

    /// Records the answers and claims the next forwards (the loop's steps).
    struct Steps: Sendable {
        let schedule: ForwardSchedule
        /// The lease of a claimed forward: its POST's timeout, and 5 s to record the answer.
        let lease: Duration
        let logger: Logger
        let metrics: Metrics
        let clock: any MonotonicClock = SystemClock.shared

        /// Records the answers and claims up to `claimLimit` due forwards, in one short transaction;
        /// counts and logs the answers once committed. Answers not recorded are kept.
        func cycle(
            _ rounds: inout CallRounds<ClaimedForward, ForwardDelivery.Attempt>, claimLimit: Int, on c: PostgresConnection
        ) throws -> [ClaimedForward] {
            guard rounds.hasAnswers || claimLimit > 0 else { return [] }
            let recorded = Recorded(rounds.takeAnswers(), schedule: schedule)
            do {
                let claimed = try cycle(recorded, claimLimit: claimLimit, on: c)
                report(recorded)
                return claimed
            } catch {
                rounds.keep(recorded.done)
                throw error
            }
        }

        private func cycle(_ recorded: Recorded, claimLimit: Int, on c: PostgresConnection) throws(PostgresError) -> [ClaimedForward] {
            var outcomes = recorded.outcomes
            // The delivering attempts' latency runs until this commit: measured just before it.
            let now = clock.now.uptimeNanoseconds
            for (i, (_, attempt)) in recorded.done.enumerated() where attempt.delivered {
                outcomes[i].deliveryMillis = Int((now - attempt.startedAt) / 1_000_000)
            }
            return try c.transaction(begin: ForwardStatements.beginCycle) { c throws(PostgresError) in
                if !outcomes.isEmpty { try c.affected(ForwardStatements.recordOutcomes, outcomes) }
                guard claimLimit > 0 else { return [] }
                return try c.rows(ForwardStatements.claim, .init(limit: claimLimit, leaseSeconds: lease.inSeconds))
            }
        }

        /// Counts and logs answers once they are committed.
        private func report(_ recorded: Recorded) {
            let committed = clock.now.uptimeNanoseconds
            for ((item, attempt), verdict) in zip(recorded.done, recorded.verdicts) {
                let type = item.message.type.rawValue
                let subHash = SubjectHash.of(item.message.sub)
                switch verdict {
                case nil:
                    metrics.forward(outcome: "delivered", type: type)
                    metrics.observeForwardDelivery(seconds: Double(committed - attempt.startedAt) / 1e9)
                    logger.debug(
                        "forward delivered",
                        metadata: [
                            "forward_id": "\(item.message.id)", "type": "\(type)", "sub_hash": "\(subHash)", "status": "\(attempt.status ?? 0)",
                        ])
                case .retry(let delay):
                    metrics.forward(outcome: "failed", type: type)
                    logger.warning(
                        "forward failed, will retry",
                        metadata: [
                            "forward_id": "\(item.message.id)", "type": "\(type)", "sub_hash": "\(subHash)",
                            "attempts": "\(item.attempts + 1)", "error": "\(attempt.error ?? "")", "retry_in": "\(delay.inSeconds)",
                        ])
                case .dead:
                    metrics.forward(outcome: "dead", type: type)
                    logger.error(
                        "forward dead: retried for SIWA_FORWARD_RETRY_FOR; `siwa-notify replay --forwards` sends it again",
                        metadata: [
                            "forward_id": "\(item.message.id)", "type": "\(type)", "sub_hash": "\(subHash)",
                            "attempts": "\(item.attempts + 1)", "error": "\(attempt.error ?? "")",
                        ])
                }
            }
        }
    }
}
