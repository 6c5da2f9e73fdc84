import Foundation
import SiwaApp
import SiwaCore
import SiwaPostgres
import Testing

/// deploy/grafana/siwa-notify.json names only metrics siwa-notify exports, and its SQL runs as
/// `siwa_dashboard` against a migrated database.
@Suite("Grafana dashboard", .needsDatabase)
struct GrafanaDashboardTests {
    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("deploy/grafana/siwa-notify.json")

    /// Every (datasource type, query) of the dashboard's panels, rows' panels included.
    static func queries() throws -> [(kind: String, query: String)] {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any]
        var out: [(String, String)] = []
        func walk(_ panels: [[String: Any]]) {
            for panel in panels {
                walk(panel["panels"] as? [[String: Any]] ?? [])
                for target in panel["targets"] as? [[String: Any]] ?? [] {
                    let source = (target["datasource"] as? [String: Any])?["type"] as? String ?? ""
                    if let expr = target["expr"] as? String { out.append((source, expr)) }
                    if let sql = target["rawSql"] as? String { out.append((source, sql)) }
                }
            }
        }
        walk(object?["panels"] as? [[String: Any]] ?? [])
        return out
    }

    /// Metric names in a PromQL expression (`siwa_…`).
    static func metricNames(_ expr: String) -> Set<String> {
        let regex = try! NSRegularExpression(pattern: "\\bsiwa_[a-z0-9_]+")
        let range = NSRange(expr.startIndex..., in: expr)
        return Set(regex.matches(in: expr, range: range).compactMap { Range($0.range, in: expr).map { String(expr[$0]) } })
    }

    /// Series names of an exposition: each `# TYPE` name, with `_bucket`, `_sum`, `_count` for histograms.
    static func exported(_ exposition: String) -> Set<String> {
        var names: Set<String> = []
        for line in exposition.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let parts = line.split(separator: " ")
            guard parts.count == 4 else { continue }
            let name = String(parts[2])
            names.insert(name)
            if parts[3] == "histogram" { names.formUnion(["_bucket", "_sum", "_count"].map { name + $0 }) }
        }
        return names
    }

    @Test("every metric the dashboard names is exported (forwarding on), and a made-up one is caught")
    func metricsExist() throws {
        let queries = try Self.queries().filter { $0.kind == "prometheus" }
        #expect(queries.count >= 15)
        let named = queries.reduce(into: Set<String>()) { $0.formUnion(Self.metricNames($1.query)) }
        let h = try ForwardingTests.harness(url: "http://127.0.0.1:9/hooks")
        defer { h.stop() }
        var exported: Set<String> = []
        // The database gauges come with the probe's first snapshot.
        #expect(
            try eventually {
                exported = Self.exported(try h.admin("/metrics").body)
                return exported.contains("siwa_forward_backlog") && exported.contains("siwa_database_synchronous_standbys")
                    && exported.contains("siwa_metrics_snapshot_age_seconds")
            })
        let missing = named.subtracting(exported)
        #expect(missing.isEmpty, "named by the dashboard, not exported: \(missing.sorted())")
        #expect(named.contains("siwa_requests_total") && named.contains("siwa_commit_seconds_bucket"))
        #expect(!Self.metricNames("rate(siwa_made_up_total[5m])").isSubset(of: exported))
    }

    @Test("every SQL query runs as siwa_dashboard on a migrated database, read-only")
    func queriesRun() throws {
        let queries = try Self.queries().filter { $0.kind == "grafana-postgresql-datasource" }
        #expect(queries.count >= 5)
        let connection = try PostgresConnection(conninfo: try TestDatabase.create())
        try connection.execute("SET ROLE siwa_dashboard")
        try connection.execute("SET default_transaction_read_only = on")
        for (_, sql) in queries {
            #expect(throws: Never.self, "\(sql)") { _ = try connection.execute(sql) }
        }
        // The role is what limits the dashboard: a query it may not run fails.
        #expect(throws: PostgresError.self) { _ = try connection.execute("SELECT email FROM siwa.events LIMIT 1") }
    }
}
