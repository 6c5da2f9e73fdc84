import SiwaCore

extension ConsolePages {
    /// `doctor`'s findings above INFO on the overview (docs/configuration.md, "Commands"); nil: not examined yet.
    static func doctorCard(_ report: DoctorReport?) -> String {
        let e = ConsoleHTML.escape
        var body = "<section class=\"card\"><h2>Doctor</h2>"
        guard let report else {
            return body + "<p class=\"muted\">Examining the deployment (<code>siwa-notify doctor</code>): reload in a moment.</p></section>"
        }
        let tones: [DoctorFinding.Severity: String] = [.high: "bad", .medium: "warn", .low: "info", .info: "muted"]
        let rows = report.findings.filter { $0.severity != .info }.map { f in
            [
                "<span class=\"badge \(tones[f.severity] ?? "muted")\">\(e(f.severity.rawValue))</span>", "<code>\(e(f.code))</code>",
                e(f.message), "<code>\(e(f.fix).split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "<br>"))</code>",
            ]
        }
        body += ConsoleHTML.table(
            ["severity", "finding", "what", "fix"], rows, empty: "Nothing found: no HIGH, MEDIUM or LOW finding (siwa-notify doctor).")
        return body + "</section>"
    }
}
