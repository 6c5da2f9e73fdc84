import Foundation
import Logging
import SiwaCore
import SiwaPostgres

/// An app transfer between teams (README "Transferring the app to another team"; Apple TN3159): `transfer export` on the sending
/// team, `transfer import` on the receiving one. Both resumable: every answer of Apple is
/// committed as it comes, and a rerun asks Apple only for what is not recorded yet.
public enum AppTransfer {
    /// Tuning shared by both commands.
    public struct Options: Sendable {
        /// Calls to Apple a second, at most (spread evenly). Default 20.
        public var rate: Double = 20
        /// Calls in flight at once. Default 4.
        public var concurrency: Int = 4
        /// Backoff for 429, 5xx and network failures (honoring `Retry-After`); after the last
        /// attempt the command stops (rerun it to resume). Default: 8 attempts, 1 s to 2 min.
        public var retry = AppleRetry()
        /// Progress, about once a second and at the end.
        public var progress: (@Sendable (Progress) -> Void)?

        public init() {}
    }

    public struct Progress: Sendable, Equatable {
        /// Items this run had to ask Apple about.
        public var total: Int
        public var done: Int
        /// Refused by Apple for that user alone (`invalid_request`), not recorded.
        public var skipped: Int
        public var retries: Int
        /// Items already recorded by an earlier run (not asked again).
        public var alreadyDone: Int
    }

    /// How a run ended.
    public struct Summary: Sendable, Equatable {
        public var progress: Progress
        /// Apple's refusals of single items by reason (`invalid_request`: 3).
        public var skipped: [String: Int]
        /// `transfer import` with forwarding on: `user-migrated` forwards queued this run.
        public var forwardsQueued = 0
    }

    /// Why a transfer stopped; `description` is one line naming the cause and what to do.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Sending team: a transfer identifier for every user not deleted (`siwa.accounts`) without
    /// one for `target` yet, recorded in `siwa.transfers`; returns the run's summary and the list
    /// for the recipient (every identifier recorded for `target`, this run's and earlier ones).
    public static func export(
        to target: String, clientID: String, client: AppleMigrationClient, conninfo: String, options: Options = Options()
    ) throws(Failure) -> (summary: Summary, list: [String]) {
        let connection = try database(conninfo, "siwa-notify transfer export")
        var subs: [String] = []
        do {
            var after = ""
            while true {
                let page = try connection.rows(TransferStatements.exportCandidates, (target, after, 10_000))
                subs += page
                guard page.count == 10_000, let last = page.last else { break }
                after = last
            }
        } catch {
            throw Failure(description: "database: \(error)")
        }
        let summary = try run(
            subs, options: options,
            call: { sub in outcome(client.transferSub(sub: sub, target: target, clientID: clientID)) },
            commit: { batch throws(PostgresError) in
                try connection.affected(
                    TransferStatements.recordExports, (target, clientID, batch.map(\.0), batch.map(\.1)))
            })
        do {
            return (summary, try connection.rows(TransferStatements.exportList, target))
        } catch {
            throw Failure(description: "database: \(error)")
        }
    }

    /// Receiving team: records every identifier of `transferSubs`, then exchanges those not
    /// mapped yet for the user's `sub` and email in this team, creating the accounts and app
    /// accounts (`aud` = `clientID`); with `forward` (forwarding is on), a `user-migrated`
    /// forward per user mapped, queued in the same statement.
    public static func `import`(
        _ transferSubs: [String], teamID: String, clientID: String, client: AppleMigrationClient, conninfo: String,
        forward: Bool = false, options: Options = Options()
    ) throws(Failure) -> Summary {
        let connection = try database(conninfo, "siwa-notify transfer import")
        var todo: [String] = []
        do {
            for chunk in stride(from: 0, to: transferSubs.count, by: 10_000) {
                let part = Array(transferSubs[chunk..<min(chunk + 10_000, transferSubs.count)])
                try connection.affected(TransferStatements.recordReceived, (teamID, clientID, part))
                todo += try connection.rows(TransferStatements.unmapped, part)
            }
        } catch {
            throw Failure(description: "database: \(error)")
        }
        var forwards = 0
        var summary = try run(
            todo, options: options,
            call: { transferSub in outcome(client.migratedUser(transferSub: transferSub, clientID: clientID)) },
            commit: { batch throws(PostgresError) in
                let users = batch.map {
                    TransferStatements.Imported(transferSub: $0.0, newSub: $0.1.sub, email: $0.1.email, isPrivateEmail: $0.1.isPrivateEmail)
                }
                forwards += try connection.affected(
                    TransferStatements.recordImported, .init(users: users, clientID: clientID, forward: forward))
            })
        summary.progress.alreadyDone = transferSubs.count - todo.count
        summary.forwardsQueued = forwards
        return summary
    }

    private static func database(_ conninfo: String, _ name: String) throws(Failure) -> PostgresConnection {
        do {
            try Migrator.migrate(conninfo: conninfo)
            return try PostgresConnection(conninfo: conninfo, applicationName: name)
        } catch {
            throw Failure(description: "database: \(error) \(error.serverMessage)")
        }
    }

    private static func run<Output: Sendable>(
        _ items: [String], options: Options, call: @escaping @Sendable (String) -> CallPipeline<String, Output>.Outcome,
        commit: ([(String, Output)]) throws(PostgresError) -> Void
    ) throws(Failure) -> Summary {
        let pipeline = CallPipeline<String, Output>(rate: options.rate, concurrency: options.concurrency, retry: options.retry)
        let report = options.progress
        func progress(_ p: CallPipeline<String, Output>.Progress) -> Progress {
            Progress(total: p.total, done: p.done, skipped: p.skipped, retries: p.retries, alreadyDone: 0)
        }
        do {
            let (final, reasons) = try pipeline.run(
                items, call: call, commit: { batch in try commit(batch) }, report: { report?(progress($0)) })
            return Summary(progress: progress(final), skipped: reasons)
        } catch let error as PipelineStopped {
            throw Failure(description: error.description)
        } catch {
            throw Failure(description: "database: \(error)")
        }
    }

    /// Apple's answer for one item, for the pipeline: `invalid_request` concerns that user alone
    /// (a user who revoked, an identifier Apple does not know); `invalid_client` and other
    /// refusals stop the run; 429, 5xx and network failures are retried.
    static func outcome<T: Sendable>(_ result: AppleCallResult<T>) -> CallPipeline<String, T>.Outcome {
        switch result {
        case .success(let value):
            return .done(value)
        case .invalidGrant:
            return .skipped("invalid_grant")
        case .invalidClient:
            return .fatal("Apple refused our client authentication (invalid_client): check SIWA_TEAM_ID, SIWA_KEY_ID, the .p8 key and the client id")
        case .rejected(let failure) where failure.detail == "invalid_request":
            return .skipped("invalid_request")
        case .rejected(let failure):
            return .fatal("Apple refused the call: \(failure)")
        case .transient(let failure):
            return .transient(reason: failure.description, retryAfter: failure.retryAfter)
        }
    }
}
