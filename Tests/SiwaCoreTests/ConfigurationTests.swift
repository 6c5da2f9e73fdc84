import Testing

@testable import SiwaCore

@Suite struct ConfigurationTests {
    let base = ["SIWA_AUDIENCES": "com.example.app"]

    func load(_ env: [String: String], overrides: [String: String] = [:], dev: Bool = false) throws(ConfigurationError) -> ServerConfiguration {
        try ServerConfiguration.load(environment: env, overrides: overrides, dev: dev)
    }

    func error(_ env: [String: String], overrides: [String: String] = [:], dev: Bool = false) -> ConfigurationError? {
        do {
            _ = try load(env, overrides: overrides, dev: dev)
            return nil
        } catch {
            return error
        }
    }

    func with(_ name: String, _ value: String) -> [String: String] {
        var env = base
        env[name] = value
        return env
    }

    @Test func defaults() throws {
        let c = ServerConfiguration()
        #expect(c.databaseURL == nil)
        #expect(c.dataDirectory == "./.siwa")
        #expect(c.audiences == [])
        #expect(c.jwksURL == "https://appleid.apple.com/auth/keys")
        #expect(c.listen == ListenAddress(host: "0.0.0.0", port: 8080))
        #expect(c.path == "/apple/notifications")
        #expect(c.adminListen == ListenAddress(host: "127.0.0.1", port: 9090))
        #expect(c.maxBody == 65_536)
        #expect(c.logLevel == "info")
        #expect(c.logFormat == "json")
        #expect(c.connectionTimeout == .seconds(10))
        #expect(c.maxConnections == 1024)
        #expect(c.httpThreads == 4)
        #expect(c.maxAttempts == 12)
        #expect(c.dev == false)

        var expected = ServerConfiguration()
        expected.audiences = ["com.example.app"]
        #expect(try load(base) == expected)
    }

    @Test func readsEveryVariable() throws {
        let env = [
            "SIWA_DATABASE_URL": "postgresql://u@db/siwa",
            "SIWA_DATA_DIR": "/var/lib/siwa",
            "SIWA_AUDIENCES": " com.a , com.b,,  ,com.c ",
            "SIWA_JWKS_URL": "http://127.0.0.1:8081/keys",
            "SIWA_LISTEN": "[::]:8443",
            "SIWA_PATH": "/hooks/apple",
            "SIWA_ADMIN_LISTEN": "[::1]:9191",
            "SIWA_MAX_BODY": "1024",
            "SIWA_LOG_LEVEL": "debug",
            "SIWA_LOG_FORMAT": "text",
            "SIWA_CONNECTION_TIMEOUT": "300",
            "SIWA_MAX_CONNECTIONS": "65536",
            "SIWA_HTTP_THREADS": "1",
            "SIWA_MAX_ATTEMPTS": "100",
            "SIWA_SOMETHING_ELSE": "ignored",
            "PATH": "/usr/bin",
        ]
        let c = try load(env)
        #expect(c.databaseURL == "postgresql://u@db/siwa")
        #expect(c.dataDirectory == "/var/lib/siwa")
        #expect(c.audiences == ["com.a", "com.b", "com.c"])
        #expect(c.jwksURL == "http://127.0.0.1:8081/keys")
        #expect(c.listen == ListenAddress(host: "::", port: 8443))
        #expect(c.path == "/hooks/apple")
        #expect(c.adminListen == ListenAddress(host: "::1", port: 9191))
        #expect(c.maxBody == 1024)
        #expect(c.logLevel == "debug")
        #expect(c.logFormat == "text")
        #expect(c.connectionTimeout == .seconds(300))
        #expect(c.maxConnections == 65_536)
        #expect(c.httpThreads == 1)
        #expect(c.maxAttempts == 100)
        #expect(!c.dev)
    }

    @Test func audiencesOptionalForProcessesThatDoNotVerify() throws {
        let c = try ServerConfiguration.load(environment: ["SIWA_ADMIN_LISTEN": "0.0.0.0:9191"], requireAudiences: false)
        #expect(c.audiences.isEmpty)
        #expect(c.adminListen == ListenAddress(host: "0.0.0.0", port: 9191))  // not forced to loopback
        #expect(!c.dev)
        #expect(throws: ConfigurationError.self) { try ServerConfiguration.load(environment: [:]) }
    }

    @Test func overridesWin() throws {
        let c = try load(with("SIWA_MAX_BODY", "2048"), overrides: ["SIWA_MAX_BODY": "4096", "SIWA_AUDIENCES": "com.override"])
        #expect(c.maxBody == 4096)
        #expect(c.audiences == ["com.override"])
        // An override is validated like the environment value.
        #expect(error(base, overrides: ["SIWA_MAX_BODY": "1"])?.variable == "SIWA_MAX_BODY")
    }

