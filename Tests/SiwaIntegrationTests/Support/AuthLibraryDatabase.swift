import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaPostgres

/// A fresh database with siwa's schema and an auth library's own tables, a login role in
/// `siwa_worker` with exactly the grants docs/auth-libraries.md lists for that library, and a worker running as that
/// role (its batches driven by the test: events are inserted into the outbox, then applied).
final class AuthLibraryDatabase {
    let url: String
    let role: String
    let workerURL: String
    let config: AuthLibraryConfiguration
    /// The Apple refresh tokens the library stores are adopted (in-app deletion is configured).
    let tokens: LibraryTokenAdoption?
    /// Milliseconds: a fixed point some hours ago, around which the tests place events and sessions.
    let t0: Int64 = (Int64(Date().timeIntervalSince1970) / 60 - 600) * 60_000
    static let hour: Int64 = 3_600_000

    /// - Parameters:
    ///   - schema: the library's tables (`AuthLibrarySchemas`); `operatorSQL`: what the guide
    ///     asks the operator to run besides the grants (indexes, row-level security policies),
    ///     with `ROLE` standing for the worker's role.
    ///   - tokens: in-app deletion is configured: the library's refresh tokens are adopted (and
    ///     their column granted).
    init(
        schema: String, operatorSQL: String = "", config: AuthLibraryConfiguration, grant: Bool = true, tokens: LibraryTokenAdoption? = nil
    ) throws {
        self.tokens = tokens
        url = try TestDatabase.create()
        role = "w_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        self.config = config
        workerURL = url + " user=\(role)"
        if !schema.isEmpty { _ = try TestDatabase.query(url, schema) }
        _ = try TestDatabase.query(url, "CREATE ROLE \(role) LOGIN IN ROLE siwa_worker")
        if grant {
            for kind in config.targets {
                for statement in AuthLibraryCheck.grants(
                    Self.defaultSchema(kind, config), policy: config.onAccountDelete, tokens: tokens != nil, role: role)
                {
                    _ = try TestDatabase.query(url, statement)
                }
            }
        }
        if !operatorSQL.isEmpty { _ = try TestDatabase.query(url, operatorSQL.replacingOccurrences(of: "ROLE", with: role)) }
    }

    /// The schema the check should resolve (grants are written for it).
    static func defaultSchema(_ kind: AuthLibraryKind, _ config: AuthLibraryConfiguration) -> AuthLibrarySchema {
        switch kind {
        case .supabase: return .supabase
        case .betterAuth:
            let tables = config.betterAuthTables ?? AuthLibrarySchema.betterAuthDefaultTables
            return .betterAuth(tables: tables, snakeCase: config.betterAuthTables != nil)
        case .authjs:
            return .authjs(tables: config.authjsTables ?? AuthLibrarySchema.authjsPostgresTables)
        }
    }

    /// The start-up check, as the worker's role.
    func resolve() throws -> AuthLibraryTargets {
        try AuthLibraryCheck.resolve(config, conninfo: workerURL, tokens: tokens)
    }

    private var worker: Worker?

    /// The worker, with the targets the start-up check resolved (made on first use).
    private func startedWorker() throws -> Worker {
        if let worker { return worker }
        var options = Worker.Options()
        options.authLibraries = try resolve()
        let made = Worker(
            conninfo: workerURL, options: options, logger: Logger(label: "authlib") { _ in SwiftLogNoOpLogHandler() }, metrics: Metrics())
        worker = made
        return made
    }

    /// Queues an event (as the receiver would have stored it).
    func event(
        _ type: String, sub: String, at ms: Int64, email: String? = nil, isPrivate: Bool? = nil, aud: String = "com.example.app"
    )
        throws -> Bool
    {
        let inserted = try TestDatabase.query(
            guardedURL,
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, claims)
            VALUES ($1, $2, $3, $4, timestamptz 'epoch' + $5::bigint * interval '1 millisecond', $6, $7::boolean, '{}')
            ON CONFLICT DO NOTHING RETURNING id
            """,
            [UUID().uuidString, aud, sub, type, String(ms), email, isPrivate.map { $0 ? "true" : "false" }])
        return inserted.rows.count == 1
    }

    /// Applies every queued event (batches until the queue is empty); fails if any failed.
    func apply() throws {
        let c = try PostgresConnection(conninfo: workerURL)
        let worker = try startedWorker()
        while try worker.processBatch(on: c) > 0 {}
        let failed = try scalar("SELECT string_agg(last_error, ' | ') FROM siwa.events WHERE status <> 'done'")
        if let failed { throw PostgresError(code: .queryFailed, serverMessage: failed) }
    }

    func scalar(_ sql: String, _ parameters: [String?] = []) throws -> String? {
        try TestDatabase.query(url, sql, parameters).scalar
    }

    func rows(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
        try TestDatabase.query(url, sql, parameters).rows
    }

    /// The events' insert: a search_path without `public` (it names only siwa's tables), so that
    /// in a database with planted functions (PlantedFunctionTests) only the worker's calls count.
    var guardedURL: String { url + " options='-csearch_path=pg_catalog,pg_temp'" }

    /// `timestamptz` SQL for `ms`.
    func at(_ ms: Int64) -> String { "timestamptz 'epoch' + \(ms) * interval '1 millisecond'" }
}
