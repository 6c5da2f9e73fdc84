import SiwaCore
import Testing

@Suite("Semantic versions")
struct SemanticVersionTests {
    @Test("parses releases, pre-releases and build metadata; refuses the rest")
    func parsing() {
        #expect(SemanticVersion("1.2.3") == SemanticVersion(1, 2, 3))
        #expect(SemanticVersion("v0.9.0") == SemanticVersion(0, 9, 0))
        #expect(SemanticVersion("1.0.0-dev")?.preRelease == ["dev"])
        #expect(SemanticVersion("1.0.0-rc.1+abc")?.description == "1.0.0-rc.1+abc")
        for bad in ["", "1", "1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+", "1.2.x", "1.2.3-a..b", " 1.2.3"] {
            #expect(SemanticVersion(bad) == nil, "\(bad)")
        }
    }

    @Test("orders as semver.org: numbers, then a pre-release before its release, build metadata ignored")
    func ordering() throws {
        let ordered = [
            "0.9.0", "0.9.1-dev", "0.9.1", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2",
            "1.0.0-beta.11", "1.0.0-dev", "1.0.0", "1.0.1", "1.10.0", "2.0.0",
        ]
        let versions = ordered.compactMap(SemanticVersion.init)
        #expect(versions.count == ordered.count)
        for (a, b) in zip(versions, versions.dropFirst()) {
            #expect(a < b && !(b < a), "\(a) < \(b)")
        }
        #expect(SemanticVersion("1.0.0+a") == SemanticVersion("1.0.0+b"))
        #expect(!(SemanticVersion(1, 0, 0) < SemanticVersion(1, 0, 0)))
    }
}

@Suite("The schema's release and the compatibility promise")
struct SchemaCompatibilityTests {
    static func recorded(_ v: String, oldest: String, digest: String = "sha256:aa") -> RecordedSchema {
        RecordedSchema(version: SemanticVersion(v)!, oldestSupported: SemanticVersion(oldest)!, digest: digest)
    }

    @Test("no recorded release, an older one, or this one with another schema.sql: apply")
    func apply() {
        let me = SemanticVersion(1, 0, 0)
        #expect(SchemaDecision.decide(recorded: nil, running: me, digest: "sha256:aa") == .apply)
        #expect(SchemaDecision.decide(recorded: Self.recorded("0.9.0", oldest: "0.8.0"), running: me, digest: "sha256:aa") == .apply)
        #expect(SchemaDecision.decide(recorded: Self.recorded("1.0.0-dev", oldest: "0.9.0"), running: me, digest: "sha256:aa") == .apply)
        #expect(
            SchemaDecision.decide(recorded: Self.recorded("1.0.0", oldest: "0.9.0", digest: "sha256:bb"), running: me, digest: "sha256:aa") == .apply)
    }

    @Test("this release's schema: up to date")
    func upToDate() {
        #expect(
            SchemaDecision.decide(recorded: Self.recorded("1.0.0", oldest: "0.9.0"), running: SemanticVersion(1, 0, 0), digest: "sha256:aa")
                == .upToDate)
    }

    @Test("a newer release's schema is never replaced: run on it within the promise, else refuse naming both versions")
    func newer() {
        let newer = Self.recorded("1.1.0", oldest: "1.0.0", digest: "sha256:bb")
        #expect(SchemaDecision.decide(recorded: newer, running: SemanticVersion(1, 0, 0), digest: "sha256:aa") == .runOnNewer(newer))
        #expect(SchemaDecision.decide(recorded: newer, running: SemanticVersion(1, 0, 1), digest: "sha256:aa") == .runOnNewer(newer))
        #expect(SchemaDecision.decide(recorded: newer, running: SemanticVersion(0, 9, 0), digest: "sha256:aa") == .refuse(newer))
        #expect(SchemaDecision.decide(recorded: newer, running: SemanticVersion("1.0.0-dev")!, digest: "sha256:aa") == .refuse(newer))
        let line = SchemaDecision.refusal(newer, running: SemanticVersion(0, 9, 0))
        #expect(line.contains("1.1.0") && line.contains("0.9.0") && line.contains("1.0.0 or later") && !line.contains("\n"))
    }

    @Test("the running releases: two side by side within the promise; more, or one the schema no longer supports, is flagged")
    func mix() {
        let schema = Self.recorded("1.1.0", oldest: "1.0.0")
        #expect(ReleaseMix.problem(running: [], schema: schema) == nil)
        #expect(ReleaseMix.problem(running: ["1.0.0", "1.1.0", "1.1.0"], schema: schema) == nil)
        #expect(ReleaseMix.problem(running: ["0.9.0", "1.1.0"], schema: schema)?.contains("0.9.0") == true)
        #expect(ReleaseMix.problem(running: ["1.0.0", "1.0.1", "1.1.0"], schema: schema)?.contains("3 releases") == true)
        #expect(ReleaseMix.problem(running: ["1.0.0", "1.0.1", "1.1.0"], schema: nil)?.contains("3 releases") == true)
        #expect(ReleaseMix.problem(running: ["banana"], schema: nil) != nil)
    }
}

@Suite("Unknown SIWA_ variables")
struct UnknownVariablesTests {
    static let known = ServerConfiguration.variables

    @Test("a misspelt name is named with its closest known name; known and foreign names are not")
    func typos() {
        let found = UnknownVariables.find(
            environment: ["SIWA_RETENTON_DAYS", "SIWA_DATABASE_URL", "PATH", "HOME", "SIWA_AUDIENCE", "SIWA_ZZZZZZZZZZZZZZZZZ"], known: Self.known)
        #expect(
            found == [
                .init(name: "SIWA_AUDIENCE", suggestion: "SIWA_AUDIENCES"),
                .init(name: "SIWA_RETENTON_DAYS", suggestion: "SIWA_RETENTION_DAYS"),
                .init(name: "SIWA_ZZZZZZZZZZZZZZZZZ", suggestion: nil),
            ])
        let line = UnknownVariables.warning(found)
        #expect(line?.contains("SIWA_RETENTON_DAYS (did you mean SIWA_RETENTION_DAYS?)") == true)
        #expect(line?.contains("\n") == false)
        #expect(UnknownVariables.warning(UnknownVariables.find(environment: ["SIWA_DATA_DIR"], known: Self.known)) == nil)
    }

    @Test("every variable the configuration reads is known (one list: ServerConfiguration.variables)")
    func knownList() {
        #expect(UnknownVariables.find(environment: Self.known, known: Self.known).isEmpty)
        #expect(Self.known.contains("SIWA_APPLY_TO") && Self.known.contains("SIWA_FORWARD_URL"))
    }

    @Test("edit distance: insertions, deletions, substitutions")
    func distance() {
        #expect(UnknownVariables.editDistance("", "abc") == 3)
        #expect(UnknownVariables.editDistance("kitten", "sitting") == 3)
        #expect(UnknownVariables.editDistance("SIWA_RETENTON_DAYS", "SIWA_RETENTION_DAYS") == 1)
        #expect(UnknownVariables.editDistance("same", "same") == 0)
    }
}
