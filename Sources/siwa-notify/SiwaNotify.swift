import ArgumentParser
import SiwaBuildInfo

struct SiwaNotify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "siwa-notify",
        abstract: "Receives Sign in with Apple server-to-server notifications: verified, durable, applied exactly once.",
        discussion: """
            Configuration comes from SIWA_* environment variables; a flag of the same name overrides one.

            \(SiwaNotify.versionLine)
            """,
        version: SiwaNotify.versionLine,
        subcommands: [
            Serve.self, Receive.self, Work.self, Migrate.self, Simulate.self, Inspect.self, Replay.self, Status.self, DeleteUser.self,
            Revoke.self, UserReportCommand.self, Rekey.self, DevAppleCommand.self, ForwardTest.self, TransferCommand.self,
            DoctorCommand.self,
            ConsoleOperatorCommand.self,
        ],
        defaultSubcommand: Serve.self
    )

    /// `siwa-notify 1.0.0 (commit abc123def456)`: `--version`'s answer, also in `--help`.
    static let versionLine = "siwa-notify \(BuildInfo.version) (commit \(BuildInfo.commit))"
}
