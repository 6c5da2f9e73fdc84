import Foundation
import Logging
import SiwaCore
import SiwaCrypto

/// Apple's REST API configured (`SIWA_TEAM_ID` … `SIWA_TOKEN_KEY_FILE`): Apple's REST client, the token
/// keys and the client ids Apple may be called for. Used by sign-in (the API), in-app deletion (the
/// revoker), reconciliation and transfers.
public struct AppleAPICredentials: Sendable {
    /// A key file that cannot be used; names the variable, never a key.
    public struct LoadError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

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

    /// Loads the `.p8` and token key files named by `configuration`; errors name the variable. A
    /// key file that the group or others may read is used, with one warning line naming it.
    public static func load(_ configuration: AppleAPIConfiguration, audiences: [String] = [], logger: Logger) throws -> AppleAPICredentials {
        let key: ECPrivateKey
        do {
            key = try ECPrivateKey(contentsOfFile: configuration.privateKeyFile)
        } catch {
            throw LoadError(description: "SIWA_PRIVATE_KEY_FILE: \(error)")
        }
        let vault: TokenVault
        do {
            vault = try TokenVault.load(files: configuration.tokenKeyFile)
        } catch {
            throw LoadError(description: "SIWA_TOKEN_KEY_FILE: \(error)")
        }
        let files =
            [("SIWA_PRIVATE_KEY_FILE", configuration.privateKeyFile)]
            + TokenVault.paths(configuration.tokenKeyFile).map { ("SIWA_TOKEN_KEY_FILE", $0) }
        for (variable, path) in files {
            guard let mode = Self.permissions(of: path), mode & 0o044 != 0 else { continue }
            logger.warning(
                "key file readable by group or others: chmod 600 it",
                metadata: ["variable": "\(variable)", "file": "\(path)", "mode": "\(String(mode, radix: 8))"])
        }
        return AppleAPICredentials(
            client: AppleClient(configuration: configuration, privateKey: key, logger: logger), vault: vault, audiences: audiences)
    }

    /// The permission bits of `path` (nil when it cannot be read).
    static func permissions(of path: String) -> Int? {
        guard let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber else { return nil }
        return mode.intValue & 0o777
    }
}
