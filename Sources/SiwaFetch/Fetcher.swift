internal import CCurl

public enum Fetcher {
    /// Result of the one-time `curl_global_init`; Swift runs a `static let`
    /// initializer exactly once, thread-safely.
    private static let globalInitResult: UInt32 = curl_global_init(siwa_CURL_GLOBAL_DEFAULT()).rawValue

    /// Headers beyond this many bytes (all lines together) fail the transfer
    /// with `.responseTooLarge`, independently of `maxResponseBytes`.
    static let maxHeaderBytes = 256 * 1024

    /// `curl_global_init(CURL_GLOBAL_DEFAULT)` exactly once per process.
    /// Thread-safe and idempotent; `perform` calls it too.
    public static func initialize() {
        _ = globalInitResult
    }

    /// Performs one blocking transfer on the calling thread with a fresh easy
    /// handle. TLS peer and host verification stay at curl's defaults (on),
    /// redirects are not followed, and only `request.allowedSchemes` may be used.
    public static func perform(_ request: FetchRequest) throws(FetchError) -> FetchResponse {
        try checkGlobalInit()
        guard let curl = curl_easy_init() else {
            throw FetchError(code: .transferFailed, curlCode: Int32(CURLE_FAILED_INIT.rawValue))
        }
        defer { curl_easy_cleanup(curl) }
        return try perform(request, on: curl)
    }

    static func checkGlobalInit() throws(FetchError) {
        initialize()
        guard globalInitResult == CURLE_OK.rawValue else {
            throw FetchError(code: .transferFailed, curlCode: Int32(bitPattern: globalInitResult))
        }
    }

