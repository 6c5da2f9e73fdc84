import Foundation
import SiwaCore

/// The guides' local walkthroughs (docs/sign-in-and-deletion.md, docs/missed-notifications.md),
/// as a developer runs them: `siwa-notify dev-apple` (its environment read from what it prints)
/// and `serve --dev` with that environment, on the embedded database under a temporary
/// `SIWA_DATA_DIR`.
final class DevAppleSession {
    let directory: String
    let apple: LineReadingProcess
    let server: ServerProcess
    /// The `export` lines dev-apple printed.
    let printed: [String: String]
    /// The environment `serve --dev` got (printed + data dir, listeners, key set URL, `extra`).
    let environment: [String: String]
    /// The embedded database of `serve --dev`.
    let conninfo: String
    let adminURL: String
    /// The development API token `serve --dev` wrote.
    let devToken: String

    /// Starts both and waits until `serve --dev` says "worker started".
    init(sub: String, serveEnvironment extra: [String: String] = [:]) throws {
        directory = NSTemporaryDirectory() + "siwa-devapple-\(UInt64.random(in: 0...UInt64.max))"
        apple = try LineReadingProcess(["dev-apple", "--port", "0", "--sub", sub], environment: ["SIWA_DATA_DIR": directory])
        let apple = apple
        guard eventually(timeout: 30, { apple.stdout.contains("export SIWA_APPLE_URL=") }) else {
            throw Failure(description: "dev-apple did not start: \(apple.stdout) \(apple.stderr)")
        }
        var printed: [String: String] = [:]
        for line in apple.stdout.split(separator: "\n") where line.hasPrefix("export ") {
            let pair = line.dropFirst("export ".count).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { printed[String(pair[0])] = String(pair[1]) }
        }
        self.printed = printed
        // serve --dev runs on its embedded database only (under SIWA_DATA_DIR).
        conninfo = "host=\(directory)/postgres/run port=5432 user=postgres dbname=postgres"
        let adminPort = ServerProcess.freePort()
        adminURL = "http://127.0.0.1:\(adminPort)"
        environment = printed.merging(
            [
                "SIWA_DATA_DIR": directory, "SIWA_DATABASE_URL": "", "SIWA_LISTEN": "127.0.0.1:0",
                "SIWA_ADMIN_LISTEN": "127.0.0.1:\(adminPort)", "SIWA_JWKS_URL": (printed["SIWA_APPLE_URL"] ?? "") + "/auth/keys",
            ].merging(extra) { _, new in new }
        ) { _, new in new }
        server = try ServerProcess(["serve", "--dev"], environment: environment)
        guard server.waitForLog("worker started", timeout: 60),
            let token = try? String(contentsOfFile: directory + "/dev-api-token", encoding: .utf8).split(separator: "\n").first
        else {
            _ = apple.terminate()
            _ = server.terminate()
            throw Failure(description: "serve --dev did not start: \(server.log)")
        }
        devToken = String(token)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// `POST /apple/tokens` with any code, as the guides' curl does.
    func signIn() throws -> DeletionHarness.Reply {
        try DeletionHarness.post(
            adminURL + "/apple/tokens",
            json: DeletionHarness.exchangeBody(code: "any-code-at-all", clientID: ServerConfiguration.devAudience), token: devToken)
    }

    /// Both processes' exit statuses (terminated), and the directory removed.
    func stop() -> (server: Int32, apple: Int32) {
        let statuses = (server.terminate(), apple.terminate())
        try? FileManager.default.removeItem(atPath: directory)
        return statuses
    }
}
