import ArgumentParser
import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaRuntime

/// `siwa-notify transfer export|import`: an app transfer between teams (Apple TN3159).
struct TransferCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transfer",
        abstract: "Move the app's Sign in with Apple users to another team (export) or from one (import).",
        discussion: """
            Both use the configuration of in-app deletion (SIWA_TEAM_ID, SIWA_KEY_ID, SIWA_PRIVATE_KEY_FILE, \
            SIWA_TOKEN_KEY_FILE, SIWA_APPLE_URL) and SIWA_DATABASE_URL. Both are resumable: rerun after a failure.
            """,
        subcommands: [TransferExport.self, TransferImport.self])
}

/// Flags both transfer commands share.
struct TransferTuning: ParsableArguments {
    @Option(help: "One of SIWA_AUDIENCES (the app being transferred). Default: the only one.")
    var clientID: String?
    @Option(help: "Calls to Apple a second, at most, spread evenly.")
    var rate: Double = 20
    @Option(help: "Calls to Apple in flight at once.")
    var concurrency: Int = 4
    @Option(help: "Attempts of a call Apple answers 429, 5xx or not at all, before the command stops.")
    var appleAttempts: Int = 8

    func validate() throws {
        guard rate > 0, rate.isFinite else { throw ValidationError("--rate must be positive") }
        guard (1...64).contains(concurrency) else { throw ValidationError("--concurrency must be 1-64") }
        guard appleAttempts >= 1 else { throw ValidationError("--apple-attempts must be at least 1") }
    }

    /// Everything a transfer needs, or one clear line.
    func prepare(
        _ options: ConfigurationOptions, command: String
    ) throws -> (
        config: ServerConfiguration, clientID: String, client: AppleMigrationClient, conninfo: String
    ) {
        let config = try options.load(requireAudiences: false)
        guard let api = config.appleAPI else {
            throw CLIError(
                "\(command): needs Apple's REST API configured: SIWA_TEAM_ID, SIWA_KEY_ID, SIWA_PRIVATE_KEY_FILE, SIWA_TOKEN_KEY_FILE")
        }
        guard let conninfo = config.databaseURL else { throw CLIError("\(command): SIWA_DATABASE_URL is required") }
        let chosen: String
        if let clientID {
            if !config.audiences.isEmpty && !config.audiences.containsExactly(clientID) {
                throw CLIError("\(command): --client-id \(clientID) is not one of SIWA_AUDIENCES")
            }
            chosen = clientID
        } else if config.audiences.count == 1 {
            chosen = config.audiences[0]
        } else {
            throw CLIError("\(command): --client-id is required (SIWA_AUDIENCES names \(config.audiences.count) client ids)")
        }
        let quiet = Logger(label: "transfer") { _ in SwiftLogNoOpLogHandler() }
        let deletion: AppleAPICredentials
        do {
            deletion = try AppleAPICredentials.load(api, audiences: config.audiences, logger: quiet)
        } catch {
            throw CLIError("\(command): \(error)")
        }
        return (config, chosen, AppleMigrationClient(client: deletion.client), conninfo)
    }

    func transferOptions(_ label: String) -> AppTransfer.Options {
        var o = AppTransfer.Options()
        o.rate = rate
        o.concurrency = concurrency
        o.retry = AppleRetry(policy: RetryPolicy(maxAttempts: appleAttempts, baseDelay: .seconds(1), maxDelay: .seconds(120)))
        let meter = ProgressMeter(label: label)
        o.progress = { meter.show($0) }
        return o
    }
}

struct TransferExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Sending team: a transfer identifier for every user not deleted; the list for the recipient on stdout.",
        discussion: """
            Obtains an access token (client_credentials, scope user.migration), then one transfer identifier per \
            user of siwa.accounts not deleted (/auth/usermigrationinfo with sub and target), kept in siwa.transfers \
            (sub -> transfer_sub) as each comes. Standard output: one JSON object a line, {"transfer_sub":"..."}, for \
            every user (this run's and earlier runs'): the input of `transfer import`, never a sub or an email. \
            Progress on stderr. Rerun after a failure: identifiers already recorded are not asked again.
            """)

    @Option(help: "The recipient's team id (Apple's `target`).")
    var toTeam: String
    @OptionGroup var tuning: TransferTuning
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let (_, clientID, client, conninfo) = try tuning.prepare(options, command: "transfer export")
        let result: (summary: AppTransfer.Summary, list: [String])
        do {
            result = try AppTransfer.export(
                to: toTeam, clientID: clientID, client: client, conninfo: conninfo,
                options: tuning.transferOptions("transfer export"))
        } catch {
            throw CLIError("transfer export failed: \(error) (rerun to resume)")
        }
        var out = ""
        out.reserveCapacity(result.list.count * 64)
        for transferSub in result.list { out += TransferList.line(transferSub) + "\n" }
        FileHandle.standardOutput.write(Data(out.utf8))
        ProgressMeter.say(
            "transfer export: \(result.list.count) transfer identifiers for \(toTeam) on stdout "
                + "(\(result.summary.progress.done) new this run)" + ProgressMeter.skips(result.summary.skipped))
    }
}

