import Foundation
import SiwaPostgres
import Testing

@testable import SiwaApp

/// `siwa.event_queue` holds exactly the pending, failed and dead rows of `siwa.events`, whatever
/// writes them, and marking events done writes no index entry of `siwa.events`.
@Suite("Event queue", .needsDatabase)
struct EventQueueTests {
    /// The queue as it should be, from `siwa.events`, and as it is; `id status next_attempt_at`.
    private func expectQueueMatches(_ c: PostgresConnection, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let select = "SELECT id || ' ' || status || ' ' || next_attempt_at || ' ' || received_at FROM %@ ORDER BY id"
        let want = try c.execute(
            select.replacingOccurrences(of: "%@", with: "siwa.events WHERE status IN ('pending', 'failed', 'dead')")
        ).rows
        let have = try c.execute(select.replacingOccurrences(of: "%@", with: "siwa.event_queue")).rows
        #expect(have == want, sourceLocation: sourceLocation)
        let backlog = try c.execute("SELECT pending || ' ' || failed || ' ' || dead FROM siwa.backlog").scalar
        let counted = try c.execute(
            """
            SELECT count(*) FILTER (WHERE status = 'pending') || ' ' || count(*) FILTER (WHERE status = 'failed')
                   || ' ' || count(*) FILTER (WHERE status = 'dead')
            FROM siwa.events
            """
        ).scalar
        #expect(backlog == counted, sourceLocation: sourceLocation)
    }

