import Glibc
import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

@Suite("Lease -> call -> record engine", .bounded())
struct CallRoundsTests {
    let t0 = Deadline(uptimeNanoseconds: 1_000_000_000)

    @Test("Claims the free call slots, at most a batch")
    func claimsFreeSlots() {
        var rounds = CallRounds<Int, String>(callsInFlight: 4, batchSize: 3, poll: .seconds(1))
        #expect(rounds.claimLimit == 3)
        rounds.claimed(3)
        #expect(rounds.claimLimit == 1)
        rounds.claimed(1)
        #expect(rounds.claimLimit == 0)
        rounds.answered([(1, "ok"), (2, "ok")])
        #expect(rounds.inFlight == 2)
        #expect(rounds.claimLimit == 2)
        rounds.notStarted(2)
        #expect(rounds.inFlight == 0)
        #expect(rounds.claimLimit == 3)
    }

    @Test("A full batch with free slots runs again at once; otherwise it waits for a wake or the poll")
    func nextRound() {
        var rounds = CallRounds<Int, String>(callsInFlight: 10, batchSize: 3, poll: .seconds(1))
        rounds.claimed(3)
        #expect(rounds.next(claimed: 3, limit: 3, at: t0) == .again)
        #expect(rounds.next(claimed: 2, limit: 3, at: t0) == .wait(until: t0.adding(.seconds(1))))
        rounds.claimed(7)
        // Every slot busy: wait for an answer (it wakes the loop) or the poll.
        #expect(rounds.next(claimed: 3, limit: 3, at: t0) == .wait(until: t0.adding(.seconds(1))))
    }

    @Test("Answers are recorded once; those not recorded are kept, first, for the next round")
    func keepsUnrecorded() {
        var rounds = CallRounds<Int, String>(callsInFlight: 4, poll: .seconds(1))
        rounds.claimed(3)
        rounds.answered([(1, "a"), (2, "b")])
        let first = rounds.takeAnswers()
        #expect(first.map(\.0) == [1, 2])
        #expect(!rounds.hasAnswers)
        rounds.answered([(3, "c")])
        rounds.keep([first[1]])  // item 2's row was locked
        #expect(rounds.takeAnswers().map(\.0) == [2, 3])
        #expect(rounds.takeAnswers().isEmpty)
    }

    @Test("Stopping claims nothing and finishes once every call is answered and recorded")
    func finishesWhenAnswered() {
        var rounds = CallRounds<Int, String>(callsInFlight: 4, poll: .seconds(1))
        rounds.claimed(2)
        #expect(!rounds.mayFinish(at: t0))
        rounds.stop(at: t0, grace: .seconds(11))
        #expect(rounds.isStopping)
        #expect(rounds.claimLimit == 0)
        #expect(rounds.next(claimed: 0, limit: 0, at: t0) == .wait(until: t0.adding(.seconds(11))))
        rounds.answered([(1, "a"), (2, "b")])
        #expect(!rounds.mayFinish(at: t0))  // answered, not recorded yet
        _ = rounds.takeAnswers()
        #expect(rounds.mayFinish(at: t0))
        #expect(rounds.next(claimed: 0, limit: 0, at: t0) == .wait(until: t0))
    }

    @Test("Started calls leave their answers in the inbox; a refused one is not counted in flight")
    func startsCalls() {
        let executor = CallExecutor<Void>(limit: 3, name: "test-start")
        let inbox = CallInbox<Int, String>()
        let wakeups = WakeSignal()
        var rounds = CallRounds<Int, String>(callsInFlight: 3, poll: .seconds(1))
        rounds.start([1, 2, 3], on: executor, answersTo: inbox, waking: wakeups) { item, _ in "answer \(item)" }
        #expect(rounds.inFlight == 3)
        #expect(executor.drain(until: .never))
        rounds.collect(inbox)
        #expect(rounds.inFlight == 0)
        #expect(rounds.takeAnswers().map(\.1).sorted() == ["answer 1", "answer 2", "answer 3"])
        // Woken (not stopped): the wait ends at once, long before its bound.
        let waited = Deadline.now
        #expect(!wakeups.wait(until: waited.adding(.seconds(30))))
        #expect(Deadline.now < waited.adding(.seconds(20)), "the answers never woke the loop")
        rounds.start([4], on: executor, answersTo: inbox, waking: wakeups) { item, _ in "answer \(item)" }  // drained: refused
        #expect(rounds.inFlight == 0)
    }

