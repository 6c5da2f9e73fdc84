import SiwaPostgres

/// Reads one result row by column name. A missing column, a NULL where a value is required, or
/// a value of the wrong shape is a `PostgresError` (`unexpectedRow`) naming the statement and
/// the column: never a silent default.
struct RowReader {
    /// Column name → position, built once per result.
    struct Columns {
        let index: [String: Int]
        init(_ names: [String]) {
            var index: [String: Int] = [:]
            for (i, name) in names.enumerated() where index[name] == nil { index[name] = i }
            self.index = index
        }
    }

    let columns: Columns
    let values: [String?]
    let statement: String

    private func problem(_ column: String, _ what: String) -> PostgresError {
        PostgresError(code: .unexpectedRow, serverMessage: "\(statement): column \"\(column)\" \(what)")
    }

    /// The raw text of `column`, nil when NULL.
    func optionalText(_ column: String) throws(PostgresError) -> String? {
        guard let i = columns.index[column], i < values.count else { throw problem(column, "is missing") }
        return values[i]
    }

    func text(_ column: String) throws(PostgresError) -> String {
        guard let value = try optionalText(column) else { throw problem(column, "is NULL") }
        return value
    }

    func optionalInt64(_ column: String) throws(PostgresError) -> Int64? {
        guard let text = try optionalText(column) else { return nil }
        guard let value = Int64(text) else { throw problem(column, "is not an integer") }
        return value
    }

    func int64(_ column: String) throws(PostgresError) -> Int64 {
        guard let value = try optionalInt64(column) else { throw problem(column, "is NULL") }
        return value
    }

    func int(_ column: String) throws(PostgresError) -> Int {
        let value = try int64(column)
        guard let narrowed = Int(exactly: value) else { throw problem(column, "is out of range") }
        return narrowed
    }

    func optionalBool(_ column: String) throws(PostgresError) -> Bool? {
        switch try optionalText(column) {
        case nil: return nil
        case "t"?: return true
        case "f"?: return false
        default: throw problem(column, "is not a boolean")
        }
    }

    func bool(_ column: String) throws(PostgresError) -> Bool {
        guard let value = try optionalBool(column) else { throw problem(column, "is NULL") }
        return value
    }

    func optionalDouble(_ column: String) throws(PostgresError) -> Double? {
        guard let text = try optionalText(column) else { return nil }
        guard let value = Double(text) else { throw problem(column, "is not a number") }
        return value
    }

    func double(_ column: String) throws(PostgresError) -> Double {
        guard let value = try optionalDouble(column) else { throw problem(column, "is NULL") }
        return value
    }

    /// A `bytea` column.
    func bytes(_ column: String) throws(PostgresError) -> [UInt8] {
        guard let value = try optionalBytes(column) else { throw problem(column, "is NULL") }
        return value
    }

    /// A `bytea` column, nil when NULL.
    func optionalBytes(_ column: String) throws(PostgresError) -> [UInt8]? {
        guard let text = try optionalText(column) else { return nil }
        guard let value = SQLEncoding.bytes(fromBytea: text) else { throw problem(column, "is not bytea in hex format") }
        return value
    }

    /// A text column holding the raw value of `T` (an enum of the schema's CHECK constraint).
    func value<T: RawRepresentable>(_ column: String, as type: T.Type) throws(PostgresError) -> T where T.RawValue == String {
        let text = try text(column)
        guard let value = T(rawValue: text) else { throw problem(column, "has an unexpected value") }
        return value
    }
}
