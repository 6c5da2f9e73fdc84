/// How a statement sent on an idle database connection is made to resolve names with a pinned
/// `search_path` (CONTRACT §6: no login can make siwa-notify run a function or an operator it
/// planted). A comparison on a `varchar` column has no exact operator in `pg_catalog`, so an
/// `=(varchar, varchar)` created in any schema of the session's path would win over the built-in
/// one; pinning each function does not cover the statements siwa-notify sends itself.
///
/// The pin is a `SET LOCAL`, so it lasts exactly one transaction: it holds behind PgBouncer's
/// transaction pooling, where a connection-level setting (a startup `options`, a session `SET`)
/// may land on another client's server connection, or be refused as a startup parameter.
/// Every transaction therefore carries its own pin: one opened by the caller gets it in the same
/// round trip as its `BEGIN`; a statement sent outside a transaction runs in one opened for it.
public enum PinnedSearchPath {
    /// `pg_catalog` first and nothing writable after it: `pg_temp` last, where PostgreSQL never
    /// looks up functions or operators.
    public static let value = "pg_catalog, pg_temp"
    public static let setLocal = "SET LOCAL search_path = pg_catalog, pg_temp"

    public enum Plan: Equatable, Sendable {
        /// The text opens a transaction: send this text instead (the pin right after `BEGIN`).
        case opensTransaction(String)
        /// A statement that must run outside a transaction block, or one that ends one: as it is.
        case asIs
        /// Anything else: run it inside a pinned transaction of its own.
        case wrap
    }

    /// What to do with `sql`, about to be sent on a connection that is not in a transaction.
    public static func plan(_ sql: String) -> Plan {
        let words = leadingWords(sql, count: 3)
        guard let first = words.first else { return .asIs }
        switch first {
        case "BEGIN", "START":
            return .opensTransaction(pinned(sql))
        case "COMMIT", "ROLLBACK", "END", "ABORT", "SAVEPOINT", "RELEASE", "PREPARE":
            return .asIs
        // PostgreSQL refuses these inside a transaction block (they only ever come from
        // maintenance and tests: none of them resolves an operator or a function by name).
        case "VACUUM", "CHECKPOINT":
            return .asIs
        case "ALTER" where words.count > 1 && words[1] == "SYSTEM":
            return .asIs
        case "CREATE", "DROP":
            let second = words.count > 1 ? words[1] : ""
            if second == "DATABASE" || second == "TABLESPACE" { return .asIs }
            if (second == "INDEX" || second == "UNIQUE") && sql.uppercased().contains("CONCURRENTLY") { return .asIs }
            return .wrap
        case "REINDEX":
            return .asIs
        default:
            return .wrap
        }
    }

    /// `sql` (which opens with `BEGIN` or `START TRANSACTION`) with the pin inserted right after
    /// that first command, so both go in one round trip.
    static func pinned(_ sql: String) -> String {
        let scalars = sql.unicodeScalars
        let from = words(sql, count: 1).first?.end ?? scalars.startIndex
        guard let end = scalars[from...].firstIndex(of: ";") else { return sql + "; " + setLocal }
        return String(scalars[..<end]) + "; " + setLocal + String(scalars[end...])
    }

    /// The first `count` words of `sql`, upper-cased, past blanks and comments (`-- …` lines and
    /// `/* … */` blocks, as schema.sql opens), up to the end of its first command.
    static func leadingWords(_ sql: String, count: Int) -> [String] {
        words(sql, count: count).map { $0.word.uppercased() }
    }

    private static func words(_ sql: String, count: Int) -> [(word: String, end: String.UnicodeScalarView.Index)] {
        let scalars = sql.unicodeScalars
        var words: [(word: String, end: String.UnicodeScalarView.Index)] = []
        var current = ""
        var i = scalars.startIndex
        func flush() {
            if !current.isEmpty { words.append((current, i)) }
            current = ""
        }
        while i < scalars.endIndex, words.count < count {
            let c = scalars[i]
            let next = scalars.index(after: i)
            if c == "-", next < scalars.endIndex, scalars[next] == "-" {
                flush()
                while i < scalars.endIndex, scalars[i] != "\n" { i = scalars.index(after: i) }
                continue
            }
            if c == "/", next < scalars.endIndex, scalars[next] == "*" {
                flush()
                i = scalars.index(after: next)
                while i < scalars.endIndex {
                    let after = scalars.index(after: i)
                    if scalars[i] == "*", after < scalars.endIndex, scalars[after] == "/" {
                        i = scalars.index(after: after)
                        break
                    }
                    i = after
                }
                continue
            }
            if c.properties.isAlphabetic || c == "_" {
                current.unicodeScalars.append(c)
            } else {
                flush()
                if c == ";" && !words.isEmpty { break }
            }
            i = next
        }
        if words.count < count { flush() }
        return words
    }
}
