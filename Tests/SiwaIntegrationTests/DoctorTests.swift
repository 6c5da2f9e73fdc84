import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `siwa-notify doctor` on a real PostgreSQL: the recommended setup (docs/operations.md) finds nothing, and
/// each misconfiguration is made, found, fixed (with the finding's own statements where it gives
/// them) and gone.
@Suite("Doctor", .needsDatabase)
struct DoctorTests {
    /// A fresh database set up as docs/operations.md recommends: `public` not writable, a login that is a
    /// member of exactly the roles `serve` with the API needs, an API token file of mode 0600,
    /// the admin listener on loopback, Apple's key set served on loopback.
    final class Deployment {
        let url: String
        let login: String
        let jwks: JWKSServer
        let directory: String
        var config = ServerConfiguration()

        init(roles: String = "siwa_receiver, siwa_worker, siwa_api, siwa_console", migrated: Bool = true) throws {
            url = migrated ? try TestDatabase.create() : try TestDatabase.createEmpty()
            let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
            login = "doctor_" + suffix
            _ = try TestDatabase.query(url, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            // Without the schema, siwa's roles may not exist yet (they are made by a migration).
            _ = try TestDatabase.query(url, "CREATE ROLE \(login) LOGIN" + (migrated ? " IN ROLE \(roles)" : ""))
            jwks = try JWKSServer(body: KeyFetchTests.jwks(NotificationSigner(key: TestHarness.sharedKey, kid: "doctor-key")))
            directory = NSTemporaryDirectory() + "siwa-doctor-" + suffix
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            config.databaseURL = url + " user=\(login)"
            config.jwksURL = jwks.url
            config.apiTokenFile = try file("api-tokens", "doctor-test-token-0123456789")
        }

        deinit {
            jwks.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }

        /// A file of mode 0600 in the test's directory.
        func file(_ name: String, _ content: String) throws -> String {
            let path = directory + "/" + name
            try content.write(toFile: path, atomically: false, encoding: .utf8)
            chmod(path, 0o600)
            return path
        }

        func sql(_ statement: String) throws { _ = try TestDatabase.query(url, statement) }

        func examine(_ process: DoctorProcess = .serve) -> DoctorReport { Doctor.examine(config, process: process) }

        /// The findings above INFO, as `code SEVERITY`.
        func problems(_ process: DoctorProcess = .serve) -> [String] {
            examine(process).findings.filter { $0.severity != .info }.map { "\($0.code) \($0.severity.rawValue)" }
        }

        func finding(_ code: String, _ process: DoctorProcess = .serve) -> DoctorFinding? {
            examine(process).findings.first { $0.code == code }
        }

        /// Runs the statements of a finding's fix, one a line (lines that are not statements skipped).
        func apply(_ fix: String) throws {
            for line in fix.split(separator: "\n") where line.hasSuffix(";") { try sql(String(line)) }
        }
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }

    @Test("the recommended setup: nothing above INFO, for each process; the command exits 0 and its JSON says so")
    func recommendedSetup() throws {
        let d = try Deployment()
        #expect(d.problems() == [], "\(d.examine().text)")
        let receiver = try Deployment(roles: "siwa_receiver")
        receiver.config.apiTokenFile = nil
        #expect(receiver.problems(.receive) == [], "\(receiver.examine(.receive).text)")

        let environment = [
            "SIWA_DATABASE_URL": d.config.databaseURL!, "SIWA_JWKS_URL": d.jwks.url, "SIWA_API_TOKEN_FILE": d.config.apiTokenFile!,
        ]
        let text = try OperatorCommandTests.run(["doctor"], environment: environment)
        #expect(text.status == 0 && text.output.contains("doctor (serve): 0 HIGH, 0 MEDIUM, 0 LOW"), "\(text.output)")
        let json = try OperatorCommandTests.run(["doctor", "--json"], environment: environment)
        #expect(json.status == 0, "\(json.output)")
        let report = try JSONDecoder().decode(DoctorReport.self, from: Data(json.output.utf8))
        #expect(report.process == "serve" && report.findings.allSatisfy { $0.severity == .info }, "\(json.output)")
    }

