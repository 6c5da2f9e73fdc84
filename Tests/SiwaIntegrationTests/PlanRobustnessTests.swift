import Foundation
import SiwaCore
import SiwaPostgres
import Testing

@testable import SiwaApp

/// Every hot statement, the triggers it fires included, costs a batch of n rows about n index
/// probes whatever the statistics say: in four states of the statistics, each statement runs
/// (as the code defines it, with the code's own transaction settings, then rolled back) on tables
/// of `base` rows and again after they grew 10× without ANALYZE. The backend's own counters of
/// the transaction (`pg_stat_get_xact_*`: they count the trigger's statements too) show what it
/// read: no sequential scan of a siwa table, no index read further than a few entries per batch
/// row, and the buffers it touched do not grow with the tables.
@Suite(
    "Plans: batch-driven whatever the statistics say",
    .needsDatabase)
struct PlanRobustnessTests {
    /// Rows per table before the tables grow 10×, and the batch size.
    static let base = 5000
    static let batch = 100

    /// The tables no statement may read whole (the console's sessions and audit trail grow too).
    static let tables = [
        "siwa.events", "siwa.event_queue", "siwa.accounts", "siwa.app_accounts", "siwa.sessions", "siwa.forwards",
        "siwa.revocations", "siwa.apple_tokens", "siwa.transfers", "siwa.console_sessions", "siwa.operator_actions",
        "siwa.provider_calls",
    ]

    enum Statistics: String, CaseIterable, CustomTestStringConvertible {
        /// A new database: no table ever analyzed.
        case neverAnalyzed = "never analyzed"
        /// Analyzed while empty after a drain (vacuumed, the pages kept: the queue's usual state,
        /// believed to hold no row), then filled.
        case analyzedEmpty = "analyzed while empty, then filled"
        /// Analyzed full of history (every session revoked, every event done, forward delivered,
        /// revocation done), emptied (TRUNCATE: the column statistics stay), then filled with live rows.
        case analyzedFullThenRefilled = "analyzed full, emptied and refilled"
        /// Analyzed at a hundredth of its size, then bulk-loaded.
        case bulkLoaded = "bulk-loaded without ANALYZE"

        var testDescription: String { rawValue }
    }

