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

    public struct Options: Sendable {
        /// How long a claimed token stays leased after its own slot (another process skips it
        /// meanwhile; one that dies leaves it to come due again then). Default 60 s: the call's
        /// timeout (10 s), the recording of its answer (`flushEvery`) and slack.
        public var leaseMargin: Duration = .seconds(60)
        /// Longest idle wait between two looks at the table (new tokens, a shorter due time). Default 30 s.
        public var idleWait: Duration = .seconds(30)
        /// How often the token count (hence the pace) is read again. Default 60 s.
        public var recount: Duration = .seconds(60)
        /// The slots one claim takes at most: the batch is as many tokens as fit (at least
        /// one). Default 5 s.
        public var batchSpan: Duration = .seconds(5)
        /// Most tokens one claim takes. Default 100.
        public var maximumBatch: Int = 100
        /// Valid answers are recorded together, but never held longer than this: a process
        /// killed loses at most this much of its validations. Default 2 s.
        public var flushEvery: Duration = .seconds(2)
        /// The least time between two calls (of all processes), whatever the count. Default 1 ms.
        public var minimumSpacing: Duration = .milliseconds(1)
        /// The most time between two calls when a token is due (few tokens). Default 60 s.
        public var maximumSpacing: Duration = .seconds(60)
        /// Validations at Apple at once, at most. Each starts at its slot: more than one only
        /// when Apple answers slower than the pace (a slow answer then delays no later slot).
        /// Default 4.
        public var callsInFlight: Int = 4
        /// How long a stop waits for a validation in flight (Apple's timeout, and a second). Default 11 s.
        public var stopGrace: Duration = .seconds(11)

        public init() {}
    }

    /// Counts since start (also in `/metrics` as `siwa_reconcile_total`).
    public struct Counts: Sendable, Equatable {
        public var valid = 0
        public var gone = 0
        public var errors = 0
    }

    private let loop: CallLoop<ReconcileStatements.Claimed, Validation>
    private let steps: Steps
    public var name: String { loop.name }

    /// What Apple said about one token (counted when it came).
    enum Validation: Sendable {
        /// Valid at `at`: recorded with the next ones, within `flushEvery`.
        case valid(at: Deadline)
        /// `invalid_grant`: the grant is gone.
        case gone
        /// Tried again after `delay`.
        case failed(delay: Duration)

        var validAt: Deadline? {
            if case .valid(let at) = self { return at }
            return nil
        }
    }

    public init(
        conninfo: String, interval: Duration, apple: AppleAPICredentials, options: Options = Options(), logger: Logger,
        metrics: Metrics
    ) {
        let steps = Steps(interval: interval, apple: apple, options: options, logger: logger, metrics: metrics)
        var settings = CallLoop<ReconcileStatements.Claimed, Validation>.Settings(
            name: "reconciler", thread: "siwa-reconciler", calls: "siwa-reconcile", callsInFlight: options.callsInFlight,
            poll: options.idleWait, stopGrace: options.stopGrace)
        settings.batchSize = options.maximumBatch
        settings.refill = .whenEmpty
        // An outage is waited out longer than a worker's reconnect: nothing here is urgent.
        settings.backoff = ReconnectBackoff(first: .seconds(2), maximum: .seconds(30))
        self.steps = steps
        loop = CallLoop(
            settings, logger: logger,
            connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify reconciler") },
            claim: { c, limit, rounds in try steps.claim(limit, on: c, &rounds) },
            whenIdle: { c in try steps.lookAgain(on: c) },
            call: steps.validate, record: steps.record)
    }

    public var counts: Counts { steps.counters.withLock { $0 } }

    public func start() {
        steps.logger.info("reconciliation on", metadata: ["every": "\(DurationText.format(Int(steps.interval.components.seconds)))"])
        loop.start()
    }

    public func prepareToStop() { loop.prepareToStop() }

    /// A validation in flight gets its timeout to answer; what answered is recorded.
    public func stop(deadline: Deadline) { loop.stop(deadline: deadline) }
}

extension Reconciler {
    /// The claims in the shared pace, the calls to Apple and the recording of their answers (the
    /// loop's steps).
    final class Steps: Sendable {
        let interval: Duration
        let apple: AppleAPICredentials
        let options: Options
        let logger: Logger
        let metrics: Metrics
        let schedule: ReconcileSchedule
        let counters = Mutex(Counts())
        let clock: any MonotonicClock = SystemClock.shared
        /// The token count (hence the pace), and when it was read (nil: read it on the next claim).
        private let counted = Mutex<(tokens: Int, at: Deadline?)>((0, nil))

        init(interval: Duration, apple: AppleAPICredentials, options: Options, logger: Logger, metrics: Metrics) {
            self.interval = interval
            self.apple = apple
            self.options = options
            self.logger = logger
            self.metrics = metrics
            schedule = ReconcileSchedule(
                interval: interval, minimumSpacing: options.minimumSpacing, maximumSpacing: options.maximumSpacing,
                batchSpan: options.batchSpan, maximumBatch: options.maximumBatch, leaseMargin: options.leaseMargin)
        }

