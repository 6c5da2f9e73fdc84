internal import CCrypto

/// RSA private key, used by tests and tooling to mint RS256 tokens.
///
/// `@unchecked Sendable`: the `EVP_PKEY` pointer is created in `init`, never
/// mutated afterwards and freed in `deinit`; OpenSSL 3 `EVP_PKEY` objects are
/// safe for concurrent read-only use, and every signing operation uses its own
/// `EVP_MD_CTX`.
public final class RSAPrivateKey: @unchecked Sendable {
    private let pkey: OpaquePointer
    /// Big-endian modulus, no leading zeros.
    public let modulus: [UInt8]
    /// Big-endian public exponent, no leading zeros.
    public let exponent: [UInt8]
    /// Modulus size in bits.
    public let bits: Int

    /// Takes ownership of `pkey` (freed on failure).
    private init(taking pkey: OpaquePointer) throws(CryptoError) {
        guard siwa_EVP_PKEY_is_rsa(pkey) == 1,
            let n = bigEndianParameter(pkey, siwa_EVP_PKEY_get_rsa_n),
            let e = bigEndianParameter(pkey, siwa_EVP_PKEY_get_rsa_e),
            !n.isEmpty, !e.isEmpty
        else {
            EVP_PKEY_free(pkey)
            ERR_clear_error()
            throw CryptoError(code: .invalidKey)
        }
        self.pkey = pkey
        self.modulus = n
        self.exponent = e
        self.bits = Int(EVP_PKEY_get_bits(pkey))
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// Generates a new key with public exponent 65537. Sizes from 1024 to 8192
    /// bits are allowed (1024 only so tests can prove public-key import rejects
    /// it); smaller throws `.keyTooSmall`, larger `.keyTooLarge`.
    public static func generate(bits: Int = 2048) throws(CryptoError) -> RSAPrivateKey {
        guard bits >= 1024 else { throw CryptoError(code: .keyTooSmall) }
        guard bits <= maximumRSABits else { throw CryptoError(code: .keyTooLarge) }
        defer { ERR_clear_error() }
        guard let ctx = siwa_EVP_PKEY_CTX_new_rsa() else {
            throw CryptoError(code: .keyGenerationFailed)
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var pkey: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(ctx) == 1,
            EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)) == 1,
            EVP_PKEY_generate(ctx, &pkey) == 1,
            let pkey
        else {
            EVP_PKEY_free(pkey)
            throw CryptoError(code: .keyGenerationFailed)
        }
        return try RSAPrivateKey(taking: pkey)
    }

    /// Parses an unencrypted PEM private key: PKCS#8 ("BEGIN PRIVATE KEY") or
    /// PKCS#1 ("BEGIN RSA PRIVATE KEY"). Encrypted keys are refused without
    /// prompting. Throws `.invalidPEM` if no key can be decoded, `.invalidKey`
    /// if the key is not RSA.
    public convenience init(pem: String) throws(CryptoError) {
        defer { ERR_clear_error() }
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty, bytes.count <= Int(Int32.max) else {
            throw CryptoError(code: .invalidPEM)
        }
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, siwa_pem_no_password_cb(), nil)
        }
        guard let parsed else { throw CryptoError(code: .invalidPEM) }
        try self.init(taking: parsed)
    }

    /// Unencrypted PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----").
    public var pemRepresentation: String {
        defer { ERR_clear_error() }
        guard let bio = BIO_new(BIO_s_mem()) else {
            fatalError("SiwaCrypto: cannot allocate memory BIO")
        }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PKCS8PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1,
            let pem = memoryBIOString(bio)
        else {
            fatalError("SiwaCrypto: cannot encode private key as PKCS#8 PEM")
        }
        return pem
    }

    /// The matching public key. Subject to the same size rules as
    /// `RSAPublicKey.init(modulus:exponent:)`, so a 1024-bit key throws
    /// `.keyTooSmall`.
    public func publicKey() throws(CryptoError) -> RSAPublicKey {
        try RSAPublicKey(modulus: modulus, exponent: exponent)
    }

    /// RSASSA-PKCS1-v1_5 signature with SHA-256 (deterministic).
    public func signRS256(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        defer { ERR_clear_error() }
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError(code: .signingFailed) }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw CryptoError(code: .signingFailed)
        }
        var length = 0
        guard EVP_DigestSign(ctx, nil, &length, nil, 0) == 1, length > 0 else {
            throw CryptoError(code: .signingFailed)
        }
        var signature = [UInt8](repeating: 0, count: length)
        let ok = signature.withUnsafeMutableBufferPointer { sig in
            withNonNullBytes(message) { msg, count in
                EVP_DigestSign(ctx, sig.baseAddress, &length, msg, count)
            }
        }
        guard ok == 1, length <= signature.count else { throw CryptoError(code: .signingFailed) }
        signature.removeSubrange(length...)
        return signature
    }
}
