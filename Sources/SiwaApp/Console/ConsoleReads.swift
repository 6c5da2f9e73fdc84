import Foundation
import SiwaCore
import SiwaPostgres

/// What the console's pages show, read on one connection (inside the admin pool's transaction
/// with its statement timeout). Each read is an index lookup, the queue, a view, or a bounded
/// range of the events' primary key.
enum ConsoleReads {
    /// Rows of the events' primary key one page of the event list reads at most.
    static let eventWindow: Int64 = 10_000
    /// Events counted into the hourly rollup per refresh (a background task refreshes it every
    /// few seconds: a large database catches up over a few minutes, never in a page's time).
    static let rollupStep: Int64 = 50_000

    // MARK: Time → id

    /// The lowest event id received at or after `time` (Unix seconds), by bisection over the
    /// primary key (ids grow with arrival); nil when every event is older. About 25 probes.
    static func firstID(receivedAtOrAfter time: Double, _ c: PostgresConnection) throws -> Int64? {
        guard let range = try c.row(ConsoleStatements.idRange), let range else { return nil }
        var low = range.low, high = range.high + 1
        var best: Int64?
        // Every id below `low` was received before `time`; `best` is the lowest id seen received
        // at or after it; none between `high` and `best` exists.
        while low < high {
            let mid = low + (high - low) / 2
            guard let probe = try c.row(ConsoleStatements.probe, mid) else {
                high = mid
                continue
            }
            if probe.receivedAt >= time {
                best = min(best ?? probe.id, probe.id)
                high = mid
            } else {
                low = probe.id + 1
            }
        }
        return best
    }

    // MARK: Overview

    struct Overview: Sendable {
        var now: Double
        var backlog: OperatorStatements.Backlog
        var keySets: [ConsoleRow]
        var revocations: [String: Int]
        /// Revocations Apple answered 200 whose token still worked afterwards.
        var revocationsUnconfirmed: Int
        var forwards: ForwardStatements.Backlog?
        var transfers: TransferStatements.Counts?
        var reconcile: (validated: Int, gone: Int, failing: Int)?
        var minuteCharts: [ConsoleChart]
        var hourCharts: [ConsoleChart]
        /// When the newest event counted in the hourly charts arrived (nil: none counted yet).
        var hoursCurrentTo: Double?
        /// What a commit answered 200 survives (nil: it could not be read).
        var durability: DatabaseDurability?
        /// Per hosted provider, its calls (`siwa.provider_call_backlog`).
        var providerCalls: [ProviderCallStatements.Backlog] = []
        /// The schema's release and the releases running (nil: they could not be read).
        var releases: ReleaseReport? = nil
    }

    /// `now`: the wall clock's Unix time.
    static func overview(_ c: PostgresConnection, now: Double) throws -> Overview {
        let backlog =
            try c.row(OperatorStatements.backlog)
            ?? OperatorStatements.Backlog(pending: 0, failed: 0, dead: 0, oldestPendingAgeSeconds: 0)
        var revocations: [String: Int] = [:]
        for row in try c.rows(RevocationStatements.counts) { revocations[row.status] = row.count }
        let currentTo = try c.row(ConsoleStatements.rollupMark).flatMap { mark in
            mark > 0 ? try c.row(ConsoleStatements.rollupCurrentTo, mark) : nil
        }
        return Overview(
            now: now, backlog: backlog, keySets: try c.rows(ConsoleStatements.keySets, ()), revocations: revocations,
            revocationsUnconfirmed: try c.row(RevocationStatements.unconfirmedCount) ?? 0,
            forwards: try c.row(ForwardStatements.backlog), transfers: try c.row(TransferStatements.counts),
            reconcile: try c.row(ReconcileStatements.counts), minuteCharts: try minuteCharts(c, now: now),
            hourCharts: try hourCharts(c, now: now), hoursCurrentTo: currentTo,
            durability: try? DatabaseDurability.read(on: c), providerCalls: try c.rows(ProviderCallStatements.backlog),
            releases: try? ReleaseReport.read(on: c))
    }

    /// Received and applied per minute over the last hour, by type: the events of the last two
    /// hours (an id range found by bisection), grouped.
    static func minuteCharts(_ c: PostgresConnection, now: Double) throws -> [ConsoleChart] {
        let start = (now / 60).rounded(.down) * 60 - 59 * 60
        let buckets = (0..<60).map { start + Double($0) * 60 }
        guard let from = try firstID(receivedAtOrAfter: now - 7200, c) else {
            return [
                chart("Received per minute, last hour", "events/min", buckets, 60, []),
                chart("Applied per minute, last hour", "events/min", buckets, 60, []),
            ]
        }
        let through = try c.row(ConsoleStatements.idRange).flatMap { $0?.high } ?? from
        let received = try c.rows(ConsoleStatements.receivedPerMinute, (from, start, through))
        let applied = try c.rows(ConsoleStatements.appliedPerMinute, (from, start, through))
        return [
            chart("Received per minute, last hour", "events/min", buckets, 60, received.map { ($0.double("t") ?? 0, $0["type"] ?? "", $0.int("n")) }),
            chart("Applied per minute, last hour", "events/min", buckets, 60, applied.map { ($0.double("t") ?? 0, $0["type"] ?? "", $0.int("n")) }),
        ]
    }

