import Glibc
import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

/// A connection that can be broken from the test.
final class FakeConnection: LoopConnection, Sendable {
    let broken = Atomic<Bool>(false)
    var isHealthy: Bool { !broken.load(ordering: .relaxed) }
}

struct LoopError: Error {}

@Suite("Connected loop", .bounded())
struct ConnectedLoopTests {
    /// What the loop did, in order.
    final class Trace: Sendable {
        let lines = Mutex<[String]>([])
        func add(_ s: String) { lines.withLock { $0.append(s) } }
        var all: [String] { lines.withLock { $0 } }
    }

    /// A loop without state on `clock`, named "test"; connects at once and ignores failures
    /// unless told otherwise.
    static func loop(
        on clock: ManualClock, connect: @escaping @Sendable () throws -> FakeConnection = { FakeConnection() },
        round: @escaping @Sendable (FakeConnection, inout Void) throws -> LoopNext,
        failed: @escaping @Sendable (any Error, inout Void, Duration) -> Void = { _, _, _ in }
    ) -> ConnectedLoop<FakeConnection, Void> {
        ConnectedLoop<FakeConnection, Void>(
            name: "test", threadName: "test-loop", wakeups: WakeSignal(clock: clock),
            body: .init(connect: connect, makeState: {}, round: round, failed: failed))
    }

    @Test("Connect failures back off on the loop's clock; a round after a reconnect resets the backoff")
    func reconnects() {
        let clock = ManualClock()
        let trace = Trace()
        let failures = Atomic<Int>(2)
        let waits = Mutex<[Duration]>([])
        let loop = ConnectedLoop<FakeConnection, Int>(
            name: "test", threadName: "test-loop", wakeups: WakeSignal(clock: clock),
            body: .init(
                connect: {
                    if failures.load(ordering: .relaxed) > 0 {
                        failures.subtract(1, ordering: .relaxed)
                        trace.add("connect failed")
                        throw LoopError()
                    }
                    trace.add("connected")
                    return FakeConnection()
                },
                makeState: { 0 },
                round: { _, rounds in
                    rounds += 1
                    trace.add("round \(rounds)")
                    return .wait(until: clock.now.adding(.seconds(1)))
                },
                failed: { _, _, wait in waits.withLock { $0.append(wait) } },
                finish: { c, rounds in trace.add("finish \(rounds) \(c != nil)") }))
        loop.start()
        #expect(clock.settle(after: 0))
        var seen = clock.blockedWaits
        clock.advance(by: .milliseconds(200))  // first backoff
        #expect(clock.settle(after: seen))
        seen = clock.blockedWaits
        clock.advance(by: .milliseconds(399))  // not yet: the wait blocks again
        #expect(clock.settle(after: seen))
        #expect(trace.all == ["connect failed", "connect failed"])
        seen = clock.blockedWaits
        clock.advance(by: .milliseconds(1))  // second backoff, then connected and round 1
        #expect(clock.settle(after: seen))
        #expect(trace.all == ["connect failed", "connect failed", "connected", "round 1"])
        seen = clock.blockedWaits
        clock.advance(by: .seconds(1))  // the round's wait
        #expect(clock.settle(after: seen))
        seen = clock.blockedWaits
        loop.wakeups.wake()  // a wake runs a round at once
        #expect(clock.settle(after: seen))
        #expect(loop.stop(until: Deadline.now.adding(.seconds(5))))
        #expect(trace.all == ["connect failed", "connect failed", "connected", "round 1", "round 2", "round 3", "finish 3 true"])
        #expect(waits.withLock { $0 } == [.milliseconds(200), .milliseconds(400)])
    }

    @Test("A good round resets the backoff: the next failure waits the first step again, not the doubled one")
    func goodRoundResetsBackoff() {
        let clock = ManualClock()
        let failures = Atomic<Int>(2)
        let rounds = Atomic<Int>(0)
        let waits = Mutex<[Duration]>([])
        let loop = Self.loop(
            on: clock,
            connect: {
                if failures.load(ordering: .relaxed) > 0 {
                    failures.subtract(1, ordering: .relaxed)
                    throw LoopError()
                }
                return FakeConnection()
            },
            round: { _, _ in
                // Round 1 works, round 2 throws: its backoff starts from the first step.
                switch rounds.add(1, ordering: .relaxed).newValue {
                case 1: return .again
                case 2: throw LoopError()
                default: return .wait(until: .never)
                }
            },
            failed: { _, _, wait in waits.withLock { $0.append(wait) } })
        loop.start()
        #expect(clock.settle(after: 0))
        advanceAndSettle(clock, by: .milliseconds(200))  // second connect failure
        advanceAndSettle(clock, by: .milliseconds(400))  // connected, round 1, round 2 throws
        #expect(rounds.load(ordering: .relaxed) == 2)
        #expect(waits.withLock { $0 } == [.milliseconds(200), .milliseconds(400), .milliseconds(200)])
        #expect(loop.stop(until: Deadline.now.adding(.seconds(5))))
    }