    /// One transfer on `curl`, an easy handle in its default state; every option is reset when
    /// it returns (`curl_easy_reset` keeps the handle's open connections for the next one).
    static func perform(_ request: FetchRequest, on curl: UnsafeMutableRawPointer) throws(FetchError) -> FetchResponse {
        try checkGlobalInit()

        // --- Validate everything that does not need curl. ---------------------
        let url = request.url
        guard !url.isEmpty, url.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7f }) else {
            throw FetchError(code: .invalidURL)
        }
        guard let urlHandle = curl_url() else {
            throw FetchError(code: .transferFailed, curlCode: Int32(CURLE_OUT_OF_MEMORY.rawValue))
        }
        defer { curl_url_cleanup(urlHandle) }
        // Parse with curl's own parser (so the scheme we check is the one curl
        // will use), accepting any scheme syntactically; policy comes next.
        guard curl_url_set(urlHandle, CURLUPART_URL, url, UInt32(CURLU_NON_SUPPORT_SCHEME)) == CURLUE_OK else {
            throw FetchError(code: .invalidURL)
        }
        guard let scheme = urlPart(urlHandle, CURLUPART_SCHEME) else {
            throw FetchError(code: .invalidURL)
        }
        guard let fetchScheme = FetchScheme(rawValue: scheme.lowercased()),
            request.allowedSchemes.contains(fetchScheme)
        else {
            throw FetchError(code: .schemeNotAllowed)
        }
        guard isToken(request.method) else {
            throw FetchError(code: .transferFailed, curlCode: Int32(CURLE_BAD_FUNCTION_ARGUMENT.rawValue))
        }
        if request.headers.contains(where: { $0.utf8.contains(where: { $0 == 0 || $0 == 0x0d || $0 == 0x0a }) }) {
            throw FetchError(code: .transferFailed, curlCode: Int32(CURLE_BAD_FUNCTION_ARGUMENT.rawValue))
        }

        // Everything curl points at is set up first so that (defers running in
        // reverse order) it is released only after `curl_easy_reset` below.
        let state = TransferState(maxBodyBytes: request.maxResponseBytes, maxHeaderBytes: maxHeaderBytes)
        // Balanced: one retain here, one release when `perform` returns.
        let userdata = Unmanaged.passRetained(state)
        defer { userdata.release() }

        var headerList: UnsafeMutablePointer<curl_slist>? = nil
        defer { curl_slist_free_all(headerList) }

        // --- Easy handle: back to its defaults (no pointer to the above) on return.
        defer { curl_easy_reset(curl) }

        func check(_ rc: CURLcode) throws(FetchError) {
            guard rc == CURLE_OK else {
                throw FetchError(code: .transferFailed, curlCode: Int32(bitPattern: rc.rawValue))
            }
        }

        let protocols = request.allowedSchemes.map(\.rawValue).sorted().joined(separator: ",")
        try check(siwa_curl_setopt_curlu(curl, CURLOPT_CURLU, urlHandle))
        try check(siwa_curl_setopt_str(curl, CURLOPT_PROTOCOLS_STR, protocols))
        try check(siwa_curl_setopt_str(curl, CURLOPT_REDIR_PROTOCOLS_STR, protocols))
        try check(siwa_curl_setopt_long(curl, CURLOPT_FOLLOWLOCATION, 0))
        try check(siwa_curl_setopt_long(curl, CURLOPT_MAXREDIRS, 0))
        try check(siwa_curl_setopt_long(curl, CURLOPT_NOSIGNAL, 1))
        try check(siwa_curl_setopt_long(curl, CURLOPT_SSL_VERIFYPEER, 1))
        try check(siwa_curl_setopt_long(curl, CURLOPT_SSL_VERIFYHOST, 2))
        try check(siwa_curl_setopt_long(curl, CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2))
        try check(siwa_curl_setopt_long(curl, CURLOPT_CONNECTTIMEOUT_MS, milliseconds(request.connectTimeout)))
        try check(siwa_curl_setopt_long(curl, CURLOPT_TIMEOUT_MS, milliseconds(request.totalTimeout)))
        try check(siwa_curl_setopt_str(curl, CURLOPT_USERAGENT, "siwa-notify"))
        if request.maxResponseBytes > 0 {
            // Lets curl fail early when Content-Length / file size is known; the
            // write callback enforces the cap for everything else.
            try check(siwa_curl_setopt_off_t(curl, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxResponseBytes)))
        }
        try check(siwa_curl_setopt_data_callback(curl, CURLOPT_WRITEFUNCTION, fetchWriteCallback))
        try check(siwa_curl_setopt_ptr(curl, CURLOPT_WRITEDATA, userdata.toOpaque()))
        try check(siwa_curl_setopt_data_callback(curl, CURLOPT_HEADERFUNCTION, fetchHeaderCallback))
        try check(siwa_curl_setopt_ptr(curl, CURLOPT_HEADERDATA, userdata.toOpaque()))

        // Method and body.
        let sendsBody = request.method == "POST" || request.body != nil
        if sendsBody {
            let body = request.body ?? []
            try check(siwa_curl_setopt_long(curl, CURLOPT_POST, 1))
            try check(siwa_curl_setopt_off_t(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
            // COPYPOSTFIELDS copies (POSTFIELDSIZE_LARGE bytes), so no lifetime
            // constraint on `body`.
            let rc =
                body.isEmpty
                ? siwa_curl_setopt_str(curl, CURLOPT_COPYPOSTFIELDS, "")
                : body.withUnsafeBytes { siwa_curl_setopt_ptr(curl, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
            try check(rc)
            if request.method != "POST" {
                try check(siwa_curl_setopt_str(curl, CURLOPT_CUSTOMREQUEST, request.method))
            }
        } else if request.method == "GET" {
            try check(siwa_curl_setopt_long(curl, CURLOPT_HTTPGET, 1))
        } else if request.method == "HEAD" {
            try check(siwa_curl_setopt_long(curl, CURLOPT_NOBODY, 1))
        } else {
            try check(siwa_curl_setopt_str(curl, CURLOPT_CUSTOMREQUEST, request.method))
        }

        // Request headers. An empty "Expect:" suppresses curl's
        // "Expect: 100-continue" round trip for larger bodies.
        var lines = request.headers
        if sendsBody, !lines.contains(where: { $0.lowercased().hasPrefix("expect:") }) {
            lines.append("Expect:")
        }
        for line in lines {
            guard let appended = curl_slist_append(headerList, line) else {
                throw FetchError(code: .transferFailed, curlCode: Int32(CURLE_OUT_OF_MEMORY.rawValue))
            }
            headerList = appended
        }
        if let headerList {
            try check(siwa_curl_setopt_slist(curl, CURLOPT_HTTPHEADER, headerList))
        }

        // --- Transfer. --------------------------------------------------------
        let result = curl_easy_perform(curl)
        guard result == CURLE_OK else {
            throw mapError(result, state: state)
        }

        var status = 0
        if fetchScheme == .file {
            status = 200
        } else {
            try check(siwa_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &status))
        }
        return FetchResponse(status: status, headers: state.headers, body: state.body)
    }

    // MARK: - Helpers

    private static func urlPart(_ handle: OpaquePointer, _ part: CURLUPart) -> String? {
        var value: UnsafeMutablePointer<CChar>? = nil
        guard curl_url_get(handle, part, &value, 0) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }

    /// RFC 9110 token characters.
    private static func isToken(_ string: String) -> Bool {
        guard !string.isEmpty else { return false }
        return string.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }
    }

    /// A timeout in curl's milliseconds (rounded up), clamped to [1 ms, 1 day]; 0 would mean
    /// "no timeout" to curl, so it is never produced.
    static func milliseconds(_ duration: Duration) -> Int {
        guard duration > .zero else { return 1 }
        let (seconds, attoseconds) = duration.components
        guard seconds < 86_400 else { return 86_400_000 }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        let ms = Int(seconds) * 1000 + Int(attoseconds / perMillisecond) + (attoseconds % perMillisecond > 0 ? 1 : 0)
        return min(max(ms, 1), 86_400_000)
    }

    private static func mapError(_ rc: CURLcode, state: TransferState) -> FetchError {
        let raw = Int32(bitPattern: rc.rawValue)
        let code: FetchError.Code
        switch rc {
        case CURLE_WRITE_ERROR where state.tooLarge, CURLE_FILESIZE_EXCEEDED:
            code = .responseTooLarge
        case CURLE_UNSUPPORTED_PROTOCOL:
            code = .schemeNotAllowed
        case CURLE_URL_MALFORMAT:
            code = .invalidURL
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            code = .couldNotResolve
        case CURLE_COULDNT_CONNECT:
            code = .couldNotConnect
        case CURLE_OPERATION_TIMEDOUT:
            code = .timedOut
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
            CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND,
            CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_SHUTDOWN_FAILED,
            CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
            CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED:
            code = .tlsFailure
        case CURLE_FILE_COULDNT_READ_FILE:
            code = .fileNotFound
        default:
            code = .transferFailed
        }
        return FetchError(code: code, curlCode: raw)
    }
}

