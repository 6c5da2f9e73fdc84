/// A semantic version (semver.org 2.0.0): `MAJOR.MINOR.PATCH`, an optional pre-release
/// (`-dev`, `-rc.1`) that orders before the release, and optional build metadata (`+…`) that
/// takes no part in the order. Releases, the schema's recorded version and the processes'
/// heartbeats are compared with it.
public struct SemanticVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var major: Int
    public var minor: Int
    public var patch: Int
    /// Dot-separated pre-release identifiers (empty for a release).
    public var preRelease: [String]
    public var build: String?

    public init(_ major: Int, _ minor: Int, _ patch: Int, preRelease: [String] = [], build: String? = nil) {
        self.major = major
        self.minor = minor
        self.patch = patch
        self.preRelease = preRelease
        self.build = build
    }

    /// Parses `1.2.3`, `1.2.3-dev`, `1.2.3-rc.1+abc`; a leading `v` (a tag's spelling) is accepted.
    /// Nil for anything else (leading zeros, missing parts, empty identifiers).
    public init?(_ text: String) {
        var rest = Substring(text)
        if rest.first == "v" { rest = rest.dropFirst() }
        var build: String?
        if let plus = rest.firstIndex(of: "+") {
            let metadata = rest[rest.index(after: plus)...]
            guard !metadata.isEmpty, metadata.split(separator: ".", omittingEmptySubsequences: false).allSatisfy(Self.isIdentifier)
            else { return nil }
            build = String(metadata)
            rest = rest[..<plus]
        }
        var preRelease: [String] = []
        if let dash = rest.firstIndex(of: "-") {
            let identifiers = rest[rest.index(after: dash)...].split(separator: ".", omittingEmptySubsequences: false)
            guard identifiers.allSatisfy(Self.isIdentifier),
                identifiers.allSatisfy({ !(Self.isNumeric($0) && $0.count > 1 && $0.first == "0") })
            else { return nil }
            preRelease = identifiers.map(String.init)
            rest = rest[..<dash]
        }
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ Self.isNumeric($0) && ($0.count == 1 || $0.first != "0") && $0.count <= 9 }),
            let major = Int(parts[0]), let minor = Int(parts[1]), let patch = Int(parts[2])
        else { return nil }
        self.init(major, minor, patch, preRelease: preRelease, build: build)
    }

    public var description: String {
        "\(major).\(minor).\(patch)" + (preRelease.isEmpty ? "" : "-" + preRelease.joined(separator: "."))
            + (build.map { "+" + $0 } ?? "")
    }

    /// True for a release (no pre-release part).
    public var isRelease: Bool { preRelease.isEmpty }

    /// Semver precedence: build metadata ignored.
    public static func == (a: SemanticVersion, b: SemanticVersion) -> Bool {
        a.major == b.major && a.minor == b.minor && a.patch == b.patch && a.preRelease == b.preRelease
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(major)
        hasher.combine(minor)
        hasher.combine(patch)
        hasher.combine(preRelease)
    }

    public static func < (a: SemanticVersion, b: SemanticVersion) -> Bool {
        if (a.major, a.minor, a.patch) != (b.major, b.minor, b.patch) { return (a.major, a.minor, a.patch) < (b.major, b.minor, b.patch) }
        // A pre-release orders before its release; two releases of one number are equal.
        if a.preRelease.isEmpty || b.preRelease.isEmpty { return !a.preRelease.isEmpty && b.preRelease.isEmpty }
        for (x, y) in zip(a.preRelease, b.preRelease) where x != y {
            switch (Int(x), Int(y)) {
            case (let m?, let n?) where isNumeric(Substring(x)) && isNumeric(Substring(y)): return m < n
            case (_?, nil) where isNumeric(Substring(x)): return true  // numeric identifiers order first
            case (nil, _?) where isNumeric(Substring(y)): return false
            default: return x < y
            }
        }
        return a.preRelease.count < b.preRelease.count
    }

    private static func isIdentifier(_ s: Substring) -> Bool {
        !s.isEmpty && s.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 }
    }

    private static func isNumeric(_ s: Substring) -> Bool { !s.isEmpty && s.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }
}
