internal import CCrypto

/// Why an EC key could not be loaded or used. `code.rawValue` is a stable reason code; `message`
/// explains it in words (a file path or a curve name at most, never key material).
public struct ECKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, CaseIterable {
        /// The key file cannot be opened or read (missing, permissions, a directory, too large).
        case unreadableFile = "unreadable_file"
        /// No PEM block (`-----BEGIN ...-----`) in the text.
        case notPEM = "not_pem"
        /// A PEM block that is not a private key (a public key, a certificate, ...).
        case notPrivateKey = "not_private_key"
        /// An encrypted private key (`ENCRYPTED PRIVATE KEY`): `.p8` files from Apple are not encrypted.
        case encryptedKey = "encrypted_key"
        /// A private-key PEM block whose contents do not decode (truncated or corrupted).
        case malformedKey = "malformed_key"
        /// An RSA key where an EC P-256 key is needed.
        case rsaKey = "rsa_key"
        /// A key of another type (Ed25519, DSA, ...).
        case notEC = "not_ec"
        /// An EC key on a curve other than P-256 (e.g. P-384, secp256k1).
        case wrongCurve = "wrong_curve"
        /// A public key that does not decode as a P-256 SubjectPublicKeyInfo.
        case invalidPublicKey = "invalid_public_key"
        /// OpenSSL could not generate a key.
        case keyGenerationFailed = "key_generation_failed"
        /// OpenSSL could not sign.
        case signingFailed = "signing_failed"
    }

    public var code: Code
    /// A sentence for operators, e.g. "the key is on curve secp384r1; ES256 needs P-256 (prime256v1)".
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// "<code>: <message>".
    public var description: String { "\(code.rawValue): \(message)" }
}

/// Algorithms fetched from the default provider once per process: passing a fetched `EVP_MD` /
/// `EVP_CIPHER` avoids a provider lookup on every operation. Never freed (process lifetime).
///
/// `@unchecked Sendable`: the pointers are written once in `init` and only read afterwards;
/// OpenSSL 3 fetched algorithm objects are immutable and safe to share between threads.
final class FetchedAlgorithms: @unchecked Sendable {
    static let shared = FetchedAlgorithms()

    let sha256: OpaquePointer
    let aes256gcm: OpaquePointer

    private init() {
        guard let md = siwa_EVP_MD_fetch_sha256(), let cipher = siwa_EVP_CIPHER_fetch_aes256gcm() else {
            fatalError("SiwaCrypto: OpenSSL provides no SHA2-256 or AES-256-GCM")
        }
        sha256 = md
        aes256gcm = cipher
    }
}

/// Checks that `pkey` is an EC key on P-256; maps anything else to a typed error.
private func requireP256(_ pkey: OpaquePointer, invalid: ECKeyError.Code) throws(ECKeyError) {
    if siwa_EVP_PKEY_is_rsa(pkey) == 1 {
        throw ECKeyError(.rsaKey, "this is an RSA key; ES256 needs an EC key on P-256 (prime256v1)")
    }
    guard siwa_EVP_PKEY_is_ec(pkey) == 1 else {
        let type = EVP_PKEY_get0_type_name(pkey).map { String(cString: $0) } ?? "unknown"
        throw ECKeyError(.notEC, "this is a \(type) key; ES256 needs an EC key on P-256 (prime256v1)")
    }
    var name = [CChar](repeating: 0, count: 80)
    var length = 0
    guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else {
        throw ECKeyError(invalid, "the EC key names no curve (explicit curve parameters are not supported)")
    }
    let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard curve == "prime256v1" || curve == "P-256" else {
        throw ECKeyError(.wrongCurve, "the key is on curve \(curve); ES256 needs P-256 (prime256v1)")
    }
}

/// The label of the first PEM block (`PRIVATE KEY` for `-----BEGIN PRIVATE KEY-----`), or nil.
func firstPEMLabel(_ text: String) -> String? {
    let begin = "-----BEGIN "
    guard let start = text.utf8.firstRange(of: begin.utf8) else { return nil }
    let rest = text.utf8[start.upperBound...]
    guard let end = rest.firstRange(of: "-----".utf8) else { return nil }
    let label = rest[..<end.lowerBound]
    guard !label.isEmpty, label.count <= 64 else { return nil }
    return String(decoding: label, as: UTF8.self)
}

