import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// What `/readyz` and `/metrics` need from the database, asked on a thread of its own so that
/// the admin listener never waits on PostgreSQL (its two threads stay free for `/healthz`,
/// whatever the database does).
///
/// A round is `SELECT 1` and the gauges (backlog, revocations, forwards) on a connection of the
/// probe's own, in a transaction with a 2 s statement and 1 s lock timeout. Rounds run one at a
/// time on the probe's thread: every `refreshInterval` by themselves, keeping the last
/// answered round as the snapshot `/metrics` serves at once (`snapshot()`, with its age), and on
/// request for `/readyz` (`probe`): a request asks for a round that starts after it arrived and
/// is answered from a callback, when that round finishes or at its deadline (default 1.5 s) with
/// "the database did not answer"; every request waiting when a round starts is answered by it.
/// A hung database (SIGSTOP, a dead host without an RST) holds the probe thread, never a
/// listener thread: requests are answered at their deadline meanwhile, the snapshot ages (its
/// age is a gauge), and the probe goes on when the database does (`ConnectedLoop`: a broken
/// connection is replaced). Deadlines are kept by `DeadlineWaiters`: threads blocked elsewhere
/// in the process (on that same hung database) never delay them.
public final class AdminProbe: Service {
    /// What one round found.
    public struct Reading: Sendable, Equatable {
        /// The database answered the round.
        public var answered: Bool
        /// The outbox backlog (nil when the database did not answer, or the view is unreadable).
        var backlog: OperatorStatements.Backlog?
        /// Further gauges read in the same round (forwarding, revocations); empty when unreadable.
        var gauges: [Gauge] = []
        /// Groups of gauges that failed in this round (each wrote an error into the server's log).
        var failedGroups: [String] = []
    }

    /// A gauge of `/metrics` read from the database.
    struct Gauge: Sendable, Equatable {
        var name: String
        var help: String
        var value: Double
    }

    private struct State {
        /// Rounds started so far.
        var started: UInt64 = 0
        /// The last round the database answered, and when it ended.
        var snapshot: (reading: Reading, at: Deadline)?
    }

    /// The rounds' count and snapshot, shared by the probe's thread and the requests.
    private final class Shared: Sendable {
        let state = Mutex(State())
        /// The requests waiting, each tagged with the rounds started before it: a later one answers it.
        let waiters = DeadlineWaiters<UInt64, Reading>(name: "siwa-probe-waits", timedOut: Reading(answered: false, backlog: nil))

        /// The relations a skipped gauge group needed, each logged once.
        let skipped = Mutex(Set<String>())

        /// Logs, once per relation, the gauges skipped because the login may not read it.
        func skip(_ relations: [String], _ logger: Logger) {
            let new = skipped.withLock { seen in relations.filter { seen.insert($0).inserted } }
            guard !new.isEmpty else { return }
            logger.notice(
                "admin probe: gauges skipped, the login may not read them",
                metadata: [
                    "relations": "\(new.joined(separator: ","))",
                    "fix": "docs/operations.md, \"PostgreSQL\": the roles a process's login needs",
                ])
        }

        /// Counts a round (or an attempt to connect for one) as started; returns its number.
        func started() -> UInt64 {
            state.withLock { s in
                s.started += 1
                return s.started
            }
        }
    }

    public var name: String { loop.name }
    /// How long a request waits for its round before it is answered without one.
    public let deadline: Duration
    /// Between two rounds run by themselves (the snapshot of `/metrics`).
    public let refreshInterval: Duration
    private let shared: Shared
    private let loop: ConnectedLoop<PostgresConnection, Void>
    private var clock: any MonotonicClock { loop.clock }

    /// - Parameter conninfo: the database; the probe opens one connection of its own.
    /// - Parameters:
    ///   - forwarding: forwarding is on: each round also reads the forwards' backlog.
    ///   - providers: a hosted provider is a target: each round also reads the provider calls' backlog.
    public init(
        conninfo: String, deadline: Duration = .milliseconds(1500), refreshInterval: Duration = .seconds(5), forwarding: Bool = false,
        providers: Bool = false, logger: Logger = Logger(label: "siwa.admin-probe") { _ in SwiftLogNoOpLogHandler() }
    ) {
        self.deadline = deadline
        self.refreshInterval = refreshInterval
        let shared = Shared()
        self.shared = shared
        // A round at once (the first snapshot), then one per refresh interval or request.
        loop = ConnectedLoop(
            name: "admin probe", threadName: "siwa-admin-probe",
            body: .init(
                connect: { try PostgresConnection(conninfo: conninfo, connectTimeout: 2, applicationName: "siwa-notify admin probe") },
                makeState: {},
                round: { c, _ in
                    Self.round(on: c, forwarding: forwarding, providers: providers, shared) { shared.skip($0, logger) }
                    return .wait(until: Deadline.now.adding(refreshInterval))
                },
                failed: { _, _, _ in
                    // No connection: the requests waiting for this attempt are answered without one.
                    let round = shared.started()
                    shared.waiters.answer(Reading(answered: false, backlog: nil)) { $0 < round }
                }))
    }

