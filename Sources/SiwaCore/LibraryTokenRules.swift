/// Apple refresh tokens an auth library keeps in its own table (README "Tokens the library stores"):
/// which ones siwa-notify may adopt for in-app deletion and reconciliation, and under which client id.
public enum LibraryTokenRules {
    /// True when `value` is a refresh token as Apple issues it, stored in clear: `r` and hex, then
    /// dot-separated base64url parts (`r4f…e1.0.srtxu.Zb…aw`). Anything else (a library that
    /// encrypts its tokens writes hex, base64 or a JWE; an empty or oversized value) is left alone:
    /// sending it to Apple would only fail, and would send another system's ciphertext out.
    public static func isPlainAppleRefreshToken(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count >= 16, bytes.count <= 1024, bytes.first == UInt8(ascii: "r") else { return false }
        let base64URL: (UInt8) -> Bool = {
            ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 95
        }
        guard bytes.allSatisfy({ base64URL($0) || $0 == UInt8(ascii: ".") }) else { return false }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count >= 2, parts.allSatisfy({ !$0.isEmpty }) else { return false }
        let hex: (UInt8) -> Bool = { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
        let head = parts[0].dropFirst()
        return head.count >= 8 && head.allSatisfy(hex)
    }

    /// The client id the library's tokens were issued to: `configured` (`SIWA_LIBRARY_CLIENT_ID`),
    /// else the only one of `audiences`; nil when `SIWA_AUDIENCES` names several and none is
    /// configured (Apple refuses a token presented with another client id).
    public static func clientID(configured: String?, audiences: [String]) -> String? {
        if let configured { return configured }
        return audiences.count == 1 ? audiences[0] : nil
    }
}
