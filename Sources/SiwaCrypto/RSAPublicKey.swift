internal import CCrypto
import Synchronization

/// Immutable RSA public key used to verify RS256 (RSASSA-PKCS1-v1_5 + SHA-256)
/// signatures.
///
/// `@unchecked Sendable`: the only mutable-looking state is the `EVP_PKEY`
/// pointer, which is created in `init`, never mutated afterwards, and freed in
/// `deinit`. OpenSSL 3 documents `EVP_PKEY` objects as safe for concurrent
/// read-only use from multiple threads; a verification takes a context from the key's pool (or
/// makes one) and returns it, so no OpenSSL context is used by two threads at once.
public final class RSAPublicKey: @unchecked Sendable {
    private let pkey: OpaquePointer
    /// Ready RS256 verify contexts for this key, reused across calls (each by one thread at a time).
    private let contexts = Mutex<[VerifyContext]>([])
    /// Modulus size in bits.
    public let bits: Int
    /// Exact signature length in bytes for this key.
    private let signatureLength: Int

    /// Builds a key from big-endian modulus and public exponent (as found,
    /// base64url-decoded, in a JWK's `n` and `e`). Leading zero bytes are ignored.
    ///
    /// - Throws: `.keyTooSmall` below 2048 bits, `.keyTooLarge` above 8192 bits,
    ///   `.invalidKey` for an empty or even modulus, or an exponent that is even,
    ///   ≤ 1, or wider than 64 bits.
    public init(modulus: [UInt8], exponent: [UInt8]) throws(CryptoError) {
        let n = strippingLeadingZeros(modulus)
        let e = strippingLeadingZeros(exponent)

        let modulusBits = bitLength(n)
        guard modulusBits > 0 else { throw CryptoError(code: .invalidKey) }
        guard modulusBits >= minimumRSABits else { throw CryptoError(code: .keyTooSmall) }
        guard modulusBits <= maximumRSABits else { throw CryptoError(code: .keyTooLarge) }
        // A product of odd primes is odd.
        guard n.last! & 1 == 1 else { throw CryptoError(code: .invalidKey) }

        guard let lastE = e.last, e.count <= 8, lastE & 1 == 1,
            !(e.count == 1 && lastE == 1)
        else { throw CryptoError(code: .invalidKey) }

        guard let pkey = Self.makeKey(n: Array(n), e: Array(e)) else {
            ERR_clear_error()
            throw CryptoError(code: .invalidKey)
        }
        self.pkey = pkey
        self.bits = Int(EVP_PKEY_get_bits(pkey))
        self.signatureLength = Int(EVP_PKEY_get_size(pkey))
    }

    deinit {
        contexts.withLock { pool in pool.forEach { EVP_PKEY_CTX_free($0.pointer) } }
        EVP_PKEY_free(pkey)
    }

    private static func makeKey(n: [UInt8], e: [UInt8]) -> OpaquePointer? {
        let nBN = n.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), nil) }
        defer { BN_free(nBN) }
        let eBN = e.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), nil) }
        defer { BN_free(eBN) }
        guard let nBN, let eBN else { return nil }

        guard let builder = OSSL_PARAM_BLD_new() else { return nil }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard siwa_OSSL_PARAM_BLD_push_rsa_n(builder, nBN) == 1,
            siwa_OSSL_PARAM_BLD_push_rsa_e(builder, eBN) == 1,
            let params = OSSL_PARAM_BLD_to_param(builder)
        else { return nil }
        defer { OSSL_PARAM_free(params) }

        guard let ctx = siwa_EVP_PKEY_CTX_new_rsa() else { return nil }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_fromdata_init(ctx) == 1 else { return nil }
        var pkey: OpaquePointer? = nil
        guard EVP_PKEY_fromdata(ctx, &pkey, siwa_EVP_PKEY_PUBLIC_KEY(), params) == 1 else {
            EVP_PKEY_free(pkey)
            return nil
        }
        return pkey
    }

    /// Verifies an RSASSA-PKCS1-v1_5 / SHA-256 signature over `message`.
    ///
    /// Returns false for any failure, including a signature whose length is not
    /// exactly the modulus length. Leaves the calling thread's OpenSSL error
    /// queue empty.
    public func verifyRS256(message: [UInt8], signature: [UInt8]) -> Bool {
        defer { ERR_clear_error() }
        guard signature.count == signatureLength else { return false }
        // SHA-256 with the algorithm fetched once; the verify context comes from a small pool
        // (no provider lookup, no allocation per call).
        var digest = [UInt8](repeating: 0, count: 32)
        var digestLength: UInt32 = 0
        let hashed = digest.withUnsafeMutableBufferPointer { out in
            withNonNullBytes(message) { msg, msgCount in
                EVP_Digest(msg, msgCount, out.baseAddress, &digestLength, FetchedAlgorithms.shared.sha256, nil)
            }
        }
        guard hashed == 1, digestLength == 32 else { return false }
        guard let ctx = contexts.withLock({ $0.popLast()?.pointer }) ?? siwa_rs256_verify_ctx(pkey, FetchedAlgorithms.shared.sha256) else {
            return false
        }
        let result = withNonNullBytes(signature) { sig, sigCount in
            EVP_PKEY_verify(ctx, sig, sigCount, digest, 32)
        }
        let handle = VerifyContext(pointer: ctx)
        let kept = contexts.withLock { pool -> Bool in
            guard pool.count < Self.maxPooledContexts else { return false }
            pool.append(handle)
            return true
        }
        if !kept { EVP_PKEY_CTX_free(ctx) }
        return result == 1
    }

    /// Verify contexts kept per key (one per concurrent verifier is enough).
    static let maxPooledContexts = 16
}

/// One `EVP_PKEY_CTX` ready for RS256 verification. `@unchecked Sendable`: it moves between
/// threads through the pool's lock and is used by one thread at a time.
struct VerifyContext: @unchecked Sendable {
    let pointer: OpaquePointer
}