    public func start() { loop.start() }

    /// Answers every request waiting; a round stuck on a hung database is not waited for beyond
    /// the deadline.
    public func stop(deadline: Deadline) {
        loop.prepareToStop()
        shared.waiters.stop()
        loop.stop(until: deadline)
    }

    /// The last round the database answered and its age in seconds; nil before the first one.
    /// Never waits.
    public func snapshot() -> (reading: Reading, ageSeconds: Double)? {
        guard let last = shared.state.withLock({ $0.snapshot }) else { return nil }
        return (last.reading, clock.now.timeLeft(at: last.at).inSeconds)  // from its end until now
    }

    /// Calls `answer` (from another thread, exactly once) with a round that started after this
    /// call, or with `answered: false` after `deadline`.
    public func probe(_ answer: @escaping @Sendable (Reading) -> Void) {
        shared.waiters.add(shared.state.withLock { $0.started }, until: clock.now.adding(deadline), answer: answer)
        loop.wakeups.wake()
    }

    /// The relations each group of gauges reads: a group whose relations the login may not read
    /// is skipped (a receiver's login with `siwa_receiver` alone reads few of them).
    static let backlogRelations = ["siwa.backlog"]
    static let countRelations = ["siwa.counts", "siwa.count_changes"]
    static let forwardRelations = ["siwa.forward_backlog"]
    static let providerRelations = ["siwa.provider_call_backlog"]
    static let tokenRelations = ["siwa.apple_tokens"]

    /// One round; answers every request waiting since before it started. Each group of gauges
    /// reads only relations the login may read (so no "permission denied" lands in PostgreSQL's
    /// log every round), under a savepoint of its own: one that fails (a statement or lock
    /// timeout) does not abort the others.
    private static func round(
        on c: PostgresConnection, forwarding: Bool, providers: Bool, _ shared: Shared, skipped: @Sendable ([String]) -> Void
    ) {
        let round = shared.started()
        var result = Reading(answered: false, backlog: nil)
        do {
            (result.backlog, result.gauges, result.failedGroups) = try c.transaction(begin: AdminStatements.beginProbe) {
                c throws(PostgresError) in
                _ = try c.row(OperatorStatements.ping)
                var wanted = backlogRelations + countRelations
                if forwarding { wanted += forwardRelations }
                if providers { wanted += providerRelations }
                let readable = Set(try c.rows(AdminStatements.readable, wanted))
                skipped(wanted.filter { !readable.contains($0) })
                let may = { (relations: [String]) in relations.allSatisfy(readable.contains) }
                var failed: [String] = []
                var backlog: OperatorStatements.Backlog?
                if may(backlogRelations) {
                    backlog = Self.group(c, "backlog", &failed) { c throws(PostgresError) in try c.row(OperatorStatements.backlog) } ?? nil
                }
                var gauges: [Gauge] = []
                if may(countRelations) {
                    gauges += Self.group(c, "revocations", &failed) { c throws(PostgresError) in try Self.revocationGauges(on: c) } ?? []
                }
                if forwarding, may(forwardRelations) {
                    gauges += Self.group(c, "forwards", &failed) { c throws(PostgresError) in try Self.forwardGauges(on: c) } ?? []
                }
                if providers, may(providerRelations) {
                    gauges += Self.group(c, "providers", &failed) { c throws(PostgresError) in try Self.providerGauges(on: c) } ?? []
                }
                // Only a login that may read the stored tokens (the worker's) counts those set aside.
                if !(try c.rows(AdminStatements.readable, tokenRelations)).isEmpty {
                    gauges += Self.group(c, "tokens", &failed) { c throws(PostgresError) in try Self.tokenGauges(on: c) } ?? []
                }
                gauges += Self.durabilityGauges(on: c, &failed)
                return (backlog, gauges, failed)
            }
            result.answered = true
        } catch {
            result.answered = false
        }
        if result.answered { shared.state.withLock { $0.snapshot = (result, Deadline.now) } }
        shared.waiters.answer(result) { $0 < round }
    }

