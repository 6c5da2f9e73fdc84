import Testing

@testable import SiwaCore

@Suite struct RetryPolicyTests {
    @Test func defaults() {
        let p = RetryPolicy()
        #expect(p.maxAttempts == 12)
        #expect(p.baseDelay == 1)
        #expect(p.maxDelay == 3600)
    }

    @Test func exponentialGrowthWithEqualJitter() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 1, jitter: 0) == 0.5)
        #expect(p.delay(afterAttempts: 1, jitter: 0.5) == 0.75)
        #expect(p.delay(afterAttempts: 2, jitter: 0) == 1)
        #expect(p.delay(afterAttempts: 3, jitter: 0) == 2)
        #expect(p.delay(afterAttempts: 4, jitter: 0.5) == 6)
        #expect(p.delay(afterAttempts: 11, jitter: 0) == 512)
    }

    @Test func cappedAtMaxDelay() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 13, jitter: 0) == 1800)  // 4096 capped to 3600
        #expect(p.delay(afterAttempts: 1000, jitter: 0) == 1800)
        #expect(p.delay(afterAttempts: Int.max, jitter: 0.5) == 2700)
        #expect(p.delay(afterAttempts: 1000, jitter: 0.999999) < 3600)
    }

    @Test func jitterRange() {
        let p = RetryPolicy(baseDelay: 2)
        for attempts in 1...20 {
            let low = p.delay(afterAttempts: attempts, jitter: 0)
            let high = p.delay(afterAttempts: attempts, jitter: 0.9999)
            let d = min(3600, 2 * Double(1 << (attempts - 1)))
            #expect(low == d / 2)
            #expect(high < d && high > low)
        }
    }

    @Test func outOfRangeInputsAreClamped() {
        let p = RetryPolicy()
        #expect(p.delay(afterAttempts: 0, jitter: 0) == 0.5)
        #expect(p.delay(afterAttempts: -5, jitter: 0) == 0.5)
        #expect(p.delay(afterAttempts: 3, jitter: -1) == 2)
        #expect(p.delay(afterAttempts: 3, jitter: 7) > 3.99 && p.delay(afterAttempts: 3, jitter: 7) <= 4)
        #expect(p.delay(afterAttempts: 3, jitter: .nan) == 2)
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
