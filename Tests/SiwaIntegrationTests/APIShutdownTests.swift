import Foundation
import SiwaApp
import SiwaDevTools
import Synchronization
import Testing

/// SIGTERM (`Application.shutdown`) while a code exchange waits on Apple: the API's calls in
/// flight are drained before the admin listener and the admin pool close.
@Suite(
    "Shutdown drains API calls", .serialized,
    .needsDatabase)
struct APIShutdownTests {
    @Test("shutdown during a slow code exchange (Apple answers after 3 s): the caller gets its 200 within the shutdown budget, the token is stored")
    func shutdownDrainsAnExchange() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let sub = "000739.shutdown.1"
        let code = "c.slow." + NotificationSigner.newJTI()
        harness.fake.addCode(code, user: .init(sub: sub, email: "s1@privaterelay.appleid.com", isPrivateEmail: true))
        harness.fake.answerToken(.normal, first: [.delay(3)])

        let reply = Mutex<DeletionHarness.Reply?>(nil)
        let failure = Mutex<String?>(nil)
        Thread.detachNewThread {
            do {
                let r = try harness.exchange(code: code)
                reply.withLock { $0 = r }
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
        }
        // Apple has the call (and holds its answer): now the process is told to stop.
        #expect(harness.eventually(10) { harness.fake.calls(to: "/auth/token").count == 1 })
        let began = Date()
        let took = Mutex<Double?>(nil)
        Thread.detachNewThread {
            harness.app.shutdown()
            took.withLock { $0 = Date().timeIntervalSince(began) }
        }
        // Once the API drains (the services stopped before it: the public listener), a new call
        // is refused at once and redeems no code at Apple.
        #expect(
            harness.eventually(10) {
                harness.logs.lines.contains { $0.contains("service stopped") && $0.contains("public listener") }
            })
        let late = try harness.exchange(code: "c.late")
        #expect(late.status == 503 && late.error == "busy", "\(late.status) \(late.body)")
        #expect(harness.fake.calls(to: "/auth/token").count == 1)
        #expect(harness.eventually(harness.app.configuration.shutdownTimeout.inSeconds) { took.withLock { $0 } != nil })

        #expect(harness.eventually(5) { reply.withLock { $0 } != nil || failure.withLock { $0 } != nil })
        let answer = reply.withLock { $0 }
        #expect(failure.withLock { $0 } == nil, "\(failure.withLock { $0 } ?? "")")
        #expect(answer?.status == 200, "\(answer?.body ?? "no answer")")
        #expect(answer?.json?["sub"]?.stringValue == sub)
        // It waited for the exchange (about 3 s), not for the whole budget (20 s).
        let seconds = took.withLock { $0 } ?? -1
        #expect(seconds >= 1 && seconds < harness.app.configuration.shutdownTimeout.inSeconds, "shutdown took \(seconds) s")
        #expect(try harness.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]) == "1")
    }
}
