import Foundation
import SiwaBuildInfo
import Synchronization

/// Process metrics, rendered in the Prometheus text exposition format on the admin listener.
public final class Metrics: Sendable {
    struct Histogram {
        static let bounds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
        var buckets = [UInt64](repeating: 0, count: Histogram.bounds.count)
        var count: UInt64 = 0
        var sum: Double = 0

        mutating func observe(_ seconds: Double) {
            for (i, bound) in Histogram.bounds.enumerated() where seconds <= bound {
                buckets[i] += 1
            }
            count += 1
            sum += seconds
        }
    }

    struct State {
        var requests: [String: UInt64] = [:]  // "status|reason"
        var events: [String: UInt64] = [:]  // "outcome|type"
        var keyRefreshes: [String: UInt64] = [:]  // "result"
        var revocations: [String: UInt64] = [:]  // "outcome"
        var verification = Histogram()
        var commit = Histogram()
        var forwards: [String: UInt64] = [:]  // "outcome|type"
        var forwardDelivery = Histogram()
        var reconcile: [String: UInt64] = [:]  // "outcome"
        var providerCalls: [String: UInt64] = [:]  // "target|outcome"
    }

    private let state = Mutex(State())

    /// The writer whose drops `siwa_log_lines_dropped_total` counts (stderr's in the product).
    private let logWriter: LogWriter

    public init(logWriter: LogWriter = .standardError) {
        self.logWriter = logWriter
    }

    public func request(status: Int, reason: String) {
        state.withLock { $0.requests["\(status)|\(reason)", default: 0] += 1 }
    }

    /// `outcome` is applied, failed (will retry) or dead.
    public func event(outcome: String, type: String) {
        state.withLock { $0.events["\(outcome)|\(type)", default: 0] += 1 }
    }

    /// A revocation attempt at Apple ended: `revoked` (done: confirmed, or no token),
    /// `unconfirmed` (the token still worked after Apple's 200: revoked again), `failed` (will
    /// retry) or `dead`.
    public func revocation(outcome: String) {
        state.withLock { $0.revocations[outcome, default: 0] += 1 }
    }

    public func keyRefresh(succeeded: Bool) {
        state.withLock { $0.keyRefreshes[succeeded ? "success" : "failure", default: 0] += 1 }
    }

    /// A reconciliation validation: `valid`, `grant_gone`, `superseded` (gone, but the token was
    /// replaced by a new sign-in meanwhile) or `error` (429, 5xx, network, a key).
    public func reconcile(outcome: String) {
        state.withLock { $0.reconcile[outcome, default: 0] += 1 }
    }

    public func observeVerification(seconds: Double) {
        state.withLock { $0.verification.observe(seconds) }
    }

    public func observeCommit(seconds: Double) {
        state.withLock { $0.commit.observe(seconds) }
    }

    /// A forward attempt: `outcome` is delivered, failed (will retry) or dead.
    public func forward(outcome: String, type: String) {
        state.withLock { $0.forwards["\(outcome)|\(type)", default: 0] += 1 }
    }

    /// A hosted provider call's attempt: `outcome` is done, user_unknown, retry or dead.
    public func providerCall(target: String, outcome: String) {
        state.withLock { $0.providerCalls["\(target)|\(outcome)", default: 0] += 1 }
    }

    /// A delivering attempt: from its POST to the commit that recorded it delivered.
    public func observeForwardDelivery(seconds: Double) {
        state.withLock { $0.forwardDelivery.observe(seconds) }
    }

