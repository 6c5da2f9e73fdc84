import Foundation
import SiwaApp
import SiwaCrypto
import Testing

/// `siwa-notify operator add|list|remove` through the real binary, against a running console.
@Suite("Console operators (command line)", .serialized, .needsDatabase)
struct ConsoleOperatorCommandTests {
    @Test("add prints the token once on stdout and stores its hash; list shows no secret; remove ends the sessions at once; clear refusals")
    func addListRemove() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let env = ["SIWA_DATABASE_URL": harness.conninfo]
        func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
            try OperatorCommandTests.run(["operator"] + arguments, environment: env)
        }

        let errors = Pipe()
        let added = try OperatorCommandTests.runApart(["operator", "add", "alice"], environment: env, errors: errors)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(added.status == 0, "\(added.output) \(stderr)")
        let lines = added.output.split(separator: "\n")
        #expect(lines.count == 1, "the token alone on stdout: \(added.output)")
        let token = String(lines.first ?? "")
        #expect(token.hasPrefix("siwa_console_") && token.count == 77)
        #expect(!stderr.contains(token))
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_operators WHERE name = 'alice'") == "1")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_operators WHERE token_hash LIKE '%' || $1 || '%'", [token]) == "0")
        let hash = try #require(try harness.scalar("SELECT token_hash FROM siwa.console_operators WHERE name = 'alice'"))

        let duplicate = try run(["add", "alice"])
        #expect(duplicate.status != 0 && duplicate.output.contains("an operator named alice exists already"), "\(duplicate.output)")
        #expect(duplicate.output.split(separator: "\n").count == 1)
        for bad in ["Alice", "-x", "a b", "a/b", String(repeating: "a", count: 64)] {
            let invalid = try run(["add", "--", bad])
            #expect(invalid.status != 0 && invalid.output.contains("lowercase letters, digits"), "\(bad): \(invalid.output)")
        }
        #expect(try harness.scalar("SELECT count(*) FROM siwa.console_operators") == "1")
        // The table holds the same rule for a row written by hand.
        let badName = DatabaseTrustTests.refusal {
            _ = try harness.query("INSERT INTO siwa.console_operators (name, token_hash) VALUES ('Bad Name', 'x')")
        }
        #expect(badName.hasPrefix("23514 ") && badName.contains("\"console_operators_name_check\""), "\(badName)")
        _ = try run(["add", "bob"])

        let before = try run(["list"])
        #expect(before.status == 0 && before.output.contains("alice") && before.output.contains("bob"), "\(before.output)")
        #expect(before.output.contains("never") && !before.output.contains(token) && !before.output.contains(hash))

        var client = ConsoleTests.client(harness)
        #expect(try client.signIn("alice", token).status == 303)
        #expect(try client.get("/console").status == 200)
        let after = try run(["list"])
        let aliceLine = after.output.split(separator: "\n").first { $0.hasPrefix("alice ") } ?? ""
        #expect(!aliceLine.contains("never"), "\(after.output)")

        let removed = try run(["remove", "alice"])
        #expect(removed.status == 0 && removed.output.contains("removed operator alice; ended 1 open console session"), "\(removed.output)")
        #expect(try client.get("/console").status == 303, "the open session ended at once")
        #expect(try client.signIn("alice", token).status == 401, "the token opens nothing any more")
        let unknown = try run(["remove", "alice"])
        #expect(unknown.status != 0 && unknown.output.contains("no operator named alice"), "\(unknown.output)")
        let listed = try run(["list"])
        #expect(!listed.output.contains("alice") && listed.output.contains("bob"))
    }
}
