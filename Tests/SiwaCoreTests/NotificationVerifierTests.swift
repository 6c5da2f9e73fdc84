import Testing

@testable import SiwaCore

@Suite struct NotificationVerifierTests {
    let verifier = Fixture.verifier

    func verify(_ token: String, now: Int64 = Fixture.now, result: SignatureCheck = .valid) throws(RejectReason) -> VerifiedNotification {
        try verifier.verify(token: token, now: now) { _, _, _ in result }
    }

    func reason(_ token: String, now: Int64 = Fixture.now, result: SignatureCheck = .valid) -> RejectReason? {
        do {
            _ = try verify(token, now: now, result: result)
            return nil
        } catch {
            return error
        }
    }

    func reason(claims: [String: JSONValue]) -> RejectReason? { reason(Fixture.token(claims: claims)) }

    func reason(events: [String: JSONValue]) -> RejectReason? { reason(claims: Fixture.claims(events: events)) }

    // MARK: Happy path

    @Test func verifiesRealAppleShape() throws {
        let n = try verify(Fixture.token())
        #expect(n.jti == "8sIboCeUBQuZ0M7x91YKZQ")
        #expect(n.issuer == "https://appleid.apple.com")
        #expect(n.audience == Fixture.audience)
        #expect(n.issuedAt == Fixture.iat)
        #expect(n.expiresAt == Fixture.exp)
        #expect(n.event == AppleEvent(type: .consentRevoked, sub: Fixture.sub, eventTimeMillis: Fixture.eventTime))
        #expect(n.claimsJSON == JSONValue.object(Fixture.claims).serialized())
        #expect(try JSONParser.parse(n.claimsJSON) == .object(Fixture.claims))
    }

    @Test func verifiesExactAppleClaimsText() throws {
        let claimsText =
            #"{"iss":"https://appleid.apple.com","aud":"de.lunaone.sign-in-with-apple-example","exp":1752658597,"iat":1752572197,"jti":"8sIboCeUBQuZ0M7x91YKZQ","events":"{\"type\":\"consent-revoked\",\"sub\":\"000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105\",\"event_time\":1752572190719}"}"#
        let n = try verify(Fixture.token(headerJSON: Fixture.headerJSON, claimsJSON: claimsText))
        #expect(n.event.type == .consentRevoked)
        #expect(n.event.eventTimeMillis == 1_752_572_190_719)
        // Stored exactly as Apple signed it (valid JSON: the strict parser accepted it).
        #expect(n.claimsJSON == claimsText)
    }

    @Test func eventsMayBeAnObject() throws {
        var claims = Fixture.claims
        claims["events"] = .object(Fixture.eventMembers)
        let n = try verify(Fixture.token(claims: claims))
        #expect(n.event.sub == Fixture.sub)
        #expect(n.event.type == .consentRevoked)
    }

    @Test func expIsOptionalIatIsRequired() throws {
        var claims = Fixture.claims
        claims["exp"] = nil
        let n = try verify(Fixture.token(claims: claims))
        #expect(n.expiresAt == nil)
        #expect(n.issuedAt == Fixture.iat)
        claims["iat"] = nil
        #expect(reason(claims: claims) == .missingIAT)
        claims = Fixture.claims
        claims["iat"] = nil
        #expect(reason(claims: claims) == .missingIAT)
        #expect(RejectReason.missingIAT.httpStatus == 401)
    }

    @Test func otherHeaderMembersAreIgnored() throws {
        var header = Fixture.header
        header["typ"] = .string("JWT")
        header["jku"] = .string("https://evil.example/keys")
        header["x5u"] = .string("https://evil.example/cert")
        header["jwk"] = .object(["kty": .string("RSA")])
        let spy = SignatureSpy(.valid)
        _ = try verifier.verify(token: Fixture.token(header: header), now: Fixture.now, checkSignature: spy.check)
        #expect(spy.calls.count == 1)
        #expect(spy.calls[0].kid == "E6q83RB15n")
    }

