import Foundation
import SiwaCore
import SiwaCrypto
import SiwaFetch
import Testing

/// The fake Apple itself, over real HTTP with libcurl: it must accept what Apple accepts and refuse
/// what Apple refuses, or the AppleClient tests prove nothing.
@Suite struct FakeAppleTests {
    typealias S = AppleTestSetup

    func post(
        _ fake: FakeApple, _ path: String, _ fields: [(String, String)],
        contentType: String = FormURLEncoding.contentType, timeout: Double = 10, bearer: String? = nil
    ) throws -> FetchResponse {
        try Fetcher.perform(
            FetchRequest(
                url: fake.baseURL + path, method: "POST",
                headers: ["Content-Type: \(contentType)"] + (bearer.map { ["Authorization: Bearer \($0)"] } ?? []),
                body: Array(FormURLEncoding.encode(fields).utf8), totalTimeout: .seconds(timeout),
                allowedSchemes: [.http]))
    }

    func tokenFields(code: String, secret: String, clientID: String = S.clientID, redirectURI: String? = nil) -> [(String, String)] {
        var fields = [("client_id", clientID), ("client_secret", secret), ("code", code), ("grant_type", "authorization_code")]
        if let redirectURI { fields.append(("redirect_uri", redirectURI)) }
        return fields
    }

    func errorOf(_ response: FetchResponse) -> String? { AppleErrorCode.parse(response.body)?.description }

    @Test func exchangeThenRevoke() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        fake.addCode(
            "c.code-1",
            user: .init(
                sub: "001234.fake.0001", email: "x@privaterelay.appleid.com",
                isPrivateEmail: true, nonce: "nonce-1", redirectURI: "https://app.example/cb"))
        let secret = try S.secret()
        let response = try post(fake, "/auth/token", tokenFields(code: "c.code-1", secret: secret, redirectURI: "https://app.example/cb"))
        #expect(response.status == 200)
        let tokens = try AppleTokenResponse.parse(response.body)
        #expect(tokens.tokenType == "Bearer" && tokens.expiresIn == 3600)
        #expect(fake.issuedRefreshTokens == [tokens.refreshToken: S.clientID])

        // The id_token verifies against the JWKS the fake serves.
        let jwks = try Fetcher.perform(FetchRequest(url: fake.jwksURL, allowedSchemes: [.http]))
        #expect(jwks.status == 200)
        let claims = try IDTokenVerifier().verify(
            token: tokens.idToken, clientID: S.clientID, nonce: "nonce-1",
            now: S.wallClock(), checkSignature: S.signatureCheck(jwks: jwks.body))
        #expect(claims.sub == "001234.fake.0001" && claims.email == "x@privaterelay.appleid.com")
        #expect(claims.isPrivateEmail == true && claims.emailVerified == true)

        // Codes are single-use.
        let again = try post(fake, "/auth/token", tokenFields(code: "c.code-1", secret: secret, redirectURI: "https://app.example/cb"))
        #expect(again.status == 400 && errorOf(again) == "invalid_grant")

        let revoke = try post(
            fake, "/auth/revoke",
            [
                ("client_id", S.clientID), ("client_secret", secret),
                ("token", tokens.refreshToken), ("token_type_hint", "refresh_token"),
            ])
        #expect(revoke.status == 200)
        #expect(fake.revokedTokens == [tokens.refreshToken])

