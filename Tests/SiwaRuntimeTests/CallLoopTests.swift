import Logging
import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

@Suite("Call loop", .bounded())
struct CallLoopTests {
    /// Rows to claim, and what was recorded of them, shared by the loop's steps and the test.
    final class Table: Sendable {
        let due = Mutex<[Int]>([])
        let recorded = Mutex<[String]>([])
        let claims = Atomic<Int>(0)

        func claim(_ limit: Int) -> [Int] {
            claims.add(1, ordering: .relaxed)
            return due.withLock { d in
                defer { d.removeFirst(min(limit, d.count)) }
                return Array(d.prefix(limit))
            }
        }
    }

    static func settings(callsInFlight: Int, clock: any MonotonicClock = SystemClock.shared) -> CallLoop<Int, String>.Settings {
        var s = CallLoop<Int, String>.Settings(
            name: "test calls", thread: "test-call-loop", calls: "test-call", callsInFlight: callsInFlight, poll: .seconds(1),
            stopGrace: .seconds(10))
        s.clock = clock
        return s
    }

    @Test("A caller is connect, claim, call and record: every claimed row is called once and recorded once")
    func callsAndRecords() {
        let table = Table()
        table.due.withLock { $0 = Array(1...10) }
        let loop = CallLoop<Int, String>(
            Self.settings(callsInFlight: 3), logger: Logger(label: "test"),
            connect: { FakeConnection() },
            claim: { _, limit, _ in table.claim(limit) },
            call: { "answer \($0)" },
            record: { _, rounds in table.recorded.withLock { $0 += rounds.takeAnswers().map(\.1) } })
        loop.start()
        #expect(CallRoundsTests.until { table.recorded.withLock { $0.count } == 10 }, "\(table.recorded.withLock { $0 })")
        loop.stop(deadline: Deadline(after: .seconds(30)))
        #expect(table.recorded.withLock { $0 }.sorted() == (1...10).map { "answer \($0)" }.sorted())
    }

    /// A loop on `clock` whose one call (row 1) answers only once `release` is stopped, started
    /// and idle, waiting for that answer.
    static func loopWithACallOut(clock: ManualClock, table: Table, release: WakeSignal) -> CallLoop<Int, String> {
        table.due.withLock { $0 = [1] }
        let loop = CallLoop<Int, String>(
            Self.settings(callsInFlight: 1, clock: clock), logger: Logger(label: "test"),
            connect: { FakeConnection() },
            claim: { _, limit, _ in table.claim(limit) },
            call: { item in
                release.wait(until: .never)
                return "answer \(item)"
            },
            record: { _, rounds in table.recorded.withLock { $0 += rounds.takeAnswers().map(\.1) } })
        loop.start()
        // The call runs (it waits for `release`, off the manual clock) and the loop waits for its answer.
        #expect(clock.settle(after: 0), "the loop never waited")
        return loop
    }

    /// Stops `loop` on a thread of its own, with a real deadline; `ended` is stopped when the
    /// loop ended within it (a loop that does not end fails the test, not the machine).
    static func stopper(_ loop: CallLoop<Int, String>, ended: WakeSignal) -> LoopThread {
        LoopThread(name: "test-stopper") {
            if loop.stop(until: Deadline(after: .seconds(30))) { ended.stop() }
        }
    }

    @Test("Stopped with a call out: claims nothing more, records the answer that comes within the grace, then ends")
    func stopRecordsWithinTheGrace() {
        let clock = ManualClock()
        let table = Table()
        let release = WakeSignal()
        let loop = Self.loopWithACallOut(clock: clock, table: table, release: release)
        let claims = table.claims.load(ordering: .relaxed)
        table.due.withLock { $0 = [2, 3] }
        let ended = WakeSignal()
        let stopper = Self.stopper(loop, ended: ended)
        #expect(CallRoundsTests.until { loop.wakeups.isStopped }, "the stop was not seen")
        release.stop()
        #expect(stopper.join(until: Deadline(after: .seconds(40))), "the stopper did not return")
        #expect(ended.isStopped, "the loop did not end within its stop deadline once its call answered")
        #expect(table.recorded.withLock { $0 } == ["answer 1"])
        #expect(table.claims.load(ordering: .relaxed) == claims, "a stopping loop claimed again")
    }

    @Test("Stopped with a call that does not answer: the loop ends at the end of its grace, the answer unrecorded")
    func stopEndsAtTheGrace() {
        let clock = ManualClock()
        let table = Table()
        let release = WakeSignal()
        defer { release.stop() }
        let loop = Self.loopWithACallOut(clock: clock, table: table, release: release)
        let waits = clock.blockedWaits
        let ended = WakeSignal()
        let stopper = Self.stopper(loop, ended: ended)
        #expect(CallRoundsTests.until { loop.wakeups.isStopped }, "the stop was not seen")
        #expect(clock.settle(after: waits), "the stopping loop never waited for its call")
        // The grace (10 s on the loop's clock) runs out with the call still out.
        clock.advance(by: .seconds(10))
        #expect(stopper.join(until: Deadline(after: .seconds(40))), "the stopper did not return")
        #expect(ended.isStopped, "the loop did not end at the end of its grace")
        #expect(table.recorded.withLock { $0 }.isEmpty)
    }

