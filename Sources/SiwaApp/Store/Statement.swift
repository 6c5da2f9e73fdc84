import SiwaPostgres

/// One SQL statement the program runs: its text, how its binds become text parameters, and how a
/// result row becomes a value (like postgres-nio's prepared statements). Every statement of
/// siwa-notify is one of these, in this folder (`scripts/check-sql` keeps SQL text out of the
/// rest of the program).
///
/// Statements run unnamed (`PQexecParams`): each run is planned with its own values, so no
/// cached generic plan outlives the statistics it was made from, and nothing depends on
/// session state (they work through PgBouncer in transaction pooling mode). The one plan the
/// server keeps is the receiver's insert's, inside `siwa.insert_events` (schema.sql): it reads no
/// table, so no statistics can outdate it.
struct Statement<Binds, Row>: Sendable {
    /// A short name for logs and tests.
    let name: String
    let sql: String
    let bind: @Sendable (Binds) -> [String?]
    let decode: @Sendable (RowReader) throws(PostgresError) -> Row

    init(
        _ name: String, _ sql: String, bind: @escaping @Sendable (Binds) -> [String?],
        decode: @escaping @Sendable (RowReader) throws(PostgresError) -> Row
    ) {
        self.name = name
        self.sql = sql
        self.bind = bind
        self.decode = decode
    }
}

extension Statement where Row == Void {
    /// A statement whose rows (if any) are not read.
    init(_ name: String, _ sql: String, bind: @escaping @Sendable (Binds) -> [String?]) {
        self.init(name, sql, bind: bind, decode: { _ throws(PostgresError) in })
    }
}

extension Statement where Binds == Void {
    /// A statement without parameters.
    init(_ name: String, _ sql: String, decode: @escaping @Sendable (RowReader) throws(PostgresError) -> Row) {
        self.init(name, sql, bind: { _ in [] }, decode: decode)
    }
}

extension PostgresConnection {
    /// Runs `statement` and decodes every row.
    func rows<B, R>(_ statement: Statement<B, R>, _ binds: B) throws(PostgresError) -> [R] {
        let result = try run(statement, binds)
        let columns = RowReader.Columns(result.columns)
        var out: [R] = []
        out.reserveCapacity(result.rows.count)
        for row in result.rows {
            out.append(try statement.decode(RowReader(columns: columns, values: row, statement: statement.name)))
        }
        return out
    }

    /// Runs `statement`; its one row decoded (nil when it returned none).
    func row<B, R>(_ statement: Statement<B, R>, _ binds: B) throws(PostgresError) -> R? {
        try rows(statement, binds).first
    }

    /// Runs `statement`; returns the number of rows it inserted, updated or deleted.
    @discardableResult
    func affected<B, R>(_ statement: Statement<B, R>, _ binds: B) throws(PostgresError) -> Int {
        try run(statement, binds).affectedRows
    }

    func rows<R>(_ statement: Statement<Void, R>) throws(PostgresError) -> [R] { try rows(statement, ()) }
    func row<R>(_ statement: Statement<Void, R>) throws(PostgresError) -> R? { try row(statement, ()) }

    private func run<B, R>(_ statement: Statement<B, R>, _ binds: B) throws(PostgresError) -> PostgresResult {
        let parameters = statement.bind(binds)
        // Always the extended protocol when there are parameters; the simple one (one round
        // trip, several commands allowed) only for fixed texts.
        return try execute(statement.sql, parameters)
    }
}
