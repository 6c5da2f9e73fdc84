import Testing

@testable import SiwaCore

/// The reconciliation pace's arithmetic and the duration syntax of `SIWA_RECONCILE_EVERY`. The
/// pace itself (slots shared by every process, 10,000 tokens over an interval) is tested with the
/// real reconciler, database and fake Apple in `ReconcileTests`.
@Suite struct ReconcileScheduleTests {
    @Test func spacingFollowsTheTokenCountWithAFloor() {
        let schedule = ReconcileSchedule(interval: .seconds(3600), minimumSpacing: .milliseconds(10), maximumSpacing: .seconds(60))
        #expect(schedule.spacing(tokens: 0) == .seconds(60) && schedule.spacing(tokens: 3600) == .seconds(1))
        #expect(schedule.spacing(tokens: 10_000_000) == .milliseconds(10))
    }

    @Test("a claim takes the tokens of batchSpan seconds of slots: one when the spacing is wide, never past the cap")
    func batchFitsItsSpan() {
        let schedule = ReconcileSchedule(interval: .seconds(86_400), batchSpan: .seconds(5), maximumBatch: 100, leaseMargin: .seconds(60))
        #expect(schedule.batchSize(spacing: .seconds(60)) == 1)
        #expect(schedule.batchSize(spacing: .milliseconds(12_500)) == 1)
        #expect(schedule.batchSize(spacing: .milliseconds(864)) == 5)  // 100,000 tokens a day
        #expect(schedule.batchSize(spacing: .milliseconds(1)) == 100)
        #expect(schedule.batchSize(spacing: .zero) == 100)
        // The whole batch's slots fit well inside any token's lease (its own slot + margin).
        for ms in [1, 500, 864, 4900, 12_500, 60_000] {
            let spacing = Duration.milliseconds(ms)
            #expect(spacing * (schedule.batchSize(spacing: spacing) - 1) <= schedule.batchSpan)
        }
    }

    @Test func transientFailuresBackOffWithinOneInterval() {
        let schedule = ReconcileSchedule(interval: .seconds(86_400))
        #expect(schedule.retryDelay(failures: 1, retryAfter: nil, jitter: 0) == .seconds(30))
        #expect(schedule.retryDelay(failures: 3, retryAfter: nil, jitter: 0) == .seconds(120))
        #expect(schedule.retryDelay(failures: 1, retryAfter: .seconds(600), jitter: 0) == .seconds(600))
        #expect(schedule.retryDelay(failures: 40, retryAfter: nil, jitter: 0.9) <= .seconds(86_400))
        let short = ReconcileSchedule(interval: .seconds(10))
        #expect(short.retryDelay(failures: 1, retryAfter: .seconds(3600), jitter: 0) == .seconds(10))
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

        #expect(try ServerConfiguration.load(environment: [:], requireAudiences: false).reconcileEvery == .seconds(86_400))
        #expect(try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "0"], requireAudiences: false).reconcileEvery == .zero)
        #expect(
            try ServerConfiguration.load(environment: ["SIWA_RECONCILE_EVERY": "12h"], requireAudiences: false).reconcileEvery == .seconds(43_200))
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
