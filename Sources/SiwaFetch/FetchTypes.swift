internal import CCurl

public enum FetchScheme: String, Sendable, CaseIterable {
    case https, http, file

    /// The scheme of `url` (case-insensitive); nil when it is none of these.
    public init?(url: String) {
        let lower = url.lowercased()
        if lower.hasPrefix("https://") {
            self = .https
        } else if lower.hasPrefix("http://") {
            self = .http
        } else if lower.hasPrefix("file://") {
            self = .file
        } else {
            return nil
        }
    }
}

public struct FetchRequest: Sendable {
    public var url: String
    /// "GET" (default), "POST" (sends `body`, empty if nil), "HEAD", or any other
    /// token sent as a custom request method (with `body` if non-nil).
    public var method: String
    /// "Name: value" lines. Lines containing CR, LF or NUL are rejected.
    public var headers: [String]
    public var body: [UInt8]?
    /// Clamped to [1 ms, 1 day] (curl treats 0 as "no timeout").
    public var connectTimeout: Duration
    /// Clamped to [1 ms, 1 day].
    public var totalTimeout: Duration
    /// Maximum body bytes; exceeding it fails with `.responseTooLarge`.
    public var maxResponseBytes: Int
    /// Schemes curl may use. Redirects are never followed.
    public var allowedSchemes: Set<FetchScheme>

    public init(
        url: String,
        method: String = "GET",
        headers: [String] = [],
        body: [UInt8]? = nil,
        connectTimeout: Duration = .seconds(5),
        totalTimeout: Duration = .seconds(10),
        maxResponseBytes: Int = 1 << 20,
        allowedSchemes: Set<FetchScheme> = [.https]
    ) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.maxResponseBytes = maxResponseBytes
        self.allowedSchemes = allowedSchemes
    }
}

public struct FetchResponse: Sendable {
    /// HTTP status; 200 for a successful file:// read.
    public var status: Int
    /// Header names lowercased; the last value for a repeated name wins.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

public struct FetchError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case invalidURL
        case schemeNotAllowed
        case couldNotResolve
        case couldNotConnect
        case timedOut
        case tlsFailure
        case responseTooLarge
        case fileNotFound
        case transferFailed
    }

    public var code: Code
    /// Raw CURLcode for logs; 0 when the request was rejected before curl ran.
    public var curlCode: Int32
    /// "fetch error: <code>" plus, when curl was involved, "(curl N: <curl_easy_strerror>)".
    /// Never contains the URL, headers or body.
    public var description: String

    public init(code: Code, curlCode: Int32 = 0) {
        self.code = code
        self.curlCode = curlCode
        if curlCode == 0 {
            self.description = "fetch error: \(code.rawValue)"
        } else {
            let message = String(cString: curl_easy_strerror(CURLcode(UInt32(bitPattern: curlCode))))
            self.description = "fetch error: \(code.rawValue) (curl \(curlCode): \(message))"
        }
    }
}
