import Foundation
import SiwaPostgres
import Testing

@testable import SiwaApp

/// The admin listener's database pool runs every use in a transaction with a statement and a
/// lock timeout (transaction-local, so nothing lingers on a pooled or PgBouncer connection).
@Suite("Admin pool timeouts", .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
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
}
