import ArgumentParser
import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools

/// `siwa-notify dev-apple`: a loopback stand-in for Apple's REST API, to try in-app deletion
/// locally with `serve --dev` (like `simulate` for notifications).
struct DevAppleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dev-apple",
        abstract: "Run a local fake of Apple's REST API to try in-app deletion and app transfers.",
        discussion: """
            Creates a dev .p8 key and a token key in SIWA_DATA_DIR (if absent), prints the environment to give \
            `serve --dev`, accepts any authorization code (an id_token signed with the dev key that `serve --dev` \
            trusts) and logs every revocation. `POST /dev/revoke-grant` (form: sub, optional client_id) plays a user \
            who stops using Apple sign-in while the notification is missed: their refresh tokens validate \
            invalid_grant from then on (try reconciliation with it). Loopback only; never for production.
            """)

    /// The team id client secrets must name when neither --team-id nor SIWA_TEAM_ID is set.
    static let devTeamID = "DEVTEAM000"
    /// The key id when neither --key-id nor SIWA_KEY_ID is set.
    static let devKeyID = "DEVKEY0000"

    @Option(help: "Loopback port to listen on (0: any free port). Default 9180.")
    var port: UInt16 = 9180
    @Option(help: "The sub of every id_token issued. Default: derived from the code (the same code, the same user).")
    var sub: String?
    @Option(help: "The email of every id_token. Default: a private relay address derived from the sub.")
    var email: String?
    @Option(help: "A nonce to put in every id_token (send the same one to POST /apple/tokens). Default: none.")
    var nonce: String?
    @Option(help: "Also play this receiving team of an app transfer (on --receiving-port). Default: none.")
    var receivingTeam: String?
    @Option(help: "Loopback port of the receiving team's fake (with --receiving-team). Default 9181.")
    var receivingPort: UInt16 = 9181
    @Option(help: "Refresh tokens starting with this prefix validate although this fake never issued them (load tests).")
    var acceptRefreshTokens: String?
    @Flag(help: "Answer 200 to every revoke and perform none (as Apple may): siwa-notify's proof then finds it unconfirmed.")
    var fakeRevokes = false
    @Flag(help: "Do not print a line per call (load tests).")
    var quiet = false
    @OptionGroup var options: ConfigurationOptions

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let dataDirectory = URL(
            fileURLWithPath: options.dataDir ?? environment["SIWA_DATA_DIR"].flatMap { $0.isEmpty ? nil : $0 }
                ?? "./.siwa"
        ).standardizedFileURL.path
        let teamID = options.teamID ?? environment["SIWA_TEAM_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? Self.devTeamID
        let keyID = options.keyID ?? environment["SIWA_KEY_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? Self.devKeyID
        let privateKeyFile = dataDirectory + "/dev-apple-key.p8"
        let tokenKeyFile = dataDirectory + "/dev-token.key"
        let teamKey: ECPrivateKey
        let idTokenKey: RSAPrivateKey
        do {
            try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
            teamKey = try Self.loadOrCreateTeamKey(privateKeyFile)
            try Self.createTokenKeyIfAbsent(tokenKeyFile)
            idTokenKey = try DevKey.loadOrCreate(dataDirectory: dataDirectory)
        } catch {
            throw CLIError("dev-apple: cannot prepare the dev keys in \(dataDirectory): \(error)")
        }

        let fixedSub = sub, fixedEmail = email, fixedNonce = nonce
        var configuration = DevApple.Configuration(
            teamID: teamID, keyID: keyID, secretKey: teamKey.publicKey, clientIDs: nil,
            signer: NotificationSigner(key: idTokenKey, kid: DevKey.kid))
        configuration.port = port
        configuration.unknownCode = { code in
            let user = fixedSub ?? DevApple.devSub(forCode: code)
            let hash = String(SubjectHash.of(user).prefix(12))
            return DevApple.User(
                sub: user, email: fixedEmail ?? "\(hash)@privaterelay.appleid.com",
                isPrivateEmail: fixedEmail == nil, emailVerified: true, nonce: fixedNonce)
        }
        let fake = fakeRevokes
        if !quiet { configuration.onCall = { call in Self.say(Self.describe(call, fakeRevokes: fake)) } }
        if let prefix = acceptRefreshTokens {
            configuration.unknownRefreshToken = { token in token.hasPrefix(prefix) ? DevApple.devSub(forCode: token) : nil }
        }
        let server: DevApple
        do {
            server = try DevApple(configuration)
        } catch {
            throw CLIError("dev-apple: cannot listen on 127.0.0.1:\(port): \(error)")
        }
        if fakeRevokes { server.answerRevoke(.acceptWithoutEffect) }

        Self.say(
            """
            dev-apple: a fake of Apple's REST API on \(server.baseURL) (loopback only, development only).
            Run `siwa-notify serve --dev` with the same SIWA_DATA_DIR and this environment:

            export SIWA_TEAM_ID=\(teamID)
            export SIWA_KEY_ID=\(keyID)
            export SIWA_PRIVATE_KEY_FILE=\(privateKeyFile)
            export SIWA_TOKEN_KEY_FILE=\(tokenKeyFile)
            export SIWA_APPLE_URL=\(server.baseURL)

            Any authorization code is accepted (POST /apple/tokens on the admin listener); revocations are logged here.
            A user stops using Apple sign-in, and the notification is missed (for reconciliation):
            curl -d sub=SUB \(server.baseURL)\(DevApple.revokeGrantPath)
            """)

        let receiving = try receivingTeam.map { team in
            try startReceivingTeam(team, sending: configuration, dataDirectory: dataDirectory, keyID: keyID)
        }
        let termination = TerminationSignals()
        termination.wait()
        server.stop()
        receiving?.stop()
        Self.say("dev-apple: stopped")
    }

    /// One line per call: endpoint, status, client id and the user's subject hash (never a code,
    /// token, secret or raw sub).
    static func describe(_ call: DevApple.Call, fakeRevokes: Bool = false) -> String {
        var line = "\(call.method) \(call.path) \(call.status)"
        if let clientID = call.form?["client_id"] { line += " client_id=\(clientID)" }
        if let sub = call.sub { line += " sub_hash=\(SubjectHash.of(sub))" }
        if let error = call.error { line += " error=\(error)" }
        if let problem = call.secretProblem { line += " client_secret_problem=\"\(problem)\"" }
        if call.path == "/auth/revoke" && call.status == 200 {
            line += fakeRevokes ? " (answered 200, NOT revoked: --fake-revokes)" : " (refresh token revoked)"
        }
        if call.path == "/auth/token" && call.status == 200 {
            switch call.form?["grant_type"] {
            case "client_credentials": line += " (access token issued for user.migration)"
            case "refresh_token": line += " (refresh token valid)"
            default: line += " (code exchanged, refresh token issued)"
            }
        }
        if call.path == DevApple.revokeGrantPath && call.status == 200 {
            line += " (grant revoked, no notification sent: its refresh tokens now validate invalid_grant)"
        }
        if call.path == "/auth/usermigrationinfo" && call.status == 200 {
            line += call.form?["transfer_sub"] == nil ? " (transfer identifier minted)" : " (transfer identifier exchanged)"
        }
        return line
    }

    /// Writes `text` and a newline to stdout at once (unbuffered: the output may be a pipe).
    static func say(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// A second fake, for `team`, sharing the transfer registry of `sending`; its own `.p8` key.
    func startReceivingTeam(
        _ team: String, sending: DevApple.Configuration, dataDirectory: String, keyID: String
    ) throws -> DevApple {
        let keyFile = dataDirectory + "/dev-apple-key-\(team).p8"
        let key: ECPrivateKey
        do {
            key = try Self.loadOrCreateTeamKey(keyFile)
        } catch {
            throw CLIError("dev-apple: cannot prepare \(keyFile): \(error)")
        }
        var configuration = DevApple.Configuration(
            teamID: team, keyID: keyID, secretKey: key.publicKey, clientIDs: nil, signer: sending.signer)
        configuration.port = receivingPort
        configuration.transfers = sending.transfers
        if !quiet { configuration.onCall = { call in Self.say("[\(team)] " + Self.describe(call)) } }
        let server: DevApple
        do {
            server = try DevApple(configuration)
        } catch {
            throw CLIError("dev-apple: cannot listen on 127.0.0.1:\(receivingPort): \(error)")
        }
        Self.say(
            """
            dev-apple: the receiving team \(team) of an app transfer on \(server.baseURL). Its environment \
            (for `siwa-notify transfer import`):

            export SIWA_TEAM_ID=\(team)
            export SIWA_KEY_ID=\(keyID)
            export SIWA_PRIVATE_KEY_FILE=\(keyFile)
            export SIWA_TOKEN_KEY_FILE=\(dataDirectory)/dev-token.key
            export SIWA_APPLE_URL=\(server.baseURL)

            """)
        return server
    }

    static func loadOrCreateTeamKey(_ path: String) throws -> ECPrivateKey {
        if FileManager.default.fileExists(atPath: path) { return try ECPrivateKey(contentsOfFile: path) }
        let key = try ECPrivateKey.generate()
        try write(key.pkcs8PEM(), to: path)
        return key
    }

    static func createTokenKeyIfAbsent(_ path: String) throws {
        if FileManager.default.fileExists(atPath: path) { return }
        try write(SHA256.hex(SecureRandom.bytes(32)) + "\n", to: path)
    }

    private static func write(_ text: String, to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CLIError("cannot write \(path)")
        }
    }
}
