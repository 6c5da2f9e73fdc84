import Testing

@testable import SiwaCore

@Suite struct JWKSetTests {
    // Shape of https://appleid.apple.com/auth/keys (moduli shortened).
    static let appleLike = #"""
        {"keys":[
          {"kty":"RSA","kid":"E6q83RB15n","use":"sig","alg":"RS256","n":"AKxFCjU","e":"AQAB"},
          {"kty":"RSA","kid":"Sf2lFqwkpX","use":"sig","alg":"RS256","n":"s1Zu7w","e":"AQAB"},
          {"kty":"RSA","kid":"rBRfVmqsjc","n":"AAAB","e":"AQAB"}
        ]}
        """#

    @Test func parsesAppleShape() throws {
        let keys = try JWKSet.parseRSAKeys(bytes(Self.appleLike))
        #expect(keys.map(\.kid) == ["E6q83RB15n", "Sf2lFqwkpX", "rBRfVmqsjc"])
        #expect(keys[0].modulus == [0xAC, 0x45, 0x0A, 0x35])  // leading zero stripped
        #expect(keys[0].exponent == [0x01, 0x00, 0x01])
        #expect(keys[1].modulus == [0xB3, 0x56, 0x6E, 0xEF])
        #expect(keys[2].modulus == [0x01])  // several leading zeros stripped
    }

    @Test func skipsUnusableKeys() throws {
        let doc = #"""
            {"keys":[
              "not an object", 42, null,
              {"kty":"EC","kid":"ec","crv":"P-256","x":"AA","y":"AA"},
              {"kty":"rsa","kid":"lower","n":"AQAB","e":"AQAB"},
              {"kid":"nokty","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":7,"n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"nonn","e":"AQAB"},
              {"kty":"RSA","kid":"noe","n":"AQAB"},
              {"kty":"RSA","kid":"padded","n":"AQAB=","e":"AQAB"},
              {"kty":"RSA","kid":"stdalphabet","n":"ab+/","e":"AQAB"},
              {"kty":"RSA","kid":"badbits","n":"AQAC","e":"AQB"},
              {"kty":"RSA","kid":"numn","n":12,"e":"AQAB"},
              {"kty":"RSA","kid":"zeron","n":"AAAA","e":"AQAB"},
              {"kty":"RSA","kid":"emptyn","n":"","e":"AQAB"},
              {"kty":"RSA","kid":"rs512","alg":"RS512","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"algnull","alg":null,"n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"enc","use":"enc","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"usenum","use":1,"n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"good","use":"sig","alg":"RS256","n":"AQAB","e":"AQAB"},
              {"kty":"RSA","kid":"noalgnouse","n":"AQAB","e":"AQAB","extra":[1,2]}
            ]}
            """#
        let keys = try JWKSet.parseRSAKeys(bytes(doc))
        #expect(keys.map(\.kid) == ["good", "noalgnouse"])
    }

    @Test func emptyKeysArrayIsFine() throws {
        #expect(try JWKSet.parseRSAKeys(bytes(#"{"keys":[]}"#)) == [])
    }

    @Test func rejectsNonJWKSDocuments() {
        for doc in ["", "not json", "[]", #"{"keys":{}}"#, #"{"keys":"x"}"#, #"{"key":[]}"#, "{}", #"{"keys":[]} trailing"#, #"{"keys":null}"#] {
            #expect(throws: JWKSetError.self, "\(doc)") { try JWKSet.parseRSAKeys(bytes(doc)) }
        }
    }

    @Test func errorDoesNotEchoInput() {
        do {
            _ = try JWKSet.parseRSAKeys(bytes("{\"secret-value\" }"))
            Issue.record("expected failure")
        } catch {
            #expect(!error.description.contains("secret-value"))
            #expect(!error.message.isEmpty)
        }
    }

    @Test func serializeRoundTrips() throws {
        let keys = [
            JWK(kid: "E6q83RB15n", modulus: [0xAC, 0x45, 0x0A, 0x35, 0xFF], exponent: [1, 0, 1]),
            JWK(kid: "with\"quote", modulus: [0x01], exponent: [3]),
        ]
        let text = JWKSet.serialize(keys)
        #expect(try JWKSet.parseRSAKeys(bytes(text)) == keys)
        let first = try #require(JSONParser.parse(text)["keys"]?.arrayValue?.first)
        #expect(
            first
                == .object([
                    "kty": .string("RSA"), "kid": .string("E6q83RB15n"), "use": .string("sig"),
                    "alg": .string("RS256"), "n": .string("rEUKNf8"), "e": .string("AQAB"),
                ]))
    }

    @Test func serializeExactText() {
        #expect(JWKSet.serialize([]) == #"{"keys":[]}"#)
        #expect(
            JWKSet.serialize([JWK(kid: "k", modulus: [1], exponent: [1, 0, 1])])
                == #"{"keys":[{"kty":"RSA","kid":"k","use":"sig","alg":"RS256","n":"AQ","e":"AQAB"}]}"#)
    }
}
