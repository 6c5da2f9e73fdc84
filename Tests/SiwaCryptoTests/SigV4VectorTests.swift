import SiwaCore
import SiwaCrypto
import Testing

/// SigV4 with OpenSSL's SHA-256 and HMAC against published signatures: AWS's Signature Version 4
/// test suite (credential AKIDEXAMPLE, 2015-08-30 12:36:00 UTC, us-east-1, service `service`),
/// the IAM ListUsers worked example of AWS's documentation, and for the JSON 1.1 POST that
/// Cognito takes (no published vector has `X-Amz-Target`) the signature botocore's SigV4Auth
/// gives the same request.
@Suite struct SigV4VectorTests {
    static let credentials = SigV4.Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    static let date = "20150830T123600Z"
    static let host = ("Host", "example.amazonaws.com")

    static func sign(
        _ request: SigV4.Request, credentials: SigV4.Credentials = credentials, region: String = "us-east-1", service: String = "service"
    ) -> String {
        SigV4.sign(
            request, credentials: credentials, region: region, service: service, amzDate: date, sha256: SHA256.hash,
            hmac: HMACSHA256.authenticate
        ).authorization
    }

    static func suite(_ signedHeaders: String, _ signature: String) -> String {
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=\(signedHeaders), Signature=\(signature)"
    }

    @Test("get-vanilla")
    func getVanilla() {
        #expect(
            Self.sign(SigV4.Request(method: "GET", headers: [Self.host]))
                == Self.suite("host;x-amz-date", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"))
    }

    @Test("get-vanilla-query-order-key-case")
    func getVanillaQueryOrder() {
        #expect(
            Self.sign(SigV4.Request(method: "GET", query: [("Param2", "value2"), ("Param1", "value1")], headers: [Self.host]))
                == Self.suite("host;x-amz-date", "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"))
    }

    @Test("post-vanilla")
    func postVanilla() {
        #expect(
            Self.sign(SigV4.Request(method: "POST", headers: [Self.host]))
                == Self.suite("host;x-amz-date", "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"))
    }

    @Test("post-x-www-form-urlencoded")
    func postForm() {
        let request = SigV4.Request(
            method: "POST", headers: [("Content-Type", "application/x-www-form-urlencoded"), Self.host], body: Array("Param1=value1".utf8))
        #expect(
            Self.sign(request) == Self.suite("content-type;host;x-amz-date", "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"))
    }

    @Test("get-vanilla-with-session-token: the token is sent and signed")
    func sessionToken() {
        var credentials = Self.credentials
        credentials.sessionToken = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
        #expect(
            Self.sign(SigV4.Request(method: "GET", headers: [Self.host]), credentials: credentials)
                == Self.suite("host;x-amz-date;x-amz-security-token", "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"))
    }

    @Test("the documentation's IAM example: signing key, and the signature of GET ?Action=ListUsers")
    func iamExample() {
        let key = SigV4.signingKey(
            secret: Self.credentials.secretAccessKey, date: "20150830", region: "us-east-1", service: "iam", hmac: HMACSHA256.authenticate)
        #expect(Hex.encode(key) == "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9")
        let request = SigV4.Request(
            method: "GET", query: [("Action", "ListUsers"), ("Version", "2010-05-08")],
            headers: [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"), ("Host", "iam.amazonaws.com")])
        #expect(
            Self.sign(request, service: "iam")
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        )
    }

    static let cognitoRequest = SigV4.Request(
        method: "POST",
        headers: [
            ("Host", "cognito-idp.us-east-1.amazonaws.com"), ("Content-Type", "application/x-amz-json-1.1"),
            ("X-Amz-Target", "AWSCognitoIdentityProviderService.AdminGetUser"),
        ],
        body: Array(#"{"UserPoolId":"us-east-1_EXAMPLE","Username":"SignInWithApple_000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"}"#.utf8))

    @Test("a Cognito JSON 1.1 POST with X-Amz-Target, as botocore signs it")
    func cognitoPost() {
        #expect(
            Self.sign(Self.cognitoRequest, service: "cognito-idp")
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/cognito-idp/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=b4852af1b959411ed5201fad54cab71d00a1d26a2723ae6118e3e9d6e58ce434"
        )
        var credentials = Self.credentials
        credentials.sessionToken = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
        #expect(
            Self.sign(Self.cognitoRequest, credentials: credentials, service: "cognito-idp")
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/cognito-idp/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, Signature=40cda2b6fc3ccde8497bbf79db0c0ed368a6ad8e13f46e144c78f5c0877dbb89"
        )
    }
}
