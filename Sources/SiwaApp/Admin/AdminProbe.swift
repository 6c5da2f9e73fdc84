import Foundation
import SiwaPostgres
import Synchronization

/// What `/readyz` and `/metrics` need from the database, asked on a thread of its own so that
/// the admin listener never waits on PostgreSQL (its two threads stay free for `/healthz`,
/// whatever the database does).
///
/// A request asks for a probe that starts after it arrived (one round: `SELECT 1` and the
/// backlog, on a connection of the probe's own, in a transaction with a 2 s statement and 1 s
/// lock timeout) and is answered from a callback: when that round finishes, or at its deadline
/// (default 1.5 s) with "the database did not answer". Rounds run one at a time; every request
/// waiting when a round starts is answered by it. A hung database (SIGSTOP, a dead host without
/// an RST) holds the probe thread, never a listener thread: requests are answered at their
/// deadline meanwhile, and the probe goes on when the database does. Deadlines are kept by a
/// thread of the probe's own, not by Dispatch: threads blocked elsewhere in the process (on that
/// same hung database) must not delay them.
public final class AdminProbe: Service {
    /// What one round found.
    public struct Reading: Sendable, Equatable {
        /// The database answered the round.
        public var answered: Bool
        /// The outbox backlog (nil when the database did not answer, or the view is unreadable).
        var backlog: OperatorStatements.Backlog?
    }

    private struct Waiter {
        /// Rounds that start after this one was requested answer it.
        var after: UInt64
        /// Monotonic seconds.
        var expires: Double
        var answer: @Sendable (Reading) -> Void
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        /// Rounds started so far.
        var started: UInt64 = 0
    }

    public let name = "admin probe"
    /// Seconds a request waits for its round before it is answered without one.
    public let deadline: Double
    private let pool: PostgresPool
    private let state = Mutex(State())
    private let signal = WakeSignal()
    private let deadlines = WakeSignal()
    private let finished = StopSignal()
    private let deadlinesFinished = StopSignal()

    /// - Parameter conninfo: the database; the probe opens one connection of its own.
    public init(conninfo: String, deadline: Double = 1.5) {
        self.deadline = deadline
        pool = PostgresPool(
            conninfo: conninfo, size: 1, connectTimeout: 2, applicationName: "siwa-notify admin probe",
            transactionBegin: AdminStatements.beginProbe)
    }

    public func start() {
        let thread = Thread { [self] in
            while !signal.wait(timeout: 3600) {
                round()
            }
            finished.stop()
        }
        thread.name = "siwa-admin-probe"
        thread.start()
        let timer = Thread { [self] in
            while true {
                let next = state.withLock { $0.waiters.values.map(\.expires).min() }
                let stopped = deadlines.wait(timeout: next.map { max(0, $0 - Self.now()) } ?? 3600)
                let now = Self.now()
                let expired = state.withLock { s -> [Waiter] in
                    let ids = s.waiters.filter { $0.value.expires <= now }.map(\.key)
                    return ids.compactMap { s.waiters.removeValue(forKey: $0) }
                }
                for waiter in expired { waiter.answer(Reading(answered: false, backlog: nil)) }
                if stopped { break }
            }
            deadlinesFinished.stop()
        }
        timer.name = "siwa-admin-probe-deadlines"
        timer.start()
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    public func stop(deadline: ShutdownDeadline) {
        signal.stop()
        deadlines.stop()
        answerAll(Reading(answered: false, backlog: nil))
        deadlinesFinished.wait(timeout: deadline.remaining)
        // A round stuck on a hung database is not waited for beyond the deadline.
        finished.wait(timeout: deadline.remaining)
        pool.close()
    }

    /// Calls `answer` (from another thread, exactly once) with a round that started after this
    /// call, or with `answered: false` after `deadline` seconds.
    public func probe(_ answer: @escaping @Sendable (Reading) -> Void) {
        let expires = Self.now() + deadline
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
        do {
            result.backlog = try pool.withConnection(timeout: 1) { c -> OperatorStatements.Backlog? in
                _ = try c.row(OperatorStatements.ping)
                // The database answered even when the backlog cannot be read (a statement
                // timeout on a huge outbox, a role without the view): no gauges then.
                return (try? c.row(OperatorStatements.backlog)) ?? nil
            }
            result.answered = true
        } catch {
            result.answered = false
        }
        let due = state.withLock { s -> [Waiter] in
            let ids = s.waiters.filter { $0.value.after < round }.map(\.key)
            return ids.compactMap { s.waiters.removeValue(forKey: $0) }
        }
        for waiter in due { waiter.answer(result) }
    }

    private func answerAll(_ result: Reading) {
        let all = state.withLock { s -> [Waiter] in
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for waiter in all { waiter.answer(result) }
    }
}
