import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime

/// The Apple refresh tokens Better Auth and Auth.js keep in clear in their own account rows
/// (README "Tokens the library stores"), used without the hand-over call: each is
/// adopted into `siwa.apple_tokens`, encrypted with the token key like a sign-in's, and from there
/// in-app deletion revokes it at Apple and reconciliation validates it, by their one path.
/// Adopted when a deletion is applied to the library (in the worker's transaction, before the
/// identity goes) and by `LibraryTokenSweep`, page by page, for reconciliation.
public struct LibraryTokenAdoption: Sendable, Equatable {
    public let vault: TokenVault
    /// The client id the library's tokens were issued to (`SIWA_LIBRARY_CLIENT_ID`).
    public let clientID: String

    public init(vault: TokenVault, clientID: String) {
        self.vault = vault
        self.clientID = clientID
    }

    public static func == (a: LibraryTokenAdoption, b: LibraryTokenAdoption) -> Bool {
        a.clientID == b.clientID && a.vault.keyIDs == b.vault.keyIDs
    }

    /// Seals what `found` holds to adopt (a plain Apple refresh token; once per sub) and stores
    /// it; returns how many were stored. No token is ever logged or put in an error.
    func adopt(_ found: [LibraryTokenStatements.Found], from schema: AuthLibrarySchema, on c: PostgresConnection) throws(PostgresError) -> Int {
        var rows: [LibraryTokenStatements.Sealed] = []
        var seen: Set<String> = []
        for item in found {
            guard let token = item.token, LibraryTokenRules.isPlainAppleRefreshToken(token), seen.insert(item.sub).inserted else { continue }
            let sealed: DeletionStatements.StoredToken
            do {
                sealed = try vault.seal(token, sub: item.sub, clientID: clientID)
            } catch {
                throw PostgresError(code: .queryFailed, serverMessage: "library token not sealed: \(type(of: error))")
            }
            rows.append(.init(sub: item.sub, token: sealed, hash: SHA256.hash(Array(token.utf8))))
        }
        guard !rows.isEmpty else { return 0 }
        return try c.row(LibraryTokenStatements.adopt, (rows, clientID, schema.kind.rawValue)) ?? 0
    }

    /// In a deletion's transaction, before the library's Apple identities of `subs` are removed:
    /// their tokens join `siwa.apple_tokens`, where the deletion then takes them to revocation.
    func adoptForDeletion(_ subs: [String], from schema: AuthLibrarySchema, on c: PostgresConnection) throws(PostgresError) {
        guard !subs.isEmpty, let read = LibraryTokenStatements.forSubs(schema) else { return }
        _ = try adopt(try c.rows(read, (subs, clientID)), from: schema, on: c)
    }
}

/// Walks each library's Apple identities in keyset pages (sub order, from the last one seen) and
/// adopts the tokens not adopted yet, so that reconciliation validates them: a `ConnectedLoop`
/// whose round is one page (one short transaction of key lookups), a pause between pages, a rest
/// between passes. The cursor lives on the loop's thread: a lost connection resumes there, a
/// restart begins a pass again (adopted tokens are skipped by their hash, never sealed again).
public final class LibraryTokenSweep: Service {
    public struct Options: Sendable {
        /// Identities per page. Default 500.
        public var pageSize = 500
        /// Seconds between two pages. Default 0.2.
        public var pagePause = 0.2
        /// Seconds between the end of a pass and the next. Default 3600.
        public var passEvery: Duration = .seconds(3600)
        public init() {}
    }

    /// Where the walk is: the library, the last sub seen, what this pass adopted so far.
    struct Progress {
        var schema = 0
        var cursor = ""
        var adopted = 0
    }

    public let name = "library token sweep"
    private let adoption: LibraryTokenAdoption
    private let options: Options
    private let loop: ConnectedLoop<PostgresConnection, Progress>

    public init(conninfo: String, targets: AuthLibraryTargets, adoption: LibraryTokenAdoption, options: Options = Options(), logger: Logger) {
        self.adoption = adoption
        self.options = options
        let schemas = targets.schemas.filter { $0.identities.refreshToken != nil }
        let page = Self.page
        loop = ConnectedLoop(
            name: "library token sweep", threadName: "siwa-library-tokens",
            body: .init(
                connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify library tokens") },
                makeState: { Progress() },
                round: { c, progress in
                    let clock = SystemClock.shared
                    guard !schemas.isEmpty else { return .wait(until: .never) }
                    let schema = schemas[progress.schema]
                    let (adopted, next) = try page(schema, progress.cursor, options.pageSize, adoption, c)
                    progress.adopted += adopted
                    if let next {
                        progress.cursor = next
                        return .wait(until: clock.now.adding(.seconds(options.pagePause)))
                    }
                    logger.info("library tokens: pass done", metadata: ["target": "\(schema.kind.rawValue)", "adopted": "\(progress.adopted)"])
                    progress = Progress(schema: (progress.schema + 1) % schemas.count)
                    return progress.schema == 0 ? .wait(until: clock.now.adding(options.passEvery)) : .again
                },
                failed: { error, _, wait in
                    logger.warning(
                        "library tokens: database unavailable, will retry", metadata: ["error": "\(error)", "retry_in": "\(wait)"])
                }))
    }

    public func start() { loop.start() }
    public func prepareToStop() { loop.prepareToStop() }
    public func stop(deadline: Deadline) { loop.stop(deadline: deadline) }

    /// One page of `schema` after `cursor`, in its own transaction: how many were adopted, and
    /// the cursor of the next page (nil: the pass is over).
    static func page(
        _ schema: AuthLibrarySchema, _ cursor: String, _ size: Int, _ adoption: LibraryTokenAdoption, _ c: PostgresConnection
    ) throws(PostgresError) -> (adopted: Int, next: String?) {
        guard let page = LibraryTokenStatements.page(schema) else { return (0, nil) }
        return try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            let found = try c.rows(page, (cursor, size, adoption.clientID))
            let adopted = try adoption.adopt(found, from: schema, on: c)
            return (adopted, found.count >= size ? found.last?.sub : nil)
        }
    }

    /// A whole pass over `schema` at once, without pauses (tests and tools); how many were adopted.
    func pass(_ schema: AuthLibrarySchema, on c: PostgresConnection) throws(PostgresError) -> Int {
        var cursor = ""
        var adopted = 0
        while true {
            let (n, next) = try Self.page(schema, cursor, options.pageSize, adoption, c)
            adopted += n
            guard let next else { return adopted }
            cursor = next
        }
    }
}