    /// Users `from...to`: an account (every tenth deleted), an app account, a live session, a done
    /// event holding an address and a pending one (queued), a forward and a revocation (half of
    /// them waiting), a stored token that is due; every hundredth of the first `base` users also
    /// has a recent event of an unknown type. `history`: sessions revoked, events done, forwards delivered, revocations
    /// done. Done events of every fiftieth of the first `base` users are older than the retention.
    /// As many console sessions (of one operator) and entries of the audit trail.
    static func load(from: Int, to: Int, history: Bool = false) -> String {
        let waiting = history ? "false" : "g % 2 = 0"
        return """
            INSERT INTO siwa.accounts (apple_sub, status, deleted_at, email, is_private_email)
            SELECT 'u.' || g, CASE WHEN g % 10 = 0 THEN 'deleted' ELSE 'active' END, CASE WHEN g % 10 = 0 THEN now() END,
                   'u' || g || '@privaterelay.appleid.com', true
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.app_accounts (apple_sub, aud) SELECT 'u.' || g, 'com.example.a' FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.sessions (apple_sub, aud, created_at, revoked_at, revoked_reason)
            SELECT 'u.' || g, 'com.example.a', now() - interval '1 hour', \(history ? "now(), 'old'" : "NULL, NULL")
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, processed_at, outcome,
                                     received_at, claims)
            SELECT 'd-' || g, 'com.example.a', 'u.' || g, 'email-disabled', now() - interval '41 days',
                   'u' || g || '@privaterelay.appleid.com', true, 'done', now(), 'applied',
                   CASE WHEN g % 50 = 0 AND g <= \(base) THEN now() - interval '40 days' ELSE now() END,
                   jsonb_build_object('events', '{"email":"u' || g || '@privaterelay.appleid.com"}')
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, next_attempt_at, claims)
            SELECT 'p-' || g, 'com.example.a', 'u.' || g, 'consent-revoked', now() - interval '1 day',
                   \(history ? "'done'" : "'pending'"), now() - interval '1 hour' + g * interval '1 millisecond', '{}'
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, status, claims)
            SELECT 'i-' || g, 'com.example.a', 'u.' || g, 'some-new-type', now(), 'u' || g || '@example.com', 'ignored', '{}'
            FROM generate_series(\(from), \(to)) g WHERE g % 100 = 0 AND g <= \(base);
            INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source, email, status, delivered_at)
            SELECT 'f-' || g, 'u.' || g, 'com.example.a', 'email-disabled', now(), 'apple', 'u' || g || '@privaterelay.appleid.com',
                   CASE WHEN \(waiting) THEN 'pending' ELSE 'delivered' END, CASE WHEN \(waiting) THEN NULL ELSE now() END
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason, status)
            SELECT 'u.' || g, 'com.example.a', 'k1', '\\x00', 'in-app-deletion', CASE WHEN \(waiting) THEN 'pending' ELSE 'done' END
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, signed_in_at, next_validation_at,
                                           validated_at, validation_failures)
            SELECT 'u.' || g, 'com.example.a', 'k1', '\\x00', now() - interval '1 day', now() - (g % 100) * interval '1 minute',
                   CASE WHEN g % 3 = 0 THEN now() END, g % 5 / 4
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.transfers (direction, team_id, client_id, sub, transfer_sub, new_sub, created_at)
            SELECT CASE WHEN g % 2 = 0 THEN 'export' ELSE 'import' END, 'TEAM', 'com.example.a', 'u.' || g, 't.' || g,
                   CASE WHEN g % 4 = 1 THEN 'n.' || g END, now() - g * interval '1 second'
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.console_operators (name, token_hash) VALUES ('jane', 'h') ON CONFLICT DO NOTHING;
            INSERT INTO siwa.console_sessions (token_hash, token_fingerprint, operator_id, operator, last_seen_at)
            SELECT siwa.console_hash('console-session:', 's-' || g), 'f', o.id, o.name, now() - g * interval '1 second'
            FROM generate_series(\(from), \(to)) g, siwa.console_operators o WHERE o.name = 'jane';
            INSERT INTO siwa.operator_actions (at, operator, action, target)
            SELECT now() - g * interval '1 second', 'jane', 'replay', 'event:' || g FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, state, attempts, actions)
            SELECT (ARRAY['firebase', 'auth0', 'clerk', 'cognito'])[g % 4 + 1], 'u.' || g, 'end_sessions', -g, 'consent-revoked', now(),
                   'done', 1, 'signed_out'
            FROM generate_series(\(from), \(to)) g;
            INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, state, next_attempt_at)
            SELECT (ARRAY['firebase', 'auth0', 'clerk', 'cognito'])[g % 4 + 1], 'u.' || g, 'unlink', g, 'account-delete', now(),
                   CASE WHEN \(waiting) THEN 'pending' ELSE 'done' END, now() - interval '1 hour' + g * interval '1 millisecond'
            FROM generate_series(\(from), \(to)) g;
            """
    }

    static let emptyAll = """
        DELETE FROM siwa.forwards; DELETE FROM siwa.revocations; DELETE FROM siwa.apple_tokens; DELETE FROM siwa.sessions;
        DELETE FROM siwa.app_accounts; DELETE FROM siwa.accounts; DELETE FROM siwa.events; DELETE FROM siwa.transfers;
        DELETE FROM siwa.console_sessions; DELETE FROM siwa.operator_actions; DELETE FROM siwa.provider_calls;
        """

    static var analyzeAll: String { "ANALYZE " + tables.joined(separator: ", ") + ";" }

    /// Brings a new database to `state` with `base` users.
    static func prepare(_ url: String, _ state: Statistics) throws {
        let quiet = tables.map { "ALTER TABLE \($0) SET (autovacuum_enabled = false);" }.joined(separator: "\n")
        _ = try TestDatabase.query(url, quiet)
        switch state {
        case .neverAnalyzed:
            _ = try TestDatabase.query(url, load(from: 1, to: base))
        case .analyzedEmpty:
            _ = try TestDatabase.query(url, load(from: 1, to: base) + emptyAll)
            for table in tables { _ = try TestDatabase.query(url, "VACUUM (TRUNCATE false) \(table)") }
            _ = try TestDatabase.query(url, analyzeAll)
            _ = try TestDatabase.query(url, load(from: 1, to: base))
        case .analyzedFullThenRefilled:
            _ = try TestDatabase.query(url, load(from: 1, to: base, history: true) + analyzeAll)
            // (The queue is emptied by siwa.events' TRUNCATE trigger.)
            _ = try TestDatabase.query(url, "TRUNCATE " + tables.filter { $0 != "siwa.event_queue" }.joined(separator: ", ") + " CASCADE")
            _ = try TestDatabase.query(url, load(from: 1, to: base))
        case .bulkLoaded:
            _ = try TestDatabase.query(url, load(from: 1, to: base / 100) + analyzeAll)
            _ = try TestDatabase.query(url, load(from: base / 100 + 1, to: base))
        }
    }