/// An EC P-256 private key: signs ES256 client secrets (JOSE `r || s` signatures).
///
/// `@unchecked Sendable`: the `EVP_PKEY` pointer is created in `init`, never mutated afterwards and
/// freed in `deinit`; OpenSSL 3 `EVP_PKEY` objects are safe for concurrent read-only use, and every
/// signature uses its own `EVP_MD_CTX`.
public final class ECPrivateKey: @unchecked Sendable {
    private let pkey: OpaquePointer
    /// The public half.
    public let publicKey: ECPublicKey

    /// Takes ownership of `pkey` (freed on failure).
    private init(taking pkey: OpaquePointer) throws(ECKeyError) {
        do {
            try requireP256(pkey, invalid: .malformedKey)
            self.publicKey = try ECPublicKey(spkiDER: try Self.spki(pkey))
        } catch {
            EVP_PKEY_free(pkey)
            ERR_clear_error()
            throw error
        }
        self.pkey = pkey
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    private static func spki(_ pkey: OpaquePointer) throws(ECKeyError) -> [UInt8] {
        let count = Int(i2d_PUBKEY(pkey, nil))
        guard count > 0 else { throw ECKeyError(.malformedKey, "the key has no encodable public half") }
        var der = [UInt8](repeating: 0, count: count)
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_PUBKEY(pkey, &cursor)
        }
        guard Int(written) == count else { throw ECKeyError(.malformedKey, "the key has no encodable public half") }
        return der
    }

    /// A new random P-256 key (tests and development).
    public static func generate() throws(ECKeyError) -> ECPrivateKey {
        defer { ERR_clear_error() }
        guard let ctx = siwa_EVP_PKEY_CTX_new_ec() else {
            throw ECKeyError(.keyGenerationFailed, "cannot create an EC key generation context")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var pkey: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(ctx) == 1, siwa_EVP_PKEY_CTX_set_group_p256(ctx) == 1,
            EVP_PKEY_generate(ctx, &pkey) == 1, let pkey
        else {
            EVP_PKEY_free(pkey)
            throw ECKeyError(.keyGenerationFailed, "OpenSSL could not generate a P-256 key")
        }
        return try ECPrivateKey(taking: pkey)
    }

    /// Parses an unencrypted PEM private key: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, the `.p8`
    /// format Apple hands out) or SEC 1 (`-----BEGIN EC PRIVATE KEY-----`). Only the first PEM
    /// block is considered. Encrypted keys are refused without prompting.
    ///
    /// - Throws: `.notPEM`, `.notPrivateKey`, `.encryptedKey`, `.malformedKey`, `.rsaKey`,
    ///   `.notEC`, `.wrongCurve`.
    public convenience init(pem: String) throws(ECKeyError) {
        defer { ERR_clear_error() }
        guard let label = firstPEMLabel(pem) else {
            throw ECKeyError(.notPEM, "no PEM block found (expected -----BEGIN PRIVATE KEY-----, the .p8 format)")
        }
        switch label {
        case "PRIVATE KEY", "EC PRIVATE KEY":
            break
        case "RSA PRIVATE KEY":
            throw ECKeyError(.rsaKey, "this is an RSA key; ES256 needs an EC key on P-256 (prime256v1)")
        case "ENCRYPTED PRIVATE KEY":
            throw ECKeyError(.encryptedKey, "the private key is encrypted; use the unencrypted .p8 file from Apple")
        default:
            throw ECKeyError(.notPrivateKey, "the PEM block is a \(label), not a private key")
        }
        let bytes = Array(pem.utf8)
        guard bytes.count <= Int(Int32.max) else { throw ECKeyError(.malformedKey, "the key text is too large") }
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, siwa_pem_no_password_cb(), nil)
        }
        guard let parsed else {
            throw ECKeyError(.malformedKey, "the \(label) block does not decode (truncated or corrupted)")
        }
        try self.init(taking: parsed)
    }

    /// Reads and parses a `.p8` file (see `init(pem:)`). Throws `.unreadableFile` naming the path
    /// and the system's reason when it cannot be read.
    public convenience init(contentsOfFile path: String) throws(ECKeyError) {
        let bytes: [UInt8]
        do {
            bytes = try readKeyFile(path)
        } catch {
            throw ECKeyError(.unreadableFile, error.message)
        }
        try self.init(pem: String(decoding: bytes, as: UTF8.self))
    }

    /// Unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the `.p8` format.
    public func pkcs8PEM() -> String {
        defer { ERR_clear_error() }
        guard let bio = BIO_new(BIO_s_mem()) else { fatalError("SiwaCrypto: cannot allocate memory BIO") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PKCS8PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1,
            let pem = memoryBIOString(bio)
        else { fatalError("SiwaCrypto: cannot encode an EC key as PKCS#8 PEM") }
        return pem
    }

    /// ECDSA P-256 / SHA-256 signature of `message` in the JOSE form (RFC 7518 §3.4): 64 bytes,
    /// `r` then `s`, each big-endian and left-padded to 32 bytes. Randomized (two signatures of
    /// the same message differ).
    public func signES256(message: [UInt8]) throws(ECKeyError) -> [UInt8] {
        defer { ERR_clear_error() }
        guard let ctx = EVP_MD_CTX_new() else { throw ECKeyError(.signingFailed, "cannot allocate a digest context") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, FetchedAlgorithms.shared.sha256, nil, pkey) == 1 else {
            throw ECKeyError(.signingFailed, "EVP_DigestSignInit failed")
        }
        var length = Int(EVP_PKEY_get_size(pkey))
        guard length > 0 else { throw ECKeyError(.signingFailed, "the key reports no signature size") }
        var der = [UInt8](repeating: 0, count: length)
        let ok = der.withUnsafeMutableBufferPointer { sig in
            withNonNullBytes(message) { msg, count in
                EVP_DigestSign(ctx, sig.baseAddress, &length, msg, count)
            }
        }
        guard ok == 1, length <= der.count else { throw ECKeyError(.signingFailed, "EVP_DigestSign failed") }
        guard let jose = ECDSASignature.jose(fromDER: Array(der[0..<length])) else {
            throw ECKeyError(.signingFailed, "OpenSSL returned a signature that is not DER ECDSA-Sig-Value")
        }
        return jose
    }

    /// DER ECDSA-Sig-Value signature (the form `openssl dgst -sha256 -sign` produces), for interop tests.
    public func signES256DER(message: [UInt8]) throws(ECKeyError) -> [UInt8] {
        let jose = try signES256(message: message)
        return ECDSASignature.der(fromJOSE: jose)!
    }
}

