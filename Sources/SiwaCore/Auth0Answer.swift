/// Auth0's Management API v2 as pure decisions: the addresses, how an Apple user is named and
/// searched, how an answer's error code and a token answer are read.
public enum Auth0 {
    /// The identity provider name of Sign in with Apple (Auth0's `apple` social connection).
    public static let appleProvider = "apple"
    /// Fields read of a user: nothing else (no address, no profile) leaves Auth0.
    public static let userFields = "user_id,identities"

    /// The user id Auth0 gives a user whose first identity is the Apple `sub`.
    public static func appleUserID(sub: String) -> String { "\(appleProvider)|\(sub)" }

    /// The tenant's address (`SIWA_AUTH0_URL` overrides it).
    public static func baseURL(domain: String) -> String { "https://\(domain)" }

    /// The Management API's identifier, the `audience` of its client-credentials token.
    public static func audience(domain: String) -> String { "https://\(domain)/api/v2/" }

    /// A user search (search engine v3, Lucene syntax) for the users holding the Apple identity
    /// `sub`, primary or linked.
    public static func searchQuery(sub: String) -> String {
        "identities.user_id:\(luceneQuoted(sub)) AND identities.provider:\"\(appleProvider)\""
    }

    /// `text` as a quoted Lucene phrase: `"` and `\` escaped.
    public static func luceneQuoted(_ text: String) -> String {
        var out = "\""
        for c in text {
            if c == "\"" || c == "\\" { out.append("\\") }
            out.append(c)
        }
        return out + "\""
    }

    /// The error code of an answer: the Management API's `errorCode`, or the token endpoint's
    /// `error` (an OAuth code); nil when the body names none. The Management API's `error` is
    /// the HTTP reason phrase (it comes with `statusCode`), no code.
    public static func errorCode(_ body: [UInt8]) -> String? {
        guard let answer = try? JSONParser.parse(body) else { return nil }
        if let code = answer["errorCode"]?.stringValue { return code }
        return answer["statusCode"] == nil ? answer["error"]?.stringValue : nil
    }

    /// Who is at fault when the token endpoint refuses: the tenant when it has no Management API
    /// under the audience asked for (`Service not enabled within domain`); nil for the usual
    /// reading of the status. (A 404, no tenant there, is read by the caller.)
    public static func tokenBlame(status: Int, body: [UInt8]) -> ProviderBlame? {
        guard status == 403, let description = (try? JSONParser.parse(body))?["error_description"]?.stringValue else { return nil }
        return description.hasPrefix("Service not enabled within domain") ? .tenant : nil
    }

    /// The access token and its lifetime of a token answer; nil when either is missing. A
    /// lifetime past a year counts as a year (renewed then all the same; no overflow).
    public static func token(_ body: [UInt8]) -> (token: String, lifetime: Duration)? {
        guard let answer = try? JSONParser.parse(body), let token = answer["access_token"]?.stringValue, !token.isEmpty,
            case .number(let lifetime)? = answer["expires_in"], lifetime > 0, lifetime.isFinite
        else { return nil }
        return (token, .seconds(min(lifetime, 365 * 86_400)))
    }

    /// The user in `value` (one user object) when it holds the Apple identity `sub`.
    public static func user(_ value: JSONValue, sub: String) -> Auth0User? {
        guard let userID = value["user_id"]?.stringValue, let identities = value["identities"]?.arrayValue else { return nil }
        func isApple(_ identity: JSONValue) -> Bool {
            guard identity["provider"]?.stringValue == appleProvider else { return false }
            // Auth0 types an identity's user_id as a string or a number.
            switch identity["user_id"] {
            case .string(let id)?: return id == sub
            default: return false
            }
        }
        guard identities.contains(where: isApple) else { return nil }
        return Auth0User(
            userID: userID, applePrimary: userID == appleUserID(sub: sub), otherIdentities: identities.filter { !isApple($0) }.count)
    }

    /// The first user of a search answer (an array of users) that holds the Apple identity `sub`.
    public static func user(inSearch value: JSONValue, sub: String) -> Auth0User? {
        let users = value.arrayValue ?? value["users"]?.arrayValue ?? []
        return users.lazy.compactMap { user($0, sub: sub) }.first
    }
}

/// An Auth0 user holding an Apple identity.
public struct Auth0User: Sendable, Equatable {
    public var userID: String
    /// Apple is the user's main identity (`user_id` is `apple|<sub>`): Auth0 cannot unlink it.
    public var applePrimary: Bool
    /// Identities other than the Apple one: other ways in.
    public var otherIdentities: Int

    public init(userID: String, applePrimary: Bool, otherIdentities: Int) {
        self.userID = userID
        self.applePrimary = applePrimary
        self.otherIdentities = otherIdentities
    }

    /// Apple is the only way in: deleting the user loses no other sign-in method.
    public var appleOnly: Bool { otherIdentities == 0 }
}
