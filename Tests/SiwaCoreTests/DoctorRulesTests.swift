import Testing

@testable import SiwaCore

/// `doctor`'s decisions from gathered facts (the gathering is tested on a real PostgreSQL in
/// `DoctorTests`).
@Suite struct DoctorRulesTests {
    static let expected: Set<String> = ["siwa_receiver USAGE schema siwa", "siwa_worker SELECT events"]

    static func database(
        login: String = "recv", superuser: Bool = false, owns: Bool = false, publicWritable: Bool = false,
        grants: Set<String> = expected, memberships: Set<String> = ["siwa_receiver", "siwa_worker"],
        durability: DatabaseDurability? = nil
    ) -> DoctorFacts.Database {
        DoctorFacts.Database(
            login: login, superuser: superuser, schemaOwner: "siwa", ownsSchema: owns, publicSchemaWritable: publicWritable,
            grants: grants, memberships: memberships, durability: durability)
    }

    static func facts(
        process: DoctorProcess = .serve, api: Bool = false, options: [String: String]? = ["host": "/run/postgresql", "sslmode": "prefer"],
        database: DoctorFacts.Database? = database(), files: [DoctorFacts.SecretFile] = [],
        admin: ListenAddress = ListenAddress(host: "127.0.0.1", port: 9090), keySet: DoctorFacts.KeySet? = nil
    ) -> DoctorFacts {
        DoctorFacts(
            process: process, api: api, conninfoOptions: options, database: database, databaseProblem: nil, expectedGrants: expected,
            authLibraryProblem: nil, secretFiles: files, adminListen: admin, keySet: keySet)
    }

    static func codes(_ f: DoctorFacts) -> [String] { DoctorRules.findings(f).map { "\($0.code) \($0.severity.rawValue)" } }

    @Test("the recommended setup: nothing found")
    func clean() {
        #expect(DoctorRules.findings(Self.facts()).isEmpty)
        #expect(DoctorReport(process: "serve", findings: []).passes)
    }

    @Test("a superuser or the schema's owner is HIGH, with the login to use instead; memberships are then not judged")
    func login() {
        let superuser = DoctorRules.findings(Self.facts(database: Self.database(login: "postgres", superuser: true, owns: true, memberships: [])))
        #expect(superuser.map(\.code) == ["login-superuser"] && superuser[0].severity == .high)
        #expect(superuser[0].fix.contains("IN ROLE siwa_receiver, siwa_worker"))
        let owner = DoctorRules.findings(Self.facts(process: .receive, database: Self.database(login: "siwa", owns: true, memberships: [])))
        #expect(owner.map(\.code) == ["login-owner"] && owner[0].severity == .high && owner[0].fix.contains("IN ROLE siwa_receiver"))
    }

