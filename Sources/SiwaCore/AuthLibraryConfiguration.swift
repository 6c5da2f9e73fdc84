/// The auth libraries whose own tables the worker updates (README "Using Supabase Auth / Better Auth / Auth.js", `SIWA_APPLY_TO`).
public enum AuthLibraryKind: String, Sendable, CaseIterable, Comparable {
    case supabase
    case betterAuth = "better-auth"
    case authjs

    public static func < (a: AuthLibraryKind, b: AuthLibraryKind) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// What `account-delete` does to a library's user (`SIWA_ON_ACCOUNT_DELETE`).
public enum AccountDeletePolicy: String, Sendable, CaseIterable {
    /// Remove the Apple identity; the user row stays (default).
    case unlink
    /// Also delete the user when Apple was their only identity.
    case deleteUser = "delete-user"
}

/// A table name as the operator wrote it: `name` or `schema.name`, each part an SQL identifier
/// (letters, digits, `_`; not starting with a digit), case kept (quoted in SQL).
public struct TableName: Sendable, Equatable, CustomStringConvertible {
    public var schema: String?
    public var name: String

    public init(schema: String? = nil, _ name: String) {
        self.schema = schema
        self.name = name
    }

    /// nil when `text` is not one or two identifiers separated by a dot.
    public static func parse(_ text: String) -> TableName? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(parts.count), parts.allSatisfy(isIdentifier) else { return nil }
        return parts.count == 2 ? TableName(schema: parts[0], parts[1]) : TableName(parts[0])
    }

    static func isIdentifier(_ s: String) -> Bool {
        guard let first = s.utf8.first, s.utf8.count <= 63 else { return false }
        let letter: (UInt8) -> Bool = { ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 95 }
        return letter(first) && s.utf8.allSatisfy { letter($0) || ($0 >= 48 && $0 <= 57) }
    }

    /// The schema where a name configured without one was found at start, with the login's own
    /// search_path (the statements then name it whole: they run with a pinned search_path).
    /// Messages keep the name as configured.
    public var foundIn: String?

    /// `"schema"."name"` (or `"name"`, found through the search path).
    public var quoted: String {
        ((schema ?? foundIn).map { "\"\($0)\"." } ?? "") + "\"\(name)\""
    }

    /// `quoted` as configured: for the statements a message asks a person to run.
    public var quotedAsConfigured: String {
        (schema.map { "\"\($0)\"." } ?? "") + "\"\(name)\""
    }

    public var description: String { (schema.map { $0 + "." } ?? "") + name }
}

/// `SIWA_APPLY_TO` and the variables that go with it. Names only: whether the tables exist is
/// checked against the database at start.
public struct AuthLibraryConfiguration: Sendable, Equatable {
    /// `SIWA_APPLY_TO`'s auth libraries: none by default (only `siwa.*`).
    public var targets: [AuthLibraryKind] = []
    /// `SIWA_ON_ACCOUNT_DELETE`: `unlink` by default (the hosted providers' too).
    public var onAccountDelete: AccountDeletePolicy = .unlink
    /// `SIWA_BETTER_AUTH_TABLES`: the user, session and account tables, in that order; nil: Better
    /// Auth's own names (`user`, `session`, `account`).
    public var betterAuthTables: [TableName]?
    /// `SIWA_AUTHJS_TABLES`: the users, sessions and accounts tables, in that order; nil: the
    /// PostgreSQL adapter's (`users`, `sessions`, `accounts`) or else the Prisma adapter's
    /// (`User`, `Session`, `Account`), whichever exists.
    public var authjsTables: [TableName]?
    /// `SIWA_LIBRARY_CLIENT_ID`: the client id (Services ID) of the Apple refresh tokens the
    /// libraries store; nil: the only one of `SIWA_AUDIENCES` (README "Tokens the library stores").
    public var clientID: String?

    public init(targets: [AuthLibraryKind] = [], onAccountDelete: AccountDeletePolicy = .unlink) {
        self.targets = targets
        self.onAccountDelete = onAccountDelete
    }

    public static let variables = [
        "SIWA_APPLY_TO", "SIWA_ON_ACCOUNT_DELETE", "SIWA_BETTER_AUTH_TABLES", "SIWA_AUTHJS_TABLES", "SIWA_LIBRARY_CLIENT_ID",
    ]

    static func load(_ value: (String) -> String?) throws(ConfigurationError) -> AuthLibraryConfiguration {
        var config = AuthLibraryConfiguration()
        if let text = value("SIWA_APPLY_TO") {
            var seen: [AuthLibraryKind] = []
            for item in text.split(separator: ",").map({ ServerConfiguration.trim(String($0)).lowercased() }) where !item.isEmpty {
                // A hosted provider's name is HostedProviderConfiguration's.
                if HostedProvider(rawValue: item) != nil { continue }
                guard let kind = AuthLibraryKind(rawValue: item) else {
                    let names = AuthLibraryKind.allCases.map(\.rawValue) + HostedProvider.allCases.map(\.rawValue)
                    throw ConfigurationError(variable: "SIWA_APPLY_TO", problem: "\"\(item)\" is not one of " + names.joined(separator: ", "))
                }
                if !seen.contains(kind) { seen.append(kind) }
            }
            config.targets = seen.sorted()
        }
        if let text = value("SIWA_ON_ACCOUNT_DELETE") {
            guard let policy = AccountDeletePolicy(rawValue: text.lowercased()) else {
                throw ConfigurationError(variable: "SIWA_ON_ACCOUNT_DELETE", problem: "must be unlink or delete-user")
            }
            config.onAccountDelete = policy
        }
        config.betterAuthTables = try tables("SIWA_BETTER_AUTH_TABLES", value, names: "user,session,account")
        config.authjsTables = try tables("SIWA_AUTHJS_TABLES", value, names: "users,sessions,accounts")
        if let id = value("SIWA_LIBRARY_CLIENT_ID").map({ ServerConfiguration.trim($0) }), !id.isEmpty { config.clientID = id }
        return config
    }

    /// Three table names, comma-separated, in the order of `names`.
    private static func tables(_ variable: String, _ value: (String) -> String?, names: String) throws(ConfigurationError) -> [TableName]? {
        guard let text = value(variable) else { return nil }
        let parsed = text.split(separator: ",", omittingEmptySubsequences: false).map { TableName.parse(ServerConfiguration.trim(String($0))) }
        guard parsed.count == 3, parsed.allSatisfy({ $0 != nil }) else {
            throw ConfigurationError(
                variable: variable,
                problem: "must name three tables, comma-separated, in the order \(names) (each name or schema.name, letters, digits and _)")
        }
        return parsed.compactMap { $0 }
    }
}