    /// `read` under a savepoint: nil when it failed (its name added to `failed`), and the
    /// round's transaction goes on.
    private static func group<T>(
        _ c: PostgresConnection, _ name: String, _ failed: inout [String], _ read: (PostgresConnection) throws(PostgresError) -> T
    ) -> T? {
        do {
            return try c.withSavepoint("probe_\(name)") { c throws(PostgresError) in try read(c) }
        } catch {
            failed.append(name)
            return nil
        }
    }

    /// Revocations at Apple by status.
    private static func revocationGauges(on c: PostgresConnection) throws(PostgresError) -> [Gauge] {
        let counts = try c.rows(RevocationStatements.counts)
        let by = Dictionary(counts.map { ($0.status, $0.count) }, uniquingKeysWith: +)
        var gauges = [
            Gauge(
                name: "siwa_revocations_waiting", help: "Revocations at Apple pending, running or failed (will retry).",
                value: Double(["pending", "running", "failed"].reduce(0) { $0 + (by[$1] ?? 0) })),
            Gauge(name: "siwa_revocations_dead", help: "Dead revocations at Apple (replay --revocations).", value: Double(by["dead"] ?? 0)),
            Gauge(
                name: "siwa_revocations_no_token", help: "In-app deletions of users of whom no refresh token was stored.",
                value: Double(by["no_token"] ?? 0)),
        ]
        if let unconfirmed = try c.row(RevocationStatements.unconfirmedCount) {
            gauges.append(
                Gauge(
                    name: "siwa_revocations_unconfirmed",
                    help: "Revocations whose refresh token still worked at Apple after Apple's 200 (revoked again with backoff).",
                    value: Double(unconfirmed)))
        }
        return gauges
    }

    /// Stored refresh tokens set aside at start (they do not open with their key).
    private static func tokenGauges(on c: PostgresConnection) throws(PostgresError) -> [Gauge] {
        guard let quarantined = try c.row(TokenKeyStatements.quarantinedCount) else { return [] }
        return [
            Gauge(
                name: "siwa_stored_tokens_quarantined",
                help: "Stored refresh tokens set aside at start because they do not open with their key (doctor lists them).",
                value: Double(quarantined))
        ]
    }

    /// The forwards' backlog.
    private static func forwardGauges(on c: PostgresConnection) throws(PostgresError) -> [Gauge] {
        var gauges: [Gauge] = []
        if let f = try c.row(ForwardStatements.backlog) {
            gauges += [
                Gauge(
                    name: "siwa_forward_backlog", help: "Forwards waiting to be delivered (pending or failed, in flight included).",
                    value: Double(f.pending + f.failed)),
                Gauge(name: "siwa_forward_failed", help: "Forwards whose last attempt failed (will retry).", value: Double(f.failed)),
                Gauge(
                    name: "siwa_forward_dead", help: "Dead forwards (retried for SIWA_FORWARD_RETRY_FOR; replay --forwards).",
                    value: Double(f.dead)),
                Gauge(name: "siwa_forward_oldest_waiting_age_seconds", help: "Age of the oldest forward waiting.", value: f.oldestWaitingAgeSeconds),
            ]
        }
        return gauges
    }

    /// The hosted provider calls' backlog.
    private static func providerGauges(on c: PostgresConnection) throws(PostgresError) -> [Gauge] {
        let calls = try c.rows(ProviderCallStatements.backlog)
        return [
            Gauge(
                name: "siwa_provider_calls_waiting", help: "Hosted provider calls waiting (pending, in flight included), all providers.",
                value: Double(calls.reduce(0) { $0 + $1.pending })),
            Gauge(
                name: "siwa_provider_calls_dead", help: "Dead hosted provider calls (replay --provider-calls).",
                value: Double(calls.reduce(0) { $0 + $1.dead })),
            Gauge(
                name: "siwa_provider_calls_oldest_waiting_age_seconds", help: "Age of the oldest hosted provider call waiting.",
                value: calls.map(\.oldestWaitingAgeSeconds).max() ?? 0),
        ]
    }

    /// What the database promises about a commit (`siwa_database_synchronous_standbys`): every
    /// login may read it; unknown (-1) when the read failed.
    private static func durabilityGauges(on c: PostgresConnection, _ failed: inout [String]) -> [Gauge] {
        let durability =
            group(c, "durability", &failed) { c throws(PostgresError) in try DatabaseDurability.read(on: c) }
            ?? DatabaseDurability(
                synchronousCommit: "unknown", synchronousStandbyNames: "", synchronousStandbys: nil, asynchronousStandbys: nil, role: "")
        return durability.gauges.map { Gauge(name: $0.name, help: $0.help, value: $0.value) }
    }
}