    @Test("Stopping finishes at the end of the grace even with calls still out")
    func finishesAtGrace() {
        var rounds = CallRounds<Int, String>(callsInFlight: 4, poll: .seconds(1))
        rounds.claimed(1)
        rounds.stop(at: t0, grace: .seconds(2))
        rounds.stop(at: t0.adding(.seconds(1)), grace: .seconds(2))  // a second stop keeps the first grace
        #expect(!rounds.mayFinish(at: t0.adding(.milliseconds(1999))))
        #expect(rounds.mayFinish(at: t0.adding(.seconds(2))))
    }

    @Test("Queued items start at their time, soonest first, as call slots free up; they count as held")
    func queuedStartAtTheirTime() {
        var rounds = CallRounds<Int, String>(callsInFlight: 2, poll: .seconds(5))
        rounds.queue([(3, t0.adding(.seconds(3))), (1, t0.adding(.seconds(1))), (2, t0.adding(.seconds(1)))])
        #expect(rounds.held == 3 && rounds.claimLimit == 0)
        #expect(rounds.nextQueued == t0.adding(.seconds(1)))
        #expect(rounds.takeDue(at: t0).isEmpty)
        #expect(rounds.next(claimed: 0, limit: 0, at: t0) == .wait(until: t0.adding(.seconds(1))))
        let due = rounds.takeDue(at: t0.adding(.seconds(4)))
        #expect(due == [1, 2])  // two call slots; equal times keep their order
        rounds.claimed(due.count)
        // Every slot busy: the queued item waits for an answer (a wake) or the poll, not its time.
        #expect(rounds.next(claimed: 0, limit: 0, at: t0.adding(.seconds(4))) == .wait(until: t0.adding(.seconds(9))))
        rounds.answered([(1, "a")])
        #expect(rounds.takeDue(at: t0.adding(.seconds(4))) == [3])
    }

    @Test("A pace spaces the starts evenly; a hold stops them all until it ends")
    func pacedStarts() {
        var rounds = CallRounds<Int, String>(callsInFlight: 10, poll: .seconds(5), pace: 4)
        rounds.queue((1...3).map { ($0, t0) })
        #expect(rounds.takeDue(at: t0) == [1])
        rounds.claimed(1)
        #expect(rounds.next(claimed: 0, limit: 0, at: t0) == .wait(until: t0.adding(.milliseconds(250))))
        #expect(rounds.takeDue(at: t0.adding(.milliseconds(249))).isEmpty)
        #expect(rounds.takeDue(at: t0.adding(.milliseconds(250))) == [2])
        rounds.claimed(1)
        rounds.hold(until: t0.adding(.seconds(3)))
        #expect(rounds.takeDue(at: t0.adding(.seconds(2))).isEmpty)
        #expect(rounds.next(claimed: 0, limit: 0, at: t0.adding(.seconds(2))) == .wait(until: t0.adding(.seconds(3))))
        #expect(rounds.takeDue(at: t0.adding(.seconds(3))) == [3])
    }