/// An EC P-256 public key: verifies ES256 signatures in the JOSE form.
///
/// `@unchecked Sendable`: same reasoning as `ECPrivateKey` (immutable `EVP_PKEY`, one
/// `EVP_MD_CTX` per verification).
public final class ECPublicKey: @unchecked Sendable {
    private let pkey: OpaquePointer
    /// DER SubjectPublicKeyInfo.
    public let spkiDER: [UInt8]

    /// Parses a DER SubjectPublicKeyInfo. Throws `.invalidPublicKey`, `.rsaKey`, `.notEC` or `.wrongCurve`.
    public init(spkiDER: [UInt8]) throws(ECKeyError) {
        defer { ERR_clear_error() }
        guard !spkiDER.isEmpty, spkiDER.count < 4096 else {
            throw ECKeyError(.invalidPublicKey, "the public key is empty or too large")
        }
        let parsed: OpaquePointer? = spkiDER.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw ECKeyError(.invalidPublicKey, "the public key does not decode") }
        do {
            try requireP256(parsed, invalid: .invalidPublicKey)
        } catch {
            EVP_PKEY_free(parsed)
            throw error
        }
        self.pkey = parsed
        self.spkiDER = spkiDER
    }

    /// Parses a PEM `-----BEGIN PUBLIC KEY-----` block.
    public convenience init(pem: String) throws(ECKeyError) {
        guard firstPEMLabel(pem) == "PUBLIC KEY" else {
            throw ECKeyError(.invalidPublicKey, "expected a -----BEGIN PUBLIC KEY----- block")
        }
        var base64 = ""
        for line in pem.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) where !line.hasPrefix("-----") {
            base64 += line.filter { $0 != " " && $0 != "\t" }
        }
        guard let der = Base64Standard.decode(base64) else {
            throw ECKeyError(.invalidPublicKey, "the PUBLIC KEY block is not base64")
        }
        try self.init(spkiDER: der)
    }

    deinit {
        EVP_PKEY_free(pkey)
    }

    /// PEM `-----BEGIN PUBLIC KEY-----` (64-character lines).
    public var pemRepresentation: String {
        let text = Base64Standard.encode(spkiDER)
        var lines = ["-----BEGIN PUBLIC KEY-----"]
        var index = text.startIndex
        while index < text.endIndex {
            let end = text.index(index, offsetBy: 64, limitedBy: text.endIndex) ?? text.endIndex
            lines.append(String(text[index..<end]))
            index = end
        }
        lines.append("-----END PUBLIC KEY-----")
        return lines.joined(separator: "\n") + "\n"
    }

    /// Verifies an ES256 signature in the JOSE form (exactly 64 bytes `r || s`). False for any
    /// failure, including another length. Leaves the thread's OpenSSL error queue empty.
    public func verifyES256(message: [UInt8], signature: [UInt8]) -> Bool {
        defer { ERR_clear_error() }
        guard let der = ECDSASignature.der(fromJOSE: signature) else { return false }
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, FetchedAlgorithms.shared.sha256, nil, pkey) == 1 else { return false }
        let result = withNonNullBytes(der) { sig, sigCount in
            withNonNullBytes(message) { msg, msgCount in
                EVP_DigestVerify(ctx, sig, sigCount, msg, msgCount)
            }
        }
        return result == 1
    }
}

