import SiwaPostgres

/// A command refused by PostgreSQL for want of a privilege (SQLSTATE 42501) says which object
/// and which of siwa's roles grant it (from the grants matrix), instead of a bare
/// `postgres query_failed (42501)`. The server's message names an object of the schema only
/// ("permission denied for view backlog"): never a value of a row.
public struct PermissionDenied: Error, CustomStringConvertible, Sendable {
    public var description: String

    /// `error` explained when it is a refused privilege; any other error as it is. The server does
    /// not say which privilege it refused: a command that knows (`UPDATE` for a replay) names it,
    /// so that only the roles holding that one are named.
    public static func explained(_ error: any Error, privilege: String? = nil) -> any Error {
        guard let e = error as? PostgresError, e.sqlState == "42501" else { return error }
        let prefix = "permission denied for "
        guard let range = e.serverMessage.range(of: prefix) else {
            return PermissionDenied(description: "\(e): permission denied (docs/configuration.md, \"Which login for each command\")")
        }
        let what = String(e.serverMessage[range.upperBound...])  // "view backlog", "table counts", "schema siwa"
        let object = String(what.split(separator: " ").last ?? "")
        let roles = roles(granting: object, privilege: privilege)
        let need = roles.isEmpty ? "only the owner of schema siwa may" : "a member of \(roles.joined(separator: " or ")) may"
        return PermissionDenied(
            description: "permission denied for \(what) (42501): \(need) (docs/configuration.md, \"Which login for each command\")")
    }

    /// siwa's roles granted `object` whole (a role with a few of its columns only is named when
    /// no role has it whole).
    static func roles(granting object: String, privilege: String? = nil) -> [String] {
        var whole: Set<String> = [], columns: Set<String> = []
        for line in GrantMatrix.expected {
            let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
            guard parts.count == 3, parts[0].hasPrefix("siwa_"), privilege.map({ $0 == parts[1] || parts[1] == "USAGE" }) ?? true else {
                continue
            }
            let target = parts[2].split(separator: "(").first.map(String.init) ?? parts[2]
            guard target == object || target == "schema \(object)" else { continue }
            if parts[2].contains("(") { columns.insert(parts[0]) } else { whole.insert(parts[0]) }
        }
        return (whole.isEmpty ? columns : whole).sorted()
    }
}