    /// One statement as the code runs it: the transaction's opening, settings made before it
    /// (`setup`), its SQL and parameters, and how many rows its batch holds.
    struct Probe {
        var name: String
        var begin: String
        var setup: [String] = []
        var sql: String
        var parameters: [String?]
        /// Rows of its batch or range; 0: it reads only small tables of its own (a watermark, the
        /// key sets, the maintained counts) and must touch no row of `tables`.
        var rows: Int
        /// Index entries it may read per row: a few where a batch row has its own (a user's two
        /// events, say); 1 where each row is an entry of one index range (a listing, a count up
        /// to a limit), so that a read of the whole index fails.
        var perRow = 10
        /// It reads what it reports and that grew 10× with the tables (a backlog's count: one
        /// queue entry per waiting row): allowed 10× the rows at 10×.
        var readsBacklog = false
        /// The only ones of `tables` it may touch (nil: any).
        var only: Set<String>? = nil
    }

    /// What one run read, per relation (`siwa.x`, or `siwa.x index`).
    struct Reads {
        var seqScans: [String: Int] = [:]
        var indexEntries: [String: Int] = [:]
        var blocks = 0
        /// The tables it read a block of (their indexes included).
        var touched: Set<String> = []
    }

    static let counters = """
        SELECT coalesce(i.indrelid, c.oid)::regclass::text AS tbl, c.relname, c.relkind::text,
               pg_stat_get_xact_numscans(c.oid), pg_stat_get_xact_tuples_returned(c.oid), pg_stat_get_xact_blocks_fetched(c.oid)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_index i ON i.indexrelid = c.oid
        WHERE n.nspname = 'siwa' AND c.relkind IN ('r', 'i')
        """

    static func snapshot(_ c: PostgresConnection) throws -> [String: (table: String, kind: String, scans: Int, tuples: Int, blocks: Int)] {
        var out: [String: (table: String, kind: String, scans: Int, tuples: Int, blocks: Int)] = [:]
        for row in try c.execute(counters).rows {
            out[row[1] ?? ""] = (row[0] ?? "", row[2] ?? "", Int(row[3] ?? "") ?? 0, Int(row[4] ?? "") ?? 0, Int(row[5] ?? "") ?? 0)
        }
        return out
    }

    /// Runs `probe` in its own transaction, rolled back; returns what it read of `tables`.
    static func measure(_ c: PostgresConnection, _ probe: Probe) throws -> Reads {
        try c.execute(probe.begin)
        defer { _ = try? c.execute("ROLLBACK") }
        for statement in probe.setup { try c.execute(statement) }
        let before = try snapshot(c)
        try c.execute(probe.sql, probe.parameters)
        let after = try snapshot(c)
        var reads = Reads()
        for (relation, now) in after where tables.contains(now.table) {
            let then = before[relation] ?? (now.table, now.kind, 0, 0, 0)
            reads.blocks += now.blocks - then.blocks
            if now.blocks > then.blocks || now.scans > then.scans { reads.touched.insert(now.table) }
            if now.kind == "r" {
                if now.scans > then.scans { reads.seqScans[now.table] = now.scans - then.scans }
            } else if now.tuples > then.tuples {
                reads.indexEntries[relation] = now.tuples - then.tuples
            }
        }
        return reads
    }

    /// The users of a batch, spread over the first `base` (a tenth of them deleted).
    static let subs = (0..<batch).map { "u.\($0 * 49 + 1)" }

