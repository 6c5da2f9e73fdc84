import ArgumentParser
import Foundation
import SiwaApp
import SiwaCore
import SiwaFetch

/// `siwa-notify forward-test`: one signed sample forward to `SIWA_FORWARD_URL`, to check the
/// app's verifier before real events flow.
struct ForwardTest: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forward-test",
        abstract: "POST a signed sample forward (a made-up consent-revoked) to SIWA_FORWARD_URL; print the answer.",
        discussion: "Signed with every secret of SIWA_FORWARD_SECRET_FILE, as real forwards are. Exit 0 on a 2xx, 1 otherwise.")
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let config = try options.load(requireAudiences: false)
        guard let forwarding = config.forwarding else {
            throw CLIError("forward-test: SIWA_FORWARD_URL and SIWA_FORWARD_SECRET_FILE are not set")
        }
        let delivery: ForwardDelivery
        do {
            delivery = try ForwardDelivery.load(forwarding)
        } catch {
            throw CLIError("configuration: \(error)")
        }
        Fetcher.initialize()
        let sample = ForwardDelivery.sample(audience: config.audiences.first ?? "com.example.app")
        let attempt = delivery.send(sample)
        let status = attempt.status.map(String.init) ?? "no answer"
        print("POST \(forwarding.url.split(separator: "?").first ?? "") webhook-id \(sample.id): \(status)\(attempt.error.map { " (\($0))" } ?? "")")
        if !attempt.delivered { throw ExitCode(1) }
    }
}