    @Test("Run on the calling thread: retries queued by `record` are called again; it returns once nothing is left")
    func runToTheEnd() {
        let table = Table()
        table.due.withLock { $0 = Array(1...6) }
        let tries = Mutex<[Int: Int]>([:])
        var recorded: [String] = []
        CallLoop<Int, String>.run(
            Self.settings(callsInFlight: 2),
            claim: { limit, _ in table.claim(limit) },
            call: { item in
                let n = tries.withLock { t in
                    t[item, default: 0] += 1
                    return t[item]!
                }
                return item % 2 == 0 && n == 1 ? "retry" : "answer \(item)"
            },
            record: { rounds in
                for (item, answer) in rounds.takeAnswers() {
                    if answer == "retry" {
                        rounds.queue([(item, Deadline.now)])
                    } else {
                        recorded.append(answer)
                    }
                }
            })
        #expect(recorded.sorted() == (1...6).map { "answer \($0)" }.sorted())
        #expect(tries.withLock { $0 } == [1: 1, 2: 2, 3: 1, 4: 2, 5: 1, 6: 2])
    }
}

@Suite("Deadline waiters", .bounded())
struct DeadlineWaitersTests {
    @Test("Each waiter is answered once: by a matching answer, or at its deadline; later ones at once once stopped")
    func answeredOnce() {
        let clock = ManualClock()
        let waiters = DeadlineWaiters<Int, String>(name: "test-waits", timedOut: "timed out", clock: clock)
        let answers = Mutex<[Int: [String]]>([:])
        for tag in 1...3 {
            waiters.add(tag, until: clock.now.adding(.seconds(Int64(tag)))) { a in answers.withLock { $0[tag, default: []].append(a) } }
        }
        waiters.add(4, until: .never) { a in answers.withLock { $0[4, default: []].append(a) } }
        waiters.answer("fetched") { $0 == 2 }
        #expect(clock.settle(after: 0), "the deadline thread never waited")
        #expect(answers.withLock { $0 } == [2: ["fetched"]])
        var seen = clock.blockedWaits
        clock.advance(by: .seconds(1))
        #expect(clock.settle(after: seen), "the deadline thread did not wait again")
        #expect(answers.withLock { $0 } == [1: ["timed out"], 2: ["fetched"]])
        // Half a second before waiter 3's deadline: not answered yet.
        seen = clock.blockedWaits
        clock.advance(by: .milliseconds(1500))
        #expect(clock.settle(after: seen), "the deadline thread did not wait again")
        #expect(answers.withLock { $0[3] } == nil, "answered before its deadline")
        clock.advance(by: .milliseconds(500))
        #expect(CallRoundsTests.until { answers.withLock { $0[3] } == ["timed out"] }, "waiter 3 not answered at its deadline")
        #expect(waiters.count == 1)  // the one without a deadline
        waiters.stop()
        waiters.add(5, until: .never) { a in answers.withLock { $0[5, default: []].append(a) } }
        waiters.answer("late") { _ in true }
        #expect(answers.withLock { $0 } == [1: ["timed out"], 2: ["fetched"], 3: ["timed out"], 4: ["timed out"], 5: ["timed out"]])
    }
}

@Suite("Shutdown budget", .bounded())
struct ShutdownBudgetTests {
    /// Records the deadline it was stopped with; `stopBudget` as told.
    final class Stopped: Service {
        let name: String
        let stopBudget: StopBudget
        let deadline = Mutex<Deadline?>(nil)
        init(_ name: String, _ budget: StopBudget) {
            self.name = name
            stopBudget = budget
        }
        func start() {}
        func stop(deadline: Deadline) { self.deadline.withLock { $0 = deadline } }
    }

    @Test("A service that asks for half gets half of what is left; the others get the end of the budget")
    func halfOfWhatIsLeft() throws {
        let clock = ManualClock()
        let group = ServiceGroup(logger: Logger(label: "test"))
        let whole = Stopped("listener", .whatIsLeft)
        let half = Stopped("worker", .halfOfWhatIsLeft)
        try group.start(whole)
        try group.start(half)
        let start = clock.now
        group.stop(budget: .seconds(20), clock: clock)
        #expect(half.deadline.withLock { $0 } == start.adding(.seconds(10)))
        #expect(whole.deadline.withLock { $0 } == start.adding(.seconds(20)))
    }
}
