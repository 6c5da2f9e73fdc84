import Testing

@testable import SiwaCore

/// The prelude both verifiers share: its order, when the signature closure runs, what it reports.
@Suite struct SignedJWSTests {
    static let issuer = VerificationPolicy.appleIssuer

    static func run(_ token: String, _ check: SignatureCheck = .valid) -> (Result<String, SignedJWS.Failure>, [SignedJWS.Passed], Int) {
        let spy = SignatureSpy(check)
        var passed: [SignedJWS.Passed] = []
        let result = Result { () throws(SignedJWS.Failure) -> String in
            try SignedJWS.verify(token: token, issuer: issuer, checkSignature: spy.check) { passed.append($0) }.kid
        }
        return (result, passed, spy.calls.count)
    }

    @Test("a good token passes every step in order, and the signature closure runs once")
    func passes() throws {
        let (result, passed, calls) = Self.run(Fixture.token())
        #expect(try result.get() == "E6q83RB15n")
        #expect(
            passed == [
                .structure(signatureBytes: Fixture.signature.count), .algorithm, .key(kid: "E6q83RB15n"), .signature,
                .issuer(Self.issuer),
            ])
        #expect(calls == 1)
    }

    @Test("alg and kid are refused before the signature is checked; crit and iss after it")
    func order() {
        var header = Fixture.header
        header["alg"] = .string("HS256")
        var (result, _, calls) = Self.run(Fixture.token(header: header))
        #expect(result == .failure(.algorithm(.string("HS256"))))
        #expect(calls == 0)

        header = Fixture.header
        header["kid"] = .string("")
        (result, _, calls) = Self.run(Fixture.token(header: header))
        #expect(result == .failure(.missingKid(.string(""))))
        #expect(calls == 0)

        header = Fixture.header
        header["crit"] = .array([.string("exp")])
        (result, _, calls) = Self.run(Fixture.token(header: header), .invalid)
        #expect(result == .failure(.signature(kid: "E6q83RB15n", .invalid)), "a forged token reads as forged")
        (result, _, calls) = Self.run(Fixture.token(header: header))
        #expect(result == .failure(.crit))
        #expect(calls == 1)

        var claims = Fixture.claims
        claims["iss"] = .string("https://appleid.apple.com/")
        (result, _, _) = Self.run(Fixture.token(claims: claims))
        #expect(result == .failure(.issuer(.string("https://appleid.apple.com/"))))
    }

    @Test("not a compact JWS: a structure failure, no signature check")
    func structure() {
        let (result, passed, calls) = Self.run("a.b")
        guard case .failure(.structure) = result else {
            Issue.record("expected a structure failure")
            return
        }
        #expect(passed.isEmpty)
        #expect(calls == 0)
    }

    @Test("shared limits and saturating addition")
    func limits() {
        #expect(NotificationVerifier.maxSubLength == TokenLimits.maxSubLength)
        #expect(TokenLimits.saturatingAdd(.max, 1) == .max)
        #expect(TokenLimits.saturatingAdd(.min, -1) == .min)
        #expect(TokenLimits.saturatingAdd(2, 3) == 5)
    }
}