    /// The hot statements, with a batch each.
    static func probes(_ c: PostgresConnection) throws -> [Probe] {
        let worker = WorkerStatements.beginBatch(statementTimeoutSeconds: 60, lockTimeoutSeconds: 5)
        let revoker = RevocationStatements.begin(statementTimeoutMilliseconds: 60000, lockTimeoutMilliseconds: 5000)
        let keys = WorkerStatements.beginKeyLookups
        let pending = try c.execute(
            "SELECT id FROM siwa.events WHERE jti = ANY($1::text[]) ORDER BY id", [SQLEncoding.array(subs.map { "p-" + $0.dropFirst(2) })]
        ).rows.compactMap { $0[0].flatMap(Int64.init) }
        let forwards = subs.compactMap { sub -> String? in Int(sub.dropFirst(2))! % 2 == 0 ? "f-" + sub.dropFirst(2) : nil }
        let revocation = try c.execute("SELECT id FROM siwa.revocations WHERE apple_sub = $1", [subs[1]]).scalar ?? "0"
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let claimed = pending.enumerated().map { (i, id) in
            ClaimedEvent(
                id: id, audience: "com.example.a",
                event: AppleEvent(type: .emailEnabled, sub: subs[i], eventTimeMillis: now, email: "x@privaterelay.appleid.com"),
                attempts: 0)
        }
        let notifications = (0..<batch).map { (i: Int) -> VerifiedNotification in
            let sub: String = i % 10 == 0 ? "new.\(i)" : subs[i]
            let type: String = i % 5 == 0 ? "some-new-type" : "email-enabled"
            return StoreTests.notification(
                jti: "rx-\(i)", aud: "com.example.a", sub: sub, type: type, ms: now - Int64(i), email: "r\(i)@privaterelay.appleid.com")
        }
        let active = AccountState(status: .active)
        var states: [(sub: String, state: AccountState)] = subs.map { ($0, active) }
        for k in 0..<10 { states.append(("new.\(k)", active)) }
        func probe<B, R>(
            _ statement: Statement<B, R>, _ binds: B, begin: String, rows: Int, perRow: Int = 10, setup: [String] = []
        ) -> Probe {
            Probe(
                name: statement.name, begin: begin, setup: setup, sql: statement.sql, parameters: statement.bind(binds), rows: rows,
                perRow: perRow)
        }
        var list: [Probe] = []
        list.append(
            probe(OutboxStatements.insert, notifications, begin: "BEGIN", rows: batch))
        list.append(
            probe(WorkerStatements.claim, batch, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.createOrLockAccounts, states, begin: worker, rows: states.count))
        list.append(
            probe(WorkerStatements.lockAccounts, subs, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.updateAccounts, states, begin: worker, rows: states.count))
        list.append(
            probe(WorkerStatements.lockAppAccounts, subs, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.writeAppAccounts, subs.map { ($0, "com.example.a", AccountState(status: .active)) }, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.insertAppAccounts, (0..<10).map { ("new.\($0)", "com.example.a", active) }, begin: worker, rows: 10))
        list.append(
            probe(
                WorkerStatements.revokeSessions, subs.map { .init(sub: $0, createdAtOrBefore: now, reason: "consent-revoked", aud: "com.example.a") },
                begin: worker, rows: batch))
        list.append(
            probe(ForwardStatements.enqueue, .init(events: claimed.map { ($0, .apple) }), begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.eraseEventEmails, subs, begin: worker, rows: batch))
        list.append(
            probe(ForwardStatements.eraseEmails, subs, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.eraseEventEmailsBefore, .init(sub: subs[3], sinceMillis: now), begin: worker, rows: 1))
        list.append(
            probe(ForwardStatements.eraseEmailsBefore, .init(sub: subs[3], sinceMillis: now), begin: worker, rows: 1))
        list.append(
            probe(
                DeletionStatements.moveTokensToRevocation, subs.map { .init(sub: $0, atMillis: now, clientID: "com.example.a") },
                begin: worker, rows: batch))
        list.append(
            probe(DeletionStatements.eraseTokens, subs.map { .init(sub: $0, atMillis: now, clientID: nil) }, begin: worker, rows: batch))
        list.append(
            probe(WorkerStatements.markDone, pending.map { ($0, "applied") }, begin: worker, rows: batch))
        list.append(
            probe(
                WorkerStatements.callHook, pending, begin: worker, rows: batch,
                setup: [WorkerStatements.plannerDefaults.sql]))
        list.append(
            probe(WorkerStatements.markFailed, .init(id: pending[0], status: .failed, error: "e", retryInSeconds: 60), begin: worker, rows: 1))
        list.append(
            probe(WorkerStatements.eraseFailedEventEmail, pending[0], begin: worker, rows: 1))
        list.append(
            probe(WorkerStatements.eraseRacedIgnoredEmails, (), begin: worker, rows: base / 100))
        list.append(
            probe(DeletionStatements.request, (subs[5], "com.example.a"), begin: "BEGIN", rows: 1))
        list.append(
            probe(ForwardStatements.claim, .init(limit: batch, leaseSeconds: 60), begin: ForwardStatements.beginCycle, rows: batch))
        list.append(
            probe(
                ForwardStatements.recordOutcomes,
                forwards.map { .init(id: $0, status: "delivered", error: nil, retryInSeconds: 0, deliveryMillis: 5) },
                begin: ForwardStatements.beginCycle, rows: forwards.count))
        // The provider calls: queued by the worker, leased and recorded by the provider sender.
        let calls = try c.execute(
            "SELECT id FROM siwa.provider_calls WHERE apple_sub = ANY($1::text[]) AND state = 'pending' ORDER BY id", [SQLEncoding.array(subs)]
        ).rows.compactMap { $0[0].flatMap(Int64.init) }
        list.append(
            probe(
                ProviderCallStatements.enqueue, claimed.map { .init(target: .provider(.auth0), effect: .provider(.endSessions), event: $0) },
                begin: worker,
                rows: batch))
        list.append(
            probe(
                ProviderCallStatements.claim, .init(limit: batch, leaseSeconds: 60, targets: CallTarget.all),
                begin: ForwardStatements.beginCycle, rows: batch))
        list.append(
            probe(
                ProviderCallStatements.recordOutcomes,
                calls.map { .init(id: $0, state: .done, status: 200, reason: nil, actions: "signed_out", retryInSeconds: 0) },
                begin: ForwardStatements.beginCycle, rows: calls.count))
        list.append(
            probe(RevocationStatements.claim, (batch, 60), begin: revoker, rows: batch))
        list.append(
            probe(RevocationStatements.markDone, (id: Int64(revocation)!, confirmed: true), begin: revoker, rows: 1))
        list.append(
            probe(
                RevocationStatements.markFailed,
                RevocationStatements.Failure(id: Int64(revocation)!, dead: false, error: "e", retryInSeconds: 60), begin: revoker,
                rows: 1))
        // The evidence of one attempt (revoke, then the validation that proves it): one row per call.
        list.append(
            probe(
                RevocationStatements.recordCalls,
                (
                    revocationID: Int64(revocation)!,
                    calls: [
                        .init(kind: "revoke", at: 1_700_000_000, httpStatus: 200, outcome: "success", detail: nil),
                        .init(kind: "validate", at: 1_700_000_001, httpStatus: 400, outcome: "invalid_grant", detail: nil),
                    ]
                ), begin: revoker, rows: 2))
        list.append(probe(RevocationStatements.unconfirmedCount, (), begin: revoker, rows: 0))
        list.append(
            probe(ReconcileStatements.claim, .init(spacing: 0.01, limit: batch, leaseMargin: 60), begin: keys, rows: batch))
        list.append(
            probe(ReconcileStatements.recordValid, (subs.map { .init(sub: $0, clientID: "com.example.a", ago: 1) }, 86400), begin: keys, rows: batch))
        list.append(
            probe(WorkerStatements.prune, 30, begin: keys, rows: base / 50))
        list.append(
            probe(ForwardStatements.prune, 30, begin: keys, rows: batch))
        list.append(
            probe(WorkerStatements.dropStaleQueueRows, (), begin: keys, rows: 20000, perRow: 1))
        list.append(
            probe(ReconcileStatements.schedule, 86400, begin: "BEGIN", rows: 1))
        list += try consoleProbes(c)
        return list
    }

