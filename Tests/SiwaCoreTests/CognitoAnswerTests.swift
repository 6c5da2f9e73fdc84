import Testing

@testable import SiwaCore

/// Cognito's answers classified: done, a user it does not know, later, or refused with what to fix.
@Suite struct CognitoAnswerTests {
    func classify(_ status: Int, _ body: String, headers: [String: String] = [:]) -> ProviderStep<[UInt8]> {
        CognitoAnswer.classify(status: status, headers: headers, body: Array(body.utf8), now: 1_795_809_590)
    }

    func error(_ type: String) -> String { #"{"__type":"\#(type)","message":"User SignInWithApple_001 is secret"}"# }

    @Test("a 2xx is done with its body")
    func done() {
        #expect(classify(200, "{}") == .done(Array("{}".utf8), status: 200))
        #expect(classify(204, "") == .done([], status: 204))
    }

    @Test("UserNotFoundException is a user Cognito does not know, with or without a namespace")
    func userNotFound() {
        #expect(classify(400, error("UserNotFoundException")) == .userNotFound(status: 400))
        #expect(classify(400, error("com.amazonaws.cognito.identity.idp.model#UserNotFoundException")) == .userNotFound(status: 400))
        #expect(classify(400, "", headers: ["x-amzn-errortype": "UserNotFoundException:http://internal.amazon.com/"]) == .userNotFound(status: 400))
    }

    @Test("throttling, 429, 5xx and Cognito's internal error are retried, honouring Retry-After")
    func retryLater() {
        #expect(
            classify(400, error("TooManyRequestsException"), headers: ["retry-after": "7"])
                == .retryLater(ProviderFailure(status: 400, reason: "TooManyRequestsException", retryAfter: .seconds(7))))
        #expect(classify(429, "") == .retryLater(ProviderFailure(status: 429, reason: "http_429")))
        #expect(classify(503, "<html>", headers: ["retry-after": "soon"]) == .retryLater(ProviderFailure(status: 503, reason: "http_503")))
        #expect(
            classify(503, "<html>", headers: ["retry-after": "Fri, 27 Nov 2026 20:00:00 GMT"])
                == .retryLater(ProviderFailure(status: 503, reason: "http_503", retryAfter: .seconds(10))))
        #expect(classify(500, error("InternalErrorException")) == .retryLater(ProviderFailure(status: 500, reason: "InternalErrorException")))
        #expect(classify(400, error("ThrottlingException")) == .retryLater(ProviderFailure(status: 400, reason: "ThrottlingException")))
    }

    @Test(
        "refusals say what to fix: the credential, the permission, the pool, or the request",
        arguments: [
            ("UnrecognizedClientException", ProviderBlame.credential), ("InvalidSignatureException", .credential),
            ("ExpiredTokenException", .credential), ("MissingAuthenticationTokenException", .credential),
            ("AccessDeniedException", .permission), ("NotAuthorizedException", .permission),
            ("ResourceNotFoundException", .tenant), ("InvalidParameterException", .request),
        ])
    func refused(type: String, blame: ProviderBlame) {
        #expect(classify(400, error(type)) == .refused(ProviderFailure(status: 400, reason: type, blame: blame)))
    }

    @Test("a 403 without a type is a permission; any other 4xx without one a refused request")
    func untypedRefusals() {
        #expect(classify(403, "") == .refused(ProviderFailure(status: 403, reason: "http_403", blame: .permission)))
        #expect(classify(404, "not json") == .refused(ProviderFailure(status: 404, reason: "http_404", blame: .request)))
    }

    @Test("a failure's description holds the type and status, never Cognito's message")
    func descriptionHasNoMessage() {
        guard case .refused(let failure) = classify(400, error("InvalidParameterException")) else {
            Issue.record("not refused")
            return
        }
        #expect("\(failure)" == "InvalidParameterException (HTTP 400) [request]")
    }

    @Test("the endpoint, the federated username and the base URL's host and path")
    func addresses() {
        #expect(Cognito.endpoint(region: "eu-west-1") == "https://cognito-idp.eu-west-1.amazonaws.com/")
        #expect(Cognito.federatedUsername(sub: "001.ab.2") == "SignInWithApple_001.ab.2")
        #expect(Cognito.hostAndPath(of: "https://cognito-idp.eu-west-1.amazonaws.com/")! == ("cognito-idp.eu-west-1.amazonaws.com", "/"))
        #expect(Cognito.hostAndPath(of: "http://127.0.0.1:5000")! == ("127.0.0.1:5000", "/"))
        #expect(Cognito.hostAndPath(of: "http://localhost:5000/cognito/")! == ("localhost:5000", "/cognito/"))
        #expect(Cognito.hostAndPath(of: "http://cognito.example.com/") == nil)
        #expect(Cognito.problem(withURL: "http://cognito.example.com/") != nil)
        #expect(Cognito.problem(withURL: "file:///etc/passwd") != nil)
        #expect(Cognito.problem(withURL: "https://user@cognito.example.com/") != nil)
    }

    @Test("the identities attribute: which providers, and whether it holds the Apple identity of a sub")
    func identities() {
        let value =
            #"[{"userId":"001.ab.2","providerName":"SignInWithApple","providerType":"SignInWithApple","primary":false},{"userId":"g1","providerName":"Google"}]"#
        #expect(Cognito.identities(value, contain: "001.ab.2"))
        #expect(!Cognito.identities(value, contain: "g1"))
        #expect(!Cognito.identities(value, contain: "001.ab.3"))
        #expect(Cognito.providers(in: value).map(\.provider) == ["SignInWithApple", "Google"])
        #expect(Cognito.providers(in: "not json").isEmpty)
        #expect(!Cognito.identities("{}", contain: "001.ab.2"))
    }
}
