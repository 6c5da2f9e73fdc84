import SiwaCore
import SiwaRuntime
import Synchronization

/// An HTTP listener (libmicrohttpd) as a service: binds at `start`; at `stop` stops accepting,
/// lets in-flight requests finish (or answers them 503) until the deadline, then closes.
public final class ListenerService: Service {
    public let name: String
    private let configuration: HTTPServerConfiguration
    private let handler: any HTTPHandler
    private let onPrepare: @Sendable () -> Void
    private let server = Mutex<HTTPServer?>(nil)

    public init(
        name: String, configuration: HTTPServerConfiguration, handler: any HTTPHandler,
        prepareToStop: @escaping @Sendable () -> Void = {}
    ) {
        self.name = name
        self.configuration = configuration
        self.handler = handler
        onPrepare = prepareToStop
    }

    /// The bound port (after `start`).
    public var port: UInt16? { server.withLock { $0?.port } }

    public func start() throws {
        let started = try HTTPServer(configuration: configuration, handler: handler)
        server.withLock { $0 = started }
    }

    public func prepareToStop() { onPrepare() }

    public func stop(deadline: Deadline) {
        let current = server.withLock { s -> HTTPServer? in
            let c = s
            s = nil
            return c
        }
        current?.shutdown(deadline: deadline)
    }
}