    @Test("a superuser login: HIGH, the command exits 1 and names it in JSON; the least-privilege login: gone")
    func superuser() throws {
        let d = try Deployment()
        let environment = ["SIWA_DATABASE_URL": d.url, "SIWA_JWKS_URL": d.jwks.url, "SIWA_API_TOKEN_FILE": d.config.apiTokenFile!]
        let run = try OperatorCommandTests.run(["doctor", "--json", "--process", "work"], environment: environment)
        #expect(run.status == 1, "\(run.output)")
        let report = try JSONDecoder().decode(DoctorReport.self, from: Data(run.output.utf8))
        let found = report.findings.first { $0.code == "login-superuser" }
        #expect(found?.severity == .high && found?.fix.contains("IN ROLE siwa_api, siwa_console, siwa_worker") == true, "\(run.output)")
        #expect(report.findings.first?.code == "login-superuser", "HIGH first")
        #expect(d.problems() == [])
    }

    @Test("the schema's owner, or a login inheriting its privileges: HIGH; the membership revoked: gone")
    func owner() throws {
        let d = try Deployment()
        let owner = d.login + "_owner"
        try d.sql("CREATE ROLE \(owner) LOGIN")
        try d.sql("ALTER SCHEMA siwa OWNER TO \(owner)")
        d.config.databaseURL = d.url + " user=\(owner)"
        #expect(d.problems().contains("login-owner HIGH"))
        d.config.databaseURL = d.url + " user=\(d.login)"
        try d.sql("GRANT \(owner) TO \(d.login)")
        #expect(d.problems() == ["login-owner HIGH"])
        try d.sql("REVOKE \(owner) FROM \(d.login)")
        #expect(d.problems() == [])
    }

    @Test("CREATE on schema public for PUBLIC: HIGH; its fix run: gone")
    func publicSchema() throws {
        let d = try Deployment()
        try d.sql("GRANT CREATE ON SCHEMA public TO PUBLIC")
        let found = try #require(d.finding("public-schema-writable"))
        #expect(found.severity == .high && d.problems() == ["public-schema-writable HIGH"])
        try d.apply(found.fix)
        #expect(d.problems() == [])
    }

    @Test("grants beyond the matrix (a role's, PUBLIC's, the login's own) HIGH, missing ones MEDIUM; their statements run: gone")
    func grantDrift() throws {
        let d = try Deployment()
        try d.sql("GRANT UPDATE ON siwa.events TO siwa_receiver")
        try d.sql("GRANT EXECUTE ON FUNCTION siwa.user_report(text) TO PUBLIC")
        try d.sql("GRANT SELECT (email) ON siwa.accounts TO \(d.login)")
        try d.sql("REVOKE SELECT ON siwa.backlog FROM siwa_api")
        #expect(d.problems() == ["grants-extra HIGH", "grants-missing MEDIUM"])
        let extra = try #require(d.finding("grants-extra")), missing = try #require(d.finding("grants-missing"))
        for grant in ["siwa_receiver UPDATE events", "PUBLIC EXECUTE user_report", "\(d.login) SELECT accounts(email)"] {
            #expect(extra.message.contains(grant), "\(extra.message)")
        }
        #expect(missing.message.contains("siwa_api SELECT backlog"))
        try d.apply(extra.fix)
        try d.apply(missing.fix)
        #expect(d.problems() == [])
        #expect(try GrantMatrix.read(conninfo: d.url) == GrantMatrix.expected)
    }

    @Test("a login in more siwa roles than its process needs, or fewer: MEDIUM; the statements run: gone")
    func memberships() throws {
        let d = try Deployment()
        try d.sql("GRANT siwa_dashboard TO \(d.login)")
        let extra = try #require(d.finding("login-roles-extra"))
        #expect(d.problems() == ["login-roles-extra MEDIUM"] && extra.message.contains("siwa_dashboard"))
        try d.apply(extra.fix)
        #expect(d.problems() == [])
        // `receive` needs neither siwa_worker nor (without the API) siwa_api and siwa_console.
        d.config.apiTokenFile = nil
        #expect(
            d.finding("login-roles-extra", .receive)?.fix
                == "REVOKE siwa_api FROM \(d.login);\nREVOKE siwa_console FROM \(d.login);\nREVOKE siwa_worker FROM \(d.login);")
        // The API on without siwa_api.
        d.config.apiTokenFile = try d.file("api-tokens", "doctor-test-token-0123456789")
        try d.sql("REVOKE siwa_api FROM \(d.login)")
        let lacking = try #require(d.finding("login-roles-missing", .work))
        #expect(d.problems(.work) == ["login-roles-extra MEDIUM", "login-roles-missing MEDIUM"])
        try d.apply(lacking.fix)
        #expect(d.problems() == [])
    }

