import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Applies outbox events. Claims due rows with `FOR UPDATE SKIP LOCKED` in a transaction (so
/// many workers share one queue and a crashed worker leaves nothing stuck: its locks vanish with
/// its connection), applies them (`BatchApplier`), retries failures with backoff and jitter,
/// dead-letters after `RetryPolicy.maxAttempts`. `Options.connections` batch loops
/// (`ConnectedLoop`s) share the queue: the first waits between batches on `wakeups` (woken by
/// `WakeUpListener` when new events arrive, and polling every `pollInterval` besides: retries
/// fall due without a notification; behind PgBouncer notifications do not arrive); the others
/// join in only while batches come back full.
public final class Worker: Service {
    public struct Options: Sendable {
        /// Events claimed per transaction. Default 1000.
        public var batchSize: Int = 1000
        /// Between polls when no notification arrives. Default 1 s.
        public var pollInterval: Duration = .seconds(1)
        /// How long the first loop lets new events gather after a batch that was neither empty
        /// nor full, before it claims again: at a trickle each receiver commit wakes the worker,
        /// and this puts the events of a few commits in one transaction (fewer commits beside
        /// the receiver's; bench/README.md). The first event after a quiet spell is claimed at
        /// once. Default 10 ms.
        public var gather: Duration = .milliseconds(10)
        public var retry: RetryPolicy = RetryPolicy()
        /// How long one statement of a batch (the operator hook included) may run, in whole
        /// seconds. Default 30 s.
        public var statementTimeout: Duration = .seconds(30)
        /// How long a batch waits for a row lock, in whole seconds. Default 5 s.
        public var lockTimeout: Duration = .seconds(5)
        /// Batch loops, each on a thread and a database connection of its own. Default 1 (the
        /// application sets `SIWA_WORKER_CONNECTIONS`). They share the queue as separate `work`
        /// processes do (`SKIP LOCKED`; accounts locked in one order).
        public var connections: Int = 1
        /// Queue a forward for every event that takes effect (`SIWA_FORWARD_URL` is set). Default false.
        public var forwarding: Bool = false
        /// The auth libraries' tables events also apply to (`SIWA_APPLY_TO`, checked at start). Default none.
        public var authLibraries: AuthLibraryTargets = .none
        /// The hosted providers a call is queued for (`SIWA_APPLY_TO`). Default none.
        public var providers: ProviderTargets = .none
        public init() {}
    }

    public let name = "worker"
    private let conninfo: String
    let options: Options
    let logger: Logger
    let metrics: Metrics
    /// Woken by new events and by `stop`: what the first loop waits on.
    public let wakeups: WakeSignal
    /// Wakes the helper loops (all but the first): a loop claimed a full batch, so a backlog is
    /// waiting. Helpers never wait on `wakeups`: at a trickle one loop applies everything, and
    /// a second one would only add small transactions (and commits) competing with the
    /// receiver's (bench/README.md).
    private let backlog: WakeSignal
    /// The batch loops, the first one first (set once, at the end of `init`).
    private let batchLoops = Mutex<[ConnectedLoop<PostgresConnection, LoopState>]>([])
    private var loops: [ConnectedLoop<PostgresConnection, LoopState>] { batchLoops.withLock { $0 } }

    /// What a batch loop keeps between rounds.
    struct LoopState {
        /// When the first loop sweeps ignored events that raced a deletion next.
        var sweepAt: Deadline
        /// The last batch was neither empty nor full: after the wait, let events gather.
        var gatherNext = false
    }

    public init(
        conninfo: String, options: Options = Options(), logger: Logger, metrics: Metrics,
        clock: any MonotonicClock = SystemClock.shared
    ) {
        self.conninfo = conninfo
        self.options = options
        self.logger = logger
        self.metrics = metrics
        self.wakeups = WakeSignal(clock: clock)
        self.backlog = WakeSignal(clock: clock)
        let loops = (1...max(1, options.connections)).map { number in
            ConnectedLoop(
                name: "worker \(number)", threadName: "siwa-worker-\(number)",
                wakeups: number == 1 ? wakeups : backlog, body: batchLoop(number: number, clock: clock))
        }
        batchLoops.withLock { $0 = loops }
    }

    /// Starts the batch loops, each on a thread of its own.
    public func start() {
        for loop in loops { loop.start() }
    }

    public func prepareToStop() {
        for loop in loops { loop.prepareToStop() }
    }

    /// Half of what is left of the shutdown budget: the listeners and the writer stop after the
    /// worker and need time to answer what is in flight.
    public var stopBudget: StopBudget { .halfOfWhatIsLeft }

    /// Stops after the current batch; waits for it until the deadline (an abandoned batch rolls
    /// back when the process exits: its events are claimed again later).
    public func stop(deadline: Deadline) {
        prepareToStop()
        for loop in loops where !loop.stop(until: deadline) {
            logger.warning("worker batch still running at the end of the shutdown budget; it will roll back")
            break
        }
    }

    /// Between two sweeps of unknown-type events that raced a deletion.
    static let ignoredSweepInterval: Duration = .seconds(5)

    /// One batch loop. Helpers wait on `backlog` as long as no full batch is seen; the first
    /// loop waits on `wakeups`, polls every `pollInterval` (retries fall due without a
    /// notification) and sweeps the raced ignored events.
    private func batchLoop(number: Int, clock: any MonotonicClock) -> ConnectedLoop<PostgresConnection, LoopState>.Body {
        let first = number == 1
        let idle = first ? options.pollInterval : .seconds(60)
        return .init(
            connect: { [conninfo] in try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify worker") },
            makeState: { LoopState(sweepAt: clock.now) },
            round: { [self] work, state in
                if state.gatherNext {
                    state.gatherNext = false
                    return .pause(until: clock.now.adding(options.gather))
                }
                if first, state.sweepAt.hasPassed(at: clock.now) {
                    state.sweepAt = clock.now.adding(Self.ignoredSweepInterval)
                    sweepRacedIgnored(on: work)
                }
                let processed = try processBatch(on: work)
                if processed == options.batchSize {
                    // More may be due: a waiting helper joins in.
                    backlog.wake()
                    return .again
                }
                state.gatherNext = first && processed > 0
                return .wait(until: clock.now.adding(idle))
            },
            failed: { [logger] error, _, wait in
                logger.warning(
                    "worker database error, reconnecting", metadata: ["error": "\(error)", "retry_in": "\(wait.inSeconds)"])
            },
            finish: { [logger] _, _ in logger.info("worker stopped", metadata: ["loop": "\(number)"]) })
    }

    /// Sweeps unknown-type events that raced a deletion, under the batch's timeouts and planner
    /// settings; a failed sweep is retried at the next one and never holds the batches up.
    private func sweepRacedIgnored(on work: PostgresConnection) {
        do {
            _ = try work.transaction(begin: beginBatch) { c throws(PostgresError) in
                try c.affected(WorkerStatements.eraseRacedIgnoredEmails, ())
            }
        } catch {
            logger.warning("sweep of ignored events failed; will try again", metadata: ["error": "\(error)"])
        }
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
                        try BatchApplier.apply(
                            first, hook: hook, forward: options.forwarding, libraries: options.authLibraries, providers: options.providers, on: c)
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
                    "retry_in": "\(failure.dead ? 0 : failure.delay.inSeconds)",
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
            var delay: Duration
            var sqlState: String
        }

        var applied: [(ClaimedEvent, AccountDecision)] = []
        var failed: [Failure] = []
    }

    /// The statements that open a batch transaction (timeouts, key lookups only).
    var beginBatch: String {
        WorkerStatements.beginBatch(
            statementTimeoutSeconds: Int(options.statementTimeout.components.seconds),
            lockTimeoutSeconds: Int(options.lockTimeout.components.seconds))
    }

    /// The slow path: one event under its own savepoint; a failure is recorded for retry.
    private func applyOne(
        _ item: ClaimedEvent, hook: BatchApplier.Hook, on c: PostgresConnection, report: inout BatchReport
    ) throws(PostgresError) {
        do throws(PostgresError) {
            let decision = try c.withSavepoint("siwa_event") { c throws(PostgresError) in
                try BatchApplier.apply(
                    [item], hook: hook, forward: options.forwarding, libraries: options.authLibraries, providers: options.providers, on: c)[0]
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
                    retryInSeconds: delay.inSeconds))
            // Its erasure was rolled back with it: a deleted user's address goes now all the same.
            try c.affected(WorkerStatements.eraseFailedEventEmail, item.id)
            report.failed.append(
                BatchReport.Failure(
                    item: item, dead: dead, attempts: attempts, delay: delay,
                    sqlState: error.sqlState ?? ""))
        }
    }
}
