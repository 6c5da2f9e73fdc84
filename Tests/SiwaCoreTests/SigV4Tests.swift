import Testing

@testable import SiwaCore

/// SigV4's canonical forms against the canonical requests AWS publishes in its Signature
/// Version 4 test suite (the signatures themselves, which need a real SHA-256 and HMAC, are
/// checked in SiwaCryptoTests). SHA-256 of the empty body is the suite's constant.
@Suite struct SigV4Tests {
    static let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    static let host = ("Host", "example.amazonaws.com")
    static let date = ("X-Amz-Date", "20150830T123600Z")

    @Test("get-vanilla: the canonical request of a bare GET /")
    func getVanilla() {
        let canonical = SigV4.canonicalRequest(method: "GET", path: "/", query: [], headers: [Self.host, Self.date], payloadHash: Self.emptyHash)
        #expect(canonical.text == "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" + Self.emptyHash)
        #expect(canonical.signedHeaders == "host;x-amz-date")
    }

    @Test("get-vanilla-query-order-key-case: parameters sorted by name, uppercase before lowercase")
    func queryOrder() {
        #expect(SigV4.canonicalQuery([("Param2", "value2"), ("Param1", "value1")]) == "Param1=value1&Param2=value2")
        #expect(SigV4.canonicalQuery([("b", "2"), ("a", "1"), ("A", "0")]) == "A=0&a=1&b=2")
        #expect(SigV4.canonicalQuery([("k", "b"), ("k", "a")]) == "k=a&k=b")
        #expect(SigV4.canonicalQuery([]) == "")
    }

    @Test("query names and values are URI-encoded: unreserved bytes stay, the rest is %XX uppercase")
    func uriEncoding() {
        #expect(SigV4.uriEncode("-._~09AZaz") == "-._~09AZaz")
        #expect(SigV4.uriEncode("a b/c=d&e+f") == "a%20b%2Fc%3Dd%26e%2Bf")
        #expect(SigV4.uriEncode("ሴ") == "%E1%88%B4")
    }

    @Test("header names are lowercased and sorted, values trimmed and inner spaces collapsed, repeats joined")
    func headerCanonicalForm() {
        let canonical = SigV4.canonicalRequest(
            method: "POST", path: "", query: [],
            headers: [("X-Amz-Target", "  A.B  "), ("My-Header1", "a   b \t c"), ("my-header1", "d"), ("Host", "h")],
            payloadHash: "p")
        #expect(canonical.text == "POST\n/\n\nhost:h\nmy-header1:a b c,d\nx-amz-target:A.B\n\nhost;my-header1;x-amz-target\np")
    }

    @Test("post-x-www-form-urlencoded: the content type is signed with the host and date")
    func postForm() {
        let bodyHash = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
        let canonical = SigV4.canonicalRequest(
            method: "POST", path: "/", query: [],
            headers: [("Content-Type", "application/x-www-form-urlencoded"), Self.host, Self.date], payloadHash: bodyHash)
        #expect(
            canonical.text
                == "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
                + bodyHash)
    }

    @Test("the string to sign is algorithm, date, scope and the canonical request's hash, one a line")
    func stringToSign() {
        #expect(
            SigV4.stringToSign(
                amzDate: "20150830T123600Z", scope: "20150830/us-east-1/iam/aws4_request",
                canonicalRequestHash: "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59")
                == "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\nf536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
        )
    }

    @Test("the signing key chains date, region, service and aws4_request from AWS4 + secret")
    func signingKeyChain() {
        // A transparent "MAC" (key bytes, then a separator, then the message) shows the chain.
        let key = SigV4.signingKey(secret: "S", date: "20150830", region: "r", service: "s") { key, message in key + [0x7C] + message }
        #expect(String(decoding: key, as: UTF8.self) == "AWS4S|20150830|r|s|aws4_request")
    }

    @Test("sign adds X-Amz-Date, the session token when there is one, and signs both")
    func signedHeaders() {
        let request = SigV4.Request(method: "GET", headers: [Self.host])
        let plain = SigV4.sign(
            request, credentials: .init(accessKeyID: "AK", secretAccessKey: "SK"), region: "us-east-1", service: "service",
            amzDate: "20150830T123600Z", sha256: { _ in [0] }, hmac: { _, _ in [0xAB] })
        #expect(plain.headers.map(\.0) == ["X-Amz-Date", "Authorization"])
        #expect(
            plain.authorization
                == "AWS4-HMAC-SHA256 Credential=AK/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=ab")
        let temporary = SigV4.sign(
            request, credentials: .init(accessKeyID: "AK", secretAccessKey: "SK", sessionToken: "T"), region: "us-east-1",
            service: "service", amzDate: "20150830T123600Z", sha256: { _ in [0] }, hmac: { _, _ in [0xAB] })
        #expect(temporary.headers.map(\.0) == ["X-Amz-Date", "X-Amz-Security-Token", "Authorization"])
        #expect(temporary.signedHeaders == "host;x-amz-date;x-amz-security-token")
    }

    @Test("a description of credentials never shows the secret or the token")
    func credentialsDescription() {
        let c = SigV4.Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "very-secret", sessionToken: "tok-secret")
        #expect("\(c)" == "Credentials(AKIDEXAMPLE, temporary)")
        #expect(!"\(c)".contains("secret"))
    }

    @Test(
        "amzDate is the UTC time as YYYYMMDDTHHMMSSZ",
        arguments: [
            (Int64(0), "19700101T000000Z"), (1_440_938_160, "20150830T123600Z"), (951_782_400, "20000229T000000Z"),
            (4_102_444_799, "20991231T235959Z"), (-1, "19691231T235959Z"),
        ])
    func amzDate(seconds: Int64, text: String) {
        #expect(SigV4.amzDate(unixSeconds: seconds) == text)
    }
}
