import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Applies outbox events. Claims due rows with `FOR UPDATE SKIP LOCKED` in a transaction (so
/// many workers share one queue and a crashed worker leaves nothing stuck: its locks vanish with
/// its connection), applies them (`BatchApplier`), retries failures with backoff and jitter,
/// dead-letters after `RetryPolicy.maxAttempts`. `Options.connections` batch loops share the
/// queue: the first waits between batches on `wakeups` (woken by `WakeUpListener` when new events
/// arrive, and polling every `pollInterval` seconds besides: retries fall due without a
/// notification; behind PgBouncer notifications do not arrive); the others join in only while
/// batches come back full.
public final class Worker: Service {
    public struct Options: Sendable {
        /// Events claimed per transaction. Default 1000.
        public var batchSize: Int = 1000
        /// Seconds between polls when no notification arrives. Default 1.
        public var pollInterval: Double = 1
        /// Seconds the first loop lets new events gather after a batch that was neither empty
        /// nor full, before it claims again. At a trickle each receiver commit wakes the worker;
        /// this puts the events of a few commits in one transaction (fewer commits and less CPU
        /// beside the receiver's; bench/README.md). The first event after a quiet spell is
        /// claimed at once. Default 0.01.
        public var gather: Double = 0.01
        public var retry: RetryPolicy = RetryPolicy()
        /// Seconds one statement of a batch (the operator hook included) may run. Default 30.
        public var statementTimeout: Int = 30
        /// Seconds a batch waits for a row lock. Default 5.
        public var lockTimeout: Int = 5
        /// Batch loops, each on a thread and a database connection of its own. Default 1 (the
        /// application sets `SIWA_WORKER_CONNECTIONS`). They share the queue as separate `work`
        /// processes do (`SKIP LOCKED`; accounts locked in one order).
        public var connections: Int = 1
        /// Queue a forward for every event that takes effect (`SIWA_FORWARD_URL` is set). Default false.
        public var forwarding: Bool = false
        /// The auth libraries' tables events also apply to (`SIWA_APPLY_TO`, checked at start). Default none.
        public var authLibraries: AuthLibraryTargets = .none
        public init() {}
    }

    public let name = "worker"
    private let conninfo: String
    let options: Options
    let logger: Logger
    let metrics: Metrics
    /// Woken by new events and by `stop`.
    public let wakeups = WakeSignal()
    /// Wakes the helper loops (all but the first): a loop claimed a full batch, so a backlog is
    /// waiting. Helpers never wait on `wakeups`: at a trickle one loop applies everything, and
    /// a second one would only double the small transactions (and commits) competing with the
    /// receiver's (it tripled the p99 of `serve`; bench/README.md).
    private let backlog = WakeSignal()
    /// Set by `stop`: what a loop's error backoff waits on (a helper woken by every full batch
    /// of another loop would otherwise retry a failing connection at once).
    private let stopping = StopSignal()
    /// One per batch loop, set when it has ended.
    private let finished: [StopSignal]

    public init(conninfo: String, options: Options = Options(), logger: Logger, metrics: Metrics) {
        self.conninfo = conninfo
        self.options = options
        self.logger = logger
        self.metrics = metrics
        self.finished = (0..<max(1, options.connections)).map { _ in StopSignal() }
    }

    /// Starts the batch loops, each on a thread of its own.
    public func start() {
        for (k, done) in finished.enumerated() {
            let thread = Thread { [self] in
                self.loop(number: k + 1, waitingOn: k == 0 ? wakeups : backlog)
                done.stop()
            }
            thread.name = "siwa-worker-\(k + 1)"
            thread.start()
        }
    }

    /// Stops after the current batch; waits for it until the deadline (an abandoned batch rolls
    /// back when the process exits: its events are claimed again later).
    public func stop(deadline: ShutdownDeadline) {
        wakeups.stop()
        backlog.stop()
        stopping.stop()
        // At most half of what is left: the listeners and the writer stop after the worker and
        // need time to answer what is in flight.
        let budget = ShutdownDeadline(secondsFromNow: deadline.remaining / 2)
        for done in finished where !done.wait(timeout: budget.remaining) {
            logger.warning("worker batch still running at the end of the shutdown budget; it will roll back")
            break
        }
    }

    /// Seconds between two sweeps of unknown-type events that raced a deletion.
    static let ignoredSweepInterval = 5.0

    /// Helpers (`signal` is `backlog`) wait as long as no full batch is seen; the first loop
    /// also polls every `pollInterval` (retries fall due without a notification).
    private func loop(number: Int, waitingOn signal: WakeSignal) {
        let idle = signal === wakeups ? options.pollInterval : 60
        var work: PostgresConnection?
        var backoff = 0.2
        var swept = Deadline.now
        while !wakeups.isStopped {
            do {
                if work == nil || !(work!.isHealthy) {
                    work = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify worker")
                }
                // The first loop sweeps unknown-type events that raced a deletion, every few
                // seconds, under the batch's timeouts and planner settings; a failed sweep is
                // retried at the next one and never holds the batches up.
                if signal === wakeups, swept.hasPassed(at: .now) {
                    swept = Deadline.now.adding(seconds: Self.ignoredSweepInterval)
                    do {
                        _ = try work!.transaction(begin: beginBatch) { c throws(PostgresError) in
                            try c.affected(WorkerStatements.eraseRacedIgnoredEmails, ())
                        }
                    } catch {
                        logger.warning("sweep of ignored events failed; will try again", metadata: ["error": "\(error)"])
                    }
                }
                let processed = try processBatch(on: work!)
                backoff = 0.2
                if processed == options.batchSize {
                    // More may be due: a waiting helper joins in.
                    backlog.wake()
                } else {
                    signal.wait(timeout: idle)
                    if processed > 0, signal === wakeups { stopping.wait(timeout: options.gather) }
                }
            } catch {
                logger.warning("worker database error, reconnecting", metadata: ["error": "\(error)", "retry_in": "\(backoff)"])
                work = nil
                stopping.wait(timeout: backoff)
                backoff = min(backoff * 2, 5)
            }
        }
        logger.info("worker stopped", metadata: ["loop": "\(number)"])
    }

    /// Claims and applies one batch in one transaction; returns how many events it handled.
    @discardableResult
    public func processBatch(on connection: PostgresConnection) throws(PostgresError) -> Int {
        var report = BatchReport()
        let count = try connection.transaction(begin: beginBatch) { c throws(PostgresError) in
            report = BatchReport()
            let claimed = try c.rows(WorkerStatements.claim, options.batchSize)
            if claimed.isEmpty { return 0 }
            // Read once per batch, not per event of the one-by-one path.
            let hook = try BatchApplier.Hook.current(on: c)
            // Accounts are locked in one order by every path (sorted by sub): no deadlocks.
            let bySub: (ClaimedEvent, ClaimedEvent) -> Bool = {
                if $0.event.sub != $1.event.sub { return $0.event.sub.utf8.lexicographicallyPrecedes($1.event.sub.utf8) }
                return $0.event.eventTimeMillis < $1.event.eventTimeMillis
            }
            // Fast path: the first event of each sub, all at once. The rest (a second event for a
            // sub in the same batch), or everything when the fast path fails, goes event by event.
            var seen: Set<String> = []
            let first = claimed.filter { seen.insert($0.event.sub).inserted }
            let firstIDs = Set(first.map(\.id))
            var rest = claimed.filter { !firstIDs.contains($0.id) }.sorted(by: bySub)
            if first.count > 1 {
                do throws(PostgresError) {
                    let decisions = try c.withSavepoint("siwa_batch") { c throws(PostgresError) in
                        try BatchApplier.apply(first, hook: hook, forward: options.forwarding, libraries: options.authLibraries, on: c)
                    }
                    report.applied += zip(first, decisions).map { ($0, $1) }
                } catch {
                    if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
                    logger.debug("bulk apply failed, applying one by one", metadata: ["sqlstate": "\(error.sqlState ?? "")"])
                    rest = claimed.sorted(by: bySub)
                }
            } else {
                // One sub (or one event): still in event_time order, as the hook sees it.
                rest = claimed.sorted(by: bySub)
            }
            for item in rest {
                try applyOne(item, hook: hook, on: c, report: &report)
            }
            return claimed.count
        }
        // Counted and logged once committed (a rolled-back batch is applied again later).
        for (item, decision) in report.applied {
            metrics.event(outcome: "applied", type: item.event.type.rawValue)
            logger.info(
                "event applied",
                metadata: [
                    "event_id": "\(item.id)", "type": "\(item.event.type.rawValue)",
                    "sub_hash": "\(SubjectHash.of(item.event.sub))", "outcome": "\(decision.outcome.rawValue)",
                ])
        }
        for failure in report.failed {
            metrics.event(outcome: failure.dead ? "dead" : "failed", type: failure.item.event.type.rawValue)
            logger.warning(
                failure.dead ? "event dead-lettered" : "event failed, will retry",
                metadata: [
                    "event_id": "\(failure.item.id)", "type": "\(failure.item.event.type.rawValue)",
                    "attempts": "\(failure.attempts)", "sqlstate": "\(failure.sqlState)",
                    "retry_in": "\(failure.dead ? 0 : failure.delay)",
                ])
        }
        return count
    }

    /// What one batch did, reported after its commit.
    struct BatchReport {
        struct Failure {
            var item: ClaimedEvent
            var dead: Bool
            var attempts: Int
            var delay: Double
            var sqlState: String
        }

        var applied: [(ClaimedEvent, AccountDecision)] = []
        var failed: [Failure] = []
    }

    /// The statements that open a batch transaction (timeouts, key lookups only).
    var beginBatch: String {
        WorkerStatements.beginBatch(statementTimeoutSeconds: options.statementTimeout, lockTimeoutSeconds: options.lockTimeout)
    }

    /// The slow path: one event under its own savepoint; a failure is recorded for retry.
    private func applyOne(
        _ item: ClaimedEvent, hook: BatchApplier.Hook, on c: PostgresConnection, report: inout BatchReport
    ) throws(PostgresError) {
        do throws(PostgresError) {
            let decision = try c.withSavepoint("siwa_event") { c throws(PostgresError) in
                try BatchApplier.apply([item], hook: hook, forward: options.forwarding, libraries: options.authLibraries, on: c)[0]
            }
            report.applied.append((item, decision))
        } catch {
            if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
            let attempts = item.attempts + 1
            let dead = options.retry.isExhausted(attempts: attempts)
            let delay = options.retry.delay(afterAttempts: attempts, jitter: Double.random(in: 0..<1))
            // Dashboards read last_error (siwa.dead_letters): no address from a hook's message.
            let message = "\(error.sqlState ?? "?????"): \(Redaction.withoutEmails(error.serverMessage))"
            try c.affected(
                WorkerStatements.markFailed,
                .init(
                    id: item.id, status: dead ? .dead : .failed, error: message,
                    retryInSeconds: delay))
            // Its erasure was rolled back with it: a deleted user's address goes now all the same.
            try c.affected(WorkerStatements.eraseFailedEventEmail, item.id)
            report.failed.append(
                BatchReport.Failure(
                    item: item, dead: dead, attempts: attempts, delay: delay,
                    sqlState: error.sqlState ?? ""))
        }
    }
}
