internal import CCrypto
import Synchronization

/// Immutable RSA public key used to verify RS256 (RSASSA-PKCS1-v1_5 + SHA-256)
/// signatures.
///
/// `@unchecked Sendable`: the only mutable-looking state is the `EVP_PKEY`
/// pointer, which is created in `init`, never mutated afterwards, and freed in
/// `deinit`. OpenSSL 3 documents `EVP_PKEY` objects as safe for concurrent
/// read-only use from multiple threads; a verification takes a context from the key's slots (or
/// makes one) and puts it back, so no OpenSSL context is used by two threads at once.
public final class RSAPublicKey: @unchecked Sendable {
    private let pkey: OpaquePointer
    /// Ready RS256 verify contexts for this key, reused across calls: each slot holds one
    /// context's address or 0, taken and put back with atomic exchanges (a lock here has the
    /// listener threads spinning on each other: bench/README.md, "`receive`, profiled").
    private let slots: [ContextSlot] = (0..<RSAPublicKey.contextSlots).map { _ in ContextSlot() }
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
        for slot in slots {
            if let ctx = OpaquePointer(bitPattern: slot.address.exchange(0, ordering: .acquiring)) { EVP_PKEY_CTX_free(ctx) }
        }
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
        // The digest on the stack (no allocation per call).
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { digest in
            var digestLength: UInt32 = 0
            let hashed = withNonNullBytes(message) { msg, msgCount in
                EVP_Digest(msg, msgCount, digest.baseAddress, &digestLength, FetchedAlgorithms.shared.sha256, nil)
            }
            guard hashed == 1, digestLength == 32 else { return false }
            guard let ctx = takeContext() ?? siwa_rs256_verify_ctx(pkey, FetchedAlgorithms.shared.sha256) else {
                return false
            }
            let result = withNonNullBytes(signature) { sig, sigCount in
                EVP_PKEY_verify(ctx, sig, sigCount, digest.baseAddress, 32)
            }
            putBack(ctx)
            return result == 1
        }
    }

    /// A ready context from a slot, or nil when every slot is empty (all in use, or none made yet).
    private func takeContext() -> OpaquePointer? {
        for slot in slots {
            // A load first: an empty slot costs no write to a shared cache line.
            guard slot.address.load(ordering: .relaxed) != 0 else { continue }
            if let ctx = OpaquePointer(bitPattern: slot.address.exchange(0, ordering: .acquiring)) { return ctx }
        }
        return nil
    }

    /// Keeps `ctx` in the first empty slot; frees it when all are full.
    private func putBack(_ ctx: OpaquePointer) {
        let address = UInt(bitPattern: Int(bitPattern: ctx))
        for slot in slots where slot.address.load(ordering: .relaxed) == 0 {
            if slot.address.compareExchange(expected: 0, desired: address, ordering: .releasing).exchanged { return }
        }
        EVP_PKEY_CTX_free(ctx)
    }

    /// Verify contexts kept per key (one per concurrent verifier is enough).
    static let contextSlots = 16
}

/// One place for a ready `EVP_PKEY_CTX`: its address, or 0 when empty. A context is owned by
/// the slot while it is there, and by the one thread that took it out (an atomic exchange) after.
final class ContextSlot: Sendable {
    let address = Atomic<UInt>(0)
}
