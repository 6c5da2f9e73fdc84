import Testing

@testable import SiwaCore

@Suite struct RequestGateTests {
    let gate = RequestGate(path: "/apple/notifications", maxBody: 65_536)

    func check(
        _ method: String = "POST", _ path: String = "/apple/notifications", _ contentType: String? = "application/json", _ length: Int? = 100
    ) -> RejectReason? {
        gate.check(method: method, path: path, contentType: contentType, contentLength: length)
    }

    @Test func acceptsValidRequest() {
        #expect(check() == nil)
        #expect(check(length: nil) == nil)
        #expect(check(length: 65_536) == nil)
        #expect(check(length: 0) == nil)
    }

    @Test func path() {
        for path in [
            "/", "/apple/notifications/", "/apple/Notifications", "/apple/notifications?x=1", "apple/notifications", "", "/apple/notificationsx",
        ] {
            #expect(check(path: path) == .notFound, "\(path)")
        }
    }

    @Test func method() {
        for method in ["GET", "PUT", "post", "HEAD", "OPTIONS", "DELETE", ""] {
            #expect(check(method) == .methodNotAllowed, "\(method)")
        }
    }

    @Test func contentType() {
        for ok in [
            nil, "application/json", "Application/JSON", "application/json; charset=utf-8", "  application/json  ", "application/json;charset=UTF-8",
            "\tapplication/json\t;x",
        ] as [String?] {
            #expect(check(contentType: ok) == nil, "\(String(describing: ok))")
        }
        for bad in [
            "", "text/plain", "application/jsonx", "application/x-www-form-urlencoded", "application/jose", "application/json-patch+json",
            "application /json", "json", ";application/json", "multipart/form-data; boundary=application/json",
        ] {
            #expect(check(contentType: bad) == .unsupportedMediaType, "\(bad)")
        }
    }

    @Test func bodyTooLarge() {
        #expect(check(length: 65_537) == .bodyTooLarge)
        #expect(check(length: Int.max) == .bodyTooLarge)
    }

    @Test func order() {
        #expect(check("GET", "/nope", "text/plain", 1_000_000) == .notFound)
        #expect(check("GET", "/apple/notifications", "text/plain", 1_000_000) == .methodNotAllowed)
        #expect(check("POST", "/apple/notifications", "text/plain", 1_000_000) == .unsupportedMediaType)
        #expect(check("POST", "/apple/notifications", nil, 1_000_000) == .bodyTooLarge)
    }
}

extension RequestGateTests {
    func check(path: String) -> RejectReason? { check("POST", path) }
    func check(contentType: String?) -> RejectReason? { check("POST", "/apple/notifications", contentType) }
    func check(length: Int?) -> RejectReason? { check("POST", "/apple/notifications", "application/json", length) }
}
