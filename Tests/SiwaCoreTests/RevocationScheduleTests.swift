import Testing

@testable import SiwaCore

/// When a failed revocation at Apple is tried again (README "In-app account deletion": backoff and jitter for
/// `SIWA_REVOKE_RETRY_FOR`, then `dead`).
@Suite struct RevocationScheduleTests {
    static let hour = Duration.seconds(3600)
    static let week = Duration.seconds(7 * 86_400)

    /// The uncapped-then-capped backoff scale after `attempts` failures: 1 s doubling, at most an hour.
    static func scale(_ attempts: Int) -> Duration {
        min(hour, .seconds(Double(sign: .plus, exponent: min(attempts - 1, 64), significand: 1)))
    }

    /// The wait of a `.retry`; nil for `.dead`.
    static func seconds(_ next: RevocationSchedule.Next) -> Duration? {
        if case .retry(let wait) = next { return wait }
        return nil
    }

    @Test func defaultsAreSevenDaysAndAnHourCap() {
        let s = RevocationSchedule()
        #expect(s.retryFor == .seconds(604_800))
        #expect(s.backoff.baseDelay == .seconds(1) && s.backoff.maxDelay == .seconds(3600))
        #expect(!s.backoff.isExhausted(attempts: 1_000_000), "the window ends the retries, not a count")
    }

    @Test("the delay doubles from 1 s, half of it jittered: within [d/2, d)")
    func backoffDoublesWithJitterWithinBounds() {
        let s = RevocationSchedule()
        var rng = SplitMix(seed: 0x2E70_CA7E)
        for attempts in 1...16 {
            let d = Self.scale(attempts)
            #expect(Self.seconds(s.next(afterAttempts: attempts, age: .seconds(0), retryAfter: nil, jitter: 0)) == d / 2)
            #expect(Self.seconds(s.next(afterAttempts: attempts, age: .seconds(0), retryAfter: nil, jitter: 0.5)) == d / 4 * 3)
            for _ in 0..<50 {
                let jitter = Double.random(in: 0..<1, using: &rng)
                let delay = Self.seconds(s.next(afterAttempts: attempts, age: .seconds(100), retryAfter: nil, jitter: jitter))
                #expect(delay.map { $0 >= d / 2 && $0 < d } == true, "attempt \(attempts), jitter \(jitter): \(String(describing: delay))")
            }
        }
        // Doubling: 0.5, 1, 2, 4 … at jitter 0.
        let low = (1...12).compactMap { Self.seconds(s.next(afterAttempts: $0, age: .seconds(0), retryAfter: nil, jitter: 0)) }
        #expect(low == (0..<12).map { .milliseconds(500) * (1 << $0) })
    }

    @Test("never more than an hour between two tries, however many failed")
    func cappedAtOneHour() {
        let s = RevocationSchedule()
        for attempts in [13, 14, 20, 64, 1000, Int.max] {
            for jitter in [0, 0.5, 0.999_999, 1, 7, .nan] {
                let delay = Self.seconds(s.next(afterAttempts: attempts, age: .seconds(86_400), retryAfter: nil, jitter: jitter))
                #expect(delay.map { $0 >= .seconds(1800) && $0 <= .seconds(3600) } == true, "attempt \(attempts), jitter \(jitter)")
            }
        }
        #expect(Self.seconds(s.next(afterAttempts: 1000, age: .seconds(0), retryAfter: nil, jitter: 0)) == .seconds(1800))
    }

    @Test("Retry-After is honoured: never sooner than Apple asked while the window lasts")
    func retryAfterHonoured() {
        let s = RevocationSchedule()
        #expect(Self.seconds(s.next(afterAttempts: 1, age: .seconds(0), retryAfter: .seconds(120), jitter: 0)) == .seconds(120))
        #expect(
            Self.seconds(s.next(afterAttempts: 20, age: .seconds(0), retryAfter: .seconds(7200), jitter: 0.9)) == .seconds(7200),
            "even past the hour cap")
        // A Retry-After shorter than the backoff does not hurry it.
        #expect(Self.seconds(s.next(afterAttempts: 20, age: .seconds(0), retryAfter: .seconds(5), jitter: 0)) == .seconds(1800))
        var rng = SplitMix(seed: 0x0AF7_E2)
        for _ in 0..<2000 {
            let attempts = Int.random(in: 1...40, using: &rng)
            let retryAfter = Int.random(in: 0...20_000, using: &rng)
            let age = Double.random(in: 0..<(s.retryFor.inSeconds - Double(retryAfter)), using: &rng)
            let delay = Self.seconds(s.next(afterAttempts: attempts, age: .seconds(age), retryAfter: .seconds(retryAfter), jitter: 0.3))
            #expect(delay.map { $0 >= .seconds(retryAfter) } == true, "attempt \(attempts), Retry-After \(retryAfter), age \(age)")
        }
        // Past the window's end, the window wins: one last try at its end, not a lost grant.
        #expect(Self.seconds(s.next(afterAttempts: 3, age: s.retryFor - .seconds(60), retryAfter: .seconds(600), jitter: 0)) == .seconds(60))
    }

    @Test("the last try lands at the end of the window, then dead")
    func lastTryAtTheEndOfTheWindowThenDead() {
        let s = RevocationSchedule(retryFor: .seconds(90))
        #expect(Self.seconds(s.next(afterAttempts: 20, age: .seconds(80), retryAfter: nil, jitter: 0)) == .seconds(10))
        #expect(Self.seconds(s.next(afterAttempts: 1, age: .seconds(80), retryAfter: nil, jitter: 0)) == .milliseconds(500), "not pulled forward")
        #expect(s.next(afterAttempts: 20, age: .seconds(90), retryAfter: nil, jitter: 0) == .dead)
        #expect(s.next(afterAttempts: 1, age: .seconds(90.001), retryAfter: nil, jitter: 0) == .dead)
        #expect(s.next(afterAttempts: 1, age: .seconds(86_400), retryAfter: .seconds(1), jitter: 0) == .dead)
    }

    /// Plays a revocation Apple refuses for ever, from queueing to dead, with the default window.
    /// Jitters are multiples of 1/1024, so the ages add up exactly.
    @Test("a revocation failing for ever: tries an hour apart at most, the last at 7 days, then dead")
    func failingForEverUntilDead() {
        let s = RevocationSchedule()
        var rng = SplitMix(seed: 0xDEAD_7D)
        var age = Duration.zero
        var attempts = 1
        var gaps: [Duration] = []
        while case .retry(let delay) = s.next(
            afterAttempts: attempts, age: age, retryAfter: nil, jitter: Double(Int.random(in: 0..<1024, using: &rng)) / 1024)
        {
            gaps.append(delay)
            age += delay
            attempts += 1
            if attempts > 10_000 { break }
        }
        #expect(age == Self.week, "dead exactly at the end of the window: \(age)")
        #expect(gaps.allSatisfy { $0 > .zero && $0 <= .seconds(3600) })
        // Before the last one (cut at the window's end), every gap within its attempt's bounds.
        for (i, gap) in gaps.dropLast().enumerated() {
            let d = Self.scale(i + 1)
            #expect(gap >= d / 2 && gap < d, "gap \(i + 1): \(gap)")
        }
        // 12 doubling steps (~1 h), then 1800...3600 s apart for the rest of the week.
        #expect(gaps.count >= 168 && gaps.count <= 12 + 336 + 1, "\(gaps.count) tries")
    }
}
