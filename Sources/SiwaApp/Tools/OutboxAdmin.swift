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

    /// Requeues dead revocations at Apple with a fresh retry window; returns how many.
    public static func replayRevocations(conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify replay")
        return try connection.row(RevocationStatements.replayDead) ?? 0
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

    /// Puts dead provider calls back in the queue: all, or one provider's (`target`).
    public static func replayProviderCalls(target: String?, conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify replay")
        if let target { return try connection.affected(ProviderCallStatements.replayTarget, target) }
        return try connection.affected(ProviderCallStatements.replayAll, ())
    }

    /// Requeues dead forwards (status `pending`, attempts reset, retried for
    /// `SIWA_FORWARD_RETRY_FOR` again); `type` nil: all. Returns how many.
    public static func replayForwards(type: String?, conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify replay")
        if let type { return try connection.affected(ForwardStatements.replayType, type) }
        return try connection.affected(ForwardStatements.replayAll, ())
    }

    /// Queues the revocation of a user's Apple tokens and the deletion of the account
    /// (`siwa.request_deletion`); returns how many deletions were queued (1).
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
        /// Revocations at Apple by status: waiting (pending, running, failed), done, dead,
        /// no_token (a deleted user of whom no token was stored).
        public var revocationsWaiting: Int?
        public var revocationsDone: Int?
        public var revocationsDead: Int?
        public var revocationsNoToken: Int?
        /// Revocations whose token still worked at Apple after Apple's 200 (revoked again with
        /// backoff; `siwa.unconfirmed_revocations`).
        public var revocationsUnconfirmed: Int? = nil
        /// Forwarding (`SIWA_FORWARD_URL`): on in this environment, and its queue.
        public var forwarding: Bool?
        public var forwards: Forwards?
        /// Users per app and status (`siwa.app_account_status_summary`).
        public var apps: [AppCount]? = nil
        /// App transfer (`siwa.transfers`): identifiers exported; received and mapped to a user,
        /// received and not yet; whole days left of Apple's 60-day window, counted from the first
        /// identifier received (nil before any).
        public var transfers: Transfers? = nil
        /// Reconciliation (`SIWA_RECONCILE_EVERY`): stored tokens validated at Apple at least
        /// once, grants found gone (consent-revoked queued, while their events are kept), tokens
        /// whose last validation failed (retried with backoff).
        public var reconciliation: Reconciliation? = nil
        /// What the database promises about a commit answered 200 (README "High availability: what a failover keeps").
        public var durability: DatabaseDurability? = nil
        /// The hosted providers' calls (`SIWA_APPLY_TO`), per provider that has any.
        public var providerCalls: [ProviderCalls]? = nil
        /// This binary's release, the schema's, and the releases running against the database.
        public var releases: ReleaseReport? = nil

        public struct ProviderCalls: Sendable, Codable, Equatable {
            public var target: String
            /// Pending, in flight included.
            public var waiting: Int
            public var inFlight: Int
            public var dead: Int
            public var oldestWaitingAgeSeconds: Double
            public var doneLastHour: Int
            public var userUnknownLastHour: Int
        }

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

    public struct AppCount: Sendable, Codable, Equatable {
        public var aud: String
        public var status: String
        public var accounts: Int
    }

    public struct Forwards: Sendable, Codable, Equatable {
        public var pending: Int
        public var failed: Int
        public var dead: Int
        public var inFlight: Int
        public var oldestWaitingAgeSeconds: Double
        public var deliveredLastHour: Int
        /// POST→delivered of the newest (up to 1000) deliveries of the last hour, in ms.
        public var deliveryP50Millis: Double?
        public var deliveryP99Millis: Double?
    }

    public static func status(conninfo: String, inAppDeletion: Bool = false, forwarding: Bool = false) throws -> Report {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify status")
        let backlog =
            try c.row(OperatorStatements.backlog)
            ?? OperatorStatements.Backlog(pending: 0, failed: 0, dead: 0, oldestPendingAgeSeconds: 0)
        let keyAge = try c.row(OperatorStatements.keySetAge) ?? nil
        let counts = try c.rows(OperatorStatements.countsLastDay).map { r in
            Report.Count(type: r.type, status: r.status.rawValue, lastHour: r.lastHour, lastDay: r.lastDay)
        }
        let apps = try c.rows(OperatorStatements.appAccountCounts).map { AppCount(aud: $0.aud, status: $0.status, accounts: $0.count) }
        let recent = try c.rows(OperatorStatements.recentEvents).map { r in
            Report.Recent(id: r.id, type: r.type, status: r.status.rawValue, receivedAt: r.receivedAt, attempts: r.attempts)
        }
        var revocations: [String: Int] = [:]
        for row in try c.rows(RevocationStatements.counts) { revocations[row.status] = row.count }
        var forwards: Forwards?
        if let f = try c.row(ForwardStatements.backlog), let l = try c.row(ForwardStatements.latency) {
            forwards = Forwards(
                pending: f.pending, failed: f.failed, dead: f.dead, inFlight: f.inFlight,
                oldestWaitingAgeSeconds: f.oldestWaitingAgeSeconds, deliveredLastHour: l.deliveredLastHour,
                deliveryP50Millis: l.p50Millis, deliveryP99Millis: l.p99Millis)
        }
        var report = Report(
            pending: backlog.pending, failed: backlog.failed, dead: backlog.dead,
            oldestPendingAgeSeconds: backlog.oldestPendingAgeSeconds,
            keySetAgeSeconds: keyAge, counts: counts, recent: recent, inAppDeletion: inAppDeletion,
            revocationsWaiting: ["pending", "running", "failed"].reduce(0) { $0 + (revocations[$1] ?? 0) },
            revocationsDone: revocations["done"] ?? 0, revocationsDead: revocations["dead"] ?? 0,
            revocationsNoToken: revocations["no_token"] ?? 0, forwarding: forwarding, forwards: forwards, apps: apps)
        report.revocationsUnconfirmed = try c.row(RevocationStatements.unconfirmedCount) ?? 0
        report.transfers = try c.row(TransferStatements.counts).map { t in
            Report.Transfers(
                exported: t.exported, mapped: t.mapped, unmapped: t.unmapped,
                daysLeft: t.importStarted.map { TransferWindow.daysLeft(start: $0, now: Date().timeIntervalSince1970) })
        }
        report.reconciliation = try c.row(ReconcileStatements.counts).map {
            Report.Reconciliation(validated: $0.validated, grantsGone: $0.gone, failing: $0.failing)
        }
        report.durability = try? DatabaseDurability.read(on: c)
        report.providerCalls = try c.rows(ProviderCallStatements.backlog).filter { $0.pending + $0.dead + $0.doneLastHour > 0 }.map {
            Report.ProviderCalls(
                target: $0.target.rawValue, waiting: $0.pending, inFlight: $0.inFlight, dead: $0.dead,
                oldestWaitingAgeSeconds: $0.oldestWaitingAgeSeconds, doneLastHour: $0.doneLastHour,
                userUnknownLastHour: $0.userUnknownLastHour)
        }
        report.releases = try ReleaseReport.read(on: c)
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
                ["revocations waiting", String(r.revocationsWaiting ?? 0)],
                ["revocations done", String(r.revocationsDone ?? 0)],
                ["revocations dead", String(r.revocationsDead ?? 0)],
                ["revocations unconfirmed", String(r.revocationsUnconfirmed ?? 0)],
                ["deletions without a token", String(r.revocationsNoToken ?? 0)],
            ] + forwardRows(r) + providerRows(r.providerCalls) + reconciliationRows(r.reconciliation) + transferRows(r.transfers)
                + durabilityRows(r.durability) + (r.releases?.rows ?? []))
        out +=
            "\n"
            + table(["app", "status", "users"], (r.apps ?? []).map { [$0.aud, $0.status, String($0.accounts)] })
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

    /// The forwarding lines of the backlog table.
    static func forwardRows(_ r: Report) -> [[String]] {
        let f = r.forwards
        let ms: (Double?) -> String = { $0.map { "\(Int($0.rounded())) ms" } ?? "-" }
        return [
            ["forwarding", r.forwarding == true ? "on" : "off (set SIWA_FORWARD_URL, SIWA_FORWARD_SECRET_FILE)"],
            ["forwards waiting", String((f?.pending ?? 0) + (f?.failed ?? 0)) + " (\(f?.inFlight ?? 0) in flight)"],
            ["forwards failed (will retry)", String(f?.failed ?? 0)],
            ["forwards dead", String(f?.dead ?? 0)],
            ["oldest forward waiting", duration(f?.oldestWaitingAgeSeconds ?? 0)],
            ["forwards delivered (1h)", String(f?.deliveredLastHour ?? 0)],
            ["forward latency p50/p99", "\(ms(f?.deliveryP50Millis)) / \(ms(f?.deliveryP99Millis))"],
        ]
    }

    /// The provider calls' lines of the backlog table: per provider with calls.
    static func providerRows(_ calls: [Report.ProviderCalls]?) -> [[String]] {
        (calls ?? []).flatMap { p in
            [
                ["\(p.target) calls waiting", "\(p.waiting) (\(p.inFlight) in flight)"],
                ["\(p.target) calls dead", String(p.dead)],
                ["oldest \(p.target) call waiting", duration(p.oldestWaitingAgeSeconds)],
                ["\(p.target) calls done (1h)", "\(p.doneLastHour) (\(p.userUnknownLastHour) users unknown)"],
            ]
        }
    }

    /// What a commit answered 200 survives, and the numbers behind it.
    static func durabilityRows(_ d: DatabaseDurability?) -> [[String]] {
        guard let d else { return [["database durability", "unknown (cannot read it)"]] }
        return [
            ["database durability", d.summary],
            ["synchronous standbys", d.synchronousStandbys.map(String.init) ?? "unknown — grant pg_read_all_stats to \(d.role)"],
        ]
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
