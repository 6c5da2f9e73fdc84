import Testing

@testable import SiwaCore

/// The one deadline type of the receive path, on made-up moments (no clock).
@Suite struct DeadlineTests {
    static let t = Deadline(uptimeNanoseconds: 10_000_000_000)

    @Test("time left and hasPassed at a given moment; zero once passed, never negative")
    func timeLeft() {
        let d = Self.t.adding(.seconds(2))
        #expect(d.timeLeft(at: Self.t) == .seconds(2))
        #expect(d.timeLeft(at: Self.t.adding(.milliseconds(1500))) == .milliseconds(500))
        #expect(d.timeLeft(at: d) == .zero)
        #expect(d.timeLeft(at: d.adding(.seconds(7))) == .zero)
        #expect(!d.hasPassed(at: Self.t))
        #expect(d.hasPassed(at: d))
        #expect(d.hasPassed(at: .never))
        #expect(!Deadline.never.hasPassed(at: d))
    }

    @Test("ordered by moment; never is the latest")
    func ordering() {
        let a = Self.t, b = Self.t.adding(.seconds(1))
        #expect(a < b)
        #expect([b, .never, a].min() == a)
        #expect(b < .never)
        #expect(Deadline.never.description == "never")
    }
}
