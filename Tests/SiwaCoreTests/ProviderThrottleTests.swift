import SiwaCore
import Testing

@Suite("Provider throttle: a 429 holds every call to its target")
struct ProviderThrottleTests {
    let t0 = Deadline(uptimeNanoseconds: 1_000_000_000_000)

    func throttled(status: Int? = 429, reason: String = "http_429", retryAfter: Duration? = nil) -> ProviderOutcome {
        .retryLater(ProviderFailure(status: status, reason: reason, retryAfter: retryAfter))
    }

    @Test("A 429 holds its target until Retry-After, and only its target")
    func holdsUntilRetryAfter() {
        var throttle = ProviderThrottle()
        let until = throttle.note(throttled(retryAfter: .seconds(7)), of: .clerk, at: t0)
        #expect(until == t0.adding(.seconds(7)))
        #expect(throttle.open([.clerk, .auth0], at: t0) == [.auth0])
        #expect(throttle.open([.clerk, .auth0], at: t0.adding(.milliseconds(6999))) == [.auth0])
        #expect(throttle.open([.clerk, .auth0], at: t0.adding(.seconds(7))) == [.clerk, .auth0])
    }

    @Test("Without Retry-After, a short pause; a reset far away is believed for an hour at most")
    func pauseAndCap() {
        var throttle = ProviderThrottle()
        throttle.note(throttled(), of: .auth0, at: t0)
        #expect(throttle.heldUntil(.auth0, at: t0) == t0.adding(ProviderThrottle.pauseWithoutRetryAfter))
        throttle.note(throttled(retryAfter: .seconds(86_400)), of: .firebase, at: t0)
        #expect(throttle.heldUntil(.firebase, at: t0) == t0.adding(.seconds(3600)))
    }

    @Test("Throttling codes without a 429 hold; other failures, refusals and successes do not")
    func whatHolds() {
        var throttle = ProviderThrottle()
        #expect(throttle.note(throttled(status: 400, reason: "TooManyRequestsException"), of: .cognito, at: t0) != nil)
        #expect(throttle.note(throttled(status: 429, reason: "RESOURCE_EXHAUSTED"), of: .firebase, at: t0) != nil)
        #expect(throttle.note(.retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(30))), of: .clerk, at: t0) == nil)
        #expect(throttle.note(.retryLater(ProviderFailure(reason: "couldNotConnect")), of: .clerk, at: t0) == nil)
        #expect(throttle.note(.refused(ProviderFailure(status: 429, reason: "http_429", blame: .request)), of: .clerk, at: t0) == nil)
        #expect(throttle.note(.done([], status: 200), of: .clerk, at: t0) == nil)
        #expect(throttle.note(.userNotFound(status: 404), of: .clerk, at: t0) == nil)
        #expect(throttle.open([.clerk, .auth0], at: t0) == [.clerk, .auth0])
    }

    @Test("A later, shorter hold does not shorten the one in force; a longer one lengthens it")
    func holdsOnlyGrow() {
        var throttle = ProviderThrottle()
        throttle.note(throttled(retryAfter: .seconds(10)), of: .clerk, at: t0)
        #expect(throttle.note(throttled(retryAfter: .seconds(1)), of: .clerk, at: t0.adding(.seconds(2))) == nil)
        #expect(throttle.heldUntil(.clerk, at: t0.adding(.seconds(2))) == t0.adding(.seconds(10)))
        #expect(throttle.note(throttled(retryAfter: .seconds(20)), of: .clerk, at: t0.adding(.seconds(2))) == t0.adding(.seconds(22)))
    }
}
