import Foundation
import SiwaPostgres

/// Operator queries on the outbox: `replay` and `status`.
public enum OutboxAdmin {
    /// Which dead events to put back in the queue.
    public enum ReplaySelection: Sendable, Equatable {
        case ids([Int64])
        case type(String)
        case all
    }

    /// Requeues dead events (status `pending`, attempts reset); returns how many.
    public static func replay(_ selection: ReplaySelection, conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify replay")
        let base = """
            UPDATE siwa.events SET status = 'pending', attempts = 0, next_attempt_at = now(), last_error = NULL
            WHERE status = 'dead'
            """
        switch selection {
        case .all:
            return try connection.execute(base).affectedRows
        case .type(let type):
            return try connection.execute(base + " AND type = $1", [type]).affectedRows
        case .ids(let ids):
            let list = "{" + ids.map(String.init).joined(separator: ",") + "}"
            return try connection.execute(base + " AND id = ANY($1::bigint[])", [list]).affectedRows
        }
    }

    /// What `status` shows.
    public struct Report: Sendable, Codable, Equatable {
        public struct Count: Sendable, Codable, Equatable {
            public var type: String
            public var status: String
            public var lastHour: Int
            public var lastDay: Int
        }

        public struct Recent: Sendable, Codable, Equatable {
            public var id: Int64
            public var type: String
            public var status: String
            public var receivedAt: String
            public var attempts: Int
        }

        public var pending: Int
        public var failed: Int
        public var dead: Int
        public var oldestPendingAgeSeconds: Double
        public var keySetAgeSeconds: Double?
        public var counts: [Count]
        public var recent: [Recent]
    }

    public static func status(conninfo: String) throws -> Report {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify status")
        let backlog = try c.execute("SELECT pending, failed, dead, oldest_pending_age_seconds FROM siwa.backlog")
        let row = backlog.rows.first ?? []
        func int(_ i: Int) -> Int { Int(row.count > i ? row[i] ?? "0" : "0") ?? 0 }
        let keyAge = try c.execute("SELECT extract(epoch FROM now() - max(fetched_at)) FROM siwa.key_sets").scalar.flatMap(Double.init)
        let counts = try c.execute("""
            SELECT type, status,
                   count(*) FILTER (WHERE received_at > now() - interval '1 hour'),
                   count(*)
            FROM siwa.events
            WHERE (received_at AT TIME ZONE 'UTC')::date >= (now() AT TIME ZONE 'UTC')::date - 1
              AND received_at > now() - interval '1 day'
            GROUP BY 1, 2 ORDER BY 1, 2
            """).rows.map { r in
                Report.Count(type: r[0] ?? "", status: r[1] ?? "", lastHour: Int(r[2] ?? "0") ?? 0, lastDay: Int(r[3] ?? "0") ?? 0)
            }
        let recent = try c.execute("""
            SELECT id, type, status, to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), attempts
            FROM siwa.events ORDER BY id DESC LIMIT 10
            """).rows.map { r in
                Report.Recent(id: Int64(r[0] ?? "0") ?? 0, type: r[1] ?? "", status: r[2] ?? "", receivedAt: r[3] ?? "",
                              attempts: Int(r[4] ?? "0") ?? 0)
            }
        return Report(pending: int(0), failed: int(1), dead: int(2),
                      oldestPendingAgeSeconds: Double(row.count > 3 ? row[3] ?? "0" : "0") ?? 0,
                      keySetAgeSeconds: keyAge, counts: counts, recent: recent)
    }

    /// The report as a readable table.
    public static func render(_ r: Report) -> String {
        var out = ""
        out += table(["backlog", "value"], [
            ["pending", String(r.pending)],
            ["failed (will retry)", String(r.failed)],
            ["dead letters", String(r.dead)],
            ["oldest pending", duration(r.oldestPendingAgeSeconds)],
            ["key set age", r.keySetAgeSeconds.map(duration) ?? "none stored"],
        ])
        out += "\n" + table(["type", "status", "last hour", "last day"],
                            r.counts.map { [$0.type, $0.status, String($0.lastHour), String($0.lastDay)] })
        out += "\n" + table(["id", "type", "status", "received (UTC)", "attempts"],
                            r.recent.map { [String($0.id), $0.type, $0.status, $0.receivedAt, String($0.attempts)] })
        return out
    }

    static func duration(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s < 120 { return "\(s)s" }
        if s < 7200 { return "\(s / 60)m" }
        if s < 172_800 { return "\(s / 3600)h" }
        return "\(s / 86400)d"
    }

    static func table(_ header: [String], _ rows: [[String]]) -> String {
        var widths = header.map(\.count)
        for row in rows {
            for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces) + "\n"
        }
        var out = line(header) + line(widths.map { String(repeating: "-", count: $0) })
        if rows.isEmpty { out += "(none)\n" }
        for row in rows { out += line(row) }
        return out
    }
}