// MARK: - Per-transfer state and C callbacks

/// Mutable state of one transfer. Touched only by the thread running
/// `curl_easy_perform` (callbacks run synchronously inside it).
final class TransferState {
    let maxBodyBytes: Int
    let maxHeaderBytes: Int
    var body: [UInt8] = []
    var headers: [String: String] = [:]
    var headerBytes = 0
    /// Set when the body or header cap was exceeded and the transfer aborted.
    var tooLarge = false

    init(maxBodyBytes: Int, maxHeaderBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
        self.maxHeaderBytes = maxHeaderBytes
    }

    /// Returns false to abort the transfer.
    func appendBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count <= maxBodyBytes - body.count else {
            tooLarge = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    /// Returns false to abort the transfer.
    func appendHeaderLine(_ bytes: UnsafeRawBufferPointer) -> Bool {
        headerBytes += bytes.count
        guard headerBytes <= maxHeaderBytes else {
            tooLarge = true
            return false
        }
        // Work on bytes: Swift treats "\r\n" as one Character.
        var end = bytes.count
        while end > 0, bytes[end - 1] == 0x0d || bytes[end - 1] == 0x0a { end -= 1 }
        let line = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<end]), as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            // A new status line (e.g. after "100 Continue"): keep only the
            // headers of the final response.
            headers.removeAll()
            return true
        }
        guard let colon = line.firstIndex(of: ":") else { return true }
        let name = line[..<colon].trimmingSpaces().lowercased()
        guard !name.isEmpty else { return true }
        headers[name] = String(line[line.index(after: colon)...].trimmingSpaces())
        return true
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> Substring {
        var s = self
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return s
    }
}

/// The bytes of one curl data callback and the transfer it belongs to; nil for a size overflow
/// or a missing userdata (the callback then returns 0: curl aborts).
private func callbackData(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ nmemb: Int, _ userdata: UnsafeMutableRawPointer?
) -> (TransferState, UnsafeRawBufferPointer)? {
    guard let userdata else { return nil }
    let (total, overflow) = size.multipliedReportingOverflow(by: nmemb)
    guard !overflow else { return nil }
    let state = Unmanaged<TransferState>.fromOpaque(userdata).takeUnretainedValue()
    return (state, UnsafeRawBufferPointer(start: total > 0 ? data : nil, count: total))
}

/// CURLOPT_WRITEFUNCTION. Returning anything other than `size * nmemb` makes
/// curl abort with CURLE_WRITE_ERROR.
private func fetchWriteCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ nmemb: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let (state, bytes) = callbackData(data, size, nmemb, userdata) else { return 0 }
    guard bytes.count > 0, bytes.baseAddress != nil else { return bytes.count }
    return state.appendBody(bytes) ? bytes.count : 0
}

/// CURLOPT_HEADERFUNCTION: called once per complete header line.
private func fetchHeaderCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ nmemb: Int, _ userdata: UnsafeMutableRawPointer?
) -> Int {
    guard let (state, bytes) = callbackData(data, size, nmemb, userdata) else { return 0 }
    guard bytes.count > 0, bytes.baseAddress != nil else { return bytes.count }
    return state.appendHeaderLine(bytes) ? bytes.count : 0
}
