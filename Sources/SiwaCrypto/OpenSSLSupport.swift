internal import CCrypto

/// Minimum / maximum RSA modulus sizes accepted for public-key import.
let minimumRSABits = 2048
let maximumRSABits = 8192

/// Calls `body` with a pointer to `bytes` that is never nil, even for an empty
/// array (some OpenSSL entry points reject NULL even when the length is 0).
@inline(__always)
func withNonNullBytes<R>(_ bytes: [UInt8], _ body: (UnsafePointer<UInt8>, Int) -> R) -> R {
    if bytes.isEmpty {
        var zero: UInt8 = 0
        return withUnsafePointer(to: &zero) { body($0, 0) }
    }
    return bytes.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
}

/// Removes leading zero bytes from a big-endian integer.
func strippingLeadingZeros(_ bytes: [UInt8]) -> ArraySlice<UInt8> {
    let first = bytes.firstIndex(where: { $0 != 0 }) ?? bytes.endIndex
    return bytes[first...]
}

/// Bit length of a big-endian integer without leading zeros.
func bitLength(_ bytes: ArraySlice<UInt8>) -> Int {
    guard let top = bytes.first else { return 0 }
    return (bytes.count - 1) * 8 + (8 - top.leadingZeroBitCount)
}

/// Reads a BIGNUM parameter of a key (via a shim getter such as
/// `siwa_EVP_PKEY_get_rsa_n`) as big-endian bytes without leading zeros.
/// Returns nil if the key has no such parameter.
func bigEndianParameter(
    _ pkey: OpaquePointer,
    _ getter: (OpaquePointer?, UnsafeMutablePointer<OpaquePointer?>?) -> Int32
) -> [UInt8]? {
    var bn: OpaquePointer? = nil
    guard getter(pkey, &bn) == 1, let bn else { return nil }
    defer { BN_free(bn) }
    let count = (Int(BN_num_bits(bn)) + 7) / 8
    var out = [UInt8](repeating: 0, count: count)
    if count > 0 {
        let written = out.withUnsafeMutableBufferPointer { BN_bn2bin(bn, $0.baseAddress!) }
        guard Int(written) == count else { return nil }
    }
    return out
}

/// Copies the contents of a memory BIO into a String.
func memoryBIOString(_ bio: OpaquePointer) -> String? {
    var data: UnsafeMutablePointer<CChar>? = nil
    let length = siwa_BIO_get_mem_data(bio, &data)
    guard length >= 0, let data else { return nil }
    let buffer = UnsafeRawBufferPointer(start: data, count: Int(length))
    return String(decoding: buffer, as: UTF8.self)
}
