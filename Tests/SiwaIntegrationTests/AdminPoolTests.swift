import Foundation
import SiwaDevTools
import SiwaPostgres
import Testing

@testable import SiwaApp

/// The admin listener's database pool runs every use in a transaction with a statement and a
/// lock timeout (transaction-local, so nothing lingers on a pooled or PgBouncer connection).
@Suite("Admin pool timeouts", .needsDatabase)
struct AdminPoolTests {
    @Test("statement_timeout 5 s and lock_timeout 2 s in each use; a row lock held elsewhere fails the statement with 55P03 after 2 s, rolled back")
    func timeouts() throws {
        let conninfo = try TestDatabase.create()
        let pool = PostgresPool(conninfo: conninfo, size: 1, transactionBegin: AdminStatements.beginAdmin)
        defer { pool.close() }
        let settings = try pool.withConnection { c in
            try c.execute("SELECT current_setting('statement_timeout') AS s, current_setting('lock_timeout') AS l").rows.first
        }
        #expect(settings == ["5s", "2s"])
        // A pool without it keeps the server's defaults.
        let plain = PostgresPool(conninfo: conninfo, size: 1)
        defer { plain.close() }
        #expect(try plain.withConnection { c in try c.execute("SHOW statement_timeout").scalar } == "0")

        _ = try TestDatabase.query(conninfo, "CREATE TABLE public.admin_lock (id int PRIMARY KEY); INSERT INTO public.admin_lock VALUES (1)")
        let holder = try PostgresConnection(conninfo: conninfo)
        try holder.execute("BEGIN")
        try holder.execute("SELECT * FROM public.admin_lock FOR UPDATE")
        let started = Date()
        do {
            _ = try pool.withConnection { c in try c.execute("UPDATE public.admin_lock SET id = 2") }
            Issue.record("the update did not time out")
        } catch let error as PostgresError {
            #expect(error.sqlState == "55P03", "\(error)")
        }
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 1.9 && waited < 4, "waited \(waited) s")
        try holder.execute("ROLLBACK")
        // The failed transaction was rolled back: the pool's connection works.
        #expect(try pool.withConnection { c in try c.execute("SELECT count(*) FROM public.admin_lock").scalar } == "1")
    }

    @Test(
        "the application's admin pool really runs with them: an exchange whose account row is held is decided after the sign-in's 15 s lock wait, stored, not revoked; one slowed past 20 s answers 503 after 20 s (57014), its token queued and revoked"
    )
    func applicationPoolTimeouts() throws {
        let h = try DeletionHarness()
        defer { h.stop() }
        let sub = "001234.adminpool.0001"
        try h.signIn(sub: sub)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })

        /// An exchange for `sub` while `holding` runs in another session; the answer and its seconds.
        func exchange(while holding: [String]) throws -> (reply: DeletionHarness.Reply, seconds: Double) {
            let holder = try PostgresConnection(conninfo: h.conninfo, applicationName: "holder")
            try holder.execute("BEGIN")
            for sql in holding { _ = try holder.execute(sql, [sub]) }
            defer { _ = try? holder.execute("ROLLBACK") }
            let code = "c." + NotificationSigner.newJTI()
            h.fake.addCode(code, user: .init(sub: sub))
            let started = Date()
            // Without the pool's timeouts it would wait for the holder: the client gives up after 30 s.
            let reply = try DeletionHarness.post(
                h.adminURL + "/apple/tokens", json: DeletionHarness.exchangeBody(code: code), timeout: 30, token: h.apiToken)
            return (reply, Date().timeIntervalSince(started))
        }
        let revokedBefore = h.fake.revokedTokens.count
        // store_apple_token locks the account row first: held elsewhere, the sign-in's lock wait (15 s,
        // AdminStatements.signInLockWait: a worker batch may hold the row) ends the wait, and the
        // sign-in is decided without the lock: the fresh grant is stored, never queued for revocation.
        let locked = try exchange(while: ["SELECT 1 FROM siwa.accounts WHERE apple_sub = $1 FOR UPDATE"])
        #expect(locked.reply.status == 200, "\(locked.reply.body)")
        #expect(locked.seconds >= 14.9 && locked.seconds < 19, "\(locked.seconds) s")
        #expect(try h.scalar("SELECT count(*) FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "0")
        // A statement that runs long (a trigger sleeping 25 s on the token insert): the sign-in's statement_timeout (20 s).
        _ = try h.query(
            """
            CREATE FUNCTION public.slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_sleep(25); RETURN NEW; END $$;
            CREATE TRIGGER slow_insert BEFORE INSERT OR UPDATE ON siwa.apple_tokens FOR EACH ROW EXECUTE FUNCTION public.slow_insert();
            """)
        let slow = try exchange(while: [])
        #expect(slow.reply.status == 503 && slow.reply.error == "database_unavailable", "\(slow.reply.body)")
        #expect(slow.seconds >= 19.9 && slow.seconds < 24, "\(slow.seconds) s")
        let failures = h.logs.lines.filter { $0.contains("cannot store the refresh token") }
        #expect(failures.count == 1 && failures[0].contains("57014"), "\(failures)")
        // The token of the failed store (only) was queued for revocation and revoked.
        #expect(try h.scalar("SELECT count(*) FROM siwa.revocations WHERE apple_sub = $1 AND reason = 'exchange-failed'", [sub]) == "1")
        #expect(h.eventually { h.fake.revokedTokens.count == revokedBefore + 1 })
        print(
            "admin pool: a held row lock -> decided without it after \(String(format: "%.2f", locked.seconds)) s (sign-in lock wait 15 s); "
                + "a 25 s statement -> 503 after \(String(format: "%.2f", slow.seconds)) s (sign-in statement_timeout 20 s)")
    }
}