    /// Renders everything; `gauges` are values read at scrape time (backlog, pool use...).
    public func render(gauges: [(name: String, help: String, value: Double)]) -> String {
        let s = state.withLock { $0 }
        var out = ""
        out += "# HELP siwa_build_info The release (semantic version) and commit of this process; always 1.\n"
        out += "# TYPE siwa_build_info gauge\n"
        out += "siwa_build_info{version=\"\(BuildInfo.version)\",commit=\"\(BuildInfo.commit)\"} 1\n"
        out += "# HELP siwa_requests_total Notification requests answered, by HTTP status and reason code.\n"
        out += "# TYPE siwa_requests_total counter\n"
        for key in s.requests.keys.sorted() {
            let parts = key.split(separator: "|", omittingEmptySubsequences: false)
            out += "siwa_requests_total{status=\"\(parts[0])\",reason=\"\(parts[1])\"} \(s.requests[key]!)\n"
        }
        out += "# HELP siwa_events_total Outbox events processed by the worker, by outcome and type.\n"
        out += "# TYPE siwa_events_total counter\n"
        for key in s.events.keys.sorted() {
            let parts = key.split(separator: "|", omittingEmptySubsequences: false)
            out += "siwa_events_total{outcome=\"\(parts[0])\",type=\"\(Self.escape(String(parts[1])))\"} \(s.events[key]!)\n"
        }
        out += "# HELP siwa_key_refreshes_total Fetches of the signing key set, by result.\n"
        out += "# TYPE siwa_key_refreshes_total counter\n"
        for key in s.keyRefreshes.keys.sorted() {
            out += "siwa_key_refreshes_total{result=\"\(key)\"} \(s.keyRefreshes[key]!)\n"
        }
        out += "# HELP siwa_revocations_total Refresh-token revocations at Apple, by outcome.\n"
        out += "# TYPE siwa_revocations_total counter\n"
        for key in s.revocations.keys.sorted() {
            out += "siwa_revocations_total{outcome=\"\(key)\"} \(s.revocations[key]!)\n"
        }
        out += "# HELP siwa_reconcile_total Stored refresh tokens validated at Apple by reconciliation, by outcome.\n"
        out += "# TYPE siwa_reconcile_total counter\n"
        for outcome in ["valid", "grant_gone", "superseded", "error"] {
            out += "siwa_reconcile_total{outcome=\"\(outcome)\"} \(s.reconcile[outcome, default: 0])\n"
        }
        out += Self.render(name: "siwa_verification_seconds", help: "Time to verify a notification.", s.verification)
        out += Self.render(name: "siwa_commit_seconds", help: "Time to commit a notification to the outbox.", s.commit)
        out += "# HELP siwa_forwards_total Forward attempts to SIWA_FORWARD_URL, by outcome and type.\n"
        out += "# TYPE siwa_forwards_total counter\n"
        for key in s.forwards.keys.sorted() {
            let parts = key.split(separator: "|", omittingEmptySubsequences: false)
            out += "siwa_forwards_total{outcome=\"\(parts[0])\",type=\"\(Self.escape(String(parts[1])))\"} \(s.forwards[key]!)\n"
        }
        out += Self.render(
            name: "siwa_forward_delivery_seconds", help: "Time from a forward's POST to its commit as delivered.", s.forwardDelivery)
        out += "# HELP siwa_provider_calls_total Calls to the hosted identity providers (SIWA_APPLY_TO), by target and outcome.\n"
        out += "# TYPE siwa_provider_calls_total counter\n"
        for key in s.providerCalls.keys.sorted() {
            let parts = key.split(separator: "|", omittingEmptySubsequences: false)
            out += "siwa_provider_calls_total{target=\"\(parts[0])\",outcome=\"\(parts[1])\"} \(s.providerCalls[key]!)\n"
        }
        out += Self.renderLogDrops(logWriter.statistics.droppedLines)
        for gauge in gauges {
            out += "# HELP \(gauge.name) \(gauge.help)\n# TYPE \(gauge.name) gauge\n\(gauge.name) \(Self.format(gauge.value))\n"
        }
        return out
    }

    private static func render(name: String, help: String, _ h: Histogram) -> String {
        var out = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        for (i, bound) in Histogram.bounds.enumerated() {
            out += "\(name)_bucket{le=\"\(format(bound))\"} \(h.buckets[i])\n"
        }
        out += "\(name)_bucket{le=\"+Inf\"} \(h.count)\n\(name)_sum \(format(h.sum))\n\(name)_count \(h.count)\n"
        return out
    }

    private static func format(_ v: Double) -> String {
        v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v)
    }

    /// Log lines stderr could not take (queue full or write failed); see `LogWriter`.
    private static func renderLogDrops(_ dropped: UInt64) -> String {
        "# HELP siwa_log_lines_dropped_total Log lines dropped because stderr was full or closed.\n"
            + "# TYPE siwa_log_lines_dropped_total counter\nsiwa_log_lines_dropped_total \(dropped)\n"
    }

    private static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
