import Foundation
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime

/// Applies the embedded copy of `schema.sql` (idempotent; serialized by an advisory lock), and
/// records which version it applied (`COMMENT ON SCHEMA siwa`, in the schema's own transaction).
///
/// A migration never stalls the receivers for long: it does nothing (no lock at all) when the
/// database already carries this version; it checks that the role may change the schema before
/// it takes any lock; and its DDL runs with `lock_timeout` (`Options.lockTimeout`): an attempt that
/// waits longer for a lock (an open dashboard transaction on a view holds `siwa.events`, and the
/// receivers' inserts queue behind a waiting `ACCESS EXCLUSIVE`) rolls back, lets them through,
/// and is retried with backoff for `Options.retryFor`.
public enum Migrator {
    /// The schema this binary carries.
    public static var schemaSQL: String { String(decoding: PackageResources.schema_sql, as: UTF8.self) }

    /// `siwa-notify schema sha256:<first 16 hex digits of schema.sql's SHA-256>`.
    public static var versionMarker: String { "siwa-notify schema sha256:" + SHA256.hexDigest(schemaSQL).prefix(16) }

    public struct Options: Sendable {
        /// How long one attempt waits for any one lock (`lock_timeout`). Default 2 s: below
        /// `SIWA_COMMIT_TIMEOUT`'s default (5 s), so notifications queued behind the migration's
        /// lock request are still committed and answered 200.
        public var lockTimeout: Duration = .seconds(2)
        /// How long failed attempts are retried (zero: one attempt). Default 60 s.
        public var retryFor: Duration = .seconds(60)
        /// The wait before the first retry; doubled after each, up to `maxBackoff`. Default 1 s.
        public var backoff: Duration = .seconds(1)
        public var maxBackoff: Duration = .seconds(15)
        public init() {}
    }

    /// What a migration did.
    public enum Outcome: Sendable, Equatable {
        /// The database already carried this version: nothing ran, no lock was taken.
        case upToDate
        /// The schema was applied (and this version recorded).
        case applied
        /// The role may not change schema `siwa` (checked before any lock); nothing ran.
        case notAllowed(role: String)
    }

    /// A failed attempt about to be retried.
    public struct Retry: Sendable, CustomStringConvertible {
        /// The attempt that failed (1 for the first).
        public var attempt: Int
        /// The wait until the next one.
        public var delay: Duration
        public var error: PostgresError

        public var description: String {
            let why = error.sqlState == "55P03" ? "a lock was not granted within the lock timeout" : "\(error) \(error.serverMessage)"
            return "schema migration attempt \(attempt) rolled back (\(why): another session holds siwa's tables, "
                + "e.g. an open transaction on a dashboard view); retrying in \(String(format: "%.1f", delay.inSeconds)) s"
        }
    }

    /// Applies the schema unless this version is already there (`force`: apply anyway).
    /// `onRetry` is told about every attempt that failed and will be retried; the waits between
    /// attempts run on `clock`.
    @discardableResult
    public static func migrate(
        conninfo: String, force: Bool = false, options: Options = Options(), clock: any MonotonicClock = SystemClock.shared,
        onRetry: (Retry) -> Void = { _ in }
    ) throws(PostgresError) -> Outcome {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        let marker = versionMarker
        if !force, try connection.row(OperatorStatements.schemaVersion) == .some(marker) { return .upToDate }
        guard try connection.row(MigrationStatements.mayMigrate) == true else {
            return .notAllowed(role: try connection.row(MigrationStatements.currentRole) ?? "?")
        }
        guard
            let sql = MigrationStatements.applying(
                schemaSQL, lockTimeoutMilliseconds: Int((options.lockTimeout.inSeconds * 1000).rounded()), marker: marker)
        else {
            throw PostgresError(code: .queryFailed, serverMessage: "schema.sql must open with a line BEGIN; and end with a line COMMIT;")
        }
        let deadline = clock.now.adding(options.retryFor)
        let pause = WakeSignal(clock: clock)
        var delay = options.backoff
        var attempt = 1
        while true {
            do {
                try connection.execute(sql)
                return .applied
            } catch {
                if connection.isHealthy { _ = try? connection.execute(MigrationStatements.rollback) }
                guard let state = error.sqlState, MigrationStatements.retryableStates.contains(state),
                    clock.now.adding(delay) < deadline
                else { throw error }
                onRetry(Retry(attempt: attempt, delay: delay, error: error))
                pause.wait(for: delay)
                delay = min(delay * 2, options.maxBackoff)
                attempt += 1
            }
        }
    }

    /// The one line `migrate` (and `serve`'s own migration) prints when schema `public` is
    /// writable by every role; nil when it is not, or when that cannot be read.
    public static func publicSchemaWarning(conninfo: String) -> String? {
        guard let connection = try? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate"),
            (try? connection.row(MigrationStatements.publicWritable)) == true
        else { return nil }
        return "warning: schema public is writable by every role: a login can plant functions there that others run; "
            + "fix: REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    }

    /// True when `siwa.events` exists (the schema was applied before).
    public static func schemaExists(conninfo: String) -> Bool {
        guard let connection = try? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate") else { return false }
        return (try? connection.row(OperatorStatements.schemaExists)) == true
    }
}
