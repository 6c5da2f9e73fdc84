/// The Standard Webhooks signature scheme (standardwebhooks.com, "symmetric" `v1`): the signed
/// content is `"<webhook-id>.<webhook-timestamp>.<body>"`, the signature the standard base64 of
/// its HMAC-SHA256 under the secret's key, the header `webhook-signature` a space-separated list
/// of `v1,<base64>`, one per key (rotation). Pure: the MAC is passed in (OpenSSL's lives in
/// SiwaCrypto).
public enum StandardWebhook {
    /// HMAC-SHA256(key, message).
    public typealias MAC = (_ key: [UInt8], _ message: [UInt8]) -> [UInt8]

    /// The bytes that are signed: `id.timestamp.body`.
    public static func signedContent(id: String, timestamp: Int64, body: [UInt8]) -> [UInt8] {
        var out = Array(id.utf8)
        out.reserveCapacity(out.count + body.count + 24)
        out.append(UInt8(ascii: "."))
        out.append(contentsOf: String(timestamp).utf8)
        out.append(UInt8(ascii: "."))
        out.append(contentsOf: body)
        return out
    }

    /// The `webhook-signature` value: `v1,<base64>` for each key, space-separated, in the order
    /// of `keys`.
    public static func signature(id: String, timestamp: Int64, body: [UInt8], keys: [[UInt8]], mac: MAC) -> String {
        let content = signedContent(id: id, timestamp: timestamp, body: body)
        return keys.map { "v1," + Base64.encode(mac($0, content)) }.joined(separator: " ")
    }

    /// The reference verification (what the Standard Webhooks libraries do): true when one of
    /// the `v1,` signatures of `header` is the HMAC of the signed content under `key`. Other
    /// versions (`v1a,…`) and malformed entries are ignored. The comparison does not stop at
    /// the first differing byte.
    public static func verify(signatureHeader header: String, id: String, timestamp: Int64, body: [UInt8], key: [UInt8], mac: MAC) -> Bool {
        let expected = mac(key, signedContent(id: id, timestamp: timestamp, body: body))
        var matched = false
        for entry in header.split(separator: " ", omittingEmptySubsequences: true) {
            guard entry.hasPrefix("v1,"), let candidate = Base64.decode(entry.dropFirst(3)) else { continue }
            if equalInConstantTime(candidate, expected) { matched = true }
        }
        return matched
    }

    static func equalInConstantTime(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}

/// A Standard Webhooks secret: `whsec_` followed by the standard base64 of the key.
public enum StandardWebhookSecret {
    public static let prefix = "whsec_"
    /// Key sizes the Standard Webhooks spec recommends: 24 to 64 bytes.
    public static let keySizes = 24...64

    /// The keys of a secret file: one `whsec_<base64>` a line (blank lines and lines starting
    /// with `#` skipped; at least one key). The problem names the line, never its content.
    public static func parse(file text: String) -> Result<[[UInt8]], Problem> {
        var keys: [[UInt8]] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = ServerConfiguration.trim(String(raw))
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard line.hasPrefix(prefix), let key = Base64.decode(line.dropFirst(prefix.utf8.count)) else {
                return .failure(Problem(description: "line \(index + 1) is not whsec_<base64>"))
            }
            guard keySizes.contains(key.count) else {
                return .failure(
                    Problem(
                        description:
                            "line \(index + 1): the key is \(key.count) bytes; it must be \(keySizes.lowerBound) to \(keySizes.upperBound) (e.g. whsec_ and the base64 of 32 random bytes)"
                    ))
            }
            keys.append(key)
        }
        if keys.isEmpty { return .failure(Problem(description: "holds no secret (one whsec_<base64> a line)")) }
        return .success(keys)
    }

    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }
}

/// Standard base64 (RFC 4648 §4, `+` and `/`), with `=` padding when encoding; decoding accepts
/// it padded or not.
public enum Base64 {
    public static func encode(_ bytes: [UInt8]) -> String {
        var text = Array(Base64URL.encode(bytes).utf8)
        for i in text.indices {
            if text[i] == UInt8(ascii: "-") { text[i] = UInt8(ascii: "+") } else if text[i] == UInt8(ascii: "_") { text[i] = UInt8(ascii: "/") }
        }
        while text.count % 4 != 0 { text.append(UInt8(ascii: "=")) }
        return String(decoding: text, as: UTF8.self)
    }

    /// nil on characters outside the standard alphabet (incl. `-`, `_`, whitespace), on
    /// misplaced padding, or on bad lengths.
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        var bytes = Array(text.utf8)
        if bytes.count % 4 == 0 {
            var padding = 0
            while padding < 2, bytes.last == UInt8(ascii: "=") {
                bytes.removeLast()
                padding += 1
            }
        }
        for i in bytes.indices {
            switch bytes[i] {
            case UInt8(ascii: "+"): bytes[i] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): bytes[i] = UInt8(ascii: "_")
            case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "="): return nil
            default: break
            }
        }
        return bytes.withUnsafeBufferPointer { Base64URL.decode(bytes: $0) }
    }
}
