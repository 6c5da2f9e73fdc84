import Foundation
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
        providers: Bool = false
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
                    Self.round(on: c, forwarding: forwarding, providers: providers, shared)
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

    /// One round; answers every request waiting since before it started.
    private static func round(on c: PostgresConnection, forwarding: Bool, providers: Bool, _ shared: Shared) {
        let round = shared.started()
        var result = Reading(answered: false, backlog: nil)
        do {
            (result.backlog, result.gauges) = try c.transaction(begin: AdminStatements.beginProbe) { c throws(PostgresError) in
                _ = try c.row(OperatorStatements.ping)
                // The database answered even when the backlog cannot be read (a statement
                // timeout on a huge outbox, a role without the view): no gauges then.
                let backlog = (try? c.row(OperatorStatements.backlog)) ?? nil
                return (backlog, Self.moreGauges(on: c, forwarding: forwarding, providers: providers) + Self.durabilityGauges(on: c))
            }
            result.answered = true
        } catch {
            result.answered = false
        }
        if result.answered { shared.state.withLock { $0.snapshot = (result, Deadline.now) } }
        shared.waiters.answer(result) { $0 < round }
    }

    /// Revocations at Apple by status and, with forwarding on, the forwards' backlog; with a
    /// hosted provider, the provider calls'.
    private static func moreGauges(on c: PostgresConnection, forwarding: Bool, providers: Bool) -> [Gauge] {
        var gauges: [Gauge] = []
        if let counts = try? c.rows(RevocationStatements.counts) {
            let by = Dictionary(counts.map { ($0.status, $0.count) }, uniquingKeysWith: +)
            gauges += [
                Gauge(
                    name: "siwa_revocations_waiting", help: "Revocations at Apple pending, running or failed (will retry).",
                    value: Double(["pending", "running", "failed"].reduce(0) { $0 + (by[$1] ?? 0) })),
                Gauge(name: "siwa_revocations_dead", help: "Dead revocations at Apple (replay --revocations).", value: Double(by["dead"] ?? 0)),
                Gauge(
                    name: "siwa_revocations_no_token", help: "In-app deletions of users of whom no refresh token was stored.",
                    value: Double(by["no_token"] ?? 0)),
            ]
        }
        if let unconfirmed = (try? c.row(RevocationStatements.unconfirmedCount)) ?? nil {
            gauges.append(
                Gauge(
                    name: "siwa_revocations_unconfirmed",
                    help: "Revocations whose refresh token still worked at Apple after Apple's 200 (revoked again with backoff).",
                    value: Double(unconfirmed)))
        }
        if let quarantined = (try? c.row(TokenKeyStatements.quarantinedCount)) ?? nil {
            gauges.append(
                Gauge(
                    name: "siwa_stored_tokens_quarantined",
                    help: "Stored refresh tokens set aside at start because they do not open with their key (doctor lists them).",
                    value: Double(quarantined)))
        }
        if forwarding, let f = (try? c.row(ForwardStatements.backlog)) ?? nil {
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
        if providers, let calls = try? c.rows(ProviderCallStatements.backlog) {
            gauges += [
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
        return gauges
    }

    /// What the database promises about a commit (`siwa_database_synchronous_standbys`).
    private static func durabilityGauges(on c: PostgresConnection) -> [Gauge] {
        guard let durability = try? DatabaseDurability.read(on: c) else { return [] }
        return durability.gauges.map { Gauge(name: $0.name, help: $0.help, value: $0.value) }
    }
}