        let calls = fake.calls
        #expect(calls.map(\.path) == ["/auth/token", "/auth/keys", "/auth/token", "/auth/revoke"])
        #expect(calls.map(\.status) == [200, 200, 400, 200])
        #expect(calls[0].form?["client_secret"] == secret && calls[0].form?["redirect_uri"] == "https://app.example/cb")
        #expect(calls[3].form?["token"] == tokens.refreshToken)
        #expect(calls.allSatisfy { $0.secretProblem == nil })
    }

    @Test func refusesBadClientSecrets() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let now = S.wallClock()
        let day: Int64 = 86_400
        // A 181-day secret cannot be built with ClientSecret; assemble it by hand.
        let longClaims: [String: JSONValue] = [
            "iss": .string(S.teamID), "aud": .string("https://appleid.apple.com"),
            "sub": .string(S.clientID), "iat": .number(Double(now)),
            "exp": .number(Double(now + 181 * day)),
        ]
        let longInput =
            Base64URL.encode(Array(#"{"alg":"ES256","kid":"KEY7654321"}"#.utf8)) + "."
            + Base64URL.encode(Array(JSONValue.object(longClaims).serialized().utf8))
        let long = longInput + "." + Base64URL.encode(try S.teamKey.signES256(message: Array(longInput.utf8)))
        let valid = try S.secret()
        let parts = valid.split(separator: ".")
        let cases: [(String, String)] = [
            (try S.secret(key: ECPrivateKey.generate()), "bad signature"),
            (try S.secret(keyID: "OTHERKEY00"), "kid is not the key id"),
            (try S.secret(teamID: "OTHERTEAM0"), "iss is not the team id"),
            (try S.secret(clientID: S.otherClientID), "sub is not the client id"),
            (try S.secret(now: now - 31 * day, lifetime: 30 * day), "expired"),
            (try S.secret(now: now + 3600), "iat is in the future"),
            (long, "exp more than 180 days after iat"),
            (
                parts[0] + "." + parts[1] + "." + Base64URL.encode(try S.teamKey.signES256DER(message: Array((parts[0] + "." + parts[1]).utf8))),
                "bad signature"
            ),  // DER instead of JOSE
            ("not-a-jwt", "not a compact JWS"),
        ]
        for (secret, problem) in cases {
            let r = try post(fake, "/auth/token", tokenFields(code: "unused", secret: secret))
            #expect(r.status == 400 && errorOf(r) == "invalid_client", "\(problem)")
            #expect(fake.calls.last?.secretProblem == problem)
        }
        let missing = try post(fake, "/auth/token", [("client_id", S.clientID), ("code", "x"), ("grant_type", "authorization_code")])
        #expect(errorOf(missing) == "invalid_client" && fake.calls.last?.secretProblem == "missing")
        let unknownClient = try post(
            fake, "/auth/token",
            tokenFields(
                code: "x", secret: try S.secret(clientID: "com.unknown"),
                clientID: "com.unknown"))
        #expect(errorOf(unknownClient) == "invalid_client")
    }

    @Test func refusesMalformedRequests() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let secret = try S.secret()
        fake.addCode("c.redirect", user: .init(sub: "s", redirectURI: "https://app.example/cb"))
        let json = try post(fake, "/auth/token", tokenFields(code: "x", secret: secret), contentType: "application/json")
        #expect(errorOf(json) == "invalid_request")
        var fields = tokenFields(code: "x", secret: secret)
        fields[3] = ("grant_type", "password")
        #expect(errorOf(try post(fake, "/auth/token", fields)) == "unsupported_grant_type")
        #expect(
            errorOf(try post(fake, "/auth/token", Array(tokenFields(code: "x", secret: secret).filter { $0.0 != "code" })))
                == "invalid_request")
        #expect(
            errorOf(try post(fake, "/auth/token", tokenFields(code: "c.redirect", secret: secret, redirectURI: "https://evil/cb")))
                == "invalid_grant")
        #expect(
            errorOf(try post(fake, "/auth/revoke", [("client_id", S.clientID), ("client_secret", secret), ("token", "r.1")]))
                == "invalid_request")
        #expect(fake.revokedTokens.isEmpty)
    }

    @Test func forcedAnswers() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let secret = try S.secret()
        fake.addCode("c.1", user: .init(sub: "s"))
        fake.answerToken(.status(503, #"{"error":"temporarily_unavailable"}"#))
        #expect(try post(fake, "/auth/token", tokenFields(code: "c.1", secret: secret)).status == 503)
        fake.answerToken(.invalidClient)
        #expect(errorOf(try post(fake, "/auth/token", tokenFields(code: "c.1", secret: secret))) == "invalid_client")
        fake.answerRevoke(.invalidGrant)
        let revoke = try post(
            fake, "/auth/revoke",
            [
                ("client_id", S.clientID), ("client_secret", secret),
                ("token", "r.1"), ("token_type_hint", "refresh_token"),
            ])
        #expect(revoke.status == 400 && errorOf(revoke) == "invalid_grant")
        // The checks still ran and were recorded.
        #expect(fake.calls.allSatisfy { $0.secretProblem == nil })

        fake.answerToken(.hang)
        do {
            _ = try post(fake, "/auth/token", tokenFields(code: "c.1", secret: secret), timeout: 0.5)
            Issue.record("a hung call returned")
        } catch let error as FetchError {
            #expect(error.code == .timedOut)
        }
        #expect(eventually { fake.hungCalls == 1 })
        #expect(fake.calls.last?.status == 0)
    }
}