    /// What a console page view reads (README "Console"), and the counts `status` and `/metrics`
    /// share with it, each in the admin pool's transaction as the console runs it.
    static func consoleProbes(_ c: PostgresConnection) throws -> [Probe] {
        let begin = AdminStatements.beginConsole
        let high = Int64(try c.execute("SELECT max(id) FROM siwa.events").scalar ?? "0")!
        let sub = subs[7]
        func probe<B, R>(
            _ statement: Statement<B, R>, _ binds: B, rows: Int, perRow: Int = 10, readsBacklog: Bool = false, only: Set<String>? = nil
        ) -> Probe {
            Probe(
                name: statement.name, begin: begin, sql: statement.sql, parameters: statement.bind(binds), rows: rows, perRow: perRow,
                readsBacklog: readsBacklog, only: only)
        }
        let page = ConsoleStatements.EventQuery(
            before: high + 1, floor: high + 1 - ConsoleReads.eventWindow, type: nil, status: nil, aud: nil, limit: 51, sub: nil)
        var rare = page
        rare.type = "no-such-type"
        var queued = page
        queued.status = "pending"
        queued.floor = try c.row(ConsoleStatements.queueWindowFloor, high + 1) ?? 0
        var dead = queued
        dead.status = "dead"
        var ofSub = page
        ofSub.sub = sub
        ofSub.floor = 0
        return [
            // The overview.
            // The gauges count what waits (a few passes over it), and nothing else.
            probe(OperatorStatements.backlog, (), rows: base, perRow: 5, readsBacklog: true, only: ["siwa.event_queue"]),
            probe(ConsoleStatements.keySets, (), rows: 0),
            probe(RevocationStatements.counts, (), rows: 0),
            probe(RevocationStatements.unconfirmedCount, (), rows: 0),
            probe(ForwardStatements.backlog, (), rows: base / 2, perRow: 5, readsBacklog: true, only: ["siwa.forwards"]),
            // Per provider: the waiting calls counted, those in flight, the oldest, the dead (~6 entries a call).
            probe(ProviderCallStatements.backlog, (), rows: base, perRow: 7, readsBacklog: true, only: ["siwa.provider_calls"]),
            probe(TransferStatements.counts, (), rows: 1),
            probe(ReconcileStatements.counts, (), rows: 1),
            probe(ConsoleStatements.idRange, (), rows: 2),
            probe(ConsoleStatements.probe, high / 2, rows: 1),
            probe(ConsoleStatements.receivedPerMinute, (high - 1000, 0, high), rows: 1000),
            probe(ConsoleStatements.appliedPerMinute, (high - 1000, 0, high), rows: 1000),
            probe(ConsoleStatements.hours, (), rows: 0),
            probe(ConsoleStatements.rollupMark, (), rows: 0),
            probe(ConsoleStatements.rollupCurrentTo, high, rows: 1),
            // The rollup's refresh (every few seconds), over a window of 1,000 ids.
            probe(ConsoleStatements.lockRollup, (), rows: 0),
            probe(ConsoleStatements.finalBound, (), rows: 1),
            probe(ConsoleStatements.rollUp, (high - 1000, high), rows: 1000),
            // The event list: a page, a rare filter (the whole bounded window), the queue, one user.
            probe(ConsoleStatements.eventsInRange, page, rows: 51),
            probe(ConsoleStatements.eventsInRange, rare, rows: Int(ConsoleReads.eventWindow)),
            probe(ConsoleStatements.queueWindowFloor, high + 1, rows: ConsoleStatements.queueWindow),
            probe(ConsoleStatements.eventsInQueue, queued, rows: 51),
            probe(ConsoleStatements.eventsInQueue, dead, rows: ConsoleStatements.queueWindow),
            probe(ConsoleStatements.eventsOfSub, ofSub, rows: 4),
            probe(ConsoleStatements.event, high, rows: 1),
            probe(ConsoleStatements.subOfHash, SubjectHash.of(sub), rows: 1),
            // Failures.
            probe(ConsoleStatements.deadLetters, (Int64.max, 200), rows: 200),
            probe(ConsoleStatements.deadLetterTypes, (), rows: 1),
            probe(ConsoleStatements.deadRevocations, 200, rows: 200),
            probe(ConsoleStatements.failedRevocations, 200, rows: 200),
            probe(ConsoleStatements.deadForwards, 200, rows: 200),
            // A user.
            probe(ConsoleStatements.account, sub, rows: 1),
            probe(ConsoleStatements.appAccounts, sub, rows: 1),
            probe(ConsoleStatements.sessions, sub, rows: 1),
            probe(ConsoleStatements.userEvents, sub, rows: 4),
            probe(ConsoleStatements.userRevocations, sub, rows: 1),
            probe(ConsoleStatements.userForwards, sub, rows: 1),
            probe(ReportStatements.userReport, sub, rows: 10),
            // Reconciliation and transfer.
            probe(ConsoleStatements.tokensDue, (), rows: ConsoleStatements.tokensDueShown + 1, perRow: 1),
            probe(ConsoleStatements.reconcilePace, (), rows: 0),
            // The audit trail and the session check of every page.
            probe(ConsoleStatements.actions, (Int64.max, 101), rows: 101),
            probe(ConsoleStatements.session, ("s-49", false), rows: 1),
        ]
    }

