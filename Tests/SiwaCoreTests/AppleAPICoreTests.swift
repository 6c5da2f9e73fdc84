import Testing

@testable import SiwaCore

// MARK: - Client secret

@Suite struct ClientSecretTests {
    static let now: Int64 = 1_752_572_200

    @Test func headerAndClaims() throws {
        let secret = try ClientSecret(teamID: "TEAM123456", keyID: "KEY1234567", clientID: "com.example.app", now: Self.now)
        #expect(secret.header == ["alg": .string("ES256"), "kid": .string("KEY1234567")])
        #expect(
            secret.claims == [
                "iss": .string("TEAM123456"), "iat": .number(Double(Self.now)),
                "exp": .number(Double(Self.now + 30 * 86_400)), "aud": .string("https://appleid.apple.com"),
                "sub": .string("com.example.app"),
            ])
        // The signing input parses back as a JWS with the same header and claims.
        let token = secret.assemble(signature: [UInt8](repeating: 7, count: 64))
        let jws = try CompactJWS.parse(token)
        #expect(jws.header == secret.header)
        #expect(jws.claims == secret.claims)
        #expect(jws.signingInput == secret.signingInput)
        #expect(jws.signature == [UInt8](repeating: 7, count: 64))
    }

    @Test func lifetimeIsBoundedBy180Days() throws {
        let max = try ClientSecret(teamID: "T", keyID: "K", clientID: "C", now: Self.now, lifetime: 180 * 86_400)
        #expect(max.expiresAt - max.issuedAt == 15_552_000)
        #expect(ClientSecret.defaultLifetime <= ClientSecret.maxLifetime)
        for bad: Int64 in [0, -1, 180 * 86_400 + 1, .max] {
            #expect(throws: ClientSecretError.invalidLifetime) {
                try ClientSecret(teamID: "T", keyID: "K", clientID: "C", now: Self.now, lifetime: bad)
            }
        }
        #expect(throws: ClientSecretError.invalidLifetime) {
            try ClientSecret(teamID: "T", keyID: "K", clientID: "C", now: .max - 10, lifetime: 100)
        }
    }

    @Test func identifiersRequired() {
        #expect(throws: ClientSecretError.missingIdentifier) { try ClientSecret(teamID: "", keyID: "K", clientID: "C", now: 0) }
        #expect(throws: ClientSecretError.missingIdentifier) { try ClientSecret(teamID: "T", keyID: "", clientID: "C", now: 0) }
        #expect(throws: ClientSecretError.missingIdentifier) { try ClientSecret(teamID: "T", keyID: "K", clientID: "", now: 0) }
    }

    @Test func renewalPolicy() {
        let policy = ClientSecretRenewalPolicy()
        let day: Int64 = 86_400
        // 30-day secret: margin is capped at one day.
        #expect(policy.renewMargin(issuedAt: 0, expiresAt: 30 * day) == day)
        #expect(!policy.mustRenew(issuedAt: 0, expiresAt: 30 * day, now: 0))
        #expect(!policy.mustRenew(issuedAt: 0, expiresAt: 30 * day, now: 29 * day - 1))
        #expect(policy.mustRenew(issuedAt: 0, expiresAt: 30 * day, now: 29 * day))
        #expect(policy.mustRenew(issuedAt: 0, expiresAt: 30 * day, now: 31 * day))
        // Clock set back before iat.
        #expect(policy.mustRenew(issuedAt: 100, expiresAt: 30 * day, now: 99))
        // Short secrets: 10% of the lifetime.
        #expect(policy.renewMargin(issuedAt: 0, expiresAt: 1000) == 100)
        #expect(policy.renewMargin(issuedAt: 0, expiresAt: 5) == 1)
    }

    @Test func cacheIsKeyedByClientID() {
        var cache = ClientSecretCache()
        let entry = ClientSecretCache.Entry(token: "a.b.c", issuedAt: 0, expiresAt: 30 * 86_400)
        cache.store(entry, for: "app.one")
        #expect(cache.valid(for: "app.one", now: 10) == entry)
        #expect(cache.valid(for: "app.two", now: 10) == nil)
        #expect(cache.valid(for: "app.one", now: 29 * 86_400) == nil)
        cache.remove(clientID: "app.one")
        #expect(cache.valid(for: "app.one", now: 10) == nil)
    }
}

