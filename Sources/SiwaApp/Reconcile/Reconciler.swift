import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Reconciliation (README "Missed notifications"): validates every stored refresh token at Apple
/// (`grant_type=refresh_token`) at most once per `SIWA_RECONCILE_EVERY`, the calls spread evenly
/// over the interval at one pace shared by every process (`ReconcileSchedule`,
/// `siwa.reconcile_pace`): more `work` processes never mean more calls. `invalid_grant` means the user's grant is gone (a
/// `consent-revoked` Apple sent and we missed): a `consent-revoked` of that app is queued in the
/// outbox with `source` `reconcile`, and the worker applies it like Apple's. 429, 5xx and network
/// failures are tried again later with backoff.
///
/// A thread and a database connection of its own; never holds a transaction across the call to
/// Apple; shares nothing with the receiver or the worker, so it never delays notifications.
public final class Reconciler: Service {
    public let name = "reconciler"

    public struct Options: Sendable {
        /// Seconds a claimed token stays leased after its own slot (another process skips it
        /// meanwhile; one that dies leaves it to come due again then). Default 60: the call's
        /// timeout (10 s), the recording of its answer (`flushEvery`) and slack.
        public var leaseMargin: Double = 60
        /// Longest idle wait between two looks at the table (new tokens, a shorter due time). Default 30 s.
        public var idleWait: Duration = .seconds(30)
        /// How often the token count (hence the pace) is read again. Default 60 s.
        public var recount: Duration = .seconds(60)
        /// Seconds of slots one claim takes at most: the batch is as many tokens as fit (at least
        /// one). Default 5.
        public var batchSpan: Double = 5
        /// Most tokens one claim takes. Default 100.
        public var maximumBatch: Int = 100
        /// Valid answers are recorded together, but never held longer than this: a process
        /// killed loses at most this much of its validations. Default 2 s.
        public var flushEvery: Duration = .seconds(2)
        /// Least seconds between two calls (of all processes), whatever the count. Default 0.001.
        public var minimumSpacing: Double = 0.001
        /// Most seconds between two calls when a token is due (few tokens). Default 60.
        public var maximumSpacing: Double = 60

        public init() {}
    }

    /// Counts since start (also in `/metrics` as `siwa_reconcile_total`).
    public struct Counts: Sendable, Equatable {
        public var valid = 0
        public var gone = 0
        public var errors = 0
    }

    private let conninfo: String
    private let interval: Double
    private let apple: AppleAPICredentials
    private let options: Options
    private let logger: Logger
    private let metrics: Metrics
    private let counters = Mutex(Counts())
    // nonisolated(unsafe): set once, at the end of `init` (its body calls this object's methods).
    private nonisolated(unsafe) var loop: ConnectedLoop<PostgresConnection, Pace>!

    /// The loop's state, on its thread.
    struct Pace {
        var schedule: ReconcileSchedule
        var tokens = 0
        /// When the tokens were last counted; nil: count them on the next claim.
        var counted: Deadline?
        /// Claimed tokens, each with the moment of its slot, soonest first.
        var claimed: [(token: ReconcileStatements.Claimed, at: Deadline)] = []
        /// Valid answers not recorded yet. Kept across a lost connection.
        var valid: [(sub: String, clientID: String, at: Deadline)] = []
    }

