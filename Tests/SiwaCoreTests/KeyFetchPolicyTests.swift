import Testing

@testable import SiwaCore

/// The key fetch state machine, driven with a made-up monotonic clock (seconds).
@Suite struct KeyFetchPolicyTests {
    typealias Fetch = KeyFetchPolicy.Fetch

    /// A policy whose first fetch (the start-up load) ran from `t` to `t + 0.1` and succeeded.
    static func loaded(interval: Double = 10, at t: Double = 100) -> KeyFetchPolicy {
        var p = KeyFetchPolicy(minInterval: interval)
        #expect(p.refreshRequested(now: t) == .start(Fetch(id: 1, startedAt: t)))
        #expect(p.fetchCompleted(id: 1, succeeded: true, now: t + 0.1) == .none)
        return p
    }

    @Test("no recent fetch: the unknown kid starts one and waits for it; its success without the kid is a 401")
    func waitsForItsOwnFetch() {
        var p = Self.loaded()
        let d = p.unknownKid(arrivedAt: 120, now: 120)
        #expect(d == .init(answer: .waitFor(fetchID: 2), effect: .startFetch(Fetch(id: 2, startedAt: 120))))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: 120.2) == .none)
        #expect(p.unknownKid(arrivedAt: 120, now: 120.2, mayWait: false) == .init(answer: .unknownKid, effect: .none))
    }

    @Test("the scanner-then-rotation race: a genuine kid inside the window gets 503 and a fetch owed, not 401")
    func genuineKidInsideTheWindow() {
        var p = Self.loaded()
        // A made-up kid at 200: its own fetch, then 401.
        #expect(p.unknownKid(arrivedAt: 200, now: 200).effect == .startFetch(Fetch(id: 2, startedAt: 200)))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: 200.1) == .none)
        #expect(p.unknownKid(arrivedAt: 200, now: 200.1, mayWait: false).answer == .unknownKid)
        // Apple rotates at 200.3 and signs with the new key at 203: that fetch began before → 503.
        let d = p.unknownKid(arrivedAt: 203, now: 203)
        #expect(d == .init(answer: .unavailable(retryAfter: 8), effect: .scheduleTimer(at: 210)))
        #expect(p.fetchOwed)
        // A second one in the same window: still 503, no second timer.
        #expect(p.unknownKid(arrivedAt: 204.5, now: 204.5) == .init(answer: .unavailable(retryAfter: 7), effect: .none))
        // The timer fires: the owed fetch starts (after both arrivals).
        #expect(p.timerFired(now: 210) == .startFetch(Fetch(id: 3, startedAt: 210)))
        #expect(!p.fetchOwed)
        #expect(p.fetchCompleted(id: 3, succeeded: true, now: 210.1) == .none)
        // The retry of a made-up kid inside the next window is again 503 (never a 401 it cannot be sure of).
        #expect(p.unknownKid(arrivedAt: 211, now: 211).answer == .unavailable(retryAfter: 10))
    }

