import Foundation
import SiwaCore
import SiwaRuntime
import Synchronization
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

    @Test("the watch answers at once and examines in the background")
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
    }

    /// The examinations a watch started, held until the test runs them.
    final class Examinations: Sendable {
        let started = Mutex<[@Sendable () -> Void]>([])
        let done = Atomic<Int>(0)
        var waiting: Int { started.withLock { $0.count } }

        func runNext() {
            let work = started.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            work?()
        }
    }

    @Test("a report stays until it is due on the watch's clock; then one examination, and none while it runs")
    func staysUntilDue() {
        let clock = ManualClock()
        let examinations = Examinations()
        let watch = DoctorWatch(
            maxAge: .seconds(600), clock: clock,
            background: { work in examinations.started.withLock { $0.append(work) } },
            examine: {
                let n = examinations.done.add(1, ordering: .relaxed).newValue
                return DoctorReport(process: "serve", findings: [DoctorFinding("examination-\(n)", .info, "", fix: "")])
            })
        #expect(watch.latest() == nil)
        #expect(watch.latest() == nil)
        #expect(examinations.waiting == 1, "one examination, not one per look while it runs")
        examinations.runNext()
        let first = watch.latest()
        #expect(first?.findings.map(\.code) == ["examination-1"])
        clock.advance(by: .seconds(599))
        #expect(watch.latest() == first)
        #expect(examinations.waiting == 0, "examined again before it was due")
        clock.advance(by: .seconds(1))
        #expect(watch.latest() == first, "the report due again is shown while the next is examined")
        #expect(watch.latest() == first)
        #expect(examinations.waiting == 1, "one examination once due")
        examinations.runNext()
        #expect(watch.latest()?.findings.map(\.code) == ["examination-2"])
        #expect(examinations.waiting == 0)
    }
}
