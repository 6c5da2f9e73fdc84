import SiwaCore
import Testing

@testable import SiwaApp

/// The outbox writer's queue, driven without threads or a clock: events in, actions out.
@Suite("Outbox queue")
struct OutboxQueueTests {
    struct Item: OutboxQueueItem, Equatable {
        var id: Int
        var deadline: Deadline
    }

    static let t0 = Deadline(uptimeNanoseconds: 1_000_000_000_000)

    static func item(_ id: Int, expiresIn seconds: Double = 5) -> Item {
        Item(id: id, deadline: t0.adding(.seconds(seconds)))
    }

    static func ids(_ next: OutboxQueue<Item>.Next) -> [Int]? {
        if case .write(let batch) = next { return batch.map(\.id) }
        return nil
    }

    @Test("a lone request is written at once; what queues while a writer is busy is its next batch")
    func loneThenBatch() {
        var q = OutboxQueue<Item>(maxBatch: 256, maxQueue: 100)
        guard case .wait = q.takeBatch(writer: 0) else {
            Issue.record("an empty queue must make the writer wait")
            return
        }
        // The first submission wakes the idle writer and the timer (which sleeps until never).
        #expect(q.submit(Self.item(1)) == .queued(wakeWriter: true, wakeTimer: true))
        #expect(Self.ids(q.takeBatch(writer: 0)) == [1])
        // While it writes: no writer is idle, no hand-off per request.
        _ = q.expire(now: Self.t0)
        #expect(q.submit(Self.item(2)) == .queued(wakeWriter: false, wakeTimer: false))
        #expect(q.submit(Self.item(3)) == .queued(wakeWriter: false, wakeTimer: false))
        q.finished(writer: 0)
        #expect(Self.ids(q.takeBatch(writer: 0)) == [2, 3])
    }

    @Test("a writer takes at most maxBatch, in arrival order; several writers take disjoint batches")
    func maxBatchAndWriters() {
        var q = OutboxQueue<Item>(maxBatch: 2, maxQueue: 100)
        for i in 1...5 { _ = q.submit(Self.item(i)) }
        #expect(Self.ids(q.takeBatch(writer: 0)) == [1, 2])
        #expect(Self.ids(q.takeBatch(writer: 1)) == [3, 4])
        #expect(Self.ids(q.takeBatch(writer: 2)) == [5])
        #expect(q.inFlight.count == 3)
        guard case .wait = q.takeBatch(writer: 3) else {
            Issue.record("nothing left: wait")
            return
        }
        #expect(q.idleWriters == [3])
    }

    @Test("adaptive: while a commit is in flight, a second writer starts only once minExtraBatch are queued")
    func adaptiveSecondWriter() {
        var q = OutboxQueue<Item>(maxBatch: 256, maxQueue: 100, minExtraBatch: 3)
        guard case .wait = q.takeBatch(writer: 1) else {
            Issue.record("empty: wait")
            return
        }
        #expect(q.submit(Self.item(1)) == .queued(wakeWriter: true, wakeTimer: true))
        #expect(Self.ids(q.takeBatch(writer: 0)) == [1])
        _ = q.expire(now: Self.t0)  // the timer now sleeps until item 1's deadline
        // Writer 0 commits; writer 1 is idle but two queued items do not start a second commit.
        #expect(q.submit(Self.item(2)) == .queued(wakeWriter: false, wakeTimer: false))
        guard case .wait = q.takeBatch(writer: 1) else {
            Issue.record("below minExtraBatch: wait")
            return
        }
        #expect(q.submit(Self.item(3)) == .queued(wakeWriter: false, wakeTimer: false))
        // The third one does: the queue grows faster than one writer commits.
        #expect(q.submit(Self.item(4)) == .queued(wakeWriter: true, wakeTimer: false))
        #expect(Self.ids(q.takeBatch(writer: 1)) == [2, 3, 4])
        // Below the threshold, what queues waits for the writer whose commit ends last.
        _ = q.submit(Self.item(5))
        q.finished(writer: 0)
        guard case .wait = q.takeBatch(writer: 0) else {
            Issue.record("writer 1 still commits: wait")
            return
        }
        q.finished(writer: 1)
        #expect(Self.ids(q.takeBatch(writer: 1)) == [5])
        // More than one batch ready with a writer idle: the one that took its batch wakes it.
        var r = OutboxQueue<Item>(maxBatch: 2, maxQueue: 100, minExtraBatch: 2)
        guard case .wait = r.takeBatch(writer: 1) else {
            Issue.record("empty: wait")
            return
        }
        for i in 1...4 { _ = r.submit(Self.item(i)) }
        #expect(Self.ids(r.takeBatch(writer: 0)) == [1, 2])
        #expect(r.idleWriterWanted)
        #expect(Self.ids(r.takeBatch(writer: 1)) == [3, 4])
        #expect(!r.idleWriterWanted)
    }

