import Glibc
import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

@Suite("Clock, waits and backoff", .bounded())
struct ClockAndSignalTests {
    @Test("Deadline arithmetic with durations saturates")
    func durations() {
        let t = Deadline(uptimeNanoseconds: 5_000_000_000)
        #expect(t.adding(.milliseconds(1500)).uptimeNanoseconds == 6_500_000_000)
        #expect(t.adding(.seconds(-3)) == t)
        #expect(t.adding(.seconds(Int64.max)) == .never)
        #expect(t.adding(.seconds(2)).timeLeft(at: t) == .seconds(2))
        #expect(t.timeLeft(at: t.adding(.seconds(1))) == .zero)
        #expect(Duration.milliseconds(250).inSeconds == 0.25)
    }

    @Test("The wall clock reads Unix time: whole seconds and milliseconds round down; the system's is today's")
    func wallClock() {
        let fixed = WallClock.fixed(unixSeconds: 1_700_000_000)
        #expect(fixed.unixSeconds == 1_700_000_000 && fixed.unixMilliseconds == 1_700_000_000_000)
        let later = WallClock { .seconds(1_700_000_000) + .nanoseconds(999_999_999) }
        #expect(later.unixSeconds == 1_700_000_000 && later.unixMilliseconds == 1_700_000_000_999)
        let before = Int64(time(nil))
        let read = WallClock.system.unixSeconds
        #expect(read >= before && read <= Int64(time(nil)), "\(read) is not the time (\(before))")
    }

    @Test("The system clock moves forward and waits end at their deadline")
    func systemClock() {
        let a = SystemClock.shared.now
        let signal = WakeSignal()
        let stopped = signal.wait(for: .milliseconds(20))
        let b = SystemClock.shared.now
        #expect(!stopped)
        #expect(b >= a.adding(.milliseconds(20)))
    }

    @Test("A wait on a manual clock ends when the time is advanced to its deadline, not before")
    func manualClock() throws {
        let clock = ManualClock()
        let signal = WakeSignal(clock: clock)
        let ended = Atomic<Bool>(false)
        let thread = LoopThread(name: "test-wait") {
            signal.wait(for: .seconds(10))
            ended.store(true, ordering: .relaxed)
        }
        #expect(CallRoundsTests.until { clock.waiters == 1 }, "the wait never blocked")
        // At 9 s the waiter looks at the time again and blocks again: only then is "not ended" a sign.
        let seen = clock.blockedWaits
        clock.advance(by: .seconds(9))
        #expect(
            CallRoundsTests.until { clock.blockedWaits > seen || ended.load(ordering: .relaxed) },
            "the wait neither ended nor blocked again after 9 s")
        let early = ended.load(ordering: .relaxed)
        #expect(!early, "a wait of 10 s ended at 9 s")
        clock.advance(by: .seconds(1))
        #expect(thread.join(until: Deadline.now.adding(.seconds(5))))
        let late = ended.load(ordering: .relaxed)
        #expect(late)
    }

    @Test("A wake before the wait is kept for it; stop ends every wait and stays")
    func wakeAndStop() {
        let clock = ManualClock()
        let signal = WakeSignal(clock: clock)
        signal.wake()
        // The wait on a thread of its own: were the wake lost, it would block for good (the manual
        // clock never moves) and the test must fail, not hang; the stop below releases it then.
        let woken = Atomic<Int>(-1)
        let waiter = LoopThread(name: "test-wake") { woken.store(signal.wait(for: .seconds(60)) ? 1 : 0, ordering: .relaxed) }
        #expect(waiter.join(until: Deadline.now.adding(.seconds(10))), "the wake before the wait was lost")
        signal.stop()
        #expect(waiter.join(until: .never))
        #expect(woken.load(ordering: .relaxed) == 0)  // ended by the wake, not by the stop
        #expect(signal.wait(for: .seconds(60)) == true)
        #expect(signal.isStopped)
    }

    @Test("settle gives up after its limit when the loop under test never blocks again: its test fails, not hangs")
    func settleGivesUp() {
        let clock = ManualClock()
        let settled = Atomic<Int>(-1)
        let settler = LoopThread(name: "test-settle") {
            settled.store(clock.settle(after: clock.blockedWaits, limit: .milliseconds(50)) ? 1 : 0, ordering: .relaxed)
        }
        #expect(settler.join(until: Deadline.now.adding(.seconds(10))), "settle did not give up")
        #expect(settled.load(ordering: .relaxed) == 0)
    }

    @Test("Reconnect backoff doubles from 0.2 s to 5 s and starts again after a success")
    func backoff() {
        var b = ReconnectBackoff()
        let waits = (0..<7).map { _ in b.failed() }
        #expect(
            waits == [.milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1600), .milliseconds(3200), .seconds(5), .seconds(5)])
        b.succeeded()
        #expect(b.failed() == .milliseconds(200))
    }
}

/// Lets another thread run (tests only: waiting for a thread to block on a manual clock).
enum LoopThreadYield {
    static func now() { sched_yield() }
}
