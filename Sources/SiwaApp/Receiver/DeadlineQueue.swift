/// The outbox writer's queue: first in, first out for the writers, and the earliest deadline
/// and everything past its deadline found without walking the queue (a hung database can leave
/// 20,000 requests queued while the deadline thread wakes every millisecond).
///
/// Requests mostly arrive in deadline order (deadline = arrival + commit timeout). One that
/// waited for a key fetch arrives late with an earlier deadline than those queued before it: it
/// goes to a small `late` list, which writers take first (it is the closest to its deadline).
/// A pure value: no locking, no clock; `OutboxWriter` keeps it under its lock.
struct DeadlineQueue<Element> {
    private struct Entry {
        var element: Element
        var deadline: UInt64
    }

    /// Deadlines never decrease from `head` to the end.
    private var ordered: [Entry] = []
    /// Entries of `ordered` before it are gone (taken or expired); compacted now and then.
    private var head = 0
    /// Entries whose deadline was earlier than the last of `ordered` when they came.
    private var late: [Entry] = []

    var count: Int { ordered.count - head + late.count }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element, deadline: UInt64) {
        let entry = Entry(element: element, deadline: deadline)
        if head < ordered.count, let last = ordered.last, deadline < last.deadline {
            late.append(entry)
        } else {
            ordered.append(entry)
        }
    }

    /// The earliest deadline of what is queued; nil when nothing is.
    var earliestDeadline: UInt64? {
        var earliest = head < ordered.count ? ordered[head].deadline : nil
        for entry in late where entry.deadline < earliest ?? .max { earliest = entry.deadline }
        return earliest
    }

    /// Up to `limit` elements, the late ones first, then in order of arrival.
    mutating func take(_ limit: Int) -> [Element] {
        var taken: [Element] = []
        taken.reserveCapacity(min(limit, count))
        let fromLate = min(limit, late.count)
        if fromLate > 0 {
            taken.append(contentsOf: late.prefix(fromLate).map(\.element))
            late.removeFirst(fromLate)
        }
        let fromOrdered = min(limit - fromLate, ordered.count - head)
        if fromOrdered > 0 {
            taken.append(contentsOf: ordered[head..<head + fromOrdered].map(\.element))
            head += fromOrdered
        }
        compact()
        return taken
    }

    /// Removes and returns every element whose deadline is at or before `now`.
    mutating func expire(now: UInt64) -> [Element] {
        var expired: [Element] = []
        while head < ordered.count, ordered[head].deadline <= now {
            expired.append(ordered[head].element)
            head += 1
        }
        if late.contains(where: { $0.deadline <= now }) {
            expired.append(contentsOf: late.filter { $0.deadline <= now }.map(\.element))
            late.removeAll { $0.deadline <= now }
        }
        compact()
        return expired
    }

    /// Removes and returns everything.
    mutating func removeAll() -> [Element] {
        let all = late.map(\.element) + ordered[head...].map(\.element)
        self = DeadlineQueue()
        return all
    }

    /// Drops the gone prefix once it is most of the storage (amortised O(1) per element).
    private mutating func compact() {
        if head == ordered.count {
            ordered.removeAll(keepingCapacity: ordered.count <= 4096)
            head = 0
        } else if head >= 1024 && head * 2 >= ordered.count {
            ordered.removeFirst(head)
            head = 0
        }
    }
}
