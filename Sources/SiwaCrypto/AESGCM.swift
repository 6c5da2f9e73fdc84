internal import CCrypto

/// Why an AES-GCM operation failed. `rawValue` is a stable reason code.
public enum AESGCMError: String, Error, Sendable, CaseIterable, CustomStringConvertible {
    /// The key is not exactly 32 bytes.
    case invalidKeyLength = "invalid_key_length"
    /// The sealed bytes are shorter than nonce + tag (28 bytes) or too large.
    case malformedCiphertext = "malformed_ciphertext"
    /// The tag does not verify: tampered bytes, another key or other associated data.
    case authenticationFailed = "authentication_failed"
    /// OpenSSL failed to encrypt.
    case encryptionFailed = "encryption_failed"

    /// "aes-gcm error: <code>".
    public var description: String { "aes-gcm error: \(rawValue)" }
}

/// AES-256-GCM with a random 96-bit nonce. Sealed form: `nonce (12) || ciphertext || tag (16)`.
///
/// A random nonce per message keeps the collision risk negligible up to ~2^32 messages per key
/// (NIST SP 800-38D §8.3); rotate the key well before that.
public enum AESGCM {
    /// Key bytes (AES-256).
    public static let keyLength = 32
    /// Nonce bytes, prepended to the ciphertext.
    public static let nonceLength = 12
    /// Tag bytes, appended to the ciphertext.
    public static let tagLength = 16
    /// Largest plaintext accepted (1 MiB): refresh tokens are a few hundred bytes.
    public static let maxPlaintextLength = 1 << 20

    /// Encrypts and authenticates `plaintext`, also authenticating `aad` (not stored: the same
    /// bytes must be given to `open`). Throws `.invalidKeyLength`, or `.malformedCiphertext` for
    /// a plaintext above `maxPlaintextLength`.
    public static func seal(plaintext: [UInt8], key: [UInt8], aad: [UInt8] = []) throws(AESGCMError) -> [UInt8] {
        guard key.count == keyLength else { throw .invalidKeyLength }
        guard plaintext.count <= maxPlaintextLength, aad.count <= maxPlaintextLength else { throw .malformedCiphertext }
        return try seal(plaintext: plaintext, key: key, aad: aad, nonce: SecureRandom.bytes(nonceLength))
    }

    /// `seal` with a caller-chosen nonce: for known-answer tests only (a repeated nonce under one
    /// key breaks GCM).
    static func seal(plaintext: [UInt8], key: [UInt8], aad: [UInt8], nonce: [UInt8]) throws(AESGCMError) -> [UInt8] {
        defer { ERR_clear_error() }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .encryptionFailed }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        var tag = [UInt8](repeating: 0, count: tagLength)
        let ok: Bool = key.withUnsafeBufferPointer { k in
            nonce.withUnsafeBufferPointer { iv in
                guard EVP_EncryptInit_ex(ctx, FetchedAlgorithms.shared.aes256gcm, nil, k.baseAddress, iv.baseAddress) == 1
                else { return false }
                var outLength: Int32 = 0
                if !aad.isEmpty {
                    let rc = aad.withUnsafeBufferPointer {
                        EVP_EncryptUpdate(ctx, nil, &outLength, $0.baseAddress, Int32($0.count))
                    }
                    guard rc == 1 else { return false }
                }
                var written = 0
                let rc = ciphertext.withUnsafeMutableBufferPointer { out in
                    withNonNullBytes(plaintext) { p, count in
                        EVP_EncryptUpdate(ctx, out.baseAddress, &outLength, p, Int32(count))
                    }
                }
                guard rc == 1 else { return false }
                written += Int(outLength)
                let final = ciphertext.withUnsafeMutableBufferPointer {
                    EVP_EncryptFinal_ex(ctx, $0.baseAddress! + written, &outLength)
                }
                guard final == 1 else { return false }
                written += Int(outLength)
                guard written == plaintext.count else { return false }
                return tag.withUnsafeMutableBufferPointer {
                    siwa_EVP_CIPHER_CTX_get_gcm_tag(ctx, $0.baseAddress, Int32(tagLength)) == 1
                }
            }
        }
        guard ok else { throw .encryptionFailed }
        ciphertext.removeLast(tagLength)
        return nonce + ciphertext + tag
    }

    /// Verifies and decrypts bytes made by `seal` with the same key and `aad`. Returns nothing
    /// unless the tag verifies. Throws `.invalidKeyLength`, `.malformedCiphertext` or `.authenticationFailed`.
    public static func open(sealed: [UInt8], key: [UInt8], aad: [UInt8] = []) throws(AESGCMError) -> [UInt8] {
        guard key.count == keyLength else { throw .invalidKeyLength }
        guard sealed.count >= nonceLength + tagLength,
            sealed.count <= maxPlaintextLength + nonceLength + tagLength,
            aad.count <= maxPlaintextLength
        else { throw .malformedCiphertext }
        defer { ERR_clear_error() }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .authenticationFailed }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let nonce = Array(sealed[0..<nonceLength])
        let ciphertext = Array(sealed[nonceLength..<(sealed.count - tagLength)])
        var tag = Array(sealed[(sealed.count - tagLength)...])
        // One spare block so EVP_DecryptFinal_ex always has a valid pointer to write (nothing) to.
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + tagLength)
        let ok: Bool = key.withUnsafeBufferPointer { k in
            nonce.withUnsafeBufferPointer { iv in
                guard EVP_DecryptInit_ex(ctx, FetchedAlgorithms.shared.aes256gcm, nil, k.baseAddress, iv.baseAddress) == 1
                else { return false }
                var outLength: Int32 = 0
                if !aad.isEmpty {
                    let rc = aad.withUnsafeBufferPointer {
                        EVP_DecryptUpdate(ctx, nil, &outLength, $0.baseAddress, Int32($0.count))
                    }
                    guard rc == 1 else { return false }
                }
                let rc = plaintext.withUnsafeMutableBufferPointer { out in
                    withNonNullBytes(ciphertext) { c, count in
                        EVP_DecryptUpdate(ctx, out.baseAddress, &outLength, c, Int32(count))
                    }
                }
                guard rc == 1, Int(outLength) == ciphertext.count else { return false }
                let tagSet = tag.withUnsafeMutableBufferPointer {
                    siwa_EVP_CIPHER_CTX_set_gcm_tag(ctx, $0.baseAddress, Int32(tagLength)) == 1
                }
                guard tagSet else { return false }
                return plaintext.withUnsafeMutableBufferPointer {
                    EVP_DecryptFinal_ex(ctx, $0.baseAddress! + ciphertext.count, &outLength) == 1
                }
            }
        }
        guard ok else {
            // Wipe whatever was decrypted before the tag check failed.
            for i in plaintext.indices { plaintext[i] = 0 }
            throw .authenticationFailed
        }
        plaintext.removeLast(tagLength)
        return plaintext
    }
}

