import ArgumentParser
import Foundation
import SiwaApp
import SiwaCore

extension DoctorProcess: ExpressibleByArgument {}

struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "The deployment's security and durability findings, each with its severity and fix.",
        discussion: """
            Run it with the environment of a process after deploying: it reads what that process's database login may \
            read (the catalogs), the modes of the credential files, Apple's key set once, and each hosted provider once. Checks: the login (a \
            superuser, the schema's owner, siwa roles it does not need), CREATE on schema public for PUBLIC, grants \
            against the grants matrix (docs/security.md), sslmode to a remote database, commit durability, SIWA_APPLY_TO's tables, \
            each hosted provider's start-up check and its dead or long-waiting calls, the files' modes, the admin listener's address, \
            the clock against the key set's Date. Exit 0 when no finding is HIGH, \
            1 otherwise.
            """)
    @Option(help: "The process whose configuration this is: serve, receive or work (what its login needs).")
    var process: DoctorProcess = .serve
    @Flag(help: "Print JSON: {\"process\", \"findings\": [{\"code\", \"severity\", \"message\", \"fix\"}]}.")
    var json = false
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        let report = Doctor.examine(config, process: process)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print(report.text, terminator: "")
        }
        if !report.passes { throw ExitCode(1) }
    }
}
