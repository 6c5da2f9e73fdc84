import Testing

@testable import SiwaCore

@Suite("The pinned search_path: which statements open, join or stay out of a pinned transaction")
struct PinnedSearchPathTests {
    typealias P = PinnedSearchPath

    @Test("a BEGIN gets the pin in the same text, before the caller's own SET LOCALs")
    func beginPinned() {
        #expect(P.plan("BEGIN") == .opensTransaction("BEGIN; SET LOCAL search_path = pg_catalog, pg_temp"))
        #expect(
            P.plan("BEGIN; SET LOCAL statement_timeout = '5s'")
                == .opensTransaction("BEGIN; SET LOCAL search_path = pg_catalog, pg_temp; SET LOCAL statement_timeout = '5s'"))
        #expect(
            P.plan("begin isolation level repeatable read; select 1")
                == .opensTransaction("begin isolation level repeatable read; SET LOCAL search_path = pg_catalog, pg_temp; select 1"))
        #expect(
            P.plan("START TRANSACTION READ ONLY")
                == .opensTransaction("START TRANSACTION READ ONLY; SET LOCAL search_path = pg_catalog, pg_temp"))
    }

    @Test("a text opening with comments, as schema.sql does, is read past them")
    func commentsSkipped() {
        let schema = "-- a comment; with a semicolon\n/* a block; */\nBEGIN;\nCREATE SCHEMA siwa;\nCOMMIT;\n"
        #expect(P.leadingWords(schema, count: 2) == ["BEGIN"])
        guard case .opensTransaction(let text) = P.plan(schema) else {
            Issue.record("not seen as opening a transaction")
            return
        }
        #expect(text.contains("BEGIN; SET LOCAL search_path = pg_catalog, pg_temp;\nCREATE SCHEMA siwa;"))
    }

    @Test("any other statement, in any case, runs in a pinned transaction of its own")
    func othersWrapped() {
        for sql in [
            "SELECT 1", "select * from siwa.events where sub = $1", "  insert into x values (1)", "UPDATE t SET a = 1",
            "WITH a AS (SELECT 1) SELECT * FROM a", "LISTEN siwa_events", "SET ROLE siwa_worker", "DO $$ BEGIN END $$",
            "CREATE TABLE t (a int)", "CREATE INDEX t_a ON t (a)", "DROP TABLE t", "ALTER TABLE t ADD b int", "SHOW search_path",
        ] {
            #expect(P.plan(sql) == .wrap, "\(sql)")
        }
    }

    @Test("transaction control and what PostgreSQL refuses inside a transaction block stay as they are")
    func asIs() {
        for sql in [
            "COMMIT", "rollback", "END", "ABORT", "SAVEPOINT s", "RELEASE SAVEPOINT s", "PREPARE TRANSACTION 'x'",
            "VACUUM (TRUNCATE false) siwa.events", "vacuum analyze", "CHECKPOINT", "CREATE DATABASE d OWNER o", "drop database d",
            "ALTER SYSTEM SET synchronous_commit = on", "CREATE INDEX CONCURRENTLY i ON t (a)",
            "CREATE UNIQUE INDEX CONCURRENTLY i ON t (a)", "DROP INDEX CONCURRENTLY i", "REINDEX TABLE t", "", "  ; ",
        ] {
            #expect(P.plan(sql) == .asIs, "\(sql)")
        }
    }
}
