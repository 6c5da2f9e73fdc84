import CPostgres
import SiwaCore

#if canImport(Glibc)
import Glibc
#endif

/// One libpq connection (`PGconn*`). Not `Sendable`: use it from one thread at a time
/// (`PostgresPool` hands connections out).
public final class PostgresConnection {
    private var conn: OpaquePointer?
    public let conninfo: String
    private let setup: ((PostgresConnection) throws(PostgresError) -> Void)?
    private let pinsSearchPath: Bool

    /// Opens a connection; `setup` runs once it is up (e.g. LISTEN). `pinsSearchPath: false` is
    /// for the tests' stand-ins of other clients (an app, psql) only: siwa-notify's own
    /// connections always pin (`execute`).
    public init(
        conninfo: String, connectTimeout: Int = 5, applicationName: String = "siwa-notify",
        pinsSearchPath: Bool = true, setup: ((PostgresConnection) throws(PostgresError) -> Void)? = nil
    ) throws(PostgresError) {
        self.conninfo = conninfo
        self.setup = setup
        self.pinsSearchPath = pinsSearchPath
        self.conn = siwa_pq_connect(conninfo, String(connectTimeout), applicationName)
        guard let conn, PQstatus(conn) == CONNECTION_OK else {
            let message = conn.map { String(cString: PQerrorMessage($0)) } ?? "out of memory"
            if let conn { PQfinish(conn) }
            self.conn = nil
            throw PostgresError(code: .connectionFailed, serverMessage: firstLine(message))
        }
        try runSetup()
    }

    deinit {
        if let conn { PQfinish(conn) }
    }

    /// True while the connection is usable.
    public var isHealthy: Bool {
        guard let conn else { return false }
        return PQstatus(conn) == CONNECTION_OK
    }

    private func runSetup() throws(PostgresError) {
        if let setup { try setup(self) }
    }

    /// Runs one command with text parameters `$1...`, in a transaction whose `search_path` is
    /// pinned (`PinnedSearchPath`): a transaction this text opens gets the pin with its `BEGIN`;
    /// a command sent outside any transaction runs in one opened for it (two more round trips;
    /// siwa-notify's hot paths run in transactions of their own).
    @discardableResult
    public func execute(_ sql: String, _ parameters: [String?] = []) throws(PostgresError) -> PostgresResult {
        guard let conn else { throw PostgresError(code: .connectionLost) }
        guard pinsSearchPath, PQtransactionStatus(conn) == PQTRANS_IDLE else { return try send(sql, parameters) }
        switch PinnedSearchPath.plan(sql) {
        case .asIs:
            return try send(sql, parameters)
        case .opensTransaction(let pinned) where parameters.isEmpty:
            return try send(pinned, parameters)
        case .opensTransaction:
            let result = try send(sql, parameters)
            try send(PinnedSearchPath.setLocal, [])
            return result
        case .wrap:
            try send("BEGIN; " + PinnedSearchPath.setLocal, [])
            do {
                let result = try send(sql, parameters)
                try send("COMMIT", [])
                return result
            } catch {
                if isHealthy, PQtransactionStatus(conn) != PQTRANS_IDLE { _ = try? send("ROLLBACK", []) }
                throw error
            }
        }
    }

    @discardableResult
    private func send(_ sql: String, _ parameters: [String?]) throws(PostgresError) -> PostgresResult {
        guard let conn else { throw PostgresError(code: .connectionLost) }
        let result: OpaquePointer? = withCStrings(parameters) { pointers in
            if parameters.isEmpty { return PQexec(conn, sql) }
            return PQexecParams(conn, sql, Int32(parameters.count), nil, pointers, nil, nil, 0)
        }
        return try consume(result)
    }

