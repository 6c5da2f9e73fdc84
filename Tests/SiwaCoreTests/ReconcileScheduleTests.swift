import Testing

@testable import SiwaCore

/// The reconciliation pace, with an injected clock, and the duration syntax of
/// `SIWA_RECONCILE_EVERY`.
@Suite struct ReconcileScheduleTests {
    /// Plays the reconciler's loop over `tokens` tokens, all stored at 0, for `rounds` intervals:
    /// each step reserves a slot, then validates the most overdue token (due again one interval
    /// later), or idles until one is due. Returns every validation as (time, token).
    static func simulate(tokens: Int, interval: Double, rounds: Double) -> [(time: Double, token: Int)] {
        var schedule = ReconcileSchedule(interval: interval)
        // Due times are validation time + interval: first in, first due (a queue suffices).
        var queue = (0..<tokens).map { (due: schedule.firstDue(storedAt: 0), token: $0) }
        var head = 0
        var now = 0.0
        var done: [(time: Double, token: Int)] = []
        while now < rounds * interval {
            now = schedule.nextSlot(now: now, tokens: tokens)
            let next = queue[head]
            guard next.due <= now else {
                now = next.due  // nothing due: idle until the earliest is
                continue
            }
            head += 1
            done.append((now, next.token))
            queue.append((schedule.nextDue(validatedAt: now), next.token))
        }
        return done
    }

    @Test("10,000 tokens: each validated once per interval at most, calls evenly spread, no bursts")
    func tenThousandTokensSpreadOverTheInterval() {
        let interval = 86_400.0
        let n = 10_000
        let done = Self.simulate(tokens: n, interval: interval, rounds: 4)
        let spacing = interval / Double(n)
        // Never two calls closer than interval/n.
        for (a, b) in zip(done, done.dropFirst()) {
            #expect(b.time - a.time >= spacing - 1e-6)
        }
        // No token twice within one interval.
        var last = [Double](repeating: -.infinity, count: n)
        for v in done {
            #expect(v.time - last[v.token] >= interval - 1e-6)
            last[v.token] = v.time
        }
        // Every token is validated in every interval after the first (the first one waits:
        // tokens were valid when stored), and in any tenth of an interval about n/10 calls go out.
        let secondRound = done.filter { $0.time >= interval && $0.time < 2 * interval }
        #expect(Set(secondRound.map(\.token)).count == n)
        for tenth in 10..<30 {
            let window = done.filter { $0.time >= Double(tenth) * interval / 10 && $0.time < Double(tenth + 1) * interval / 10 }
            #expect(window.count <= n / 10 + 1)
        }
    }

    @Test func spacingFollowsTheTokenCountWithAFloor() {
        var schedule = ReconcileSchedule(interval: 3600, minimumSpacing: 0.01, maximumSpacing: 60)
        #expect(schedule.spacing(tokens: 0) == 60 && schedule.spacing(tokens: 3600) == 1)
        #expect(schedule.spacing(tokens: 10_000_000) == 0.01)
        #expect(schedule.nextSlot(now: 50, tokens: 3600) == 50)
        #expect(schedule.nextSlot(now: 50, tokens: 3600) == 51)
        #expect(schedule.nextSlot(now: 80, tokens: 3600) == 80)  // after idling: no catch-up burst
    }

    @Test func transientFailuresBackOffWithinOneInterval() {
        let schedule = ReconcileSchedule(interval: 86_400)
        #expect(schedule.retryAt(now: 0, failures: 1, retryAfter: nil, jitter: 0) == 30)
        #expect(schedule.retryAt(now: 0, failures: 3, retryAfter: nil, jitter: 0) == 120)
        #expect(schedule.retryAt(now: 0, failures: 1, retryAfter: 600, jitter: 0) == 600)
        #expect(schedule.retryAt(now: 0, failures: 40, retryAfter: nil, jitter: 0.9) <= 86_400)
        let short = ReconcileSchedule(interval: 10)
        #expect(short.retryAt(now: 5, failures: 1, retryAfter: 3600, jitter: 0) == 15)
    }

    @Test func durationsTakeAUnit() throws {
        #expect(DurationText.seconds("90s") == 90)
        #expect(DurationText.seconds("30m") == 1800)
        #expect(DurationText.seconds("24h") == 86_400)
        #expect(DurationText.seconds("7d") == 604_800)
        #expect(DurationText.seconds("0") == 0)
        for bad in ["", "24", "1.5h", "-1h", "h", "1w", "1 h", "99999999999999999999d", "٣h"] {
            #expect(DurationText.seconds(bad) == nil, "\(bad)")
        }
        #expect(DurationText.format(86_400) == "1d" && DurationText.format(90) == "90s")

        #expect(try ServerConfiguration.load(environment: [:], requireAudiences: false).reconcileEvery == 86_400)
        #expect(try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "0"], requireAudiences: false).reconcileEvery == 0)
        #expect(try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "12h"], requireAudiences: false).reconcileEvery == 43_200)
        #expect(throws: ConfigurationError.self) {
            try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "86400"], requireAudiences: false)
        }
        do {
            _ = try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "400d"], requireAudiences: false)
            Issue.record("400d was accepted")
        } catch {
            #expect(error.description == "SIWA_RECONCILE_EVERY: must be a duration with a unit (s, m, h, d) between 1s and 365d, or 0 (off)")
        }
    }
}
