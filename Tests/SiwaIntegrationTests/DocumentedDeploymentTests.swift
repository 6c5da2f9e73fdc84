import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The deployment the docs recommend, as written: the role SQL of docs/operations.md "2.
/// PostgreSQL", each systemd unit's login ("3."), the operator commands ("Status and dead
/// letters"), README's five-minute path and the dashboards' SQL are read from the files (the
/// blocks after `<!-- docs-test: NAME -->`), not copied here. Every step must succeed with its
/// documented login, `doctor` must find nothing above INFO for each process, and PostgreSQL's log
/// no ERROR of this database's sessions.
@Suite("The documented deployment", .serialized, .needsDatabase)
struct DocumentedDeploymentTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    struct Failure: Error, CustomStringConvertible { var description: String }

    static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The fenced code block right after `<!-- docs-test: NAME -->` in `file`.
    static func block(_ file: String, _ name: String) throws -> String {
        let text = try read(file)
        guard let marker = text.range(of: "<!-- docs-test: \(name) -->") else {
            throw Failure(description: "\(file) has no <!-- docs-test: \(name) --> block")
        }
        let rest = text[marker.upperBound...]
        guard let open = rest.range(of: "```"), let lineEnd = rest[open.upperBound...].firstIndex(of: "\n"),
            let close = rest[lineEnd...].range(of: "\n```")
        else { throw Failure(description: "\(file): no fenced block after the \(name) marker") }
        return String(rest[rest.index(after: lineEnd)..<close.lowerBound])
    }

    /// Every block of that name in `file`, in order.
    static func blocks(_ file: String, _ name: String) throws -> [String] {
        let text = try read(file)
        var out: [String] = []
        var rest = text[...]
        while let marker = rest.range(of: "<!-- docs-test: \(name) -->") {
            let after = rest[marker.upperBound...]
            guard let open = after.range(of: "```"), let lineEnd = after[open.upperBound...].firstIndex(of: "\n"),
                let close = after[lineEnd...].range(of: "\n```")
            else { throw Failure(description: "\(file): no fenced block after a \(name) marker") }
            out.append(String(after[after.index(after: lineEnd)..<close.lowerBound]))
            rest = after[close.upperBound...]
        }
        return out
    }

    /// SQL statements of a script: `--` comments dropped, split at a `;` ending a line.
    static func statements(_ sql: String) -> [String] {
        var out: [String] = []
        var current = ""
        for raw in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = String(raw)
            if let comment = line.range(of: "--") { line = String(line[..<comment.lowerBound]) }
            line = line.trimmingCharacters(in: .whitespaces)
            if line.isEmpty { continue }
            current += (current.isEmpty ? "" : " ") + line
            if line.hasSuffix(";") {
                out.append(String(current.dropLast()))
                current = ""
            }
        }
        if !current.isEmpty { out.append(current) }
        return out
    }

    /// The `code` spans of a Markdown table cell.
    static func backticked(_ cell: String) -> [String] {
        cell.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
    }

    /// The user of a `postgresql://USER[:PASSWORD]@HOST/...` URL.
    static func user(ofURL url: String) -> String? {
        guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@") else { return nil }
        return String(url[scheme.upperBound..<at].prefix { $0 != ":" })
    }

    /// `SIWA_DATABASE_URL=...` in a shell line, quotes removed.
    static func databaseURL(inLine line: String) -> String? {
        guard let r = line.range(of: "SIWA_DATABASE_URL=") else { return nil }
        let value = line[r.upperBound...].drop { $0 == "'" || $0 == "\"" }
        return String(value.prefix { !"'\" ".contains($0) })
    }

    /// A `siwa-notify ...` command in a shell line (any path before it), comments dropped.
    static func command(inLine line: String) -> [String]? {
        var text = line
        if let comment = text.range(of: " #") { text = String(text[..<comment.lowerBound]) }
        let words = text.split(separator: " ").map(String.init)
        guard let i = words.firstIndex(where: { $0 == "siwa-notify" || $0.hasSuffix("/siwa-notify") }), i + 1 < words.count else {
            return nil
        }
        return Array(words[(i + 1)...])
    }

    /// The documented setup on the test cluster: the role SQL run as the superuser with the
    /// logins' and the database's names made unique (roles are cluster-wide), nothing else changed.
    final class Setup {
        let admin: String
        let suffix = "_dt" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        var renamed: [String: String] = [:]
        var database = ""

        init() throws {
            admin = try TestDatabase.adminURL()
            let script = try DocumentedDeploymentTests.block("docs/operations.md", "roles")
            guard let start = script.range(of: "<<'SQL'\n"), let end = script.range(of: "\nSQL", options: .backwards) else {
                throw Failure(description: "docs/operations.md roles: no psql <<'SQL' ... SQL here-document")
            }
            let sql = String(script[start.upperBound..<end.lowerBound])
            let statements = DocumentedDeploymentTests.statements(sql)
            for s in statements {
                let words = s.split(separator: " ").map(String.init)
                if words.count >= 4, words[0].uppercased() == "CREATE", words[1].uppercased() == "ROLE", words[3].uppercased() == "LOGIN" {
                    renamed[words[2]] = words[2] + suffix
                }
                if words.count >= 3, words[0].uppercased() == "CREATE", words[1].uppercased() == "DATABASE" {
                    database = words[2] + suffix
                    renamed[words[2]] = database
                }
            }
            guard !database.isEmpty else { throw Failure(description: "the role SQL creates no database") }
            let connection = try PostgresConnection(conninfo: admin, pinsSearchPath: false)
            for s in statements {
                let statement = rename(s)
                let result = Result<PostgresResult, any Error> { try connection.execute(statement) }
                // siwa's group roles are cluster-wide: another test's migration made them already.
                if case .failure(let error) = result,
                    !((error as? PostgresError)?.sqlState == "42710" && statement.uppercased().hasSuffix(" NOLOGIN"))
                {
                    throw error
                }
            }
        }

        /// `text` with the docs' login and database names replaced by this setup's.
        func rename(_ text: String) -> String {
            var out = text
            for (from, to) in renamed {
                out = out.replacingOccurrences(of: "(?<![A-Za-z0-9_.])\(from)(?![A-Za-z0-9_.])", with: to, options: .regularExpression)
            }
            return out
        }

        /// The conninfo of the docs' login `user` (a name from the role SQL).
        func conninfo(user: String) throws -> String {
            guard let login = renamed[user] else {
                throw Failure(description: "the docs connect as \(user), a login the role SQL of docs/operations.md does not create")
            }
            return admin + " dbname=\(database) user=\(login)"
        }

        func conninfo(url: String) throws -> String {
            guard let user = DocumentedDeploymentTests.user(ofURL: url) else { throw Failure(description: "no user in \(url)") }
            return try conninfo(user: user)
        }

        func isMember(_ user: String, of role: String) throws -> Bool {
            try TestDatabase.query(admin, "SELECT pg_has_role($1, $2, 'MEMBER')", [renamed[user] ?? user, role]).scalar == "t"
        }

        func query(_ sql: String, _ parameters: [String?] = []) throws -> PostgresResult {
            try TestDatabase.query(admin + " dbname=\(database)", sql, parameters)
        }
    }

    /// PostgreSQL's log from now on (`SIWA_TEST_DATABASE_LOG`, exported by scripts/test), for
    /// the lines of one database (its `log_line_prefix` names the database: `%d`).
    struct ServerLog {
        let path: String
        let start: UInt64

        /// Nil without `SIWA_TEST_DATABASE_LOG` on a developer's cluster (said on stdout: the
        /// log is then not checked); a failure where the database is required (CI).
        static func fromNow() throws -> ServerLog? {
            guard let path = ProcessInfo.processInfo.environment["SIWA_TEST_DATABASE_LOG"], !path.isEmpty else {
                let missing = "SIWA_TEST_DATABASE_LOG is not set: scripts/test exports the test cluster's log file"
                if TestDatabase.isRequired { throw Failure(description: missing) }
                print("DocumentedDeploymentTests: PostgreSQL's log not checked (\(missing))")
                return nil
            }
            return try ServerLog(path: path)
        }

        init(path: String) throws {
            self.path = path
            let prefix = try TestDatabase.query(try TestDatabase.adminURL(), "SHOW log_line_prefix").scalar ?? ""
            guard prefix.contains("%d") else {
                throw Failure(
                    description: "the test cluster's log_line_prefix (\(prefix)) does not name the database (%d): start it as scripts/test does")
            }
            start = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? 0
        }

        /// The lines written since `init` that name `database` and hold an ERROR or FATAL.
        func errors(of database: String) throws -> [String] {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            try handle.seek(toOffset: start)
            let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
            return text.split(separator: "\n").map(String.init).filter {
                $0.contains("@\(database) ") && ($0.contains(" ERROR: ") || $0.contains(" FATAL: "))
            }
        }
    }

    /// A process of a systemd unit, with its login and the settings a test gives every process.
    struct Running {
        let command: String
        let user: String
        let environment: [String: String]
        let server: ServerProcess
        let adminPort: UInt16
        let publicPort: UInt16
    }

    @Test(
        "the role SQL, each unit's login, the operator commands, README's path and the dashboards' SQL as written: all succeed, doctor clean, no ERROR in PostgreSQL's log"
    )
    func asWritten() throws {
        let log = try ServerLog.fromNow()
        let setup = try Setup()
        let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "docs-key")
        let jwks = try JWKSServer(body: KeyFetchTests.jwks(signer))
        defer { jwks.stop() }
        let directory = NSTemporaryDirectory() + "siwa-docs\(setup.suffix)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let tokenFile = directory + "/api-tokens"
        try "docs-test-api-token-0123456789abcdef\n".write(toFile: tokenFile, atomically: false, encoding: .utf8)
        chmod(tokenFile, 0o600)
        let shared = ["SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": jwks.url, "SIWA_LOG_FORMAT": "json"]

        // Each unit's login: its second EnvironmentFile, written by docs/operations.md "3.".
        var loginOfFile: [String: String] = [:]
        for line in try Self.block("docs/operations.md", "unit-logins").split(separator: "\n").map(String.init) {
            guard let url = Self.databaseURL(inLine: line), let user = Self.user(ofURL: url),
                let file = line.range(of: "> /etc/siwa-notify/").map({ String(line[$0.upperBound...].prefix { !$0.isWhitespace && $0 != ")" }) })
            else { continue }
            loginOfFile[file] = user
        }
        var units: [(command: String, user: String)] = []
        let unitDirectory = Self.root.appendingPathComponent("deploy/systemd")
        for name in try FileManager.default.contentsOfDirectory(atPath: unitDirectory.path).sorted() where name.hasSuffix(".service") {
            let unit = try String(contentsOf: unitDirectory.appendingPathComponent(name), encoding: .utf8).split(separator: "\n").map(String.init)
            let files = unit.filter { $0.hasPrefix("EnvironmentFile=") }.map { String($0.dropFirst("EnvironmentFile=/etc/siwa-notify/".count)) }
            let logins = files.compactMap { loginOfFile[$0] }
            guard let exec = unit.first(where: { $0.hasPrefix("ExecStart=") }), let command = Self.command(inLine: exec)?.first else {
                Issue.record("\(name): no siwa-notify ExecStart")
                continue
            }
            #expect(logins.count == 1, "\(name): one file of docs/operations.md \"3.\" gives its login (files \(files))")
            if let user = logins.first { units.append((command, user)) }
        }
        #expect(Set(units.map(\.command)) == ["migrate", "serve", "receive", "work"], "\(units)")
        let owner = try #require(units.first { $0.command == "migrate" }?.user)

        // migrate, as the owner.
        let migrated = try OperatorCommandTests.run(
            ["migrate"], environment: shared.merging(["SIWA_DATABASE_URL": try setup.conninfo(user: owner)]) { $1 })
        #expect(migrated.status == 0 && migrated.output.hasPrefix("schema applied"), "\(migrated.output)")

        // serve, receive and work, each with its unit's login; the API on where the login has its roles.
        var running: [Running] = []
        defer { for r in running { r.server.terminate() } }
        for (command, user) in units where command != "migrate" {
            #expect(user != owner, "\(command) runs as the owner")
            let publicPort = ServerProcess.freePort(), adminPort = ServerProcess.freePort()
            var environment = shared.merging([
                "SIWA_DATABASE_URL": try setup.conninfo(user: user), "SIWA_LISTEN": "127.0.0.1:\(publicPort)",
                "SIWA_ADMIN_LISTEN": "127.0.0.1:\(adminPort)",
            ]) { $1 }
            if try setup.isMember(user, of: "siwa_api") { environment["SIWA_API_TOKEN_FILE"] = tokenFile }
            let server = try ServerProcess([command], environment: environment)
            running.append(
                Running(command: command, user: user, environment: environment, server: server, adminPort: adminPort, publicPort: publicPort))
        }
        for r in running {
            let ready = eventually(timeout: 30) { (try? ConsoleTests.Client(port: r.adminPort).get("/readyz").status) == 200 }
            #expect(ready, "\(r.command) as \(r.user) ready: \(r.server.log.suffix(2000))")
        }

        // The subs the documented commands name: a notification of each through every receiving process, applied.
        let operatorBlock = try Self.block("docs/operations.md", "operator-commands")
        let readme = try Self.blocks("README.md", "readme")
        let subs = Set(
            (operatorBlock + readme.joined(separator: "\n")).split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
                .filter { $0.hasPrefix("000739.") })
        let now = Int64(Date().timeIntervalSince1970) * 1000
        for (i, r) in running.enumerated() where r.command != "work" {
            for sub in subs {
                // An event of each process's own (another event_time): the same one again would be a duplicate.
                let claims = NotificationSigner.claims(
                    audience: TestHarness.audience, type: "email-enabled", sub: sub, eventTimeMillis: now - Int64(i))
                let token = try signer.sign(claims: claims)
                let reply = try ConsoleTests.Client(port: r.publicPort).request(
                    "POST", "/apple/notifications", body: NotificationSigner.body(token: token), headers: ["Content-Type: application/json"])
                #expect(reply.status == 200 && reply.body.contains("accepted"), "\(r.command): \(reply.status) \(reply.body)")
            }
        }
        #expect(
            try eventually(timeout: 30) {
                try setup.query("SELECT count(*) FROM siwa.events WHERE status = 'done'").scalar
                    == String(subs.count * running.filter { $0.command != "work" }.count)
            }, "every notification applied")

        // The operator commands, with the login they name; each `operator add` signs in to every console.
        let consoles = running.filter { $0.environment["SIWA_API_TOKEN_FILE"] != nil }
        #expect(!consoles.isEmpty, "a documented process runs the console")
        func runScript(_ script: String, _ where_: String) throws {
            var url: String?
            for line in script.split(separator: "\n").map(String.init) {
                if let u = Self.databaseURL(inLine: line), Self.command(inLine: line) == nil { url = u }
                guard var arguments = Self.command(inLine: line) else { continue }
                let lineURL = Self.databaseURL(inLine: line) ?? url
                guard let lineURL else {
                    Issue.record("\(where_): `\(line)` with no SIWA_DATABASE_URL before it")
                    continue
                }
                let user = try #require(Self.user(ofURL: lineURL))
                if ["serve", "receive", "work"].contains(arguments[0]) {
                    #expect(
                        units.contains { $0.command == arguments[0] && $0.user == user }, "\(where_): \(arguments[0]) as \(user), its unit's login")
                    continue
                }
                if arguments[0] == "migrate" {
                    #expect(user == owner, "\(where_): migrate as the owner")
                } else {
                    #expect(user != owner, "\(where_): `\(line)` as the owner")
                }
                arguments = arguments.map { setup.rename($0) }
                let errors = Pipe()
                let result = try OperatorCommandTests.runApart(
                    arguments, environment: shared.merging(["SIWA_DATABASE_URL": try setup.conninfo(user: user)]) { $1 }, errors: errors)
                let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                #expect(result.status == 0, "\(where_): `\(line)` as \(user): \(result.output) \(stderr)")
                if arguments[0] == "doctor" {
                    #expect(result.output.contains(": 0 HIGH, 0 MEDIUM, 0 LOW"), "\(where_): `\(line)` finds more than INFO: \(result.output)")
                }
                if arguments.starts(with: ["operator", "add"]), result.status == 0 {
                    let token = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
                    for c in consoles {
                        var client = ConsoleTests.Client(port: c.adminPort)
                        let signIn = try client.signIn(arguments[2], token)
                        let page = try client.get("/console").status
                        #expect(signIn.status == 303 && page == 200, "\(c.command)'s console sign-in: \(signIn.status), then \(page)")
                    }
                }
            }
        }
        try runScript(operatorBlock, "docs/operations.md operator-commands")
        // README's blocks are one terminal session: an `export` holds for the blocks after it.
        try runScript(readme.joined(separator: "\n"), "README.md readme blocks")

        // docs/configuration.md "Which login for each command": each command of a person with a
        // login of exactly the roles its row names (each alone where the row says "or").
        let guide = try Self.read("docs/configuration.md")
        let table = guide.components(separatedBy: "\n## Which login for each command\n").dropFirst().first ?? ""
        let sub = try #require(subs.sorted().first)
        var tried = 0
        for line in table.split(separator: "\n").prefix(while: { !$0.hasPrefix("#") }) where line.hasPrefix("| `") {
            let cells = line.replacingOccurrences(of: "\\|", with: "/").split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 2 else { continue }
            let roles = Self.backticked(cells[1]).filter { $0.hasPrefix("siwa_") }
            let runs: [[String]] = Self.backticked(cells[0]).flatMap { command -> [[String]] in
                switch command {
                case "status": [["status"]]
                case "user-report": [["user-report", "--sub", sub]]
                case "replay": [["replay", "--all"]]
                case "delete-user": [["delete-user", "--sub", sub]]
                case "operator add/list/remove": [["operator", "add", "bob"], ["operator", "list"], ["operator", "remove", "bob"]]
                default: []
                }
            }
            for group in cells[1].range(of: #"\bor\b"#, options: .regularExpression) != nil ? roles.map({ [$0] }) : [roles] where !runs.isEmpty {
                let login = "table_" + String(UInt32.random(in: 0...UInt32.max), radix: 16) + setup.suffix
                _ = try TestDatabase.query(setup.admin, "CREATE ROLE \(login) LOGIN IN ROLE \(group.joined(separator: ", "))")
                for arguments in runs {
                    let result = try OperatorCommandTests.run(
                        arguments, environment: shared.merging(["SIWA_DATABASE_URL": setup.admin + " dbname=\(setup.database) user=\(login)"]) { $1 })
                    #expect(
                        result.status == 0, "docs/configuration.md: `\(arguments.joined(separator: " "))` as a member of \(group): \(result.output)")
                    tried += 1
                }
            }
        }
        #expect(tried >= 8, "the table's commands of a person: \(tried) run")

        // The dashboards' SQL (docs/dashboards.md, deploy/grafana/) as the dashboards' login.
        let dashboardUser = try #require(
            setup.renamed.keys.sorted().first { user in
                user != owner && (try? setup.isMember(user, of: "siwa_dashboard")) == true
                    && (try? setup.isMember(user, of: "siwa_console")) == false
            },
            "the role SQL creates a dashboards' login")
        let dashboards = try PostgresConnection(conninfo: try setup.conninfo(user: dashboardUser), pinsSearchPath: false)
        let documented = Self.statements(try Self.block("docs/dashboards.md", "dashboard-sql")).filter { $0.uppercased().hasPrefix("SELECT") }
        let grafana = try GrafanaDashboardTests.queries().filter { $0.kind == "grafana-postgresql-datasource" }.map(\.query)
        #expect(documented.count >= 3 && grafana.count >= 5)
        for sql in documented + grafana {
            #expect(throws: Never.self, "as \(dashboardUser): \(sql)") { _ = try dashboards.execute(sql) }
        }

        // doctor, for each process, with its environment: nothing above INFO.
        for r in running {
            let doctor = try OperatorCommandTests.run(["doctor", "--json", "--process", r.command], environment: r.environment)
            let report = try? JSONDecoder().decode(DoctorReport.self, from: Data(doctor.output.utf8))
            let above = report?.findings.filter { $0.severity != .info }.map { "\($0.code) \($0.severity.rawValue): \($0.message)" }
            #expect(doctor.status == 0 && above == [], "doctor --process \(r.command) as \(r.user): \(above ?? [doctor.output])")
        }

        for r in running {
            // The durability gauge reads pg_stat_replication's states (the documented pg_read_all_stats): 0 here, not -1 (unknown).
            var gauge: String?
            _ = eventually(timeout: 15) {
                let body = (try? ConsoleTests.Client(port: r.adminPort).get("/metrics").body) ?? ""
                gauge = body.split(separator: "\n").first { $0.hasPrefix("siwa_database_synchronous_standbys ") }.map(String.init)
                return gauge != nil
            }
            #expect(gauge == "siwa_database_synchronous_standbys 0", "\(r.command) as \(r.user): \(gauge ?? "no gauge")")
            #expect(!r.server.log.contains("this process connects as"), "\(r.command) warns of its login: \(r.server.log)")
            #expect(r.server.terminate() == 0, "\(r.command) stops")
        }
        let errors = try log?.errors(of: setup.database) ?? []
        #expect(errors.isEmpty, "PostgreSQL's log, this database's sessions:\n\(errors.joined(separator: "\n"))")
    }

    @Test(
        "roles made before siwa_operator, an owner who may not create it: migrate succeeds without its grants; once made, migrate --force grants it",
        .enabled(if: TestDatabase.hasServerBinaries))
    func operatorRoleLater() throws {
        try TestDatabase.withEmbedded("operator-role") { database in
            let admin = database.conninfo
            for statement in [
                "CREATE ROLE siwa_receiver NOLOGIN", "CREATE ROLE siwa_worker NOLOGIN", "CREATE ROLE siwa_api NOLOGIN",
                "CREATE ROLE siwa_console NOLOGIN", "CREATE ROLE siwa_dashboard NOLOGIN", "CREATE ROLE siwa LOGIN",
                "CREATE DATABASE siwa OWNER siwa",
            ] {
                _ = try TestDatabase.query(admin, statement)
            }
            let environment = ["SIWA_DATABASE_URL": admin + " dbname=siwa user=siwa"]
            let first = try OperatorCommandTests.run(["migrate"], environment: environment)
            #expect(first.status == 0 && first.output.contains("schema applied"), "\(first.output)")
            #expect(first.output.contains("CREATE ROLE siwa_operator NOLOGIN, then migrate --force"), "the fix said: \(first.output)")
            #expect(try TestDatabase.query(admin, "SELECT count(*) FROM pg_roles WHERE rolname = 'siwa_operator'").scalar == "0")

            _ = try TestDatabase.query(admin, "CREATE ROLE siwa_operator NOLOGIN")
            let forced = try OperatorCommandTests.run(["migrate", "--force"], environment: environment)
            #expect(forced.status == 0, "\(forced.output)")
            #expect(
                try TestDatabase.query(
                    admin + " dbname=siwa", "SELECT has_function_privilege('siwa_operator', 'siwa.operator_add(text, text)', 'EXECUTE')"
                ).scalar == "t")
        }
    }
}