    @Test("sslmode below verify-full to a remote host: found from libpq's own reading of the URL; verify-full or a socket: gone")
    func databaseTLS() throws {
        let d = try Deployment()
        d.config.databaseURL = "postgresql://siwa@db.example.invalid:5432/siwa?connect_timeout=1"
        let prefer = try #require(d.finding("database-tls"))
        #expect(prefer.severity == .high && prefer.message.contains("sslmode=prefer to db.example.invalid"))
        #expect(d.finding("database-unreachable") != nil)
        d.config.databaseURL = "host=db.example.invalid sslmode=require connect_timeout=1"
        #expect(d.finding("database-tls")?.severity == .medium)
        d.config.databaseURL = "postgresql://siwa@db.example.invalid/siwa?sslmode=verify-full&connect_timeout=1"
        #expect(d.finding("database-tls") == nil)
        d.config.databaseURL = d.url + " user=\(d.login) sslmode=disable"
        #expect(d.problems() == [])
    }

    @Test("commits that a crash may lose (synchronous_commit off for the login): HIGH; reset: INFO only")
    func durability() throws {
        let d = try Deployment()
        #expect(d.finding("commit-durability")?.severity == .info)
        try d.sql("ALTER ROLE \(d.login) SET synchronous_commit = off")
        #expect(d.problems() == ["commit-durability HIGH"])
        try d.sql("ALTER ROLE \(d.login) RESET synchronous_commit")
        #expect(d.problems() == [])
    }