// MARK: - Form encoding

@Suite struct FormURLEncodingTests {
    @Test func encodesReservedCharacters() {
        let body = FormURLEncoding.encode([
            ("client_id", "com.example.app"), ("redirect_uri", "https://x.example/cb?a=1&b=2"),
            ("text", "a b+c~é*-._"), ("empty", ""),
        ])
        #expect(
            body == "client_id=com.example.app&redirect_uri=https%3A%2F%2Fx.example%2Fcb%3Fa%3D1%26b%3D2"
                + "&text=a+b%2Bc%7E%C3%A9*-._&empty=")
    }

    @Test func roundTrip() {
        let fields = [("a", "1"), ("jwt", "eyJ.x-y_z.sig"), ("weird name", "&=+% \u{0}\u{1F600}"), ("a", "2")]
        let decoded = FormURLEncoding.decode(Array(FormURLEncoding.encode(fields).utf8))
        #expect(decoded?.map(\.0) == fields.map(\.0))
        #expect(decoded?.map(\.1) == fields.map(\.1))
        #expect(FormURLEncoding.decodeUnique(Array("a=1&a=2".utf8)) == nil)
        #expect(FormURLEncoding.decodeUnique(Array("a=1&&b&c=%41".utf8)) == ["a": "1", "b": "", "c": "A"])
    }

    @Test func rejectsMalformedEscapes() {
        for bad in ["a=%", "a=%4", "a=%zz", "a=%4g", "%=1", "a=%C3"] {
            #expect(FormURLEncoding.decode(Array(bad.utf8)) == nil, "\(bad)")
        }
        #expect(FormURLEncoding.decode([])?.isEmpty == true)
    }
}

// MARK: - /auth/token responses

