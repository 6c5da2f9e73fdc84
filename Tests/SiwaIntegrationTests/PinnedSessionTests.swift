import Foundation
import SiwaCore
import SiwaPostgres
import Testing

/// Every transaction siwa-notify opens resolves names with `search_path = pg_catalog, pg_temp`
/// (CONTRACT §6), however it is opened: a statement sent alone, a `BEGIN` of the caller's own
/// (with its `SET LOCAL`s), a pool's transaction, and behind PgBouncer's transaction pooling,
/// where each transaction may run on another server connection. A planted `=(varchar, varchar)`
/// in a writable `public` is what it defends against: pg_catalog has no such operator, so the
/// planted one is an exact match for a comparison of two varchars.
@Suite("Pinned sessions", .serialized, .needsDatabase)
struct PinnedSessionTests {
    /// A database whose `public` has the planted operator; it counts its runs in a sequence.
    static func planted() throws -> String {
        let url = try TestDatabase.createEmpty()
        _ = try TestDatabase.query(
            url,
            """
            CREATE SEQUENCE public.hits;
            CREATE FUNCTION public.planted_eq(character varying, character varying) RETURNS boolean
              LANGUAGE sql AS $$ SELECT pg_catalog.nextval('public.hits') > 0 $$;
            CREATE OPERATOR public.= (LEFTARG = character varying, RIGHTARG = character varying, FUNCTION = public.planted_eq);
            """)
        return url
    }

    static func hits(_ url: String) throws -> String? {
        try TestDatabase.query(url, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.hits").scalar
    }

    static let comparison = "SELECT $1::varchar = $2::varchar AS same, pg_catalog.current_setting('search_path') AS path"

    @Test("the planted operator is real: a client with the login's own search_path runs it")
    func plantRuns() throws {
        let url = try Self.planted()
        let row = try TestDatabase.query(url, Self.comparison, ["a", "b"]).rows.first
        #expect(row?[0] == "t", "the planted operator answered")
        #expect(try Self.hits(url) == "1")
    }

    @Test("a statement alone, a BEGIN of the caller's own, a pool's transaction: each pinned")
    func everyWayPinned() throws {
        let url = try Self.planted()
        let c = try PostgresConnection(conninfo: url)
        var rows: [[String?]] = []
        rows.append(try c.execute(Self.comparison, ["a", "b"]).rows[0])  // alone, extended protocol
        rows.append(try c.execute("SELECT 'a'::varchar = 'b'::varchar, pg_catalog.current_setting('search_path')").rows[0])  // alone, simple
        rows.append(
            try c.transaction(begin: "BEGIN; SET LOCAL statement_timeout = '5s'") { c throws(PostgresError) in
                try c.execute(Self.comparison, ["a", "b"]).rows[0]
            })
        try c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        rows.append(try c.execute(Self.comparison, ["a", "b"]).rows[0])
        try c.execute("COMMIT")
        for begin: String? in [nil, "BEGIN; SET LOCAL lock_timeout = '1s'"] {
            let pool = PostgresPool(conninfo: url, size: 1, transactionBegin: begin)
            rows.append(try pool.withConnection { c in try c.execute(Self.comparison, ["a", "b"]).rows[0] })
        }
        for (i, row) in rows.enumerated() {
            #expect(row == ["f", "pg_catalog, pg_temp"], "way \(i): \(row)")
        }
        #expect(try Self.hits(url) == "0", "the planted operator ran")
        // The session's own setting is left as the login has it: only transactions are pinned.
        let after = try TestDatabase.query(url, "SELECT pg_catalog.current_setting('search_path')").scalar
        #expect(after == "\"$user\", public")
    }

    @Test("a failed statement sent alone is rolled back and its error kept; the connection goes on")
    func failureRolledBack() throws {
        let url = try Self.planted()
        let c = try PostgresConnection(conninfo: url)
        #expect(throws: PostgresError.self) { try c.execute("SELECT 1 / 0") }
        let error = #expect(throws: PostgresError.self) { try c.execute("SELECT 1 / $1::int", ["0"]) }
        #expect(error?.sqlState == "22012")
        #expect(try c.execute("SELECT 1").scalar == "1")
        #expect(try c.execute("CREATE TABLE public.t (a int)").affectedRows == 0)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM public.t").scalar == "0", "a statement sent alone is committed")
    }

    @Test(
        "behind PgBouncer in transaction pooling, every transaction pinned",
        .enabled(if: PgBouncer.isInstalled, "pgbouncer is not installed (scripts/setup installs it)"))
    func behindPgBouncer() throws {
        let admin = try TestDatabase.adminURL()
        let url = try Self.planted()
        let dbname = url.components(separatedBy: "dbname=").last ?? ""
        let bouncer = try PgBouncer(upstream: admin, poolMode: "transaction", poolSize: 1)
        defer { bouncer.stop() }
        let c = try PostgresConnection(conninfo: bouncer.conninfo(dbname: dbname))
        // Another client leaves its session setting on the one server connection.
        let other = try PostgresConnection(conninfo: bouncer.conninfo(dbname: dbname), pinsSearchPath: false)
        try other.execute("SET search_path = public, pg_catalog")
        for _ in 0..<3 {
            #expect(try c.execute(Self.comparison, ["a", "b"]).rows[0] == ["f", "pg_catalog, pg_temp"])
            let inTransaction = try c.transaction { c throws(PostgresError) in try c.execute(Self.comparison, ["a", "b"]).rows[0] }
            #expect(inTransaction == ["f", "pg_catalog, pg_temp"])
        }
        #expect(try Self.hits(url) == "0", "the planted operator ran")
    }
}
