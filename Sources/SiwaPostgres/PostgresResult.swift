/// The rows of one command, copied out of the `PGresult` (text format).
public struct PostgresResult: Sendable, Equatable {
    public var columns: [String]
    public var rows: [[String?]]
    /// Rows inserted/updated/deleted (`PQcmdTuples`), 0 when not applicable.
    public var affectedRows: Int

    public init(columns: [String] = [], rows: [[String?]] = [], affectedRows: Int = 0) {
        self.columns = columns
        self.rows = rows
        self.affectedRows = affectedRows
    }

    /// The value in `row` under column `name`; nil when NULL or no such column.
    public func value(_ row: Int, _ name: String) -> String? {
        guard row < rows.count, let index = columns.firstIndex(of: name) else { return nil }
        return rows[row][index]
    }

    /// The first column of the first row.
    public var scalar: String? {
        rows.first?.first ?? nil
    }
}