    /// Runs `body` inside a transaction opened by `begin` (default `BEGIN`; e.g. `BEGIN` followed
    /// by `SET LOCAL`s, sent as one simple query) and committed after it; rolled back when it throws.
    public func transaction<T>(begin: String = "BEGIN", _ body: (PostgresConnection) throws(PostgresError) -> T) throws(PostgresError) -> T {
        try execute(begin)
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            if isHealthy { _ = try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body` under a savepoint: released when it returns, rolled back to when it throws
    /// (the transaction goes on). `name` must be a plain identifier.
    public func withSavepoint<T>(_ name: String, _ body: (PostgresConnection) throws(PostgresError) -> T) throws(PostgresError) -> T {
        try execute("SAVEPOINT \(name)")
        do {
            let value = try body(self)
            try execute("RELEASE SAVEPOINT \(name)")
            return value
        } catch {
            if isHealthy { try execute("ROLLBACK TO SAVEPOINT \(name)") }
            throw error
        }
    }

    /// Subscribes to NOTIFY messages on `channel` (a plain identifier); see `waitForNotifications`.
    public func listen(_ channel: String) throws(PostgresError) {
        try execute("LISTEN \(channel)")
    }

    /// Waits up to `timeout` for NOTIFY messages on channels this connection LISTENs to;
    /// returns their channel names (empty on timeout). Throws when the connection broke.
    public func waitForNotifications(timeout: Duration) throws(PostgresError) -> [String] {
        guard let conn else { throw PostgresError(code: .connectionLost) }
        var channels = drainNotifications(conn)
        if !channels.isEmpty { return channels }
        let ready = siwa_pq_wait_readable(conn, Int32(clamping: max(0, Int64(timeout.inSeconds * 1000))))
        if ready < 0 { throw PostgresError(code: .connectionLost) }
        if ready > 0 {
            if PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK {
                throw PostgresError(code: .connectionLost, serverMessage: firstLine(String(cString: PQerrorMessage(conn))))
            }
            channels = drainNotifications(conn)
        }
        return channels
    }

    private func drainNotifications(_ conn: OpaquePointer) -> [String] {
        var channels: [String] = []
        while let notify = PQnotifies(conn) {
            channels.append(String(cString: notify.pointee.relname))
            PQfreemem(notify)
        }
        return channels
    }

    private func consume(_ result: OpaquePointer?) throws(PostgresError) -> PostgresResult {
        guard let conn else { throw PostgresError(code: .connectionLost) }
        guard let result else {
            throw PostgresError(
                code: PQstatus(conn) == CONNECTION_OK ? .queryFailed : .connectionLost,
                serverMessage: firstLine(String(cString: PQerrorMessage(conn))))
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            break
        default:
            let state = PQresultErrorField(result, SIWA_PG_DIAG_SQLSTATE).map { String(cString: $0) }
            let primary =
                PQresultErrorField(result, SIWA_PG_DIAG_MESSAGE_PRIMARY).map { String(cString: $0) }
                ?? firstLine(String(cString: PQerrorMessage(conn)))
            let lost = PQstatus(conn) != CONNECTION_OK
            throw PostgresError(code: lost ? .connectionLost : .queryFailed, sqlState: state, serverMessage: primary)
        }
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        var columns: [String] = []
        columns.reserveCapacity(columnCount)
        for c in 0..<columnCount {
            columns.append(String(cString: PQfname(result, Int32(c))))
        }
        var rows: [[String?]] = []
        rows.reserveCapacity(rowCount)
        for r in 0..<rowCount {
            var row: [String?] = []
            row.reserveCapacity(columnCount)
            for c in 0..<columnCount {
                if PQgetisnull(result, Int32(r), Int32(c)) == 1 {
                    row.append(nil)
                } else {
                    row.append(String(cString: PQgetvalue(result, Int32(r), Int32(c))))
                }
            }
            rows.append(row)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresResult(columns: columns, rows: rows, affectedRows: affected)
    }
}

@available(*, unavailable)
extension PostgresConnection: Sendable {}

private func firstLine(_ text: String) -> String {
    String(text.split(separator: "\n", maxSplits: 1).first ?? "")
}

/// Calls `body` with a C array of NUL-terminated copies of `strings` (NULL for nil).
private func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let storage: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0)! } }
    defer { for p in storage { free(p) } }
    return body(storage.map { $0.map { UnsafePointer($0) } })
}
