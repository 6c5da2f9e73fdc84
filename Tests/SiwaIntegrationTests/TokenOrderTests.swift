import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaPostgres
import Testing

/// A deletion revokes what was held, whatever order things land in: random histories of sign-ins
/// to two apps around an in-app deletion, played on a real database by `siwa.store_apple_token`
/// and the worker's own batches (each event applied when the history says), and compared at
/// every store and at the end with a model of what the database should do, driven by the real
/// rules (`AppAccountRules`, `TokenRules`).
@Suite("Tokens whatever the arrival order", .needsDatabase)
struct TokenOrderTests {
    static let a = "com.example.a", b = "com.example.b"

    /// One sign-in: Apple issued a token at `time` (ms) for `aud`; the API stores it at `storedAt`
    /// (a code exchanged or handed over later), the worker applies its event whenever.
    struct SignIn: CustomStringConvertible {
        var id: Int
        var aud: String
        var time: Int64
        var storedAt: Int64
        var description: String { "sign-in#\(id)(\(aud == TokenOrderTests.a ? "A" : "B") at \(time), stored at \(storedAt))" }
    }

    /// What the database should hold: the user's state, the stored tokens by app, the revoked ones.
    struct Model {
        var state = UserState()
        var tokens: [String: (id: Int, signedInAt: Int64)] = [:]
        var revoked: Set<Int> = []
        /// Replaced by a later store of the same app before anything ended them.
        var replaced: Set<Int> = []
        /// The deletion's time once requested (its event stored, applied or not).
        var requested: Int64?

        /// `siwa.store_apple_token`: a sign-in not newer than the deletion of a deleted user is
        /// revoked at once, else stored (replacing that app's token) and recorded as an event.
        /// (Not newer than a deletion already requested, applied or not, it was the deleted account's: revoked too.)
        mutating func store(_ s: SignIn) -> Bool {
            if (state.user?.status == .deleted && s.time <= (state.user?.statusEventTime ?? Int64.min)) || s.time <= (requested ?? Int64.min) {
                revoked.insert(s.id)
                return false
            }
            if let old = tokens[s.aud] { replaced.insert(old.id) }
            tokens[s.aud] = (s.id, s.time)
            return true
        }

        /// The worker: the rules' decision written, then the tokens it ends; the outcome recorded.
        @discardableResult
        mutating func apply(_ event: AppleEvent, audience: String) -> ApplyOutcome {
            let decision = AppAccountRules.apply(event, audience: audience, to: state)
            if decision.user.accountChanged || state.user != nil { state.user = decision.user.newState }
            for (aud, app) in decision.apps { state.apps[aud] = app }
            switch TokenRules.effect(of: event, audience: audience, outcome: decision.user.outcome) {
            case .none: break
            case .revoke(let t, _):
                for (aud, token) in tokens where token.signedInAt <= t {
                    revoked.insert(token.id)
                    tokens[aud] = nil
                }
            case .erase(let t, let clientID):
                for (aud, token) in tokens where token.signedInAt <= t && (clientID == nil || clientID == aud) { tokens[aud] = nil }
            }
            return decision.user.outcome
        }
    }

    enum Step: CustomStringConvertible {
        case store(SignIn), request(at: Int64), applySignIn(SignIn), applyDeletion(at: Int64)
        var description: String {
            switch self {
            case .store(let s): return "store \(s)"
            case .request(let t): return "request deletion at \(t)"
            case .applySignIn(let s): return "apply sign-in#\(s.id)"
            case .applyDeletion: return "apply deletion"
            }
        }
    }

