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
        /// A row came back in a shape the program does not expect (`serverMessage` names the column).
        case unexpectedRow = "unexpected_row"
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
        case .unexpectedRow: return false
        case .queryFailed:
            // 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now, 08xxx connection exceptions
            guard let s = sqlState else { return false }
            return s.hasPrefix("08") || s == "57P01" || s == "57P02" || s == "57P03"
        }
    }

    /// True for failures of the moment that a retry later may cure: the connection problems, and
    /// statement timeout (57014), serialization failure (40001), deadlock (40P01), insufficient
    /// resources (53xxx), lock not available (55P03).
    public var isTransient: Bool {
        if isConnectionProblem { return true }
        guard let s = sqlState else { return false }
        return s == "57014" || s == "40001" || s == "40P01" || s == "55P03" || s.hasPrefix("53")
    }

    /// True when the data of the statement was refused (classes 22 data exception, 23 integrity).
    public var isDataError: Bool {
        guard let s = sqlState else { return false }
        return s.hasPrefix("22") || s.hasPrefix("23")
    }

    public var description: String {
        "postgres \(code.rawValue)" + (sqlState.map { " (\($0))" } ?? "")
    }
}
