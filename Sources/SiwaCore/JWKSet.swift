/// Parsing and serializing JWK sets (`{"keys":[...]}`) holding RS256 keys.
public enum JWKSet {
    /// Parses `{"keys":[...]}`. Keeps keys with `kty` "RSA", a non-empty string `kid`, and `n`/`e`
    /// strict base64url (non-empty after stripping leading zero bytes of `n`). Skips keys whose `alg`
    /// is present and not "RS256", or whose `use` is present and not "sig", and entries that are not objects.
    /// Throws if the document is not JSON or has no `keys` array.
    public static func parseRSAKeys(_ bytes: [UInt8]) throws(JWKSetError) -> [JWK] {
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes)
        } catch {
            throw JWKSetError(message: "not valid JSON (\(error.message) at byte \(error.offset))")
        }
        guard let object = document.objectValue else { throw JWKSetError(message: "not a JSON object") }
        guard let keys = object["keys"]?.arrayValue else { throw JWKSetError(message: "no \"keys\" array") }
        var result: [JWK] = []
        for entry in keys {
            guard let key = entry.objectValue,
                key["kty"]?.stringValue == "RSA",
                let kid = key["kid"]?.stringValue, !kid.isEmpty,
                let nText = key["n"]?.stringValue, let n = Base64URL.decode(nText),
                let eText = key["e"]?.stringValue, let e = Base64URL.decode(eText)
            else { continue }
            if let alg = key["alg"], alg.stringValue != "RS256" { continue }
            if let use = key["use"], use.stringValue != "sig" { continue }
            let modulus = Array(n.drop(while: { $0 == 0 }))
            let exponent = Array(e.drop(while: { $0 == 0 }))
            guard !modulus.isEmpty, !exponent.isEmpty else { continue }
            result.append(JWK(kid: kid, modulus: modulus, exponent: exponent))
        }
        return result
    }

    /// Serializes keys as `{"keys":[{"kty":"RSA","kid":..,"use":"sig","alg":"RS256","n":..,"e":..}]}`.
    public static func serialize(_ keys: [JWK]) -> String {
        var out = "{\"keys\":["
        for (i, key) in keys.enumerated() {
            if i > 0 { out += "," }
            out += "{\"kty\":\"RSA\",\"kid\":\(JSONValue.quoted(key.kid)),\"use\":\"sig\",\"alg\":\"RS256\""
            out += ",\"n\":\"\(Base64URL.encode(key.modulus))\",\"e\":\"\(Base64URL.encode(key.exponent))\"}"
        }
        out += "]}"
        return out
    }
}
