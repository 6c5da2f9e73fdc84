/// A structurally parsed compact JWS. Nothing in it is trusted yet.
public struct CompactJWS: Sendable {
    public var header: [String: JSONValue]
    public var claims: [String: JSONValue]
    /// ASCII bytes of `"<seg0>.<seg1>"` exactly as received.
    public var signingInput: [UInt8]
    /// May be empty (the signature check then fails).
    public var signature: [UInt8]
    /// The claims exactly as decoded (valid JSON: the strict parser accepted it, so it is valid
    /// UTF-8 with no `\u0000`); empty when the value was built in code.
    public var claimsText: String

    public init(
        header: [String: JSONValue], claims: [String: JSONValue], signingInput: [UInt8], signature: [UInt8],
        claimsText: String = ""
    ) {
        self.header = header
        self.claims = claims
        self.signingInput = signingInput
        self.signature = signature
        self.claimsText = claimsText
    }

    /// Splits and decodes `token`. Throws `.malformedJWS` (not three segments, empty header or
    /// claims segment, non-strict base64url), `.malformedHeader` or `.malformedClaims` (not a JSON object).
    public static func parse(_ token: String) throws(RejectReason) -> CompactJWS {
        // A native string's UTF-8 in place (no copy of the ~1 KB token); a bridged one copied once.
        if let parsed = token.utf8.withContiguousStorageIfAvailable({ parse(utf8: $0) }) { return try parsed.get() }
        return try Array(token.utf8).withUnsafeBufferPointer { parse(utf8: $0) }.get()
    }

    private static func parse(utf8: UnsafeBufferPointer<UInt8>) -> Result<CompactJWS, RejectReason> {
        // The two dots (a third is an error).
        var first = -1, second = -1
        for i in utf8.indices where utf8[i] == UInt8(ascii: ".") {
            if first < 0 {
                first = i
            } else if second < 0 {
                second = i
            } else {
                return .failure(.malformedJWS)
            }
        }
        guard second >= 0 else { return .failure(.malformedJWS) }
        func decoded(_ range: Range<Int>) -> [UInt8]? {
            Base64URL.decode(bytes: UnsafeBufferPointer(rebasing: utf8[range]))
        }
        guard first > 0, second > first + 1,
            let headerBytes = decoded(0..<first),
            let claimsBytes = decoded((first + 1)..<second),
            let signature = decoded((second + 1)..<utf8.count)
        else { return .failure(.malformedJWS) }
        guard let header = (try? JSONParser.parse(headerBytes))?.objectValue else { return .failure(.malformedHeader) }
        guard let claims = (try? JSONParser.parse(claimsBytes))?.objectValue else { return .failure(.malformedClaims) }
        return .success(
            CompactJWS(
                header: header, claims: claims, signingInput: Array(UnsafeBufferPointer(rebasing: utf8[0..<second])),
                signature: signature, claimsText: String(decoding: claimsBytes, as: UTF8.self)))
    }
}
