/// An RSA public key from a JWK set.
public struct JWK: Sendable, Equatable {
    public var kid: String
    /// Big-endian modulus without leading zero bytes.
    public var modulus: [UInt8]
    /// Big-endian public exponent.
    public var exponent: [UInt8]

    public init(kid: String, modulus: [UInt8], exponent: [UInt8]) {
        self.kid = kid
        self.modulus = modulus
        self.exponent = exponent
    }
}