    /// The maintained counts (schema.sql "Maintained counts") are the tables' own counts.
    static func expectCountsExact(_ c: PostgresConnection, _ context: String) throws {
        var revocations: [String: Int] = [:]
        for row in try c.rows(RevocationStatements.counts) { revocations[row.status] = row.count }
        var actual: [String: Int] = [:]
        for row in try c.execute("SELECT status, count(*) FROM siwa.revocations GROUP BY 1").rows {
            actual[row[0] ?? ""] = Int(row[1] ?? "")
        }
        #expect(revocations == actual, "revocations by status (\(context))")
        let unconfirmed = try c.execute("SELECT count(*) FROM siwa.revocations WHERE confirmation = 'unconfirmed'").scalar
        #expect(try c.row(RevocationStatements.unconfirmedCount).map(String.init) == unconfirmed, "unconfirmed (\(context))")
        let tokens = try c.execute(
            "SELECT count(*), count(*) FILTER (WHERE validated_at IS NOT NULL), count(*) FILTER (WHERE validation_failures > 0) FROM siwa.apple_tokens"
        ).rows[0].map { Int($0 ?? "") ?? -1 }
        let reconcile = try c.row(ReconcileStatements.counts)
        #expect(try c.row(ReconcileStatements.schedule, 86400) == tokens[0], "tokens stored (\(context))")
        #expect(reconcile?.validated == tokens[1] && reconcile?.failing == tokens[2], "tokens validated, failing (\(context))")
        let transfers = try c.execute(
            """
            SELECT count(*) FILTER (WHERE direction = 'export'), count(*) FILTER (WHERE direction = 'import' AND new_sub IS NOT NULL),
                   count(*) FILTER (WHERE direction = 'import' AND new_sub IS NULL) FROM siwa.transfers
            """
        ).rows[0].map { Int($0 ?? "") ?? -1 }
        let counted = try c.row(TransferStatements.counts)
        #expect([counted?.exported, counted?.mapped, counted?.unmapped] == transfers.map { Optional($0) }, "transfers (\(context))")
    }

