import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// A database made by an earlier `schema.sql` and then migrated is the database a fresh install
/// makes: the same tables, columns, defaults, constraints, indexes, views, functions (with their
/// settings), triggers and grants, as `pg_dump --schema-only` prints schema `siwa`. The earlier
/// shapes are kept as fixtures from git history (`Fixtures/schemas/schema-<commit>.sql`), each
/// applied as that release applied it, a few rows added where an upgrade step moves data, then
/// migrated by `Migrator.migrate`. Each case gets a database of its own: roles are cluster-wide.
@Suite("Schema equivalence: an upgraded database is a fresh one", .serialized, .needsDatabase)
struct SchemaEquivalenceTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/schemas")

    /// Rows an upgrade step moves or rewrites (app accounts from accounts and their events, the
    /// queue from the outstanding events, byte-order collation under existing keys, revocations
    /// waiting without a token, adopted tokens dated -infinity, console sessions without an
    /// operator), and what each step made of them (`moved`).
    static let rows: [String: String] = [
        "71ff9a9": """
        INSERT INTO siwa.accounts (apple_sub, email, status) VALUES ('old.1', 'o@privaterelay.appleid.com', 'active');
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims, status)
        VALUES ('j1', 'com.example.app', 'old.1', 'email-enabled', '2025-07-01', '{}', 'done'),
               ('j2', 'com.example.app', 'old.2', 'consent-revoked', '2025-07-02', '{}', 'pending');
        INSERT INTO siwa.sessions (apple_sub) VALUES ('old.1');
        """,
        "de5cb11": """
        INSERT INTO siwa.revocations (apple_sub, client_id, reason, status, finished_at)
        VALUES ('old.1', 'com.example.app', 'in-app-deletion', 'no_token', now());
        INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ('old.2', 'com.example.app', 'in-app-deletion');
        INSERT INTO siwa.sessions (apple_sub, revoked_at) VALUES ('old.1', now());
        """,
        "3731ab6": """
        INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, signed_in_at, source)
        VALUES ('old.1', 'com.example.app', 'k1', '\\x00', '-infinity', 'better-auth');
        INSERT INTO siwa.console_sessions (token_hash, token_fingerprint) VALUES ('h1', 'f1');
        """,
    ]

    static let moved: [String: [(query: String, expected: String)]] = [
        "71ff9a9": [
            ("SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM siwa.event_queue", "2:pending"),
            ("SELECT string_agg(apple_sub || '/' || aud, ',') FROM siwa.app_accounts", "old.1/com.example.app"),
        ],
        "de5cb11": [("SELECT status FROM siwa.revocations WHERE apple_sub = 'old.2'", "no_token")],
        "3731ab6": [
            ("SELECT (signed_in_at > '-infinity')::text FROM siwa.apple_tokens", "true"),
            ("SELECT count(*) FROM siwa.console_sessions", "0"),
        ],
    ]

    static func fixtureCommits() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: fixtures.path)
            .filter { $0.hasPrefix("schema-") && $0.hasSuffix(".sql") }
            .map { String($0.dropFirst("schema-".count).dropLast(".sql".count)) }
            .sorted()
    }

    @Test("the fixtures cover the first landed shape, the shapes since, and every release of CHANGELOG.md")
    func fixturesPresent() throws {
        let commits = try Self.fixtureCommits()
        #expect(commits.contains("71ff9a9") && commits.contains("0735416") && commits.contains("2829282"), "\(commits)")
        // scripts/release adds schema-v<VERSION>.sql with each release's entry.
        let changelog = try String(
            contentsOf: Self.fixtures.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let releases = changelog.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("## ["), let close = line.firstIndex(of: "]") else { return nil }
            let name = line[line.index(line.startIndex, offsetBy: 4)..<close]
            return name == "Unreleased" ? nil : "v" + name
        }
        #expect(releases.contains("v0.9.0"))
        #expect(Set(releases).isSubset(of: Set(commits)), "releases without a fixture: \(Set(releases).subtracting(commits).sorted())")
    }

    @Test("every earlier shape, migrated, dumps as a fresh install", arguments: try fixtureCommits())
    func upgradedEqualsFresh(commit: String) throws {
        let fresh = try SchemaDump.normalized(conninfo: try TestDatabase.create())
        let url = try TestDatabase.createEmpty()
        let connection = try PostgresConnection(conninfo: url)
        try connection.execute(try String(contentsOf: Self.fixtures.appendingPathComponent("schema-\(commit).sql"), encoding: .utf8))
        if let rows = Self.rows[commit] { try connection.execute(rows) }
        #expect(try Migrator.migrate(conninfo: url) == .applied)
        for (query, expected) in Self.moved[commit] ?? [] {
            #expect(try connection.execute(query).scalar == expected, "\(commit): \(query)")
        }
        let upgraded = try SchemaDump.normalized(conninfo: url)
        let missing = fresh.subtracting(upgraded).sorted(), extra = upgraded.subtracting(fresh).sorted()
        #expect(
            missing.isEmpty && extra.isEmpty,
            "\(commit): only in a fresh install:\n\(missing.joined(separator: "\n"))\nonly after the upgrade:\n\(extra.joined(separator: "\n"))")
        // A later deploy migrates again: still the same.
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try SchemaDump.normalized(conninfo: url) == upgraded)
    }

    @Test("schema.sql: tables in part 1, changes to them only in part 2, what reads them in part 3, grants in part 4")
    func layout() throws {
        let root = Self.fixtures.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("schema.sql"), encoding: .utf8)
        let rules: [(pattern: String, part: Int)] = [
            ("CREATE TABLE", 1),
            ("ADD COLUMN|ALTER COLUMN|DROP (INDEX|TRIGGER|FUNCTION|VIEW|CONSTRAINT)", 2),
            ("CREATE (UNIQUE )?INDEX|CREATE (OR REPLACE )?(FUNCTION|VIEW)|CREATE TRIGGER", 3),
            ("^GRANT ", 4),
        ]
        var part = 0
        var misplaced: [String] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if line.hasPrefix("-- ║ "), let digit = line.dropFirst(5).first?.wholeNumberValue {
                part = digit
                continue
            }
            let code = line.trimmingCharacters(in: .whitespaces)
            if code.hasPrefix("--") { continue }
            for rule in rules where part != rule.part && code.range(of: rule.pattern, options: .regularExpression) != nil {
                misplaced.append("line \(index + 1), part \(part) (belongs in part \(rule.part)): \(code)")
            }
        }
        #expect(part == 4, "schema.sql has its four part headers")
        #expect(misplaced.isEmpty, "\(misplaced.joined(separator: "\n"))")
    }

    @Test("the comparison sees a difference: an index the upgrade left behind")
    func detectsADifference() throws {
        let url = try TestDatabase.create()
        let before = try SchemaDump.normalized(conninfo: url)
        _ = try TestDatabase.query(url, "CREATE INDEX sessions_extra_idx ON siwa.sessions (expires_at)")
        let after = try SchemaDump.normalized(conninfo: url)
        #expect(after.subtracting(before).contains { $0.contains("sessions_extra_idx") })
    }
}

