internal import CCurl

/// One libcurl easy handle kept across transfers, so that its connections stay open between
/// them (HTTP keep-alive, and no new TLS handshake per request to the same host). Each transfer
/// is otherwise exactly `Fetcher.perform`: the same checks, options and limits, every option set
/// again. A connection the server closed meanwhile is noticed by curl, which connects again.
/// One thread at a time (not `Sendable`): one session per thread.
public final class FetchSession {
    private let handle: UnsafeMutableRawPointer?

    public init() {
        Fetcher.initialize()
        handle = curl_easy_init()
    }

    deinit {
        if let handle { curl_easy_cleanup(handle) }
    }

    /// A transfer on this session's handle (on a fresh one if it could not be created).
    public func perform(_ request: FetchRequest) throws(FetchError) -> FetchResponse {
        guard let handle else { return try Fetcher.perform(request) }
        return try Fetcher.perform(request, on: handle)
    }
}

@available(*, unavailable)
extension FetchSession: Sendable {}