    @Test("SIWA_APPLY_TO's tables without the worker's grants: HIGH for serve and work, not asked of receive; the documented grants: gone")
    func authLibrary() throws {
        let d = try Deployment()
        try d.sql(AuthLibrarySchemas.authjsPostgres)
        d.config.authLibraries = AuthLibraryConfiguration(targets: [.authjs])
        let found = try #require(d.finding("auth-library"))
        #expect(found.severity == .high && found.message.contains("SIWA_APPLY_TO=authjs") && found.message.contains("no select privilege"))
        #expect(d.problems(.work).contains("auth-library HIGH"))
        #expect(d.finding("auth-library", .receive) == nil)
        for grant in AuthLibraryCheck.grants(.authjs(tables: AuthLibrarySchema.authjsPostgresTables), policy: .unlink, role: d.login) {
            try d.sql(grant)
        }
        #expect(d.finding("auth-library")?.message.contains("no index") == true)
        try d.sql(#"CREATE INDEX ON accounts ("providerAccountId"); CREATE INDEX ON sessions ("userId")"#)
        #expect(d.problems() == [], "\(d.examine().text)")

        // Who else may create where the library's tables are: the app's migration role, INFO;
        // every login (CREATE to PUBLIC), MEDIUM with its fix.
        try d.sql(
            "DO $$ BEGIN CREATE ROLE app_migrator NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$; GRANT CREATE ON SCHEMA public TO app_migrator"
        )
        let creators = try #require(d.finding("library-schema-creators"))
        #expect(creators.severity == .info && creators.message.contains("app_migrator on public"), "\(creators.message)")
        #expect(!creators.message.contains("siwa_"))
        try d.sql("GRANT CREATE ON SCHEMA public TO PUBLIC")
        let writable = try #require(d.finding("library-schema-writable"))
        #expect(writable.severity == .medium && writable.fix == "REVOKE CREATE ON SCHEMA public FROM PUBLIC;")
        try d.apply(writable.fix)
        #expect(d.finding("library-schema-writable") == nil)
        #expect(d.finding("library-schema-creators", .receive) == nil, "receive applies nothing to the library's tables")
    }

    @Test(
        "a hosted provider as the start checks it: passing INFO; refusing, down or its secret unreadable HIGH naming the variable; dead or long-waiting calls found"
    )
    func hostedProvider() throws {
        let d = try Deployment()
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        fixture.configure(&d.config)
        let key = try #require(d.config.hostedProviders.clerk?.secretKeyFile)
        chmod(key, 0o600)
        #expect(d.problems() == [], "\(d.examine().text)")
        #expect(d.finding("provider-check")?.message == "clerk answers and accepts the credential")
        fixture.refuseCredential()
        let refused = try #require(d.finding("provider-refused"))
        #expect(refused.severity == .high && refused.message.hasPrefix("SIWA_CLERK_SECRET_KEY_FILE: clerk refused the credential"), "\(refused)")
        // The receiver makes no provider call: not asked of it.
        #expect(d.examine(.receive).findings.allSatisfy { !$0.code.hasPrefix("provider") })
        fixture.down()
        let down = try #require(d.finding("provider-unreachable"))
        #expect(down.severity == .high && down.message.hasPrefix("SIWA_CLERK_URL: clerk did not answer"), "\(down)")
        fixture.up()
        d.config.hostedProviders.clerk?.secretKeyFile = d.directory + "/missing"
        let unreadable = try #require(d.finding("provider-credential"))
        #expect(unreadable.severity == .high && unreadable.message.hasPrefix("SIWA_CLERK_SECRET_KEY_FILE: cannot read"), "\(unreadable)")
        d.config.hostedProviders.clerk?.secretKeyFile = key
        #expect(d.problems() == [], "\(d.examine().text)")

        // The queue, read as the worker's role: a dead call HIGH until replayed; one waiting for an hour MEDIUM.
        try d.sql(
            """
            INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, state)
            VALUES ('clerk', '001234.doctor.0001', 'end_sessions', 1, 'consent-revoked', now(), 'dead')
            """)
        let dead = try #require(d.finding("provider-calls-dead"))
        #expect(dead.severity == .high && dead.fix.contains("siwa-notify replay --provider-calls --type clerk"))
        #expect(d.problems() == ["provider-calls-dead HIGH"])
        #expect(try OutboxAdmin.replayProviderCalls(target: "clerk", conninfo: d.url) == 1)
        #expect(d.problems() == [], "\(d.examine().text)")
        try d.sql("UPDATE siwa.provider_calls SET created_at = now() - interval '1 hour'")
        #expect(d.problems() == ["provider-calls-waiting MEDIUM"])
        #expect(d.finding("provider-calls-waiting")?.message == "the oldest of 1 call waiting for clerk was queued 60 min ago")
    }

    @Test("Auth0: provider-check names the sign-out the tenant's plan allows; a missing scope for it is HIGH")
    func auth0SignOut() throws {
        let d = try Deployment()
        let fixture = try Auth0Fixture(plan: .professional)
        defer { fixture.stop() }
        fixture.configure(&d.config)
        try fixture.addAppleUser(sub: "001234.doctor.0002")
        chmod(try #require(d.config.hostedProviders.auth0?.clientSecretFile), 0o600)
        #expect(d.problems() == [], "\(d.examine().text)")
        #expect(d.finding("provider-check")?.message.contains("sign-out: refresh tokens revoked through device credentials") == true)
        fixture.tenant.plan = .enterprise
        #expect(d.finding("provider-check")?.message.contains("sign-out: the Enterprise session and refresh-token endpoints") == true)
        fixture.tenant.scopes.remove("delete:sessions")
        let refused = try #require(d.finding("provider-refused"))
        #expect(refused.message.contains("insufficient_scope"), "\(refused)")
        // Asking changed nobody.
        let user = try #require(fixture.tenant.user("apple|001234.doctor.0002"))
        #expect(user.signedIn && !user.blocked && user.refreshTokens.count == 2)
    }

    @Test("credential files readable by others or writable by the group: HIGH; group-readable: LOW; 0600: gone")
    func secretFiles() throws {
        let d = try Deployment()
        let tokens = d.config.apiTokenFile!
        chmod(tokens, 0o644)
        #expect(d.problems() == ["secret-file-permissions HIGH"])
        #expect(d.finding("secret-file-permissions")?.message.contains("SIWA_API_TOKEN_FILE (\(tokens))") == true)
        chmod(tokens, 0o640)
        #expect(d.problems() == ["secret-file-permissions LOW"])
        #expect(d.examine().passes)
        chmod(tokens, 0o600)
        #expect(d.problems() == [])
        // Every file of in-app deletion and forwarding, each key of a rotation too; a link followed.
        let old = try d.file("token-key-old", String(repeating: "ab", count: 32))
        d.config.appleAPI = AppleAPIConfiguration(
            teamID: "TEAM", keyID: "KEY", privateKeyFile: try d.file("key.p8", "p8"),
            tokenKeyFile: try d.file("token-key", String(repeating: "cd", count: 32)) + "," + d.directory + "/old-link")
        try FileManager.default.createSymbolicLink(atPath: d.directory + "/old-link", withDestinationPath: old)
        d.config.forwarding = ForwardingConfiguration(url: "https://app.example/hooks", secretFile: try d.file("forward", "whsec_x"))
        #expect(d.problems() == [])
        chmod(old, 0o620)
        chmod(d.config.forwarding!.secretFile, 0o604)
        let messages = d.examine().findings.filter { $0.code == "secret-file-permissions" }.map(\.message)
        #expect(messages.count == 2)
        #expect(messages.contains { $0.hasPrefix("SIWA_TOKEN_KEY_FILE (\(d.directory)/old-link) is mode 0620") }, "\(messages)")
        #expect(messages.contains { $0.hasPrefix("SIWA_FORWARD_SECRET_FILE") }, "\(messages)")
    }

    @Test("the admin listener on a wildcard address: MEDIUM; on loopback: gone")
    func adminListener() throws {
        let d = try Deployment()
        d.config.adminListen = ListenAddress(host: "0.0.0.0", port: 9090)
        #expect(d.problems() == ["admin-listener-exposed MEDIUM"])
        d.config.adminListen = ListenAddress(host: "127.0.0.1", port: 9090)
        #expect(d.problems() == [])
    }

    @Test("the key set: a clock two minutes off HIGH, 20 s MEDIUM; unreachable or not a key set HIGH; answered in time: gone")
    func keySetAndClock() throws {
        let d = try Deployment()
        d.jwks.set { $0.date = Self.httpDate(Date().addingTimeInterval(120)) }
        let behind = try #require(d.finding("clock-skew"))
        #expect(behind.severity == .high && behind.message.contains("behind"), "\(behind.message)")
        d.jwks.set { $0.date = Self.httpDate(Date().addingTimeInterval(-20)) }
        let ahead = try #require(d.finding("clock-skew"))
        #expect(ahead.severity == .medium && ahead.message.contains("ahead of"), "\(ahead.message)")
        d.jwks.set { $0.date = Self.httpDate(Date()) }
        #expect(d.problems() == [])

        d.jwks.set { $0.status = 503 }
        #expect(d.problems() == ["jwks-unreachable HIGH"])
        d.jwks.set {
            $0.status = 200
            $0.body = #"{"keys":[]}"#
        }
        #expect(d.problems() == ["jwks-unreachable HIGH"])
        d.jwks.stop()
        let gone = try #require(d.finding("jwks-unreachable"))
        #expect(gone.message.contains("couldNotConnect"), "\(gone.message)")
        let again = try JWKSServer(body: KeyFetchTests.jwks(NotificationSigner(key: TestHarness.sharedKey, kid: "doctor-key")))
        defer { again.stop() }
        d.config.jwksURL = again.url
        #expect(d.problems() == [])
    }

    @Test("schema siwa missing: HIGH; migrated: gone. No SIWA_DATABASE_URL: the embedded database, MEDIUM")
    func schemaAndEmbedded() throws {
        let d = try Deployment(migrated: false)
        #expect(d.problems() == ["schema-missing HIGH"])
        try Migrator.migrate(conninfo: d.url)
        try d.sql("GRANT siwa_receiver, siwa_worker, siwa_api, siwa_console TO \(d.login)")
        #expect(d.problems() == [])
        d.config.databaseURL = nil
        #expect(d.problems() == ["database-embedded MEDIUM"])
    }
}