    @Test("A stop ends a backoff wait at once: a loop that cannot connect still stops within the budget")
    func stopsDuringBackoff() {
        let clock = ManualClock()
        let connects = Atomic<Int>(0)
        let loop = Self.loop(
            on: clock,
            connect: {
                connects.add(1, ordering: .relaxed)
                throw LoopError()
            },
            round: { _, _ in .wait(until: .never) })
        loop.start()
        #expect(clock.settle(after: 0))  // in the first backoff wait; the manual clock never reaches its end
        #expect(loop.stop(until: Deadline.now.adding(.seconds(10))), "the stop waited for the backoff")
        #expect(connects.load(ordering: .relaxed) == 1)
    }

    @Test("A broken connection is replaced before the next round; a throwing round drops it")
    func brokenConnection() {
        let clock = ManualClock()
        let connects = Atomic<Int>(0)
        let current = Mutex<FakeConnection?>(nil)
        let rounds = Atomic<Int>(0)
        let loop = Self.loop(
            on: clock,
            connect: {
                connects.add(1, ordering: .relaxed)
                let c = FakeConnection()
                current.withLock { $0 = c }
                return c
            },
            round: { _, _ in
                let n = rounds.add(1, ordering: .relaxed).newValue
                if n == 2 { throw LoopError() }
                return .wait(until: .never)
            })
        loop.start()
        #expect(clock.settle(after: 0))
        var seen = clock.blockedWaits
        current.withLock { $0?.broken.store(true, ordering: .relaxed) }
        loop.wakeups.wake()  // round 2 throws after a reconnect; backoff 0.2 s
        #expect(clock.settle(after: seen))
        #expect(connects.load(ordering: .relaxed) == 2)
        seen = clock.blockedWaits
        clock.advance(by: .milliseconds(200))
        #expect(clock.settle(after: seen))
        #expect(rounds.load(ordering: .relaxed) == 3)
        #expect(connects.load(ordering: .relaxed) == 3)
        #expect(loop.stop(until: Deadline.now.adding(.seconds(5))))
    }

    @Test("A pause ends at its deadline, not on a wake; the wake is kept for the next wait")
    func pause() {
        let clock = ManualClock()
        let rounds = Atomic<Int>(0)
        let loop = Self.loop(
            on: clock,
            round: { _, _ in
                let n = rounds.add(1, ordering: .relaxed).newValue
                return n == 1 ? .pause(until: clock.now.adding(.seconds(1))) : .wait(until: .never)
            })
        loop.start()
        #expect(clock.settle(after: 0))
        loop.wakeups.wake()  // the pause goes on
        advanceAndSettle(clock, by: .milliseconds(999))
        #expect(rounds.load(ordering: .relaxed) == 1)
        advanceAndSettle(clock, by: .milliseconds(1))  // round 2, whose wait ends at once on the kept wake: round 3
        #expect(rounds.load(ordering: .relaxed) == 3)
        #expect(loop.stop(until: Deadline.now.adding(.seconds(5))))
    }
}

@Suite("Periodic task", .bounded())
struct PeriodicTaskTests {
    @Test("Runs its body every interval on the clock, never before; stop ends the wait at once")
    func runsEveryInterval() {
        let clock = ManualClock()
        let runs = Atomic<Int>(0)
        let task = PeriodicTask(name: "test task", interval: .seconds(10), clock: clock) { _ in
            runs.add(1, ordering: .relaxed)
        }
        task.start()
        #expect(clock.settle(after: 0))
        advanceAndSettle(clock, by: .milliseconds(9999))
        #expect(runs.load(ordering: .relaxed) == 0)
        advanceAndSettle(clock, by: .milliseconds(1))
        #expect(runs.load(ordering: .relaxed) == 1)
        task.stop(deadline: Deadline.now.adding(.seconds(5)))
        #expect(runs.load(ordering: .relaxed) == 1)
    }
}

/// Moves `clock` on and waits until the thread under test blocks on it again.
func advanceAndSettle(_ clock: ManualClock, by duration: Duration) {
    let seen = clock.blockedWaits
    clock.advance(by: duration)
    #expect(clock.settle(after: seen))
}