    static func hourCharts(_ c: PostgresConnection, now: Double) throws -> [ConsoleChart] {
        let start = (now / 3600).rounded(.down) * 3600 - 167 * 3600
        let buckets = (0..<168).map { start + Double($0) * 3600 }
        let rows = try c.rows(ConsoleStatements.hours, ())
        return [
            chart(
                "Received per hour, last 7 days", "events/h", buckets, 3600, rows.map { ($0.double("t") ?? 0, $0["type"] ?? "", $0.int("received")) }),
            chart(
                "Applied per hour, last 7 days", "events/h", buckets, 3600, rows.map { ($0.double("t") ?? 0, $0["type"] ?? "", $0.int("applied")) }),
        ]
    }

    /// Series by type (types ordered by name), values by bucket.
    static func chart(
        _ title: String, _ unit: String, _ buckets: [Double], _ seconds: Double, _ points: [(t: Double, type: String, n: Int)]
    ) -> ConsoleChart {
        let types = Set(points.map(\.type)).sorted()
        let index = Dictionary(uniqueKeysWithValues: buckets.enumerated().map { (Int64($1), $0) })
        let series = types.map { type in
            var values = [Double](repeating: 0, count: buckets.count)
            for p in points where p.type == type {
                if let i = index[Int64(p.t)] { values[i] += Double(p.n) }
            }
            return ConsoleChart.Series(name: type, values: values, color: ConsoleChart.color(of: type))
        }
        return ConsoleChart(title: title, unit: unit, buckets: buckets, bucketSeconds: seconds, series: series)
    }

    /// Counts the events whose outcome is final since the last refresh into the hourly rollup
    /// (at most `rollupStep` ids; skipped while another process refreshes it). Returns how many
    /// ids it moved past.
    @discardableResult
    static func refreshRollup(_ c: PostgresConnection, now: Double) throws -> Int64 {
        guard let mark = try c.row(ConsoleStatements.lockRollup) else { return 0 }
        var after = mark
        if after == 0, let first = try firstID(receivedAtOrAfter: now - 7 * 86_400, c) {
            after = first - 1
        }
        let bound = try c.row(ConsoleStatements.finalBound) ?? 0
        let through = min(bound, after + rollupStep)
        if through > after {
            try c.affected(ConsoleStatements.rollUp, (after, through))
            try c.affected(ConsoleStatements.setRollupMark, through)
            try c.affected(ConsoleStatements.pruneHours, ())
            after = through
        } else if after != mark {
            try c.affected(ConsoleStatements.setRollupMark, after)
        }
        return after - mark
    }

    // MARK: Events

    struct EventFilter: Sendable, Equatable {
        var type: String?
        var status: String?
        var aud: String?
        /// A `sub` or its 16-hex-digit hash.
        var subject: String?
        /// Received at or after / before (Unix seconds).
        var from: Double?
        var to: Double?
        /// The keyset cursor: ids below it.
        var before: Int64?
    }

    struct EventPage: Sendable, Equatable {
        var rows: [ConsoleRow]
        /// The cursor of the next (older) page; nil at the end.
        var next: Int64?
        /// The subject filter named no known user.
        var unknownSubject = false
    }

    static let pageSize = 50

    static func events(_ filter: EventFilter, _ c: PostgresConnection) throws -> EventPage {
        guard let range = try c.row(ConsoleStatements.idRange), let range else { return EventPage(rows: [], next: nil) }
        var sub: String?
        if let subject = filter.subject {
            sub = try resolveSubject(subject, c)
            if sub == nil { return EventPage(rows: [], next: nil, unknownSubject: true) }
        }
        var before = min(filter.before ?? (range.high + 1), range.high + 1)
        if let to = filter.to {
            before = min(before, try firstID(receivedAtOrAfter: to, c) ?? (range.high + 1))
        }
        var floor = range.low
        if let from = filter.from {
            guard let first = try firstID(receivedAtOrAfter: from, c) else { return EventPage(rows: [], next: nil) }
            floor = first
        }
        var query = ConsoleStatements.EventQuery(
            before: before, floor: floor, type: filter.type, status: filter.status, aud: filter.aud, limit: pageSize + 1, sub: sub)
        let rows: [ConsoleRow]
        if let status = filter.status, ["pending", "failed", "dead"].contains(status) {
            // A window of the queue's newest rows below the cursor: a rare status pages through windows.
            query.floor = max(floor, try c.row(ConsoleStatements.queueWindowFloor, before) ?? floor)
            let found = try c.rows(ConsoleStatements.eventsInQueue, query)
            if found.count <= pageSize {
                return EventPage(rows: found, next: query.floor > floor ? query.floor : nil)
            }
            return EventPage(rows: Array(found.prefix(pageSize)), next: found[pageSize - 1].int64("id"))
        } else if sub != nil {
            rows = try c.rows(ConsoleStatements.eventsOfSub, query)
        } else {
            // A bounded window of the primary key: a rare filter pages through windows.
            query.floor = max(floor, before - eventWindow)
            let found = try c.rows(ConsoleStatements.eventsInRange, query)
            if found.count <= pageSize {
                let next = query.floor > floor ? query.floor : nil
                return EventPage(rows: found, next: next)
            }
            return EventPage(rows: Array(found.prefix(pageSize)), next: found[pageSize - 1].int64("id"))
        }
        if rows.count > pageSize { return EventPage(rows: Array(rows.prefix(pageSize)), next: rows[pageSize - 1].int64("id")) }
        return EventPage(rows: rows, next: nil)
    }

    /// A `sub`, or the `sub` whose hash this is (through the accounts' hash index); nil when unknown.
    static func resolveSubject(_ subject: String, _ c: PostgresConnection) throws -> String? {
        let s = subject.trimmingCharacters(in: .whitespaces)
        if s.utf8.count == 16, s.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }) {
            if let sub = try c.row(ConsoleStatements.subOfHash, s) { return sub }
        }
        return s.isEmpty ? nil : s
    }
}
