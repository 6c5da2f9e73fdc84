import Testing

@testable import SiwaHTTP

@Suite("HTTP listener's sweeper of slow requests")
struct ConnectionSweeperTests {
    typealias Tracked = ServerContext.Tracked
    static let second: UInt64 = 1_000_000_000

    @Test("cuts only a request that has waited on its client longer than the limit")
    func overdue() {
        let now = 100 * Self.second
        let all: [UInt: Tracked] = [
            1: Tracked(fd: 10, since: now - 11 * Self.second),  // slow client: cut
            2: Tracked(fd: 11, since: now - 9 * Self.second),  // within the limit
            3: Tracked(fd: 12, since: now - 30 * Self.second, busy: true),  // the handler has it
            4: Tracked(fd: 13, since: now - 30 * Self.second, cut: true),  // already cut
        ]
        #expect(ServerContext.overdue(all, now: now, limit: 10 * Self.second) == [1])
    }

    @Test("a connection that started after the sweeper read its clock is new, not 584 years old")
    func startedAfterTheClockWasRead() {
        let now = 100 * Self.second
        let all: [UInt: Tracked] = [7: Tracked(fd: 20, since: now + 1_000)]
        #expect(ServerContext.overdue(all, now: now, limit: 10 * Self.second).isEmpty)
    }
}