    /// A small seeded generator (a 64-bit LCG, its high bits mixed down): a failing history is
    /// reproduced from its seed.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state ^ (state >> 33)
        }
    }

    /// A random history: sign-ins to two apps before and after an in-app deletion (some exchanged
    /// late, after the deletion was requested), the API's calls in wall-clock order, and the worker's
    /// applications in any order after each event exists: a deletion whose hook failed is retried
    /// after sign-ins that came later, two workers apply a user's events in either order.
    static func history(_ rng: inout Seeded) -> (signIns: [SignIn], deletion: Int64, steps: [Step]) {
        let deletion: Int64 = 1_000
        var signIns: [SignIn] = []
        for id in 0..<Int.random(in: 1...4, using: &rng) {
            let time = Int64.random(in: 0...200, using: &rng) * 10 + Int64(id)  // distinct times
            let late = Bool.random(using: &rng) ? Int64.random(in: 0...600, using: &rng) : 0
            signIns.append(SignIn(id: id, aud: Bool.random(using: &rng) ? a : b, time: time, storedAt: time + late))
        }
        // The API's calls in wall-clock order (a store never precedes its sign-in).
        var calls: [(at: Int64, step: Step)] = signIns.map { ($0.storedAt, .store($0)) }
        calls.append((deletion, .request(at: deletion)))
        calls.sort { $0.at < $1.at }
        // Each call may create an event; the worker applies the events in a random order, each after it was created.
        var steps: [Step] = []
        var waiting: [Step] = []
        for call in calls {
            while !waiting.isEmpty && Bool.random(using: &rng) {
                steps.append(waiting.remove(at: Int.random(in: 0..<waiting.count, using: &rng)))
            }
            steps.append(call.step)
            switch call.step {
            case .store(let s): waiting.append(.applySignIn(s))
            case .request(let t): waiting.append(.applyDeletion(at: t))
            case .applySignIn, .applyDeletion: break
            }
        }
        waiting.shuffle(using: &rng)
        steps += waiting
        return (signIns, deletion, steps)
    }

    /// One database and a worker whose batches the test runs; every event stored is held (due
    /// tomorrow) until its step releases it, so a batch claims exactly that one.
    struct Database {
        let url: String
        let connection: PostgresConnection
        let worker: Worker
        /// Time 0 of the histories: a day ago (a stored sign-in is never in the future).
        let origin = (Int64(Date().timeIntervalSince1970) - 86_400) * 1000

        init() throws {
            url = try TestDatabase.create()
            connection = try PostgresConnection(conninfo: url)
            // Each sign-in's key id is its number, in the recorded ids' shape (8 digits).
            _ = try connection.execute("INSERT INTO siwa.token_keys (key_id) SELECT pg_catalog.lpad(g::text, 8, '0') FROM generate_series(0, 999) g")
            worker = Worker(
                conninfo: url, options: Worker.Options(), logger: Logger(label: "order") { _ in SwiftLogNoOpLogHandler() }, metrics: Metrics())
        }

        func at(_ ms: Int64) -> String { String(origin + ms) }

        /// `siwa.store_apple_token` (the token's key id names the sign-in); true when stored.
        func store(_ s: SignIn, sub: String) throws -> Bool {
            let answer = try connection.execute(
                """
                SELECT siwa.store_apple_token($1, $2, $3, \(RecordedTokenKey.sealed()), NULL, NULL, timestamptz 'epoch' + $4::bigint * interval '1 millisecond')
                """, [sub, s.aud, String(repeating: "0", count: max(0, 8 - String(s.id).count)) + String(s.id), at(s.time)]
            ).scalar
            try hold("sign-in", sub: sub, at: s.time)
            return answer != "deleted"
        }

        /// `siwa.request_deletion`, its event's time set to the history's.
        func requestDeletion(sub: String, at t: Int64) throws {
            try connection.execute("SELECT siwa.request_deletion($1, $2)", [sub, TokenOrderTests.a])
            try connection.execute(
                "UPDATE siwa.events SET event_time = timestamptz 'epoch' + $2::bigint * interval '1 millisecond' WHERE sub = $1 AND type = 'deletion-requested'",
                [sub, at(t)])
            try hold("deletion-requested", sub: sub, at: t)
        }

        private func hold(_ type: String, sub: String, at t: Int64) throws {
            try connection.execute(
                """
                UPDATE siwa.events SET next_attempt_at = now() + interval '1 day'
                WHERE sub = $1 AND type = $2 AND event_time = timestamptz 'epoch' + $3::bigint * interval '1 millisecond'
                """, [sub, type, at(t)])
        }

        /// Releases the event and runs one batch of the worker; its outcome ('' when none was applied).
        func apply(_ type: String, sub: String, at t: Int64) throws -> String {
            let id = try connection.execute(
                """
                UPDATE siwa.events SET next_attempt_at = now() - interval '1 second'
                WHERE sub = $1 AND type = $2 AND event_time = timestamptz 'epoch' + $3::bigint * interval '1 millisecond' RETURNING id
                """, [sub, type, at(t)]
            ).scalar
            let handled = try worker.processBatch(on: connection)
            let status = try connection.execute("SELECT status || ':' || coalesce(outcome, '') FROM siwa.events WHERE id = $1", [id]).scalar
            return handled == 1 ? status ?? "" : ""
        }

        /// The stored tokens by app, and the revoked ones, by sign-in.
        func tokens(sub: String) throws -> (stored: [String: Int], revoked: Set<Int>) {
            var stored: [String: Int] = [:]
            for row in try connection.execute("SELECT client_id, (key_id::int)::text FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]).rows {
                stored[row[0] ?? ""] = Int(row[1] ?? "")
            }
            let revoked = try connection.execute("SELECT (key_id::int)::text FROM siwa.revocations WHERE apple_sub = $1", [sub]).rows
            return (stored, Set(revoked.compactMap { $0[0].flatMap { Int($0) } }))
        }
    }

    @Test(
        "two apps, sign-ins around an in-app deletion, 400 random arrival orders on the database: every token held at the deletion is revoked, the newer ones kept, as the model says"
    )
    func aDeletionRevokesWhatWasHeldWhateverTheOrder() throws {
        let db = try Database()
        var rng = Seeded(state: 30)
        var staleDeletions = 0
        for n in 0..<400 {
            let sub = "001.order.\(n)"
            let (signIns, deletion, steps) = Self.history(&rng)
            let story = steps.map(\.description).joined(separator: "; ")
            var model = Model()
            var refused: Set<Int> = []
            for step in steps {
                switch step {
                case .store(let s):
                    let stored = model.store(s)
                    if !stored { refused.insert(s.id) }
                    #expect(try db.store(s, sub: sub) == stored, "store_apple_token of \(s): the model stored it: \(stored); in \(story)")
                case .request(let t):
                    model.requested = t
                    try db.requestDeletion(sub: sub, at: t)
                case .applySignIn(let s):
                    // A store that was refused recorded no event.
                    guard !refused.contains(s.id) else { continue }
                    let expected = model.apply(AppleEvent(type: .signIn, sub: sub, eventTimeMillis: s.time), audience: s.aud)
                    let outcome = try db.apply("sign-in", sub: sub, at: s.time)
                    #expect(outcome == "done:" + expected.rawValue, "\(s) applied as \(outcome), the model's \(expected) in \(story)")
                case .applyDeletion(let t):
                    let expected = model.apply(AppleEvent(type: .deletionRequested, sub: sub, eventTimeMillis: t), audience: Self.a)
                    if expected == .stale { staleDeletions += 1 }
                    let outcome = try db.apply("deletion-requested", sub: sub, at: t)
                    #expect(outcome == "done:" + expected.rawValue, "the deletion applied as \(outcome), the model's \(expected) in \(story)")
                }
            }
            let (stored, revoked) = try db.tokens(sub: sub)
            #expect(stored == model.tokens.mapValues(\.id), "tokens stored: \(stored), the model's \(model.tokens) in \(story)")
            #expect(revoked == model.revoked, "tokens revoked: \(revoked.sorted()), the model's \(model.revoked.sorted()) in \(story)")
            for s in signIns where !model.replaced.contains(s.id) {
                if s.time <= deletion {
                    #expect(revoked.contains(s.id), "held at the deletion, never revoked: \(s) in \(story)")
                } else {
                    #expect(!revoked.contains(s.id), "a sign-in after the deletion lost its token: \(s) in \(story)")
                }
            }
            #expect(
                !signIns.contains { stored.values.contains($0.id) && $0.time <= deletion },
                "a token from before the deletion is still stored: \(story)")
        }
        #expect(staleDeletions > 15, "the histories rarely make the deletion stale: \(staleDeletions)")
    }
}
