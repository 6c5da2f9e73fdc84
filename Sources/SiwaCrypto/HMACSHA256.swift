import CCrypto

/// HMAC-SHA256 through OpenSSL, for tests only (they forge HS256 tokens to check that the
/// receiver refuses them). The product never computes an HMAC.
public enum HMACSHA256 {
    public static func authenticate(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        // OpenSSL wants non-null pointers even for empty input.
        let k = key.isEmpty ? [0] : key, m = message.isEmpty ? [0] : message
        let result = mac.withUnsafeMutableBufferPointer { out in
            k.withUnsafeBufferPointer { kp in
                m.withUnsafeBufferPointer { mp in
                    HMAC(EVP_sha256(), kp.baseAddress, Int32(key.count), mp.baseAddress, message.count, out.baseAddress, &length)
                }
            }
        }
        precondition(result != nil && length == 32, "HMAC-SHA256 failed")
        return mac
    }
}
