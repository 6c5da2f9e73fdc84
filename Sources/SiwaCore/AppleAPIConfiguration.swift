/// Configuration of app-initiated deletion through Apple's REST API (`/auth/token`,
/// `/auth/revoke`). Only file names and identifiers: reading and checking the key files is the
/// application's job at start.
public struct AppleAPIConfiguration: Sendable, Equatable {
    /// `SIWA_TEAM_ID`: the Apple Developer team id (the client secret's `iss`).
    public var teamID: String
    /// `SIWA_KEY_ID`: the Sign in with Apple key id (the client secret's `kid`).
    public var keyID: String
    /// `SIWA_PRIVATE_KEY_FILE`: the `.p8` file (PKCS#8 PEM, EC P-256) that signs client secrets.
    public var privateKeyFile: String
    /// `SIWA_TOKEN_KEY_FILE`: 32 random bytes (exactly 32 raw bytes, or 64 hex characters with at
    /// most one trailing newline) that encrypt stored refresh tokens (AES-256-GCM); `new,old` to
    /// rotate (the first encrypts, every one decrypts).
    public var tokenKeyFile: String
    /// `SIWA_APPLE_URL`: Apple's base URL; default `https://appleid.apple.com` (`http://` only to
    /// a loopback host, for tests).
    public var baseURL: String

    public static let defaultBaseURL = "https://appleid.apple.com"

    public init(
        teamID: String, keyID: String, privateKeyFile: String, tokenKeyFile: String,
        baseURL: String = AppleAPIConfiguration.defaultBaseURL
    ) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyFile = privateKeyFile
        self.tokenKeyFile = tokenKeyFile
        self.baseURL = baseURL
    }

    /// nil when none of the four required variables is set; an error naming the first missing
    /// one when only some are.
    static func load(_ value: (String) -> String?) throws(ConfigurationError) -> AppleAPIConfiguration? {
        let names = ["SIWA_TEAM_ID", "SIWA_KEY_ID", "SIWA_PRIVATE_KEY_FILE", "SIWA_TOKEN_KEY_FILE"]
        let values = names.map(value)
        var baseURL = defaultBaseURL
        if let url = value("SIWA_APPLE_URL") {
            if let problem = problem(withBaseURL: url) {
                throw ConfigurationError(variable: "SIWA_APPLE_URL", problem: problem)
            }
            baseURL = url.hasSuffix("/") ? String(url.dropLast()) : url
        }
        if values.allSatisfy({ $0 == nil }) { return nil }
        if let missing = zip(names, values).first(where: { $0.1 == nil }) {
            let set = zip(names, values).filter { $0.1 != nil }.map(\.0).joined(separator: ", ")
            throw ConfigurationError(
                variable: missing.0,
                problem: "is required for app-initiated deletion (set with \(set)); set all four or none")
        }
        return AppleAPIConfiguration(
            teamID: values[0]!, keyID: values[1]!, privateKeyFile: values[2]!,
            tokenKeyFile: values[3]!, baseURL: baseURL)
    }

    /// nil if `url` is an acceptable base URL: `https://` to any host, `http://` to loopback only.
    static func problem(withBaseURL url: String) -> String? {
        if url.lowercased().hasPrefix("file://") { return "must be an https:// URL (or http:// to a loopback host)" }
        return JWKSLocation.problem(with: url)
    }
}