    @Test("every hot statement and console read takes a few index entries per row and no more as the tables grow 10×", arguments: Statistics.allCases)
    func batchDriven(_ state: Statistics) throws {
        let url = try TestDatabase.create()
        try Self.prepare(url, state)
        let c = try PostgresConnection(conninfo: url)
        try Self.expectCountsExact(c, state.rawValue)
        let probes = try Self.probes(c)
        let small = try probes.map { try Self.measure(c, $0) }
        _ = try TestDatabase.query(url, Self.load(from: Self.base + 1, to: Self.base * 10))
        try Self.expectCountsExact(c, state.rawValue + ", 10×")
        let large = try probes.map { try Self.measure(c, $0) }
        for (i, probe) in probes.enumerated() {
            for (size, reads, grown) in [("\(Self.base)", small[i], 1), ("\(Self.base * 10)", large[i], probe.readsBacklog ? 10 : 1)] {
                #expect(reads.seqScans.isEmpty, "\(probe.name) (\(state.rawValue), \(size) users) scans \(reads.seqScans)")
                if let only = probe.only {
                    #expect(
                        reads.touched.isSubset(of: only),
                        "\(probe.name) (\(state.rawValue), \(size) users) touches \(reads.touched.subtracting(only).sorted())")
                }
                if probe.rows == 0 {
                    #expect(
                        reads.indexEntries.isEmpty && reads.blocks == 0,
                        "\(probe.name) (\(state.rawValue), \(size) users) touches \(reads.blocks) blocks, \(reads.indexEntries) index entries")
                }
                // (An index range returns a few entries more than its rows: dead ones, a page's edge.)
                let limit = probe.perRow * probe.rows * grown * 105 / 100 + 100
                let wide = reads.indexEntries.filter { $0.value > limit }
                #expect(wide.isEmpty, "\(probe.name) (\(state.rawValue), \(size) users) reads \(wide) index entries for \(probe.rows) rows")
            }
            // A deeper B-tree level costs a block a probe at most.
            let allowed = (probe.readsBacklog ? small[i].blocks * 15 : small[i].blocks * 3 / 2) + 2 * probe.rows + 50
            #expect(
                large[i].blocks <= allowed,
                "\(probe.name) (\(state.rawValue)): \(small[i].blocks) blocks with \(Self.base) users, \(large[i].blocks) with 10×")
        }
    }

    @Test("the maintained counts start from a database's rows when it is upgraded, and follow every change")
    func countsFollowChanges() throws {
        let url = try TestDatabase.create()
        // An earlier version: rows, no count triggers, nothing counted.
        let triggers = ["revocations", "apple_tokens", "transfers"].flatMap { t in
            ["insert", "update", "delete", "truncate"].map { "DROP TRIGGER \(t)_counted_\($0) ON siwa.\(t);" }
        }
        _ = try TestDatabase.query(
            url, triggers.joined(separator: " ") + " DELETE FROM siwa.counts; DELETE FROM siwa.count_changes;" + Self.load(from: 1, to: 300))
        try Migrator.migrate(conninfo: url, force: true)
        let c = try PostgresConnection(conninfo: url)
        try Self.expectCountsExact(c, "upgraded")
        // Status changes, a transaction that cannot fold (REPEATABLE READ), deletes, a truncate.
        _ = try TestDatabase.query(
            url,
            """
            UPDATE siwa.revocations SET status = 'dead' WHERE id % 3 = 0;
            UPDATE siwa.revocations SET status = 'done', confirmation = 'unconfirmed' WHERE id % 7 = 0;
            UPDATE siwa.apple_tokens SET validation_failures = validation_failures + 1 WHERE apple_sub LIKE 'u.2%';
            """)
        _ = try TestDatabase.query(
            url,
            """
            BEGIN ISOLATION LEVEL REPEATABLE READ;
            DELETE FROM siwa.apple_tokens WHERE apple_sub LIKE 'u.1%';
            UPDATE siwa.transfers SET new_sub = 'x.' || id WHERE direction = 'import' AND new_sub IS NULL AND id % 2 = 1;
            DELETE FROM siwa.revocations WHERE id % 5 = 0;
            COMMIT;
            """)
        #expect(try c.execute("SELECT count(*) FROM siwa.count_changes").scalar != "0", "the REPEATABLE READ changes wait unfolded")
        try Self.expectCountsExact(c, "after changes")
        _ = try TestDatabase.query(url, "UPDATE siwa.apple_tokens SET validated_at = now() WHERE apple_sub LIKE 'u.3%'")
        #expect(try c.execute("SELECT count(*) FROM siwa.count_changes").scalar == "0", "the next writer folded them")
        try Self.expectCountsExact(c, "folded")
        _ = try TestDatabase.query(url, "TRUNCATE siwa.transfers, siwa.apple_tokens; TRUNCATE siwa.revocations CASCADE")
        try Self.expectCountsExact(c, "truncated")
        _ = try TestDatabase.query(url, Self.load(from: 301, to: 400))
        try Self.expectCountsExact(c, "refilled")
    }

    @Test("a writer never waits for the counts another open transaction folded: its fold is skipped, and the counts stay exact")
    func writersNeverWaitOnCounts() throws {
        let url = try TestDatabase.create()
        _ = try TestDatabase.query(url, Self.load(from: 1, to: 10))
        let (a, b) = (try PostgresConnection(conninfo: url), try PostgresConnection(conninfo: url))
        // A long transaction (a worker's batch) changed a counted row: it folded, and holds the
        // counters' rows and the fold's lock until it ends.
        try a.execute("BEGIN")
        try a.execute("UPDATE siwa.revocations SET status = 'dead' WHERE apple_sub = 'u.1'")
        // Another writer meanwhile: were its fold to wait for those rows, the lock timeout would
        // end its statement.
        try b.execute("BEGIN")
        try b.execute("SET LOCAL lock_timeout = '2s'")
        do {
            try b.execute("UPDATE siwa.revocations SET status = 'dead' WHERE apple_sub = 'u.2'")
        } catch {
            Issue.record("the second writer waited for the first one's counts: \(error)")
        }
        try b.execute("COMMIT")
        try a.execute("COMMIT")
        try Self.expectCountsExact(a, "two writers")
    }
}
