import Foundation
import SiwaBuildInfo
import SiwaCore

/// HTML building blocks of the console: escaping, the page frame, tables, forms. Every text that
/// comes from the database or the request goes through `escape`.
enum ConsoleHTML {
    /// Text for an element's content or an attribute value (quoted with `"`).
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for c in text.unicodeScalars {
            if let entity = entities[c] { out += entity } else { out.unicodeScalars.append(c) }
        }
        return out
    }

    private static let entities: [Unicode.Scalar: String] = ["&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"]

    /// A link with its query (`?a=b&c=d`, empty values left out), escaped for an attribute.
    static func link(_ path: String, _ query: [(String, String?)]) -> String {
        let parts = query.compactMap { name, value in value.flatMap { $0.isEmpty ? nil : (name, $0) } }
        return escape(parts.isEmpty ? path : path + "?" + FormURLEncoding.encode(parts))
    }

    struct Nav: Equatable {
        var csrf: String
        /// The signed-in operator's name.
        var operatorName: String
        var current: String
    }

    static let sections: [(path: String, title: String)] = [
        ("/console", "Overview"), ("/console/events", "Events"), ("/console/failures", "Failures"),
        ("/console/users", "Users"), ("/console/sync", "Reconciliation & transfer"), ("/console/audit", "Audit trail"),
    ]

    /// The whole document: head (our own stylesheet and script only), the navigation when
    /// signed in, the content.
    static func page(title: String, nav: Nav?, notice: String? = nil, error: String? = nil, live: Bool = false, body: String) -> String {
        var out = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(escape(title)) · siwa-notify console</title>
            <link rel="stylesheet" href="/console/assets/console.css">
            <link rel="icon" href="/console/assets/icon.svg" type="image/svg+xml">
            <script src="/console/assets/console.js" defer></script>
            </head><body\(live ? " class=\"live\"" : "")>
            <header class="top"><a class="brand" href="/console"><span class="logo"></span>siwa-notify</a>
            """
        if let nav {
            out += "<nav>"
            for s in sections {
                let active = s.path == nav.current
                out += "<a href=\"\(s.path)\"\(active ? " class=\"active\" aria-current=\"page\"" : "")>\(escape(s.title))</a>"
            }
            out += "</nav><div class=\"who\"><span title=\"signed in as\">\(escape(nav.operatorName))</span>"
            out += form(action: "/console/sign-out", csrf: nav.csrf, fields: [], button: "Sign out", style: "link")
            out += "</div>"
        }
        out += "</header><main>"
        out += "<h1>\(escape(title))</h1>"
        if let notice { out += "<p class=\"notice\" role=\"status\">\(escape(notice))</p>" }
        if let error { out += "<p class=\"error\" role=\"alert\">\(escape(error))</p>" }
        out += body
        out += "</main><footer class=\"foot muted small\">siwa-notify \(escape(BuildInfo.version)) · commit \(escape(BuildInfo.commit))</footer>"
        out += "</body></html>\n"
        return out
    }

    /// A POST form with the session's CSRF token, hidden fields and one button.
    static func form(
        action: String, csrf: String, fields: [(String, String)], button: String, style: String = "primary", confirm: String? = nil
    ) -> String {
        var out = "<form method=\"post\" action=\"\(escape(action))\" class=\"inline\""
        if let confirm { out += " data-confirm=\"\(escape(confirm))\"" }
        out += "><input type=\"hidden\" name=\"csrf\" value=\"\(escape(csrf))\">"
        for (name, value) in fields {
            out += "<input type=\"hidden\" name=\"\(escape(name))\" value=\"\(escape(value))\">"
        }
        out += "<button type=\"submit\" class=\"\(escape(style))\">\(escape(button))</button></form>"
        return out
    }

    /// A table: header cells and rows of already-rendered (escaped) cells.
    static func table(_ header: [String], _ rows: [[String]], empty: String = "Nothing here.", classes: String = "") -> String {
        guard !rows.isEmpty else { return "<p class=\"empty\">\(escape(empty))</p>" }
        var out = "<div class=\"scroll\"><table class=\"\(escape(classes))\"><thead><tr>"
        for h in header { out += "<th>\(escape(h))</th>" }
        out += "</tr></thead><tbody>"
        for row in rows {
            out += "<tr>" + row.map { "<td>\($0)</td>" }.joined() + "</tr>"
        }
        return out + "</tbody></table></div>"
    }

    /// A figure card: label, value, optional note (all escaped here).
    static func stat(_ label: String, _ value: String, note: String? = nil, tone: String = "") -> String {
        var out = "<div class=\"stat \(escape(tone))\"><div class=\"label\">\(escape(label))</div><div class=\"value\">\(escape(value))</div>"
        if let note { out += "<div class=\"note\">\(escape(note))</div>" }
        return out + "</div>"
    }

    /// A status word as a colored badge.
    static func badge(_ status: String) -> String {
        let tone: String
        switch status {
        case "done", "delivered", "active", "applied", "confirmed", "live": tone = "ok"
        case "pending", "running", "waiting": tone = "info"
        case "failed", "consent_revoked", "stale", "revoked", "unconfirmed": tone = "warn"
        case "dead", "deleted", "final_deleted", "no_token": tone = "bad"
        default: tone = "muted"
        }
        return "<span class=\"badge \(tone)\">\(escape(status))</span>"
    }

    /// Seconds as the largest sensible unit (`42 s`, `7 min`, `3 h`, `2 d`).
    static func duration(_ seconds: Double) -> String {
        let s = max(0, Int(seconds.rounded()))
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) min" }
        if s < 172_800 { return "\(s / 3600) h" }
        return "\(s / 86400) d"
    }

    /// A whole number with thin-space thousands separators.
    static func count(_ n: Int) -> String {
        let digits = String(abs(n))
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out += "\u{202F}" }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }
}
