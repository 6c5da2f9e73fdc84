/// What the JSON admin APIs of hosted providers (Auth0, Clerk) share: bearer calls whose
/// answer is a status, a JSON body with an error code, and rate-limit headers.
public enum ProviderAnswer: Sendable, Equatable {
    /// A 2xx: the body.
    case success([UInt8])
    /// A 404: the caller knows whether that means no such user or already done.
    case notFound
    /// Anything else: not applied.
    case failed(ProviderOutcome)

    /// A provider's error code kept for the record only when it is a short token (`[A-Za-z0-9_.-]`):
    /// a free-text field could quote an id or an address.
    public static func safeCode(_ code: String?) -> String? {
        guard let code, !code.isEmpty, code.utf8.count <= 64,
            code.utf8.allSatisfy({ b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2E || b == 0x2D
            })
        else { return nil }
        return code
    }

    /// Classifies an answer. `code` is the provider's error code (already read from its body);
    /// `blame` may name who is at fault for a refusal (status, body), else a 401 blames the
    /// credential, a 403 the permission, anything else the request.
    public static func classify(
        status: Int, headers: [String: String], body: [UInt8], code: String?, now: Double,
        blame: (Int, [UInt8]) -> ProviderBlame? = { _, _ in nil }
    ) -> ProviderAnswer {
        if (200..<300).contains(status) { return .success(body) }
        if status == 404 { return .notFound }
        let reason = safeCode(code) ?? "http_\(status)"
        if status == 429 || status >= 500 {
            let wait = ProviderRateLimit(headers: headers, now: now).callWait(status: status)
            return .failed(.retryLater(ProviderFailure(status: status, reason: reason, retryAfter: wait)))
        }
        let who: ProviderBlame
        switch (blame(status, body), status) {
        case (let named?, _): who = named
        case (nil, 401): who = .credential
        case (nil, 403): who = .permission
        default: who = .request
        }
        return .failed(.refused(ProviderFailure(status: status, reason: reason, blame: who)))
    }

    /// Percent-encodes one path segment (RFC 3986: everything but unreserved characters), so
    /// that a user id such as `apple|001234.abc` stays one segment.
    public static func pathSegment(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0x0F, radix: 16, uppercase: true)
            }
        }
        return out
    }
}

extension ProviderAnswer {
    /// nil if `url` may be a provider's base address: `https://` to any host, `http://` to a
    /// loopback host only (emulators, tests).
    public static func problem(withURL url: String) -> String? { ForwardingConfiguration.problem(withURL: url) }

    /// `url` without its trailing slashes, so that paths can be appended.
    public static func base(_ url: String) -> String {
        var base = Substring(url)
        while base.hasSuffix("/") { base = base.dropLast() }
        return String(base)
    }
}
