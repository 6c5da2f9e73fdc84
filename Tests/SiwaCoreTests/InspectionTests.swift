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

    @Test func missingIatFailsTheIssuedAtStep() {
        var claims = Fixture.claims
        claims["iat"] = nil
        let steps = inspect(Fixture.token(claims: claims))
        expectFailure(steps, at: "issued-at", reason: .missingIAT)
        #expect(steps.last?.detail.contains("iat is missing") == true)
        claims["exp"] = nil
        let noTimes = inspect(Fixture.token(claims: claims), now: Fixture.exp + 100_000)
        expectFailure(noTimes, at: "issued-at", reason: .missingIAT)
        #expect(noTimes[6].detail.contains("no exp claim"))
    }

    @Test func withoutExpTheExpiryStepUsesIat() {
        var claims = Fixture.claims
        claims["exp"] = nil
        let token = Fixture.token(claims: claims)
        let steps = inspect(token)
        #expect(steps.map(\.name) == Self.allNames)
        #expect(steps.allSatisfy { $0.passed })
        // iat + 86,400 s is the moment Apple's own exp names.
        #expect(steps[6].detail.contains("iat + 86400s"))
        #expect(steps[6].detail.contains("2025-07-16T09:36:37Z"))
        let late = inspect(token, now: Fixture.iat + 86_461)
        expectFailure(late, at: "expiry", reason: .expired)
        #expect(late.last?.detail.contains("no exp claim") == true)
        let lastMoment = inspect(token, now: Fixture.iat + 86_460)
        #expect(lastMoment.count == Self.allNames.count && lastMoment.allSatisfy { $0.passed })
    }

    @Test func badEventTimeFailsTheEventsStep() {
        let email = "secret-mail@privaterelay.appleid.com"
        func steps(_ eventTime: JSONValue) -> [InspectionStep] {
            var e = Fixture.eventMembers
            e["type"] = .string("email-disabled")
            e["email"] = .string(email)
            e["event_time"] = eventTime
            return inspect(Fixture.token(claims: Fixture.claims(events: e)))
        }
        let seconds = steps(.number(1_752_572_190))
        expectFailure(seconds, at: "events", reason: .badEventTime)
        #expect(seconds.last?.detail.contains("before 2019-01-01T00:00:00Z") == true)
        #expect(seconds.last?.detail.contains("looks like seconds") == true)
        let negative = steps(.number(-1))
        expectFailure(negative, at: "events", reason: .badEventTime)
        #expect(negative.last?.detail.contains("looks like seconds") == false)
        let late = steps(.number(Double(Fixture.iat * 1000 + 3_600_001)))
        expectFailure(late, at: "events", reason: .badEventTime)
        #expect(late.last?.detail.contains("after iat \(Fixture.iat) + 3600s") == true)
        let huge = steps(.number(0x1p63))
        expectFailure(huge, at: "events", reason: .badEventTime)
        expectFailure(steps(.number(1.5)), at: "events", reason: .malformedEvents)
        for failed in [seconds, negative, late, huge] {
            let detail = failed.last?.detail ?? ""
            #expect(!detail.contains(email) && !detail.contains("secret-mail") && !detail.contains(Fixture.sub))
        }
    }

    @Test func agreesWithVerify() {
        var claims = Fixture.claims
        claims["aud"] = .string("x")
        var noIat = Fixture.claims
        noIat["iat"] = nil
        var noExp = Fixture.claims
        noExp["exp"] = nil
        let cases: [(String, Int64, SignatureCheck)] = [
            (Fixture.token(claims: noIat), Fixture.now, .valid),
            (Fixture.token(claims: noExp), Fixture.now, .valid),
            (Fixture.token(claims: noExp), Fixture.iat + 86_461, .valid),
            (
                Fixture.token(claims: Fixture.claims(events: ["type": .string("x"), "sub": .string("s"), "event_time": .number(1_752_572_190)])),
                Fixture.now, .valid
            ),
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
