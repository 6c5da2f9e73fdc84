import Testing

@testable import SiwaCore

@Suite struct RetryPolicyTests {
    @Test func defaults() {
        let p = RetryPolicy()
        #expect(p.maxAttempts == 12)
        #expect(p.baseDelay == .seconds(1))
        #expect(p.maxDelay == .seconds(3600))
    }

    @Test func exponentialGrowthWithEqualJitter() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 1, jitter: 0) == .seconds(0.5))
        #expect(p.delay(afterAttempts: 1, jitter: 0.5) == .seconds(0.75))
        #expect(p.delay(afterAttempts: 2, jitter: 0) == .seconds(1))
        #expect(p.delay(afterAttempts: 3, jitter: 0) == .seconds(2))
        #expect(p.delay(afterAttempts: 4, jitter: 0.5) == .seconds(6))
        #expect(p.delay(afterAttempts: 11, jitter: 0) == .seconds(512))
    }

    @Test func cappedAtMaxDelay() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 13, jitter: 0) == .seconds(1800))  // 4096 capped to 3600
        #expect(p.delay(afterAttempts: 1000, jitter: 0) == .seconds(1800))
        #expect(p.delay(afterAttempts: Int.max, jitter: 0.5) == .seconds(2700))
        #expect(p.delay(afterAttempts: 1000, jitter: 0.999999) < .seconds(3600))
    }

    @Test func jitterRange() {
        let p = RetryPolicy(baseDelay: .seconds(2))
        for attempts in 1...20 {
            let low = p.delay(afterAttempts: attempts, jitter: 0)
            let high = p.delay(afterAttempts: attempts, jitter: 0.9999)
            let d = min(.seconds(3600), .seconds(2) * (1 << (attempts - 1)))
            #expect(low == d / 2)
            #expect(high < d && high > low)
        }
    }

    @Test func outOfRangeInputsAreClamped() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 0, jitter: 0) == .seconds(0.5))
        #expect(p.delay(afterAttempts: -5, jitter: 0) == .seconds(0.5))
        #expect(p.delay(afterAttempts: 3, jitter: -1) == .seconds(2))
        #expect(p.delay(afterAttempts: 3, jitter: 7) > .milliseconds(3990) && p.delay(afterAttempts: 3, jitter: 7) <= .seconds(4))
        #expect(p.delay(afterAttempts: 3, jitter: .nan) == .seconds(2))
    }

    @Test func exhaustion() {
        let p = RetryPolicy(maxAttempts: 3)
        #expect(!p.isExhausted(attempts: 0))
        #expect(!p.isExhausted(attempts: 2))
        #expect(p.isExhausted(attempts: 3))
        #expect(p.isExhausted(attempts: 4))
        #expect(RetryPolicy().isExhausted(attempts: 12))
        #expect(!RetryPolicy().isExhausted(attempts: 11))
    }
}
