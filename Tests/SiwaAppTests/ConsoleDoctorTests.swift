import Foundation
import SiwaCore
import Testing

@testable import SiwaApp

/// `doctor`'s findings on the console's overview: examined in the background (a page never
/// waits), shown above INFO with their fix, escaped.
@Suite("Console: doctor's findings")
struct ConsoleDoctorTests {
    @Test("the card: a placeholder before the first report, the findings above INFO with their fix, or nothing found")
    func card() {
        #expect(ConsolePages.doctorCard(nil).contains("reload in a moment"))
        let report = DoctorReport(
            process: "serve",
            findings: [
                DoctorFinding("public-schema-writable", .high, "every <login>", fix: "REVOKE CREATE ON SCHEMA public FROM PUBLIC;\nsecond"),
                DoctorFinding("commit-durability", .info, "no standby", fix: "add one"),
            ])
        let card = ConsolePages.doctorCard(report)
        #expect(card.contains("<span class=\"badge bad\">HIGH</span>") && card.contains("<code>public-schema-writable</code>"))
        #expect(card.contains("every &lt;login&gt;") && card.contains("FROM PUBLIC;<br>second"))
        #expect(!card.contains("commit-durability"))
        #expect(ConsolePages.doctorCard(DoctorReport(process: "serve", findings: [report.findings[1]])).contains("Nothing found"))
    }

    @Test("the watch answers at once and examines in the background; the report then stays until it is due again")
    func watch() {
        var config = ServerConfiguration()
        config.jwksURL = "http://127.0.0.1:1/auth/keys"
        let watch = DoctorWatch(config, process: .serve)
        #expect(watch.latest() == nil)
        var report: DoctorReport?
        let deadline = Date().addingTimeInterval(20)
        while report == nil && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
            report = watch.latest()
        }
        let codes = report?.findings.map(\.code) ?? []
        #expect(codes.contains("database-embedded") && codes.contains("jwks-unreachable"), "\(String(describing: report))")
        #expect(watch.latest() == report)
    }
}
