import Foundation
import SiwaCore
import Testing

/// The configuration reference (docs/configuration.md) against the code: the same variables, each
/// with its flag. (scripts/check-docs checks the docs more widely: links, commands, every variable read.)
@Suite("Documentation matches the code")
struct DocumentationTests {
    /// The repository root (this file is Tests/SiwaAppTests/DocumentationTests.swift).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(relativePath), encoding: .utf8)
    }

    /// The variables named in the first column of the table under `## Variables` (a row may
    /// name several: "| `SIWA_LOG_LEVEL`, `SIWA_LOG_FORMAT` | ...").
    static func documentedVariables() throws -> [String] {
        let reference = try read("docs/configuration.md")
        let section = try #require(
            reference.components(separatedBy: "\n## Variables\n").dropFirst().first,
            "docs/configuration.md has no \"## Variables\" section")
        let body = section.components(separatedBy: "\n## ").first ?? section
        var variables: [String] = []
        for line in body.split(separator: "\n") where line.hasPrefix("|") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            guard cells.count > 2 else { continue }
            for name in cells[1].split(separator: "`") where name.hasPrefix("SIWA_") {
                variables.append(String(name))
            }
        }
        return variables
    }

    /// `SIWA_JWKS_MIN_REFRESH` -> `jwks-min-refresh`.
    static func flag(for variable: String) -> String {
        variable.dropFirst("SIWA_".count).lowercased().replacingOccurrences(of: "_", with: "-")
    }

    @Test("the configuration reference lists exactly ServerConfiguration.variables, once each")
    func tableMatchesVariables() throws {
        let documented = try Self.documentedVariables()
        #expect(!documented.isEmpty)
        #expect(documented.count == Set(documented).count, "a variable is listed twice")
        let code = Set(ServerConfiguration.variables)
        #expect(code.count == ServerConfiguration.variables.count)
        let reference = Set(documented)
        #expect(reference.subtracting(code).sorted() == [], "in docs/configuration.md, not in the code")
        #expect(code.subtracting(reference).sorted() == [], "in the code, not in docs/configuration.md")
    }

    @Test("every variable has a command-line flag of the same name in ConfigurationOptions")
    func everyVariableHasAFlag() throws {
        let source = try Self.read("Sources/siwa-notify/ConfigurationOptions.swift")
        var declared: Set<String> = []
        for piece in source.components(separatedBy: ".customLong(\"").dropFirst() {
            if let end = piece.firstIndex(of: "\"") { declared.insert(String(piece[..<end])) }
        }
        let expected = Set(ServerConfiguration.variables.map(Self.flag(for:)))
        #expect(expected.subtracting(declared).sorted() == [], "variables without a flag")
        #expect(declared.subtracting(expected).sorted() == [], "flags without a variable")
        // Each flag's help names its variable.
        for variable in ServerConfiguration.variables {
            let flag = Self.flag(for: variable)
            guard let declaration = source.components(separatedBy: ".customLong(\"\(flag)\")").dropFirst().first else { continue }
            let line = declaration.prefix { $0 != "\n" }
            #expect(line.contains(variable), "the help of --\(flag) does not name \(variable)")
        }
    }

    /// The built `siwa-notify` (next to the test bundle, or in .build/debug).
    static var binary: String? {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("siwa-notify").path,
            root.appendingPathComponent(".build/debug/siwa-notify").path,
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// `swift test` (and `scripts/test`) build the executable with the tests: a missing binary is a
    /// failure, not a reason to skip.
    @Test("`siwa-notify serve --help` offers every flag")
    func helpOffersEveryFlag() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try #require(Self.binary))
        process.arguments = ["serve", "--help"]
        process.environment = ["PATH": "/usr/bin:/bin", "COLUMNS": "200"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let help = String(decoding: data, as: UTF8.self)
        #expect(process.terminationStatus == 0, "serve --help failed: \(help.prefix(500))")
        for variable in ServerConfiguration.variables {
            let flag = "--" + Self.flag(for: variable)
            #expect(help.contains(flag + " ") || help.contains(flag + "\n"), "serve --help lacks \(flag)")
        }
    }
}

