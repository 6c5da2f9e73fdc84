import Foundation
import Logging
import SiwaCore
import SiwaHTTP
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// The operator console under `/console` on the admin listener (README "Console").
/// Exists only with the API (`SIWA_API_TOKEN_FILE`): the admin handler answers 404 otherwise.
/// Signed in by a named operator with their own token (`siwa-notify operator add`; an API token
/// opens nothing here); the session cookie's hash lives in `siwa.console_sessions`; every change
/// is a same-origin `POST` carrying the session's CSRF token, and leaves a row in
/// `siwa.operator_actions` naming the operator. Pages run on the console's own executor, never
/// on a listener thread.
public final class ConsoleHandler: Sendable {
    /// Request headers the admin listener keeps for the console.
    public static let keptHeaders = ["Cookie", "Origin", "Referer", "Host", "X-Forwarded-Proto", "X-Forwarded-For", refreshHeader]

    /// Sent by the console's script with a page's automatic refresh: such a request is not
    /// activity, so it does not move the session's idle clock (the 8 h limit still ends a
    /// forgotten tab). A client that sends it only shortens its own session.
    static let refreshHeader = "X-Console-Refresh"

    /// True for the console's paths.
    public static func owns(_ path: String) -> Bool { path == "/console" || path.hasPrefix("/console/") }

    private let pool: PostgresPool
    private let executor: CallExecutor<Void>
    private let limiter = Mutex(SignInLimiter())
    /// How long a sign-in waits when its name has failed `SignInLimiter.limit` times within the window.
    private let signInSlowdown: Double
    private let secureCookie: Bool?
    private let trustedProxies: TrustedProxies
    private let features: ConsolePages.Features
    private let logger: Logger
    private let doctor: DoctorWatch?
    /// The pages' "now", sessions' idle time and the sign-in limiter's window.
    private let clock: WallClock

    public init(
        pool: PostgresPool, secureCookie: Bool?, trustedProxies: TrustedProxies = .none, inAppDeletion: Bool, forwarding: Bool,
        providers: [CallTarget] = [], logger: Logger, concurrency: Int = 4, doctor: DoctorWatch? = nil, clock: WallClock = .system,
        signInSlowdown: Double = 1
    ) {
        self.signInSlowdown = signInSlowdown
        self.doctor = doctor
        self.clock = clock
        self.pool = pool
        self.secureCookie = secureCookie
        self.trustedProxies = trustedProxies
        self.features = ConsolePages.Features(inAppDeletion: inAppDeletion, forwarding: forwarding, providers: providers)
        self.logger = logger
        executor = CallExecutor(limit: concurrency, name: "siwa-console")
    }

    /// Brings the hourly charts' rollup up to date, a step at a time (a periodic task).
    public func refreshCharts() {
        do {
            var moved: Int64 = 1
            var steps = 0
            while moved > 0 && steps < 10 {
                moved = try pool.withConnection(timeout: .seconds(5)) { c in try ConsoleReads.refreshRollup(c, now: clock.sinceEpoch.inSeconds) }
                steps += 1
            }
        } catch {
            logger.warning("console charts not refreshed", metadata: ["error": "\(error)"])
        }
    }

    /// Pages in flight finish within `seconds` (shutdown).
    public func drain(until deadline: Deadline) { executor.drain(until: deadline) }

