import Foundation
import SiwaCore
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
        switch selection {
        case .all: return try connection.affected(OperatorStatements.replayAll, ())
        case .type(let type): return try connection.affected(OperatorStatements.replayType, type)
        case .ids(let ids): return try connection.affected(OperatorStatements.replayIDs, ids)
        }
    }

    /// Queues the revocation of a user's Apple tokens and the deletion of the account
    /// (`siwa.request_deletion`); returns how many jobs were queued.
    public static func requestDeletion(sub: String, clientID: String?, conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify revoke")
        return try connection.row(DeletionStatements.request, (sub, clientID)) ?? 0
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
        /// In-app deletion (Apple's REST API) configured in this environment.
        public var inAppDeletion: Bool?
        /// Deletion jobs pending or failed (waiting), and dead.
        public var deletionJobsWaiting: Int?
        public var deletionJobsDead: Int?
        /// App transfer (`siwa.transfers`): identifiers exported; received and mapped to a user,
        /// received and not yet; whole days left of Apple's 60-day window, counted from the first
        /// identifier received (nil before any).
        public var transfers: Transfers?
        /// Reconciliation (`SIWA_RECONCILE_EVERY`): stored tokens validated at Apple at least
        /// once, grants found gone (consent-revoked queued, while their events are kept), tokens
        /// whose last validation failed (retried with backoff).
        public var reconciliation: Reconciliation?

        public struct Reconciliation: Sendable, Codable, Equatable {
            public var validated: Int
            public var grantsGone: Int
            public var failing: Int
        }

        public struct Transfers: Sendable, Codable, Equatable {
            public var exported: Int
            public var mapped: Int
            public var unmapped: Int
            public var daysLeft: Int?
        }
    }

    public static func status(conninfo: String, inAppDeletion: Bool = false) throws -> Report {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify status")
        let backlog =
            try c.row(OperatorStatements.backlog)
            ?? OperatorStatements.Backlog(pending: 0, failed: 0, dead: 0, oldestPendingAgeSeconds: 0)
        let keyAge = try c.row(OperatorStatements.keySetAge) ?? nil
        let counts = try c.rows(OperatorStatements.countsLastDay).map { r in
            Report.Count(type: r.type, status: r.status.rawValue, lastHour: r.lastHour, lastDay: r.lastDay)
        }
        let recent = try c.rows(OperatorStatements.recentEvents).map { r in
            Report.Recent(id: r.id, type: r.type, status: r.status.rawValue, receivedAt: r.receivedAt, attempts: r.attempts)
        }
        let jobs = try c.row(DeletionStatements.jobCounts)
        let transfers = try c.row(TransferStatements.counts).map { t in
            Report.Transfers(
                exported: t.exported, mapped: t.mapped, unmapped: t.unmapped,
                daysLeft: t.importStarted.map { TransferWindow.daysLeft(start: $0, now: Date().timeIntervalSince1970) })
        }
        var report = Report(
            pending: backlog.pending, failed: backlog.failed, dead: backlog.dead,
            oldestPendingAgeSeconds: backlog.oldestPendingAgeSeconds,
            keySetAgeSeconds: keyAge, counts: counts, recent: recent, inAppDeletion: inAppDeletion,
            deletionJobsWaiting: jobs?.waiting, deletionJobsDead: jobs?.dead)
        report.transfers = transfers
        report.reconciliation = try c.row(ReconcileStatements.counts).map {
            Report.Reconciliation(validated: $0.validated, grantsGone: $0.gone, failing: $0.failing)
        }
        return report
    }

    /// The report as a readable table.
    public static func render(_ r: Report) -> String {
        var out = ""
        out += table(
            ["backlog", "value"],
            [
                ["pending", String(r.pending)],
                ["failed (will retry)", String(r.failed)],
                ["dead letters", String(r.dead)],
                ["oldest pending", duration(r.oldestPendingAgeSeconds)],
                ["key set age", r.keySetAgeSeconds.map(duration) ?? "none stored"],
                [
                    "in-app deletion",
                    r.inAppDeletion == true ? "on" : "off (set SIWA_TEAM_ID, SIWA_KEY_ID, SIWA_PRIVATE_KEY_FILE, SIWA_TOKEN_KEY_FILE)",
                ],
                ["deletion jobs waiting", String(r.deletionJobsWaiting ?? 0)],
                ["deletion jobs dead", String(r.deletionJobsDead ?? 0)],
            ] + reconciliationRows(r.reconciliation) + transferRows(r.transfers))
        out +=
            "\n"
            + table(
                ["type", "status", "last hour", "last day"],
                r.counts.map { [$0.type, $0.status, String($0.lastHour), String($0.lastDay)] })
        out +=
            "\n"
            + table(
                ["id", "type", "status", "received (UTC)", "attempts"],
                r.recent.map { [String($0.id), $0.type, $0.status, $0.receivedAt, String($0.attempts)] })
        return out
    }

    static func reconciliationRows(_ r: Report.Reconciliation?) -> [[String]] {
        guard let r else { return [] }
        return [
            ["reconcile: tokens validated", String(r.validated)],
            ["reconcile: grants gone", String(r.grantsGone)],
            ["reconcile: failing (will retry)", String(r.failing)],
        ]
    }

    /// The transfer lines of the first table, when a transfer was ever run here.
    static func transferRows(_ t: Report.Transfers?) -> [[String]] {
        guard let t, t.exported + t.mapped + t.unmapped > 0 else { return [] }
        var rows: [[String]] = []
        if t.exported > 0 { rows.append(["transfer: exported", String(t.exported)]) }
        if t.mapped + t.unmapped > 0 {
            rows.append(["transfer: mapped", String(t.mapped)])
            rows.append(["transfer: unmapped", String(t.unmapped)])
            rows.append(["transfer: days left (of 60)", t.daysLeft.map(String.init) ?? "-"])
        }
        return rows
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
