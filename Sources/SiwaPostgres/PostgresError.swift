/// A libpq failure. `description` gives the code and SQLSTATE only; `serverMessage` holds the
/// server's primary message for operator logs (never sent to HTTP clients).
public struct PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// Could not open a connection (server down, wrong URL, authentication).
        case connectionFailed = "connection_failed"
        /// The connection broke during a command.
        case connectionLost = "connection_lost"
        /// The server refused the command (see `sqlState`).
        case queryFailed = "query_failed"
    }

    public var code: Code
    /// Five-character SQLSTATE when the server sent one (e.g. `23505`, `P0001`).
    public var sqlState: String?
    public var serverMessage: String

    public init(code: Code, sqlState: String? = nil, serverMessage: String = "") {
        self.code = code
        self.sqlState = sqlState
        self.serverMessage = serverMessage
    }

    /// True for failures that a new connection may cure (the database went away).
    public var isConnectionProblem: Bool {
        switch code {
        case .connectionFailed, .connectionLost: return true
        case .queryFailed:
            // 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 08xxx connection exceptions
            guard let s = sqlState else { return false }
            return s.hasPrefix("08") || s == "57P01" || s == "57P02" || s == "57P03"
        }
    }

    public var description: String {
        "postgres \(code.rawValue)" + (sqlState.map { " (\($0))" } ?? "")
    }
}
