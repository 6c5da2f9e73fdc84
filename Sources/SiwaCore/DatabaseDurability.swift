/// What PostgreSQL promises about a commit siwa-notify answered `200` for (README "High availability: what a failover keeps"): the
/// answer is sent after the commit, and survives a failover only when the commit waited for a
/// synchronous standby. Read from `synchronous_commit`, `synchronous_standby_names` and
/// `pg_stat_replication` (whose states only a member of `pg_monitor`/`pg_read_all_stats` sees).
public struct DatabaseDurability: Sendable, Codable, Equatable {
    /// The session's `synchronous_commit` (`on`, `remote_apply`, `remote_write`, `local`, `off`).
    public var synchronousCommit: String
    /// The server's `synchronous_standby_names` (empty: no commit waits for a standby).
    public var synchronousStandbyNames: String
    /// Streaming standbys a commit waits for (`sync_state` `sync` or `quorum`); nil when the role
    /// may not read `pg_stat_replication`'s states.
    public var synchronousStandbys: Int?
    /// Streaming standbys a commit does not wait for (`async`, `potential`); nil when unreadable.
    public var asynchronousStandbys: Int?
    /// The database role that read this (named in the grant to ask for).
    public var role: String

    public init(
        synchronousCommit: String, synchronousStandbyNames: String, synchronousStandbys: Int?, asynchronousStandbys: Int?,
        role: String
    ) {
        self.synchronousCommit = synchronousCommit
        self.synchronousStandbyNames = synchronousStandbyNames
        self.synchronousStandbys = synchronousStandbys
        self.asynchronousStandbys = asynchronousStandbys
        self.role = role
    }

    /// What a commit answered `200` survives.
    public enum Promise: String, Sendable, Codable {
        /// It waited for a synchronous standby: it survives a failover to that standby.
        case standby
        /// No standby streams: it is as durable as this server's storage.
        case thisServer = "this_server"
        /// Standbys stream asynchronously: a failover may lose it.
        case asynchronous
        /// Commits wait for a synchronous standby that is not attached: they hang until one is.
        case waitingForStandby = "waiting_for_standby"
        /// `synchronous_commit=off`: even a crash of this server may lose it.
        case notFlushed = "not_flushed"
        /// The role may not read the replication states.
        case unknown
    }

    /// Values of `synchronous_commit` under which a commit waits for the synchronous standbys.
    static let waitingSettings: Set<String> = ["on", "remote_apply", "remote_write"]

    public var promise: Promise {
        if synchronousCommit == "off" { return .notFlushed }
        let names = synchronousStandbyNames.contains { $0 != " " }
        let waits = names && Self.waitingSettings.contains(synchronousCommit)
        guard let sync = synchronousStandbys, let async = asynchronousStandbys else { return .unknown }
        if waits && sync > 0 { return .standby }
        if waits { return .waitingForStandby }
        return sync + async > 0 ? .asynchronous : .thisServer
    }

    /// `siwa_database_synchronous_standbys`: synchronous standbys a commit waits for; 0 when
    /// commits do not wait (`synchronous_commit` local or off); -1 unknown.
    public var metricValue: Double {
        switch promise {
        case .unknown: return -1
        case .standby: return Double(synchronousStandbys ?? 0)
        default: return 0
        }
    }

    /// One line for logs, `status` and the console.
    public var summary: String {
        let setting = "synchronous_commit=\(synchronousCommit)"
        let async = asynchronousStandbys ?? 0
        switch promise {
        case .standby:
            let n = synchronousStandbys ?? 0
            return "\(setting), \(n) synchronous standby\(n == 1 ? "" : "s"): a commit answered 200 survives a failover to it"
        case .thisServer:
            return "\(setting), no standby streams: a commit is as durable as this server's storage"
        case .asynchronous:
            return "\(setting), \(async) standby\(async == 1 ? "" : "s") streaming asynchronously: a failover may lose events answered 200"
                + " (set synchronous_standby_names)"
        case .waitingForStandby:
            return "\(setting), synchronous_standby_names is set but no synchronous standby is attached: commits wait until one is"
        case .notFlushed:
            return "\(setting): a crash may lose events answered 200 (set synchronous_commit=on)"
        case .unknown:
            return "\(setting), synchronous standbys unknown — grant pg_read_all_stats to \(role)"
        }
    }

    /// A warning to log at start: set when a commit answered `200` may be lost or may hang.
    public var warning: String? {
        switch promise {
        case .asynchronous, .notFlushed, .waitingForStandby: return summary
        case .standby, .thisServer, .unknown: return nil
        }
    }
}
