import Foundation
import SiwaApp
import SiwaDevTools
import SiwaFetch
import Synchronization

/// Sends pre-signed notifications from a few threads, each token once, and records what each got.
final class LoadSender: Sendable {
    struct Outcome: Sendable {
        var status: Int?  // nil: no answer (connection refused/reset/timeout)
        var code: String?
        var time = Date()
    }

    let url: String
    let tokens: [(jti: String, token: String)]
    let outcomes = Mutex<[String: Outcome]>([:])
    private let next = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    init(url: String, tokens: [(jti: String, token: String)]) {
        self.url = url
        self.tokens = tokens
    }

    /// Runs `threads` senders until every token was tried, or `stop()`; blocks until they finish.
    /// `pause` seconds between requests of one sender (to keep a steady, bounded rate).
    func run(threads: Int = 4, pause: Double = 0) {
        let group = DispatchGroup()
        for _ in 0..<threads {
            group.enter()
            Thread.detachNewThread { [self] in
                defer { group.leave() }
                while !stopped.load(ordering: .relaxed) {
                    let i = next.add(1, ordering: .relaxed).oldValue
                    guard i < tokens.count else { return }
                    let (jti, token) = tokens[i]
                    let outcome: Outcome
                    do {
                        let r = try Fetcher.perform(
                            FetchRequest(
                                url: url, method: "POST", headers: ["Content-Type: application/json"],
                                body: Array(NotificationSigner.body(token: token).utf8), connectTimeout: .seconds(2), totalTimeout: .seconds(5),
                                allowedSchemes: [.http]))
                        let text = String(decoding: r.body, as: UTF8.self)
                        let code = text.split(separator: "\"").dropFirst(3).first.map(String.init)
                        outcome = Outcome(status: r.status, code: code)
                    } catch {
                        outcome = Outcome(status: nil, code: nil)
                    }
                    outcomes.withLock { $0[jti] = outcome }
                    if pause > 0 { Thread.sleep(forTimeInterval: pause) }
                }
            }
        }
        group.wait()
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    /// jtis answered 200.
    var accepted: Set<String> {
        Set(outcomes.withLock { $0.filter { $0.value.status == 200 }.map(\.key) })
    }

    /// Tokens never answered 200 (no answer, 503, or never sent).
    var unanswered: [(jti: String, token: String)] {
        let ok = accepted
        return tokens.filter { !ok.contains($0.jti) }
    }
}