    @Test func emptyValuesCountAsUnset() throws {
        let c = try load(["SIWA_AUDIENCES": "a", "SIWA_DATABASE_URL": "", "SIWA_MAX_BODY": "  ", "SIWA_LOG_LEVEL": ""])
        #expect(c.databaseURL == nil)
        #expect(c.maxBody == 65_536)
        #expect(c.logLevel == "info")
    }

    @Test func valuesAreTrimmed() throws {
        let c = try load(["SIWA_AUDIENCES": "a", "SIWA_MAX_BODY": " 2048\n", "SIWA_LISTEN": " 127.0.0.1:1 "])
        #expect(c.maxBody == 2048)
        #expect(c.listen == ListenAddress(host: "127.0.0.1", port: 1))
    }

    @Test func audiencesRequiredUnlessDev() {
        for env in [[:], ["SIWA_AUDIENCES": ""], ["SIWA_AUDIENCES": " , ,"]] {
            let e = error(env)
            #expect(e?.variable == "SIWA_AUDIENCES")
            #expect(e?.description.hasPrefix("SIWA_AUDIENCES: ") == true)
        }
    }

    @Test func devMode() throws {
        let c = try load([:], dev: true)
        #expect(c.dev)
        #expect(c.audiences == [ServerConfiguration.devAudience])
        #expect(c.listen == ListenAddress(host: "127.0.0.1", port: 8080))  // 0.0.0.0 replaced
        #expect(c.adminListen == ListenAddress(host: "127.0.0.1", port: 9090))

        let d = try load(["SIWA_AUDIENCES": "com.a", "SIWA_LISTEN": "[::1]:1", "SIWA_ADMIN_LISTEN": "10.1.2.3:2"], dev: true)
        #expect(d.audiences == ["com.a", ServerConfiguration.devAudience])
        #expect(d.listen == ListenAddress(host: "::1", port: 1))  // loopback kept
        #expect(d.adminListen == ListenAddress(host: "127.0.0.1", port: 2))  // replaced

        let e = try load(["SIWA_AUDIENCES": "\(ServerConfiguration.devAudience),com.a"], dev: true)
        #expect(e.audiences == [ServerConfiguration.devAudience, "com.a"])  // not duplicated
    }

    @Test("--dev refuses SIWA_DATABASE_URL (env or flag): development mode runs on the embedded database only")
    func devModeRefusesAnExternalDatabase() throws {
        let url = "postgresql://siwa@db.internal/siwa"
        for e in [error(["SIWA_DATABASE_URL": url], dev: true), error([:], overrides: ["SIWA_DATABASE_URL": url], dev: true)] {
            #expect(e?.variable == "SIWA_DATABASE_URL")
            #expect(e?.description.contains("--dev") == true)
        }
        // Unset (or empty) is the embedded database; without --dev the URL is fine.
        #expect(try load(["SIWA_DATABASE_URL": " "], dev: true).databaseURL == nil)
        #expect(try load(with("SIWA_DATABASE_URL", url)).databaseURL == url)
    }

    @Test func devModeDoesNotRelaxOtherChecks() {
        #expect(error(["SIWA_JWKS_URL": "http://example.com/keys"], dev: true)?.variable == "SIWA_JWKS_URL")
        #expect(error(["SIWA_MAX_BODY": "0"], dev: true)?.variable == "SIWA_MAX_BODY")
    }

    @Test func devReplacementCanCauseClash() {
        // 0.0.0.0:9090 becomes 127.0.0.1:9090, which is the admin default.
        #expect(error(["SIWA_LISTEN": "0.0.0.0:9090"], dev: true)?.variable == "SIWA_ADMIN_LISTEN")
    }

    @Test func badListenAddresses() {
        #expect(error(with("SIWA_LISTEN", "8080"))?.variable == "SIWA_LISTEN")
        #expect(error(with("SIWA_LISTEN", "example.com:80"))?.variable == "SIWA_LISTEN")
        #expect(error(with("SIWA_ADMIN_LISTEN", "127.0.0.1:70000"))?.variable == "SIWA_ADMIN_LISTEN")
    }

    @Test func listenMustDifferFromAdmin() {
        #expect(error(with("SIWA_LISTEN", "127.0.0.1:9090"))?.variable == "SIWA_ADMIN_LISTEN")
        #expect(error(with("SIWA_ADMIN_LISTEN", "0.0.0.0:8080"))?.variable == "SIWA_ADMIN_LISTEN")
        // A wildcard listener on the admin port also clashes.
        #expect(error(with("SIWA_LISTEN", "0.0.0.0:9090"))?.variable == "SIWA_ADMIN_LISTEN")
        // Different hosts on the same port are fine; port 0 never clashes.
        var env = base
        env["SIWA_LISTEN"] = "127.0.0.2:9090"
        #expect(error(env) == nil)
        env["SIWA_LISTEN"] = "127.0.0.1:0"
        env["SIWA_ADMIN_LISTEN"] = "127.0.0.1:0"
        #expect(error(env) == nil)
    }

