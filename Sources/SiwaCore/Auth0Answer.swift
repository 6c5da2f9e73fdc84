/// Auth0's Management API v2 as pure decisions: the addresses, how an Apple user is named and
/// searched, how an answer's error code and a token answer are read.
public enum Auth0 {
    /// The identity provider name of Sign in with Apple (Auth0's `apple` social connection).
    public static let appleProvider = "apple"
    /// Fields read of a user: nothing else (no address, no profile) leaves Auth0. `blocked` and
    /// `app_metadata` tell a block of the sign-out (`signOutMark`) from an administrator's.
    public static let userFields = "user_id,identities,blocked,app_metadata"

    /// The key of `app_metadata` set while the sign-out holds the user blocked: a block that
    /// carries it is the sign-out's own, lifted by the next try when the unblock did not answer;
    /// a block without it is an administrator's, never lifted.
    public static let signOutMark = "siwa_notify_sign_out"

    /// The device credential types that are refresh tokens (`rotating_refresh_token`: with
    /// rotation on). Listing needs the type: it defaults to `refresh_token` alone.
    public static let refreshTokenTypes = ["refresh_token", "rotating_refresh_token"]
    /// Device credentials read per page (the Management API's `per_page` allows up to 100).
    public static let deviceCredentialPage = 100

    /// The `PATCH /api/v2/users/{id}` body that blocks the user (Auth0 then ends its Auth0
    /// session) with the sign-out's mark, or lifts both.
    public static func blockBody(_ blocked: Bool) -> JSONValue {
        .object(["blocked": .bool(blocked), "app_metadata": .object([signOutMark: blocked ? .bool(true) : .null])])
    }

    /// A refusal of the Enterprise-only session or refresh-token endpoints that is the tenant's
    /// plan, not the application's grant: any 403 but `insufficient_scope` (a missing scope,
    /// which waits for the operator like any other permission refusal). Auth0 does not publish
    /// what a lower plan gets, so only the scope refusal it does publish is told apart.
    public static func refusedByPlan(_ outcome: ProviderOutcome) -> Bool {
        guard case .refused(let failure) = outcome, failure.status == 403 else { return false }
        return failure.reason != "insufficient_scope"
    }

    /// The ids of a device credential list (an array, or the paginated object's
    /// `device_credentials`); nil when it is neither.
    public static func deviceCredentialIDs(_ value: JSONValue) -> [String]? {
        guard let list = value.arrayValue ?? value["device_credentials"]?.arrayValue else { return nil }
        return list.compactMap { $0["id"]?.stringValue }
    }

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
            userID: userID, applePrimary: userID == appleUserID(sub: sub), otherIdentities: identities.filter { !isApple($0) }.count,
            blocked: value["blocked"]?.boolValue == true, blockedBySignOut: value["app_metadata"]?[signOutMark]?.boolValue == true)
    }

    /// The first user of a search answer (an array of users) that holds the Apple identity `sub`.
    public static func user(inSearch value: JSONValue, sub: String) -> Auth0User? {
        let users = value.arrayValue ?? value["users"]?.arrayValue ?? []
        return users.lazy.compactMap { user($0, sub: sub) }.first
    }
}

/// How an Auth0 tenant lets its users be signed out.
public enum Auth0SignOut: String, Sendable, Equatable {
    /// `DELETE /api/v2/users/{id}/sessions` and `/refresh-tokens` (Enterprise plans).
    case sessionEndpoints = "session_endpoints"
    /// Every plan: each refresh token revoked through `/api/v2/device-credentials`, and the
    /// Auth0 session ended by blocking the user and lifting the block.
    case deviceCredentials = "device_credentials"

    /// What an operator reads (`doctor`, the start-up log).
    public var description: String {
        switch self {
        case .sessionEndpoints: return "the Enterprise session and refresh-token endpoints"
        case .deviceCredentials:
            return
                "refresh tokens revoked through device credentials and the Auth0 session ended by a block lifted at once (the tenant's plan refuses the Enterprise session endpoints)"
        }
    }
}

/// An Auth0 user holding an Apple identity.
public struct Auth0User: Sendable, Equatable {
    public var userID: String
    /// Apple is the user's main identity (`user_id` is `apple|<sub>`): Auth0 cannot unlink it.
    public var applePrimary: Bool
    /// Identities other than the Apple one: other ways in.
    public var otherIdentities: Int

    /// The user is blocked (`blocked: true`).
    public var blocked: Bool
    /// The block, if any, is the sign-out's own (`Auth0.signOutMark` in `app_metadata`).
    public var blockedBySignOut: Bool

    public init(userID: String, applePrimary: Bool, otherIdentities: Int, blocked: Bool = false, blockedBySignOut: Bool = false) {
        self.userID = userID
        self.applePrimary = applePrimary
        self.otherIdentities = otherIdentities
        self.blocked = blocked
        self.blockedBySignOut = blockedBySignOut
    }

    /// Apple is the only way in: deleting the user loses no other sign-in method.
    public var appleOnly: Bool { otherIdentities == 0 }
}
