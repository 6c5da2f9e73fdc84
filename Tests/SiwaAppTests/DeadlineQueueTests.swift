import Testing

@testable import SiwaApp

@Suite("Outbox writer's deadline queue")
struct DeadlineQueueTests {
    @Test("in deadline order: taken first in, first out; expired from the front, exactly those past the deadline")
    func inOrder() {
        var q = DeadlineQueue<Int>()
        for i in 0..<10 { q.append(i, deadline: UInt64(100 + i)) }
        #expect(q.count == 10)
        #expect(q.earliestDeadline == 100)
        #expect(q.take(3) == [0, 1, 2])
        #expect(q.earliestDeadline == 103)
        #expect(q.expire(now: 102).isEmpty)
        #expect(q.expire(now: 105) == [3, 4, 5])
        #expect(q.count == 4)
        #expect(q.take(100) == [6, 7, 8, 9])
        #expect(q.isEmpty)
        #expect(q.earliestDeadline == nil)
    }

    @Test("a request that waited for a key fetch (earlier deadline than those before it) expires on time and is written first")
    func lateArrival() {
        var q = DeadlineQueue<String>()
        q.append("a", deadline: 500)
        q.append("b", deadline: 600)
        q.append("late", deadline: 200)
        q.append("c", deadline: 700)
        q.append("late2", deadline: 650)
        #expect(q.earliestDeadline == 200)
        // Expiring at 250 finds the late one, not only what is at the front.
        #expect(q.expire(now: 250) == ["late"])
        #expect(q.earliestDeadline == 500)
        #expect(q.count == 4)
        // Writers take the late ones first (closest to their deadline), then in arrival order.
        #expect(q.take(2) == ["late2", "a"])
        #expect(q.expire(now: 10_000) == ["b", "c"])
        #expect(q.isEmpty)
    }

    @Test("equal deadlines and an emptied queue keep the order; a new request after a drain is in order whatever its deadline")
    func drainAndRefill() {
        var q = DeadlineQueue<Int>()
        q.append(1, deadline: 50)
        q.append(2, deadline: 50)
        #expect(q.take(5) == [1, 2])
        q.append(3, deadline: 10)
        q.append(4, deadline: 20)
        #expect(q.expire(now: 15) == [3])
        #expect(q.removeAll() == [4])
        #expect(q.isEmpty)
    }

    @Test("a long queue taken in batches and expired keeps every element exactly once")
    func manyBatches() {
        var q = DeadlineQueue<Int>()
        var out: [Int] = []
        var next = 0
        for round in 0..<200 {
            for _ in 0..<300 {
                // One in 50 arrives late, with a deadline already behind the queue's last.
                let deadline = next % 50 == 49 ? UInt64(next / 2) : UInt64(next)
                q.append(next, deadline: deadline)
                next += 1
            }
            out += q.take(round % 3 == 0 ? 256 : 100)
            out += q.expire(now: UInt64(next - 20_000 > 0 ? next - 20_000 : 0))
        }
        out += q.removeAll()
        #expect(out.count == next)
        #expect(Set(out).count == next)
        #expect(q.isEmpty)
    }
}
