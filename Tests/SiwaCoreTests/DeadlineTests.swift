import Testing

@testable import SiwaCore

/// The one deadline type of the receive path, on made-up moments (no clock).
@Suite struct DeadlineTests {
    static let t = Deadline(uptimeNanoseconds: 10_000_000_000)

    @Test("adding seconds moves it later; negative and NaN leave it; huge saturates at never")
    func adding() {
        #expect(Self.t.adding(seconds: 5).uptimeNanoseconds == 15_000_000_000)
        #expect(Self.t.adding(seconds: 0.000_001).uptimeNanoseconds == 10_000_001_000)
        #expect(Self.t.adding(seconds: -3) == Self.t)
        #expect(Self.t.adding(seconds: .nan) == Self.t)
        #expect(Self.t.adding(seconds: 1e30) == .never)
        #expect(Self.t.adding(seconds: .infinity) == .never)
        #expect(Deadline.never.adding(seconds: 1) == .never)
    }

    @Test("remaining seconds and hasPassed at a given moment; 0 once passed, never negative")
    func remaining() {
        let d = Self.t.adding(seconds: 2)
        #expect(d.remaining(at: Self.t) == 2)
        #expect(d.remaining(at: Self.t.adding(seconds: 1.5)) == 0.5)
        #expect(d.remaining(at: d) == 0)
        #expect(d.remaining(at: d.adding(seconds: 7)) == 0)
        #expect(!d.hasPassed(at: Self.t))
        #expect(d.hasPassed(at: d))
        #expect(d.hasPassed(at: .never))
        #expect(!Deadline.never.hasPassed(at: d))
    }

    @Test("ordered by moment; never is the latest")
    func ordering() {
        let a = Self.t, b = Self.t.adding(seconds: 1)
        #expect(a < b)
        #expect([b, .never, a].min() == a)
        #expect(b < .never)
        #expect(Deadline.never.description == "never")
    }
}
