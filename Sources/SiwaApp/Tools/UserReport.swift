import SiwaPostgres

/// `siwa-notify user-report`: one user's timeline, read from `siwa.user_report` (the function the
/// console's user page reads too).
public enum UserReport {
    /// The report as indented JSON; nil when nothing is stored about `sub`.
    public static func json(sub: String, conninfo: String) throws -> String? {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify user-report")
        guard let report = try connection.row(ReportStatements.userReport, sub), report.known else { return nil }
        return report.json
    }
}
