import Testing

@testable import SiwaCore

/// The answers of hosted providers' JSON admin APIs, and Auth0's own readings of them.
@Suite struct ProviderAnswerTests {
    func classify(
        _ status: Int, code: String? = nil, headers: [String: String] = [:], body: String = "",
        blame: (Int, [UInt8]) -> ProviderBlame? = { _, _ in nil }
    ) -> ProviderAnswer {
        ProviderAnswer.classify(status: status, headers: headers, body: Array(body.utf8), code: code, now: 1_000, blame: blame)
    }

    @Test("a 2xx is success with its body; a 404 is not found")
    func successAndNotFound() {
        #expect(classify(200, body: "[]") == .success(Array("[]".utf8)))
        #expect(classify(204) == .success([]))
        #expect(classify(404, code: "inexistent_user") == .notFound)
    }

    @Test("429 and 5xx are retried, not before Retry-After or, when the window is spent, x-ratelimit-reset")
    func retryLater() {
        #expect(
            classify(429, code: "too_many_requests", headers: ["retry-after": " 3 "])
                == .failed(.retryLater(ProviderFailure(status: 429, reason: "too_many_requests", retryAfter: .seconds(3)))))
        #expect(
            classify(429, headers: ["x-ratelimit-reset": "1007"])
                == .failed(.retryLater(ProviderFailure(status: 429, reason: "http_429", retryAfter: .seconds(7)))))
        #expect(
            classify(429, headers: ["x-ratelimit-remaining": "0", "x-ratelimit-reset": "1007"])
                == .failed(.retryLater(ProviderFailure(status: 429, reason: "http_429", retryAfter: .seconds(7)))))
        // Calls left in the window: the reset is another limit's, not this refusal's.
        #expect(
            classify(429, headers: ["x-ratelimit-remaining": "5", "x-ratelimit-reset": "1007"])
                == .failed(.retryLater(ProviderFailure(status: 429, reason: "http_429"))))
        #expect(
            classify(503, headers: ["retry-after": "Thu, 01 Jan 1970 00:16:50 GMT"])
                == .failed(.retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(10)))))
        #expect(classify(503) == .failed(.retryLater(ProviderFailure(status: 503, reason: "http_503"))))
        #expect(classify(500, code: "internal") == .failed(.retryLater(ProviderFailure(status: 500, reason: "internal"))))
    }

    @Test("401 blames the credential, 403 the permission, other refusals the request, unless the provider's reading says")
    func refused() {
        #expect(
            classify(401, code: "authentication_invalid")
                == .failed(.refused(ProviderFailure(status: 401, reason: "authentication_invalid", blame: .credential))))
        #expect(classify(403) == .failed(.refused(ProviderFailure(status: 403, reason: "http_403", blame: .permission))))
        #expect(
            classify(400, code: "form_param_missing")
                == .failed(.refused(ProviderFailure(status: 400, reason: "form_param_missing", blame: .request))))
        #expect(classify(403, blame: { _, _ in .tenant }) == .failed(.refused(ProviderFailure(status: 403, reason: "http_403", blame: .tenant))))
    }

    @Test("an error code is kept only when it is a short token: free text could quote a user")
    func safeCode() {
        #expect(ProviderAnswer.safeCode("insufficient_scope") == "insufficient_scope")
        #expect(ProviderAnswer.safeCode("Not Found") == nil)
        #expect(ProviderAnswer.safeCode("user jane@example.com") == nil)
        #expect(ProviderAnswer.safeCode(String(repeating: "a", count: 65)) == nil)
        #expect(ProviderAnswer.safeCode("") == nil)
        #expect(
            classify(400, code: "The user apple|001 does not exist")
                == .failed(.refused(ProviderFailure(status: 400, reason: "http_400", blame: .request))))
    }

    @Test("a path segment keeps an Auth0 user id in one piece")
    func pathSegment() {
        #expect(ProviderAnswer.pathSegment("apple|001234.abc_DEF-9~") == "apple%7C001234.abc_DEF-9~")
        #expect(ProviderAnswer.pathSegment("a/b c") == "a%2Fb%20c")
        #expect(ProviderAnswer.base("https://api.clerk.com/v1//") == "https://api.clerk.com/v1")
    }

    @Test("Auth0: the Apple user's id, the search for a linked identity, the error code of either API")
    func auth0Names() {
        #expect(Auth0.appleUserID(sub: "001.abc.002") == "apple|001.abc.002")
        #expect(Auth0.audience(domain: "t.eu.auth0.com") == "https://t.eu.auth0.com/api/v2/")
        #expect(Auth0.searchQuery(sub: "001.abc.002") == #"identities.user_id:"001.abc.002" AND identities.provider:"apple""#)
        #expect(Auth0.luceneQuoted(#"a"b\c"#) == #""a\"b\\c""#)
        #expect(
            Auth0.errorCode(Array(#"{"statusCode":403,"error":"Forbidden","message":"m","errorCode":"insufficient_scope"}"#.utf8))
                == "insufficient_scope")
        #expect(Auth0.errorCode(Array(#"{"statusCode":401,"error":"Unauthorized","message":"Invalid token"}"#.utf8)) == nil)
        #expect(Auth0.errorCode(Array(#"{"error":"access_denied","error_description":"Unauthorized"}"#.utf8)) == "access_denied")
        #expect(Auth0.errorCode(Array("<html>".utf8)) == nil)
    }

    @Test("Auth0: a refused token blames the tenant only when it has no such API")
    func auth0TokenBlame() {
        #expect(
            Auth0.tokenBlame(
                status: 403,
                body: Array(#"{"error":"access_denied","error_description":"Service not enabled within domain: https://x/api/v2/"}"#.utf8)) == .tenant
        )
        #expect(
            Auth0.tokenBlame(status: 403, body: Array(#"{"error":"access_denied","error_description":"Client is not authorized to access"}"#.utf8))
                == nil)
        #expect(
            Auth0.tokenBlame(status: 401, body: Array(#"{"error":"access_denied","error_description":"Service not enabled within domain"}"#.utf8))
                == nil)
    }

    @Test("Auth0: a token answer needs a token and a positive lifetime")
    func auth0Token() {
        #expect(Auth0.token(Array(#"{"access_token":"t","token_type":"Bearer","expires_in":86400}"#.utf8))! == ("t", .seconds(86400)))
        // An absurd lifetime counts as a year: renewed then, and no overflow of the moment it ends.
        #expect(Auth0.token(Array(#"{"access_token":"t","expires_in":1e30}"#.utf8))?.lifetime == .seconds(365 * 86_400))
        #expect(Auth0.token(Array(#"{"access_token":"t","expires_in":0}"#.utf8)) == nil)
        #expect(Auth0.token(Array(#"{"access_token":"","expires_in":60}"#.utf8)) == nil)
        #expect(Auth0.token(Array(#"{"expires_in":60}"#.utf8)) == nil)
    }

    @Test("Auth0: a user holds the Apple identity as its main one or linked; other identities are other ways in")
    func auth0User() throws {
        func user(_ json: String, _ sub: String = "s1") throws -> Auth0User? { Auth0.user(try JSONParser.parse(json), sub: sub) }
        let appleOnly = try user(#"{"user_id":"apple|s1","identities":[{"provider":"apple","user_id":"s1","connection":"apple"}]}"#)
        #expect(appleOnly == Auth0User(userID: "apple|s1", applePrimary: true, otherIdentities: 0))
        #expect(appleOnly?.appleOnly == true)
        let linked = try user(#"{"user_id":"auth0|1","identities":[{"provider":"auth0","user_id":"1"},{"provider":"apple","user_id":"s1"}]}"#)
        #expect(linked == Auth0User(userID: "auth0|1", applePrimary: false, otherIdentities: 1))
        #expect(linked?.appleOnly == false)
        // Another Apple identity, or the same id at another provider, is not this one.
        #expect(try user(#"{"user_id":"apple|s2","identities":[{"provider":"apple","user_id":"s2"}]}"#) == nil)
        #expect(try user(#"{"user_id":"google-oauth2|s1","identities":[{"provider":"google-oauth2","user_id":"s1"}]}"#) == nil)
        #expect(try user(#"{"user_id":"apple|s1"}"#) == nil)
        let search = try JSONParser.parse(
            #"[{"user_id":"google-oauth2|9","identities":[{"provider":"google-oauth2","user_id":"s1"}]},{"user_id":"auth0|1","identities":[{"provider":"auth0","user_id":"1"},{"provider":"apple","user_id":"s1"}]}]"#
        )
        #expect(Auth0.user(inSearch: search, sub: "s1")?.userID == "auth0|1")
        #expect(Auth0.user(inSearch: try JSONParser.parse(#"{"users":[],"total":0}"#), sub: "s1") == nil)
    }

    /// A Clerk user with the Apple account `eac_1` of `s1` (identification `idn_apple`), its
    /// address linked to it as Clerk links (by the identification), and nothing else; `changes`
    /// replaces fields (JSON text).
    func clerkUser(_ changes: [String: String] = [:]) throws -> ClerkUser? {
        var user: [String: JSONValue] = [
            "id": .string("user_1"), "password_enabled": .bool(false),
            "external_accounts": try JSONParser.parse(
                #"[{"id":"eac_1","provider":"oauth_apple","identification_id":"idn_apple","provider_user_id":"s1"}]"#),
            "email_addresses": try JSONParser.parse(#"[{"id":"idn_1","linked_to":[{"type":"oauth_apple","id":"idn_apple"}]}]"#),
        ]
        for field in ["phone_numbers", "web3_wallets", "passkeys", "saml_accounts", "enterprise_accounts"] { user[field] = .array([]) }
        for (field, json) in changes { user[field] = try JSONParser.parse(json) }
        return Clerk.user(.object(user), sub: "s1")
    }

    @Test("Clerk: the user of the Apple account; Apple is its only way in unless anything else can sign it in")
    func clerkUserWaysIn() throws {
        #expect(try clerkUser() == ClerkUser(userID: "user_1", externalAccountID: "eac_1", appleOnly: true))
        #expect(try clerkUser(["email_addresses": "[]"])?.appleOnly == true)
        #expect(try clerkUser(["password_enabled": "true"])?.appleOnly == false)
        for field in ["phone_numbers", "passkeys", "web3_wallets", "saml_accounts", "enterprise_accounts"] {
            #expect(try clerkUser([field: #"[{"id":"x"}]"#])?.appleOnly == false, "\(field)")
        }
        let twoAccounts =
            #"[{"id":"eac_1","provider":"oauth_apple","provider_user_id":"s1"},{"id":"eac_2","provider":"oauth_google","provider_user_id":"g"}]"#
        #expect(try clerkUser(["external_accounts": twoAccounts])?.appleOnly == false)
        // An address verified on its own, or linked to another account, signs in by code or link.
        #expect(try clerkUser(["email_addresses": #"[{"id":"idn_2","linked_to":[]}]"#])?.appleOnly == false)
        #expect(try clerkUser(["email_addresses": #"[{"id":"idn_2","linked_to":[{"type":"oauth_apple","id":"idn_9"}]}]"#])?.appleOnly == false)
        // The link names the account's identification, never the account's own id; an account
        // without an identification has no address linked to it.
        #expect(try clerkUser(["email_addresses": #"[{"id":"idn_1","linked_to":[{"type":"oauth_apple","id":"eac_1"}]}]"#])?.appleOnly == false)
        #expect(
            try clerkUser(["external_accounts": #"[{"id":"eac_1","provider":"oauth_apple","provider_user_id":"s1"}]"#])?.appleOnly == false)
        // Without the password flag, not known to be Apple-only.
        let noFlag = try JSONParser.parse(#"{"id":"u","external_accounts":[{"id":"eac_1","provider":"oauth_apple","provider_user_id":"s1"}]}"#)
        #expect(Clerk.user(noFlag, sub: "s1")?.appleOnly == false)
        // Another Apple identity, or Google's account with that id, is not this one.
        #expect(try clerkUser(["external_accounts": #"[{"id":"eac_1","provider":"oauth_apple","provider_user_id":"s2"}]"#]) == nil)
        #expect(try clerkUser(["external_accounts": #"[{"id":"eac_1","provider":"oauth_google","provider_user_id":"s1"}]"#]) == nil)
    }

    @Test("Clerk: the error code of its error shape; session ids of a list")
    func clerkAnswers() throws {
        #expect(
            Clerk.errorCode(Array(#"{"errors":[{"message":"m","long_message":"l","code":"resource_not_found"}],"clerk_trace_id":"t"}"#.utf8))
                == "resource_not_found")
        #expect(Clerk.errorCode(Array(#"{"errors":[]}"#.utf8)) == nil)
        #expect(Clerk.errorCode(Array("404 page not found".utf8)) == nil)
        #expect(Clerk.sessionIDs(try JSONParser.parse(#"[{"id":"sess_1"},{"id":"sess_2"},{}]"#)) == ["sess_1", "sess_2"])
        // Every session not ended: `pending` too (signed in, session tasks not finished).
        let statuses = ["active", "pending", "revoked", "ended", "expired", "removed", "abandoned", "replaced"]
        let list = JSONValue.array(statuses.map { .object(["id": .string("sess_\($0)"), "status": .string($0)]) })
        #expect(Clerk.sessionIDs(list) == ["sess_active", "sess_pending"])
    }

    @Test("Auth0: a plan refusal is any 403 of the Enterprise endpoints but a missing scope")
    func auth0PlanRefusal() {
        func refused(_ status: Int, _ reason: String) -> ProviderOutcome {
            .refused(ProviderFailure(status: status, reason: reason, blame: .permission))
        }
        #expect(Auth0.refusedByPlan(refused(403, "http_403")))
        #expect(Auth0.refusedByPlan(refused(403, "operation_not_supported")))
        #expect(!Auth0.refusedByPlan(refused(403, "insufficient_scope")))
        #expect(!Auth0.refusedByPlan(refused(401, "http_401")))
        #expect(!Auth0.refusedByPlan(.retryLater(ProviderFailure(status: 403, reason: "http_403"))))
        #expect(!Auth0.refusedByPlan(.done([], status: 202)))
    }

    @Test("Auth0: device credential ids of either list shape; the block's body and mark; a user's block read")
    func auth0DeviceCredentialsAndBlock() throws {
        #expect(Auth0.deviceCredentialIDs(try JSONParser.parse(#"[{"id":"dcr_1","type":"refresh_token"},{"id":"dcr_2"},{}]"#)) == ["dcr_1", "dcr_2"])
        #expect(
            Auth0.deviceCredentialIDs(try JSONParser.parse(#"{"start":0,"limit":1,"total":1,"device_credentials":[{"id":"dcr_3"}]}"#)) == ["dcr_3"])
        #expect(Auth0.deviceCredentialIDs(try JSONParser.parse(#"{"error":"x"}"#)) == nil)
        #expect(Auth0.blockBody(true).serialized() == #"{"app_metadata":{"siwa_notify_sign_out":true},"blocked":true}"#)
        #expect(Auth0.blockBody(false).serialized() == #"{"app_metadata":{"siwa_notify_sign_out":null},"blocked":false}"#)
        let identities = #""user_id":"apple|s1","identities":[{"provider":"apple","user_id":"s1"}]"#
        let open = try #require(Auth0.user(try JSONParser.parse("{\(identities)}"), sub: "s1"))
        #expect(!open.blocked && !open.blockedBySignOut)
        let byAdmin = try #require(Auth0.user(try JSONParser.parse(#"{\#(identities),"blocked":true,"app_metadata":{"plan":"x"}}"#), sub: "s1"))
        #expect(byAdmin.blocked && !byAdmin.blockedBySignOut)
        let bySignOut = try #require(
            Auth0.user(try JSONParser.parse(#"{\#(identities),"blocked":true,"app_metadata":{"siwa_notify_sign_out":true}}"#), sub: "s1"))
        #expect(bySignOut.blocked && bySignOut.blockedBySignOut)
        #expect(Auth0.userFields.split(separator: ",").contains("blocked") && Auth0.userFields.split(separator: ",").contains("app_metadata"))
    }
}