    @Test("Refill when empty: a whole batch, and the next one only once every item is answered")
    func refillWhenEmpty() {
        var rounds = CallRounds<Int, String>(callsInFlight: 1, batchSize: 50, poll: .seconds(5), refill: .whenEmpty)
        #expect(rounds.claimLimit == 50)
        rounds.queue((1...3).map { ($0, t0) })
        #expect(rounds.claimLimit == 0)
        let due = rounds.takeDue(at: t0)
        #expect(due == [1])  // one call slot
        rounds.claimed(1)
        rounds.dropQueued()  // a lost connection: the queued ones' leases run out
        #expect(rounds.held == 1 && rounds.claimLimit == 0)
        rounds.answered([(1, "a")])
        #expect(rounds.claimLimit == 50)
    }

    @Test("Stopping drops the queued items and queues nothing more; `finish` waits for the calls in flight and records their answers")
    func stopDropsQueued() {
        let executor = CallExecutor<Void>(limit: 2, name: "test-finish")
        let inbox = CallInbox<Int, String>()
        var rounds = CallRounds<Int, String>(callsInFlight: 2, poll: .seconds(1))
        rounds.queue([(1, t0), (2, t0.adding(.seconds(60)))])
        rounds.startDue(at: t0, on: executor, answersTo: inbox, waking: WakeSignal()) { item, _ in "answer \(item)" }
        #expect(rounds.inFlight == 1 && rounds.held == 2)
        var recorded: [String] = []
        let left = rounds.finish(grace: .seconds(30), clock: SystemClock.shared, executor: executor, inbox: inbox) {
            recorded += $0.takeAnswers().map(\.1)
        }
        #expect(left == 0 && rounds.held == 0)
        #expect(recorded == ["answer 1"])
        rounds.queue([(3, t0)])
        #expect(rounds.held == 0)
    }

    /// Waits (real time, 30 s at most) until `condition` holds: the threads under test got there.
    static func until(_ condition: () -> Bool) -> Bool {
        let giveUp = SystemClock.shared.now.adding(.seconds(30))
        while !condition() {
            if SystemClock.shared.now >= giveUp { return false }
            sched_yield()
        }
        return true
    }

    @Test("Stopped with calls in flight: each answer that comes within the grace is recorded once, as it comes; a call still out at its end is left")
    func finishRecordsWithinTheGrace() {
        let clock = ManualClock()
        let executor = CallExecutor<Void>(limit: 3, name: "test-stop", clock: clock)
        let inbox = CallInbox<Int, String>()
        let release = (0..<3).map { _ in WakeSignal(clock: clock) }
        let recorded = Mutex<[String]>([])
        let left = Atomic<Int>(-1)
        let stopper = LoopThread(name: "test-finish") {
            var rounds = CallRounds<Int, String>(callsInFlight: 3, poll: .seconds(1))
            rounds.start([0, 1, 2], on: executor, answersTo: inbox, waking: WakeSignal(clock: clock)) { item, _ in
                release[item].wait(until: .never)
                return "answer \(item)"
            }
            let n = rounds.finish(grace: .seconds(10), clock: clock, executor: executor, inbox: inbox) { r in
                recorded.withLock { $0 += r.takeAnswers().map(\.1) }
            }
            left.store(n, ordering: .relaxed)
        }
        #expect(Self.until { clock.waiters == 4 })  // the three calls, and the stop waiting for them
        release[0].stop()
        #expect(Self.until { recorded.withLock { $0 } == ["answer 0"] && clock.waiters == 3 })
        release[1].stop()
        #expect(Self.until { recorded.withLock { $0 } == ["answer 0", "answer 1"] && clock.waiters == 2 })
        clock.advance(by: .seconds(10))  // the grace is over, call 2 still out
        #expect(stopper.join(until: Deadline(after: .seconds(30))))
        #expect(left.load(ordering: .relaxed) == 1)
        release[2].stop()  // its answer comes after the stop: nobody records it (its lease runs out)
        #expect(Self.until { executor.busy == 0 })
        #expect(recorded.withLock { $0 } == ["answer 0", "answer 1"])
    }

