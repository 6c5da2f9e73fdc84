import Foundation
import SiwaCore

/// The console's pages, rendered from what `ConsoleReads` returned. Pure: data in, HTML out;
/// every database or request text is escaped, every email masked unless revealed.
enum ConsolePages {
    struct Features: Sendable, Equatable {
        var inAppDeletion: Bool
        var forwarding: Bool
        /// The hosted providers of `SIWA_APPLY_TO` and the email services of `SIWA_EMAIL_SENDERS`.
        var providers: [CallTarget] = []
    }

    private static let e = ConsoleHTML.escape

    static func page(
        _ title: String, nav: ConsoleHTML.Nav?, notice: String? = nil, error: String? = nil, live: Bool = false, body: String
    ) -> String {
        ConsoleHTML.page(title: title, nav: nav, notice: notice, error: error, live: live, body: body)
    }

    /// A page without navigation (refusals, errors).
    static func problem(_ title: String, _ message: String) -> String {
        page(title, nav: nil, body: "<p>\(e(message))</p><p><a href=\"/console\">Back to the console</a></p>")
    }

    /// `2026-11-24`, `2026-11-24 13:05`, `2026-11-24T13:05:00Z` (UTC) → Unix seconds.
    static func parseTime(_ text: String) -> Double? {
        let t = text.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "T", with: " ").replacingOccurrences(of: "Z", with: "")
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        for format in ["yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd HH:mm", "yyyy-MM-dd"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: t) { return date.timeIntervalSince1970 }
        }
        return nil
    }

    // MARK: Sign-in

    static func signIn(error: String?) -> String {
        page(
            "Sign in", nav: nil, error: error,
            body: """
                <form method="post" action="/console/sign-in" class="card signin">
                <p>Sign in with your operator token (<code>siwa-notify operator add NAME</code> prints it).</p>
                <label for="operator">Operator</label>
                <input id="operator" name="operator" autocomplete="username" autocapitalize="none" spellcheck="false" required autofocus>
                <label for="token">Token</label>
                <input id="token" name="token" type="password" autocomplete="current-password" required>
                <button type="submit" class="primary">Sign in</button>
                </form>
                """)
    }

    /// The commit's durability (README "High availability: what a failover keeps").
    static func durabilityStat(_ d: DatabaseDurability?) -> String {
        guard let d else { return ConsoleHTML.stat("Commit durability", "unknown", note: "could not be read", tone: "muted") }
        let (value, tone): (String, String) =
            switch d.promise {
            case .standby: ("synchronous standby", "")
            case .thisServer: ("this server", "")
            case .asynchronous: ("asynchronous", "warn")
            case .waitingForStandby: ("waiting for a standby", "bad")
            case .notFlushed: ("not flushed", "bad")
            case .unknown: ("unknown", "muted")
            }
        return ConsoleHTML.stat("Commit durability", value, note: d.summary, tone: tone)
    }

    // MARK: Overview

    /// The schema's release and the releases running against the database (their heartbeats),
    /// flagged when the mix is wider than the promise.
    static func releasesCard(_ r: ReleaseReport?) -> String {
        guard let r else { return "" }
        var body = "<section class=\"card\"><h2>Releases</h2>"
        if let problem = r.mixProblem { body += "<p class=\"error\" role=\"alert\">Wider than the promise: \(e(problem))</p>" }
        body += keyValues([
            ("this console's release", "\(r.version) (commit \(r.commit))"),
            ("schema release", r.schemaVersion.map { "\($0), supports \(r.schemaOldestSupported ?? "?") and later" } ?? "none recorded"),
        ])
        body += "<table><thead><tr><th>release</th><th>commit</th><th>role</th><th>host</th><th>pid</th><th>last beat</th></tr></thead><tbody>"
        for p in r.running {
            body +=
                "<tr><td>\(e(p.version))</td><td>\(e(p.commit))</td><td>\(e(p.role))</td><td>\(e(p.host))</td><td>\(p.pid)</td>"
                + "<td>\(e(ConsoleHTML.duration(p.heartbeatAgeSeconds))) ago</td></tr>"
        }
        return body + "</tbody></table></section>"
    }

    static func overview(_ o: ConsoleReads.Overview, features: Features, nav: ConsoleHTML.Nav, doctor: DoctorReport? = nil) -> String {
        let c = ConsoleHTML.count
        var body = "<section class=\"stats\">"
        body += ConsoleHTML.stat("Pending", c(o.backlog.pending), note: "waiting to be applied", tone: o.backlog.pending > 0 ? "info" : "")
        body += ConsoleHTML.stat("Failed", c(o.backlog.failed), note: "will retry", tone: o.backlog.failed > 0 ? "warn" : "")
        body += ConsoleHTML.stat("Dead", c(o.backlog.dead), note: "replay from Failures", tone: o.backlog.dead > 0 ? "bad" : "")
        body += ConsoleHTML.stat(
            "Oldest pending", o.backlog.pending + o.backlog.failed > 0 ? ConsoleHTML.duration(o.backlog.oldestPendingAgeSeconds) : "–",
            note: "age of the oldest waiting event")
        let keyAge = o.keySets.compactMap { $0.double("age") }.min()
        body += ConsoleHTML.stat(
            "Apple key set", keyAge.map(ConsoleHTML.duration) ?? "none",
            note: o.keySets.first?["fetched"].map { "fetched \($0) UTC" } ?? "never fetched",
            tone: keyAge == nil ? "bad" : "")
        body += durabilityStat(o.durability)
        body += "</section>" + doctorCard(doctor) + releasesCard(o.releases)

        body += "<section class=\"charts\">"
        for chart in o.minuteCharts { body += chart.svg() }
        body += "</section><section class=\"charts\">"
        for chart in o.hourCharts { body += chart.svg() }
        body += "</section>"
        body +=
            "<p class=\"muted small\">Hourly charts count events whose outcome is final"
            + (o.hoursCurrentTo.map { ", up to those received at " + e(utc($0)) + " UTC" } ?? "; none counted yet") + ".</p>"

        body += "<section class=\"grid4\"><div class=\"card\"><h2>In-app deletion</h2>"
        let r = o.revocations
        body += keyValues([
            ("state", features.inAppDeletion ? "on" : "off"),
            ("revocations waiting", c((r["pending"] ?? 0) + (r["running"] ?? 0) + (r["failed"] ?? 0))),
            ("failing (will retry)", c(r["failed"] ?? 0)), ("dead", c(r["dead"] ?? 0)), ("done", c(r["done"] ?? 0)),
            ("unconfirmed (Apple said 200, the token still works)", c(o.revocationsUnconfirmed)),
            ("deleted users without a token", c(r["no_token"] ?? 0)),
        ])
        body += "</div><div class=\"card\"><h2>Forwarding</h2>"
        let f = o.forwards
        body += keyValues([
            ("state", features.forwarding ? "on" : "off"), ("waiting", c((f?.pending ?? 0) + (f?.failed ?? 0))),
            ("in flight", c(f?.inFlight ?? 0)), ("failing (will retry)", c(f?.failed ?? 0)), ("dead", c(f?.dead ?? 0)),
            ("oldest waiting", (f?.pending ?? 0) + (f?.failed ?? 0) > 0 ? ConsoleHTML.duration(f?.oldestWaitingAgeSeconds ?? 0) : "–"),
        ])
        body += "</div><div class=\"card\"><h2>Reconciliation</h2>"
        body += keyValues([
            ("tokens validated", c(o.reconcile?.validated ?? 0)), ("grants found gone", c(o.reconcile?.gone ?? 0)),
            ("failing (will retry)", c(o.reconcile?.failing ?? 0)),
        ])
        body += "</div><div class=\"card\"><h2>Transfer</h2>"
        body += keyValues(transferValues(o.transfers, now: o.now))
        body += "</div>" + providerCard(o.providerCalls, configured: features.providers) + "</section>"
        return page("Overview", nav: nav, live: true, body: body)
    }

    /// The hosted providers' calls, per provider configured or with calls: waiting (in flight
    /// among them), dead (replayed from Failures), the oldest waiting one's age.
    static func providerCard(_ backlog: [ProviderCallStatements.Backlog], configured: [CallTarget]) -> String {
        let c = ConsoleHTML.count
        let shown = backlog.filter { b in
            configured.contains(b.target) || b.pending + b.dead + b.doneLastHour + b.userUnknownLastHour > 0
        }
        var body = "<div class=\"card\" id=\"provider-calls\"><h2>Provider calls</h2>"
        body += ConsoleHTML.table(
            ["provider", "waiting", "in flight", "dead", "oldest waiting", "done (1 h)"],
            shown.map { b in
                [
                    e(b.target.rawValue) + (configured.contains(b.target) ? "" : " <span class=\"muted\">(not configured)</span>"),
                    c(b.pending), c(b.inFlight), b.dead > 0 ? "<span class=\"badge bad\">\(c(b.dead))</span>" : c(b.dead),
                    b.pending > 0 ? e(ConsoleHTML.duration(b.oldestWaitingAgeSeconds)) : "–", c(b.doneLastHour + b.userUnknownLastHour),
                ]
            }, empty: "No hosted provider (SIWA_APPLY_TO), no email service (SIWA_EMAIL_SENDERS) and no calls.")
        return body + "</div>"
    }

    static func transferValues(_ t: TransferStatements.Counts?, now: Double) -> [(String, String)] {
        [
            ("exported", ConsoleHTML.count(t?.exported ?? 0)), ("imported and mapped", ConsoleHTML.count(t?.mapped ?? 0)),
            ("imported, not mapped yet", ConsoleHTML.count(t?.unmapped ?? 0)),
            ("days left of Apple's 60", t?.importStarted.map { String(TransferWindow.daysLeft(start: $0, now: now)) } ?? "–"),
        ]
    }

    /// A definition list of (label, value) pairs, both escaped here.
    static func keyValues(_ pairs: [(String, String)]) -> String {
        "<dl>" + pairs.map { "<dt>\(e($0.0))</dt><dd>\(e($0.1))</dd>" }.joined() + "</dl>"
    }

    static func utc(_ t: Double) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: Date(timeIntervalSince1970: t))
    }

    // MARK: Events

    static let eventTypes = ["email-disabled", "email-enabled", "consent-revoked", "account-delete", "sign-in", "deletion-requested"]
    static let eventStatuses = ["pending", "failed", "dead", "done", "ignored"]

    static func select(_ name: String, _ label: String, _ options: [String], _ selected: String?) -> String {
        var out = "<label>\(e(label)) <select name=\"\(e(name))\"><option value=\"\">any</option>"
        for o in options { out += "<option\(o == selected ? " selected" : "")>\(e(o))</option>" }
        return out + "</select></label>"
    }

    static func events(_ p: ConsoleReads.EventPage, filter: ConsoleReads.EventFilter, nav: ConsoleHTML.Nav) -> String {
        let fromText = filter.from.map(utc) ?? "", toText = filter.to.map(utc) ?? ""
        var body = "<form method=\"get\" action=\"/console/events\" class=\"filters card\">"
        body += select("type", "Type", eventTypes, filter.type) + select("status", "Status", eventStatuses, filter.status)
        body += "<label>App <input name=\"app\" value=\"\(e(filter.aud ?? ""))\" placeholder=\"bundle id\"></label>"
        body += "<label>Sub or hash <input name=\"q\" value=\"\(e(filter.subject ?? ""))\" placeholder=\"000739.… or 16 hex\"></label>"
        body += "<label>From (UTC) <input name=\"from\" value=\"\(e(fromText))\" placeholder=\"2026-11-24 13:00\"></label>"
        body += "<label>To (UTC) <input name=\"to\" value=\"\(e(toText))\" placeholder=\"2026-11-24 14:00\"></label>"
        body += "<button type=\"submit\" class=\"primary\">Filter</button> <a href=\"/console/events\">Clear</a></form>"
        if p.unknownSubject {
            body += "<p class=\"empty\">No user with that sub or hash.</p>"
            return page("Events", nav: nav, body: body)
        }
        body += ConsoleHTML.table(
            ["id", "type", "status", "outcome", "app", "user (hash)", "event time (UTC)", "received (UTC)", "attempts"],
            p.rows.map { r in
                [
                    "<a href=\"/console/events/\(e(r["id"] ?? ""))\">\(e(r["id"] ?? ""))</a>", e(r["type"] ?? ""),
                    ConsoleHTML.badge(r["status"] ?? ""),
                    r["outcome"].map(ConsoleHTML.badge) ?? "", e(r["aud"] ?? ""),
                    "<a class=\"mono\" href=\"\(ConsoleHTML.link("/console/users", [("q", r["sub_hash"])]))\">\(e(r["sub_hash"] ?? ""))</a>",
                    e(r["event_time"] ?? ""), e(r["received"] ?? ""), e(r["attempts"] ?? ""),
                ]
            }, empty: "No events match (in this stretch of the log).")
        if let next = p.next {
            let link = ConsoleHTML.link(
                "/console/events",
                [
                    ("type", filter.type), ("status", filter.status), ("app", filter.aud), ("q", filter.subject),
                    ("from", filter.from.map(utc)), ("before", String(next)),
                ])
            body += "<p class=\"pager\"><a class=\"button\" href=\"\(link)\">Older →</a></p>"
        }
        return page("Events", nav: nav, body: body)
    }

    static func event(_ r: ConsoleRow, nav: ConsoleHTML.Nav) -> String {
        let claims = EmailMask.maskAll(in: r["claims"] ?? "")
        var body = "<section class=\"grid2\"><div class=\"card\"><h2>Outcome</h2>"
        body += keyValues([
            ("type", r["type"] ?? ""), ("status", r["status"] ?? ""), ("outcome", r["outcome"] ?? "–"), ("attempts", r["attempts"] ?? "0"),
            ("next attempt (UTC)", r["status"] == "done" ? "–" : (r["next_attempt"] ?? "–")), ("processed (UTC)", r["processed"] ?? "–"),
        ])
        if let error = r["last_error"] { body += "<h3>Last error</h3><pre class=\"error\">\(e(error))</pre>" }
        body += "</div><div class=\"card\"><h2>Notification</h2>"
        body += keyValues([
            ("jti", r["jti"] ?? ""), ("app", r["aud"] ?? ""), ("user (hash)", SubjectHash.of(r["sub"] ?? "")),
            ("event time (UTC)", r["event_time"] ?? ""), ("received (UTC)", r["received"] ?? ""),
            ("email", r["email"].map(EmailMask.mask) ?? "–"),
        ])
        body += "<p><a href=\"\(ConsoleHTML.link("/console/users", [("q", SubjectHash.of(r["sub"] ?? ""))]))\">This user's page →</a></p>"
        body += "</div></section><section class=\"grid2\">"
        if let inner = r["inner"] {
            body +=
                "<div class=\"card\"><h2>The <code>events</code> claim, decoded</h2><pre class=\"claims\">\(e(EmailMask.maskAll(in: inner)))</pre></div>"
        }
        body += "<div class=\"card\"><h2>Verified claims</h2><pre class=\"claims\">\(e(claims))</pre></div></section>"
        if r["status"] == "dead" {
            body += ConsoleHTML.form(
                action: "/console/replay", csrf: nav.csrf, fields: [("kind", "events"), ("id", r["id"] ?? "")], button: "Replay this event")
        }
        return page("Event \(r["id"] ?? "")", nav: nav, body: body)
    }

    // MARK: Failures

    struct Failures: Sendable, Equatable {
        var deadLetters: [ConsoleRow]
        var deadLetterTypes: [ConsoleRow]
        var deadRevocations: [ConsoleRow]
        var failingRevocations: [ConsoleRow]
        var deadForwards: [ConsoleRow]
        var deadProviderCalls: [ConsoleRow] = []
    }

    /// What each kind of replay puts back, one and many.
    static let replayKinds: [String: (one: String, many: String)] = [
        "events": ("event", "events"), "revocations": ("revocation", "revocations"), "forwards": ("forward", "forwards"),
        "provider-calls": ("provider call", "provider calls"),
    ]

    /// Rows counted by the value of `column`, as `type` and `n` (the "replay all of a type" forms).
    static func counts(of rows: [ConsoleRow], by column: String) -> [ConsoleRow] {
        Dictionary(grouping: rows, by: { $0[column] ?? "" }).map {
            ConsoleRow(values: ["type": $0.key, "n": String($0.value.count)])
        }.sorted { ($0["type"] ?? "") < ($1["type"] ?? "") }
    }

    /// A checkbox list with "replay selected", "replay all of a type" and "replay all" forms.
    private static func replayBlock(
        kind: String, csrf: String, header: [String], rows: [ConsoleRow], id: String, cells: (ConsoleRow) -> [String], types: [ConsoleRow]?,
        empty: String
    ) -> String {
        guard !rows.isEmpty else { return "<p class=\"empty\">\(e(empty))</p>" }
        let formID = "replay-\(kind)"
        let noun = replayKinds[kind]?.many ?? kind
        var out = "<form method=\"post\" action=\"/console/replay\" id=\"\(formID)\" class=\"replay\">"
        out += "<input type=\"hidden\" name=\"csrf\" value=\"\(e(csrf))\"><input type=\"hidden\" name=\"kind\" value=\"\(e(kind))\">"
        out += ConsoleHTML.table(
            ["", "replay"] + header,
            rows.map { r in
                let value = e(r[id] ?? "")
                return [
                    "<input type=\"checkbox\" name=\"id\" value=\"\(value)\" aria-label=\"select \(value)\">",
                    "<button type=\"submit\" name=\"one\" value=\"\(value)\" class=\"small\">Replay</button>",
                ] + cells(r)
            })
        out += "<p class=\"actions\"><button type=\"submit\" class=\"primary\" name=\"scope\" value=\"selected\">Replay selected</button></p></form>"
        out += "<div class=\"actions\">"
        for t in types ?? [] {
            out += ConsoleHTML.form(
                action: "/console/replay", csrf: csrf, fields: [("kind", kind), ("scope", "all"), ("type", t["type"] ?? "")],
                button: "Replay all \(t["type"] ?? "") (\(t["n"] ?? "0"))", style: "secondary")
        }
        out += ConsoleHTML.form(
            action: "/console/replay", csrf: csrf, fields: [("kind", kind), ("scope", "all")], button: "Replay all dead \(noun)", style: "secondary",
            confirm: "Replay all dead \(noun)?")
        return out + "</div>"
    }

    static func failures(_ f: Failures, notice: String?, nav: ConsoleHTML.Nav) -> String {
        let userLink: (ConsoleRow) -> String = { r in
            "<a class=\"mono\" href=\"\(ConsoleHTML.link("/console/users", [("q", r["sub_hash"])]))\">\(e(r["sub_hash"] ?? ""))</a>"
        }
        var body = "<section class=\"card\"><h2>Dead letters <span class=\"count\">\(f.deadLetters.count)</span></h2>"
        body += replayBlock(
            kind: "events", csrf: nav.csrf, header: ["id", "type", "user (hash)", "received (UTC)", "attempts", "last error"], rows: f.deadLetters,
            id: "id",
            cells: { r in
                [
                    "<a href=\"/console/events/\(e(r["id"] ?? ""))\">\(e(r["id"] ?? ""))</a>", e(r["type"] ?? ""), userLink(r),
                    e(r["received"] ?? ""),
                    e(r["attempts"] ?? ""), "<span class=\"clip\">\(e(r["last_error"] ?? ""))</span>",
                ]
            }, types: f.deadLetterTypes, empty: "No dead letters.")
        body += "</section><section class=\"card\"><h2>Dead revocations <span class=\"count\">\(f.deadRevocations.count)</span></h2>"
        body += replayBlock(
            kind: "revocations", csrf: nav.csrf, header: ["id", "user (hash)", "app", "reason", "attempts", "last error"], rows: f.deadRevocations,
            id: "id",
            cells: { r in
                [
                    e(r["id"] ?? ""), userLink(r), e(r["client_id"] ?? ""), e(r["reason"] ?? ""), e(r["attempts"] ?? ""),
                    "<span class=\"clip\">\(e(r["last_error"] ?? ""))</span>",
                ]
            }, types: nil, empty: "No dead revocations.")
        body += "<h3>Failing, will retry</h3>"
        body += ConsoleHTML.table(
            ["id", "user (hash)", "app", "attempts", "next attempt (UTC)", "last error"],
            f.failingRevocations.map { r in
                [
                    e(r["id"] ?? ""), userLink(r), e(r["client_id"] ?? ""), e(r["attempts"] ?? ""), e(r["next_attempt"] ?? ""),
                    "<span class=\"clip\">\(e(r["last_error"] ?? ""))</span>",
                ]
            }, empty: "None failing.")
        body += "</section><section class=\"card\"><h2>Dead forwards <span class=\"count\">\(f.deadForwards.count)</span></h2>"
        body += replayBlock(
            kind: "forwards", csrf: nav.csrf, header: ["webhook id", "type", "user (hash)", "app", "attempts", "last error"], rows: f.deadForwards,
            id: "id",
            cells: { r in
                [
                    "<span class=\"mono\">\(e(r["id"] ?? ""))</span>", e(r["type"] ?? ""), userLink(r), e(r["aud"] ?? ""), e(r["attempts"] ?? ""),
                    "<span class=\"clip\">\(e(r["last_error"] ?? ""))</span>",
                ]
            }, types: counts(of: f.deadForwards, by: "type"), empty: "No dead forwards.")
        body += "</section><section class=\"card\"><h2>Dead provider calls <span class=\"count\">\(f.deadProviderCalls.count)</span></h2>"
        body += replayBlock(
            kind: "provider-calls", csrf: nav.csrf,
            header: ["id", "provider", "effect", "event", "user (hash)", "attempts", "HTTP status", "last error", "updated (UTC)"],
            rows: f.deadProviderCalls, id: "id",
            cells: { r in
                [
                    e(r["id"] ?? ""), e(r["target"] ?? ""), e(r["effect"] ?? ""), e(r["event_type"] ?? ""), userLink(r), e(r["attempts"] ?? ""),
                    e(r["last_status"] ?? "–"), "<span class=\"clip\">\(e(r["last_reason"] ?? ""))</span>", e(r["updated"] ?? ""),
                ]
            }, types: counts(of: f.deadProviderCalls, by: "target"), empty: "No dead provider calls.")
        body += "</section>"
        return page("Failures", nav: nav, notice: notice, body: body)
    }

    // MARK: Users

    struct User: Sendable, Equatable {
        var sub: String
        var account: ConsoleRow?
        var apps: [ConsoleRow]
        var sessions: [ConsoleRow]
        var events: [ConsoleRow]
        var revocations: [ConsoleRow]
        var forwards: [ConsoleRow]
        /// The user's calls to the hosted providers (`SIWA_APPLY_TO`).
        var providerCalls: [ConsoleRow] = []
        /// `siwa.user_report`'s JSON (what `user-report` prints: deletion evidence, emails masked).
        var report: String? = nil
    }

    static func userSearch(nav: ConsoleHTML.Nav, query: String?, notFound: Bool) -> String {
        var body = searchForm(query)
        if notFound { body += "<p class=\"empty\">No user with that sub or hash.</p>" }
        return page("Users", nav: nav, body: body)
    }

    private static func searchForm(_ query: String?) -> String {
        "<form method=\"get\" action=\"/console/users\" class=\"filters card\"><label>Sub or its hash <input name=\"q\" value=\"\(e(query ?? ""))\" "
            + "placeholder=\"000739.… or 16 hex digits\" size=\"48\"></label><button type=\"submit\" class=\"primary\">Find</button></form>"
    }

    static func user(_ u: User, reveal: Bool, error: String?, notice: String?, features: Features, nav: ConsoleHTML.Nav) -> String {
        let email: (String?) -> String = { value in e(value.map { reveal ? $0 : EmailMask.mask($0) } ?? "–") }
        let hash = SubjectHash.of(u.sub)
        var body = searchForm(hash)
        body += "<section class=\"grid2\"><div class=\"card\"><h2>Account</h2>"
        if let a = u.account {
            body += "<dl><dt>sub</dt><dd class=\"mono\">\(e(a["apple_sub"] ?? ""))</dd><dt>hash</dt><dd class=\"mono\">\(e(hash))</dd>"
            body += "<dt>status</dt><dd>\(ConsoleHTML.badge(a["status"] ?? ""))</dd><dt>email</dt><dd>\(email(a["email"]))</dd>"
            body += "<dt>email forwarding</dt><dd>\(e(a["email_forwarding"].map { $0 == "t" ? "on" : "off" } ?? "–"))</dd>"
            body += "<dt>last event (UTC)</dt><dd>\(e(a["last_event_time"] ?? "–"))</dd><dt>deleted (UTC)</dt><dd>\(e(a["deleted"] ?? "–"))</dd></dl>"
        } else {
            body += "<p class=\"empty\">No account yet: its events are still waiting to be applied.</p>"
        }
        body += "</div><div class=\"card\"><h2>Actions</h2>"
        if !reveal, u.account?["email"] != nil || u.apps.contains(where: { $0["email"] != nil }) {
            body += "<p>Emails are masked. Revealing them is recorded in the audit trail.</p>"
            body += ConsoleHTML.form(
                action: "/console/users/reveal", csrf: nav.csrf, fields: [("sub", u.sub)], button: "Reveal emails", style: "secondary")
        }
        if u.account?["status"] != "deleted" {
            body += "<form method=\"post\" action=\"/console/users/delete\" class=\"danger-zone\">"
            body += "<input type=\"hidden\" name=\"csrf\" value=\"\(e(nav.csrf))\"><input type=\"hidden\" name=\"sub\" value=\"\(e(u.sub))\">"
            body += "<h3>Delete this user</h3><p>In-app deletion: sessions revoked, accounts deleted, emails erased"
            body += features.inAppDeletion ? ", Apple tokens revoked." : " (Apple's REST API is off here: no token is revoked at Apple)."
            body += "</p><label for=\"confirm\">Type the user's sub to confirm</label>"
            body += "<input id=\"confirm\" name=\"confirm\" autocomplete=\"off\" spellcheck=\"false\" required>"
            body += "<button type=\"submit\" class=\"danger\">Delete this user</button></form>"
        }
        body += "</div></section>"

        body += "<section class=\"card\"><h2>Apps</h2>"
        body += ConsoleHTML.table(
            ["app", "status", "email", "forwarding", "signed in (UTC)", "updated (UTC)"],
            u.apps.map { r in
                [
                    e(r["aud"] ?? ""), ConsoleHTML.badge(r["status"] ?? ""), email(r["email"]),
                    e(r["email_forwarding"].map { $0 == "t" ? "on" : "off" } ?? "–"), e(r["signed_in"] ?? "–"), e(r["updated"] ?? ""),
                ]
            }, empty: "No app account.")
        body += "</section><section class=\"card\"><h2>Sessions</h2>"
        body += ConsoleHTML.table(
            ["id", "app", "state", "created (UTC)", "expires (UTC)", "revoked (UTC)", "why"],
            u.sessions.map { r in
                [
                    e(r["id"] ?? ""), e(r["aud"] ?? "any"),
                    ConsoleHTML.badge(r["live"] == "t" ? "live" : (r["revoked"] != nil ? "revoked" : "expired")),
                    e(r["created"] ?? ""), e(r["expires"] ?? "–"), e(r["revoked"] ?? "–"), e(r["revoked_reason"] ?? ""),
                ]
            }, empty: "No sessions recorded.")
        body += "</section><section class=\"card\"><h2>Timeline</h2>"
        body += ConsoleHTML.table(
            ["event time (UTC)", "type", "app", "status", "outcome", "source", "email", "id"],
            u.events.map { r in
                [
                    e(r["event_time"] ?? ""), e(r["type"] ?? ""), e(r["aud"] ?? ""), ConsoleHTML.badge(r["status"] ?? ""),
                    r["outcome"].map(ConsoleHTML.badge) ?? "", e(r["source"] ?? "apple"), email(r["email"]),
                    "<a href=\"/console/events/\(e(r["id"] ?? ""))\">\(e(r["id"] ?? ""))</a>",
                ]
            }, empty: "No events.")
        body += "</section><section class=\"grid2\"><div class=\"card\"><h2>Revocations at Apple</h2>"
        body += ConsoleHTML.table(
            ["app", "reason", "status", "proof", "attempts", "created (UTC)", "finished (UTC)"],
            u.revocations.map { r in
                [
                    e(r["client_id"] ?? ""), e(r["reason"] ?? ""), ConsoleHTML.badge(r["status"] ?? ""),
                    r["confirmation"].map { ConsoleHTML.badge($0) } ?? "–", e(r["attempts"] ?? ""),
                    e(r["created"] ?? ""),
                    e(r["finished"] ?? "–"),
                ]
            }, empty: "No revocations.")
        body += "</div><div class=\"card\"><h2>Forwards</h2>"
        body += ConsoleHTML.table(
            ["type", "app", "source", "status", "attempts", "delivered (UTC)"],
            u.forwards.map { r in
                [
                    e(r["type"] ?? ""), e(r["aud"] ?? ""), e(r["source"] ?? ""), ConsoleHTML.badge(r["status"] ?? ""), e(r["attempts"] ?? ""),
                    e(r["delivered"] ?? "–"),
                ]
            }, empty: "No forwards.")
        if !u.providerCalls.isEmpty {
            body += "</div><div class=\"card\"><h2>Provider calls</h2>"
            body += ConsoleHTML.table(
                ["provider", "effect", "event", "state", "attempts", "HTTP status", "last error", "done", "updated (UTC)"],
                u.providerCalls.map { r in
                    [
                        e(r["target"] ?? ""), e(r["effect"] ?? ""), e(r["event_type"] ?? ""), ConsoleHTML.badge(r["state"] ?? ""),
                        e(r["attempts"] ?? ""), e(r["last_status"] ?? "–"), e(r["last_reason"] ?? "–"), e(r["actions"] ?? "–"),
                        e(r["updated"] ?? ""),
                    ]
                }, empty: "No provider calls.")
        }
        body += "</div></section>"
        if let report = u.report {
            body +=
                "<section class=\"card\"><h2>Evidence for a reviewer</h2><details><summary>The user's timeline as "
                + "<code>siwa-notify user-report</code> prints it (deletion requested, applied, each call to Apple, "
                + "confirmed; each call to a hosted provider; emails masked, no token or credential)</summary><pre class=\"report\">\(e(report))</pre></details></section>"
        }
        return page("User \(hash)", nav: nav, notice: notice, error: error, body: body)
    }

    // MARK: Reconciliation and transfer

    struct Sync: Sendable {
        var now: Double
        var reconcile: (validated: Int, gone: Int, failing: Int)?
        var tokensDue: Int
        var nextSlot: String?
        var transfers: TransferStatements.Counts?
        var revocations: [String: Int]
        /// Stored tokens set aside at start (they do not open with their key), oldest first.
        var quarantined: [(sub: String, clientID: String, keyID: String, at: String)] = []
    }

    static func sync(_ s: Sync, features: Features, nav: ConsoleHTML.Nav) -> String {
        let c = ConsoleHTML.count
        var body = "<section class=\"grid2\"><div class=\"card\"><h2>Reconciliation</h2>"
        body +=
            "<p class=\"muted\">Every stored refresh token is validated at Apple once per <code>SIWA_RECONCILE_EVERY</code>; "
            + "a grant found gone is applied as a consent-revoked (source reconcile).</p>"
        body += keyValues([
            ("state", features.inAppDeletion ? "on" : "off (needs in-app deletion)"),
            ("tokens validated at least once", c(s.reconcile?.validated ?? 0)),
            ("due now", s.tokensDue > ConsoleStatements.tokensDueShown ? "more than " + c(ConsoleStatements.tokensDueShown) : c(s.tokensDue)),
            ("grants found gone", c(s.reconcile?.gone ?? 0)), ("failing (will retry)", c(s.reconcile?.failing ?? 0)),
            ("next call slot (UTC)", s.nextSlot ?? "–"),
        ])
        body += "</div><div class=\"card\"><h2>App transfer</h2>"
        body += "<p class=\"muted\">Apple keeps transfer identifiers for 60 days after a transfer (TN3159).</p>"
        body += keyValues(transferValues(s.transfers, now: s.now))
        body += "</div></section><section class=\"card\"><h2>Revocations at Apple by status</h2>"
        body += keyValues(s.revocations.sorted { $0.key < $1.key }.map { ($0.key, c($0.value)) })
        if s.revocations.isEmpty { body += "<p class=\"empty\">No revocations.</p>" }
        body += "</section>"
        if !s.quarantined.isEmpty {
            body += "<section class=\"card\"><h2>Stored tokens set aside</h2>"
            body +=
                "<p class=\"muted\">They did not open with their key at a start (damaged or written by hand): never sent to Apple. "
                + "The user's next sign-in replaces the token; <code>siwa-notify doctor</code> lists them too.</p>"
            body += ConsoleHTML.table(
                ["user", "client id", "key", "set aside (UTC)"],
                s.quarantined.map { q in
                    [
                        "<a class=\"mono\" href=\"/console/users?q=\(SubjectHash.of(q.sub))\">\(SubjectHash.of(q.sub))</a>", e(q.clientID),
                        "<span class=\"mono\">\(e(q.keyID))</span>", e(q.at),
                    ]
                }, empty: "")
            body += "</section>"
        }
        return page("Reconciliation & transfer", nav: nav, body: body)
    }

    // MARK: Audit trail

    static func audit(_ rows: [ConsoleRow], nav: ConsoleHTML.Nav) -> String {
        var body = "<p class=\"muted\">Every console action, newest first (<code>siwa.operator_actions</code>).</p>"
        body += ConsoleHTML.table(
            ["at (UTC)", "operator", "action", "target", "token", "client"],
            rows.prefix(100).map { r in
                [
                    e(r["at"] ?? ""), e(r["operator"] ?? "–"), ConsoleHTML.badge(r["action"] ?? ""),
                    "<span class=\"mono\">\(e(r["target"] ?? "–"))</span>",
                    "<span class=\"mono\">\(e(r["token_fingerprint"] ?? "–"))</span>", e(r["client_address"] ?? ""),
                ]
            }, empty: "No actions yet.")
        if rows.count > 100, let last = rows[99].int64("id") {
            body += "<p class=\"pager\"><a class=\"button\" href=\"/console/audit?before=\(last)\">Older →</a></p>"
        }
        return page("Audit trail", nav: nav, body: body)
    }
}