/// `pg_dump --schema-only --schema=siwa`, as a set of statements: without comments, `SET` lines and
/// pg_dump's session markers; the column lines of each `CREATE TABLE` sorted (an upgrade appends
/// the columns it adds, so their order depends on the path a database took); statements compared
/// as a set (pg_dump's order follows object ids). Everything else is compared as printed: column
/// types, collations, defaults, constraints, index definitions, view and function text with their
/// settings (`SET search_path`), triggers with their WHEN, ownership-free grants and revokes.
enum SchemaDump {
    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    static func normalized(conninfo: String) throws -> Set<String> {
        guard let pgDump = pgDumpPath() else { throw Failed(description: "pg_dump not found") }
        let process = Process()
        let output = Pipe(), errors = Pipe()
        // Bounded: a dump that hangs (a lock held on the schema) fails the test in a minute
        // instead of holding the run to CI's limit.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = ["60", pgDump, "--schema-only", "--schema=siwa", "--no-owner", "--dbname=" + conninfo]
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let error = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failed(description: "pg_dump failed: " + String(decoding: error, as: UTF8.self))
        }
        return statements(String(decoding: data, as: UTF8.self))
    }

    /// The newest installed server's pg_dump (it must not be older than the server), else the
    /// one on PATH.
    static func pgDumpPath() -> String? {
        let fm = FileManager.default
        let root = "/usr/lib/postgresql"
        let versions = ((try? fm.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted(by: >)
        let dirs = versions.map { "\(root)/\($0)/bin" } + (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        return dirs.map { $0 + "/pg_dump" }.first { fm.isExecutableFile(atPath: $0) }
    }

    static func statements(_ dump: String) -> Set<String> {
        var result = Set<String>()
        var current: [String] = []
        for line in dump.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if current.isEmpty
                && (line.isEmpty || line.hasPrefix("--") || line.hasPrefix("SET ") || line.hasPrefix("\\")
                    || line.hasPrefix("SELECT pg_catalog.set_config('search_path'"))
            {
                continue
            }
            current.append(line)
            if line.hasSuffix(";") && !inBody(current) {
                result.insert(normalizedStatement(current))
                current = []
            }
        }
        if !current.isEmpty { result.insert(normalizedStatement(current)) }
        return result
    }

    /// True while a dollar-quoted body is open (an odd number of `$` quote markers so far).
    static func inBody(_ lines: [String]) -> Bool {
        let text = lines.joined(separator: "\n")
        guard let regex = try? NSRegularExpression(pattern: #"\$[A-Za-z_]*\$"#) else { return false }
        return regex.numberOfMatches(in: text, range: NSRange(text.startIndex..., in: text)) % 2 == 1
    }

    static func normalizedStatement(_ lines: [String]) -> String {
        guard lines.first?.hasPrefix("CREATE TABLE ") == true, lines.count > 2 else { return lines.joined(separator: "\n") }
        let columns = lines[1..<(lines.count - 1)].map { $0.hasSuffix(",") ? String($0.dropLast()) : $0 }.sorted()
        return ([lines[0]] + columns + [lines[lines.count - 1]]).joined(separator: "\n")
    }
}
