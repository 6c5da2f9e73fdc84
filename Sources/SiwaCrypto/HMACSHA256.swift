internal import CCrypto

/// HMAC-SHA256 through OpenSSL: signs forwarded events (Standard Webhooks `v1`); tests also
/// forge HS256 tokens with it to check that the receiver refuses them.
public enum HMACSHA256 {
    public static let length = 32

    public static func authenticate(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: length)
        var written: UInt32 = 0
        // OpenSSL wants non-null pointers even for empty input.
        let result = mac.withUnsafeMutableBufferPointer { out in
            withNonNullBytes(key) { k, keyCount in
                withNonNullBytes(message) { m, messageCount in
                    HMAC(EVP_sha256(), k, Int32(keyCount), m, messageCount, out.baseAddress, &written)
                }
            }
        }
        guard result != nil, Int(written) == length else { fatalError("SiwaCrypto: HMAC-SHA256 failed") }
        return mac
    }
}
