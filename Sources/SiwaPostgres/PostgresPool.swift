import SiwaClock
import SiwaCore

/// A fixed-size pool of blocking libpq connections, shared across threads. Connections open
/// lazily; a connection that broke is dropped and the next checkout opens a fresh one (running
/// `setup` again, so prepared statements come back after a database restart). With
/// `transactionBegin`, every `withConnection` body runs in a transaction opened by it (e.g.
/// `BEGIN; SET LOCAL statement_timeout = …`): transaction-local settings on every use, which
/// survive PgBouncer's transaction pooling where session `SET`s do not. A checkout waits for a
/// free connection on the monotonic clock (a wall-clock step never stretches the wait).
public final class PostgresPool: @unchecked Sendable {
    // @unchecked: `idle` and `open` are only touched with `condition` locked; a checked-out
    // connection belongs to the one thread that holds it.
    public let conninfo: String
    public let size: Int
    private let connectTimeout: Int
    private let applicationName: String
    private let setup: @Sendable (PostgresConnection) throws(PostgresError) -> Void
    private let transactionBegin: String?
    private let condition = Condition()
    private let clock: any MonotonicClock
    private var idle: [PostgresConnection] = []
    private var open = 0
    private var closed = false

    public init(
        conninfo: String, size: Int, connectTimeout: Int = 5, applicationName: String = "siwa-notify",
        transactionBegin: String? = nil, clock: any MonotonicClock = SystemClock.shared,
        setup: @escaping @Sendable (PostgresConnection) throws(PostgresError) -> Void = { _ throws(PostgresError) in }
    ) {
        self.clock = clock
        self.conninfo = conninfo
        self.size = max(1, size)
        self.connectTimeout = connectTimeout
        self.applicationName = applicationName
        self.setup = setup
        self.transactionBegin = transactionBegin
    }

    /// Connections currently open (idle or in use).
    public var openConnections: Int { condition.withLock { open } }

    /// Connections currently checked out.
    public var busyConnections: Int { condition.withLock { open - idle.count } }

    /// Runs `body` with a connection of its own; waits up to `timeout` for one. With
    /// `transactionBegin`, inside a transaction (committed when `body` returns, rolled back when
    /// it throws): `body` must not open one itself.
    public func withConnection<T>(timeout: Duration = .seconds(30), _ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try checkout(timeout: timeout)
        do {
            let value = try run(body, on: connection)
            checkin(connection, broken: !connection.isHealthy)
            return value
        } catch let error as PostgresError {
            checkin(connection, broken: error.isConnectionProblem || !connection.isHealthy)
            throw error
        } catch {
            checkin(connection, broken: !connection.isHealthy)
            throw error
        }
    }

    private func run<T>(_ body: (PostgresConnection) throws -> T, on connection: PostgresConnection) throws -> T {
        guard let transactionBegin else { return try body(connection) }
        try connection.execute(transactionBegin)
        do {
            let value = try body(connection)
            try connection.execute("COMMIT")
            return value
        } catch {
            if connection.isHealthy { _ = try? connection.execute("ROLLBACK") }
            throw error
        }
    }

    /// Closes idle connections; busy ones close when returned.
    public func close() {
        condition.lock()
        closed = true
        open -= idle.count
        idle.removeAll()
        condition.broadcast()
        condition.unlock()
    }

    private func checkout(timeout: Duration) throws -> PostgresConnection {
        let deadline = clock.now.adding(timeout)
        condition.lock()
        while true {
            if closed {
                condition.unlock()
                throw PostgresError(code: .connectionFailed, serverMessage: "pool closed")
            }
            if let connection = idle.popLast() {
                condition.unlock()
                return connection
            }
            if open < size {
                open += 1
                condition.unlock()
                do {
                    return try PostgresConnection(
                        conninfo: conninfo, connectTimeout: connectTimeout,
                        applicationName: applicationName, setup: setup)
                } catch {
                    condition.lock()
                    open -= 1
                    condition.signal()
                    condition.unlock()
                    throw error
                }
            }
            if clock.now >= deadline {
                condition.unlock()
                throw PostgresError(code: .connectionFailed, serverMessage: "no free connection in the pool")
            }
            clock.wait(on: condition, until: deadline)
        }
    }

    private func checkin(_ connection: PostgresConnection, broken: Bool) {
        condition.lock()
        if broken || closed {
            open -= 1
        } else {
            idle.append(connection)
        }
        condition.signal()
        condition.unlock()
    }
}