    @Test("a login in more siwa roles than its process needs, or fewer: MEDIUM, each with its statement")
    func memberships() {
        let extra = DoctorRules.findings(Self.facts(process: .receive, database: Self.database(memberships: ["siwa_receiver", "siwa_dashboard"])))
        #expect(extra.map(\.code) == ["login-roles-extra"] && extra[0].severity == .medium)
        #expect(extra[0].fix == "REVOKE siwa_dashboard FROM recv;")
        let lacking = DoctorRules.findings(Self.facts(process: .work, api: true, database: Self.database(memberships: ["siwa_worker"])))
        #expect(lacking.map(\.code) == ["login-roles-missing"] && lacking[0].fix == "GRANT siwa_api TO recv;\nGRANT siwa_console TO recv;")
        #expect(
            DoctorRules.findings(
                Self.facts(process: .work, api: true, database: Self.database(memberships: ["siwa_worker", "siwa_api", "siwa_console"]))
            ).isEmpty)
    }

    @Test("public writable is HIGH; grants beyond the matrix HIGH and missing ones MEDIUM, with the statements that fix them")
    func grants() {
        #expect(Self.codes(Self.facts(database: Self.database(publicWritable: true))) == ["public-schema-writable HIGH"])
        let drift = DoctorRules.findings(
            Self.facts(
                database: Self.database(grants: [
                    "siwa_receiver USAGE schema siwa", "siwa_receiver UPDATE events", "PUBLIC EXECUTE user_report",
                    "siwa_api INSERT revocations(apple_sub,status)", "siwa_receiver MEMBER siwa_worker",
                ])))
        #expect(drift.map { "\($0.code) \($0.severity.rawValue)" } == ["grants-extra HIGH", "grants-missing MEDIUM"])
        #expect(
            drift[0].fix.split(separator: "\n") == [
                "REVOKE EXECUTE ON FUNCTION siwa.user_report FROM PUBLIC;", "REVOKE INSERT (apple_sub, status) ON siwa.revocations FROM siwa_api;",
                "REVOKE siwa_worker FROM siwa_receiver;", "REVOKE UPDATE ON siwa.events FROM siwa_receiver;",
            ])
        #expect(drift[1].fix.hasSuffix("\nGRANT SELECT ON siwa.events TO siwa_worker;"))
        #expect(GrantText("siwa_api USAGE schema siwa")?.grant == "GRANT USAGE ON SCHEMA siwa TO siwa_api;")
    }

    @Test("schema siwa missing: HIGH, and no grant is compared")
    func schemaMissing() {
        var db = Self.database(grants: [])
        db.schemaOwner = nil
        #expect(Self.codes(Self.facts(database: db)) == ["schema-missing HIGH"])
    }

    @Test("sslmode below verify-full to a remote host: HIGH without encryption for sure, MEDIUM without the name checked; local never")
    func transport() {
        func codes(_ options: [String: String]) -> [String] { Self.codes(Self.facts(options: options)) }
        for mode in ["disable", "allow", "prefer"] {
            #expect(codes(["host": "db.example.com", "sslmode": mode]) == ["database-tls HIGH"], "\(mode)")
        }
        for mode in ["require", "verify-ca"] { #expect(codes(["host": "10.0.0.5", "sslmode": mode]) == ["database-tls MEDIUM"], "\(mode)") }
        #expect(codes(["host": "db.example.com", "sslmode": "verify-full"]).isEmpty)
        // No sslmode: libpq's default, prefer.
        #expect(codes(["host": "db.example.com"]) == ["database-tls HIGH"])
        // Local: a socket directory, an abstract socket, the default socket, loopback by name or address.
        for host in ["/var/run/postgresql", "@pg", "", "localhost", "127.0.0.1", "::1", "/tmp,127.0.0.2"] {
            #expect(codes(["host": host, "sslmode": "disable"]).isEmpty, "\(host)")
        }
        // hostaddr is where libpq connects; host then only names the server.
        #expect(codes(["host": "db.internal", "hostaddr": "127.0.0.1", "sslmode": "prefer"]).isEmpty)
        #expect(codes(["host": "localhost", "hostaddr": "192.0.2.7", "sslmode": "prefer"]) == ["database-tls HIGH"])
        // A multi-host URL: one remote host is enough.
        let multi = DoctorRules.findings(Self.facts(options: ["host": "/tmp,db2.example.com", "sslmode": "require"]))
        #expect(multi.count == 1 && multi[0].message.contains("db2.example.com") && !multi[0].message.contains("/tmp"))
    }

    @Test("credential files: any access by others or write by the group HIGH, read by the group LOW, owner only nothing")
    func files() {
        func finding(_ mode: UInt32?) -> String? {
            let file = DoctorFacts.SecretFile(variable: "SIWA_TOKEN_KEY_FILE", path: "/k", mode: mode, problem: mode == nil ? "denied" : nil)
            return DoctorRules.findings(Self.facts(files: [file])).first.map { "\($0.code) \($0.severity.rawValue)" }
        }
        for mode: UInt32 in [0o600, 0o400, 0o700, 0o610, 0o601] { #expect(finding(mode) == nil, "\(String(mode, radix: 8))") }
        for mode: UInt32 in [0o604, 0o602, 0o620, 0o644, 0o666] {
            #expect(finding(mode) == "secret-file-permissions HIGH", "\(String(mode, radix: 8))")
        }
        for mode: UInt32 in [0o640, 0o440] { #expect(finding(mode) == "secret-file-permissions LOW", "\(String(mode, radix: 8))") }
        #expect(finding(nil) == "secret-file-unchecked INFO")
        let text = DoctorRules.findings(Self.facts(files: [DoctorFacts.SecretFile(variable: "SIWA_API_TOKEN_FILE", path: "/t", mode: 0o644)]))[0]
        #expect(text.message == "SIWA_API_TOKEN_FILE (/t) is mode 0644: every user of this machine may read it, its group may read it")
    }

    @Test("the admin listener off loopback: MEDIUM")
    func admin() {
        #expect(Self.codes(Self.facts(admin: ListenAddress(host: "0.0.0.0", port: 9090))) == ["admin-listener-exposed MEDIUM"])
        #expect(Self.codes(Self.facts(admin: ListenAddress(host: "::1", port: 9090))).isEmpty)
        #expect(Self.codes(Self.facts(admin: ListenAddress(host: "localhost", port: 9090))).isEmpty)
    }

    @Test("the key set: unreachable HIGH; the clock past the tolerance HIGH, past a few seconds MEDIUM, no Date INFO")
    func keySet() {
        func codes(_ problem: String?, _ skew: Double?) -> [String] {
            Self.codes(Self.facts(keySet: DoctorFacts.KeySet(url: "https://k", problem: problem, skew: skew.map { .seconds($0) })))
        }
        #expect(codes(nil, 0.4).isEmpty && codes(nil, -4.9).isEmpty)
        #expect(codes(nil, 6) == ["clock-skew MEDIUM"] && codes(nil, -59) == ["clock-skew MEDIUM"])
        #expect(codes(nil, 60) == ["clock-skew HIGH"] && codes(nil, -3600) == ["clock-skew HIGH"])
        #expect(codes(nil, nil) == ["clock-skew-unknown INFO"])
        #expect(codes("fetch error: couldNotConnect", nil) == ["jwks-unreachable HIGH"])
        let ahead = DoctorRules.findings(Self.facts(keySet: DoctorFacts.KeySet(url: "https://k", problem: nil, skew: .seconds(-90))))[0]
        #expect(ahead.message.contains("90 s ahead of"))
    }

    @Test("commit durability: no standby INFO, asynchronous MEDIUM, not flushed or waiting HIGH, a synchronous standby nothing")
    func durability() {
        func codes(_ commit: String, _ names: String, _ sync: Int?, _ async: Int?) -> [String] {
            let d = DatabaseDurability(
                synchronousCommit: commit, synchronousStandbyNames: names, synchronousStandbys: sync, asynchronousStandbys: async, role: "r")
            return Self.codes(Self.facts(database: Self.database(durability: d)))
        }
        #expect(codes("on", "", 0, 0) == ["commit-durability INFO"])
        #expect(codes("on", "", nil, nil) == ["commit-durability INFO"])
        #expect(codes("on", "", 0, 1) == ["commit-durability MEDIUM"])
        #expect(codes("off", "", 0, 0) == ["commit-durability HIGH"])
        #expect(codes("on", "s1", 0, 0) == ["commit-durability HIGH"])
        #expect(codes("on", "s1", 1, 0).isEmpty)
    }

    @Test("no SIWA_DATABASE_URL: the embedded database MEDIUM; an unreachable one HIGH")
    func embedded() {
        #expect(Self.codes(Self.facts(options: nil, database: nil)) == ["database-embedded MEDIUM"])
        var f = Self.facts(database: nil)
        f.databaseProblem = "connection refused"
        #expect(Self.codes(f) == ["database-unreachable HIGH"])
    }

    @Test("each hosted provider: passing INFO; a credential unreadable, a provider silent or refusing HIGH, each naming its variable")
    func providers() throws {
        var f = Self.facts()
        f.hostedProviders = HostedProviderConfiguration(targets: [.clerk, .auth0, .cognito, .firebase])
        f.hostedProviders.auth0 = .init(domain: "t.eu.auth0.com", clientID: "c", clientSecretFile: "/s", url: nil)
        f.hostedProviders.firebase = .init(projectID: "p", credentialsFile: "/sa.json", url: nil)
        f.providers = [
            .init(.clerk, .answered(.done([], status: 200))),
            .init(.auth0, .answered(.retryLater(ProviderFailure(status: 503, reason: "http_503")))),
            .init(.cognito, .unusable(ConfigurationError(variable: "AWS_SHARED_CREDENTIALS_FILE", problem: "cannot read /aws"))),
            .init(.firebase, .answered(.refused(ProviderFailure(status: 401, reason: "invalid_grant", blame: .credential)))),
        ]
        let found = DoctorRules.findings(f)
        #expect(
            found.map { "\($0.code) \($0.severity.rawValue)" }
                == ["provider-check INFO", "provider-unreachable HIGH", "provider-credential HIGH", "provider-refused HIGH"])
        try #require(found.count == 4)
        #expect(found[0].message == "clerk answers and accepts the credential")
        #expect(found[1].message.hasPrefix("SIWA_AUTH0_URL: auth0 did not answer") && found[1].message.hasSuffix("SIWA_APPLY_TO=auth0)"))
        #expect(
            found[2].message.hasPrefix("AWS_SHARED_CREDENTIALS_FILE: cannot read /aws") && found[2].fix.hasPrefix("fix AWS_SHARED_CREDENTIALS_FILE"))
        #expect(
            found[3].message.hasPrefix("SIWA_FIREBASE_CREDENTIALS_FILE: firebase refused the credential")
                && found[3].fix.contains("SIWA_FIREBASE_CREDENTIALS_FILE"))
        // A user the provider does not know answers the check too: it passes.
        f.providers = [.init(.clerk, .answered(.userNotFound(status: 404)))]
        #expect(Self.codes(f) == ["provider-check INFO"])
        // Where the plan decides the sign-out (Auth0), the check names the one the tenant allows.
        f.providers = [.init(.auth0, .answered(.done([], status: 200)), signOut: Auth0SignOut.deviceCredentials.description)]
        #expect(
            DoctorRules.findings(f).first { $0.code == "provider-check" }?.message
                == "auth0 answers and accepts the credential; sign-out: \(Auth0SignOut.deviceCredentials.description)")
    }

    @Test("provider calls: a dead one HIGH with the replay that brings it back; the oldest waiting past 15 min MEDIUM, not before")
    func providerQueues() throws {
        var f = Self.facts()
        f.providerQueues = [
            .init(target: "clerk", waiting: 0, dead: 2, oldestWaitingAgeSeconds: 0),
            .init(target: "auth0", waiting: 3, dead: 0, oldestWaitingAgeSeconds: DoctorRules.providerWaitingWarning + 60),
            .init(target: "cognito", waiting: 5, dead: 0, oldestWaitingAgeSeconds: DoctorRules.providerWaitingWarning),
            .init(target: "firebase", waiting: 0, dead: 0, oldestWaitingAgeSeconds: 0),
        ]
        let found = DoctorRules.findings(f)
        #expect(found.map { "\($0.code) \($0.severity.rawValue)" } == ["provider-calls-dead HIGH", "provider-calls-waiting MEDIUM"])
        try #require(found.count == 2)
        #expect(found[0].message.hasPrefix("2 calls to clerk gave up") && found[0].fix.contains("replay --provider-calls --type clerk"))
        #expect(found[1].message == "the oldest of 3 calls waiting for auth0 was queued 16 min ago")
        f.providerQueues = nil
        #expect(DoctorRules.findings(f).isEmpty)
    }

    @Test("the report: HIGH first, exit status from HIGH only, the text names each code and fix")
    func report() {
        let report = DoctorReport(
            process: "work",
            findings: [
                DoctorFinding("a", .info, "i", fix: "x"), DoctorFinding("b", .high, "h", fix: "one\ntwo"), DoctorFinding("c", .low, "l", fix: "y"),
            ])
        #expect(report.findings.map(\.code) == ["b", "c", "a"])
        #expect(!report.passes)
        #expect(report.text.hasPrefix("HIGH   b: h\n       fix: one\n       fix: two\nLOW    c: l\n"))
        #expect(report.text.hasSuffix("doctor (work): 1 HIGH, 0 MEDIUM, 1 LOW, 1 INFO — fix the HIGH findings\n"))
        #expect(DoctorReport(process: "work", findings: [DoctorFinding("m", .medium, "m", fix: "f")]).passes)
    }
}
