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
        /// Seconds between polls when no NOTIFY arrives (retries fall due without one). Default 1.
        public var pollInterval: Double = 1
        /// Seconds a POST may take. Default 10.
        public var timeout: Double = 10
        /// Backoff after a failed attempt (until `SIWA_FORWARD_RETRY_FOR`).
        public var backoff = RetryPolicy(maxAttempts: .max, baseDelay: 1, maxDelay: 3600)
        public init() {}
    }

    public let name = "forward sender"
    private let conninfo: String
    private let delivery: ForwardDelivery
    private let schedule: ForwardSchedule
    private let options: Options
    private let logger: Logger
    private let metrics: Metrics
    /// Woken by new forwards (NOTIFY), by answers of the sender threads, and by `stop`.
    public let wakeups = WakeSignal()
    private let queue = HandOff()
    private let answers = Mutex<[(ClaimedForward, ForwardDelivery.Attempt)]>([])
    private let finished = StopSignal()

    public init(
        conninfo: String, delivery: ForwardDelivery, retryFor: Double, options: Options = Options(), logger: Logger,
        metrics: Metrics
    ) {
        self.conninfo = conninfo
        self.delivery = delivery
        self.schedule = ForwardSchedule(retryFor: retryFor, backoff: options.backoff)
        self.options = options
        self.logger = logger
        self.metrics = metrics
    }

    /// The lease of a claimed forward: its POST's timeout, and 5 s to record the answer.
    var leaseSeconds: Double { options.timeout + 5 }

    public func start() {
        for k in 0..<max(1, options.concurrency) {
            let thread = Thread { [self] in
                let session = FetchSession()  // this thread's connection, kept open between POSTs
                while let item = queue.take() {
                    let attempt = delivery.send(item.message, session: session)
                    answers.withLock { $0.append((item, attempt)) }
                    wakeups.wake()
                }
            }
            thread.name = "siwa-forward-\(k + 1)"
            thread.start()
        }
        let dispatcher = Thread { [self] in
            dispatch()
            finished.stop()
        }
        dispatcher.name = "siwa-forwards"
        dispatcher.start()
    }

    /// Stops leasing; waits (at most half of what is left of the budget) for the POSTs in
    /// flight and records their answers. What is still unanswered then is sent again by
    /// whoever runs next, once its lease expires.
    public func stop(deadline: ShutdownDeadline) {
        queue.close()
        wakeups.stop()
        if !finished.wait(timeout: deadline.remaining / 2) {
            logger.warning("forwards still in flight at the end of the shutdown budget; they will be sent again")
        }
    }

    private func dispatch() {
        var connection: PostgresConnection?
        var inFlight = 0
        var pending: [(ClaimedForward, ForwardDelivery.Attempt)] = []
        var backoff = 0.2
        var stopAt: ShutdownDeadline?
        while true {
            pending += answers.withLock { a in
                defer { a = [] }
                return a
            }
            let stopping = wakeups.isStopped
            if stopping && stopAt == nil { stopAt = ShutdownDeadline(secondsFromNow: options.timeout + 1) }
            if stopping && (inFlight == 0 || stopAt!.remaining == 0) && pending.isEmpty { break }
            do {
                if connection == nil || !(connection!.isHealthy) {
                    connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify forwards")
                }
                // Answers recorded and the next forwards claimed in one transaction: one commit a cycle.
                let free = options.concurrency - (inFlight - pending.count)
                let limit = stopping ? 0 : min(max(0, free), options.batchSize)
                var claimed = 0
                if !pending.isEmpty || limit > 0 {
                    let recorded = Recorded(pending, schedule: schedule)
                    let items = try cycle(recorded, claimLimit: limit, on: connection!)
                    report(recorded)
                    inFlight -= pending.count
                    pending = []
                    claimed = items.count
                    inFlight += claimed
                    queue.put(items)
                }
                backoff = 0.2
                if claimed == 0 || inFlight == options.concurrency {
                    // Answers wake it; so do new forwards and the poll (retries falling due).
                    if stopping {
                        _ = StopSignal().wait(timeout: 0.01)
                    } else {
                        wakeups.wait(timeout: options.pollInterval)
                    }
                }
            } catch {
                logger.warning("forward sender database error, reconnecting", metadata: ["error": "\(error)", "retry_in": "\(backoff)"])
                connection = nil
                if stopping && stopAt!.remaining == 0 { break }
                _ = StopSignal().wait(timeout: backoff)
                backoff = min(backoff * 2, 5)
            }
        }
        logger.info("forward sender stopped")
    }

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
                    let next = schedule.next(afterAttempts: item.attempts + 1, ageSeconds: item.ageSeconds, jitter: Double.random(in: 0..<1))
                    let delay: Double
                    if case .retry(let d) = next { delay = d } else { delay = 0 }
                    outcomes.append(
                        .init(
                            id: item.message.id, status: next == .dead ? "dead" : "failed", error: attempt.error, retryInSeconds: delay,
                            deliveryMillis: nil))
                    verdicts.append(next)
                }
            }
        }
    }

    /// Records the answers and claims up to `claimLimit` due forwards, in one short transaction.
    private func cycle(_ recorded: Recorded, claimLimit: Int, on c: PostgresConnection) throws(PostgresError) -> [ClaimedForward] {
        var outcomes = recorded.outcomes
        // The delivering attempts' latency runs until this commit: measured just before it.
        let now = DispatchTime.now().uptimeNanoseconds
        for (i, (_, attempt)) in recorded.done.enumerated() where attempt.delivered {
            outcomes[i].deliveryMillis = Int((now - attempt.startedAt) / 1_000_000)
        }
        return try c.transaction(begin: ForwardStatements.beginCycle) { c throws(PostgresError) in
            if !outcomes.isEmpty { try c.affected(ForwardStatements.recordOutcomes, outcomes) }
            guard claimLimit > 0 else { return [] }
            return try c.rows(ForwardStatements.claim, .init(limit: claimLimit, leaseSeconds: leaseSeconds))
        }
    }

    /// Counts and logs answers once they are committed.
    private func report(_ recorded: Recorded) {
        let committed = DispatchTime.now().uptimeNanoseconds
        for ((item, attempt), verdict) in zip(recorded.done, recorded.verdicts) {
            let type = item.message.type.rawValue
            let subHash = SubjectHash.of(item.message.sub)
            switch verdict {
            case nil:
                metrics.forward(outcome: "delivered", type: type)
                metrics.observeForwardDelivery(seconds: Double(committed - attempt.startedAt) / 1e9)
                logger.debug(
                    "forward delivered",
                    metadata: ["forward_id": "\(item.message.id)", "type": "\(type)", "sub_hash": "\(subHash)", "status": "\(attempt.status ?? 0)"])
            case .retry(let delay):
                metrics.forward(outcome: "failed", type: type)
                logger.warning(
                    "forward failed, will retry",
                    metadata: [
                        "forward_id": "\(item.message.id)", "type": "\(type)", "sub_hash": "\(subHash)",
                        "attempts": "\(item.attempts + 1)", "error": "\(attempt.error ?? "")", "retry_in": "\(delay)",
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

/// Claimed forwards waiting for a sender thread. `take` blocks until there is one, or returns
/// nil once closed (the threads end).
final class HandOff: @unchecked Sendable {
    // @unchecked: `items` and `closed` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var items: [ClaimedForward] = []
    private var closed = false

    func put(_ new: [ClaimedForward]) {
        guard !new.isEmpty else { return }
        condition.lock()
        items += new
        condition.broadcast()
        condition.unlock()
    }

    func take() -> ClaimedForward? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty && !closed { condition.wait() }
        return items.isEmpty ? nil : items.removeFirst()
    }

    /// No more items: waiting threads return nil once the queue is empty.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