    @Test("the queue follows inserts, the worker's updates, replay, operators' SQL, deletes and TRUNCATE")
    func followsEveryChange() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            SELECT 'q' || g, 'a', 's' || g, CASE WHEN g % 5 = 0 THEN 'weird-type' ELSE 'consent-revoked' END,
                   now() - g * interval '1 s',
                   CASE WHEN g % 5 = 0 THEN 'ignored' WHEN g % 7 = 0 THEN 'dead' WHEN g % 11 = 0 THEN 'done' ELSE 'pending' END, '{}'
            FROM generate_series(1, 60) g
            """)
        // A duplicate inserts nothing, queues nothing.
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            VALUES ('q1', 'a', 'x', 'consent-revoked', now(), '{}') ON CONFLICT DO NOTHING
            """)
        try expectQueueMatches(c)
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue").scalar == "44")

        // The receiver's role writes events without any privilege on the queue.
        try c.execute("SET ROLE siwa_receiver")
        try c.execute("INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims) VALUES ('r1', 'a', 'r', 'email-enabled', now(), '{}')")
        try c.execute("RESET ROLE")
        #expect(throws: PostgresError.self) {
            try c.execute("SET ROLE siwa_receiver; SELECT * FROM siwa.event_queue")
        }
        try c.execute("RESET ROLE")
        try expectQueueMatches(c)

        // The worker's claim, a failure, a death and done, as the worker writes them.
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 10, lockTimeoutSeconds: 2)) { c throws(PostgresError) in
            let claimed = try c.rows(WorkerStatements.claim, 10)
            #expect(claimed.count == 10)
            _ = try c.affected(WorkerStatements.markFailed, .init(id: claimed[0].id, status: .failed, error: "x", retryInSeconds: 60))
            _ = try c.affected(WorkerStatements.markFailed, .init(id: claimed[1].id, status: .dead, error: "y", retryInSeconds: 0))
            _ = try c.affected(WorkerStatements.markDone, claimed.dropFirst(2).map { ($0.id, "applied") })
        }
        try expectQueueMatches(c)
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue WHERE status = 'failed' AND next_attempt_at > now()").scalar == "1")

        // A failed event is not due before its time: the next claim skips it.
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 10, lockTimeoutSeconds: 2)) { c throws(PostgresError) in
            let ids = try c.rows(WorkerStatements.claim, 1000).map(\.id)
            let failed = try c.execute("SELECT id FROM siwa.events WHERE status = 'failed'").scalar.flatMap { Int64($0) }
            #expect(failed != nil && !ids.contains(failed!))
            #expect(ids.count == 28)  // 37 pending + 1 new, 10 claimed before (8 done, 1 dead, 1 failed not due)
        }

        // Replay puts every dead event back, through the queue's dead index.
        _ = try c.affected(OperatorStatements.replayAll, ())
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue WHERE status = 'dead'").scalar == "0")
        try expectQueueMatches(c)

        // An operator's own SQL: an event set done by hand leaves, one set pending comes back.
        try c.execute("UPDATE siwa.events SET status = 'done' WHERE jti IN ('q2', 'q3')")
        try c.execute("UPDATE siwa.events SET status = 'pending' WHERE jti = 'q11'")
        try c.execute("UPDATE siwa.events SET next_attempt_at = now() + interval '1 hour' WHERE jti = 'q18'")
        try c.execute("UPDATE siwa.events SET received_at = received_at - interval '1 day' WHERE jti = 'q17'")
        // Erasing addresses (an update that changes neither status nor time) changes nothing.
        try c.execute("UPDATE siwa.events SET email = NULL WHERE sub LIKE 's%'")
        try expectQueueMatches(c)

        try c.execute("DELETE FROM siwa.events WHERE jti IN ('q1', 'q6', 'q10')")
        try expectQueueMatches(c)
        try c.execute("TRUNCATE siwa.events")
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue").scalar == "0")
    }

    @Test("queue rows left without their event (an UPDATE of id) are dropped by the retention pass; the worker goes on")
    func staleRowsDropped() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            SELECT 'st' || g, 'a', 'st' || g, 'consent-revoked', now(), '{}' FROM generate_series(1, 3) g
            """)
        // Renumbered by hand: the update trigger sees only the new rows, so the old ids stay
        // queued, at the head of the queue, with nothing to work on.
        try c.execute("UPDATE siwa.events SET id = id + 1000000 WHERE jti IN ('st1', 'st2')")
        let begin = WorkerStatements.beginBatch(statementTimeoutSeconds: 10, lockTimeoutSeconds: 2)
        let starved = try c.transaction(begin: begin) { c throws(PostgresError) in try c.rows(WorkerStatements.claim, 2).count }
        #expect(starved == 0)
        // As the retention pass runs it: on the worker's connection, with the worker's rights.
        try c.execute("SET ROLE siwa_worker")
        #expect(try Retention.dropStaleQueueRows(on: c) == 2)
        try c.execute("RESET ROLE")
        try expectQueueMatches(c)
        let claimed = try c.transaction(begin: begin) { c throws(PostgresError) in try c.rows(WorkerStatements.claim, 2).count }
        #expect(claimed == 2)
        #expect(try Retention.dropStaleQueueRows(on: c) == 0)
    }

    @Test("marking events done is a HOT update: no index entry of siwa.events is written")
    func markDoneWritesNoIndex() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        // Apple-sized claims (a few hundred bytes), as the receiver stores them.
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            SELECT 'hot' || g, 'com.example.app', '001234.' || md5(g::text) || '.0123', 'consent-revoked', now(),
                   jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', 'com.example.app', 'iat', 1700000000,
                                      'jti', 'hot' || g, 'events', repeat('x', 300))
            FROM generate_series(1, 500) g
            """)
        let counts = try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 10, lockTimeoutSeconds: 2)) {
            c throws(PostgresError) in
            let claimed = try c.rows(WorkerStatements.claim, 500)
            _ = try c.affected(WorkerStatements.markDone, claimed.map { ($0.id, "applied") })
            return try c.execute(
                """
                SELECT pg_stat_get_xact_tuples_updated('siwa.events'::regclass) || ' '
                       || pg_stat_get_xact_tuples_hot_updated('siwa.events'::regclass)
                """
            ).scalar
        }
        // Any index naming status (or another column mark-done writes) makes every update non-HOT.
        #expect(counts == "500 500")
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue").scalar == "0")
    }

    @Test("an upgrade queues the events a release without the queue left to do, once")
    func upgradeQueuesWhatIsLeft() throws {
        let url = try TestDatabase.createEmpty()
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/schema-previous-release.sql")
        let c = try PostgresConnection(conninfo: url)
        try c.execute(try String(contentsOf: fixture, encoding: .utf8))
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims, status, attempts, next_attempt_at)
            VALUES ('u1', 'a', 'u.1', 'consent-revoked', now(), '{}', 'pending', 0, now()),
                   ('u2', 'a', 'u.2', 'consent-revoked', now(), '{}', 'failed', 2, now() + interval '5 min'),
                   ('u3', 'a', 'u.3', 'consent-revoked', now(), '{}', 'dead', 9, now()),
                   ('u4', 'a', 'u.4', 'consent-revoked', now(), '{}', 'done', 1, now()),
                   ('u5', 'a', 'u.5', 'weird-type', now(), '{}', 'ignored', 0, now())
            """)
        try Migrator.migrate(conninfo: url)
        try expectQueueMatches(c)
        #expect(try c.execute("SELECT string_agg(status, ',' ORDER BY id) FROM siwa.event_queue").scalar == "pending,failed,dead")
        #expect(try c.execute("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'siwa.events'::regclass").scalar == "fillfactor=50")
        // A later deploy changes nothing, and keeps an operator's own fillfactor.
        try c.execute("ALTER TABLE siwa.events SET (fillfactor = 100)")
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try c.execute("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'siwa.events'::regclass").scalar == "fillfactor=100")
        try expectQueueMatches(c)
        #expect(try c.execute("SELECT count(*) FROM siwa.event_queue").scalar == "3")
        let statusIndexes = "SELECT count(*) FROM pg_indexes WHERE schemaname = 'siwa' AND tablename = 'events' AND indexdef LIKE '%status%'"
        #expect(try c.execute(statusIndexes).scalar == "0")
    }
}
