import Testing

@testable import SiwaCore

/// A moment of a made-up monotonic clock, `seconds` after its origin.
func time(_ seconds: Double) -> Deadline { Deadline(uptimeNanoseconds: UInt64(seconds * 1e9)) }

/// The key fetch state machine, driven with a made-up monotonic clock.
@Suite struct KeyFetchPolicyTests {
    typealias Fetch = KeyFetchPolicy.Fetch

    /// A policy whose first fetch (the start-up load) ran from `t` to `t + 0.1` and succeeded.
    static func loaded(interval: Double = 10, at t: Double = 100) -> KeyFetchPolicy {
        var p = KeyFetchPolicy(minInterval: .seconds(interval))
        #expect(p.refreshRequested(now: time(t)) == .start(Fetch(id: 1, startedAt: time(t))))
        #expect(p.fetchCompleted(id: 1, succeeded: true, now: time(t + 0.1)) == .none)
        return p
    }

    @Test("no recent fetch: the unknown kid starts one and waits for it; its success without the kid is a 401")
    func waitsForItsOwnFetch() {
        var p = Self.loaded()
        let d = p.unknownKid("kid-1", arrivedAt: time(120), now: time(120))
        #expect(d == .init(answer: .waitFor(fetchID: 2), effect: .startFetch(Fetch(id: 2, startedAt: time(120)))))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(120.2)) == .none)
        #expect(p.unknownKid("kid-1", arrivedAt: time(120), now: time(120.2), mayWait: false) == .init(answer: .unknownKid, effect: .none))
    }

    @Test("the scanner-then-rotation race: a genuine kid inside the window gets 503 and a fetch owed, not 401")
    func genuineKidInsideTheWindow() {
        var p = Self.loaded()
        // A made-up kid at 200: its own fetch, then 401.
        #expect(p.unknownKid("scanner", arrivedAt: time(200), now: time(200)).effect == .startFetch(Fetch(id: 2, startedAt: time(200))))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(200.1)) == .none)
        #expect(p.unknownKid("scanner", arrivedAt: time(200), now: time(200.1), mayWait: false).answer == .unknownKid)
        // Apple rotates at 200.3 and signs with the new key at 203: that fetch began before → 503.
        let d = p.unknownKid("rotated", arrivedAt: time(203), now: time(203))
        #expect(d == .init(answer: .unavailable(retryAfter: 8), effect: .scheduleTimer(at: time(210))))
        #expect(p.fetchOwed)
        // A second one in the same window: still 503, no second timer.
        #expect(p.unknownKid("rotated-2", arrivedAt: time(204.5), now: time(204.5)) == .init(answer: .unavailable(retryAfter: 7), effect: .none))
        // The timer fires: the owed fetch starts (after both arrivals).
        #expect(p.timerFired(now: time(210)) == .startFetch(Fetch(id: 3, startedAt: time(210))))
        #expect(!p.fetchOwed)
        #expect(p.fetchCompleted(id: 3, succeeded: true, now: time(210.1)) == .none)
        p.forget(["rotated"])  // the key store found it: verified from now on, never asked about again
        #expect(p.sightings.firstSeen("rotated") == nil)
        // A kid first seen inside the next window is again 503 (never a 401 it cannot be sure of)…
        #expect(p.unknownKid("kid-7", arrivedAt: time(211), now: time(211)).answer == .unavailable(retryAfter: 10))
        // …but the scanner's retry is a 401: fetches after its first sighting lacked it.
        #expect(p.unknownKid("scanner", arrivedAt: time(211.5), now: time(211.5)) == .init(answer: .unknownKid, effect: .none))
    }