/// Conversions between the two encodings of an ECDSA P-256 signature: DER `ECDSA-Sig-Value`
/// (`SEQUENCE { INTEGER r, INTEGER s }`, what OpenSSL produces and consumes) and the JOSE form
/// (64 bytes: `r` and `s` big-endian, each left-padded to 32 bytes).
public enum ECDSASignature {
    /// Bytes of one P-256 coordinate (`r` or `s`) in the JOSE form.
    public static let coordinateLength = 32

    /// JOSE form of a strict-DER signature; nil if `der` is not exactly one minimal-length DER
    /// `SEQUENCE` of two positive minimal `INTEGER`s each at most 32 bytes wide.
    public static func jose(fromDER der: [UInt8]) -> [UInt8]? {
        guard der.count >= 8, der[0] == 0x30, der[1] < 0x80, Int(der[1]) == der.count - 2 else { return nil }
        var index = 2
        func integer() -> [UInt8]? {
            guard index + 2 <= der.count, der[index] == 0x02 else { return nil }
            let length = Int(der[index + 1])
            guard length >= 1, length < 0x80, index + 2 + length <= der.count else { return nil }
            var value = Array(der[(index + 2)..<(index + 2 + length)])
            index += 2 + length
            guard value[0] & 0x80 == 0 else { return nil }  // negative
            if value.count > 1, value[0] == 0 {
                guard value[1] & 0x80 != 0 else { return nil }  // not minimal
                value.removeFirst()
            }
            guard value.count <= coordinateLength else { return nil }
            return [UInt8](repeating: 0, count: coordinateLength - value.count) + value
        }
        guard let r = integer(), let s = integer(), index == der.count else { return nil }
        return r + s
    }

    /// Strict DER of a JOSE signature; nil unless `jose` is exactly 64 bytes.
    public static func der(fromJOSE jose: [UInt8]) -> [UInt8]? {
        guard jose.count == 2 * coordinateLength else { return nil }
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop(while: { $0 == 0 }))
            if value.isEmpty { value = [0] }
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(jose[0..<coordinateLength]) + integer(jose[coordinateLength...])
        return [0x30, UInt8(body.count)] + body
    }
}

/// Standard base64 (RFC 4648 §4) with `=` padding, for PEM bodies and key files.
enum Base64Standard {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            let n = UInt32(b0) << 16 | UInt32(b1) << 8 | UInt32(b2)
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(i + 1 < bytes.count ? alphabet[Int(n >> 6 & 63)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(n & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes padded or unpadded base64 in the standard or the URL-safe alphabet; nil otherwise.
    static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        var padding = 0
        for c in text.utf8 {
            if c == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0 else { return nil }  // data after padding
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(c - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(c - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(c - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "+"), UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "/"), UInt8(ascii: "_"): values.append(63)
            default: return nil
            }
        }
        guard values.count % 4 != 1, padding <= 2, padding == 0 || (values.count + padding) % 4 == 0 else { return nil }
        var out: [UInt8] = []
        var i = 0
        while i < values.count {
            let chunk = values[i..<min(i + 4, values.count)]
            var n: UInt32 = 0
            for (k, v) in chunk.enumerated() { n |= UInt32(v) << (18 - 6 * UInt32(k)) }
            out.append(UInt8(truncatingIfNeeded: n >> 16))
            if chunk.count > 2 { out.append(UInt8(truncatingIfNeeded: n >> 8)) }
            if chunk.count > 3 { out.append(UInt8(truncatingIfNeeded: n)) }
            i += 4
        }
        return out
    }
}
