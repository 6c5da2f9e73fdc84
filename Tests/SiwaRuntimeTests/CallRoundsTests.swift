import SiwaCore
import SiwaRuntime
import Synchronization
import Testing

@Suite("Lease -> call -> record engine")
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
        #expect(!wakeups.wait(until: .never))  // woken (not stopped)
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
}

@Suite("Call executor")
struct CallExecutorTests {
    @Test("Refuses calls beyond its limit; drain waits for those in flight on the injected clock")
    func boundedAndDrained() {
        let clock = ManualClock()
        let executor = CallExecutor(limit: 2, name: "test-calls", clock: clock)
        let release = StopSignal(clock: clock)
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
