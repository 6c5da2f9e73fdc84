import Testing

@testable import SiwaCore

/// Firebase's answers classified, the request bodies, the user an Apple `sub` signs in as, and
/// the service-account key file.
@Suite struct FirebaseAnswerTests {
    func classify(_ status: Int, _ body: String, headers: [String: String] = [:]) -> FirebaseAnswer {
        FirebaseAnswer.classify(status: status, headers: headers, body: Array(body.utf8), now: 1_795_809_590)
    }

    func google(_ code: Int, _ message: String, status: String? = nil) -> String {
        let extra = status.map { #","status":"\#($0)""# } ?? ""
        return #"{"error":{"code":\#(code),"message":"\#(message)"\#(extra)}}"#
    }

    @Test("a 2xx is done with its body; USER_NOT_FOUND is a user Firebase does not know")
    func doneAndUnknown() {
        #expect(classify(200, "{}") == .done(Array("{}".utf8)))
        #expect(classify(400, google(400, "USER_NOT_FOUND")) == .userNotFound(status: 400))
    }

    @Test("429, quotas and 5xx are tried later, honouring Retry-After (seconds or a date) and Google's RetryInfo")
    func retryLater() {
        #expect(
            classify(429, google(429, "QUOTA_EXCEEDED : Exceeded quota", status: "RESOURCE_EXHAUSTED"), headers: ["retry-after": "12"])
                == .retryLater(ProviderFailure(status: 429, reason: "QUOTA_EXCEEDED", retryAfter: .seconds(12))))
        #expect(
            classify(400, google(400, "TOO_MANY_ATTEMPTS_TRY_LATER"))
                == .retryLater(ProviderFailure(status: 400, reason: "TOO_MANY_ATTEMPTS_TRY_LATER")))
        #expect(classify(400, google(400, "QUOTA_EXCEEDED")) == .retryLater(ProviderFailure(status: 400, reason: "QUOTA_EXCEEDED")))
        #expect(
            classify(503, "<html>", headers: ["retry-after": "Fri, 27 Nov 2026 20:00:00 GMT"])
                == .retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(10))))
        #expect(classify(503, "<html>", headers: ["retry-after": "soon"]) == .retryLater(ProviderFailure(status: 503, reason: "http_503")))
        func quota(_ delay: String, detail: String = "RetryInfo") -> String {
            #"{"error":{"code":429,"message":"QUOTA_EXCEEDED","status":"RESOURCE_EXHAUSTED","details":["#
                + #"{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED"},"#
                + #"{"@type":"type.googleapis.com/google.rpc.\#(detail)","retryDelay":"\#(delay)"}]}}"#
        }
        #expect(
            classify(429, quota("31.500s"))
                == .retryLater(ProviderFailure(status: 429, reason: "QUOTA_EXCEEDED", retryAfter: .milliseconds(31_500))))
        // Retry-After, when both say, wins; a delay that is not a protobuf duration is ignored.
        #expect(
            classify(429, quota("31.500s"), headers: ["retry-after": "3"])
                == .retryLater(ProviderFailure(status: 429, reason: "QUOTA_EXCEEDED", retryAfter: .seconds(3))))
        for ignored in [quota("31m"), quota("-1s"), quota("1e3s"), quota("30s", detail: "Help")] {
            #expect(FirebaseAnswer.retryDelay(body: Array(ignored.utf8)) == nil, "\(ignored)")
        }
        #expect(classify(500, google(500, "INTERNAL_ERROR")) == .retryLater(ProviderFailure(status: 500, reason: "INTERNAL_ERROR")))
    }

    @Test("a 401 is a refused access token, not yet a refused credential")
    func tokenRefused() {
        #expect(
            classify(401, google(401, "Request had invalid authentication credentials.", status: "UNAUTHENTICATED"))
                == .tokenRefused(ProviderFailure(status: 401, reason: "UNAUTHENTICATED", blame: .credential)))
        #expect(classify(401, "") == .tokenRefused(ProviderFailure(status: 401, reason: "http_401", blame: .credential)))
    }

    @Test(
        "refusals say what to fix: the role, the project, or the request",
        arguments: [
            (403, "PERMISSION_DENIED", ProviderBlame.permission), (403, "INSUFFICIENT_PERMISSION", .permission),
            (400, "CONFIGURATION_NOT_FOUND", .tenant), (400, "PROJECT_NOT_FOUND", .tenant), (400, "INVALID_PROVIDER_ID", .request),
            (400, "MISSING_LOCAL_ID", .request),
        ])
    func refused(status: Int, code: String, blame: ProviderBlame) {
        #expect(classify(status, google(status, code)) == .refused(ProviderFailure(status: status, reason: code, blame: blame)))
    }

    @Test("the code is the message's head when it is one, else the status; never the message's text")
    func errorCodes() {
        #expect(FirebaseAnswer.errorCode(body: Array(google(400, "INVALID_ARGUMENT : user alice@example.com is bad").utf8)) == "INVALID_ARGUMENT")
        #expect(
            FirebaseAnswer.errorCode(body: Array(google(403, "Caller does not have permission", status: "PERMISSION_DENIED").utf8))
                == "PERMISSION_DENIED")
        #expect(FirebaseAnswer.errorCode(body: Array(google(400, "alice@example.com").utf8)) == nil)
        #expect(FirebaseAnswer.errorCode(body: Array(#"{"error":"invalid_grant"}"#.utf8)) == nil)
        guard case .refused(let failure) = classify(400, google(400, "Bad request for alice@example.com", status: "INVALID_ARGUMENT")) else {
            Issue.record("not refused")
            return
        }
        #expect("\(failure)" == "INVALID_ARGUMENT (HTTP 400) [request]")
        #expect(classify(404, "") == .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant)))
    }

    @Test("the token endpoint: a refused assertion is the credential's fault; 5xx later")
    func tokenEndpoint() {
        func token(_ status: Int, _ body: String, headers: [String: String] = [:]) -> FirebaseAnswer {
            FirebaseAnswer.classifyToken(status: status, headers: headers, body: Array(body.utf8), now: 1_000)
        }
        #expect(
            token(400, #"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#)
                == .refused(ProviderFailure(status: 400, reason: "invalid_grant", blame: .credential)))
        #expect(token(401, #"{"error":"invalid_client"}"#) == .refused(ProviderFailure(status: 401, reason: "invalid_client", blame: .credential)))
        #expect(token(400, #"{"error":"invalid_scope"}"#) == .refused(ProviderFailure(status: 400, reason: "invalid_scope", blame: .permission)))
        #expect(token(400, "oops") == .refused(ProviderFailure(status: 400, reason: "http_400", blame: .request)))
        #expect(
            token(503, "", headers: ["retry-after": "4"]) == .retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(4))))
        #expect(
            FirebaseAccessToken(answer: Array(#"{"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"}"#.utf8))
                == FirebaseAccessToken(token: "ya29.x", expiresIn: 3599))
        #expect(FirebaseAccessToken(answer: Array(#"{"access_token":"ya29.x"}"#.utf8)) == nil)
        #expect(FirebaseAccessToken(answer: Array(#"{"access_token":"","expires_in":10}"#.utf8)) == nil)
    }

    @Test("the bodies: lookup by the apple.com federated id, update with validSince as an int64 string, delete by local id")
    func bodies() {
        #expect(
            Firebase.lookupBody(sub: "001.ab.2").serialized() == #"{"federatedUserId":[{"providerId":"apple.com","rawId":"001.ab.2"}]}"#)
        #expect(
            Firebase.updateBody(localID: "u1", now: 1_800_000_000, unlink: false)
                == .object(["localId": .string("u1"), "validSince": .string("1800000000")]))
        #expect(Firebase.updateBody(localID: "u1", now: 5, unlink: true)["deleteProvider"] == .array([.string("apple.com")]))
        #expect(Firebase.deleteBody(localID: "u1") == .object(["localId": .string("u1")]))
        #expect(
            Firebase.accountsURL(base: "http://127.0.0.1:9099/identitytoolkit.googleapis.com", project: "demo-p", operation: "lookup")
                == "http://127.0.0.1:9099/identitytoolkit.googleapis.com/v1/projects/demo-p/accounts:lookup")
        #expect(
            Firebase.accountsURL(base: Firebase.defaultURL, project: "p", operation: "delete")
                == "https://identitytoolkit.googleapis.com/v1/projects/p/accounts:delete")
    }

    @Test("addresses and project ids: https://, http:// only to loopback, no query; a project id is one path segment")
    func addresses() {
        #expect(Firebase.problem(withURL: "https://identitytoolkit.googleapis.com/") == nil)
        #expect(Firebase.problem(withURL: "http://localhost:9099/identitytoolkit.googleapis.com/") == nil)
        #expect(Firebase.problem(withURL: "http://firebase.example.com/") != nil)
        #expect(Firebase.problem(withURL: "https://x.example.com/?key=1") != nil)
        #expect(Firebase.problem(withURL: "file:///etc/passwd") != nil)
        #expect(Firebase.problem(withProjectID: "my-project-123") == nil)
        #expect(Firebase.problem(withProjectID: "example.com:legacy") == nil)
        #expect(Firebase.problem(withProjectID: "") != nil)
        #expect(Firebase.problem(withProjectID: "a/b") != nil)
        #expect(Firebase.problem(withProjectID: "a?b") != nil)
    }

    @Test("the user of a lookup: the one linked to that Apple sub; Apple-only unless a password, phone, custom token or provider")
    func users() throws {
        func user(_ fields: String, sub: String = "001.a.1") throws -> FirebaseUser? {
            FirebaseUser.from(lookup: try JSONParser.parse(Array(#"{"users":[\#(fields)]}"#.utf8)), sub: sub)
        }
        let apple = #""providerUserInfo":[{"providerId":"apple.com","rawId":"001.a.1"}]"#
        #expect(try user(#"{"localId":"u1",\#(apple)}"#) == FirebaseUser(localID: "u1", providers: ["apple.com"], otherWayIn: false))
        #expect(try user(#"{"localId":"u1",\#(apple)}"#)?.appleOnly == true)
        #expect(try user(#"{"localId":"u1",\#(apple),"passwordHash":"aA=="}"#)?.appleOnly == false)
        #expect(try user(#"{"localId":"u1",\#(apple),"phoneNumber":"+15555550100"}"#)?.appleOnly == false)
        #expect(try user(#"{"localId":"u1",\#(apple),"customAuth":true}"#)?.appleOnly == false)
        let linked = #"{"localId":"u1","providerUserInfo":[{"providerId":"apple.com","rawId":"001.a.1"},{"providerId":"google.com","rawId":"g"}]}"#
        #expect(try user(linked)?.appleOnly == false)
        #expect(try user(#"{"localId":"u1",\#(apple)}"#, sub: "001.b.2") == nil)
        #expect(try user(#"{"localId":"u1","providerUserInfo":[{"providerId":"google.com","rawId":"001.a.1"}]}"#) == nil)
        #expect(try user(#"{\#(apple)}"#) == nil)
        #expect(FirebaseUser.from(lookup: .object(["kind": .string("identitytoolkit#GetAccountInfoResponse")]), sub: "001.a.1") == nil)
    }

    @Test("a key file: its fields, or what is wrong named without its value")
    func serviceAccount() throws {
        let file =
            #"{"type":"service_account","project_id":"p","private_key_id":"k1","private_key":"-----BEGIN PRIVATE KEY-----\nSECRETSECRET\n-----END PRIVATE KEY-----\n","client_email":"a@p.iam.gserviceaccount.com","token_uri":"https://oauth2.googleapis.com/token"}"#
        let account = try FirebaseServiceAccount.parse(Array(file.utf8))
        #expect(account.clientEmail == "a@p.iam.gserviceaccount.com")
        #expect(account.privateKeyID == "k1")
        #expect(account.tokenURI == "https://oauth2.googleapis.com/token")
        func refusal(_ text: String) -> FirebaseCredentialError? {
            do throws(FirebaseCredentialError) {
                _ = try FirebaseServiceAccount.parse(Array(text.utf8))
                return nil
            } catch {
                return error
            }
        }
        #expect(refusal("not json")?.reason == "not_json")
        #expect(refusal("[]")?.reason == "not_json")
        #expect(refusal(file.replacing(#""client_email""#, with: #""email""#))?.description == #"has no "client_email""#)
        #expect(refusal(file.replacing(#""k1""#, with: "7"))?.description == #"has a "private_key_id" that is not a non-empty string"#)
        let notPEM = refusal(file.replacing("-----BEGIN PRIVATE KEY-----", with: ""))
        #expect(notPEM?.reason == "invalid_private_key")
        #expect(notPEM?.description.contains("SECRET") == false)
        #expect(refusal(file.replacing("a@p.iam", with: "a p.iam"))?.description == #"has a "client_email" that is not an address"#)
        #expect(refusal(file.replacing(#""service_account""#, with: #""external_account""#))?.reason == "not_service_account")
    }

    @Test("the assertion: RS256, iss and sub the account, aud the token URI, the scope, an hour")
    func assertion() throws {
        let account = FirebaseServiceAccount(
            clientEmail: "a@p.iam.gserviceaccount.com", privateKeyPEM: "", privateKeyID: "k1", tokenURI: "https://oauth2.googleapis.com/token")
        let input = account.assertionSigningInput(now: 1_800_000_000)
        let jws = try CompactJWS.parse(FirebaseServiceAccount.assemble(signingInput: input, signature: [1, 2, 3]))
        #expect(jws.header == ["alg": .string("RS256"), "typ": .string("JWT"), "kid": .string("k1")])
        #expect(jws.claims["iss"]?.stringValue == "a@p.iam.gserviceaccount.com")
        #expect(jws.claims["sub"]?.stringValue == "a@p.iam.gserviceaccount.com")
        #expect(jws.claims["aud"]?.stringValue == "https://oauth2.googleapis.com/token")
        #expect(jws.claims["scope"]?.stringValue == "https://www.googleapis.com/auth/cloud-platform")
        #expect(jws.claims["iat"]?.int64Value == 1_800_000_000)
        #expect(jws.claims["exp"]?.int64Value == 1_800_003_600)
        #expect(jws.signature == [1, 2, 3])
        #expect(
            FirebaseServiceAccount.tokenRequestBody(assertion: "a.b.c")
                == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c")
    }
}
