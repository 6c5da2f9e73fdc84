import ArgumentParser
import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaFetch
import SiwaRuntime

/// The database an operator command talks to: SIWA_DATABASE_URL, or the embedded one under
/// SIWA_DATA_DIR (which must be running, e.g. under `serve`).
func operatorDatabase(_ config: ServerConfiguration) throws -> String {
    if let url = config.databaseURL { return url }
    let embedded = try EmbeddedPostgres(
        dataDirectory: config.dataDirectory,
        logger: .init(label: "cli") { _ in SwiftLogNoOpLogHandler() })
    return embedded.conninfo
}

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Put dead-lettered events back in the queue (by id, by type, or all); or dead forwards, dead revocations at Apple, or dead provider calls."
    )
    @Option(name: .customLong("id"), help: "An event id (repeatable).")
    var ids: [Int64] = []
    @Option(help: "Every dead event of this type.")
    var type: String?
    @Flag(help: "Every dead event.")
    var all = false
    @Flag(help: "Dead forwards (SIWA_FORWARD_URL) instead of events: with --all or --type.")
    var forwards = false
    @Flag(help: "Every dead revocation at Apple (retried again for SIWA_REVOKE_RETRY_FOR).")
    var revocations = false
    @Flag(
        name: .customLong("provider-calls"),
        help: "Dead calls to the hosted providers (SIWA_APPLY_TO) instead of events: with --all or --type PROVIDER.")
    var providerCalls = false
    @OptionGroup var options: ConfigurationOptions

    func validate() throws {
        let chosen = (ids.isEmpty ? 0 : 1) + (type == nil ? 0 : 1) + (all ? 1 : 0) + (revocations ? 1 : 0)
        if chosen != 1 { throw ValidationError("choose exactly one of --id, --type, --all, --revocations") }
        if forwards && (!ids.isEmpty || revocations) { throw ValidationError("--forwards takes --all or --type") }
        if providerCalls && (!ids.isEmpty || revocations || forwards) { throw ValidationError("--provider-calls takes --all or --type") }
    }

    func run() throws {
        let config = try options.load(requireAudiences: false)
        if revocations {
            do {
                let count = try OutboxAdmin.replayRevocations(conninfo: try operatorDatabase(config))
                print("requeued \(count) dead revocation\(count == 1 ? "" : "s")")
                return
            } catch {
                throw CLIError("replay failed: \(PermissionDenied.explained(error, privilege: "UPDATE"))")
            }
        }
        if providerCalls {
            do {
                let count = try OutboxAdmin.replayProviderCalls(target: type, conninfo: try operatorDatabase(config))
                print("requeued \(count) dead provider call\(count == 1 ? "" : "s")")
            } catch {
                throw CLIError("replay failed: \(PermissionDenied.explained(error, privilege: "UPDATE"))")
            }
            return
        }
        if forwards {
            do {
                let count = try OutboxAdmin.replayForwards(type: type, conninfo: try operatorDatabase(config))
                print("requeued \(count) dead forward\(count == 1 ? "" : "s")")
            } catch {
                throw CLIError("replay failed: \(PermissionDenied.explained(error, privilege: "UPDATE"))")
            }
            return
        }
        let selection: OutboxAdmin.ReplaySelection = all ? .all : (type.map { .type($0) } ?? .ids(ids))
        do {
            let count = try OutboxAdmin.replay(selection, conninfo: try operatorDatabase(config))
            print("requeued \(count) dead event\(count == 1 ? "" : "s")")
        } catch {
            throw CLIError("replay failed: \(PermissionDenied.explained(error, privilege: "UPDATE"))")
        }
    }
}

struct DeleteUser: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-user",
        abstract: "Delete a user: the worker deletes the account by its next batch, then every token is revoked at Apple.",
        discussion: """
            Same as `select siwa.request_deletion(sub, aud)`. The user's tokens of every client id are revoked, \
            each revocation proven (the token validated once after Apple's 200); `user-report --sub S` shows the evidence.
            """)
    @OptionGroup var user: DeletionArguments
    @OptionGroup var options: ConfigurationOptions

    func run() throws { try Self.queue(sub: user.sub, aud: user.aud, options: options, command: "delete-user") }

    static func queue(sub: String, aud: String?, options: ConfigurationOptions, command: String) throws {
        let config = try options.load(requireAudiences: false)
        if let aud, !config.audiences.isEmpty, !config.audiences.containsExactly(aud) {
            throw CLIError("\(command): --aud \(aud) is not one of SIWA_AUDIENCES (\(config.audiences.joined(separator: ",")))")
        }
        do {
            let count = try OutboxAdmin.requestDeletion(sub: sub, clientID: aud, conninfo: try operatorDatabase(config))
            print(
                "queued \(count) deletion\(count == 1 ? "" : "s")"
                    + (config.appleAPI == nil
                        ? " (the worker deletes the user here; revoking their tokens at Apple needs SIWA_TEAM_ID etc. on the worker)" : ""))
        } catch {
            throw CLIError("\(command) failed: \(PermissionDenied.explained(error))")
        }
    }
}

