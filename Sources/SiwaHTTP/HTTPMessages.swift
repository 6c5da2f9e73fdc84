/// What is known of a request once its headers have arrived.
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: String
    /// The path without the query string.
    public var path: String
    public var contentType: String?
    /// `nil` when the header is absent; `-1` when present but not a valid length.
    public var contentLength: Int?
    /// The `Authorization` header, as sent; nil when absent (a secret: never log it).
    public var authorization: String?
    /// The headers named in `HTTPServerConfiguration.keptHeaders` that the request carried
    /// (names as configured); the others are not copied.
    public var headers: [HTTPHeader]
    /// The query string's arguments, decoded, in order (`HTTPServerConfiguration.readsQuery`;
    /// empty otherwise).
    public var query: [HTTPHeader]
    /// The peer's numeric address (`HTTPServerConfiguration.readsClientAddress`; nil otherwise).
    public var clientAddress: String?

    public init(
        method: String, path: String, contentType: String? = nil, contentLength: Int? = nil, authorization: String? = nil,
        headers: [HTTPHeader] = [], query: [HTTPHeader] = [], clientAddress: String? = nil
    ) {
        self.method = method
        self.path = path
        self.contentType = contentType
        self.contentLength = contentLength
        self.authorization = authorization
        self.headers = headers
        self.query = query
        self.clientAddress = clientAddress
    }

    /// The first query argument named `name` (nil when absent).
    public func argument(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }

    /// The value of a kept header (names compared case-insensitively).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// A complete request: head and body (never longer than the configured limit).
public struct HTTPRequest: Sendable, Equatable {
    public var head: HTTPRequestHead
    public var body: [UInt8]

    public init(head: HTTPRequestHead, body: [UInt8]) {
        self.head = head
        self.body = body
    }
}

/// A response to queue: status, extra headers and body.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [HTTPHeader]
    public var body: [UInt8]

    public init(status: Int, headers: [HTTPHeader] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response with `Content-Type: application/json`.
    public static func json(_ status: Int, _ text: String, headers: [HTTPHeader] = []) -> HTTPResponse {
        HTTPResponse(
            status: status,
            headers: [HTTPHeader("Content-Type", "application/json")] + headers,
            body: Array(text.utf8))
    }

    /// A plain-text response with `Content-Type: text/plain; charset=utf-8`.
    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: [HTTPHeader("Content-Type", contentType)], body: Array(text.utf8))
    }
}

public struct HTTPHeader: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}