    @Test func critHeaderIsRefusedAfterTheSignature() throws {
        var header = Fixture.header
        header["crit"] = .array([.string("exp")])
        #expect(throws: RejectReason.malformedHeader) {
            try verifier.verify(token: Fixture.token(header: header), now: Fixture.now) { _, _, _ in .valid }
        }
        #expect(throws: RejectReason.badSignature) {
            try verifier.verify(token: Fixture.token(header: header), now: Fixture.now) { _, _, _ in .invalid }
        }
    }

    @Test func audienceAndIssuerAreComparedByteForByte() throws {
        // "com.\u{212A}..." (KELVIN SIGN) is canonically equivalent to "com.K..." for Swift's ==.
        let v = NotificationVerifier(policy: VerificationPolicy(audiences: ["com.Kompany.app"]))
        var claims = Fixture.claims
        claims["aud"] = .string("com.\u{212A}ompany.app")
        #expect(throws: RejectReason.wrongAudience) {
            try v.verify(token: Fixture.token(claims: claims), now: Fixture.now) { _, _, _ in .valid }
        }
        claims["aud"] = .string("com.Kompany.app")
        #expect(try v.verify(token: Fixture.token(claims: claims), now: Fixture.now) { _, _, _ in .valid }.audience == "com.Kompany.app")
        let custom = NotificationVerifier(policy: VerificationPolicy(audiences: ["com.Kompany.app"], issuer: "https://caf\u{E9}.example"))
        claims["iss"] = .string("https://cafe\u{301}.example")
        #expect(throws: RejectReason.wrongIssuer) {
            try custom.verify(token: Fixture.token(claims: claims), now: Fixture.now) { _, _, _ in .valid }
        }
    }

    @Test("a key trusted for some audiences only (the --dev key) cannot sign for another configured audience")
    func keyRestrictedToAudiences() throws {
        let policy = VerificationPolicy(
            audiences: ["com.example.siwa-notify.dev", Fixture.audience],
            keyAudiences: ["dev-kid": ["com.example.siwa-notify.dev"]])
        let v = NotificationVerifier(policy: policy)
        let devSigned = Fixture.token(header: ["kid": .string("dev-kid"), "alg": .string("RS256")])
        #expect(throws: RejectReason.wrongAudience) { try v.verify(token: devSigned, now: Fixture.now) { _, _, _ in .valid } }
        #expect(RejectReason.wrongAudience.httpStatus == 401)
        let step = v.inspect(token: devSigned, now: Fixture.now) { _, _, _ in .valid }.last
        #expect(step?.reason == .wrongAudience)
        #expect(step?.detail.contains("trusted only for") == true)
        // The same key for its own audience verifies; another key for the real audience too.
        var claims = Fixture.claims
        claims["aud"] = .string("com.example.siwa-notify.dev")
        let devForDev = Fixture.token(header: ["kid": .string("dev-kid"), "alg": .string("RS256")], claims: claims)
        #expect(try v.verify(token: devForDev, now: Fixture.now) { _, _, _ in .valid }.audience == "com.example.siwa-notify.dev")
        #expect(try v.verify(token: Fixture.token(), now: Fixture.now) { _, _, _ in .valid }.audience == Fixture.audience)
    }

    @Test func acceptsAnyConfiguredAudience() throws {
        let v = NotificationVerifier(policy: VerificationPolicy(audiences: ["com.other", Fixture.audience]))
        #expect(try v.verify(token: Fixture.token(), now: Fixture.now) { _, _, _ in .valid }.audience == Fixture.audience)
    }

    @Test func customIssuer() throws {
        let v = NotificationVerifier(policy: VerificationPolicy(audiences: [Fixture.audience], issuer: "https://issuer.test"))
        #expect(throws: RejectReason.wrongIssuer) { try v.verify(token: Fixture.token(), now: Fixture.now) { _, _, _ in .valid } }
        var claims = Fixture.claims
        claims["iss"] = .string("https://issuer.test")
        #expect(try v.verify(token: Fixture.token(claims: claims), now: Fixture.now) { _, _, _ in .valid }.issuer == "https://issuer.test")
    }

    // MARK: Signature closure contract

    @Test func signatureClosureGetsKidInputAndSignature() throws {
        let token = Fixture.token()
        let spy = SignatureSpy(.valid)
        _ = try verifier.verify(token: token, now: Fixture.now, checkSignature: spy.check)
        #expect(spy.calls.count == 1)
        #expect(spy.calls[0].kid == "E6q83RB15n")
        let lastDot = token.lastIndex(of: ".")!
        #expect(spy.calls[0].signingInput == Array(token[..<lastDot].utf8))
        #expect(spy.calls[0].signature == Fixture.signature)
    }

    @Test func signatureClosureNotCalledBeforeStructureAlgKidPass() {
        var noKid = Fixture.header
        noKid["kid"] = nil
        var noneAlg = Fixture.header
        noneAlg["alg"] = .string("none")
        for token in ["garbage", Fixture.token(header: noKid), Fixture.token(header: noneAlg), Fixture.token(headerJSON: "[]", claimsJSON: "{}")] {
            let spy = SignatureSpy(.valid)
            #expect(throws: RejectReason.self) { try verifier.verify(token: token, now: Fixture.now, checkSignature: spy.check) }
            #expect(spy.calls.isEmpty)
        }
    }

    @Test func signatureIsCheckedBeforeClaims() {
        // Claims are all wrong, but a bad signature must win.
        let claims: [String: JSONValue] = ["iss": .string("x"), "aud": .array([]), "exp": .number(0)]
        let spy = SignatureSpy(.invalid)
        #expect(throws: RejectReason.badSignature) {
            try verifier.verify(token: Fixture.token(claims: claims), now: Fixture.now, checkSignature: spy.check)
        }
        #expect(spy.calls.count == 1)
    }

    @Test func signatureResults() {
        #expect(reason(Fixture.token(), result: .invalid) == .badSignature)
        #expect(reason(Fixture.token(), result: .unknownKey) == .unknownKid)
        #expect(reason(Fixture.token(), result: .keysUnavailable) == .keysUnavailable)
        #expect(reason(Fixture.token(), result: .valid) == nil)
    }

    @Test func emptySignatureFailsAsBadSignatureWhenVerifierSaysInvalid() {
        let spy = SignatureSpy(.invalid)
        #expect(throws: RejectReason.badSignature) {
            try verifier.verify(token: Fixture.token(signature: []), now: Fixture.now, checkSignature: spy.check)
        }
        #expect(spy.calls.first?.signature == [])
    }

    // MARK: Structure and header

    @Test func structureErrors() {
        #expect(reason("") == .malformedJWS)
        #expect(reason("a.b") == .malformedJWS)
        #expect(reason(Fixture.token(headerJSON: "nope", claimsJSON: "{}")) == .malformedHeader)
        #expect(reason(Fixture.token(headerJSON: Fixture.headerJSON, claimsJSON: "[1]")) == .malformedClaims)
    }

    @Test func algorithmMustBeExactlyRS256() {
        let bad: [JSONValue?] = [
            nil, .string("none"), .string("None"), .string("HS256"), .string("RS512"), .string("PS256"),
            .string("ES256"), .string("rs256"), .string("RS256 "), .string(""), .null, .number(256),
            .array([.string("RS256")]), .object(["alg": .string("RS256")]), .bool(true),
        ]
        for alg in bad {
            var header = Fixture.header
            header["alg"] = alg
            #expect(reason(Fixture.token(header: header)) == .unsupportedAlgorithm, "alg \(String(describing: alg))")
        }
    }

    @Test func algIsCheckedBeforeKid() {
        #expect(reason(Fixture.token(header: ["alg": .string("none")])) == .unsupportedAlgorithm)
    }

    @Test func kidMustBeNonEmptyString() {
        for kid: JSONValue? in [nil, .string(""), .number(1), .null, .array([.string("E6q83RB15n")]), .bool(false)] {
            var header = Fixture.header
            header["kid"] = kid
            #expect(reason(Fixture.token(header: header)) == .missingKid)
        }
    }

    // MARK: Claims

    @Test func issuer() {
        for iss: JSONValue? in [
            nil, .string("https://appleid.apple.com/"), .string("http://appleid.apple.com"), .string(""),
            .string("HTTPS://APPLEID.APPLE.COM"), .number(1), .array([.string("https://appleid.apple.com")]), .null,
        ] {
            var claims = Fixture.claims
            claims["iss"] = iss
            #expect(reason(claims: claims) == .wrongIssuer, "iss \(String(describing: iss))")
        }
    }

    @Test func audience() {
        for aud: JSONValue? in [
            nil, .string("com.other"), .string(""), .string(Fixture.audience.uppercased()),
            .array([.string(Fixture.audience)]), .number(1), .null, .object([:]),
        ] {
            var claims = Fixture.claims
            claims["aud"] = aud
            #expect(reason(claims: claims) == .wrongAudience, "aud \(String(describing: aud))")
        }
    }

    @Test func issuerIsCheckedBeforeAudience() {
        var claims = Fixture.claims
        claims["iss"] = nil
        claims["aud"] = nil
        #expect(reason(claims: claims) == .wrongIssuer)
    }

    @Test func expiryBoundaries() {
        let token = Fixture.token()
        #expect(reason(token, now: Fixture.exp) == nil)
        #expect(reason(token, now: Fixture.exp + 60) == nil)
        #expect(reason(token, now: Fixture.exp + 61) == .expired)
        #expect(reason(token, now: Int64.max) == .expired)
    }

    @Test func zeroSkew() {
        let v = NotificationVerifier(policy: VerificationPolicy(audiences: [Fixture.audience], clockSkewSeconds: 0))
        #expect(throws: RejectReason.expired) { try v.verify(token: Fixture.token(), now: Fixture.exp + 1) { _, _, _ in .valid } }
        #expect(throws: RejectReason.issuedInFuture) { try v.verify(token: Fixture.token(), now: Fixture.iat - 1) { _, _, _ in .valid } }
    }

    @Test func hugeSkewDoesNotOverflow() throws {
        let v = NotificationVerifier(policy: VerificationPolicy(audiences: [Fixture.audience], clockSkewSeconds: .max))
        #expect(try v.verify(token: Fixture.token(), now: Int64.max) { _, _, _ in .valid }.jti == "8sIboCeUBQuZ0M7x91YKZQ")
    }

    @Test func issuedAtBoundaries() {
        let token = Fixture.token()
        #expect(reason(token, now: Fixture.iat - 60) == nil)
        #expect(reason(token, now: Fixture.iat - 61) == .issuedInFuture)
        var claims = Fixture.claims
        claims["exp"] = nil
        #expect(reason(Fixture.token(claims: claims), now: Int64.min) == .issuedInFuture)
    }

    @Test func expMustBeIntegralNumber() {
        for exp: JSONValue in [.string("1752658597"), .number(1_752_658_597.5), .null, .bool(true), .array([]), .number(1e300)] {
            var claims = Fixture.claims
            claims["exp"] = exp
            #expect(reason(claims: claims) == .malformedClaims, "exp \(exp)")
        }
    }

    @Test func iatMustBeIntegralNumber() {
        for iat: JSONValue in [.string("1752572197"), .number(0.5), .null, .bool(false), .object([:])] {
            var claims = Fixture.claims
            claims["iat"] = iat
            #expect(reason(claims: claims) == .malformedClaims, "iat \(iat)")
        }
    }

    @Test func expiryIsCheckedBeforeIssuedAt() {
        var claims = Fixture.claims
        claims["iat"] = .string("bad")
        #expect(reason(Fixture.token(claims: claims), now: Fixture.exp + 1000) == .expired)
        claims["iat"] = nil
        #expect(reason(Fixture.token(claims: claims), now: Fixture.exp + 1000) == .expired)
        // Without exp, an unusable iat leaves nothing to expire: the issued-at step decides.
        claims["exp"] = nil
        #expect(reason(Fixture.token(claims: claims), now: Fixture.exp + 1000) == .missingIAT)
        claims["iat"] = .string("bad")
        #expect(reason(Fixture.token(claims: claims), now: Fixture.exp + 1000) == .malformedClaims)
    }

    @Test func tokenWithoutExpExpiresOneDayAfterIat() {
        var claims = Fixture.claims
        claims["exp"] = nil
        let token = Fixture.token(claims: claims)
        let exact = NotificationVerifier(policy: VerificationPolicy(audiences: [Fixture.audience], clockSkewSeconds: 0))
        func outcome(_ v: NotificationVerifier, now: Int64) -> RejectReason? {
            do {
                _ = try v.verify(token: token, now: now) { _, _, _ in .valid }
                return nil
            } catch {
                return error
            }
        }
        // iat 86,399 / 86,400 / 86,401 s ago, no skew.
        #expect(outcome(exact, now: Fixture.iat + 86_399) == nil)
        #expect(outcome(exact, now: Fixture.iat + 86_400) == nil)
        #expect(outcome(exact, now: Fixture.iat + 86_401) == .expired)
        // The default 60 s skew applies as to an explicit exp.
        #expect(outcome(verifier, now: Fixture.iat + 86_401) == nil)
        #expect(outcome(verifier, now: Fixture.iat + 86_460) == nil)
        #expect(outcome(verifier, now: Fixture.iat + 86_461) == .expired)
        #expect(outcome(verifier, now: Int64.max) == .expired)
        // Same moment as the explicit exp Apple sends (iat + 86,400).
        #expect(self.reason(Fixture.token(), now: Fixture.exp + 61) == outcome(verifier, now: Fixture.exp + 61))
        // iat + 86,400 + skew saturates instead of trapping.
        let lenient = NotificationVerifier(policy: VerificationPolicy(audiences: [Fixture.audience], clockSkewSeconds: .max))
        #expect(outcome(lenient, now: .max) == nil)
    }

    @Test func audienceIsCheckedBeforeExpiry() {
        var claims = Fixture.claims
        claims["aud"] = .string("nope")
        #expect(reason(Fixture.token(claims: claims), now: Fixture.exp + 1000) == .wrongAudience)
    }

    @Test func jti() {
        for jti: JSONValue? in [nil, .string(""), .number(5), .null, .array([.string("a")]), .string(String(repeating: "j", count: 256))] {
            var claims = Fixture.claims
            claims["jti"] = jti
            #expect(reason(claims: claims) == .missingJTI, "jti \(String(describing: jti))")
        }
        var claims = Fixture.claims
        claims["jti"] = .string(String(repeating: "é", count: 255))
        #expect(reason(claims: claims) == nil)
    }

    @Test func jtiIsCheckedBeforeEvents() {
        var claims = Fixture.claims
        claims["jti"] = nil
        claims["events"] = nil
        #expect(reason(claims: claims) == .missingJTI)
    }

    // MARK: Events

    @Test func eventsMissingOrWrongType() {
        for events: JSONValue? in [
            nil, .null, .number(1), .bool(true), .array([.object(Fixture.eventMembers)]),
            .string(""), .string("not json"), .string("[1]"), .string("\"{}\""),
            .string(#"{"sub":"a","sub":"b"}"#), .string(#"{"type":"x"} trailing"#),
        ] {
            var claims = Fixture.claims
            claims["events"] = events
            #expect(reason(claims: claims) == .malformedEvents, "events \(String(describing: events))")
        }
    }

    @Test func sub() {
        for sub: JSONValue? in [nil, .string(""), .number(1), .null, .array([])] {
            var e = Fixture.eventMembers
            e["sub"] = sub
            #expect(reason(events: e) == .missingSub)
        }
        var e = Fixture.eventMembers
        e["sub"] = .string(String(repeating: "s", count: 256))
        #expect(reason(events: e) == .malformedEvents)
        e["sub"] = .string(String(repeating: "s", count: 255))
        #expect(reason(events: e) == nil)
    }

    @Test func type() {
        for type: JSONValue? in [nil, .string(""), .number(1), .null, .bool(true)] {
            var e = Fixture.eventMembers
            e["type"] = type
            #expect(reason(events: e) == .missingType)
        }
        var e = Fixture.eventMembers
        e["type"] = .string(String(repeating: "t", count: 65))
        #expect(reason(events: e) == .malformedEvents)
        e["type"] = .string(String(repeating: "t", count: 64))
        #expect(reason(events: e) == nil)
    }

    @Test func subIsCheckedBeforeType() {
        var e = Fixture.eventMembers
        e["sub"] = nil
        e["type"] = nil
        #expect(reason(events: e) == .missingSub)
    }

    @Test func eventTime() {
        // Not an integral JSON number: malformed, whatever its magnitude.
        for t: JSONValue? in [
            nil, .string("1752572190719"), .number(1.5), .number(-0.5), .number(1_752_572_190_719.5),
            .null, .bool(true), .array([.number(Double(Fixture.eventTime))]), .object([:]),
        ] {
            var e = Fixture.eventMembers
            e["event_time"] = t
            #expect(reason(events: e) == .malformedEvents, "event_time \(String(describing: t))")
        }
    }

    func eventTimeReason(_ text: String, iat: Int64 = Fixture.iat) -> RejectReason? {
        var claims = Fixture.claims
        claims["iat"] = .number(Double(iat))
        claims["events"] = .string(#"{"type":"consent-revoked","sub":"\#(Fixture.sub)","event_time":\#(text)}"#)
        return reason(claims: claims)
    }

    @Test func eventTimeBounds() throws {
        let upper = Fixture.iat * 1000 + 3_600_000
        // Lower bound: 2019-01-01T00:00:00Z.
        #expect(eventTimeReason("1546300800000") == nil)
        #expect(eventTimeReason("1546300799999") == .badEventTime)
        // Upper bound: iat + 1 h.
        #expect(eventTimeReason(String(upper)) == nil)
        #expect(eventTimeReason(String(upper + 1)) == .badEventTime)
        // Seconds instead of milliseconds, zero, negatives.
        for text in ["1752572190", "1752572197", "0", "-0", "-0.0", "-1", "-1752572190719", "1", "1546300800"] {
            #expect(eventTimeReason(text) == .badEventTime, "event_time \(text)")
        }
        // 2^53 and beyond (integral in JSON, beyond exact integers): bounds, not a trap.
        for text in [
            "9007199254740992", "9007199254740993", "9007199254740994", "-9007199254740992", "-9007199254740994",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616",
            "1e20", "1e300", "-1e300", "1E+19", "1752572190719e3",
        ] {
            #expect(eventTimeReason(text) == .badEventTime, "event_time \(text)")
        }
        // Exponent notation that is an exact integer in range is a number like any other.
        #expect(eventTimeReason("1.752572190719e12") == nil)
        // Not representable at all (the parser refuses), or fractional: malformed.
        #expect(eventTimeReason("1e400") == .malformedEvents)
        #expect(eventTimeReason("1752572190719.5") == .malformedEvents)
        #expect(eventTimeReason("1e-7") == .malformedEvents)
        // An iat before 2019 leaves no valid event_time; huge or negative iat never overflow.
        #expect(eventTimeReason(String(Fixture.eventTime), iat: 0) == .badEventTime)
        #expect(eventTimeReason(String(Fixture.eventTime), iat: -9_007_199_254_740_992) == .badEventTime)
        #expect(eventTimeReason("1546300800000", iat: 1_546_300_800 - 3600) == nil)
        #expect(eventTimeReason("1546300800000", iat: 1_546_300_800 - 3601) == .badEventTime)
        // Accepted values arrive unchanged.
        var e = Fixture.eventMembers
        e["event_time"] = .number(Double(upper))
        #expect(try verify(Fixture.token(claims: Fixture.claims(events: e))).event.eventTimeMillis == upper)
        #expect(RejectReason.badEventTime.httpStatus == 400)
    }

    @Test func eventTimeBoundsComeAfterTheEventShape() {
        var e = Fixture.eventMembers
        e["event_time"] = .number(1_752_572_190)
        e["email"] = .number(5)
        #expect(reason(events: e) == .malformedEvents)
        e["email"] = nil
        e["is_private_email"] = .string("yes")
        #expect(reason(events: e) == .malformedEvents)
        e["is_private_email"] = nil
        e["sub"] = nil
        #expect(reason(events: e) == .missingSub)
        e["sub"] = .string(Fixture.sub)
        e["type"] = nil
        #expect(reason(events: e) == .missingType)
    }

    @Test func eventTimeProblemSaturates() {
        let t = Double(Fixture.eventTime)
        #expect(NotificationVerifier.eventTimeProblem(t, issuedAt: .max) == nil)
        #expect(NotificationVerifier.eventTimeProblem(t, issuedAt: .min) == .afterIssue(limit: .min + 3_600_000))
        #expect(NotificationVerifier.eventTimeProblem(0x1p62, issuedAt: .max) == .afterIssue(limit: .max))
        #expect(NotificationVerifier.eventTimeProblem(-0x1p62, issuedAt: .max) == .beforeMinimum)
        #expect(NotificationVerifier.eventTimeProblem(t, issuedAt: Int64.max / 1000 + 1) == nil)
        #expect(NotificationVerifier.eventTimeProblem(t, issuedAt: Fixture.iat) == nil)
        #expect(NotificationVerifier.eventTimeProblem(1_546_300_799_999, issuedAt: Fixture.iat) == .beforeMinimum)
        #expect(
            NotificationVerifier.eventTimeProblem(Double(Fixture.iat * 1000 + 3_600_001), issuedAt: Fixture.iat)
                == .afterIssue(limit: Fixture.iat * 1000 + 3_600_000))
    }

    @Test func email() throws {
        var e = Fixture.eventMembers
        e["type"] = .string("email-disabled")
        e["email"] = .string("abc@privaterelay.appleid.com")
        e["is_private_email"] = .string("true")
        let n = try verify(Fixture.token(claims: Fixture.claims(events: e)))
        #expect(
            n.event
                == AppleEvent(
                    type: .emailDisabled, sub: Fixture.sub, eventTimeMillis: Fixture.eventTime,
                    email: "abc@privaterelay.appleid.com", isPrivateEmail: true))
        for bad: JSONValue in [.number(1), .null, .bool(true), .array([]), .string(String(repeating: "e", count: 321))] {
            e["email"] = bad
            #expect(reason(events: e) == .malformedEvents, "email \(bad)")
        }
        e["email"] = .string(String(repeating: "e", count: 320))
        #expect(reason(events: e) == nil)
    }

    @Test func isPrivateEmail() throws {
        let accepted: [(JSONValue, Bool)] = [(.string("true"), true), (.string("false"), false), (.bool(true), true), (.bool(false), false)]
        for (value, expected) in accepted {
            var e = Fixture.eventMembers
            e["is_private_email"] = value
            #expect(try verify(Fixture.token(claims: Fixture.claims(events: e))).event.isPrivateEmail == expected)
        }
        for bad: JSONValue in [.string("TRUE"), .string("yes"), .string("1"), .string(""), .number(1), .null, .array([])] {
            var e = Fixture.eventMembers
            e["is_private_email"] = bad
            #expect(reason(events: e) == .malformedEvents, "is_private_email \(bad)")
        }
    }

    @Test func unknownEventTypesAreAccepted() throws {
        var e = Fixture.eventMembers
        e["type"] = .string("something-new")
        #expect(try verify(Fixture.token(claims: Fixture.claims(events: e))).event.type == .unknown("something-new"))
    }

    @Test func accountDeletedAlias() throws {
        var e = Fixture.eventMembers
        e["type"] = .string("account-deleted")
        #expect(try verify(Fixture.token(claims: Fixture.claims(events: e))).event.type == .accountDelete)
    }

    @Test func extraEventMembersAreIgnored() throws {
        var e = Fixture.eventMembers
        e["future_field"] = .object(["x": .number(1)])
        #expect(try verify(Fixture.token(claims: Fixture.claims(events: e))).event.sub == Fixture.sub)
    }

    // MARK: Body

    @Test func extractToken() throws {
        #expect(try verifier.extractToken(fromBody: bytes(#"{"payload":"a.b.c"}"#)) == "a.b.c")
        #expect(try verifier.extractToken(fromBody: bytes(#" {"other":1,"payload":"x"} "#)) == "x")
    }

    @Test("Apple's body is read without the parser, and always as the parser reads it")
    func plainPayloadAgreesWithTheParser() throws {
        let token = Fixture.token()
        #expect(NotificationVerifier.plainPayload(bytes(#"{"payload":"\#(token)"}"#)) == token)
        #expect(NotificationVerifier.plainPayload(bytes(" \n{ \"payload\" :\t\"a.b-c_9\" }\r\n")) == "a.b-c_9")
        // Not the plain shape: the full parser decides (same answer, or its error).
        let others = [
            "", "{}", #"{"payload":""}"#, #"{"payload":"a "}"#, #"{"payload":"a\/b"}"#, #"{"payload":"a","payload":"b"}"#,
            #"{"payload":"a","x":1}"#, #"{"x":1,"payload":"a"}"#, #"{"payload":"a+b"}"#, #"{"payload":"a"} x"#,
            #"{"payload":"a""#, #"{"payload":"a"#, #"{"Payload":"a"}"#, #"{"payload":1}"#, #"{"payload" "a"}"#,
            "{\"payload\":\"a\u{00A0}\"}", #"[{"payload":"a"}]"#,
        ]
        for body in others {
            #expect(NotificationVerifier.plainPayload(bytes(body)) == nil, "\(body)")
        }
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.".utf8)
        for c in UInt8.min...UInt8.max {
            #expect(NotificationVerifier.isTokenByte(c) == alphabet.contains(c))
        }
        // Every truncation and one-byte change of a plain body: the fast path never disagrees
        // with the parser (nil means the parser alone answers).
        let plain = bytes(#" {"payload":"ab.c-d_e"} "#)
        var variants: [[UInt8]] = (0...plain.count).map { Array(plain.prefix($0)) }
        for k in plain.indices {
            for replacement: UInt8 in [0x20, 0x22, 0x5C, 0x7D, 0x2C, 0x41, 0x00, 0xFF] {
                var v = plain
                v[k] = replacement
                variants.append(v)
            }
        }
        for body in variants {
            guard let fast = NotificationVerifier.plainPayload(body) else { continue }
            let parsed = try JSONParser.parse(body)
            #expect(parsed.objectValue?.count == 1 && parsed["payload"]?.stringValue == fast)
        }
    }

    @Test func extractTokenMalformedJSON() {
        for body in ["", " ", "payload", "[]", "\"a.b.c\"", "null", #"{"payload":"a"} x"#, #"{"payload":"a","payload":"b"}"#, "{"] {
            #expect(throws: RejectReason.malformedJSON) { try verifier.extractToken(fromBody: bytes(body)) }
        }
        #expect(throws: RejectReason.malformedJSON) { try verifier.extractToken(fromBody: [0x7B, 0xFF, 0x7D]) }
    }

    @Test func extractTokenMissingPayload() {
        for body in ["{}", #"{"payload":""}"#, #"{"payload":null}"#, #"{"payload":1}"#, #"{"payload":["a"]}"#, #"{"Payload":"a"}"#] {
            #expect(throws: RejectReason.missingPayload) { try verifier.extractToken(fromBody: bytes(body)) }
        }
    }

    @Test func verifyBody() throws {
        let n = try verifier.verify(body: Fixture.body(Fixture.token()), now: Fixture.now) { _, _, _ in .valid }
        #expect(n.jti == "8sIboCeUBQuZ0M7x91YKZQ")
        let spy = SignatureSpy(.valid)
        #expect(throws: RejectReason.missingPayload) { try verifier.verify(body: bytes("{}"), now: Fixture.now, checkSignature: spy.check) }
        #expect(throws: RejectReason.malformedJWS) { try verifier.verify(body: Fixture.body("x"), now: Fixture.now, checkSignature: spy.check) }
        #expect(spy.calls.isEmpty)
    }

    @Test func eventLengthsCountCharactersNotBytes() throws {
        var e = Fixture.eventMembers
        e["sub"] = .string(String(repeating: "ü", count: 255))  // 510 UTF-8 bytes
        #expect(reason(events: e) == nil)
    }
}
