@testable import SiwaCore

/// Builders for test tokens shaped like Apple's real notifications. Nothing is signed: tests pass a
/// closure that decides the signature outcome.
enum Fixture {
    static let audience = "de.lunaone.sign-in-with-apple-example"
    static let sub = "000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"
    static let iat: Int64 = 1_752_572_197
    static let exp: Int64 = 1_752_658_597
    static let now: Int64 = 1_752_572_200
    static let eventTime: Int64 = 1_752_572_190_719

    static let headerJSON = #"{"kid":"E6q83RB15n","alg":"RS256"}"#

    static let eventsString = #"{"type":"consent-revoked","sub":"000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105","event_time":1752572190719}"#

    /// The claims of a real Apple token, as members (events is a JSON string, as Apple sends it).
    static var claims: [String: JSONValue] {
        [
            "iss": .string("https://appleid.apple.com"),
            "aud": .string(audience),
            "exp": .number(Double(exp)),
            "iat": .number(Double(iat)),
            "jti": .string("8sIboCeUBQuZ0M7x91YKZQ"),
            "events": .string(eventsString),
        ]
    }

    static var header: [String: JSONValue] {
        ["kid": .string("E6q83RB15n"), "alg": .string("RS256")]
    }

    static let signature: [UInt8] = Array("not-a-real-signature".utf8)

    static func token(headerJSON: String, claimsJSON: String, signature: [UInt8] = Fixture.signature) -> String {
        Base64URL.encode(Array(headerJSON.utf8)) + "." + Base64URL.encode(Array(claimsJSON.utf8)) + "." + Base64URL.encode(signature)
    }

    static func token(
        header: [String: JSONValue] = Fixture.header, claims: [String: JSONValue] = Fixture.claims,
        signature: [UInt8] = Fixture.signature
    ) -> String {
        token(headerJSON: JSONValue.object(header).serialized(), claimsJSON: JSONValue.object(claims).serialized(), signature: signature)
    }

    /// Claims with `events` replaced by the given members (as a JSON string, like Apple).
    static func claims(events: [String: JSONValue]) -> [String: JSONValue] {
        var c = claims
        c["events"] = .string(JSONValue.object(events).serialized())
        return c
    }

    static var eventMembers: [String: JSONValue] {
        ["type": .string("consent-revoked"), "sub": .string(sub), "event_time": .number(Double(eventTime))]
    }

    static func body(_ token: String) -> [UInt8] {
        Array(JSONValue.object(["payload": .string(token)]).serialized().utf8)
    }

    static let verifier = NotificationVerifier(policy: VerificationPolicy(audiences: [audience]))
}

/// Records calls to the signature closure.
final class SignatureSpy {
    var calls: [(kid: String, signingInput: [UInt8], signature: [UInt8])] = []
    let result: SignatureCheck

    init(_ result: SignatureCheck) {
        self.result = result
    }

    func check(_ kid: String, _ input: [UInt8], _ signature: [UInt8]) -> SignatureCheck {
        calls.append((kid, input, signature))
        return result
    }
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
