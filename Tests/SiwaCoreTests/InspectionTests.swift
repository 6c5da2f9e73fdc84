import Testing
@testable import SiwaCore

@Suite struct InspectionTests {
    let verifier = Fixture.verifier
    static let allNames = ["structure", "header", "key", "signature", "issuer", "audience", "expiry", "issued-at", "jti", "events"]

    func inspect(_ token: String, now: Int64 = Fixture.now, result: SignatureCheck = .valid) -> [InspectionStep] {
        verifier.inspect(token: token, now: now) { _, _, _ in result }
    }

    @Test func allStepsPassInOrder() {
        let steps = inspect(Fixture.token())
        #expect(steps.map(\.name) == Self.allNames)
        #expect(steps.allSatisfy { step in step.passed && step.reason == nil && !step.detail.isEmpty })
    }

    @Test func detailsDescribeValues() {
        let steps = inspect(Fixture.token())
        #expect(steps[1].detail.contains("RS256"))
        #expect(steps[2].detail.contains("E6q83RB15n"))
        #expect(steps[5].detail.contains(Fixture.audience))
        #expect(steps[6].detail.contains("2025-07-16T09:36:37Z"))
        #expect(steps[7].detail.contains("2025-07-15T09:36:37Z"))
        #expect(steps[9].detail.contains("consent-revoked"))
    }

    @Test func detailsNeverContainTheToken() {
        let token = Fixture.token()
        let segments = token.split(separator: ".").map(String.init)
        for result in [SignatureCheck.valid, .invalid, .unknownKey, .keysUnavailable] {
            for step in inspect(token, result: result) {
                #expect(!step.detail.contains(token))
                for segment in segments { #expect(!step.detail.contains(segment)) }
            }
        }
    }

    func expectFailure(_ steps: [InspectionStep], at name: String, reason: RejectReason, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let index = Self.allNames.firstIndex(of: name) else {
            Issue.record("bad step name", sourceLocation: sourceLocation)
            return
        }
        #expect(steps.map(\.name) == Array(Self.allNames[...index]), sourceLocation: sourceLocation)
        #expect(steps.dropLast().allSatisfy { $0.passed }, sourceLocation: sourceLocation)
        #expect(steps.last?.passed == false, sourceLocation: sourceLocation)
        #expect(steps.last?.reason == reason, sourceLocation: sourceLocation)
    }

    @Test func stopsAtFirstFailure() {
        expectFailure(inspect("nonsense"), at: "structure", reason: .malformedJWS)
        expectFailure(inspect(Fixture.token(headerJSON: "[]", claimsJSON: "{}")), at: "structure", reason: .malformedHeader)
        expectFailure(inspect(Fixture.token(header: ["alg": .string("HS256"), "kid": .string("k")])), at: "header", reason: .unsupportedAlgorithm)
        expectFailure(inspect(Fixture.token(header: ["alg": .string("RS256")])), at: "key", reason: .missingKid)
        expectFailure(inspect(Fixture.token(), result: .unknownKey), at: "key", reason: .unknownKid)
        expectFailure(inspect(Fixture.token(), result: .keysUnavailable), at: "key", reason: .keysUnavailable)
        expectFailure(inspect(Fixture.token(), result: .invalid), at: "signature", reason: .badSignature)
        expectFailure(inspect(Fixture.token(), now: Fixture.exp + 61), at: "expiry", reason: .expired)
        expectFailure(inspect(Fixture.token(), now: Fixture.iat - 61), at: "issued-at", reason: .issuedInFuture)

        var claims = Fixture.claims
        claims["iss"] = .string("https://evil.example")
        expectFailure(inspect(Fixture.token(claims: claims)), at: "issuer", reason: .wrongIssuer)
        claims = Fixture.claims
        claims["aud"] = .array([.string(Fixture.audience)])
        expectFailure(inspect(Fixture.token(claims: claims)), at: "audience", reason: .wrongAudience)
        claims = Fixture.claims
        claims["exp"] = .string("soon")
        expectFailure(inspect(Fixture.token(claims: claims)), at: "expiry", reason: .malformedClaims)
        claims = Fixture.claims
        claims["iat"] = .number(1.25)
        expectFailure(inspect(Fixture.token(claims: claims)), at: "issued-at", reason: .malformedClaims)
        claims = Fixture.claims
        claims["jti"] = .string("")
        expectFailure(inspect(Fixture.token(claims: claims)), at: "jti", reason: .missingJTI)
        claims = Fixture.claims
        claims["events"] = .string("{}")
        expectFailure(inspect(Fixture.token(claims: claims)), at: "events", reason: .missingSub)
    }

    @Test func agreesWithVerify() {
        var claims = Fixture.claims
        claims["aud"] = .string("x")
        let cases: [(String, Int64, SignatureCheck)] = [
            (Fixture.token(), Fixture.now, .valid),
            (Fixture.token(), Fixture.now, .invalid),
            (Fixture.token(claims: claims), Fixture.now, .valid),
            (Fixture.token(), Fixture.exp + 100, .valid),
            ("a.b.c", Fixture.now, .valid),
        ]
        for (token, now, result) in cases {
            let steps = inspect(token, now: now, result: result)
            var verifyReason: RejectReason?
            do {
                _ = try verifier.verify(token: token, now: now) { _, _, _ in result }
            } catch {
                verifyReason = error
            }
            #expect(steps.last?.reason == verifyReason)
        }
    }

    @Test func signatureClosureCalledOnce() {
        let spy = SignatureSpy(.invalid)
        _ = verifier.inspect(token: Fixture.token(), now: Fixture.now, checkSignature: spy.check)
        #expect(spy.calls.count == 1)
    }

    @Test func formatUTC() {
        #expect(NotificationVerifier.formatUTC(0) == "1970-01-01T00:00:00Z")
        #expect(NotificationVerifier.formatUTC(1_752_658_597) == "2025-07-16T09:36:37Z")
        #expect(NotificationVerifier.formatUTC(951_782_400) == "2000-02-29T00:00:00Z")
        #expect(NotificationVerifier.formatUTC(-1) == "1969-12-31T23:59:59Z")
        #expect(NotificationVerifier.formatUTC(253_402_300_799) == "9999-12-31T23:59:59Z")
        #expect(NotificationVerifier.formatUTC(.max) == "out of range")
        #expect(NotificationVerifier.formatUTC(.min) == "out of range")
    }
}