        /// Once the batch is done: claims the next due tokens with their slots in the shared pace,
        /// each queued for its slot.
        func claim(
            _ limit: Int, on c: PostgresConnection, _ rounds: inout CallRounds<ReconcileStatements.Claimed, Validation>
        ) throws -> [ReconcileStatements.Claimed] {
            var (tokens, at) = counted.withLock { $0 }
            if at.map({ clock.now >= $0.adding(options.recount) }) ?? true {
                tokens = try c.row(ReconcileStatements.schedule, interval.inSeconds) ?? 0
                at = clock.now
                counted.withLock { $0 = (tokens, at) }
            }
            let spacing = schedule.spacing(tokens: tokens)
            let claim = ReconcileStatements.Claim(
                spacing: spacing.inSeconds, limit: min(limit, schedule.batchSize(spacing: spacing)),
                leaseMargin: schedule.leaseMargin.inSeconds)
            let rows = try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
                try c.rows(ReconcileStatements.claim, claim)
            }
            let now = clock.now
            rounds.queue(rows.map { ($0, now.adding(.seconds($0.slotIn))) })
            return []
        }

        /// Nothing was due: look again when the earliest token falls due (at most `idleWait`).
        func lookAgain(on c: PostgresConnection) throws -> Deadline {
            let due = (try c.row(ReconcileStatements.earliestDue) ?? nil) ?? options.idleWait.inSeconds
            counted.withLock { $0.at = nil }  // new tokens may have come: count and schedule them
            return clock.now.adding(min(.seconds(max(due, 0.05)), options.idleWait))
        }

        /// Records the answers: a gone grant or a failure at once; valid tokens (each due again one
        /// interval after it) together, once the batch is done, when stopping, or before the oldest
        /// would wait past `flushEvery` for the next slot. What is not recorded is kept.
        func record(on c: PostgresConnection, _ rounds: inout CallRounds<ReconcileStatements.Claimed, Validation>) throws {
            var pending = rounds.takeAnswers()
            defer { if !pending.isEmpty { rounds.keep(pending) } }
            while let index = pending.firstIndex(where: { $0.1.validAt == nil }) {
                let (token, answer) = pending[index]
                switch answer {
                case .gone: try recordGone(token, on: c)
                case .failed(let delay): try c.affected(ReconcileStatements.recordFailure, (token.sub, token.clientID, delay.inSeconds))
                case .valid: break
                }
                pending.remove(at: index)
            }
            let now = clock.now
            guard let oldest = pending.compactMap({ $0.1.validAt }).min(),
                rounds.held == 0 || rounds.isStopping || max(rounds.nextQueued ?? now, now) >= oldest.adding(options.flushEvery)
            else { return }
            let tokens = pending.map { token, answer in
                ReconcileStatements.Valid(sub: token.sub, clientID: token.clientID, ago: now.timeLeft(at: answer.validAt ?? now).inSeconds)
            }
            _ = try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
                try c.affected(ReconcileStatements.recordValid, (tokens, interval.inSeconds))
            }
            pending.removeAll()
        }

        /// A grant gone at Apple: a `consent-revoked` queued, unless the token was replaced meanwhile.
        private func recordGone(_ claimed: ReconcileStatements.Claimed, on c: PostgresConnection) throws(PostgresError) {
            let metadata: Logger.Metadata = ["sub_hash": "\(SubjectHash.of(claimed.sub))", "client_id": "\(claimed.clientID)"]
            let queued = try c.row(ReconcileStatements.recordGone, (claimed.sub, claimed.clientID, claimed.version)) ?? 0
            if queued > 0 {
                count(\.gone, "grant_gone")
                logger.notice("reconciliation: grant gone at Apple, consent-revoked queued", metadata: metadata)
            } else {
                // The token was replaced (a new sign-in) while Apple was asked: nothing to queue.
                metrics.reconcile(outcome: "superseded")
                logger.info("reconciliation: grant gone at Apple for a token replaced meanwhile, nothing queued", metadata: metadata)
            }
        }

        /// One token validated at Apple (on the call thread, no database).
        func validate(_ claimed: ReconcileStatements.Claimed) -> Validation {
            let refreshToken: String
            do {
                refreshToken = try apple.vault.open(claimed.token, sub: claimed.sub, clientID: claimed.clientID)
            } catch {
                count(\.errors, "error")
                logger.error(
                    "reconciliation: cannot decrypt a stored token",
                    metadata: ["sub_hash": "\(SubjectHash.of(claimed.sub))", "client_id": "\(claimed.clientID)", "error": "\(error)"])
                return .failed(delay: interval)
            }
            let result = apple.client.validate(refreshToken: refreshToken, clientID: claimed.clientID)
            switch result {
            case .success(let answer):
                // Apple's id_token names whose grant the token is: one stored under another user
                // (an auth library's row pointing at someone else) proves nothing of this one.
                if let idToken = answer.idToken, (try? CompactJWS.parse(idToken))?.claims["sub"]?.stringValue != claimed.sub {
                    count(\.errors, "error")
                    logger.warning(
                        "reconciliation: Apple's answer is about another user than the token's owner: not counted as valid",
                        metadata: ["sub_hash": "\(SubjectHash.of(claimed.sub))", "client_id": "\(claimed.clientID)"])
                    return .failed(delay: interval)
                }
                count(\.valid, "valid")
                return .valid(at: clock.now)
            case .invalidGrant:
                return .gone
            case .invalidClient, .rejected, .transient:
                count(\.errors, "error")
                var retryAfter: Duration?
                if case .transient(let failure) = result { retryAfter = failure.retryAfter }
                return .failed(
                    delay: schedule.retryDelay(failures: claimed.failures + 1, retryAfter: retryAfter, jitter: Double.random(in: 0..<1)))
            }
        }

        private func count(_ field: WritableKeyPath<Counts, Int>, _ outcome: String) {
            counters.withLock { $0[keyPath: field] += 1 }
            metrics.reconcile(outcome: outcome)
        }
    }
}
