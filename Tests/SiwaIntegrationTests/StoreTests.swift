import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization
import Testing

@testable import SiwaApp

/// The store against a real PostgreSQL: dedupe keys, erasure, the hook's view of decisions, row
/// decoding, and plans that stay key lookups on tables bulk-loaded without fresh statistics.
@Suite("Store: statements against PostgreSQL", .needsDatabase)
struct StoreTests {
    static let quiet = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }

    static func notification(
        jti: String, aud: String = "com.example.a", sub: String, type: String = "consent-revoked",
        ms: Int64 = 1_752_572_190_719, email: String? = nil
    ) -> VerifiedNotification {
        let event = AppleEvent(
            type: EventType(rawValue: type), sub: sub, eventTimeMillis: ms, email: email,
            isPrivateEmail: email == nil ? nil : true)
        var events: [String: JSONValue] = ["type": .string(type), "sub": .string(sub), "event_time": .number(Double(ms))]
        if let email {
            events["email"] = .string(email)
            events["is_private_email"] = .string("true")
        }
        let claims: [String: JSONValue] = [
            "iss": .string("https://appleid.apple.com"), "aud": .string(aud), "jti": .string(jti),
            "iat": .number(1_752_572_197), "events": .string(JSONValue.object(events).serialized()),
        ]
        return VerifiedNotification(
            jti: jti, issuer: "https://appleid.apple.com", audience: aud, issuedAt: 1_752_572_197,
            expiresAt: nil, event: event, claimsJSON: JSONValue.object(claims).serialized())
    }

    /// Submits `batch` to a started writer at once (one batch) and returns the outcomes in order.
    static func write(_ batch: [VerifiedNotification], conninfo: String) -> [String] {
        let writer = OutboxWriter(conninfo: conninfo, logger: quiet)
        let results = Mutex<[Int: String]>([:])
        let group = DispatchGroup()
        writer.start()
        for (i, n) in batch.enumerated() {
            group.enter()
            let deadline = Deadline(after: .seconds(10))
            _ = writer.submit(n, deadline: deadline) { result in
                let text: String
                switch result {
                case .committed(let outcome): text = outcome.rawValue
                case .unavailable(let detail), .refused(let detail): text = "failed \(detail)"
                case .timedOut: text = "timed out"
                }
                results.withLock { $0[i] = text }
                group.leave()
            }
        }
        group.wait()
        writer.stop(deadline: Deadline(after: .seconds(10)))
        return results.withLock { r in batch.indices.map { r[$0] ?? "none" } }
    }

    @Test("the dedupe key includes aud: the same event for a second app is stored; for the same app it is a duplicate")
    func dedupeIncludesAudience() throws {
        let url = try TestDatabase.create()
        let outcomes = Self.write(
            [
                Self.notification(jti: "j1", aud: "com.example.a", sub: "s1"),
                Self.notification(jti: "j2", aud: "com.example.b", sub: "s1"),
                Self.notification(jti: "j3", aud: "com.example.a", sub: "s1"),  // Apple re-signed a retry
            ], conninfo: url)
        #expect(outcomes == ["accepted", "accepted", "duplicate"])
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events").scalar == "2")
        // The same again in separate batches: the database's key, not only the batch's.
        #expect(Self.write([Self.notification(jti: "j4", aud: "com.example.b", sub: "s1")], conninfo: url) == ["duplicate"])
    }

    @Test("batch dedupe compares exact bytes: canonically equivalent subs and jtis are different keys, as in PostgreSQL")
    func dedupeIsByteExact() throws {
        let url = try TestDatabase.create()
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        #expect(composed == decomposed)  // Swift's String == says equal; the bytes differ
        let outcomes = Self.write(
            [
                Self.notification(jti: "j-" + composed, sub: composed),
                Self.notification(jti: "j-" + decomposed, sub: decomposed),
            ], conninfo: url)
        #expect(outcomes == ["accepted", "accepted"])
        #expect(try TestDatabase.query(url, "SELECT count(DISTINCT sub) FROM siwa.events").scalar == "2")
    }

    @Test("account-delete erases the email everywhere: accounts, events (column and claims), every view")
    func erasure() throws {
        try TestHarness.with { h throws in
            let email = "erase.me.4711@privaterelay.appleid.com"
            let sub = "000739.erase.0001"
            #expect(
                try h.post(
                    token: h.token(
                        type: "email-disabled", sub: sub, eventTimeMillis: 1_752_572_000_000,
                        email: email, isPrivateEmail: true)
                ).code == "accepted")
            #expect(
                try h.post(
                    token: h.token(
                        type: "email-enabled", sub: sub, eventTimeMillis: 1_752_572_100_000,
                        email: email, isPrivateEmail: true)
                ).code == "accepted")
            // Another user's address stays (erasure is per user).
            #expect(
                try h.post(
                    token: h.token(
                        type: "email-enabled", sub: "000739.keep.0002", eventTimeMillis: 1_752_572_100_000,
                        email: "keep.me@example.com", isPrivateEmail: false)
                ).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.post(token: h.token(type: "account-delete", sub: sub, eventTimeMillis: 1_752_572_200_000)).code == "accepted")
            #expect(try h.waitForWorker())
            // Every table and view of schema siwa, as text.
            let relations = try h.query(
                """
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'siwa' AND c.relkind IN ('r', 'v') ORDER BY 1
                """
            ).rows.compactMap { $0[0] }
            #expect(relations.contains("events") && relations.contains("accounts") && relations.contains("dead_letters"))
            for relation in relations {
                let hits = try h.scalar("SELECT count(*) FROM siwa.\(relation) t WHERE t::text LIKE '%' || $1 || '%'", [email])
                #expect(hits == "0", "the address is still in siwa.\(relation)")
            }
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE email = 'keep.me@example.com' AND claims::text LIKE '%keep.me@%'") == "1")
            // The erased claims are still valid JSON with the rest of the event.
            #expect(
                try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = $1 AND ((claims ->> 'events')::jsonb ->> 'type') IS NOT NULL", [sub])
                    == "3")
            // A later event of the deleted user erases what it brings, and leaves the rows already
            // erased as they are (no rewrite of the whole history per event: same row versions).
            let versions = """
                SELECT string_agg(id || ':' || xmin::text, ',' ORDER BY id) FROM siwa.events
                WHERE sub = $1 AND event_time < to_timestamp(1752572250)
                """
            let before = try h.scalar(versions, [sub])
            #expect(
                try h.post(
                    token: h.token(
                        type: "email-enabled", sub: sub, eventTimeMillis: 1_752_572_300_000,
                        email: email, isPrivateEmail: true)
                ).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE claims::text LIKE '%' || $1 || '%' OR email = $1", [email]) == "0")
            #expect(try h.scalar(versions, [sub]) == before)
        }
    }

    @Test("the hook reads the worker's decision in event.outcome: a stale consent-revoked is 'stale', not 'applied'")
    func hookSeesOutcome() throws {
        try TestHarness.with { h throws in
            _ = try h.query(
                """
                CREATE TABLE public.hook_log (event_id bigint, type text, outcome text, status text);
                CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO public.hook_log VALUES (event.id, event.type, event.outcome, event.status);
                END $$;
                GRANT ALL ON public.hook_log TO siwa_worker;
                """)
            let sub = "000739.hook.0003"
            #expect(try h.post(token: h.token(type: "email-disabled", sub: sub, eventTimeMillis: 1_752_572_300_000)).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.post(token: h.token(type: "email-enabled", sub: sub, eventTimeMillis: 1_752_572_100_000)).code == "accepted")
            #expect(try h.waitForWorker())
            let rows = try h.query("SELECT type, outcome, status FROM public.hook_log ORDER BY event_id").rows
            #expect(rows == [["email-disabled", "applied", "done"], ["email-enabled", "stale", "done"]])
        }
    }

    @Test("the subject hash of the dashboard views is the one the logs print (an operator can join them)")
    func subjectHashMatchesLogs() throws {
        let url = try TestDatabase.create()
        // Backslashes too: the SQL hashes the text's bytes through `decode(…, 'escape')`.
        let subs = ["000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105", "caf\u{E9}", "", "a\\b", "\\x41", "\\101", "x\\\\y\u{1F600}\\"]
        for sub in subs {
            #expect(try TestDatabase.query(url, "SELECT siwa.subject_hash($1)", [sub]).scalar == SubjectHash.of(sub))
        }
        // Pinned, computed outside Swift and PostgreSQL (SubjectHashTests has the command).
        #expect(
            try TestDatabase.query(url, "SELECT siwa.subject_hash($1)", ["000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"]).scalar
                == "d6facc57f18650ce")
    }

    @Test("a row that does not decode is an error naming the statement and the column, never a default")
    func rowDecodingNamesTheColumn() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        let missing = Statement<Void, Int64>("probe", "SELECT 1 AS other", decode: { row throws(PostgresError) in try row.int64("id") })
        #expect { try c.rows(missing) } throws: { error in
            let e = error as? PostgresError
            return e?.code == .unexpectedRow && e?.serverMessage == "probe: column \"id\" is missing"
        }
        let null = Statement<Void, Int64>("probe", "SELECT NULL::bigint AS id", decode: { row throws(PostgresError) in try row.int64("id") })
        #expect { try c.rows(null) } throws: { ($0 as? PostgresError)?.serverMessage == "probe: column \"id\" is NULL" }
        let status = Statement<Void, EventStatus>(
            "probe", "SELECT 'sleeping' AS status",
            decode: { row throws(PostgresError) in try row.value("status", as: EventStatus.self) })
        #expect { try c.rows(status) } throws: { ($0 as? PostgresError)?.serverMessage == "probe: column \"status\" has an unexpected value" }
    }

    /// Scan nodes of an `EXPLAIN` text plan that read one of `tables` without a key: a sequential
    /// scan, or an index scan with no `Index Cond` (the whole index, in order).
    static func wholeTableScans(_ plan: [String], tables: [String]) -> [String] {
        var problems: [String] = []
        for (i, line) in plan.enumerated() {
            guard
                let scan = line.range(
                    of: #"(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan)( using \S+)? on (\w+)"#, options: .regularExpression)
            else { continue }
            let node = String(line[scan])
            guard tables.contains(where: { node.hasSuffix(" on " + $0) }) else { continue }
            if node.hasPrefix("Seq Scan") {
                problems.append(node)
                continue
            }
            // The node's detail lines come next, until the next node ("->").
            let details = plan[(i + 1)...].prefix { !$0.contains("->") }
            if !details.contains(where: { $0.contains("Index Cond:") || $0.contains("Recheck Cond:") }) {
                problems.append(node + " (no index condition)")
            }
        }
        return problems
    }

    @Test(
        "a new account is written once with its decided state; app accounts found without one (an import) count in the decision"
    )
    func newAccountsWithTheirState() throws {
        let url = try TestDatabase.create()
        // 'orphan.a' signed in to app "a" (an app account) without a siwa.accounts row.
        _ = try TestDatabase.query(url, "INSERT INTO siwa.app_accounts (apple_sub, aud, status) VALUES ('orphan.a', 'a', 'active')")
        let c = try PostgresConnection(conninfo: url)
        let revokedB = { (sub: String) in
            ClaimedEvent(
                id: -1, audience: "b", event: AppleEvent(type: .consentRevoked, sub: sub, eventTimeMillis: 1_700_000_000_000), attempts: 0)
        }
        let deleted = ClaimedEvent(
            id: -1, audience: "b", event: AppleEvent(type: .accountDelete, sub: "fresh.d", eventTimeMillis: 1_700_000_000_000), attempts: 0)
        try c.transaction { c throws(PostgresError) in
            _ = try BatchApplier.apply([revokedB("fresh.b"), revokedB("orphan.a"), deleted], hook: .shippedNoOp, on: c)
        }
        let rows = try TestDatabase.query(
            url,
            """
            SELECT apple_sub, status, extract(epoch FROM status_event_time)::bigint, deleted_at IS NOT NULL
            FROM siwa.accounts ORDER BY apple_sub
            """
        ).rows
        // 'fresh.b': its only app revoked its consent; 'orphan.a' still uses app "a": active.
        #expect(
            rows == [
                ["fresh.b", "consent_revoked", "1700000000", "f"], ["fresh.d", "deleted", "1700000000", "t"],
                ["orphan.a", "active", "1700000000", "f"],
            ])
    }

    @Test("worker statements stay key lookups on tables bulk-loaded after ANALYZE saw them small")
    func plansOnBulkLoadedTables() throws {
        let url = try TestDatabase.create()
        // Statistics say "tiny" (analyzed empty; sessions analyzed when every one was revoked, so
        // the live-session index looks empty), autovacuum may not refresh them, then a bulk load.
        _ = try TestDatabase.query(
            url,
            """
            ALTER TABLE siwa.accounts SET (autovacuum_enabled = false);
            ALTER TABLE siwa.sessions SET (autovacuum_enabled = false);
            ALTER TABLE siwa.events SET (autovacuum_enabled = false);
            INSERT INTO siwa.sessions (apple_sub, created_at, revoked_at) SELECT 'gone.' || g, now(), now() FROM generate_series(1, 20000) g;
            ANALYZE siwa.accounts; ANALYZE siwa.sessions; ANALYZE siwa.events;
            INSERT INTO siwa.accounts (apple_sub) SELECT 'bulk.' || g FROM generate_series(1, 200000) g;
            INSERT INTO siwa.sessions (apple_sub, created_at) SELECT 'bulk.' || g, now() FROM generate_series(1, 200000) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, processed_at, claims)
            SELECT 'bulk-' || g, 'a', 'bulk.' || g, 'consent-revoked', now(), 'done', now(), '{}'
            FROM generate_series(1, 200000) g;
            """)
        let c = try PostgresConnection(conninfo: url)
        let subs = (1...1000).map { "bulk.\($0 * 97)" }
        let ids = (1...1000).map { Int64($0 * 97) }
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 30, lockTimeoutSeconds: 5)) { c throws(PostgresError) in
            let plans: [(String, String, [String?])] = [
                ("claim", WorkerStatements.claim.sql, WorkerStatements.claim.bind(1000)),
                (
                    "create", WorkerStatements.createOrLockAccounts.sql,
                    WorkerStatements.createOrLockAccounts.bind(subs.map { ($0, AccountState(status: .active)) })
                ),
                ("lock", WorkerStatements.lockAccounts.sql, WorkerStatements.lockAccounts.bind(subs)),
                (
                    "update", WorkerStatements.updateAccounts.sql,
                    WorkerStatements.updateAccounts.bind(subs.map { ($0, AccountState(status: .active)) })
                ),
                (
                    "revoke", WorkerStatements.revokeSessions.sql,
                    WorkerStatements.revokeSessions.bind(subs.map { .init(sub: $0, createdAtOrBefore: nil, reason: "r") })
                ),
                ("erase", WorkerStatements.eraseEventEmails.sql, WorkerStatements.eraseEventEmails.bind(subs)),
                (
                    "erase before comeback", WorkerStatements.eraseEventEmailsBefore.sql,
                    WorkerStatements.eraseEventEmailsBefore.bind(.init(sub: "bulk.97", sinceMillis: 1_700_000_000_000))
                ),
                ("sweep ignored", WorkerStatements.eraseRacedIgnoredEmails.sql, []),
                ("done", WorkerStatements.markDone.sql, WorkerStatements.markDone.bind(ids.map { ($0, "applied") })),
                ("erase failed", WorkerStatements.eraseFailedEventEmail.sql, WorkerStatements.eraseFailedEventEmail.bind(97)),
            ]
            for (name, sql, parameters) in plans {
                let plan = try c.execute("EXPLAIN " + sql, parameters).rows.compactMap { $0.first ?? nil }
                let problems = Self.wholeTableScans(plan, tables: ["events", "accounts", "sessions"])
                #expect(problems.isEmpty, "\(name) reads a whole table: \(problems)\n\(plan.joined(separator: "\n"))")
            }
        }
    }

    @Test("the sweep of raced ignored events starts from the recent unknown-type events, whatever the accounts' statistics say")
    func sweepStartsFromUnknownTypes() throws {
        let url = try TestDatabase.create()
        // Events analyzed, accounts never (a new database after a first burst): 25,000 users
        // deleted. Joined freely, the planner started from accounts_status_idx and probed every
        // deleted user's events (96 ms a sweep).
        _ = try TestDatabase.query(
            url,
            """
            ALTER TABLE siwa.accounts SET (autovacuum_enabled = false);
            ALTER TABLE siwa.events SET (autovacuum_enabled = false);
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, claims)
            SELECT 'gone-' || g, 'a', 'gone.' || g,
                   (ARRAY['consent-revoked', 'email-disabled', 'account-delete', 'email-enabled'])[1 + g % 4],
                   now() - interval '1 hour' + g * interval '1 millisecond',
                   CASE WHEN g % 2 = 1 THEN 'w' || g || '@privaterelay.appleid.com' END, '{}'
            FROM generate_series(1, 100000) g;
            ANALYZE siwa.events;
            INSERT INTO siwa.accounts (apple_sub, status) SELECT 'gone.' || g, 'deleted' FROM generate_series(1, 100000, 4) g;
            """)
        let c = try PostgresConnection(conninfo: url)
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 30, lockTimeoutSeconds: 5)) { c throws(PostgresError) in
            let plan = try c.execute("EXPLAIN " + WorkerStatements.eraseRacedIgnoredEmails.sql).rows
                .compactMap { $0.first ?? nil }.joined(separator: "\n")
            #expect(plan.contains("Index Scan using events_unknown_type_idx"), "\(plan)")
            #expect(!plan.contains("accounts_status_idx"), "\(plan)")
        }
    }

    @Test("store_apple_token waits for a worker deleting the account: a sign-in older than the deletion is queued for revocation, not stored")
    func storeTokenSerializesWithDeletion() throws {
        let url = try TestDatabase.create()
        try RecordedTokenKey.record(url)
        let sub = "race.0001"
        _ = try TestDatabase.query(url, "INSERT INTO siwa.accounts (apple_sub) VALUES ($1)", [sub])
        // A worker's transaction is deleting the account (a minute ago), not yet committed.
        let worker = try PostgresConnection(conninfo: url)
        _ = try worker.execute("BEGIN")
        _ = try worker.execute(
            "UPDATE siwa.accounts SET status = 'deleted', status_event_time = now() - interval '1 minute' WHERE apple_sub = $1", [sub])
        let answer = Background {
            // A sign-in two minutes ago, stored late.
            try TestDatabase.query(
                url,
                """
                SELECT siwa.store_apple_token($1, 'com.example.a', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), 'r@privaterelay.appleid.com', true,
                                              now() - interval '2 minutes')
                """, [sub]
            ).scalar
        }
        #expect(try Self.oneWaitsForALock(url), "store_apple_token never waited for the worker's deletion")
        _ = try worker.execute("COMMIT")
        #expect(try answer.result()?.get() == "deleted")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.apple_tokens").scalar == "0")
        #expect(
            try TestDatabase.query(url, "SELECT reason || ':' || status FROM siwa.revocations WHERE apple_sub = $1", [sub]).scalar
                == "stale-sign-in:pending")
        // A sign-in after the deletion is the user coming back: stored, and recorded as an event.
        let back = try TestDatabase.query(
            url, "SELECT siwa.store_apple_token($1, 'com.example.a', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now())",
            [sub]
        ).scalar
        #expect(back == "created")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.apple_tokens").scalar == "1")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE type = 'sign-in'").scalar == "1")
    }

    @Test(
        "an app account a transfer import creates while a batch inserts it: the batch waits, fails, and applies its events one by one, none lost"
    )
    func appAccountCreatedMeanwhile() throws {
        let url = try TestDatabase.create()
        let admin = try PostgresConnection(conninfo: url)
        _ = try admin.rows(
            OutboxStatements.insert,
            [
                Self.notification(jti: "meanwhile-1", sub: "meanwhile.a", type: "email-disabled", email: "a@privaterelay.appleid.com"),
                Self.notification(jti: "meanwhile-2", sub: "meanwhile.b", type: "email-disabled", email: "b@privaterelay.appleid.com"),
            ])
        // The import's transaction: an app account of the first user, not yet committed.
        let importer = try PostgresConnection(conninfo: url)
        _ = try importer.execute("BEGIN")
        _ = try importer.execute("INSERT INTO siwa.app_accounts (apple_sub, aud, status) VALUES ('meanwhile.a', 'com.example.a', 'active')")
        let logs = LogSink.capturing()
        let logger = Logger(label: "meanwhile") { LineLogHandler(label: $0, level: .debug, format: .json, sink: logs) }
        let worker = Worker(conninfo: url, options: Worker.Options(), logger: logger, metrics: Metrics())
        let handled = Background { try worker.processBatch(on: try PostgresConnection(conninfo: url)) }
        #expect(try Self.oneWaitsForALock(url), "the batch never waited for the import's app account")
        _ = try importer.execute("COMMIT")
        #expect(try handled.result()?.get() == 2)
        #expect(logs.lines.contains { $0.contains("applying one by one") }, "\(logs.lines)")
        let events = try TestDatabase.query(url, "SELECT sub || ':' || status || ':' || coalesce(outcome, '') FROM siwa.events ORDER BY sub")
        #expect(events.rows.map { $0[0] ?? "" } == ["meanwhile.a:done:applied", "meanwhile.b:done:applied"])
        let apps = try TestDatabase.query(
            url, "SELECT apple_sub || ':' || email_forwarding::text || ':' || email FROM siwa.app_accounts ORDER BY apple_sub")
        #expect(
            apps.rows.map { $0[0] ?? "" } == [
                "meanwhile.a:false:a@privaterelay.appleid.com", "meanwhile.b:false:b@privaterelay.appleid.com",
            ])
    }

    @Test("accounts are created and locked in one sub order: a batch and another worker's one-by-one path do not deadlock")
    func accountLockOrder() throws {
        let url = try TestDatabase.create()
        // 'lock.a' already took a newer consent-revoked: the events below are stale for it, so a
        // worker only locks its row (no new row version, which others would wait for anyway).
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.accounts (apple_sub, status, last_event_time, status_event_time)
            VALUES ('lock.a', 'consent_revoked', '2040-01-01', '2040-01-01')
            """)
        func event(_ sub: String) -> ClaimedEvent {
            ClaimedEvent(
                id: -1, audience: "a", event: AppleEvent(type: .consentRevoked, sub: sub, eventTimeMillis: 1_700_000_000_000),
                attempts: 0)
        }
        // One by one (worker B): the existing 'lock.a' first, then the new 'lock.b', in one transaction.
        let b = try PostgresConnection(conninfo: url)
        _ = try b.execute("BEGIN")
        _ = try BatchApplier.apply([event("lock.a")], hook: .shippedNoOp, on: b)
        // A batch of both (worker A) waits for B's lock on 'lock.a'. It must not hold 'lock.b'
        // meanwhile (inserting new accounts before locking existing ones did).
        let both = [event("lock.a"), event("lock.b")]
        let batch = Background {
            try PostgresConnection(conninfo: url).transaction { c throws(PostgresError) in
                try BatchApplier.apply(both, hook: .shippedNoOp, on: c).count
            }
        }
        #expect(try Self.oneWaitsForALock(url), "the batch never waited for the account lock")
        // B goes on with 'lock.b': it must not wait for A (a deadlock PostgreSQL would break after
        // deadlock_timeout by failing one side).
        let second = Result { () throws(PostgresError) -> [AccountDecision] in try BatchApplier.apply([event("lock.b")], hook: .shippedNoOp, on: b) }
        #expect(throws: Never.self) { try second.get() }
        _ = try b.execute("COMMIT")
        #expect(try batch.result()?.get() == 2)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.accounts WHERE status = 'consent_revoked'").scalar == "2")
    }

    @Test("the claim reads the due index in order on a never-analyzed table with a large backlog; no JIT")
    func claimOnNeverAnalyzedBacklog() throws {
        let url = try TestDatabase.create()
        // A new (or truncated) table has no statistics and no page count: the planner took a
        // 100k backlog for a few hundred rows and sorted all of it for every claim of 1000.
        _ = try TestDatabase.query(
            url,
            """
            ALTER TABLE siwa.events SET (autovacuum_enabled = false);
            ALTER TABLE siwa.event_queue SET (autovacuum_enabled = false);
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            SELECT 'backlog-' || g, 'a', 'backlog.' || g, 'consent-revoked', now(), '{}'
            FROM generate_series(1, 100000) g;
            """)
        let c = try PostgresConnection(conninfo: url)
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 30, lockTimeoutSeconds: 5)) { c throws(PostgresError) in
            let plan = try c.execute("EXPLAIN " + WorkerStatements.claim.sql, WorkerStatements.claim.bind(1000)).rows
                .compactMap { $0.first ?? nil }
            let text = plan.joined(separator: "\n")
            // The queue's due index in order, stopping at the batch size; the claimed rows (not
            // the backlog) are then read by primary key and sorted.
            #expect(text.contains("Index Scan using event_queue_due_idx"), "\(text)")
            #expect(text.contains("Index Cond: (id = ANY"), "\(text)")
            #expect(!text.contains("Bitmap") && !text.contains("Seq Scan"), "\(text)")
            // Row estimates without statistics cross jit_above_cost; compiling cost ~350 ms a statement.
            #expect(try c.execute("SHOW jit").rows.first?.first == "off")
        }
    }
}

@Suite("Schema: migrations by a database owner that is not a superuser", .needsDatabase)
struct OwnerMigrationTests {
    @Test("a non-superuser owner (as on managed PostgreSQL) migrates a new database, and again")
    func nonSuperuserOwner() throws {
        _ = try TestDatabase.create()  // a superuser migration first: the cluster-wide siwa_* roles exist
        let admin = try TestDatabase.adminURL()
        let name = "owner_\(UInt32.random(in: 0...UInt32.max))"
        _ = try TestDatabase.query(admin, "CREATE ROLE \(name) LOGIN CREATEROLE")
        _ = try TestDatabase.query(admin, "CREATE DATABASE \(name) OWNER \(name)")
        // The siwa_* roles are cluster-wide and exist already; the owner needs to grant to them.
        _ = try TestDatabase.query(admin, "GRANT siwa_receiver, siwa_worker, siwa_dashboard TO \(name) WITH ADMIN OPTION")
        let fields = admin.split(separator: " ").filter { !$0.hasPrefix("user=") && !$0.hasPrefix("dbname=") }
        let url = (fields + ["user=\(name)", "dbname=\(name)"]).joined(separator: " ")
        try Migrator.migrate(conninfo: url, force: true)
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM pg_proc WHERE proname = 'on_event'").scalar == "1")
        let connection = try PostgresConnection(conninfo: url)
        #expect(try connection.row(WorkerStatements.hookIsDefault) == true)
    }
}

extension StoreTests {
    /// Bounded: true once one backend of the test's database waits for a lock.
    static func oneWaitsForALock(_ url: String) throws -> Bool {
        try eventually(timeout: 10) {
            try TestDatabase.query(url, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                .scalar == "1"
        }
    }
}
