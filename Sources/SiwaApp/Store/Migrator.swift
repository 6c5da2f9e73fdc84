import Foundation
import SiwaBuildInfo
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime

/// Applies the embedded copy of `schema.sql` (idempotent; serialized by an advisory lock), and
/// records which release applied it (`siwa.schema_release`, in the schema's own transaction).
///
/// It never applies this release's schema over a newer release's (docs/operations.md
/// "Upgrading"): on a newer schema that still supports this release it applies nothing and the
/// process runs; on one that does not, the process stops (`Outcome.refused`).
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

    /// `sha256:<first 16 hex digits of schema.sql's SHA-256>`.
    public static var digest: String { "sha256:" + SHA256.hexDigest(schemaSQL).prefix(16) }

    /// This binary's release.
    public static var release: SemanticVersion {
        guard let version = SemanticVersion(BuildInfo.version) else { fatalError("BuildInfo.version is not a semantic version") }
        return version
    }

    /// What a migration by this binary records.
    public static var recorded: RecordedSchema {
        guard let oldest = SemanticVersion(BuildInfo.previousRelease) else {
            fatalError("BuildInfo.previousRelease is not a semantic version")
        }
        return RecordedSchema(version: release, oldestSupported: oldest, digest: digest)
    }

    /// `<release> (sha256:…)`: what the logs and `migrate` print.
    public static var versionMarker: String { "\(release) (\(digest))" }

    /// The comment on schema `siwa` that release 0.9.0 (the first release, which recorded only
    /// a hash there) compares with its own and re-applies its schema when it differs. Every
    /// later migration writes 0.9.0's own value, so a 0.9.0 process started against a newer
    /// schema (a rollback, a node restarting an old pod) finds it "up to date" and applies
    /// nothing. Frozen: it is 0.9.0's `schema.sql` digest, never this release's.
    public static let legacyMarker = "siwa-notify schema sha256:f9f0244edd7a2edb"

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
        /// A newer release's schema that supports this release: nothing ran; the process runs on it.
        case newer(RecordedSchema)
        /// A newer release's schema that no longer supports this release: nothing ran; the
        /// process must stop (`SchemaDecision.refusal` says why and what to do).
        case refused(RecordedSchema)
    }

    /// The release the database records (nil when none: no schema, or one a release before
    /// 1.0 applied).
    public static func recordedRelease(conninfo: String) throws(PostgresError) -> RecordedSchema? {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        return try recordedRelease(on: connection)
    }

    static func recordedRelease(on connection: PostgresConnection) throws(PostgresError) -> RecordedSchema? {
        guard try connection.row(ReleaseStatements.recordedExists) == true else { return nil }
        return try connection.row(ReleaseStatements.recorded)
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
        var found = try recordedRelease(on: connection)
        switch SchemaDecision.decide(recorded: found, running: release, digest: digest) {
        case .upToDate where !force: return .upToDate
        case .runOnNewer(let newer): return .newer(newer)
        case .refuse(let newer): return .refused(newer)
        case .apply, .upToDate: break
        }
        guard try connection.row(MigrationStatements.mayMigrate) == true else {
            return .notAllowed(role: try connection.row(MigrationStatements.currentRole) ?? "?")
        }
        let lockTimeout = Int((options.lockTimeout.inSeconds * 1000).rounded())
        guard var sql = MigrationStatements.applying(schemaSQL, lockTimeoutMilliseconds: lockTimeout, recording: recording(expected: found))
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
                // Another release migrated between the read and the lock: decide again on what it recorded.
                if error.sqlState == ReleaseStatements.changedState {
                    found = try recordedRelease(on: connection)
                    switch SchemaDecision.decide(recorded: found, running: release, digest: digest) {
                    case .upToDate where !force: return .upToDate
                    case .runOnNewer(let newer): return .newer(newer)
                    case .refuse(let newer): return .refused(newer)
                    case .apply, .upToDate:
                        sql = MigrationStatements.applying(schemaSQL, lockTimeoutMilliseconds: lockTimeout, recording: recording(expected: found))!
                        continue
                    }
                }
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

    /// What this migration appends before its `COMMIT;`, given the release it read (`expected`).
    static func recording(expected: RecordedSchema?) -> [String] {
        ReleaseStatements.recording(recorded, expected: expected?.version, legacyMarker: legacyMarker)
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
