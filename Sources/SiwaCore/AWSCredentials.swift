/// Where the AWS credential comes from, as the AWS SDKs look for it: the access key variables
/// first, else a profile of the shared credentials file. Pure: the caller reads the file and
/// passes its text to `parseSharedFile`. Problems name the variable to fix and never contain a
/// secret or a line of the file.
public enum AWSCredentialSource: Sendable, Equatable {
    case environment(SigV4.Credentials)
    /// The file's path and the profile to read from it.
    case sharedFile(path: String, profile: String)

    public static let accessKeyVariable = "AWS_ACCESS_KEY_ID"
    public static let secretKeyVariable = "AWS_SECRET_ACCESS_KEY"
    public static let sessionTokenVariable = "AWS_SESSION_TOKEN"
    public static let fileVariable = "AWS_SHARED_CREDENTIALS_FILE"
    public static let profileVariable = "AWS_PROFILE"
    public static let defaultProfile = "default"

    /// The source `environment` names. An empty value counts as unset. Without any of these
    /// variables the file is `$HOME/.aws/credentials`, profile `default`, as the AWS CLI does.
    public static func resolve(environment: [String: String]) throws(ConfigurationError) -> AWSCredentialSource {
        func value(_ name: String) -> String? {
            guard let raw = environment[name] else { return nil }
            let trimmed = ServerConfiguration.trim(raw)
            return trimmed.isEmpty ? nil : trimmed
        }
        let keyID = value(accessKeyVariable), secret = value(secretKeyVariable), token = value(sessionTokenVariable)
        switch (keyID, secret) {
        case (let keyID?, let secret?):
            return .environment(SigV4.Credentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: token))
        case (.some, nil):
            throw ConfigurationError(variable: secretKeyVariable, problem: "is required when \(accessKeyVariable) is set (set both or neither)")
        case (nil, .some):
            throw ConfigurationError(variable: accessKeyVariable, problem: "is required when \(secretKeyVariable) is set (set both or neither)")
        case (nil, nil):
            if token != nil {
                throw ConfigurationError(
                    variable: sessionTokenVariable,
                    problem: "is set without \(accessKeyVariable) and \(secretKeyVariable) (a session token goes with its key)")
            }
        }
        let profile = value(profileVariable) ?? defaultProfile
        if let path = value(fileVariable) { return .sharedFile(path: path, profile: profile) }
        guard let home = value("HOME") else {
            throw ConfigurationError(
                variable: accessKeyVariable,
                problem: "no AWS credential: set \(accessKeyVariable) and \(secretKeyVariable), or \(fileVariable) (and \(profileVariable))")
        }
        return .sharedFile(path: (home.hasSuffix("/") ? String(home.dropLast()) : home) + "/.aws/credentials", profile: profile)
    }

    /// The variable that names this source's credential, for a refusal: which one to fix.
    public var variable: String {
        switch self {
        case .environment: return Self.accessKeyVariable
        case .sharedFile: return Self.fileVariable
        }
    }

    /// The credential of `profile` in a shared credentials file (INI: `[profile]` sections,
    /// `name = value` lines, `#` and `;` comment lines). Reads `aws_access_key_id`,
    /// `aws_secret_access_key` and `aws_session_token`; other names are ignored.
    public static func parseSharedFile(_ text: String, profile: String) throws(ConfigurationError) -> SigV4.Credentials {
        func problem(_ text: String) -> ConfigurationError { ConfigurationError(variable: fileVariable, problem: text) }
        var section: String?
        var found = false
        var fields: [String: String] = [:]
        for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).enumerated() {
            let line = ServerConfiguration.trim(String(raw))
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]"), line.utf8.count > 2 else {
                    throw problem("line \(index + 1): a section header must be [name]")
                }
                let name = ServerConfiguration.trim(String(line.dropFirst().dropLast()))
                section = name
                if name == profile { found = true }
                continue
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw problem("line \(index + 1): is neither [profile] nor name = value")
            }
            guard let current = section else {
                throw problem("line \(index + 1): name = value before any [profile]")
            }
            guard current == profile else { continue }
            let name = ServerConfiguration.trim(String(line[..<equals])).lowercased()
            let value = ServerConfiguration.trim(String(line[line.index(after: equals)...]))
            guard ["aws_access_key_id", "aws_secret_access_key", "aws_session_token"].contains(name) else { continue }
            if fields[name] != nil { throw problem("line \(index + 1): \(name) is given twice in [\(profile)]") }
            guard !value.isEmpty else { throw problem("line \(index + 1): \(name) is empty") }
            fields[name] = value
        }
        guard found else {
            throw ConfigurationError(variable: profileVariable, problem: "the credentials file has no [\(profile)] profile")
        }
        guard let keyID = fields["aws_access_key_id"] else { throw problem("[\(profile)] has no aws_access_key_id") }
        guard let secret = fields["aws_secret_access_key"] else { throw problem("[\(profile)] has no aws_secret_access_key") }
        return SigV4.Credentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: fields["aws_session_token"])
    }
}