struct TransferImport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Receiving team: exchange transfer identifiers for the users' new sub and email, creating the accounts.",
        discussion: """
            Reads the list `transfer export` wrote (one {"transfer_sub":"..."} a line, or bare identifiers) from FILE \
            or stdin, records each in siwa.transfers, exchanges those not mapped yet at /auth/usermigrationinfo, \
            creates the account and its app account (active, email recorded) and sets transfer_sub -> new_sub and \
            migrated_at, for the app to re-key what it received. With SIWA_FORWARD_URL set, a user-migrated forward \
            per user is queued (sent by a `work` or `serve` process). Idempotent; rerun after a failure. Apple's window is 60 days from the \
            transfer (`siwa-notify status` shows what is left).
            """)

    @Argument(help: "The list from `transfer export`; '-' or nothing reads stdin.")
    var file: String?
    @OptionGroup var tuning: TransferTuning
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let (config, clientID, client, conninfo) = try tuning.prepare(options, command: "transfer import")
        let data: Data
        if let file, file != "-" {
            guard let contents = FileManager.default.contents(atPath: file) else { throw CLIError("transfer import: cannot read \(file)") }
            data = contents
        } else {
            data = FileHandle.standardInput.readDataToEndOfFile()
        }
        let transferSubs: [String]
        do {
            transferSubs = try TransferList.parse(String(decoding: data, as: UTF8.self))
        } catch {
            throw CLIError("transfer import: \(file ?? "stdin") \(error)")
        }
        let summary: AppTransfer.Summary
        do {
            summary = try AppTransfer.import(
                transferSubs, teamID: config.appleAPI?.teamID ?? "", clientID: clientID, client: client, conninfo: conninfo,
                forward: config.forwarding != nil, options: tuning.transferOptions("transfer import"))
        } catch {
            throw CLIError("transfer import failed: \(error) (rerun to resume)")
        }
        let p = summary.progress
        ProgressMeter.say(
            "transfer import: \(p.done) users mapped this run, \(p.alreadyDone) already mapped, "
                + "\(transferSubs.count) identifiers read" + ProgressMeter.skips(summary.skipped)
                + (config.forwarding == nil ? "" : "; \(summary.forwardsQueued) user-migrated forwards queued"))
    }
}

/// Progress on stderr: a bar redrawn in place on a terminal, a line every 5 s otherwise.
final class ProgressMeter: @unchecked Sendable {
    private let label: String
    private let terminal = isatty(2) == 1
    private let start = Deadline.now
    private var lastLine: Deadline?
    private var ended = false
    private let lock = NSLock()

    init(label: String) { self.label = label }

    func show(_ p: AppTransfer.Progress) {
        lock.lock()
        defer { lock.unlock() }
        let now = Deadline.now
        let elapsed = max(now.timeLeft(at: start).inSeconds, 0.001)
        let finished = p.done + p.skipped >= p.total
        if ended { return }
        ended = finished
        let percent = p.total == 0 ? 100 : (p.done + p.skipped) * 100 / p.total
        let rate = Double(p.done) / elapsed
        var text = "\(label): \(p.done + p.skipped)/\(p.total) (\(percent)%), \(Int(rate.rounded()))/s"
        if p.retries > 0 { text += ", \(p.retries) retries" }
        if p.skipped > 0 { text += ", \(p.skipped) refused" }
        if terminal {
            let width = 30
            let filled = p.total == 0 ? width : (p.done + p.skipped) * width / p.total
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            FileHandle.standardError.write(Data("\r[\(bar)] \(text)\u{1B}[K".utf8))
            if finished { FileHandle.standardError.write(Data("\n".utf8)) }
        } else if finished || lastLine.map({ $0.adding(.seconds(5)) <= now }) ?? true {
            lastLine = now
            FileHandle.standardError.write(Data((text + "\n").utf8))
        }
    }

    static func say(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    static func skips(_ skipped: [String: Int]) -> String {
        guard !skipped.isEmpty else { return "" }
        return "; refused by Apple: "
            + skipped.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            + " (users who revoked, or identifiers Apple does not know)"
    }
}
