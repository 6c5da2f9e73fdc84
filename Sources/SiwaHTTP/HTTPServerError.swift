/// Why a listener could not start. `description` names no internals.
public struct HTTPServerError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case invalidAddress
        case startFailed
    }

    public var code: Code
    public var address: String

    public var description: String {
        switch code {
        case .invalidAddress: return "invalid listen address \(address)"
        case .startFailed: return "cannot listen on \(address) (in use or not permitted)"
        }
    }
}
