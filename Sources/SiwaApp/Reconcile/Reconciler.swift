import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import Synchronization

/// Reconciliation (contract §10): validates every stored refresh token at Apple
/// (`grant_type=refresh_token`) at most once per `SIWA_RECONCILE_EVERY`, the calls spread evenly
/// over the interval (`ReconcileSchedule`). `invalid_grant` means the user's grant is gone (a
/// `consent-revoked` Apple sent and we missed): a `consent-revoked` of that app is queued in the
/// outbox with `source` `reconcile`, and the worker applies it like Apple's. 429, 5xx and network
/// failures are tried again later with backoff.
///
/// A thread and a database connection of its own; never holds a transaction across the call to
/// Apple; shares nothing with the receiver or the worker, so it never delays notifications.
public final class Reconciler: Service {
    public let name = "reconciler"

    public struct Options: Sendable {
        /// A claimed token is leased this long (another process skips it meanwhile). Default 600 s.
        public var lease: Double = 600
        /// Longest idle wait between two looks at the table (new tokens, a shorter due time). Default 30 s.
        public var idleWait: Double = 30
        /// How often the token count (hence the pace) is read again. Default 60 s.
        public var recount: Double = 60
        /// Due tokens claimed (leased) at once; their validations are recorded together once all
        /// were asked. Default 50.
        public var batch: Int = 50
        /// Least seconds between two calls, whatever the count. Default 0.001.
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
    private let revocation: InAppDeletion
    private let options: Options
    private let logger: Logger
    private let metrics: Metrics
    private let stopping = StopSignal()
    private let finished = StopSignal()
    private let counters = Mutex(Counts())

    public init(
        conninfo: String, interval: Double, revocation: InAppDeletion, options: Options = Options(), logger: Logger,
        metrics: Metrics
    ) {
        self.conninfo = conninfo
        self.interval = interval
        self.revocation = revocation
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

    private func run() {
        var schedule = ReconcileSchedule(
            interval: interval, minimumSpacing: options.minimumSpacing, maximumSpacing: options.maximumSpacing)
        var connection: PostgresConnection?
        var tokens = 0
        var counted = -Double.infinity
        var outages = 0
        var claimed: [ReconcileStatements.Claimed] = []
        var valid: [(sub: String, clientID: String, at: Double)] = []
        logger.info("reconciliation on", metadata: ["every": "\(DurationText.format(Int(interval)))"])
        while !stopping.isStopped {
            do {
                let c = try connection ?? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify reconciler")
                connection = c
                if claimed.isEmpty {
                    // A batch is done: record its valid tokens, then lease the next due ones.
                    if !valid.isEmpty {
                        try c.affected(ReconcileStatements.recordValid, (valid, interval))
                        valid.removeAll()
                    }
                    if Self.now() - counted >= options.recount {
                        tokens = try c.row(ReconcileStatements.schedule, interval) ?? 0
                        counted = Self.now()
                    }
                    claimed = try c.rows(ReconcileStatements.claim, (options.lease, options.batch))
                    if claimed.isEmpty {
                        let due = (try c.row(ReconcileStatements.earliestDue) ?? nil) ?? options.idleWait
                        if pause(min(max(due, 0.05), options.idleWait)) { break }
                        counted = -Double.infinity  // new tokens may have come: count and schedule them
                        continue
                    }
                }
                // The pace: one call every interval/tokens seconds, never closer.
                let slot = schedule.nextSlot(now: Self.now(), tokens: tokens)
                if pause(slot - Self.now()) { break }
                outages = 0
                let token = claimed.removeFirst()
                if try validate(token, on: c, schedule: schedule) {
                    valid.append((token.sub, token.clientID, Self.now()))
                }
            } catch {
                connection = nil
                valid.removeAll()  // validated again once their lease ends
                claimed.removeAll()
                outages += 1
                logger.warning("reconciliation: database unavailable, will retry", metadata: ["error": "\(error)"])
                if pause(min(30, Double(outages) * 2)) { break }
            }
        }
        if let connection, !valid.isEmpty {
            _ = try? connection.affected(ReconcileStatements.recordValid, (valid, interval))
        }
    }

    /// One token: Apple is called with no transaction open; then its answer is recorded, but a
    /// valid one (true: the caller records it with its batch).
    private func validate(_ claimed: ReconcileStatements.Claimed, on c: PostgresConnection, schedule: ReconcileSchedule) throws -> Bool {
        let metadata: Logger.Metadata = ["sub_hash": "\(SubjectHash.of(claimed.sub))", "client_id": "\(claimed.clientID)"]
        let refreshToken: String
        do {
            refreshToken = try revocation.vault.open(claimed.token, sub: claimed.sub, clientID: claimed.clientID)
        } catch {
            count(\.errors, "error")
            logger.error("reconciliation: cannot decrypt a stored token", metadata: metadata.merging(["error": "\(error)"]) { a, _ in a })
            try c.affected(ReconcileStatements.recordFailure, (claimed.sub, claimed.clientID, interval))
            return false
        }
        let result = revocation.client.validate(refreshToken: refreshToken, clientID: claimed.clientID)
        switch result {
        case .success:
            count(\.valid, "valid")
            return true
        case .invalidGrant:
            let queued = try c.row(ReconcileStatements.recordGone, (claimed.sub, claimed.clientID, claimed.version)) ?? 0
            if queued > 0 {
                count(\.gone, "grant_gone")
                logger.notice("reconciliation: grant gone at Apple, consent-revoked queued", metadata: metadata)
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
