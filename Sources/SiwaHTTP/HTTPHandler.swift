import Synchronization

/// The application side of a listener. Called on the server's pool threads.
public protocol HTTPHandler: Sendable {
    /// Headers have arrived. Return a response to answer at once without reading the body
    /// (the connection is closed afterwards if a body was announced), or `nil` to read it.
    func head(_ head: HTTPRequestHead) -> HTTPResponse?
    /// The body grew past `HTTPServerConfiguration.maxBody` while streaming (no or a false
    /// `Content-Length`). The rest of the body is discarded.
    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse
    /// The whole request is here. Answer through `responder`, now or later from any thread:
    /// until then the connection is suspended and holds no pool thread.
    func handle(_ request: HTTPRequest, responder: HTTPResponder)
}

/// Answers one request exactly once, from any thread.
public final class HTTPResponder: Sendable {
    private let delivery: @Sendable (HTTPResponse) -> Void
    private let answered = Atomic<Bool>(false)

    init(state: ConnectionState) {
        delivery = { state.deliver($0) }
    }

    /// A responder that hands its one response to `delivery` instead of a connection: for
    /// running an `HTTPHandler` in-process (tests, tools) without a listener or sockets.
    /// `delivery` is called at most once, on the thread that calls `respond`.
    public init(delivery: @escaping @Sendable (HTTPResponse) -> Void) {
        self.delivery = delivery
    }

    /// Queues `response`; later calls are ignored.
    public func respond(_ response: HTTPResponse) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        delivery(response)
    }
}
