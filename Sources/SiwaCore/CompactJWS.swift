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
        let utf8 = Array(token.utf8)
        var dots: [Int] = []
        for (i, b) in utf8.enumerated() where b == UInt8(ascii: ".") {
            dots.append(i)
            if dots.count > 2 { throw .malformedJWS }
        }
        guard dots.count == 2 else { throw .malformedJWS }
        let headerSegment = utf8[0..<dots[0]]
        let claimsSegment = utf8[(dots[0] + 1)..<dots[1]]
        let signatureSegment = utf8[(dots[1] + 1)...]
        func decoded(_ segment: ArraySlice<UInt8>) -> [UInt8]? {
            segment.withUnsafeBufferPointer { Base64URL.decode(bytes: $0) }
        }
        guard !headerSegment.isEmpty, !claimsSegment.isEmpty,
            let headerBytes = decoded(headerSegment),
            let claimsBytes = decoded(claimsSegment),
            let signature = decoded(signatureSegment)
        else { throw .malformedJWS }
        guard let header = (try? JSONParser.parse(headerBytes))?.objectValue else { throw .malformedHeader }
        guard let claims = (try? JSONParser.parse(claimsBytes))?.objectValue else { throw .malformedClaims }
        return CompactJWS(
            header: header, claims: claims, signingInput: Array(utf8[0..<dots[1]]), signature: signature,
            claimsText: String(decoding: claimsBytes, as: UTF8.self))
    }
}
