import Foundation
import SiwaPostgres
import Testing

@testable import SiwaApp

@Suite("Schema and migrations", .needsDatabase)
struct SchemaTests {
    @Test("the binary carries exactly schema.sql")
    func embeddedSchemaMatchesFile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let file = try String(contentsOf: root.appendingPathComponent("schema.sql"), encoding: .utf8)
        #expect(Migrator.schemaSQL == file)
    }

    @Test("migrate is idempotent and keeps a replaced hook")
    func idempotent() throws {
        let url = try TestDatabase.create()
        _ = try TestDatabase.query(
            url,
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE sql AS $$ SELECT 1 $$
            """)
        try Migrator.migrate(conninfo: url)
        try Migrator.migrate(conninfo: url)
        let language = try TestDatabase.query(
            url,
            """
            SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'on_event'
            """
        ).scalar
        #expect(language == "sql")
    }

    @Test("migrate replaces the shipped no-op of an earlier version (marked siwa.hook = 'default'), so the worker skips it")
    func upgradesTheOldDefaultHook() throws {
        let url = try TestDatabase.create()
        // The shipped hook as an earlier schema created it.
        _ = try TestDatabase.query(
            url,
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql SET siwa.hook = 'default' AS $$
            BEGIN
                -- The shipped no-op.
            END
            $$
            """)
        let connection = try PostgresConnection(conninfo: url)
        #expect(try connection.row(WorkerStatements.hookIsDefault) == false)
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try connection.row(WorkerStatements.hookIsDefault) == true)
    }

    @Test("siwa_receiver may insert events but not read accounts; siwa_dashboard sees no raw emails")
    func roles() throws {
        let url = try TestDatabase.create()
        let c = try PostgresConnection(conninfo: url)
        try c.execute("SET ROLE siwa_receiver")
        try c.execute(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            VALUES ('j1', 'a', 's', 'consent-revoked', now(), 'pending', '{}') ON CONFLICT DO NOTHING
            """)
        #expect(throws: PostgresError.self) { try c.execute("SELECT * FROM siwa.accounts") }
        #expect(throws: PostgresError.self) { try c.execute("SELECT * FROM siwa.events") }
        try c.execute("RESET ROLE")
        try c.execute("SET ROLE siwa_dashboard")
        _ = try c.execute("SELECT * FROM siwa.backlog")
        _ = try c.execute("SELECT * FROM siwa.events_per_day")
        #expect(throws: PostgresError.self) { try c.execute("SELECT email FROM siwa.accounts") }
        #expect(throws: PostgresError.self) { try c.execute("SELECT email FROM siwa.events") }
    }
}
