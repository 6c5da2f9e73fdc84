import Testing

@testable import SiwaCore

@Suite struct JWKSLocationTests {
    @Test func allowed() {
        for url in [
            "https://appleid.apple.com/auth/keys", "https://keys.example.com:8443/jwks.json?x=1", "HTTPS://appleid.apple.com/auth/keys",
            "https://[2001:db8::1]/keys", "http://localhost/keys", "http://localhost:8081/keys", "http://127.0.0.1:9/keys",
            "http://127.1.2.3/keys", "http://[::1]:8080/keys", "http://LOCALHOST/keys", "file:///etc/siwa/keys.json", "https://appleid.apple.com",
        ] {
            #expect(JWKSLocation.problem(with: url) == nil, "\(url)")
        }
    }

    @Test func rejected() {
        for url in [
            "", "appleid.apple.com/auth/keys", "http://appleid.apple.com/auth/keys", "http://10.0.0.1/keys", "http://0.0.0.0/keys",
            "http://localhost.evil.com/keys", "http://127.0.0.1.evil.com/keys", "http://localhost@evil.com/keys",
            "https://user:pass@appleid.apple.com/keys", "ftp://example.com/keys", "file://relative/keys.json", "file://", "file:///",
            "https://", "https:///keys", "https://exa mple.com/keys", "https://example.com/ke ys", "https://example.com:99999/keys",
            "https://[::1/keys", "http://[::2]/keys", "javascript:alert(1)", "https://example.com\n/keys", "//example.com/keys",
        ] {
            #expect(JWKSLocation.problem(with: url) != nil, "\(url.debugDescription)")
        }
    }

    @Test func problemIsAHumanSentenceWithoutTheURL() {
        let url = "http://internal.example/keys"
        let problem = JWKSLocation.problem(with: url)
        #expect(problem?.contains("loopback") == true)
        #expect(problem?.contains(url) == false)
    }
}
