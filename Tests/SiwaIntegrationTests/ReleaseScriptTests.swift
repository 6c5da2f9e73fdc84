import Foundation
import SiwaBuildInfo
import Testing

/// `scripts/release VERSION` in a repository of its own made from the working tree's files: it refuses a dirty tree and a red test run without
/// changing anything; a green one stamps the version, adds the release's schema fixture, tags
/// the release commit, records that commit in the changelog and opens the next `-dev` version.
@Suite("scripts/release", .serialized)
struct ReleaseScriptTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The release this tree would cut (its `-dev` version without the suffix), the one after it
    /// that the script opens, and the last one cut: read from the tree, so the test holds on
    /// every development version, not one release.
    static let cut = String(BuildInfo.version.split(separator: "-")[0])
    static let nextDev: String = {
        let parts = cut.split(separator: ".").map { Int($0)! }
        return "\(parts[0]).\(parts[1]).\(parts[2] + 1)-dev"
    }()
    static let previous = BuildInfo.previousRelease

    @discardableResult
    static func sh(_ script: String, in dir: String, environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", script]
        process.currentDirectoryURL = URL(fileURLWithPath: dir)
        process.environment = ProcessInfo.processInfo.environment.merging(
            [
                "GIT_AUTHOR_NAME": "release test", "GIT_AUTHOR_EMAIL": "release@test.invalid",
                "GIT_COMMITTER_NAME": "release test", "GIT_COMMITTER_EMAIL": "release@test.invalid",
            ].merging(environment) { _, new in new }
        ) { _, new in new }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// A repository of its own holding what the script reads and writes (the script, the
    /// changelog, the version file, schema.sql and the fixtures), one commit: no clone of this
    /// repository needed (a source archive or a scratch copy has no `.git`).
    /// Its changelog's "## [Unreleased]" holds one entry when `entry`, none otherwise (right
    /// after a release the tree's own lists nothing).
    static func clone(entry: Bool = true) throws -> String {
        let dir = NSTemporaryDirectory() + "siwa-release-\(UInt32.random(in: 0...UInt32.max))"
        let files = [
            "scripts/release", "CHANGELOG.md", "Sources/SiwaBuildInfo/BuildInfo.swift", "schema.sql",
            "Tests/SiwaIntegrationTests/Fixtures/schemas",
        ]
        let copy = files.map { "mkdir -p \"$(dirname '\(dir)/\($0)')\" && cp -R '\(root.path)/\($0)' '\(dir)/\($0)'" }
            .joined(separator: " && ")
        #expect(try sh(copy, in: NSTemporaryDirectory()).status == 0)
        let changelog = try String(contentsOfFile: dir + "/CHANGELOG.md", encoding: .utf8)
        let heading = try #require(changelog.range(of: "## [Unreleased]\n"))
        let next = try #require(changelog.range(of: "\n## [", range: heading.upperBound..<changelog.endIndex))
        let unreleased = entry ? "\n### Fixed\n- An entry of the release test.\n" : "\n"
        try changelog.replacingCharacters(in: heading.upperBound..<next.lowerBound, with: unreleased)
            .write(toFile: dir + "/CHANGELOG.md", atomically: true, encoding: .utf8)
        let made = try sh("git init -q && git add -A && git commit -qm 'the release files'", in: dir)
        #expect(made.status == 0, "\(made.output)")
        return dir
    }

    @Test("a schema changed since the last release makes the next one a minor release at least (a patch never changes it)")
    func schemaChangeIsNotAPatch() throws {
        let fixture = Self.root.appendingPathComponent("Tests/SiwaIntegrationTests/Fixtures/schemas/schema-v\(Self.previous).sql")
        let released = try String(contentsOf: fixture, encoding: .utf8)
        let current = try String(contentsOf: Self.root.appendingPathComponent("schema.sql"), encoding: .utf8)
        let minor = { (v: String) in v.split(separator: ".").prefix(2).map { Int($0)! } }
        if current != released {
            #expect(
                minor(Self.cut).lexicographicallyPrecedes(minor(Self.previous)) == false && minor(Self.cut) != minor(Self.previous),
                "schema.sql changed since \(Self.previous): BuildInfo.version \(BuildInfo.version) must open a minor (or major) release")
        }
    }

    @Test("a dirty tree or a red test run: refused, nothing changed, no tag")
    func refusals() throws {
        let dir = try Self.clone()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let head = try Self.sh("git rev-parse HEAD", in: dir).output
        try "// edited\n".write(toFile: dir + "/scratch.swift", atomically: true, encoding: .utf8)
        let dirty = try Self.sh("scripts/release \(Self.cut) --no-image", in: dir, environment: ["RELEASE_TEST_COMMAND": "true"])
        #expect(dirty.status != 0 && dirty.output.contains("refusing: the working tree"), "\(dirty.output)")
        try FileManager.default.removeItem(atPath: dir + "/scratch.swift")

        let red = try Self.sh("scripts/release \(Self.cut) --no-image", in: dir, environment: ["RELEASE_TEST_COMMAND": "false"])
        #expect(red.status != 0 && red.output.contains("refusing: the test run failed"), "\(red.output)")
        let older = try Self.sh("scripts/release \(Self.previous) --no-image", in: dir, environment: ["RELEASE_TEST_COMMAND": "true"])
        #expect(older.status != 0 && older.output.contains("not above the last release"), "\(older.output)")

        #expect(try Self.sh("git rev-parse HEAD", in: dir).output == head)
        #expect(try Self.sh("git status --porcelain", in: dir).output.isEmpty)
        #expect(try Self.sh("git tag -l v\(Self.cut)", in: dir).output.isEmpty)
    }

    @Test("a changelog whose Unreleased section lists nothing: refused, nothing changed")
    func emptyChangelog() throws {
        let dir = try Self.clone(entry: false)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let head = try Self.sh("git rev-parse HEAD", in: dir).output
        let empty = try Self.sh("scripts/release \(Self.cut) --no-image", in: dir, environment: ["RELEASE_TEST_COMMAND": "true"])
        #expect(empty.status != 0 && empty.output.contains("lists nothing"), "\(empty.output)")
        #expect(try Self.sh("git rev-parse HEAD", in: dir).output == head)
        #expect(try Self.sh("git status --porcelain", in: dir).output.isEmpty)
        #expect(try Self.sh("git tag -l v\(Self.cut)", in: dir).output.isEmpty)
    }

    @Test("a green run: version stamped, schema fixture added, tag on the release commit, its hash in the changelog, next -dev opened")
    func release() throws {
        let dir = try Self.clone()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (cut, previous) = (Self.cut, Self.previous)
        let run = try Self.sh("scripts/release \(cut) --no-image", in: dir, environment: ["RELEASE_TEST_COMMAND": "true"])
        #expect(run.status == 0, "\(run.output)")
        let tagged = try Self.sh("git rev-parse 'v\(cut)^{commit}'", in: dir).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let info = try Self.sh("git show v\(cut):Sources/SiwaBuildInfo/BuildInfo.swift", in: dir).output
        #expect(info.contains("static let version = \"\(cut)\"") && info.contains("static let previousRelease = \"\(previous)\""))
        #expect(
            try Self.sh("git show v\(cut):Tests/SiwaIntegrationTests/Fixtures/schemas/schema-v\(cut).sql", in: dir).output
                == (try String(contentsOfFile: dir + "/schema.sql", encoding: .utf8)))
        let changelog = try String(contentsOfFile: dir + "/CHANGELOG.md", encoding: .utf8)
        #expect(changelog.contains("## [Unreleased]\n\n## [\(cut)] - "), "\(changelog.prefix(3000))")
        #expect(changelog.contains("\n\nCommit: \(tagged)\n"))
        #expect(changelog.contains("## [0.9.0] - 2026-11-28\n\nCommit: bef70d097339a760a48e93cbb201255eb2fe9f6c\n"))
        let next = try String(contentsOfFile: dir + "/Sources/SiwaBuildInfo/BuildInfo.swift", encoding: .utf8)
        #expect(next.contains("static let version = \"\(Self.nextDev)\"") && next.contains("static let previousRelease = \"\(cut)\""))
        #expect(try Self.sh("git status --porcelain", in: dir).output.isEmpty)
    }
}