    @Test("single flight: unknown kids arriving while a fetch runs that began before them get 503; one follow-up fetch")
    func singleFlight() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid("kid-8", arrivedAt: time(110), now: time(110)).effect == .startFetch(Fetch(id: 2, startedAt: time(110))))
        for i in 0..<1000 {
            let t = 110.001 + Double(i) * 0.0001
            let d = p.unknownKid("kid-9", arrivedAt: time(t), now: time(t))
            #expect(d.answer == .unavailable(retryAfter: 2))
            #expect(d.effect == .none)  // the completion takes care of the owed fetch
        }
        #expect(p.inFlight == Fetch(id: 2, startedAt: time(110)))
        // Completes before the interval is over: the owed fetch is scheduled at 111.
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(110.5)) == .scheduleTimer(at: time(111)))
        #expect(p.timerFired(now: time(111)) == .startFetch(Fetch(id: 3, startedAt: time(111))))
    }

    @Test("a request that arrived before a fetch another request started waits for that fetch")
    func waitsForAFetchStartedAfterItsArrival() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid("kid-10", arrivedAt: time(110.002), now: time(110.002)).effect == .startFetch(Fetch(id: 2, startedAt: time(110.002))))
        #expect(p.unknownKid("kid-11", arrivedAt: time(110.001), now: time(110.003)) == .init(answer: .waitFor(fetchID: 2), effect: .none))
        // With mayWait false (after a timed-out wait) it is a 503 instead.
        #expect(p.unknownKid("kid-11", arrivedAt: time(110.001), now: time(115), mayWait: false).answer == .unavailable(retryAfter: 1))
    }

    @Test("a fetch that began after arrival and failed: 503, and the owed fetch is retried after the interval")
    func failedFetch() {
        var p = Self.loaded(interval: 2)
        #expect(p.unknownKid("kid-13", arrivedAt: time(110), now: time(110)).effect == .startFetch(Fetch(id: 2, startedAt: time(110))))
        #expect(p.fetchCompleted(id: 2, succeeded: false, now: time(111)) == .none)
        #expect(
            p.unknownKid("kid-13", arrivedAt: time(110), now: time(111), mayWait: false)
                == .init(answer: .unavailable(retryAfter: 2), effect: .scheduleTimer(at: time(112))))
        // A long-past failure does not block a new fetch: the next unknown kid starts one.
        #expect(p.timerFired(now: time(112)) == .startFetch(Fetch(id: 3, startedAt: time(112))))
        #expect(p.fetchCompleted(id: 3, succeeded: false, now: time(112.5)) == .none)
        #expect(p.unknownKid("kid-15", arrivedAt: time(150), now: time(150)).effect == .startFetch(Fetch(id: 4, startedAt: time(150))))
    }

    @Test("the owed fetch starts at once when the interval has already passed at completion")
    func owedFetchAfterASlowFetch() {
        var p = Self.loaded(interval: 1)
        #expect(p.unknownKid("kid-16", arrivedAt: time(110), now: time(110)).effect == .startFetch(Fetch(id: 2, startedAt: time(110))))
        #expect(p.unknownKid("kid-17", arrivedAt: time(111), now: time(111)).answer == .unavailable(retryAfter: 1))
        #expect(p.fetchCompleted(id: 2, succeeded: false, now: time(115)) == .startFetch(Fetch(id: 3, startedAt: time(115))))
    }

    @Test("explicit refresh: starts when allowed, joins a fetch in flight, else rate limited")
    func refresh() {
        var p = KeyFetchPolicy(minInterval: .seconds(10))
        #expect(p.mayStart(now: time(0)))
        #expect(p.refreshRequested(now: time(0)) == .start(Fetch(id: 1, startedAt: time(0))))
        #expect(!p.mayStart(now: time(0.5)))
        #expect(p.refreshRequested(now: time(0.5)) == .join(Fetch(id: 1, startedAt: time(0))))
        #expect(p.fetchCompleted(id: 1, succeeded: true, now: time(1)) == .none)
        #expect(p.refreshRequested(now: time(5)) == .rateLimited)
        #expect(p.refreshRequested(now: time(10)) == .start(Fetch(id: 2, startedAt: time(10))))
        // A completion for a fetch that is not in flight changes nothing.
        #expect(p.fetchCompleted(id: 1, succeeded: false, now: time(11)) == .none)
        #expect(p.inFlight?.id == 2)
    }

    @Test("a timer that fires early is armed again; interval 0 never rate limits")
    func timerEarlyAndZeroInterval() {
        var p = Self.loaded(interval: 3, at: 0)
        #expect(p.unknownKid("kid-18", arrivedAt: time(1), now: time(1)).effect == .scheduleTimer(at: time(3)))
        #expect(p.timerFired(now: time(2.999)) == .scheduleTimer(at: time(3)))
        #expect(p.timerAt == time(3))
        var z = Self.loaded(interval: 0, at: 0)
        #expect(z.unknownKid("kid-19", arrivedAt: time(0.2), now: time(0.2)).effect == .startFetch(Fetch(id: 2, startedAt: time(0.2))))
    }

    @Test("Retry-After reaches past the next allowed start and is at least 1")
    func retryAfter() {
        var p = Self.loaded(interval: 3600, at: 0)
        #expect(p.unknownKid("kid-20", arrivedAt: time(0.5), now: time(0.5)).answer == .unavailable(retryAfter: 3601))
        var q = Self.loaded(interval: 1, at: 0)
        #expect(q.unknownKid("kid-21", arrivedAt: time(0.99), now: time(0.99)).answer == .unavailable(retryAfter: 2))
    }

    @Test("a made-up kid gets at most one 503: its retry after Retry-After is a 401, and so is every later one, with no fetch")
    func madeUpKidAtMostOne503() {
        var p = Self.loaded()  // loaded at 100, interval 10
        // Inside the interval: 503, and the fetch it is owed is scheduled at 110.
        let first = p.unknownKid("made-up", arrivedAt: time(105), now: time(105))
        #expect(first == .init(answer: .unavailable(retryAfter: 6), effect: .scheduleTimer(at: time(110))))
        #expect(p.sightings.firstSeen("made-up") == time(105))
        #expect(p.timerFired(now: time(110)) == .startFetch(Fetch(id: 2, startedAt: time(110))))
        // A retry while that fetch runs waits for it (it began after the first sighting).
        #expect(p.unknownKid("made-up", arrivedAt: time(110.05), now: time(110.05)) == .init(answer: .waitFor(fetchID: 2), effect: .none))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(110.2)) == .none)
        #expect(p.unknownKid("made-up", arrivedAt: time(110.05), now: time(110.2), mayWait: false) == .init(answer: .unknownKid, effect: .none))
        // Apple-style retries after the Retry-After (arrivals after the last fetch): 401 each, no fetch.
        for t in [111.0, 112, 300, 5000] {
            #expect(p.unknownKid("made-up", arrivedAt: time(t), now: time(t)) == .init(answer: .unknownKid, effect: .none), "retry at \(t)")
        }
        #expect(p.inFlight == nil)
        #expect(p.lastStart == time(110))
        #expect(!p.fetchOwed)
    }

    @Test("a made-up kid whose owed fetch failed stays 503 (failing), and becomes 401 once a later fetch succeeds without it")
    func madeUpKidWhileFetchesFail() {
        var p = Self.loaded()
        #expect(p.unknownKid("made-up", arrivedAt: time(105), now: time(105)).answer == .unavailable(retryAfter: 6))
        #expect(p.timerFired(now: time(110)) == .startFetch(Fetch(id: 2, startedAt: time(110))))
        #expect(p.fetchCompleted(id: 2, succeeded: false, now: time(110.5)) == .none)
        // Failing: 503 again, with another fetch owed after the interval.
        #expect(
            p.unknownKid("made-up", arrivedAt: time(111), now: time(111))
                == .init(answer: .unavailable(retryAfter: 10), effect: .scheduleTimer(at: time(120))))
        #expect(p.timerFired(now: time(120)) == .startFetch(Fetch(id: 3, startedAt: time(120))))
        #expect(p.fetchCompleted(id: 3, succeeded: true, now: time(120.1)) == .none)
        #expect(p.unknownKid("made-up", arrivedAt: time(122), now: time(122)).answer == .unknownKid)
    }

    @Test("a real new key published between the first sighting and the owed fetch: 503, the fetch finds it, the sighting is forgotten")
    func realNewKeyPublishedBetween() {
        var p = Self.loaded()
        // Apple's first token with its new key, before our key set has it: 503 and a fetch owed.
        #expect(
            p.unknownKid("apple-new", arrivedAt: time(104), now: time(104))
                == .init(answer: .unavailable(retryAfter: 7), effect: .scheduleTimer(at: time(110))))
        // Apple publishes the key at 106; the owed fetch starts at 110, after the sighting, and finds it.
        #expect(p.timerFired(now: time(110)) == .startFetch(Fetch(id: 2, startedAt: time(110))))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(110.2)) == .none)
        p.forget(["apple-new", "test-key-1"])
        #expect(p.sightings.firstSeen("apple-new") == nil)
        #expect(p.sightings.count == 0)
        // Apple retires it a year later and a token names it again: seen for the first time again,
        // so it is never refused on the strength of a fetch that found it.
        let later = 100 + 365 * 86_400.0
        #expect(
            p.unknownKid("apple-new", arrivedAt: time(later), now: time(later))
                == .init(answer: .waitFor(fetchID: 3), effect: .startFetch(Fetch(id: 3, startedAt: time(later)))))
    }

    @Test("the sightings are bounded: the oldest is evicted beyond the capacity, and old ones expire")
    func sightingsBounded() {
        var flood = KeyFetchPolicy(minInterval: .seconds(10))
        for i in 0..<10_000 { _ = flood.unknownKid("random-\(i)", arrivedAt: time(Double(i) * 0.001), now: time(Double(i) * 0.001)) }
        #expect(flood.sightings.count == UnknownKidSightings.defaultCapacity)
        #expect(flood.sightings.firstSeen("random-0") == nil)
        #expect(flood.sightings.firstSeen("random-9999") == time(Double(9999) * 0.001))

        var s = UnknownKidSightings(capacity: 3, lifetime: .seconds(100))
        #expect(s.record("a", at: time(1), now: time(1)) == time(1))
        #expect(s.record("b", at: time(2), now: time(2)) == time(2))
        #expect(s.record("a", at: time(3), now: time(3)) == time(1))  // seen before: its first sighting stays
        #expect(s.record("c", at: time(4), now: time(4)) == time(4))
        #expect(s.record("d", at: time(5), now: time(5)) == time(5))  // full: "a", the oldest, goes
        #expect(s.count == 3)
        #expect(s.firstSeen("a") == nil)
        #expect(s.firstSeen("b") == time(2))
        s.forget(["c"])
        #expect(s.count == 2)
        #expect(s.record("e", at: time(6), now: time(6)) == time(6))  // room again: nothing evicted
        #expect(s.firstSeen("b") == time(2))
        // After the lifetime, old sightings go.
        #expect(s.record("f", at: time(104), now: time(104)) == time(104))
        #expect(s.firstSeen("b") == nil)
        #expect(s.firstSeen("d") == time(5))
        #expect(s.record("b", at: time(104.5), now: time(104.5)) == time(104.5))

        // An evicted made-up kid is seen for the first time again: a 503, never a wrongful 401.
        var p = KeyFetchPolicy(minInterval: .seconds(10), sightingCapacity: 2)
        #expect(p.refreshRequested(now: time(100)) == .start(Fetch(id: 1, startedAt: time(100))))
        #expect(p.fetchCompleted(id: 1, succeeded: true, now: time(100.1)) == .none)
        #expect(p.unknownKid("x", arrivedAt: time(105), now: time(105)).answer == .unavailable(retryAfter: 6))
        #expect(p.timerFired(now: time(110)) == .startFetch(Fetch(id: 2, startedAt: time(110))))
        #expect(p.fetchCompleted(id: 2, succeeded: true, now: time(110.1)) == .none)
        #expect(p.unknownKid("x", arrivedAt: time(111), now: time(111)).answer == .unknownKid)
        _ = p.unknownKid("y", arrivedAt: time(112), now: time(112))
        _ = p.unknownKid("z", arrivedAt: time(113), now: time(113))
        #expect(p.sightings.count == 2)
        #expect(p.unknownKid("x", arrivedAt: time(114), now: time(114)).answer == .unavailable(retryAfter: 7))
    }
}