/// The map of the code (the block under `## Map of the code` in docs/architecture.md) against the
/// tree: every folder under `Sources/` and `Tests/` named once, and nothing named that is not there.
@Suite("The map of the code follows the tree")
struct CodeMapTests {
    /// The names of the folders under `relativePath`, at any depth.
    static func folders(_ relativePath: String) throws -> [String] {
        let url = DocumentationTests.root.appendingPathComponent(relativePath)
        return try FileManager.default.contentsOfDirectory(atPath: url.path).filter { name in
            var isDirectory: ObjCBool = false
            return !name.hasPrefix(".")
                && FileManager.default.fileExists(atPath: url.appendingPathComponent(name).path, isDirectory: &isDirectory)
                && isDirectory.boolValue
        }.flatMap { name in [name] + (try folders(relativePath + "/" + name)) }
    }

    /// The folder names that start an entry of the map (`  Name/   what lives there`).
    static func mappedFolders() throws -> [String] {
        let guide = try DocumentationTests.read("docs/architecture.md")
        let section = try #require(guide.components(separatedBy: "\n## Map of the code\n").dropFirst().first)
        let block = try #require(section.components(separatedBy: "```").dropFirst().first, "no code block")
        return block.split(separator: "\n").compactMap { line in
            let first = line.split(separator: " ", omittingEmptySubsequences: true).first ?? ""
            return first.hasSuffix("/") && first.count > 1 ? String(first.dropLast()) : nil
        }
    }

    @Test("each folder under Sources/ and Tests/ is named once, with a line on what lives there")
    func mapMatchesTree() throws {
        let expected = ["Sources", "Tests"] + (try Self.folders("Sources")) + (try Self.folders("Tests"))
        let mapped = try Self.mappedFolders()
        #expect(mapped.sorted() == expected.sorted(), "the map names \(mapped.sorted()); the tree has \(expected.sorted())")
        #expect(Set(mapped).count == mapped.count, "a folder named twice in the map")
    }
}

/// Comments point to the behaviour the repository documents: every `README "Title"` named in the
/// sources, the tests and schema.sql is a heading of README.md or of a guide in docs/ (README
/// links each guide by that title).
@Suite("Comments point to README sections that exist")
struct READMEReferenceTests {
    @Test("each README \"Title\" named in Sources/, Tests/ and schema.sql is a heading of README.md or docs/")
    func referencesResolve() throws {
        let guides = try FileManager.default.contentsOfDirectory(
            atPath: DocumentationTests.root.appendingPathComponent("docs").path
        ).filter { $0.hasSuffix(".md") }.map { "docs/" + $0 }
        var headings: Set<String> = []
        for document in ["README.md"] + guides {
            for line in try DocumentationTests.read(document).split(separator: "\n") where line.hasPrefix("#") {
                headings.insert(String(line.drop { $0 == "#" }.drop { $0 == " " }))
            }
        }
        var files = ["schema.sql"]
        for folder in ["Sources", "Tests"] {
            let base = DocumentationTests.root.appendingPathComponent(folder)
            let walker = try #require(FileManager.default.enumerator(atPath: base.path))
            for case let path as String in walker where path.hasSuffix(".swift") && !path.contains("Fixtures") {
                files.append(folder + "/" + path)
            }
        }
        var checked = 0
        for file in files {
            // Only comments (`//`, `///`, SQL's `--`): code and test data may quote README otherwise.
            let comments = try DocumentationTests.read(file).split(separator: "\n").compactMap { line in
                line.range(of: "//").map { line[$0.upperBound...] } ?? line.range(of: "-- ").map { line[$0.upperBound...] }
            }
            // `bench/README "…"` names a section of bench/README.md, not of README.md.
            let own = comments.map { $0.replacingOccurrences(of: "bench/README \"", with: "bench/README:") }
            for part in own.flatMap({ $0.components(separatedBy: "README \"").dropFirst() }) {
                guard let title = part.split(separator: "\"", maxSplits: 1).first, title != "Title" else { continue }
                checked += 1
                #expect(headings.contains(String(title)), "\(file) names README \"\(title)\", which is no heading of README.md or docs/")
            }
        }
        #expect(checked > 20, "only \(checked) references found")
    }
}
