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

    /// The unknown `SIWA_` names of a process environment, against the variables this release's
    /// configuration reads (`ServerConfiguration.variables`: the one list, so a variable added
    /// there is known here).
    public static func unknown(in environment: [String: String]) -> [Finding] {
        find(environment: environment.keys, known: ServerConfiguration.variables)
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
