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
        public var idleWait: Double = 30
        /// How often the token count (hence the pace) is read again. Default 60 s.
        public var recount: Double = 60
        /// Seconds of slots one claim takes at most: the batch is as many tokens as fit (at least
        /// one). Default 5.
        public var batchSpan: Double = 5
        /// Most tokens one claim takes. Default 100.
        public var maximumBatch: Int = 100
        /// Valid answers are recorded together, but never held longer than this (seconds): a
        /// process killed loses at most this much of its validations. Default 2.
        public var flushEvery: Double = 2
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
    private let stopping = StopSignal()
    private let finished = StopSignal()
    private let counters = Mutex(Counts())

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
    }

    public var counts: Counts { counters.withLock { $0 } }

    public func start() {
        let thread = Thread { [self] in
            run()
            finished.stop()
        }
        thread.name = "siwa-reconciler"
        thread.start()
    }

    public func prepareToStop() { stopping.stop() }

    public func stop(deadline: ShutdownDeadline) {
        stopping.stop()
        finished.wait(timeout: deadline.remaining)
    }

    private static func now() -> Double { Date().timeIntervalSince1970 }

    /// Waits `seconds` unless stopping; true when stopping.
    private func pause(_ seconds: Double) -> Bool {
        seconds > 0 ? stopping.wait(timeout: seconds) : stopping.isStopped
    }

    /// Claims due tokens with their slots in the shared pace, validates each at its slot, and
    /// records the valid ones together, at least every `flushEvery` seconds.
    private func run() {
        let schedule = ReconcileSchedule(
            interval: interval, minimumSpacing: options.minimumSpacing, maximumSpacing: options.maximumSpacing,
            batchSpan: options.batchSpan, maximumBatch: options.maximumBatch, leaseMargin: options.leaseMargin)
        var connection: PostgresConnection?
        var tokens = 0
        var counted = -Double.infinity
        var outages = 0
        // Claimed tokens, each with the local time of its slot, soonest first.
        var claimed: [(token: ReconcileStatements.Claimed, at: Double)] = []
        // Valid answers not recorded yet (local times). Kept across a lost connection.
        var valid: [(sub: String, clientID: String, at: Double)] = []
        logger.info("reconciliation on", metadata: ["every": "\(DurationText.format(Int(interval)))"])
        while !stopping.isStopped {
            do {
                let c = try connection ?? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify reconciler")
                connection = c
                if claimed.isEmpty {
                    // A batch is done: record its valid tokens, then lease the next due ones.
                    try record(&valid, on: c)
                    if Self.now() - counted >= options.recount {
                        tokens = try c.row(ReconcileStatements.schedule, interval) ?? 0
                        counted = Self.now()
                    }
                    let spacing = schedule.spacing(tokens: tokens)
                    let claim = ReconcileStatements.Claim(
                        spacing: spacing, limit: schedule.batchSize(spacing: spacing), leaseMargin: schedule.leaseMargin)
                    let rows = try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
                        try c.rows(ReconcileStatements.claim, claim)
                    }
                    let now = Self.now()
                    claimed = rows.map { ($0, now + $0.slotIn) }.sorted { $0.at < $1.at }
                    if claimed.isEmpty {
                        let due = (try c.row(ReconcileStatements.earliestDue) ?? nil) ?? options.idleWait
                        if pause(min(max(due, 0.05), options.idleWait)) { break }
                        counted = -Double.infinity  // new tokens may have come: count and schedule them
                        continue
                    }
                }
                // Valid answers wait for the next ones, but never past `flushEvery`.
                let slot = claimed[0].at
                if let oldest = valid.first?.at, max(slot, Self.now()) - oldest >= options.flushEvery {
                    try record(&valid, on: c)
                }
                if pause(slot - Self.now()) { break }
                outages = 0
                let token = claimed.removeFirst().token
                if try validate(token, on: c, schedule: schedule) {
                    valid.append((token.sub, token.clientID, Self.now()))
                }
            } catch {
                connection = nil
                claimed.removeAll()  // their leases run out; validated ones wait in `valid`
                outages += 1
                logger.warning("reconciliation: database unavailable, will retry", metadata: ["error": "\(error)"])
                if pause(min(30, Double(outages) * 2)) { break }
            }
        }
        if let connection { try? record(&valid, on: connection) }
    }

    /// Records the valid answers (each due again one interval after it) and forgets them.
    private func record(_ valid: inout [(sub: String, clientID: String, at: Double)], on c: PostgresConnection) throws(PostgresError) {
        guard !valid.isEmpty else { return }
        let now = Self.now()
        let tokens = valid.map { ReconcileStatements.Valid(sub: $0.sub, clientID: $0.clientID, ago: max(0, now - $0.at)) }
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
