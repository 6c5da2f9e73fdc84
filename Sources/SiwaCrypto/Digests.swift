internal import CCrypto

public enum SHA256 {
    public static let digestLength = 32

    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: digestLength)
        var length: UInt32 = 0
        let ok = digest.withUnsafeMutableBufferPointer { out in
            withNonNullBytes(bytes) { data, count in
                EVP_Digest(data, count, out.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        guard ok == 1, Int(length) == digestLength else {
            fatalError("SiwaCrypto: SHA-256 failed")
        }
        return digest
    }

    /// Lowercase hex of the SHA-256 of the string's UTF-8 bytes.
    public static func hexDigest(_ string: String) -> String {
        hex(hash(Array(string.utf8)))
    }

    /// Lowercase hex encoding.
    public static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }
}

public enum SecureRandom {
    /// `count` bytes from OpenSSL's CSPRNG. Traps if the CSPRNG fails (there is
    /// no safe fallback) or if `count` is negative.
    public static func bytes(_ count: Int) -> [UInt8] {
        precondition(count >= 0, "SecureRandom.bytes: negative count")
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let chunk = min(count - offset, Int(Int32.max))
            let ok = out.withUnsafeMutableBufferPointer {
                RAND_bytes($0.baseAddress! + offset, Int32(chunk))
            }
            guard ok == 1 else { fatalError("SiwaCrypto: RAND_bytes failed") }
            offset += chunk
        }
        return out
    }
}