/// The scheduled refresh's backoff while key fetches fail, and its log-worthy transitions.
@Suite struct KeyRefreshBackoffTests {
    @Test("the wait doubles from the base up to the limit")
    func doubling() {
        let b = KeyRefreshBackoff(baseDelay: .seconds(10), maxDelay: .seconds(300))
        #expect((1...8).map { b.delay(afterFailures: $0) } == [10, 20, 40, 80, 160, 300, 300, 300].map(Duration.seconds))
        #expect(b.delay(afterFailures: 10_000) == .seconds(300))
    }

    @Test("failing: due only after the backoff, not every check; one .failing, then .recovered once")
    func transitionsAndDueTimes() {
        var b = KeyRefreshBackoff(baseDelay: .seconds(10), maxDelay: .seconds(40))
        #expect(b.isDue(now: time(0), expiresAt: nil))  // nothing loaded yet
        #expect(b.fetchCompleted(succeeded: false, now: time(0)) == .failing)
        #expect(!b.isDue(now: time(9.9), expiresAt: nil))
        #expect(b.isDue(now: time(10), expiresAt: nil))
        var transitions: [KeyRefreshBackoff.Transition] = []
        var now = 10.0
        var tries: [Double] = []
        while now < 200 {
            if b.isDue(now: time(now), expiresAt: nil) {
                tries.append(now)
                transitions.append(b.fetchCompleted(succeeded: false, now: time(now)))
            }
            now += 1  // the refresher checks every second
        }
        #expect(tries == [10, 30, 70, 110, 150, 190])
        #expect(transitions.allSatisfy { $0 == .none })
        #expect(b.failures == 7)
        #expect(b.fetchCompleted(succeeded: true, now: time(200)) == .recovered(failures: 7))
        #expect(b.fetchCompleted(succeeded: true, now: time(300)) == .none)
        // Fine again: due when the TTL runs out, not before.
        #expect(!b.isDue(now: time(301), expiresAt: time(3900)))
        #expect(b.isDue(now: time(3900), expiresAt: time(3900)))
        #expect(b.retryAt == nil)
    }
}
