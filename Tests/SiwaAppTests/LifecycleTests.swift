import Foundation
import Logging
import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

@testable import SiwaApp

/// `ServiceGroup`, `PeriodicTask`, `WakeSignal` and `WakeSignal` in-process: order, the shared
/// shutdown budget, a failed start, and that stopping never waits for an interval.
@Suite("Lifecycle in-process", .bounded())
struct LifecycleTests {
    static let logger = Logger(label: "lifecycle") { _ in SwiftLogNoOpLogHandler() }

    /// What the services of one test did, in order.
    final class Journal: Sendable {
        private let entries = Mutex<[String]>([])
        private let deadlines = Mutex<[UInt64]>([])

        func record(_ entry: String) { entries.withLock { $0.append(entry) } }
        func record(deadline: Deadline) { deadlines.withLock { $0.append(deadline.uptimeNanoseconds) } }
        var all: [String] { entries.withLock { $0 } }
        var stopDeadlines: [UInt64] { deadlines.withLock { $0 } }
    }

    struct StartFailed: Error {}

    static func service(
        _ name: String, _ journal: Journal, failStart: Bool = false,
        stopTakes seconds: Double = 0
    ) -> ClosureService {
        ClosureService(
            name,
            start: {
                journal.record("start \(name)")
                if failStart { throw StartFailed() }
            },
            prepareToStop: {
                journal.record("prepare \(name)")
            },
            stop: { deadline in
                journal.record("stop \(name)")
                journal.record(deadline: deadline)
                if seconds > 0 { Thread.sleep(forTimeInterval: seconds) }
            })
    }

    @Test("services start in order; all are told first, then stopped last started first")
    func order() throws {
        let journal = Journal()
        let group = ServiceGroup(logger: Self.logger)
        for name in ["database", "writer", "listener"] { try group.start(Self.service(name, journal)) }
        #expect(group.started == ["database", "writer", "listener"])
        group.stop(budget: .seconds(10))
        #expect(
            journal.all == [
                "start database", "start writer", "start listener",
                "prepare database", "prepare writer", "prepare listener",
                "stop listener", "stop writer", "stop database",
            ])
        #expect(group.started.isEmpty)
        group.stop(budget: .seconds(10))  // a second stop has nothing left to stop
        #expect(journal.all.count == 9)
    }

    @Test("every service is stopped against one shared deadline; time one spends is gone for the next")
    func sharedDeadline() throws {
        let journal = Journal()
        let group = ServiceGroup(logger: Self.logger)
        let remaining = Mutex<[Double]>([])
        try group.start(
            ClosureService(
                "first", start: {},
                stop: { deadline in
                    journal.record(deadline: deadline)
                    remaining.withLock { $0.append(deadline.timeLeft.inSeconds) }
                }))
        try group.start(Self.service("slow", journal, stopTakes: 0.2))
        try group.start(Self.service("last", journal))
        group.stop(budget: .seconds(30))
        let deadlines = journal.stopDeadlines
        #expect(deadlines.count == 3)
        #expect(Set(deadlines).count == 1, "each service got its own deadline")
        // "first" is stopped after "slow" slept 0.2 s of the 30 s budget.
        let left = try #require(remaining.withLock { $0.first })
        #expect(left <= 30 - 0.2)
        #expect(left > 0)
    }

    @Test("a service whose start throws is not kept; those started before it stay stoppable")
    func failedStart() throws {
        let journal = Journal()
        let group = ServiceGroup(logger: Self.logger)
        try group.start(Self.service("database", journal))
        try group.start(Self.service("writer", journal))
        #expect(throws: StartFailed.self) { try group.start(Self.service("listener", journal, failStart: true)) }
        #expect(group.started == ["database", "writer"])
        group.stop(budget: .seconds(10))
        #expect(
            journal.all == [
                "start database", "start writer", "start listener",
                "prepare database", "prepare writer",
                "stop writer", "stop database",
            ])
    }

    @Test("stopping wakes a PeriodicTask waiting out a long interval at once; its body never ran")
    func periodicTaskStopsAtOnce() {
        let runs = Atomic<Int>(0)
        let task = PeriodicTask(name: "hourly", interval: .seconds(3600)) { _ in runs.add(1, ordering: .relaxed) }
        task.start()
        let started = Date()
        // A deadline far shorter than the interval: stop must not wait for the interval to pass.
        task.stop(deadline: Deadline(after: .seconds(60)))
        #expect(Date().timeIntervalSince(started) < 60, "stop waited for the deadline")
        let ran = runs.load(ordering: .relaxed)
        #expect(ran == 0)
    }

    @Test("a PeriodicTask runs its body every interval and hands it the stop signal")
    func periodicTaskRuns() throws {
        let runs = Atomic<Int>(0)
        let sawStop = Atomic<Bool>(false)
        let enough = WakeSignal()
        let task = PeriodicTask(name: "fast", interval: .milliseconds(10)) { stopping in
            if runs.add(1, ordering: .relaxed).newValue == 3 { enough.stop() }
            // A long run ends early once stopping: this waits for the stop, not 30 s.
            if runs.load(ordering: .relaxed) == 3 {
                sawStop.store(stopping.wait(for: .seconds(30)), ordering: .relaxed)
            }
        }
        task.start()
        #expect(enough.wait(for: .seconds(60)), "the body did not run three times")
        let started = Date()
        task.stop(deadline: Deadline(after: .seconds(60)))
        #expect(Date().timeIntervalSince(started) < 25)
        let woken = sawStop.load(ordering: .relaxed)
        let ran = runs.load(ordering: .relaxed)
        #expect(woken, "the body's wait was not ended by the stop")
        #expect(ran == 3)
    }

    @Test("WakeSignal: wait returns true at once once stopped, false at its timeout otherwise")
    func stopSignal() {
        let signal = WakeSignal()
        #expect(!signal.isStopped)
        #expect(!signal.wait(for: .milliseconds(10)))
        let waiter = Thread { signal.stop() }
        waiter.start()
        #expect(signal.wait(for: .seconds(30)))
        #expect(signal.isStopped)
        #expect(signal.wait(for: .seconds(30)))  // stays stopped
        signal.stop()
        #expect(signal.isStopped)
    }

    @Test("WakeSignal: a wake ends a wait, is remembered when nobody waits, and is consumed; stop ends every wait")
    func wakeSignal() {
        let signal = WakeSignal()
        // A wake with nobody waiting is remembered: the next wait returns at once.
        signal.wake()
        let started = Date()
        signal.wait(for: .seconds(30))
        #expect(Date().timeIntervalSince(started) < 25)
        // ... and consumed: the next wait runs to its (short) timeout, never less (a lower bound
        // only: a loaded machine makes it longer, never shorter).
        let consumed = Date()
        #expect(!signal.wait(for: .milliseconds(200)))
        #expect(Date().timeIntervalSince(consumed) >= 0.19, "the wake was not consumed")
        // A wake from another thread ends a long wait.
        let waker = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            signal.wake()
        }
        waker.start()
        let woken = Date()
        signal.wait(for: .seconds(30))
        #expect(Date().timeIntervalSince(woken) < 25)
        // Stop ends every wait from then on.
        #expect(!signal.isStopped)
        signal.stop()
        #expect(signal.isStopped)
        let stopped = Date()
        signal.wait(for: .seconds(30))
        signal.wait(for: .seconds(30))
        #expect(Date().timeIntervalSince(stopped) < 25)
    }
}
