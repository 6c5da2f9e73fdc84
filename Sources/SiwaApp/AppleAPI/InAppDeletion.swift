import Logging
import SiwaCore
import SiwaCrypto

/// In-app deletion configured (`SIWA_TEAM_ID` … `SIWA_TOKEN_KEY_FILE`): Apple's REST client, the token
/// keys and the client ids Apple may be called for. Used by the API, deletion jobs and reconciliation.
public struct InAppDeletion: Sendable {
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
    public static func load(_ configuration: AppleAPIConfiguration, audiences: [String] = [], logger: Logger) throws -> InAppDeletion {
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
        return InAppDeletion(client: AppleClient(configuration: configuration, privateKey: key, logger: logger), vault: vault, audiences: audiences)
    }
}
