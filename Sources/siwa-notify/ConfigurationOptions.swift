import ArgumentParser
import Foundation
import Logging
import SiwaApp
import SiwaCore

/// Flags that override the `SIWA_*` variable of the same name.
struct ConfigurationOptions: ParsableArguments {
    @Option(help: "libpq URI or conninfo (SIWA_DATABASE_URL). Default: embedded PostgreSQL under the data dir.")
    var databaseURL: String?
    @Option(help: "Embedded database and dev key directory (SIWA_DATA_DIR, default ./.siwa).")
    var dataDir: String?
    @Option(help: "Comma-separated accepted aud values (SIWA_AUDIENCES).")
    var audiences: String?
    @Option(help: "Apple's key set URL (SIWA_JWKS_URL).")
    var jwksURL: String?
    @Option(help: "Public listener host:port (SIWA_LISTEN, default 0.0.0.0:8080).")
    var listen: String?
    @Option(help: "Endpoint path (SIWA_PATH, default /apple/notifications).")
    var path: String?
    @Option(help: "Admin listener host:port (SIWA_ADMIN_LISTEN, default 127.0.0.1:9090).")
    var adminListen: String?
    @Option(help: "Largest accepted body in bytes (SIWA_MAX_BODY, default 65536).")
    var maxBody: String?
    @Option(help: "trace|debug|info|notice|warning|error|critical (SIWA_LOG_LEVEL, default info).")
    var logLevel: String?
    @Option(help: "json|text (SIWA_LOG_FORMAT, default json).")
    var logFormat: String?

    var overrides: [String: String] {
        var o: [String: String] = [:]
        o["SIWA_DATABASE_URL"] = databaseURL
        o["SIWA_DATA_DIR"] = dataDir
        o["SIWA_AUDIENCES"] = audiences
        o["SIWA_JWKS_URL"] = jwksURL
        o["SIWA_LISTEN"] = listen
        o["SIWA_PATH"] = path
        o["SIWA_ADMIN_LISTEN"] = adminListen
        o["SIWA_MAX_BODY"] = maxBody
        o["SIWA_LOG_LEVEL"] = logLevel
        o["SIWA_LOG_FORMAT"] = logFormat
        return o
    }

    /// Loads the configuration; a bad value stops the program with one line naming the variable.
    func load(dev: Bool = false, requireAudiences: Bool = true) throws -> ServerConfiguration {
        do {
            return try ServerConfiguration.load(environment: ProcessInfo.processInfo.environment,
                                                overrides: overrides, dev: dev, requireAudiences: requireAudiences)
        } catch {
            throw CLIError("configuration: \(error)")
        }
    }
}

struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum Bootstrap {
    /// Installs the JSON (or text) log handler on stderr. Only `main` does this.
    static func logging(_ configuration: ServerConfiguration) -> Logger {
        let level = Logger.Level(configValue: configuration.logLevel) ?? .info
        let format = JSONLogHandler.Format(rawValue: configuration.logFormat) ?? .json
        LoggingSystem.bootstrap { label in JSONLogHandler(label: label, level: level, format: format) }
        return Logger(label: "siwa-notify")
    }
}
