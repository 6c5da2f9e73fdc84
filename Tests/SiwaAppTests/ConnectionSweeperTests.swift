import SiwaCore
import Testing

@testable import SiwaHTTP

@Suite("HTTP listener's sweeper of slow requests")
struct ConnectionSweeperTests {
    typealias Tracked = ServerContext.Tracked
    static let now = Deadline(uptimeNanoseconds: 100_000_000_000)

    static func ago(_ seconds: Int64) -> Deadline { Deadline(uptimeNanoseconds: now.uptimeNanoseconds - UInt64(seconds) * 1_000_000_000) }

    @Test("cuts only a request that has waited on its client longer than the limit")
    func overdue() {
        let all: [UInt: Tracked] = [
            1: Tracked(fd: 10, since: Self.ago(11)),  // slow client: cut
            2: Tracked(fd: 11, since: Self.ago(9)),  // within the limit
            3: Tracked(fd: 12, since: Self.ago(30), busy: true),  // the handler has it
            4: Tracked(fd: 13, since: Self.ago(30), cut: true),  // already cut
            5: Tracked(fd: 14, since: Self.ago(10)),  // exactly at the limit: not yet
        ]
        #expect(ServerContext.overdue(all, now: Self.now, limit: .seconds(10)) == [1])
    }

    @Test("a connection that started after the sweeper read its clock is new, not 584 years old")
    func startedAfterTheClockWasRead() {
        let all: [UInt: Tracked] = [7: Tracked(fd: 20, since: Self.now.adding(.microseconds(1)))]
        #expect(ServerContext.overdue(all, now: Self.now, limit: .seconds(10)).isEmpty)
    }
}
