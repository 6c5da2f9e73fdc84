import Testing

@testable import SiwaCore

@Suite struct CompactJWSTests {
    @Test func parsesAppleShapedToken() throws {
        let token = Fixture.token()
        let jws = try CompactJWS.parse(token)
        #expect(jws.header == Fixture.header)
        #expect(jws.claims == Fixture.claims)
        #expect(jws.signature == Fixture.signature)
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        #expect(jws.signingInput == Array("\(parts[0]).\(parts[1])".utf8))
    }

    @Test func signingInputIsExactlyAsReceived() throws {
        // Same header JSON encoded with different member order gives a different signing input.
        let token = Fixture.token(headerJSON: #"{"alg":"RS256","kid":"E6q83RB15n"}"#, claimsJSON: "{}")
        let jws = try CompactJWS.parse(token)
        let expectedInput = Base64URL.encode(Array(#"{"alg":"RS256","kid":"E6q83RB15n"}"#.utf8)) + "." + Base64URL.encode(Array("{}".utf8))
        #expect(jws.signingInput == Array(expectedInput.utf8))
        #expect(String(decoding: jws.signingInput, as: UTF8.self) + "." + Base64URL.encode(Fixture.signature) == token)
    }

    @Test func emptySignatureIsStructurallyFine() throws {
        let token = Fixture.token(signature: [])
        #expect(token.hasSuffix("."))
        #expect(try CompactJWS.parse(token).signature == [])
    }

    @Test func rejectsWrongSegmentCount() {
        let t = Fixture.token()
        let parts = t.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        for bad in ["", ".", "..", "...", parts[0], parts[0] + "." + parts[1], t + ".", t + ".x", parts.joined(separator: "..")] {
            #expect(throws: RejectReason.malformedJWS) { try CompactJWS.parse(bad) }
        }
    }

    @Test func rejectsEmptyHeaderOrClaims() {
        let t = Fixture.token()
        let parts = t.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        #expect(throws: RejectReason.malformedJWS) { try CompactJWS.parse("." + parts[1] + "." + parts[2]) }
        #expect(throws: RejectReason.malformedJWS) { try CompactJWS.parse(parts[0] + ".." + parts[2]) }
    }

    @Test func rejectsNonStrictBase64URLInAnySegment() {
        let t = Fixture.token()
        let parts = t.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let variants = [
            [parts[0] + "=", parts[1], parts[2]],
            [parts[0], parts[1] + " ", parts[2]],
            [parts[0], parts[1], parts[2] + "="],
            [parts[0], parts[1], "ab+c"],
            [parts[0], parts[1], "a"],
            ["e30+", parts[1], parts[2]],
            ["e30/", parts[1], parts[2]],
        ]
        for v in variants {
            #expect(throws: RejectReason.malformedJWS) { try CompactJWS.parse(v.joined(separator: ".")) }
        }
    }

    @Test func rejectsHeaderThatIsNotAnObject() {
        for header in ["[]", "\"RS256\"", "null", "not json", "{\"alg\":\"RS256\"", "{\"alg\":\"RS256\",\"alg\":\"none\"}", ""] where !header.isEmpty
        {
            #expect(throws: RejectReason.malformedHeader) {
                try CompactJWS.parse(Fixture.token(headerJSON: header, claimsJSON: "{}"))
            }
        }
    }

    @Test func rejectsClaimsThatAreNotAnObject() {
        for claims in ["[]", "1", "\"x\"", "{", "{\"a\":1}}", "{\"jti\":\"a\",\"jti\":\"b\"}", "{\"s\":\"\\u0000\"}"] {
            #expect(throws: RejectReason.malformedClaims) {
                try CompactJWS.parse(Fixture.token(headerJSON: Fixture.headerJSON, claimsJSON: claims))
            }
        }
    }

    @Test func headerIsCheckedBeforeClaims() {
        #expect(throws: RejectReason.malformedHeader) {
            try CompactJWS.parse(Fixture.token(headerJSON: "[]", claimsJSON: "[]"))
        }
    }
}