    public init(
        conninfo: String, interval: Double, apple: AppleAPICredentials, options: Options = Options(), logger: Logger,
        metrics: Metrics
    ) {
        self.conninfo = conninfo
        self.interval = interval
        self.apple = apple
        self.options = options
        self.logger = logger
        self.metrics = metrics
        loop = ConnectedLoop(
            name: name, threadName: "siwa-reconciler",
            // An outage is waited out longer than a worker's reconnect: nothing here is urgent.
            backoff: ReconnectBackoff(first: .seconds(2), maximum: .seconds(30)),
            body: .init(
                connect: { [conninfo] in try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify reconciler") },
                makeState: { [interval, options, logger] in
                    logger.info("reconciliation on", metadata: ["every": "\(DurationText.format(Int(interval)))"])
                    return Pace(
                        schedule: ReconcileSchedule(
                            interval: interval, minimumSpacing: options.minimumSpacing, maximumSpacing: options.maximumSpacing,
                            batchSpan: options.batchSpan, maximumBatch: options.maximumBatch, leaseMargin: options.leaseMargin))
                },
                round: { [self] c, pace in try round(on: c, &pace) },
                failed: { [logger] error, pace, _ in
                    pace.claimed.removeAll()  // their leases run out; validated ones wait in `valid`
                    logger.warning("reconciliation: database unavailable, will retry", metadata: ["error": "\(error)"])
                },
                finish: { [self] c, pace in
                    if let c { try? record(&pace.valid, on: c) }
                }))
    }

    public var counts: Counts { counters.withLock { $0 } }

    public func start() { loop.start() }

    public func prepareToStop() { loop.prepareToStop() }

    public func stop(deadline: ShutdownDeadline) { loop.stop(until: deadline) }

    /// One step: when a batch is done, records its valid tokens and claims the next due ones with
    /// their slots in the shared pace; otherwise validates the next token at its slot, recording
    /// the valid ones together, at least every `flushEvery`.
    private func round(on c: PostgresConnection, _ pace: inout Pace) throws -> LoopNext {
        let clock = loop.clock
        if pace.claimed.isEmpty {
            try record(&pace.valid, on: c)
            if pace.counted.map({ clock.now >= $0.adding(options.recount) }) ?? true {
                pace.tokens = try c.row(ReconcileStatements.schedule, interval) ?? 0
                pace.counted = clock.now
            }
            let spacing = pace.schedule.spacing(tokens: pace.tokens)
            let claim = ReconcileStatements.Claim(
                spacing: spacing, limit: pace.schedule.batchSize(spacing: spacing), leaseMargin: pace.schedule.leaseMargin)
            let rows = try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
                try c.rows(ReconcileStatements.claim, claim)
            }
            let now = clock.now
            pace.claimed = rows.map { ($0, now.adding(seconds: $0.slotIn)) }.sorted { $0.at < $1.at }
            if pace.claimed.isEmpty {
                let due = (try c.row(ReconcileStatements.earliestDue) ?? nil) ?? options.idleWait.inSeconds
                pace.counted = nil  // new tokens may have come: count and schedule them
                return .wait(until: now.adding(min(.seconds(max(due, 0.05)), options.idleWait)))
            }
        }
        // Valid answers wait for the next ones, but never past `flushEvery`.
        let slot = pace.claimed[0].at
        if let oldest = pace.valid.first?.at, max(slot, clock.now) >= oldest.adding(options.flushEvery) {
            try record(&pace.valid, on: c)
        }
        if clock.now < slot { return .wait(until: slot) }
        let token = pace.claimed.removeFirst().token
        if try validate(token, on: c, schedule: pace.schedule) {
            pace.valid.append((token.sub, token.clientID, clock.now))
        }
        return .again
    }

    /// Records the valid answers (each due again one interval after it) and forgets them.
    private func record(_ valid: inout [(sub: String, clientID: String, at: Deadline)], on c: PostgresConnection) throws(PostgresError) {
        guard !valid.isEmpty else { return }
        let now = loop.clock.now
        let tokens = valid.map { ReconcileStatements.Valid(sub: $0.sub, clientID: $0.clientID, ago: now.remaining(at: $0.at)) }
        _ = try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            try c.affected(ReconcileStatements.recordValid, (tokens, interval))
        }
        valid.removeAll()
    }

    /// One token: Apple is called with no transaction open; then its answer is recorded, but a
    /// valid one (true: the caller records it with the next ones, within `flushEvery`).
    private func validate(_ claimed: ReconcileStatements.Claimed, on c: PostgresConnection, schedule: ReconcileSchedule) throws -> Bool {
        let metadata: Logger.Metadata = ["sub_hash": "\(SubjectHash.of(claimed.sub))", "client_id": "\(claimed.clientID)"]
        let refreshToken: String
        do {
            refreshToken = try apple.vault.open(claimed.token, sub: claimed.sub, clientID: claimed.clientID)
        } catch {
            count(\.errors, "error")
            logger.error("reconciliation: cannot decrypt a stored token", metadata: metadata.merging(["error": "\(error)"]) { a, _ in a })
            try c.affected(ReconcileStatements.recordFailure, (claimed.sub, claimed.clientID, interval))
            return false
        }
        let result = apple.client.validate(refreshToken: refreshToken, clientID: claimed.clientID)
        switch result {
        case .success:
            count(\.valid, "valid")
            return true
        case .invalidGrant:
            let queued = try c.row(ReconcileStatements.recordGone, (claimed.sub, claimed.clientID, claimed.version)) ?? 0
            if queued > 0 {
                count(\.gone, "grant_gone")
                logger.notice("reconciliation: grant gone at Apple, consent-revoked queued", metadata: metadata)
            } else {
                // The token was replaced (a new sign-in) while Apple was asked: nothing to queue.
                metrics.reconcile(outcome: "superseded")
                logger.info("reconciliation: grant gone at Apple for a token replaced meanwhile, nothing queued", metadata: metadata)
            }
        case .invalidClient, .rejected, .transient:
            count(\.errors, "error")
            var retryAfter: Int?
            if case .transient(let failure) = result { retryAfter = failure.retryAfter }
            let delay = schedule.retryAt(
                now: 0, failures: claimed.failures + 1, retryAfter: retryAfter, jitter: Double.random(in: 0..<1))
            try c.affected(ReconcileStatements.recordFailure, (claimed.sub, claimed.clientID, delay))
        }
        return false
    }

    private func count(_ field: WritableKeyPath<Counts, Int>, _ outcome: String) {
        counters.withLock { $0[keyPath: field] += 1 }
        metrics.reconcile(outcome: outcome)
    }
}
