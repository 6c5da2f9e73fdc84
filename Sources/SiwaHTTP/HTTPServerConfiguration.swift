/// How one libmicrohttpd listener runs. Every field has a documented default.
public struct HTTPServerConfiguration: Sendable, Equatable {
    /// Numeric IPv4 or IPv6 address to bind. Default `127.0.0.1`.
    public var host: String
    /// TCP port; `0` picks a free one (read it back from `HTTPServer.port`). Default `8080`.
    public var port: UInt16
    /// Threads in the polling pool (epoll). Default `4`.
    public var threads: Int
    /// Inactivity after which a connection is closed, and the longest a client may take to send
    /// one request (slowloris guard); whole seconds, at least one. Default 10 s.
    public var connectionTimeout: Duration
    /// Concurrent connections accepted; more are refused. Default `1024`.
    public var connectionLimit: Int
    /// Per-connection memory for headers and upload chunks. Default 16 KiB (libmicrohttpd clears
    /// it for every request, so more costs CPU (bench/README.md); a notification with its
    /// headers is under 2 KiB, and bodies are streamed through it in chunks). Request headers
    /// larger than about half of it are refused by libmicrohttpd (431).
    public var connectionMemoryLimit: Int
    /// Largest request body kept; larger bodies are answered by `HTTPHandler.bodyTooLarge`. Default 64 KiB.
    public var maxBody: Int
    /// Request headers copied into `HTTPRequestHead.headers` (besides Content-Type and
    /// Content-Length, always read). Default none: a listener pays only for what it reads.
    public var keptHeaders: [String]
    /// Copy the query arguments into `HTTPRequestHead.query`. Default false.
    public var readsQuery = false
    /// Copy the peer's address into `HTTPRequestHead.clientAddress`. Default false.
    public var readsClientAddress = false

    public init(
        host: String = "127.0.0.1", port: UInt16 = 8080, threads: Int = 4,
        connectionTimeout: Duration = .seconds(10), connectionLimit: Int = 1024,
        connectionMemoryLimit: Int = 16 * 1024, maxBody: Int = 64 * 1024, keptHeaders: [String] = []
    ) {
        self.keptHeaders = keptHeaders
        self.host = host
        self.port = port
        self.threads = threads
        self.connectionTimeout = connectionTimeout
        self.connectionLimit = connectionLimit
        self.connectionMemoryLimit = connectionMemoryLimit
        self.maxBody = maxBody
    }
}
