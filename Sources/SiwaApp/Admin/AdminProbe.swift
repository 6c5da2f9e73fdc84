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
/// age is a gauge), and the probe goes on when the database does. Deadlines are kept by a thread
/// of the probe's own, not by Dispatch: threads blocked elsewhere in the process (on that same
/// hung database) must not delay them.
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

    private struct Waiter {
        /// Rounds that start after this one was requested answer it.
        var after: UInt64
        var expires: Deadline
        var answer: @Sendable (Reading) -> Void
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        /// Rounds started so far.
        var started: UInt64 = 0
        /// The last round the database answered, and when it ended.
        var snapshot: (reading: Reading, at: Deadline)?
    }

    public let name = "admin probe"
    /// How long a request waits for its round before it is answered without one.
    public let deadline: Duration
    /// Between two rounds run by themselves (the snapshot of `/metrics`).
    public let refreshInterval: Duration
    private let pool: PostgresPool
    private let state = Mutex(State())
    private let signal = WakeSignal()
    private let deadlines = WakeSignal()
    /// The round thread and the deadline thread, once started.
    private let threads = Mutex<(rounds: LoopThread, deadlines: LoopThread)?>(nil)

    /// - Parameter conninfo: the database; the probe opens one connection of its own.
    /// Forwarding is on: each round also reads the forwards' backlog.
    private let forwarding: Bool

    public init(conninfo: String, deadline: Duration = .milliseconds(1500), refreshInterval: Duration = .seconds(5), forwarding: Bool = false) {
        self.deadline = deadline
        self.refreshInterval = refreshInterval
        self.forwarding = forwarding
        pool = PostgresPool(
            conninfo: conninfo, size: 1, connectTimeout: 2, applicationName: "siwa-notify admin probe",
            transactionBegin: AdminStatements.beginProbe)
    }

    public func start() {
        let rounds = LoopThread(name: "siwa-admin-probe") { [self] in
            // A round at once (the first snapshot), then one per refresh interval or request.
            repeat {
                round()
            } while !signal.wait(for: refreshInterval)
        }
        let timer = LoopThread(name: "siwa-admin-probe-deadlines") { [self] in
            while true {
                let next = state.withLock { $0.waiters.values.map(\.expires).min() }
                let stopped = deadlines.wait(until: next ?? .never)
                let now = Deadline.now
                let expired = state.withLock { s -> [Waiter] in
                    let ids = s.waiters.filter { $0.value.expires <= now }.map(\.key)
                    return ids.compactMap { s.waiters.removeValue(forKey: $0) }
                }
                for waiter in expired { waiter.answer(Reading(answered: false, backlog: nil)) }
                if stopped { break }
            }
        }
        threads.withLock { $0 = (rounds, timer) }
    }

    public func stop(deadline: ShutdownDeadline) {
        signal.stop()
        deadlines.stop()
        answerAll(Reading(answered: false, backlog: nil))
        let started = threads.withLock { $0 }
        started?.deadlines.join(until: deadline)
        // A round stuck on a hung database is not waited for beyond the deadline.
        started?.rounds.join(until: deadline)
        pool.close()
    }

    /// The last round the database answered and its age in seconds; nil before the first one.
    /// Never waits.
    public func snapshot() -> (reading: Reading, ageSeconds: Double)? {
        guard let last = state.withLock({ $0.snapshot }) else { return nil }
        return (last.reading, Deadline.now.remaining(at: last.at))  // from its end until now
    }

    /// Calls `answer` (from another thread, exactly once) with a round that started after this
    /// call, or with `answered: false` after `deadline`.
    public func probe(_ answer: @escaping @Sendable (Reading) -> Void) {
        let expires = Deadline(after: deadline)
        state.withLock { s in
            s.nextWaiter += 1
            s.waiters[s.nextWaiter] = Waiter(after: s.started, expires: expires, answer: answer)
        }
        if signal.isStopped {
            answerAll(Reading(answered: false, backlog: nil))
            return
        }
        signal.wake()
        deadlines.wake()
    }

    /// One round; answers every request waiting since before it started.
    private func round() {
        let round = state.withLock { s -> UInt64 in
            s.started += 1
            return s.started
        }
        var result = Reading(answered: false, backlog: nil)
        let forwarding = self.forwarding
        do {
            (result.backlog, result.gauges) = try pool.withConnection(timeout: .seconds(1)) { c in
                _ = try c.row(OperatorStatements.ping)
                // The database answered even when the backlog cannot be read (a statement
                // timeout on a huge outbox, a role without the view): no gauges then.
                let backlog = (try? c.row(OperatorStatements.backlog)) ?? nil
                return (backlog, Self.moreGauges(on: c, forwarding: forwarding) + Self.durabilityGauges(on: c))
            }
            result.answered = true
        } catch {
            result.answered = false
        }
        let due = state.withLock { s -> [Waiter] in
            if result.answered { s.snapshot = (result, Deadline.now) }
            let ids = s.waiters.filter { $0.value.after < round }.map(\.key)
            return ids.compactMap { s.waiters.removeValue(forKey: $0) }
        }
        for waiter in due { waiter.answer(result) }
    }

    /// Revocations at Apple by status and, with forwarding on, the forwards' backlog.
    private static func moreGauges(on c: PostgresConnection, forwarding: Bool) -> [Gauge] {
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
        return gauges
    }

    /// What the database promises about a commit (`siwa_database_synchronous_standbys`).
    private static func durabilityGauges(on c: PostgresConnection) -> [Gauge] {
        guard let durability = try? DatabaseDurability.read(on: c) else { return [] }
        return durability.gauges.map { Gauge(name: $0.name, help: $0.help, value: $0.value) }
    }

    private func answerAll(_ result: Reading) {
        let all = state.withLock { s -> [Waiter] in
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for waiter in all { waiter.answer(result) }
    }
}
