/// The schema's recorded release (table `siwa.schema_release`, written by the migration that
/// applied it) and what a process of another release does with it: the compatibility promise of
/// docs/operations.md "Upgrading" as a decision.
public struct RecordedSchema: Sendable, Equatable {
    /// The release whose migration applied the schema.
    public var version: SemanticVersion
    /// The oldest release whose processes run on it (the release before `version`: a change that
    /// removes what that release reads is split into an expand step and a contract step one
    /// release later, docs/database.md).
    public var oldestSupported: SemanticVersion
    /// `sha256:` and the first 16 hex digits of the `schema.sql` applied.
    public var digest: String

    public init(version: SemanticVersion, oldestSupported: SemanticVersion, digest: String) {
        self.version = version
        self.oldestSupported = oldestSupported
        self.digest = digest
    }
}

/// What a process that may migrate does with the database it finds.
public enum SchemaDecision: Sendable, Equatable {
    /// No recorded release (a release before versions were recorded, or no schema), an older
    /// one, or this release with another `schema.sql` (development builds of one version): apply.
    case apply
    /// This release's schema is there: nothing to do.
    case upToDate
    /// A newer release's schema that still supports this release: run on it, apply nothing.
    case runOnNewer(RecordedSchema)
    /// A newer release's schema that no longer supports this release: stop (`refusal`).
    case refuse(RecordedSchema)

    public static func decide(recorded: RecordedSchema?, running: SemanticVersion, digest: String) -> SchemaDecision {
        guard let recorded, recorded.version >= running else { return .apply }
        if recorded.version == running { return recorded.digest == digest ? .upToDate : .apply }
        return running >= recorded.oldestSupported ? .runOnNewer(recorded) : .refuse(recorded)
    }

    /// The one line a refused start prints: both versions and what to do.
    public static func refusal(_ recorded: RecordedSchema, running: SemanticVersion) -> String {
        "the database's schema is release \(recorded.version)'s, which supports the processes of release \(recorded.oldestSupported) "
            + "and later; this is release \(running): run siwa-notify \(recorded.oldestSupported) or later against it "
            + "(docs/operations.md \"Upgrading\")"
    }

    /// The line a process running on a newer release's schema logs.
    public static func newerNote(_ recorded: RecordedSchema, running: SemanticVersion) -> String {
        "the database's schema is release \(recorded.version)'s, newer than this release \(running): running on it "
            + "without applying this release's schema (within the compatibility promise)"
    }
}

/// The releases whose processes run against one database (their heartbeats), checked against
/// the promise: at most two releases side by side, each supported by the schema.
public enum ReleaseMix {
    /// Why the running releases are a mix wider than the promise; nil when they are within it.
    /// `running` holds each live process's version text (as its heartbeat recorded it).
    public static func problem(running: [String], schema: RecordedSchema?) -> String? {
        let versions = Set(running.compactMap(SemanticVersion.init))
        let unknown = Set(running.filter { SemanticVersion($0) == nil })
        if !unknown.isEmpty { return "processes report versions that are not semantic versions: \(unknown.sorted().joined(separator: ", "))" }
        if let schema {
            let unsupported = versions.filter { $0 < schema.oldestSupported }.sorted()
            if !unsupported.isEmpty {
                return "release \(unsupported.map(\.description).joined(separator: ", ")) runs on release \(schema.version)'s schema, "
                    + "which supports \(schema.oldestSupported) and later: upgrade those processes"
            }
        }
        if versions.count > 2 {
            return "\(versions.count) releases run side by side (\(versions.sorted().map(\.description).joined(separator: ", "))): "
                + "the promise covers two, a release and the one after it; finish the upgrade before the next"
        }
        return nil
    }
}

extension ReleaseMix {
    /// `doctor`'s findings about releases: this binary outside what the schema supports (HIGH:
    /// its processes stop at start), or a mix of running releases wider than the promise (MEDIUM).
    public static func findings(schema: RecordedSchema?, running: SemanticVersion, processes: [String]) -> [DoctorFinding] {
        var found: [DoctorFinding] = []
        if case .refuse(let newer) = SchemaDecision.decide(recorded: schema, running: running, digest: "") {
            found.append(
                DoctorFinding(
                    "release-unsupported", .high, SchemaDecision.refusal(newer, running: running),
                    fix: "deploy release \(newer.oldestSupported) or later"))
        }
        if let problem = problem(running: processes, schema: schema) {
            found.append(
                DoctorFinding(
                    "release-mix", .medium, "the releases running against the database are a mix wider than the promise: \(problem)",
                    fix: "finish the rolling upgrade (docs/operations.md \"Upgrading\"): stop or upgrade the older processes"))
        }
        return found
    }
}
