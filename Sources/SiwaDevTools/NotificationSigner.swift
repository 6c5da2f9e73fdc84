import Foundation
import SiwaCore
import SiwaCrypto
import SiwaFetch

/// Builds Apple-shaped notifications and signs them: `simulate` uses the dev key; tests use keys
/// of their own.
public struct NotificationSigner: Sendable {
    public let key: RSAPrivateKey
    public let kid: String

    public init(key: RSAPrivateKey, kid: String) {
        self.key = key
        self.kid = kid
    }

    /// A random 22-character base64url `jti`, like Apple's.
    public static func newJTI() -> String {
        Base64URL.encode(SecureRandom.bytes(16))
    }

    /// The `events` claim Apple sends: a JSON object encoded as a string.
    public static func eventsJSON(
        type: String, sub: String, eventTimeMillis: Int64, email: String? = nil,
        isPrivateEmail: Bool? = nil
    ) -> String {
        var members: [String: JSONValue] = [
            "type": .string(type), "sub": .string(sub), "event_time": .number(Double(eventTimeMillis)),
        ]
        if let email { members["email"] = .string(email) }
        if let isPrivateEmail { members["is_private_email"] = .string(isPrivateEmail ? "true" : "false") }
        return JSONValue.object(members).serialized()
    }

    /// Apple's claim set for one event, issued `now`.
    public static func claims(
        audience: String, type: String, sub: String, eventTimeMillis: Int64? = nil,
        email: String? = nil, isPrivateEmail: Bool? = nil, jti: String = newJTI(),
        now: Int64 = Int64(Date().timeIntervalSince1970)
    ) -> [String: JSONValue] {
        [
            "iss": .string(VerificationPolicy.appleIssuer),
            "aud": .string(audience),
            "exp": .number(Double(now + 86400)),
            "iat": .number(Double(now)),
            "jti": .string(jti),
            "events": .string(
                eventsJSON(
                    type: type, sub: sub, eventTimeMillis: eventTimeMillis ?? now * 1000,
                    email: email, isPrivateEmail: isPrivateEmail)),
        ]
    }

    /// A compact JWS over `claims` with header `{"kid":..,"alg":"RS256"}` (or any header given).
    public func sign(claims: [String: JSONValue], header: [String: JSONValue]? = nil) throws -> String {
        let head = header ?? ["kid": .string(kid), "alg": .string("RS256")]
        let input =
            Base64URL.encode(Array(JSONValue.object(head).serialized().utf8)) + "."
            + Base64URL.encode(Array(JSONValue.object(claims).serialized().utf8))
        let signature = try key.signRS256(Array(input.utf8))
        return input + "." + Base64URL.encode(signature)
    }

    /// The request body Apple POSTs.
    public static func body(token: String) -> String {
        JSONValue.object(["payload": .string(token)]).serialized()
    }

    /// The JWKS document publishing this signer's public key.
    public var jwks: String {
        JWKSet.serialize([JWK(kid: kid, modulus: key.modulus, exponent: key.exponent)])
    }

    /// POSTs `body` like Apple does; returns status and response body.
    public static func post(body: String, to url: String, timeout: Duration = .seconds(10)) throws -> FetchResponse {
        Fetcher.initialize()
        let scheme = FetchScheme(url: url) ?? .http
        return try Fetcher.perform(
            FetchRequest(
                url: url, method: "POST",
                headers: ["Content-Type: application/json;charset=UTF-8"],
                body: Array(body.utf8), connectTimeout: .seconds(5), totalTimeout: timeout,
                allowedSchemes: [scheme]))
    }
}
