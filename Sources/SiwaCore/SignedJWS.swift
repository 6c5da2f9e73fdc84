/// Bounds on what an Apple-signed token may carry, shared by `NotificationVerifier` and
/// `IDTokenVerifier` (lengths in Unicode scalars).
public enum TokenLimits {
    /// `jti`.
    public static let maxJTILength = 255
    /// `sub` (and `transfer_sub`).
    public static let maxSubLength = 255
    /// The event's `type`.
    public static let maxTypeLength = 64
    /// `email`.
    public static let maxEmailLength = 320

    /// `a + b`, saturating at `Int64.min`/`.max` (claim values are attacker-controlled).
    public static func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        if overflow { return b > 0 ? .max : .min }
        return sum
    }
}

/// The checks every Apple-signed token passes first, in this order (the first failure wins):
/// structure (a compact JWS with JSON header and claims), `alg` == RS256, a non-empty `kid`, the
/// signature (the caller's closure, called exactly once and only after the earlier checks), no
/// `crit` (RFC 7515 §4.1.11: we understand no extension; checked after the signature so a forged
/// token still reads as forged), `iss` byte-exact (RFC 7519 §2: no canonicalization). Both
/// verifiers run it, then check their own claims and map `Failure` to their own errors.
public struct SignedJWS: Sendable {
    public let jws: CompactJWS
    public let kid: String
    public let issuer: String

    /// Why the prelude refused a token, with what each verifier needs to describe it.
    public enum Failure: Error, Sendable, Equatable {
        /// Not a compact JWS; the `RejectReason` of the parse (`malformed_jws`, `malformed_header`, ...).
        case structure(RejectReason)
        /// `alg` (as found, nil when missing) is not RS256.
        case algorithm(JSONValue?)
        /// `kid` (as found) is missing, empty or not a string.
        case missingKid(JSONValue?)
        /// The signature check said this (never `.valid`).
        case signature(kid: String, SignatureCheck)
        /// A `crit` header (the signature was valid).
        case crit
        /// `iss` (as found) is not the expected issuer.
        case issuer(JSONValue?)
    }

    /// A check passed, in order (for step-by-step inspection).
    public enum Passed: Sendable, Equatable {
        case structure(signatureBytes: Int)
        case algorithm
        case key(kid: String)
        case signature
        case issuer(String)
    }

    /// Runs the prelude on `token`; `passed` hears each check that passed, in order.
    public static func verify(
        token: String, issuer expected: String,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck,
        passed: (Passed) -> Void = { _ in }
    ) throws(Failure) -> SignedJWS {
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(token)
        } catch {
            throw .structure(error)
        }
        passed(.structure(signatureBytes: jws.signature.count))
        guard jws.header["alg"]?.stringValue == "RS256" else { throw .algorithm(jws.header["alg"]) }
        passed(.algorithm)
        guard let kid = jws.header["kid"]?.stringValue, !kid.isEmpty else { throw .missingKid(jws.header["kid"]) }
        let check = checkSignature(kid, jws.signingInput, jws.signature)
        switch check {
        case .valid:
            passed(.key(kid: kid))
            passed(.signature)
        case .invalid:
            passed(.key(kid: kid))
            throw .signature(kid: kid, check)
        case .unknownKey, .keysUnavailable:
            throw .signature(kid: kid, check)
        }
        if jws.header["crit"] != nil { throw .crit }
        guard let issuer = jws.claims["iss"]?.stringValue, issuer.utf8.elementsEqual(expected.utf8) else {
            throw .issuer(jws.claims["iss"])
        }
        passed(.issuer(issuer))
        return SignedJWS(jws: jws, kid: kid, issuer: issuer)
    }
}
