/// AWS Signature Version 4 (`AWS4-HMAC-SHA256`) for a request sent with its signature in the
/// `Authorization` header. Pure: SHA-256 and HMAC-SHA256 are passed in (OpenSSL's live in
/// SiwaCrypto), and the time is the caller's.
public enum SigV4 {
    /// SHA-256 of the bytes.
    public typealias Hash = (_ bytes: [UInt8]) -> [UInt8]
    /// HMAC-SHA256(key, message).
    public typealias MAC = (_ key: [UInt8], _ message: [UInt8]) -> [UInt8]

    public static let algorithm = "AWS4-HMAC-SHA256"

    /// An access key; the secret never appears in a description.
    public struct Credentials: Sendable, Equatable, CustomStringConvertible {
        public var accessKeyID: String
        public var secretAccessKey: String
        /// The token of temporary credentials (STS), signed as `X-Amz-Security-Token`.
        public var sessionToken: String?

        public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
        }

        public var description: String {
            "Credentials(\(accessKeyID)\(sessionToken == nil ? "" : ", temporary"))"
        }
    }

    /// What is signed. Every header given is signed; `Host` must be among them, exactly as the
    /// client sends it (with the port when it is not the scheme's default).
    public struct Request: Sendable {
        public var method: String
        /// The absolute path, already URI-encoded as it goes on the wire (`/` for none).
        public var path: String
        /// Query parameters, not encoded (the signer encodes them).
        public var query: [(String, String)]
        public var headers: [(String, String)]
        public var body: [UInt8]

        public init(method: String, path: String = "/", query: [(String, String)] = [], headers: [(String, String)], body: [UInt8] = []) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
            self.body = body
        }
    }

    /// The headers to add to the request: `X-Amz-Date`, `X-Amz-Security-Token` for temporary
    /// credentials, and `Authorization`.
    public struct Signed: Sendable {
        public var headers: [(String, String)]
        public var authorization: String
        public var signedHeaders: String
    }

    /// Signs `request` for `region` / `service` at `amzDate` (`YYYYMMDDTHHMMSSZ`).
    public static func sign(
        _ request: Request, credentials: Credentials, region: String, service: String, amzDate: String,
        sha256: Hash, hmac: MAC
    ) -> Signed {
        var added = [("X-Amz-Date", amzDate)]
        if let token = credentials.sessionToken { added.append(("X-Amz-Security-Token", token)) }
        let payloadHash = hex(sha256(request.body))
        let canonical = canonicalRequest(
            method: request.method, path: request.path, query: request.query, headers: request.headers + added,
            payloadHash: payloadHash)
        let date = String(amzDate.prefix(8))
        let scope = "\(date)/\(region)/\(service)/aws4_request"
        let toSign = stringToSign(amzDate: amzDate, scope: scope, canonicalRequestHash: hex(sha256(Array(canonical.text.utf8))))
        let key = signingKey(secret: credentials.secretAccessKey, date: date, region: region, service: service, hmac: hmac)
        let signature = hex(hmac(key, Array(toSign.utf8)))
        let authorization =
            "\(algorithm) Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(canonical.signedHeaders), Signature=\(signature)"
        return Signed(headers: added + [("Authorization", authorization)], authorization: authorization, signedHeaders: canonical.signedHeaders)
    }

    /// The canonical request and its `SignedHeaders` list: header names lowercased and sorted,
    /// values trimmed with inner runs of spaces collapsed, a repeated name's values joined by
    /// commas; query parameters encoded and sorted.
    public static func canonicalRequest(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payloadHash: String
    ) -> (text: String, signedHeaders: String) {
        var merged: [String: [String]] = [:]
        for (name, value) in headers {
            merged[name.lowercased(), default: []].append(collapse(value))
        }
        let names = merged.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        let canonicalHeaders = names.map { "\($0):\(merged[$0]!.joined(separator: ","))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let text = [
            method, path.isEmpty ? "/" : path, canonicalQuery(query), canonicalHeaders, signedHeaders, payloadHash,
        ].joined(separator: "\n")
        return (text, signedHeaders)
    }

    /// `name=value` pairs, each side URI-encoded, sorted by name then value (byte order).
    public static func canonicalQuery(_ query: [(String, String)]) -> String {
        query.map { (uriEncode($0.0), uriEncode($0.1)) }
            .sorted { a, b in
                a.0 == b.0
                    ? Array(a.1.utf8).lexicographicallyPrecedes(Array(b.1.utf8))
                    : Array(a.0.utf8).lexicographicallyPrecedes(Array(b.0.utf8))
            }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    public static func stringToSign(amzDate: String, scope: String, canonicalRequestHash: String) -> String {
        [algorithm, amzDate, scope, canonicalRequestHash].joined(separator: "\n")
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
    public static func signingKey(secret: String, date: String, region: String, service: String, hmac: MAC) -> [UInt8] {
        var key = Array(("AWS4" + secret).utf8)
        for part in [date, region, service, "aws4_request"] { key = hmac(key, Array(part.utf8)) }
        return key
    }

    /// Every byte but the unreserved `A-Z a-z 0-9 - . _ ~` as `%XX` (uppercase hex).
    public static func uriEncode(_ text: String) -> String {
        var out: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(upperDigits[Int(byte >> 4)])
                out.append(upperDigits[Int(byte & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `YYYYMMDDTHHMMSSZ` of a Unix time (UTC): ISO 8601's basic form, without fractions.
    public static func amzDate(unixSeconds: Int64) -> String {
        let extended = ForwardMessage.iso8601(millis: unixSeconds * 1000)  // 2015-08-30T12:36:00.000Z
        return String(extended.prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
    }

    private static let upperDigits = Array("0123456789ABCDEF".utf8)
    private static let lowerDigits = Array("0123456789abcdef".utf8)

    static func hex(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(lowerDigits[Int(byte >> 4)])
            out.append(lowerDigits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Trimmed, each inner run of spaces and tabs one space.
    static func collapse(_ value: String) -> String {
        var out: [UInt8] = []
        var pendingSpace = false
        for byte in value.utf8 {
            if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") {
                pendingSpace = !out.isEmpty
            } else {
                if pendingSpace { out.append(UInt8(ascii: " ")) }
                pendingSpace = false
                out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