@Suite struct AppleTokenResponseTests {
    @Test func parsesSuccess() throws {
        let body = #"{"access_token":"a.b","token_type":"Bearer","expires_in":3600,"refresh_token":"r.1.x","id_token":"h.c.s","extra":1}"#
        let r = try AppleTokenResponse.parse(Array(body.utf8))
        #expect(
            r
                == AppleTokenResponse(
                    accessToken: "a.b", tokenType: "Bearer", expiresIn: 3600,
                    refreshToken: "r.1.x", idToken: "h.c.s"))
        let minimal = try AppleTokenResponse.parse(Array(#"{"refresh_token":"r","id_token":"i"}"#.utf8))
        #expect(minimal.accessToken == nil && minimal.expiresIn == nil)
    }

    @Test func refusesUnusableBodies() {
        let cases: [(String, AppleResponseError)] = [
            ("", .malformedJSON), ("[]", .malformedJSON), ("<html>", .malformedJSON),
            (#"{"refresh_token":"r"}"#, .missingIDToken), (#"{"refresh_token":"r","id_token":""}"#, .missingIDToken),
            (#"{"id_token":"i"}"#, .missingRefreshToken), (#"{"id_token":"i","refresh_token":5}"#, .missingRefreshToken),
            (#"{"id_token":"i","refresh_token":"r","expires_in":"3600"}"#, .malformedField),
            (#"{"id_token":"i","refresh_token":"r","expires_in":1.5}"#, .malformedField),
            (#"{"id_token":"i","refresh_token":"r","token_type":7}"#, .malformedField),
        ]
        for (body, error) in cases {
            #expect(throws: error, "\(body)") { try AppleTokenResponse.parse(Array(body.utf8)) }
        }
    }

    @Test func parsesRefreshValidation() throws {
        let full = #"{"access_token":"a","token_type":"Bearer","expires_in":3600,"id_token":"h.c.s"}"#
        #expect(try AppleRefreshResponse.parse(Array(full.utf8)) == AppleRefreshResponse(idToken: "h.c.s"))
        #expect(try AppleRefreshResponse.parse(Array(#"{"access_token":"a"}"#.utf8)).idToken == nil)
        #expect(try AppleRefreshResponse.parse(Array(#"{"access_token":"a","id_token":null}"#.utf8)).idToken == nil)
        let bad: [(String, AppleResponseError)] = [
            ("", .malformedJSON), ("[1]", .malformedJSON), (#"{"token_type":"Bearer"}"#, .malformedField),
            (#"{"access_token":""}"#, .malformedField), (#"{"access_token":"a","id_token":7}"#, .malformedField),
            (#"{"access_token":"a","id_token":""}"#, .malformedField),
        ]
        for (body, error) in bad {
            #expect(throws: error, "\(body)") { try AppleRefreshResponse.parse(Array(body.utf8)) }
        }
    }

    @Test func parsesErrors() {
        #expect(AppleErrorCode.parse(Array(#"{"error":"invalid_grant"}"#.utf8)) == .invalidGrant)
        #expect(AppleErrorCode.parse(Array(#"{"error":"invalid_client","error_description":"x"}"#.utf8)) == .invalidClient)
        #expect(AppleErrorCode.parse(Array(#"{"error":"invalid_request"}"#.utf8)) == .invalidRequest)
        #expect(AppleErrorCode.parse(Array(#"{"error":"unsupported_grant_type"}"#.utf8)) == .unsupportedGrantType)
        #expect(AppleErrorCode.parse(Array(#"{"error":"something_new"}"#.utf8)) == .other("something_new"))
        #expect(AppleErrorCode.parse(Array(#"{"error":""}"#.utf8)) == nil)
        #expect(AppleErrorCode.parse(Array("Service Unavailable".utf8)) == nil)
        let long = String(repeating: "x", count: 500)
        #expect(AppleErrorCode.parse(Array("{\"error\":\"\(long)\"}".utf8))?.description.count == 64)
    }
}

// MARK: - id_token

@Suite struct IDTokenVerifierTests {
    static let clientID = "com.example.app"
    static let now: Int64 = 1_752_572_200
    static let good: [UInt8] = Array("good-signature".utf8)

    static var claims: [String: JSONValue] {
        [
            "iss": .string("https://appleid.apple.com"), "aud": .string(clientID), "exp": .number(Double(now + 600)),
            "iat": .number(Double(now)), "sub": .string("001234.abcdef.0001"), "email": .string("x@privaterelay.appleid.com"),
            "is_private_email": .string("true"), "email_verified": .bool(true), "nonce": .string("n-0S6_WzA2Mj"),
            "auth_time": .number(Double(now)), "nonce_supported": .bool(true),
        ]
    }

    static func token(
        header: [String: JSONValue] = ["alg": .string("RS256"), "kid": .string("k1")],
        claims: [String: JSONValue] = IDTokenVerifierTests.claims, signature: [UInt8] = good
    ) -> String {
        Fixture.token(header: header, claims: claims, signature: signature)
    }

    static func check(_ kid: String, _ input: [UInt8], _ signature: [UInt8]) -> SignatureCheck {
        guard kid == "k1" else { return .unknownKey }
        return signature == good ? .valid : .invalid
    }

    func verify(_ token: String, nonce: String? = nil, now: Int64 = IDTokenVerifierTests.now) throws(IDTokenError) -> IDTokenClaims {
        try IDTokenVerifier().verify(token: token, clientID: Self.clientID, nonce: nonce, now: now, checkSignature: Self.check)
    }

    func expect(
        _ error: IDTokenError, claims change: (inout [String: JSONValue]) -> Void, nonce: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var c = Self.claims
        change(&c)
        #expect(throws: error, sourceLocation: sourceLocation) { try verify(Self.token(claims: c), nonce: nonce) }
    }

    @Test func acceptsAppleShapedToken() throws {
        let claims = try verify(Self.token(), nonce: "n-0S6_WzA2Mj")
        #expect(
            claims
                == IDTokenClaims(
                    sub: "001234.abcdef.0001", audience: Self.clientID, email: "x@privaterelay.appleid.com",
                    isPrivateEmail: true, emailVerified: true, issuedAt: Self.now, expiresAt: Self.now + 600,
                    authTime: Self.now))
        // Without an expected nonce the claim is not consulted.
        var c = Self.claims
        c["nonce"] = nil
        c["email"] = nil
        c["is_private_email"] = .bool(false)
        c["email_verified"] = .string("false")
        let minimal = try verify(Self.token(claims: c))
        #expect(minimal.email == nil && minimal.isPrivateEmail == false && minimal.emailVerified == false)
    }

    @Test func headerAndSignature() {
        #expect(throws: IDTokenError.malformedToken) { try verify("a.b") }
        #expect(throws: IDTokenError.malformedToken) { try verify("not a token at all") }
        #expect(throws: IDTokenError.unsupportedAlgorithm) {
            try verify(Self.token(header: ["alg": .string("ES256"), "kid": .string("k1")]))
        }
        #expect(throws: IDTokenError.unsupportedAlgorithm) { try verify(Self.token(header: ["alg": .string("none"), "kid": .string("k1")])) }
        #expect(throws: IDTokenError.missingKid) { try verify(Self.token(header: ["alg": .string("RS256")])) }
        #expect(throws: IDTokenError.unknownKid) { try verify(Self.token(header: ["alg": .string("RS256"), "kid": .string("k2")])) }
        #expect(throws: IDTokenError.badSignature) { try verify(Self.token(signature: Array("forged".utf8))) }
        #expect(throws: IDTokenError.malformedToken) {
            try verify(Self.token(header: ["alg": .string("RS256"), "kid": .string("k1"), "crit": .array([.string("x")])]))
        }
        #expect(throws: IDTokenError.keysUnavailable) {
            try IDTokenVerifier().verify(token: Self.token(), clientID: Self.clientID, nonce: nil, now: Self.now) { _, _, _ in .keysUnavailable }
        }
    }

    @Test("a key trusted for some client ids only (the --dev key) cannot sign an id_token for another client id")
    func keyRestrictedToAudiences() throws {
        let devAudience = "com.example.siwa-notify.dev"
        let verifier = IDTokenVerifier(keyAudiences: ["dev-kid": [devAudience]])
        let anyKey: (String, [UInt8], [UInt8]) -> SignatureCheck = { _, _, _ in .valid }
        let devHeader: [String: JSONValue] = ["alg": .string("RS256"), "kid": .string("dev-kid")]
        // Dev-signed for a real client id: refused, whatever the signature says.
        #expect(throws: IDTokenError.wrongAudience) {
            try verifier.verify(token: Self.token(header: devHeader), clientID: Self.clientID, nonce: nil, now: Self.now, checkSignature: anyKey)
        }
        // Dev-signed for the dev audience, and another key for the real client id: accepted.
        var claims = Self.claims
        claims["aud"] = .string(devAudience)
        let dev = try verifier.verify(
            token: Self.token(header: devHeader, claims: claims), clientID: devAudience, nonce: nil, now: Self.now, checkSignature: anyKey)
        #expect(dev.audience == devAudience)
        #expect(
            try verifier.verify(token: Self.token(), clientID: Self.clientID, nonce: nil, now: Self.now, checkSignature: Self.check).sub
                == "001234.abcdef.0001")
        // The rule is the notifications' rule.
        #expect(!VerificationPolicy.key("dev-kid", maySignFor: Self.clientID, in: verifier.keyAudiences))
        #expect(VerificationPolicy.key("k1", maySignFor: Self.clientID, in: verifier.keyAudiences))
    }

    @Test func claimChecks() {
        expect(.wrongIssuer) { $0["iss"] = .string("https://appleid.apple.com/") }
        expect(.wrongIssuer) { $0["iss"] = nil }
        expect(.wrongAudience) { $0["aud"] = .string("com.example.other") }
        expect(.wrongAudience) { $0["aud"] = .array([.string(Self.clientID)]) }
        // Byte-exact: a canonically equivalent but differently encoded audience is refused.
        expect(.wrongAudience) { $0["aud"] = .string("com.example.app\u{0301}") }
        expect(.missingExpiry) { $0["exp"] = nil }
        expect(.missingExpiry) { $0["exp"] = .string("1752572800") }
        expect(.expired) { $0["exp"] = .number(Double(Self.now - 61)) }
        expect(.missingIssuedAt) { $0["iat"] = nil }
        expect(.issuedInFuture) { $0["iat"] = .number(Double(Self.now + 61)) }
        expect(.nonceMismatch, claims: { _ in }, nonce: "other")
        expect(.nonceMismatch, claims: { $0["nonce"] = nil }, nonce: "n-0S6_WzA2Mj")
        expect(.missingSub) { $0["sub"] = nil }
        expect(.missingSub) { $0["sub"] = .string("") }
        expect(.missingSub) { $0["sub"] = .string(String(repeating: "s", count: 256)) }
        expect(.malformedClaims) { $0["email"] = .number(1) }
        expect(.malformedClaims) { $0["is_private_email"] = .string("yes") }
        expect(.malformedClaims) { $0["email_verified"] = .number(1) }
    }

    @Test func maxAgeRefusesOldTokensAndSignInTimeFallsBackToIat() throws {
        var c = Self.claims
        c["iat"] = .number(Double(Self.now - 3600))
        c["auth_time"] = nil
        let verifier = IDTokenVerifier()
        let atLimit = try verifier.verify(
            token: Self.token(claims: c), clientID: Self.clientID, nonce: nil, now: Self.now, maxAgeSeconds: 3600,
            checkSignature: Self.check)
        #expect(atLimit.authTime == nil && atLimit.signedInAt == Self.now - 3600)
        #expect(throws: IDTokenError.tooOld) {
            try verifier.verify(
                token: Self.token(claims: c), clientID: Self.clientID, nonce: nil, now: Self.now + 1, maxAgeSeconds: 3600,
                checkSignature: Self.check)
        }
        // Without a limit the same token verifies.
        _ = try verify(Self.token(claims: c), now: Self.now + 1)
    }

    @Test func authTimeAndTransferSub() throws {
        var c = Self.claims
        c["auth_time"] = .number(Double(Self.now - 5))
        c["transfer_sub"] = .string("000111.transfer.0001")
        let claims = try verify(Self.token(claims: c))
        #expect(claims.signedInAt == Self.now - 5 && claims.transferSub == "000111.transfer.0001")
        expect(.malformedClaims) { $0["auth_time"] = .string("soon") }
        expect(.malformedClaims) { $0["transfer_sub"] = .number(1) }
        expect(.malformedClaims) { $0["transfer_sub"] = .string("") }
    }

    @Test func clockSkewIsAllowed() throws {
        var c = Self.claims
        c["exp"] = .number(Double(Self.now - 60))
        c["iat"] = .number(Double(Self.now + 60))
        _ = try verify(Self.token(claims: c))
    }

    @Test func errorCodesAreStable() {
        #expect(
            IDTokenError.allCases.map(\.rawValue) == [
                "malformed_token", "unsupported_algorithm", "missing_kid", "unknown_kid", "keys_unavailable", "bad_signature",
                "wrong_issuer", "wrong_audience", "missing_exp", "expired", "missing_iat", "issued_in_future", "nonce_mismatch",
                "missing_sub", "malformed_claims", "issued_too_long_ago",
            ])
    }
}
