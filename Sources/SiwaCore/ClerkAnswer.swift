/// Clerk's Backend API as pure decisions: its address, how an Apple user is found and whether
/// Apple is its only way in, how an answer's error code is read.
public enum Clerk {
    public static let baseURL = "https://api.clerk.com/v1"
    /// The external account provider of Sign in with Apple.
    public static let appleProvider = "oauth_apple"
    /// Sessions read per page to revoke (the Backend API's `limit` allows up to 500).
    public static let sessionPage = 100
    /// The session statuses the Backend API documents for a session that has ended: nothing to
    /// revoke. Every other status (`active`, `pending`: signed in, session tasks not finished)
    /// can still be used or become usable, and is revoked. `GET /v1/sessions`' `status` filter
    /// cannot select `pending`, so sessions are listed unfiltered and these left out.
    public static let endedSessionStatuses: Set<String> = ["revoked", "ended", "expired", "removed", "abandoned", "replaced"]

    /// The code of the first error of a `{"errors":[{"code":…,"message":…}]}` answer.
    public static func errorCode(_ body: [UInt8]) -> String? {
        (try? JSONParser.parse(body))?["errors"]?.arrayValue?.first?["code"]?.stringValue
    }

    /// The first user of a user list whose Apple external account has provider user id `sub`.
    public static func user(inList value: JSONValue, sub: String) -> ClerkUser? {
        value.arrayValue?.lazy.compactMap { user($0, sub: sub) }.first
    }

    /// The user when one of its external accounts is the Apple identity `sub`.
    ///
    /// Apple is its only way in when nothing else can sign it in: no password, no other external,
    /// SAML or enterprise account, no passkey, no web3 wallet, no phone number, and no e-mail
    /// address other than those Clerk linked to the Apple account (an address verified on its own
    /// can sign in by code or link). Clerk links an address to the account's `identification_id`
    /// (`idn_…`, the IdentificationLink's `id`), not to the account's own `id` (`eac_…`); an
    /// account without one has no address linked to it.
    public static func user(_ value: JSONValue, sub: String) -> ClerkUser? {
        guard let id = value["id"]?.stringValue, let accounts = value["external_accounts"]?.arrayValue,
            let apple = accounts.first(where: { $0["provider"]?.stringValue == appleProvider && $0["provider_user_id"]?.stringValue == sub }),
            let accountID = apple["id"]?.stringValue
        else { return nil }
        func none(_ field: String) -> Bool { value[field]?.arrayValue?.isEmpty ?? true }
        let identification = apple["identification_id"]?.stringValue
        let emailsFromApple = (value["email_addresses"]?.arrayValue ?? []).allSatisfy { email in
            (email["linked_to"]?.arrayValue ?? []).contains {
                $0["type"]?.stringValue == appleProvider && identification != nil && $0["id"]?.stringValue == identification
            }
        }
        let appleOnly =
            value["password_enabled"]?.boolValue == false && accounts.count == 1 && none("saml_accounts") && none("enterprise_accounts")
            && none("passkeys") && none("web3_wallets") && none("phone_numbers") && emailsFromApple
        return ClerkUser(userID: id, externalAccountID: accountID, appleOnly: appleOnly)
    }

    /// The ids of the sessions of a session list that have not ended (`endedSessionStatuses`);
    /// a session without a status is taken as live.
    public static func sessionIDs(_ value: JSONValue) -> [String] {
        (value.arrayValue ?? []).compactMap { session in
            if let status = session["status"]?.stringValue, endedSessionStatuses.contains(status) { return nil }
            return session["id"]?.stringValue
        }
    }
}

/// A Clerk user with an Apple external account.
public struct ClerkUser: Sendable, Equatable {
    public var userID: String
    /// The Apple external account's id (`eac_…`).
    public var externalAccountID: String
    /// Apple is the only way in (`Clerk.user(_:sub:)` says what counts).
    public var appleOnly: Bool

    public init(userID: String, externalAccountID: String, appleOnly: Bool) {
        self.userID = userID
        self.externalAccountID = externalAccountID
        self.appleOnly = appleOnly
    }
}