    @Test("Stopping, an answer that could not be recorded (its row locked) is tried again after the poll, within the grace")
    func finishRetriesWhatItKept() {
        let clock = ManualClock()
        let executor = CallExecutor<Void>(limit: 1, name: "test-keep", clock: clock)
        let inbox = CallInbox<Int, String>()
        let tries = Atomic<Int>(0)
        let recorded = Mutex<[String]>([])
        let left = Atomic<Int>(-1)
        let stopper = LoopThread(name: "test-finish-keep") {
            var rounds = CallRounds<Int, String>(callsInFlight: 1, poll: .seconds(1))
            rounds.start([7], on: executor, answersTo: inbox, waking: WakeSignal(clock: clock)) { item, _ in "answer \(item)" }
            let n = rounds.finish(grace: .seconds(10), clock: clock, executor: executor, inbox: inbox) { r in
                let answers = r.takeAnswers()
                if tries.add(1, ordering: .relaxed).newValue == 1 {
                    r.keep(answers)  // its row is locked: kept for the next try
                } else {
                    recorded.withLock { $0 += answers.map(\.1) }
                }
            }
            left.store(n, ordering: .relaxed)
        }
        #expect(Self.until { tries.load(ordering: .relaxed) == 1 && clock.waiters == 1 })
        clock.advance(by: .seconds(1))  // the poll
        #expect(stopper.join(until: Deadline(after: .seconds(30))))
        #expect(tries.load(ordering: .relaxed) == 2)
        #expect(recorded.withLock { $0 } == ["answer 7"])
        #expect(left.load(ordering: .relaxed) == 0)
    }
}

@Suite("Call executor", .bounded())
struct CallExecutorTests {
    @Test("Refuses calls beyond its limit; drain waits for those in flight on the injected clock")
    func boundedAndDrained() {
        let clock = ManualClock()
        let executor = CallExecutor(limit: 2, name: "test-calls", clock: clock)
        let release = WakeSignal(clock: clock)
        let started = Atomic<Int>(0)
        for _ in 0..<2 {
            #expect(
                executor.submit {
                    started.add(1, ordering: .relaxed)
                    release.wait(until: .never)
                })
        }
        #expect(!executor.submit {})  // both slots busy
        #expect(executor.busy == 2)
        #expect(clock.settle(after: 1))  // both calls are waiting
        let seen = clock.blockedWaits
        // The drain's deadline passes on the manual clock with the calls still out.
        let drained = Atomic<Int>(-1)
        let drainer = LoopThread(name: "test-drain") {
            drained.store(executor.drain(until: clock.now.adding(.seconds(5))) ? 1 : 0, ordering: .relaxed)
        }
        #expect(clock.settle(after: seen))
        #expect(!executor.submit {})  // draining: refused
        clock.advance(by: .seconds(5))
        drainer.join(until: .never)
        #expect(drained.load(ordering: .relaxed) == 0)
        release.stop()
        #expect(executor.drain(until: .never))
        #expect(executor.busy == 0)
    }

    @Test("`then` runs once the call's slot is free")
    func thenAfterSlotFree() {
        let executor = CallExecutor<Void>(limit: 1, name: "test-then")
        let busy = Mutex<[Int]>([])
        for n in 1...100 {
            let started = executor.submit({ _ in 1 }, then: { _ in busy.withLock { $0.append(executor.busy) } })
            #expect(started)
            #expect(CallRoundsTests.until { busy.withLock { $0.count } == n })
        }
        #expect(busy.withLock { $0 }.allSatisfy { $0 == 0 })
    }

    @Test("Each thread keeps its own local between calls")
    func threadLocal() {
        let executor = CallExecutor<Int>(limit: 1, name: "test-local") { 0 }
        let seen = Mutex<[Int]>([])
        for _ in 0..<3 {
            while !executor.submit({ (count: inout Int) in
                count += 1
                seen.withLock { $0.append(count) }
            }) {}
        }
        #expect(executor.drain(until: .never))
        #expect(seen.withLock { $0 } == [1, 2, 3])
    }
}
