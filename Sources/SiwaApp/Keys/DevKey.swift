import Foundation
import SiwaCrypto

/// The local development signing key (`<data dir>/dev-signing-key.pem`, mode 0600). `serve --dev`
/// trusts it (and only then, for `ServerConfiguration.devAudience` only); `simulate` signs with
/// it. Never used without `--dev`.
public enum DevKey {
    /// The `kid` of development tokens.
    public static let kid = "siwa-notify-dev"

    /// A development file that cannot be written.
    public struct FileError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public static func path(dataDirectory: String) -> String {
        URL(fileURLWithPath: dataDirectory).appendingPathComponent("dev-signing-key.pem").path
    }

    /// Loads the key, creating it on first use.
    public static func loadOrCreate(dataDirectory: String) throws -> RSAPrivateKey {
        let file = path(dataDirectory: dataDirectory)
        if let pem = try? String(contentsOfFile: file, encoding: .utf8) {
            return try RSAPrivateKey(pem: pem)
        }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let key = try RSAPrivateKey.generate(bits: 2048)
        let created = FileManager.default.createFile(
            atPath: file, contents: Data(key.pemRepresentation.utf8),
            attributes: [.posixPermissions: 0o600])
        if !created { throw FileError(description: "cannot write \(file)") }
        return key
    }

    /// The development API token (`<data dir>/dev-api-token`, mode 0600), made on first use.
    public static func apiToken(dataDirectory: String) throws -> (path: String, token: String) {
        let file = URL(fileURLWithPath: dataDirectory).appendingPathComponent("dev-api-token").path
        if let text = try? String(contentsOfFile: file, encoding: .utf8) {
            let token = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
            if token.count >= 16 { return (file, token) }
        }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let token = "dev_" + SHA256.hex(SecureRandom.bytes(24))
        let created = FileManager.default.createFile(
            atPath: file, contents: Data((token + "\n").utf8), attributes: [.posixPermissions: 0o600])
        if !created { throw FileError(description: "cannot write \(file)") }
        return (file, token)
    }
}