    @Test func path() {
        #expect(error(with("SIWA_PATH", "apple/notifications"))?.variable == "SIWA_PATH")
        #expect(error(with("SIWA_PATH", "/a b"))?.variable == "SIWA_PATH")
        #expect(error(with("SIWA_PATH", "/a?b"))?.variable == "SIWA_PATH")
        #expect(error(with("SIWA_PATH", "/")) == nil)
    }

    @Test func numberRanges() {
        let cases: [(String, Int, Int)] = [
            ("SIWA_MAX_BODY", 1024, 10_485_760),
            ("SIWA_CONNECTION_TIMEOUT", 1, 300),
            ("SIWA_MAX_CONNECTIONS", 1, 65_536),
            ("SIWA_HTTP_THREADS", 1, 256),
            ("SIWA_MAX_ATTEMPTS", 1, 100),
        ]
        for (name, low, high) in cases {
            #expect(error(with(name, String(low))) == nil, "\(name)")
            #expect(error(with(name, String(high))) == nil, "\(name)")
            for bad in [String(low - 1), String(high + 1), "abc", "1.5", "-", "0x10", "99999999999999999999999", "1e3"] {
                let e = error(with(name, bad))
                #expect(e?.variable == name, "\(name)=\(bad)")
                #expect(e?.problem == "must be an integer between \(low) and \(high)")
            }
        }
        #expect(error(with("SIWA_MAX_BODY", "1"))?.description == "SIWA_MAX_BODY: must be an integer between 1024 and 10485760")
    }

    @Test func logLevelAndFormat() throws {
        for level in ServerConfiguration.logLevels {
            #expect(try load(with("SIWA_LOG_LEVEL", level)).logLevel == level)
        }
        #expect(try load(with("SIWA_LOG_LEVEL", "WARNING")).logLevel == "warning")
        #expect(error(with("SIWA_LOG_LEVEL", "verbose"))?.variable == "SIWA_LOG_LEVEL")
        #expect(error(with("SIWA_LOG_LEVEL", "warn"))?.variable == "SIWA_LOG_LEVEL")
        #expect(try load(with("SIWA_LOG_FORMAT", "TEXT")).logFormat == "text")
        #expect(error(with("SIWA_LOG_FORMAT", "xml"))?.variable == "SIWA_LOG_FORMAT")
    }

    @Test func jwksURL() throws {
        #expect(try load(with("SIWA_JWKS_URL", "file:///tmp/keys.json")).jwksURL == "file:///tmp/keys.json")
        let e = error(with("SIWA_JWKS_URL", "http://keys.example.com/keys"))
        #expect(e?.variable == "SIWA_JWKS_URL")
        #expect(e?.problem == JWKSLocation.problem(with: "http://keys.example.com/keys"))
        #expect(error(with("SIWA_JWKS_URL", "ftp://x/y"))?.variable == "SIWA_JWKS_URL")
    }

    @Test func errorDescriptionIsOneLineNamingTheVariable() {
        let e = ConfigurationError(variable: "SIWA_X", problem: "is wrong")
        #expect(e.description == "SIWA_X: is wrong")
        for env in [with("SIWA_LISTEN", "x"), with("SIWA_PATH", "x"), with("SIWA_LOG_FORMAT", "x"), with("SIWA_JWKS_URL", "x"), [:]] {
            let d = error(env)?.description ?? ""
            #expect(d.hasPrefix("SIWA_"))
            #expect(!d.contains("\n"))
        }
    }

