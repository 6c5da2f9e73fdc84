import Logging
import SiwaCore
import SiwaCrypto

/// What the worker needs for deletion jobs: Apple's REST client and the token keys.
public struct Revocation: Sendable {
    public let client: AppleClient
    public let vault: TokenVault
    /// `SIWA_AUDIENCES`: the client ids Apple may be called for (empty: not checked, e.g. a `work`
    /// process started without them).
    public let audiences: [String]

    public init(client: AppleClient, vault: TokenVault, audiences: [String] = []) {
        self.client = client
        self.vault = vault
        self.audiences = audiences
    }

    /// Loads the `.p8` and token key files named by `configuration`; errors name the variable.
    public static func load(_ configuration: AppleAPIConfiguration, audiences: [String] = [], logger: Logger) throws -> Revocation {
        let key: ECPrivateKey
        do {
            key = try ECPrivateKey(contentsOfFile: configuration.privateKeyFile)
        } catch {
            throw Application.StartError(description: "SIWA_PRIVATE_KEY_FILE: \(error)")
        }
        let vault: TokenVault
        do {
            vault = try TokenVault.load(files: configuration.tokenKeyFile)
        } catch {
            throw Application.StartError(description: "SIWA_TOKEN_KEY_FILE: \(error)")
        }
        return Revocation(client: AppleClient(configuration: configuration, privateKey: key, logger: logger), vault: vault, audiences: audiences)
    }
}
