/// `SIWA_*` variables a release does not know (a typo, or a name from another release), each
/// with the known name closest to it: a misspelt setting is named at start, not silently ignored.
public enum UnknownVariables {
    public struct Finding: Sendable, Equatable {
        public var name: String
        /// The closest known name, when one is close enough to be a likely typo.
        public var suggestion: String?

        public init(name: String, suggestion: String?) {
            self.name = name
            self.suggestion = suggestion
        }
    }

    /// The `SIWA_` names in `environment` that are not in `known`, sorted, each with its closest
    /// known name (within `max(2, count / 3)` edits: further than that it is a guess, not a typo).
    public static func find(environment: some Sequence<String>, known: some Collection<String>) -> [Finding] {
        let knownSet = Set(known)
        return Set(environment.filter { $0.hasPrefix("SIWA_") && !knownSet.contains($0) }).sorted().map { name in
            let best = known.map { (candidate: $0, distance: editDistance(name, $0)) }
                .min { ($0.distance, $0.candidate) < ($1.distance, $1.candidate) }
            let limit = max(2, name.utf8.count / 3)
            return Finding(name: name, suggestion: best.flatMap { $0.distance <= limit ? $0.candidate : nil })
        }
    }

    /// Names the project's own scripts and tests read, never the server: known, so that a test
    /// run or a development shell is not warned about them. One string, not a list of literals:
    /// they are not configuration, and scripts/check-docs counts each quoted name in Sources/ as
    /// a variable docs/configuration.md must list.
    public static let tooling =
        ("SIWA_TEST_DATABASE_URL SIWA_TEST_DATABASE_LOG SIWA_REQUIRE_DATABASE SIWA_BROWSER_TEST SIWA_FUZZ_SECONDS SIWA_FUZZ_TARGET SIWA_IMAGE "
        + "SIWA_IMAGE_BUILD SIWA_IMAGE_MAX_BYTES SIWA_IMAGE_SUITE SIWA_OPENAPI_RECORD SIWA_SHUTDOWN_CYCLES SIWA_TEST_IMAGE")
        .split(separator: " ").map(String.init)

    /// The unknown `SIWA_` names of a process environment, against the variables this release's
    /// configuration reads (`ServerConfiguration.variables`: the one list, so a variable added
    /// there is known here) and `tooling`.
    public static func unknown(in environment: [String: String]) -> [Finding] {
        find(environment: environment.keys, known: ServerConfiguration.variables + tooling)
    }

    /// `doctor`'s finding for them (nil without any): MEDIUM, as a misspelt setting silently
    /// keeps its default (`SIWA_RETENTON_DAYS=7` keeps 30 days).
    public static func finding(_ findings: [Finding]) -> DoctorFinding? {
        guard let line = warning(findings) else { return nil }
        return DoctorFinding(
            "unknown-variable", .medium, line,
            fix: "rename each to the variable meant, or remove it (a name from a newer release does nothing in this one)")
    }

    /// One line naming every finding, or nil without any.
    public static func warning(_ findings: [Finding]) -> String? {
        guard !findings.isEmpty else { return nil }
        let parts = findings.map { f in f.name + (f.suggestion.map { " (did you mean \($0)?)" } ?? " (no known name is close)") }
        return "unknown configuration variable\(findings.count == 1 ? "" : "s"), ignored: " + parts.joined(separator: ", ")
            + " (docs/configuration.md lists the variables this release reads)"
    }

    /// Levenshtein distance over UTF-8 bytes (the names are ASCII): insertions, deletions and
    /// substitutions, one each.
    public static func editDistance(_ a: String, _ b: String) -> Int {
        let x = Array(a.utf8), y = Array(b.utf8)
        if x.isEmpty { return y.count }
        if y.isEmpty { return x.count }
        var previous = Array(0...y.count)
        var current = [Int](repeating: 0, count: y.count + 1)
        for i in 1...x.count {
            current[0] = i
            for j in 1...y.count {
                let substitution = previous[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            swap(&previous, &current)
        }
        return previous[y.count]
    }
}
