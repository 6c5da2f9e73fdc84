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
        abstract: "Apply schema.sql to SIWA_DATABASE_URL (idempotent, safe on every deploy).",
        discussion: """
            Does nothing ("schema up to date", no lock taken) when the database already carries this \
            release's schema, and never applies it over a newer release's: it leaves one that supports \
            this release alone, and stops on one that does not. Otherwise checks that the role owns schema siwa before taking any \
            lock, then applies the schema in one transaction whose lock waits give up after \
            --lock-timeout seconds (so notifications queued behind it are still answered), retried with \
            backoff for --retry-for seconds ("schema applied").
            """)
    @OptionGroup var options: ConfigurationOptions
    @Option(help: "Seconds the migration waits for any one lock before it rolls back and retries.")
    var lockTimeout: Double = Migrator.Options().lockTimeout.inSeconds
    @Option(help: "Seconds during which a migration that could not get its locks is retried.")
    var retryFor: Double = Migrator.Options().retryFor.inSeconds
    @Flag(help: "Apply the schema even when the database already carries this version.")
    var force = false

    func run() throws {
        let config = try options.load(requireAudiences: false)
        guard let url = config.databaseURL else {
            throw CLIError("SIWA_DATABASE_URL: required by migrate (serve applies the schema to its embedded database itself)")
        }
        guard lockTimeout > 0, retryFor >= 0 else { throw CLIError("migrate: --lock-timeout must be > 0 and --retry-for >= 0") }
        var migration = Migrator.Options()
        migration.lockTimeout = .seconds(lockTimeout)
        migration.retryFor = .seconds(retryFor)
        let outcome: Migrator.Outcome
        do {
            outcome = try Migrator.migrate(conninfo: url, force: force, options: migration) { retry in
                FileHandle.standardError.write(Data("\(retry)\n".utf8))
            }
        } catch {
            throw CLIError("migrate failed: \(error) \(error.serverMessage)")
        }
        if let warning = Migrator.publicSchemaWarning(conninfo: url) {
            FileHandle.standardError.write(Data((warning + "\n").utf8))
        }
        // The ids the API's functions store a token under (docs/security.md, key ids).
        if case .notAllowed = outcome {
        } else if let files = config.appleAPI?.tokenKeyFile {
            do {
                try StoredTokenKeys.record(try TokenVault.load(files: files), conninfo: url)
            } catch {
                throw CLIError("migrate: SIWA_TOKEN_KEY_FILE: \(error)")
            }
        }
        switch outcome {
        case .upToDate: print("schema up to date (\(Migrator.versionMarker))")
        case .applied: print("schema applied (\(Migrator.versionMarker))")
        case .notAllowed(let role):
            throw CLIError("migrate failed: role \(role) does not own schema siwa and its objects (run migrate as the owner)")
        case .newer(let recorded):
            print("schema not applied: \(SchemaDecision.newerNote(recorded, running: Migrator.release))")
        case .refused(let recorded):
            throw CLIError("migrate refused: " + SchemaDecision.refusal(recorded, running: Migrator.release))
        }
    }
}

enum Runner {
    static func run(options: ConfigurationOptions, dev: Bool, roles: Application.Roles, audiencesRequired: Bool = true) throws {
        let config = try options.load(dev: dev, requireAudiences: audiencesRequired)
        let logger = Bootstrap.logging(config)
        if let line = UnknownVariables.warning(UnknownVariables.unknown(in: ProcessInfo.processInfo.environment)) {
            logger.warning("\(line)")
        }
        let app = Application(configuration: config, roles: roles, logger: logger)
        let termination = TerminationSignals()
        do {
            try app.start()
        } catch {
            app.shutdown()
            throw CLIError("cannot start: \(error)")
        }
        // SIGHUP re-reads SIWA_API_TOKEN_FILE (rotation without a restart).
        EarlySignals.notePending()
        signal(SIGHUP, SIG_IGN)
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        // The application logs the outcome (the tokens in use stay when the file is invalid).
        hangup.setEventHandler { _ = try? app.reloadAPITokens() }
        hangup.resume()
        defer { hangup.cancel() }
        // One that came while starting (held since the first instruction) is served now.
        if EarlySignals.hangUpReceived.exchange(false, ordering: .relaxed) { _ = try? app.reloadAPITokens() }
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
