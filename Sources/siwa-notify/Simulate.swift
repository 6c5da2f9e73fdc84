import ArgumentParser
import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools

struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign an Apple-shaped notification with the local dev key and POST it (for `serve --dev`).",
        discussion: "Like `stripe trigger`: exercises the whole path without Apple. Only a server started with --dev trusts the key.")

    @Option(help: "email-disabled | email-enabled | consent-revoked | account-delete (or any string, to see it ignored).")
    var type: String
    @Option(help: "The Apple user id (sub).")
    var sub: String
    @Option(help: "Email address for the email events.")
    var email: String?
    @Flag(name: .customLong("private"), help: "Mark the email as a private relay address.")
    var isPrivate = false
    @Option(help: "Endpoint URL. Default: the local listener from SIWA_LISTEN and SIWA_PATH.")
    var url: String?
    @Option(help: "event_time in milliseconds since the epoch. Default: now.")
    var eventTime: Int64?
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        // Not `dev: true`: simulate touches no database (SIWA_DATABASE_URL may be set in the shell).
        let config = try options.load(requireAudiences: false)
        let key = try DevKey.loadOrCreate(dataDirectory: config.dataDirectory)
        let signer = NotificationSigner(key: key, kid: DevKey.kid)
        // `serve --dev` trusts the dev key for the dev audience only.
        let audience = ServerConfiguration.devAudience
        let claims = NotificationSigner.claims(
            audience: audience, type: type, sub: sub, eventTimeMillis: eventTime,
            email: email, isPrivateEmail: email == nil && !isPrivate ? nil : isPrivate)
        let token = try signer.sign(claims: claims)
        // `serve --dev` listens on loopback only: a non-loopback SIWA_LISTEN host became 127.0.0.1.
        let host = !config.listen.isLoopback ? "127.0.0.1" : (config.listen.host.contains(":") ? "[\(config.listen.host)]" : config.listen.host)
        let target = url ?? "http://\(host):\(config.listen.port)\(config.path)"
        let response: (status: Int, body: String)
        do {
            let r = try NotificationSigner.post(body: NotificationSigner.body(token: token), to: target)
            response = (r.status, String(decoding: r.body, as: UTF8.self))
        } catch {
            throw CLIError("cannot reach \(target): \(error) (is `siwa-notify serve --dev` running?)")
        }
        print("\(response.status) \(response.body)")
        if response.status != 200 {
            throw ExitCode(1)
        }
    }
}