    @Test("single flight: unknown kids arriving while a fetch runs that began before them get 503; one follow-up fetch")
    func singleFlight() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid(arrivedAt: 110, now: 110).effect == .startFetch(Fetch(id: 2, startedAt: 110)))
        for i in 0..<1000 {
            let t = 110.001 + Double(i) * 0.0001
            let d = p.unknownKid(arrivedAt: t, now: t)
            #expect(d.answer == .unavailable(retryAfter: 2))
            #expect(d.effect == .none)  // the completion takes care of the owed fetch
        }
        #expect(p.inFlight == Fetch(id: 2, startedAt: 110))
        // Completes before the interval is over: the owed fetch is scheduled at 111.
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: 110.5) == .scheduleTimer(at: 111))
        #expect(p.timerFired(now: 111) == .startFetch(Fetch(id: 3, startedAt: 111)))
    }

    @Test("a request that arrived before a fetch another request started waits for that fetch")
    func waitsForAFetchStartedAfterItsArrival() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid(arrivedAt: 110.002, now: 110.002).effect == .startFetch(Fetch(id: 2, startedAt: 110.002)))
        #expect(p.unknownKid(arrivedAt: 110.001, now: 110.003) == .init(answer: .waitFor(fetchID: 2), effect: .none))
        // With mayWait false (after a timed-out wait) it is a 503 instead.
        #expect(p.unknownKid(arrivedAt: 110.001, now: 115, mayWait: false).answer == .unavailable(retryAfter: 1))
    }

    @Test("a fetch that began after arrival and failed: 503, and the owed fetch is retried after the interval")
    func failedFetch() {
        var p = Self.loaded(interval: 2)
        #expect(p.unknownKid(arrivedAt: 110, now: 110).effect == .startFetch(Fetch(id: 2, startedAt: 110)))
        #expect(p.fetchCompleted(id: 2, succeeded: false, now: 111) == .none)
        #expect(p.unknownKid(arrivedAt: 110, now: 111, mayWait: false) == .init(answer: .unavailable(retryAfter: 2), effect: .scheduleTimer(at: 112)))
        // A long-past failure does not block a new fetch: the next unknown kid starts one.
        #expect(p.timerFired(now: 112) == .startFetch(Fetch(id: 3, startedAt: 112)))
        #expect(p.fetchCompleted(id: 3, succeeded: false, now: 112.5) == .none)
        #expect(p.unknownKid(arrivedAt: 150, now: 150).effect == .startFetch(Fetch(id: 4, startedAt: 150)))
    }

    @Test("the owed fetch starts at once when the interval has already passed at completion")
    func owedFetchAfterASlowFetch() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid(arrivedAt: 110, now: 110).effect == .startFetch(Fetch(id: 2, startedAt: 110)))
        #expect(p.unknownKid(arrivedAt: 111, now: 111).answer == .unavailable(retryAfter: 1))
        #expect(p.fetchCompleted(id: 2, succeeded: false, now: 115) == .startFetch(Fetch(id: 3, startedAt: 115)))
    }

    @Test("explicit refresh: starts when allowed, joins a fetch in flight, else rate limited")
    func refresh() {
        var p = KeyFetchPolicy(minInterval: 10)
        #expect(p.mayStart(now: 0))
        #expect(p.refreshRequested(now: 0) == .start(Fetch(id: 1, startedAt: 0)))
        #expect(!p.mayStart(now: 0.5))
        #expect(p.refreshRequested(now: 0.5) == .join(Fetch(id: 1, startedAt: 0)))
        #expect(p.fetchCompleted(id: 1, succeeded: true, now: 1) == .none)
        #expect(p.refreshRequested(now: 5) == .rateLimited)
        #expect(p.refreshRequested(now: 10) == .start(Fetch(id: 2, startedAt: 10)))
        // A completion for a fetch that is not in flight changes nothing.
        #expect(p.fetchCompleted(id: 1, succeeded: false, now: 11) == .none)
        #expect(p.inFlight?.id == 2)
    }

    @Test("a timer that fires early is armed again; interval 0 never rate limits")
    func timerEarlyAndZeroInterval() {
        var p = Self.loaded(interval: 3, at: 0)
        #expect(p.unknownKid(arrivedAt: 1, now: 1).effect == .scheduleTimer(at: 3))
        #expect(p.timerFired(now: 2.999) == .scheduleTimer(at: 3))
        #expect(p.timerAt == 3)
        var z = Self.loaded(interval: 0, at: 0)
        #expect(z.unknownKid(arrivedAt: 0.2, now: 0.2).effect == .startFetch(Fetch(id: 2, startedAt: 0.2)))
    }

    @Test("Retry-After reaches past the next allowed start and is at least 1")
    func retryAfter() {
        var p = Self.loaded(interval: 3600, at: 0)
        #expect(p.unknownKid(arrivedAt: 0.5, now: 0.5).answer == .unavailable(retryAfter: 3601))
        var q = Self.loaded(interval: 1, at: 0)
        #expect(q.unknownKid(arrivedAt: 0.99, now: 0.99).answer == .unavailable(retryAfter: 2))
    }
}
