import ArgumentParser
import Dispatch
import Foundation
import Logging
import SiwaApp
import SiwaCore

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Receiver and worker in one process (the default way to run it).",
        discussion: "Without SIWA_DATABASE_URL it runs an embedded private PostgreSQL under SIWA_DATA_DIR.")

    @OptionGroup var options: ConfigurationOptions
    @Flag(help: "Development mode: trust the local dev key (see `simulate`), listen on loopback only.")
    var dev = false

    func run() throws {
        try Runner.run(options: options, dev: dev, roles: .all)
    }
}

struct Receive: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Only the public listener: verify and commit notifications (scale apart from workers).")
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        try Runner.run(options: options, dev: false, roles: .receive)
    }
}

struct Work: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Only the worker: apply committed events to accounts and sessions (many may run).")
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        try Runner.run(options: options, dev: false, roles: .work, audiencesRequired: false)
    }
}

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply schema.sql to SIWA_DATABASE_URL (idempotent, safe on every deploy).")
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        guard let url = config.databaseURL else {
            throw CLIError("SIWA_DATABASE_URL: required by migrate (serve applies the schema to its embedded database itself)")
        }
        do {
            try Migrator.migrate(conninfo: url, force: true)
        } catch {
            throw CLIError("migrate failed: \(error) \(error.serverMessage)")
        }
        print("schema applied")
    }
}

enum Runner {
    static func run(options: ConfigurationOptions, dev: Bool, roles: Application.Roles, audiencesRequired: Bool = true) throws {
        let config = try options.load(dev: dev, requireAudiences: audiencesRequired)
        let logger = Bootstrap.logging(config)
        let app = Application(configuration: config, roles: roles, logger: logger)
        let termination = TerminationSignals()
        do {
            try app.start()
        } catch {
            app.shutdown()
            throw CLIError("cannot start: \(error)")
        }
        // SIGHUP re-reads SIWA_API_TOKEN_FILE (rotation without a restart).
        signal(SIGHUP, SIG_IGN)
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        hangup.setEventHandler {
            do {
                if let count = try app.reloadAPITokens() {
                    logger.notice("API tokens reloaded", metadata: ["tokens": "\(count)"])
                }
            } catch {
                logger.error("API tokens not reloaded; the previous ones stay", metadata: ["error": "\(error)"])
            }
        }
        hangup.resume()
        defer { hangup.cancel() }
        termination.wait()
        logger.notice("shutting down")
        app.shutdown()
    }
}

/// SIGTERM and SIGINT turned into something to wait for: create it before starting (a signal
/// during the start is kept), then `wait()`.
final class TerminationSignals {
    private let received = DispatchSemaphore(value: 0)
    private var sources: [DispatchSourceSignal] = []

    init() {
        sources = [SIGTERM, SIGINT].map { sig -> DispatchSourceSignal in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [received] in received.signal() }
            source.resume()
            return source
        }
    }

    /// Blocks until SIGTERM or SIGINT.
    func wait() {
        received.wait()
        sources.forEach { $0.cancel() }
    }
}