/// The command's earlier name, kept for scripts that use it.
struct Revoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Alias of delete-user (its earlier name): delete a user and revoke every token at Apple.",
        discussion: "Exactly `delete-user --sub S [--aud A]`; see `siwa-notify delete-user --help`.")
    @OptionGroup var user: DeletionArguments
    @OptionGroup var options: ConfigurationOptions

    func run() throws { try DeleteUser.queue(sub: user.sub, aud: user.aud, options: options, command: "revoke") }
}

/// The user `delete-user` (and `revoke`) deletes.
struct DeletionArguments: ParsableArguments {
    @Option(help: "The user's Apple sub.")
    var sub: String
    @Option(help: "The client id (one of SIWA_AUDIENCES) of the app asking. Default: none named.")
    var aud: String?
}

struct UserReportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user-report",
        abstract: "Print a user's timeline as JSON for a reviewer: events, effects, deletion evidence.",
        discussion: """
            Reads `siwa.user_report(sub)`: the account and its apps, every stored event with what the worker made \
            of it, the sessions revoked, the refresh tokens held (never the token), every revocation at Apple with \
            each call (status, time) and its proof (`confirmation`: confirmed, unconfirmed, pending), and each \
            deletion (requested, applied locally, the revocations it queued). Emails masked (j•••@example.com). \
            Exit 1 when nothing is stored about the sub.
            """)
    @Option(help: "The user's Apple sub.")
    var sub: String
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        let report: String?
        do {
            report = try UserReport.json(sub: sub, conninfo: try operatorDatabase(config))
        } catch {
            throw CLIError("user-report failed: \(PermissionDenied.explained(error))")
        }
        guard let report else { throw CLIError("user-report: nothing is stored about this sub") }
        print(report)
    }
}

struct Rekey: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-encrypt every stored refresh token with the newest key of SIWA_TOKEN_KEY_FILE.",
        discussion: """
            Rotation: list the new key file first and the old one after a comma (SIWA_TOKEN_KEY_FILE=new,old), \
            restart, run rekey, then drop the old file. Works in batches of 100, each its own short transaction; \
            safe to run again (tokens already under the newest key are skipped).
            """)
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        guard let files = config.appleAPI?.tokenKeyFile else {
            throw CLIError("rekey: SIWA_TOKEN_KEY_FILE is not set (in-app deletion is off: there is nothing to rekey)")
        }
        let vault: TokenVault
        do {
            vault = try TokenVault.load(files: files)
        } catch {
            throw CLIError("rekey: SIWA_TOKEN_KEY_FILE: \(error)")
        }
        let report: StoredTokenKeys.RekeyReport
        do {
            report = try StoredTokenKeys.rekey(vault, conninfo: try operatorDatabase(config))
        } catch {
            throw CLIError("rekey failed: \(PermissionDenied.explained(error))")
        }
        var line = "rekeyed \(report.rekeyed) token\(report.rekeyed == 1 ? "" : "s"); \(report.alreadyCurrent) already current"
        if report.remaining > 0 {
            line +=
                "; \(report.remaining) still under an older key (in use, or stored by a process with the old SIWA_TOKEN_KEY_FILE): run rekey again"
        }
        print(line)
        if report.remaining > 0 { throw ExitCode(1) }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Backlog, oldest pending, dead letters, recent events, key set age.")
    @Flag(help: "Print JSON instead of tables.")
    var json = false
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        let report: OutboxAdmin.Report
        do {
            report = try OutboxAdmin.status(
                conninfo: try operatorDatabase(config), inAppDeletion: config.appleAPI != nil, forwarding: config.forwarding != nil)
        } catch {
            throw CLIError("status failed: \(PermissionDenied.explained(error))")
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(OutboxAdmin.render(report), terminator: "")
        }
    }
}

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Decode a notification and say, check by check, whether it verifies and why not.",
        discussion: "TOKEN is a compact JWS or a whole request body; '-' or nothing reads stdin. Exit 0 when it would be accepted, 1 when rejected.")
    @Argument(help: "The token or body, or '-' for stdin.")
    var token: String?
    @Option(help: "Verify against this JWKS file instead of fetching SIWA_JWKS_URL (works offline).")
    var jwks: String?
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        var input = token ?? "-"
        if input == "-" {
            input = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        }
        var keySet: [UInt8]?
        if let jwks {
            guard let data = FileManager.default.contents(atPath: jwks) else { throw CLIError("cannot read --jwks \(jwks)") }
            keySet = Array(data)
        } else {
            Fetcher.initialize()
            let url = config.jwksURL
            let scheme = FetchScheme(url: url) ?? .https
            keySet = (try? Fetcher.perform(FetchRequest(url: url, allowedSchemes: [scheme])))?.body
        }
        let result = Inspector.inspect(input: input, jwks: keySet, audiences: Set(config.audiences))
        print(Inspector.render(result), terminator: "")
        if result.rejection != nil { throw ExitCode(1) }
    }
}
