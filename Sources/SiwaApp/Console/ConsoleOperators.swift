import SiwaPostgres

/// The console's named operators (`siwa-notify operator add|list|remove`): each signs in with
/// their own token, of which only the SHA-256 is stored.
public enum ConsoleOperators {
    public struct Operator: Sendable, Equatable {
        public var name: String
        /// UTC, `YYYY-MM-DD HH:MM:SS`.
        public var createdAt: String
        public var lastSignInAt: String?
    }

    /// Why a command refused, with a stable reason code.
    public enum Failure: Error, Equatable, CustomStringConvertible {
        case invalidName
        case duplicateName(String)
        case unknownName(String)

        public var reason: String {
            switch self {
            case .invalidName: "invalid_name"
            case .duplicateName: "duplicate_name"
            case .unknownName: "unknown_name"
            }
        }

        public var description: String {
            switch self {
            case .invalidName: "an operator's name is \(ConsoleSecurity.operatorNameRule)"
            case .duplicateName(let name): "an operator named \(name) exists already"
            case .unknownName(let name): "no operator named \(name)"
            }
        }
    }

    public static func isValidName(_ name: String) -> Bool { ConsoleSecurity.isValidOperatorName(name) }

    /// Adds an operator; returns their console token (shown once: only its hash is kept).
    public static func add(name: String, conninfo: String) throws -> String {
        guard isValidName(name) else { throw Failure.invalidName }
        let token = ConsoleSecurity.newOperatorToken()
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify operator")
        guard try connection.row(ConsoleOperatorStatements.add, (name, ConsoleSecurity.storedHash(ofOperatorToken: token))) != nil else {
            throw Failure.duplicateName(name)
        }
        return token
    }

    public static func list(conninfo: String) throws -> [Operator] {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify operator")
        return try connection.rows(ConsoleOperatorStatements.list).map {
            Operator(name: $0.name, createdAt: $0.createdAt, lastSignInAt: $0.lastSignInAt)
        }
    }

    /// Removes an operator and every console session of theirs (their next request is signed
    /// out); returns how many of those sessions were open.
    public static func remove(name: String, conninfo: String) throws -> Int {
        guard isValidName(name) else { throw Failure.invalidName }
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify operator")
        guard let result = try connection.row(ConsoleOperatorStatements.remove, name), result.removed else {
            throw Failure.unknownName(name)
        }
        return result.openSessions
    }
}