/// Why a token key could not be loaded. `code.rawValue` is a stable reason code.
public struct TokenKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, CaseIterable {
        /// The file cannot be opened or read.
        case unreadableFile = "unreadable_file"
        /// Not 32 raw bytes, nor 64 hex characters (with at most one trailing newline).
        case wrongFormat = "wrong_format"
        /// 32 printable characters or whitespace (a password, not random bytes) or all zero bytes.
        case weakKey = "weak_key"
    }

    public var code: Code
    /// A sentence for operators; never contains key material.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// "<code>: <message>".
    public var description: String { "\(code.rawValue): \(message)" }
}

/// The AES-256-GCM key that encrypts stored refresh tokens (`SIWA_TOKEN_KEY_FILE`).
///
/// `id` (the first 8 hex characters of SHA-256 of the key) is stored next to each ciphertext so
/// that, after a key rotation, the right key can be chosen (and a missing one named). Its
/// `description` shows only the id, so logging the value leaks nothing.
public struct TokenKey: Sendable, Equatable, CustomStringConvertible {
    let bytes: [UInt8]
    /// First 8 lowercase hex characters of SHA-256(key).
    public let id: String

    /// A key from exactly 32 bytes. Throws `.wrongFormat` for another length, `.weakKey` if all zero.
    public init(bytes: [UInt8]) throws(TokenKeyError) {
        guard bytes.count == AESGCM.keyLength else {
            throw TokenKeyError(.wrongFormat, "a token key is \(AESGCM.keyLength) bytes, not \(bytes.count)")
        }
        guard bytes.contains(where: { $0 != 0 }) else { throw TokenKeyError(.weakKey, "the token key is all zero bytes") }
        self.bytes = bytes
        self.id = String(SHA256.hex(SHA256.hash(bytes)).prefix(8))
    }

    /// A new random key (tests and `openssl rand 32`-style setup).
    public static func generate() -> TokenKey {
        try! TokenKey(bytes: SecureRandom.bytes(AESGCM.keyLength))
    }

    /// Parses the contents of a key file (`SIWA_TOKEN_KEY_FILE`), which is either
    /// 1. exactly 32 bytes: the raw key (refused as `.weakKey` if every byte is printable ASCII or
    ///    whitespace: that is a password, perhaps with a newline, not random bytes); or
    /// 2. exactly 64 hex characters (either case), with at most one trailing newline, as
    ///    `openssl rand -hex 32` writes.
    /// Anything else (base64, spaces, two newlines, another length) is `.wrongFormat`.
    public init(fileContents: [UInt8]) throws(TokenKeyError) {
        if fileContents.count == AESGCM.keyLength {
            let textual = fileContents.allSatisfy { ($0 >= 0x20 && $0 < 0x7f) || $0 == 0x09 || $0 == 0x0a || $0 == 0x0d }
            guard !textual else {
                throw TokenKeyError(
                    .weakKey,
                    "the token key file holds 32 characters of text (a password?), not 32 random bytes; "
                        + "make one with `openssl rand -hex 32`")
            }
            try self.init(bytes: fileContents)
            return
        }
        var digits = fileContents[...]
        if digits.last == 0x0a { digits = digits.dropLast() }
        if digits.count == 2 * AESGCM.keyLength, let key = Hex.decode(Array(digits)) {
            try self.init(bytes: key)
            return
        }
        throw TokenKeyError(
            .wrongFormat,
            "expected exactly 32 raw bytes or 64 hex characters (one trailing newline allowed), "
                + "found \(fileContents.count) bytes; make one with `openssl rand -hex 32`")
    }

    /// Reads and parses a key file (see `init(fileContents:)`).
    public init(contentsOfFile path: String) throws(TokenKeyError) {
        let bytes: [UInt8]
        do {
            bytes = try readKeyFile(path)
        } catch {
            throw TokenKeyError(.unreadableFile, error.message)
        }
        try self.init(fileContents: bytes)
    }

    /// `AESGCM.seal` with this key.
    public func seal(_ plaintext: [UInt8], aad: [UInt8] = []) throws(AESGCMError) -> [UInt8] {
        try AESGCM.seal(plaintext: plaintext, key: bytes, aad: aad)
    }

    /// `AESGCM.open` with this key.
    public func open(_ sealed: [UInt8], aad: [UInt8] = []) throws(AESGCMError) -> [UInt8] {
        try AESGCM.open(sealed: sealed, key: bytes, aad: aad)
    }

    /// "TokenKey(id)": never the key.
    public var description: String { "TokenKey(\(id))" }
}