    @Test("forwarding: off by default; URL and secret file together; https, or http to loopback; retry duration")
    func forwarding() throws {
        #expect(try load(base).forwarding == nil)
        var env = base
        env["SIWA_FORWARD_URL"] = "https://app.example/hooks/siwa"
        env["SIWA_FORWARD_SECRET_FILE"] = "/etc/siwa/forward-secrets"
        let on = try load(env).forwarding
        #expect(
            on == ForwardingConfiguration(url: "https://app.example/hooks/siwa", secretFile: "/etc/siwa/forward-secrets", retryFor: .seconds(259_200))
        )
        env["SIWA_FORWARD_RETRY_FOR"] = "36h"
        #expect(try load(env).forwarding?.retryFor == .seconds(129_600))
        #expect(try load(env, overrides: ["SIWA_FORWARD_RETRY_FOR": "90m"]).forwarding?.retryFor == .seconds(5400))
        for bad in ["3", "3 d", "1.5d", "-1d", "0s", "59s", "31d", "3w", "d"] {
            #expect(error(env.merging(["SIWA_FORWARD_RETRY_FOR": bad]) { $1 })?.variable == "SIWA_FORWARD_RETRY_FOR", "\(bad)")
        }
        env["SIWA_FORWARD_RETRY_FOR"] = nil
        #expect(try load(env.merging(["SIWA_FORWARD_URL": "http://127.0.0.1:8081/hooks"]) { $1 }).forwarding != nil)
        #expect(try load(env.merging(["SIWA_FORWARD_URL": "http://[::1]:8081/hooks"]) { $1 }).forwarding != nil)
        for bad in ["http://app.example/hooks", "file:///tmp/x", "ftp://app.example/", "https://user:pw@app.example/", "app.example/hooks"] {
            let e = error(env.merging(["SIWA_FORWARD_URL": bad]) { $1 })
            #expect(e?.variable == "SIWA_FORWARD_URL", "\(bad)")
            #expect(e?.description.contains("\n") == false)
        }
        let urlOnly = error(base.merging(["SIWA_FORWARD_URL": "https://app.example/hooks"]) { $1 })
        #expect(urlOnly?.variable == "SIWA_FORWARD_SECRET_FILE")
        let fileOnly = error(base.merging(["SIWA_FORWARD_SECRET_FILE": "/etc/siwa/forward-secrets"]) { $1 })
        #expect(fileOnly?.variable == "SIWA_FORWARD_URL")
        // Work processes need no audiences to forward.
        let work = try ServerConfiguration.load(
            environment: ["SIWA_FORWARD_URL": "https://a.example/h", "SIWA_FORWARD_SECRET_FILE": "/s"], requireAudiences: false)
        #expect(work.forwarding?.url == "https://a.example/h")
    }

    @Test("SIWA_REVOKE_RETRY_FOR: a duration with a unit, 1m to 365d, default 7d; a bad one names the variable")
    func revokeRetryFor() throws {
        #expect(ServerConfiguration().revokeRetryFor == .seconds(604_800))
        #expect(try load(base).revokeRetryFor == .seconds(604_800))
        for (text, seconds) in [("90s", 90), ("24h", 86_400), ("7d", 604_800), ("1m", 60), ("365d", 31_536_000), (" 36h ", 129_600)] {
            #expect(try load(with("SIWA_REVOKE_RETRY_FOR", text)).revokeRetryFor == .seconds(seconds), "\(text)")
        }
        #expect(try load(with("SIWA_REVOKE_RETRY_FOR", "7d"), overrides: ["SIWA_REVOKE_RETRY_FOR": "2h"]).revokeRetryFor == .seconds(7200))
        #expect(try load(with("SIWA_REVOKE_RETRY_FOR", "")).revokeRetryFor == .seconds(604_800), "empty counts as unset")
        for bad in ["604800", "7", "0", "59s", "366d", "1.5d", "7 d", "-1d", "7w", "7D", "d", "soon"] {
            let e = error(with("SIWA_REVOKE_RETRY_FOR", bad))
            #expect(e?.variable == "SIWA_REVOKE_RETRY_FOR", "\(bad)")
            #expect(e?.description == "SIWA_REVOKE_RETRY_FOR: must be a duration with a unit (s, m, h, d) between 1m and 365d", "\(bad)")
        }
        // The flag is checked like the environment.
        #expect(error(base, overrides: ["SIWA_REVOKE_RETRY_FOR": "3"])?.variable == "SIWA_REVOKE_RETRY_FOR")
        // The schedule takes the configured window: 90 s after queueing the revocation is dead.
        let schedule = RevocationSchedule(retryFor: try load(with("SIWA_REVOKE_RETRY_FOR", "90s")).revokeRetryFor)
        #expect(schedule.next(afterAttempts: 1, age: .seconds(89), retryAfter: nil, jitter: 0) == .retry(in: .milliseconds(500)))
        #expect(schedule.next(afterAttempts: 1, age: .seconds(90), retryAfter: nil, jitter: 0) == .dead)
    }

    @Test("durations take one unit: s, m, h, d")
    func durations() {
        #expect(DurationText.seconds("90s") == 90)
        #expect(DurationText.seconds("15m") == 900)
        #expect(DurationText.seconds("24h") == 86_400)
        #expect(DurationText.seconds("7d") == 604_800)
        #expect(DurationText.seconds("0s") == 0)
        for bad in ["", "s", "7", "7D", "7 d", " 7d", "+7d", "-7d", "1.5h", "7dd", "１d", "9999999999999d", "9999999999999s"] {
            #expect(DurationText.seconds(bad) == nil, "\(bad)")
        }
    }
}