    /// The answer before the body is read (nil: read it).
    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        switch head.method {
        case "GET", "HEAD": return nil
        case "POST":
            guard let type = head.contentType?.lowercased(), type.hasPrefix(FormURLEncoding.contentType) else {
                return Self.html(415, ConsolePages.problem("Unsupported form", "Forms are sent as application/x-www-form-urlencoded."))
            }
            guard ConsoleSecurity.isSameOrigin(origin: head.header("Origin"), referer: head.header("Referer"), host: head.header("Host")) else {
                return Self.crossSite()
            }
            return nil
        default:
            return HTTPResponse(status: 405, headers: [HTTPHeader("Allow", "GET, POST")])
        }
    }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        if let asset = ConsoleAssets.response(for: request.head.path) { return responder.respond(asset) }
        let admitted = executor.submit { [self] in
            let response: HTTPResponse
            do {
                response = try route(request)
            } catch {
                logger.error("console page failed", metadata: ["path": "\(request.head.path)", "error": "\(error)"])
                response = Self.html(503, ConsolePages.problem("Database unavailable", "The page could not be read. Try again shortly."))
            }
            responder.respond(request.head.method == "HEAD" ? HTTPResponse(status: response.status, headers: response.headers) : response)
        }
        if !admitted {
            var busy = Self.html(503, ConsolePages.problem("Busy", "Too many console pages in flight. Try again in a moment."))
            busy.headers.append(HTTPHeader("Retry-After", "1"))
            responder.respond(busy)
        }
    }

    // MARK: Routing

    /// A request with its session (when signed in) and form fields.
    struct Context {
        var head: HTTPRequestHead
        var form: [(String, String)]
        /// The client's address (`X-Forwarded-For` believed from `SIWA_TRUSTED_PROXIES` only).
        var client: String?
        var session: String?
        /// The signed-in operator's name and token fingerprint.
        var operatorName: String?
        var fingerprint: String?
        var csrf: String { session.map(ConsoleSecurity.csrfToken(forSession:)) ?? "" }
        func field(_ name: String) -> String? { form.first { $0.0 == name }?.1 }
        func fields(_ name: String) -> [String] { form.filter { $0.0 == name }.map(\.1) }
        func query(_ name: String) -> String? { head.argument(name).flatMap { $0.isEmpty ? nil : $0 } }
        func nav(_ current: String) -> ConsoleHTML.Nav { ConsoleHTML.Nav(csrf: csrf, operatorName: operatorName ?? "", current: current) }
    }

    private func route(_ request: HTTPRequest) throws -> HTTPResponse {
        let head = request.head
        let forwardedFor = head.headers.filter { $0.name.lowercased() == "x-forwarded-for" }.map(\.value)
        var context = Context(head: head, form: [], client: trustedProxies.clientAddress(peer: head.clientAddress, forwardedFor: forwardedFor))
        if head.method == "POST" {
            context.form = FormURLEncoding.decode(request.body) ?? []
        }
        if head.path == "/console/sign-in" {
            return head.method == "POST" ? try signIn(context) : Self.html(200, ConsolePages.signIn(error: nil))
        }
        let cookie = ConsoleSecurity.sessionToken(cookieHeader: head.header("Cookie"))
        // Only a page's automatic refresh (a GET) leaves the idle clock alone.
        let activity = !(head.method == "GET" && head.header(Self.refreshHeader) != nil)
        if let cookie, let stored = try liveSession(cookie, activity: activity) {
            context.session = cookie
            context.operatorName = stored.operatorName
            context.fingerprint = stored.fingerprint
        } else {
            // Not signed in: pages send the browser to the sign-in form; changes are refused.
            if head.method == "POST" { return Self.html(403, ConsolePages.problem("Signed out", "Your session ended. Sign in again.")) }
            return HTTPResponse(status: 303, headers: [HTTPHeader("Location", "/console/sign-in")])
        }
        if head.method == "POST" {
            guard let session = context.session, ConsoleSecurity.csrfMatches(presented: context.field("csrf"), session: session) else {
                return Self.crossSite()
            }
            return try post(context)
        }
        return try get(context)
    }

    private func get(_ context: Context) throws -> HTTPResponse {
        let path = context.head.path
        return try pool.withConnection(timeout: .seconds(5)) { c in
            switch path {
            case "/console", "/console/":
                return Self.html(
                    200,
                    ConsolePages.overview(
                        try ConsoleReads.overview(c, now: clock.sinceEpoch.inSeconds), features: features, nav: context.nav("/console"),
                        doctor: doctor?.latest()))
            case "/console/events":
                let filter = Self.eventFilter(context)
                return Self.html(200, ConsolePages.events(try ConsoleReads.events(filter, c), filter: filter, nav: context.nav("/console/events")))
            case "/console/failures":
                return Self.html(
                    200, ConsolePages.failures(try Self.failures(c), notice: Self.notice(context), nav: context.nav("/console/failures")))
            case "/console/users":
                return try userPage(context, c, reveal: false, error: nil, status: 200)
            case "/console/sync":
                return Self.html(
                    200, ConsolePages.sync(try Self.sync(c, now: clock.sinceEpoch.inSeconds), features: features, nav: context.nav("/console/sync")))
            case "/console/audit":
                let before = context.query("before").flatMap { Int64($0) } ?? Int64.max
                let rows = try c.rows(ConsoleStatements.actions, (before, 101))
                return Self.html(200, ConsolePages.audit(rows, nav: context.nav("/console/audit")))
            default:
                if path.hasPrefix("/console/events/"), let id = Int64(path.dropFirst("/console/events/".count)) {
                    guard let row = try c.row(ConsoleStatements.event, id) else {
                        return Self.html(
                            404, ConsolePages.page("Event \(id)", nav: context.nav("/console/events"), body: "<p class=\"empty\">No such event.</p>"))
                    }
                    return Self.html(200, ConsolePages.event(row, nav: context.nav("/console/events")))
                }
                return Self.html(404, ConsolePages.page("Not found", nav: context.nav(""), body: "<p class=\"empty\">No such page.</p>"))
            }
        }
    }

    private func post(_ context: Context) throws -> HTTPResponse {
        switch context.head.path {
        case "/console/sign-out":
            try pool.withConnection(timeout: .seconds(5)) { c in
                _ = try c.affected(ConsoleStatements.signOut, (context.session ?? "", context.client))
            }
            return HTTPResponse(
                status: 303,
                headers: [
                    HTTPHeader("Location", "/console/sign-in"), HTTPHeader("Set-Cookie", ConsoleSecurity.clearedCookie(secure: secure(context.head))),
                ])
        case "/console/replay":
            return try replay(context)
        case "/console/users/delete":
            return try deleteUser(context)
        case "/console/users/reveal":
            return try pool.withConnection(timeout: .seconds(5)) { c in
                guard let typed = context.field("sub"), let sub = try ConsoleReads.resolveSubject(typed, c) else {
                    return Self.html(400, ConsolePages.problem("Bad request", "No user named."))
                }
                // The audit row names the user whose emails the page shows: the sub found, never the text as typed.
                let page = try userPage(context, c, reveal: true, error: nil, status: 200, subject: sub)
                if page.status == 200 { try c.affected(ConsoleStatements.revealedEmail, (context.session ?? "", context.client, sub)) }
                return page
            }
        default:
            return Self.html(404, ConsolePages.problem("Not found", "No such action."))
        }
    }

    // MARK: Sign-in and sessions

    /// Attempts are limited per client address (refused beyond the limit). A name's failed
    /// attempts slow its next ones (`signInSlowdown` each, past the limit) but never refuse them:
    /// whoever guesses at a name, its operator's right token still signs in.
    private func signIn(_ context: Context) throws -> HTTPResponse {
        let client = context.client ?? "unknown"
        let typedName = context.field("operator")?.trimmingCharacters(in: .whitespaces)
        let name = typedName.flatMap { ConsoleSecurity.isValidOperatorName($0) ? $0 : nil }
        let nameKey = name.map { "operator:" + $0 }
        let keys = ["address:" + client]
        let now = clock.sinceEpoch.inSeconds
        if let nameKey, limiter.withLock({ $0.isOver(nameKey, now: now) }) { Thread.sleep(forTimeInterval: signInSlowdown) }
        let allowed = limiter.withLock { $0.admit(keys, now: now) }
        guard allowed else {
            let wait = limiter.withLock { $0.retryAfter(keys, now: now) }
            var r = Self.html(429, ConsolePages.signIn(error: "Too many sign-in attempts. Try again later."))
            r.headers.append(HTTPHeader("Retry-After", String(Int(wait.rounded(.up)))))
            return r
        }
        let session = ConsoleSecurity.newSessionToken()
        // The database checks the token (siwa.console_sign_in), and records the refusal too.
        let signedIn = try pool.withConnection(timeout: .seconds(5)) { c -> Context? in
            guard let found = try c.row(ConsoleStatements.signIn, (typedName ?? "", context.field("token") ?? "", session, context.client))
            else { return nil }
            var signed = context
            signed.operatorName = found.operatorName
            signed.fingerprint = found.fingerprint
            return signed
        }
        guard let signedIn else {
            if let nameKey { limiter.withLock { $0.record(nameKey, now: now) } }
            return Self.html(401, ConsolePages.signIn(error: "Sign-in refused."))
        }
        logger.notice(
            "console sign-in",
            metadata: ["operator": "\(signedIn.operatorName ?? "")", "token_fingerprint": "\(signedIn.fingerprint ?? "")", "client": "\(client)"])
        return HTTPResponse(
            status: 303,
            headers: [
                HTTPHeader("Location", "/console"), HTTPHeader("Set-Cookie", ConsoleSecurity.sessionCookie(session, secure: secure(context.head))),
            ])
    }

    /// The session when it is live (and, for `activity`, marks it seen); nil otherwise.
    /// The session's operator when it is live (and, for `activity`, marks it seen); nil otherwise
    /// (siwa.console_session ends one found idle or past its lifetime).
    private func liveSession(_ cookie: String, activity: Bool) throws -> ConsoleStatements.SignedIn? {
        try pool.withConnection(timeout: .seconds(5)) { c in try c.row(ConsoleStatements.session, (cookie, activity)) }
    }

    private func secure(_ head: HTTPRequestHead) -> Bool {
        ConsoleSecurity.secureCookie(configured: secureCookie, forwardedProto: head.header("X-Forwarded-Proto"), origin: head.header("Origin"))
    }

    // MARK: Actions

    /// Replays dead events, revocations, forwards or provider calls: one, the selected, all of a
    /// type (a provider's, for calls), or all; through the statements `replay` uses. The audit row
    /// is in the same transaction.
    private func replay(_ context: Context) throws -> HTTPResponse {
        let kind = context.field("kind") ?? "events"
        let type = context.field("type").flatMap { $0.isEmpty ? nil : $0 }
        // A row's own button replays that row only; "Replay selected" the checked rows.
        let ids = context.field("one").map { [$0] } ?? context.fields("id")
        let all = context.field("scope") == "all"
        guard ConsolePages.replayKinds[kind] != nil, all || type != nil || !ids.isEmpty else {
            return HTTPResponse(status: 303, headers: [HTTPHeader("Location", "/console/failures?notice=nothing-selected")])
        }
        // Ids as typed: the function replays only dead rows whose id matches (the audit row names them).
        let selection: [String]? = all ? nil : ids.filter { !$0.isEmpty }
        let count = try pool.withConnection(timeout: .seconds(5)) { c -> Int in
            try c.row(ConsoleStatements.replay, (context.session ?? "", context.client, kind, selection, all ? type : nil)) ?? 0
        }
        return HTTPResponse(status: 303, headers: [HTTPHeader("Location", "/console/failures?notice=replayed-\(count)-\(kind)")])
    }

    /// In-app deletion (README "In-app account deletion", `siwa.request_deletion`), once the `sub` was typed again.
    private func deleteUser(_ context: Context) throws -> HTTPResponse {
        guard let sub = context.field("sub"), !sub.isEmpty else { return Self.html(400, ConsolePages.problem("Bad request", "No user named.")) }
        let aud = context.field("aud").flatMap { $0.isEmpty ? nil : $0 }
        return try pool.withConnection(timeout: .seconds(5)) { c in
            guard context.field("confirm")?.trimmingCharacters(in: .whitespaces) == sub else {
                return try userPage(
                    context, c, reveal: false, error: "The sub typed does not match: nothing was deleted.", status: 422, subject: sub)
            }
            try c.affected(ConsoleStatements.requestDeletion, (context.session ?? "", context.client, sub, aud))
            return HTTPResponse(
                status: 303,
                headers: [HTTPHeader("Location", "/console/users?q=" + SubjectHash.of(sub) + "&notice=deletion-requested")])
        }
    }

    // MARK: Page data

    /// The page of `subject` (a sub, taken as is), or of the user the `q` query names (a sub or its hash).
    private func userPage(
        _ context: Context, _ c: PostgresConnection, reveal: Bool, error: String?, status: Int, subject: String? = nil
    ) throws -> HTTPResponse {
        let nav = context.nav("/console/users")
        guard let q = subject ?? context.query("q") else {
            return Self.html(status, ConsolePages.userSearch(nav: nav, query: nil, notFound: false))
        }
        let found = subject != nil ? subject : try ConsoleReads.resolveSubject(q, c)
        guard let sub = found, let account = try c.row(ConsoleStatements.account, sub) else {
            let events = try found.map { try c.rows(ConsoleStatements.userEvents, $0) } ?? []
            guard let sub = found, !events.isEmpty else { return Self.html(404, ConsolePages.userSearch(nav: nav, query: q, notFound: true)) }
            // Events not applied yet: the user exists only in the queue.
            let user = ConsolePages.User(
                sub: sub, account: nil, apps: [], sessions: [], events: events, revocations: [], forwards: [])
            return Self.html(status, ConsolePages.user(user, reveal: reveal, error: error, notice: nil, features: features, nav: nav))
        }
        let user = ConsolePages.User(
            sub: sub, account: account, apps: try c.rows(ConsoleStatements.appAccounts, sub),
            sessions: try c.rows(ConsoleStatements.sessions, sub), events: try c.rows(ConsoleStatements.userEvents, sub),
            revocations: try c.rows(ConsoleStatements.userRevocations, sub), forwards: try c.rows(ConsoleStatements.userForwards, sub),
            providerCalls: try c.rows(ConsoleStatements.userProviderCalls, sub),
            report: try c.row(ReportStatements.userReport, sub)?.json)
        let notice = context.query("notice") == "deletion-requested" ? "Deletion requested: the worker applies it by its next batch." : nil
        return Self.html(status, ConsolePages.user(user, reveal: reveal, error: error, notice: notice, features: features, nav: nav))
    }

    private static func failures(_ c: PostgresConnection) throws -> ConsolePages.Failures {
        ConsolePages.Failures(
            deadLetters: try c.rows(ConsoleStatements.deadLetters, (Int64.max, 200)),
            deadLetterTypes: try c.rows(ConsoleStatements.deadLetterTypes, ()),
            deadRevocations: try c.rows(ConsoleStatements.deadRevocations, 200),
            failingRevocations: try c.rows(ConsoleStatements.failedRevocations, 200),
            deadForwards: try c.rows(ConsoleStatements.deadForwards, 200),
            deadProviderCalls: try c.rows(ConsoleStatements.deadProviderCalls, 200))
    }

    private static func sync(_ c: PostgresConnection, now: Double) throws -> ConsolePages.Sync {
        var revocations: [String: Int] = [:]
        for row in try c.rows(RevocationStatements.counts) { revocations[row.status] = row.count }
        return ConsolePages.Sync(
            now: now, reconcile: try c.row(ReconcileStatements.counts),
            tokensDue: try c.row(ConsoleStatements.tokensDue) ?? 0,
            nextSlot: try c.row(ConsoleStatements.reconcilePace) ?? nil, transfers: try c.row(TransferStatements.counts), revocations: revocations,
            quarantined: try c.rows(TokenKeyStatements.quarantined, 100))
    }

    private static func notice(_ context: Context) -> String? {
        guard let code = context.query("notice") else { return nil }
        if code == "nothing-selected" { return "Nothing selected: nothing was replayed." }
        // `replayed-N-KIND` (a kind may hold a dash).
        let parts = code.split(separator: "-", maxSplits: 2)
        if parts.count == 3, parts[0] == "replayed", let n = Int(parts[1]), let noun = ConsolePages.replayKinds[String(parts[2])] {
            return "\(n) dead \(n == 1 ? noun.one : noun.many) put back in the queue."
        }
        return nil
    }

    static func eventFilter(_ context: Context) -> ConsoleReads.EventFilter {
        ConsoleReads.EventFilter(
            type: context.query("type"), status: context.query("status"), aud: context.query("app"), subject: context.query("q"),
            from: context.query("from").flatMap(ConsolePages.parseTime), to: context.query("to").flatMap(ConsolePages.parseTime),
            before: context.query("before").flatMap { Int64($0) })
    }

    // MARK: Responses

    static func html(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: securityHeaders(contentType: "text/html; charset=utf-8"), body: Array(body.utf8))
    }

    static func securityHeaders(contentType: String) -> [HTTPHeader] {
        [
            HTTPHeader("Content-Type", contentType),
            HTTPHeader("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'"),
            HTTPHeader("X-Content-Type-Options", "nosniff"),
            HTTPHeader("X-Frame-Options", "DENY"),
            HTTPHeader("Referrer-Policy", "same-origin"),
            HTTPHeader("Cache-Control", "no-store"),
        ]
    }

    static func crossSite() -> HTTPResponse {
        html(403, ConsolePages.problem("Refused", "This change did not come from a page of this console (cross-site request or a stale form)."))
    }
}
