import Testing

@testable import SiwaCore

/// The reconciliation pace's arithmetic and the duration syntax of `SIWA_RECONCILE_EVERY`. The
/// pace itself (slots shared by every process, 10,000 tokens over an interval) is tested with the
/// real reconciler, database and fake Apple in `ReconcileTests`.
@Suite struct ReconcileScheduleTests {
    @Test func spacingFollowsTheTokenCountWithAFloor() {
        let schedule = ReconcileSchedule(interval: 3600, minimumSpacing: 0.01, maximumSpacing: 60)
        #expect(schedule.spacing(tokens: 0) == 60 && schedule.spacing(tokens: 3600) == 1)
        #expect(schedule.spacing(tokens: 10_000_000) == 0.01)
    }

    @Test("a claim takes the tokens of batchSpan seconds of slots: one when the spacing is wide, never past the cap")
    func batchFitsItsSpan() {
        let schedule = ReconcileSchedule(interval: 86_400, batchSpan: 5, maximumBatch: 100, leaseMargin: 60)
        #expect(schedule.batchSize(spacing: 60) == 1)
        #expect(schedule.batchSize(spacing: 12.5) == 1)
        #expect(schedule.batchSize(spacing: 0.864) == 5)  // 100,000 tokens a day
        #expect(schedule.batchSize(spacing: 0.001) == 100)
        #expect(schedule.batchSize(spacing: 0) == 100)
        // The whole batch's slots fit well inside any token's lease (its own slot + margin).
        for spacing in [0.001, 0.5, 0.864, 4.9, 12.5, 60] {
            #expect(Double(schedule.batchSize(spacing: spacing) - 1) * spacing <= schedule.batchSpan)
        }
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