    @Test("a full queue or a stopped writer refuses (503 at once)")
    func refusals() {
        var q = OutboxQueue<Item>(maxBatch: 10, maxQueue: 2)
        _ = q.submit(Self.item(1))
        _ = q.submit(Self.item(2))
        #expect(q.submit(Self.item(3)) == .refused)
        q.stop()
        _ = q.takeBatch(writer: 0)
        #expect(q.submit(Self.item(4)) == .refused)
    }

    @Test("after stop, writers write what is queued, then exit")
    func stopDrains() {
        var q = OutboxQueue<Item>(maxBatch: 10, maxQueue: 10)
        _ = q.submit(Self.item(1))
        q.stop()
        #expect(Self.ids(q.takeBatch(writer: 0)) == [1])
        q.finished(writer: 0)
        guard case .exit = q.takeBatch(writer: 0) else {
            Issue.record("stopped and empty: exit")
            return
        }
    }

    @Test("the timer sleeps until the earliest deadline; only an earlier deadline wakes it")
    func timerWakes() {
        var q = OutboxQueue<Item>(maxBatch: 10, maxQueue: 10)
        #expect(q.expire(now: Self.t0).sleepUntil == .never)
        #expect(q.submit(Self.item(1, expiresIn: 5)) == .queued(wakeWriter: false, wakeTimer: true))
        #expect(q.expire(now: Self.t0).sleepUntil == Self.t0.adding(.seconds(5)))
        #expect(q.submit(Self.item(2, expiresIn: 5.5)) == .queued(wakeWriter: false, wakeTimer: false))
        // One that waited for a key fetch arrives late with an earlier deadline: wakes the timer.
        #expect(q.submit(Self.item(3, expiresIn: 1)) == .queued(wakeWriter: false, wakeTimer: true))
        #expect(q.expire(now: Self.t0).sleepUntil == Self.t0.adding(.seconds(1)))
    }

    @Test("past their deadline, queued items and items of a batch the database does not answer expire once")
    func expiry() {
        var q = OutboxQueue<Item>(maxBatch: 2, maxQueue: 10)
        _ = q.submit(Self.item(1, expiresIn: 1))
        _ = q.submit(Self.item(2, expiresIn: 3))
        #expect(Self.ids(q.takeBatch(writer: 0)) == [1, 2])  // the database hangs on this batch
        _ = q.submit(Self.item(3, expiresIn: 2))
        _ = q.submit(Self.item(4, expiresIn: 9))
        var e = q.expire(now: Self.t0.adding(.seconds(2)))
        #expect(e.expired.map(\.id).sorted() == [1, 3])
        #expect(e.sleepUntil == Self.t0.adding(.seconds(3)))
        #expect(q.inFlight[0]?.map(\.id) == [2])
        e = q.expire(now: Self.t0.adding(.seconds(2)))
        #expect(e.expired.isEmpty, "each expires once")
        e = q.expire(now: Self.t0.adding(.seconds(10)))
        #expect(e.expired.map(\.id).sorted() == [2, 4])
        #expect(e.sleepUntil == .never)
        q.stop()
        #expect(q.expire(now: Self.t0.adding(.seconds(10))).sleepUntil == nil, "stopped and empty: the timer ends")
    }

    @Test("shutdown out of time: everything queued or in flight is abandoned, once")
    func abandonAll() {
        var q = OutboxQueue<Item>(maxBatch: 1, maxQueue: 10)
        _ = q.submit(Self.item(1))
        _ = q.submit(Self.item(2))
        _ = q.takeBatch(writer: 0)
        #expect(q.abandonAll().map(\.id).sorted() == [1, 2])
        #expect(q.abandonAll().isEmpty)
    }
}
