import SiwaCore
import Testing

/// A deletion revokes what was held, whatever order things land in. A model of what the database
/// does with refresh tokens (`siwa.store_apple_token` at the API, `BatchApplier` in the worker),
/// driven by the real rules (`AppAccountRules`, `TokenRules`), over random histories.
@Suite struct TokenRulesTests {
    static let a = "com.example.a", b = "com.example.b", sub = "001.u.1"

    @Test func whatEachEventEnds() {
        func effect(_ type: EventType, _ outcome: ApplyOutcome) -> TokenEffect {
            TokenRules.effect(of: AppleEvent(type: type, sub: Self.sub, eventTimeMillis: 50), audience: Self.a, outcome: outcome)
        }
        for outcome in [ApplyOutcome.applied, .stale, .finalDeleted] {
            #expect(effect(.deletionRequested, outcome) == .revoke(atMillis: 50, clientID: Self.a))
            #expect(effect(.accountDelete, outcome) == .erase(atMillis: 50, clientID: nil))
            #expect(effect(.consentRevoked, outcome) == .erase(atMillis: 50, clientID: Self.a))
            #expect(effect(.signIn, outcome) == .none && effect(.emailEnabled, outcome) == .none)
        }
        #expect(effect(.unknown("x"), .ignored) == .none)
    }

    /// One sign-in: Apple issued a token at `time` (ms) for `aud`; the API stores it at `storedAt`
    /// (a code exchanged or handed over later), the worker applies its event whenever.
    struct SignIn: CustomStringConvertible {
        var id: Int
        var aud: String
        var time: Int64
        var storedAt: Int64
        var description: String { "sign-in#\(id)(\(aud == TokenRulesTests.a ? "A" : "B") at \(time), stored at \(storedAt))" }
    }

    /// What the database holds: the user's state, the stored tokens by app, the revoked ones.
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

        /// The worker: the rules' decision written, then the tokens it ends.
        mutating func apply(_ event: AppleEvent, audience: String) {
            let decision = AppAccountRules.apply(event, audience: audience, to: state)
            AppAccountRulesTests.write(decision, into: &state)
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

    /// A random history: sign-ins to two apps before and after an in-app deletion (some exchanged
    /// late, after the deletion was requested), the API's calls in wall-clock order, and the worker's
    /// applications in any order after each event exists: a deletion whose hook failed is retried
    /// after sign-ins that came later, two workers apply a user's events in either order.
    static func history(_ rng: inout SplitMix) -> (signIns: [SignIn], deletion: Int64, steps: [Step]) {
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

    @Test(
        "two apps, sign-ins around an in-app deletion, 5,000 random arrival orders: every token held at the deletion is revoked, the newer ones kept")
    func aDeletionRevokesWhatWasHeldWhateverTheOrder() {
        var rng = SplitMix(seed: 30)
        var staleDeletions = 0
        for _ in 0..<5_000 {
            let (signIns, deletion, steps) = Self.history(&rng)
            var model = Model()
            var refused: Set<Int> = []
            for step in steps {
                switch step {
                case .store(let s):
                    if !model.store(s) { refused.insert(s.id) }
                case .request(let t): model.requested = t
                case .applySignIn(let s):
                    // A store that was refused recorded no event.
                    if !refused.contains(s.id) { model.apply(AppleEvent(type: .signIn, sub: Self.sub, eventTimeMillis: s.time), audience: s.aud) }
                case .applyDeletion(let t):
                    let event = AppleEvent(type: .deletionRequested, sub: Self.sub, eventTimeMillis: t)
                    if AppAccountRules.apply(event, audience: Self.a, to: model.state).user.outcome == .stale { staleDeletions += 1 }
                    model.apply(event, audience: Self.a)
                }
            }
            let story = steps.map(\.description).joined(separator: "; ")
            for s in signIns where !model.replaced.contains(s.id) {
                if s.time <= deletion {
                    #expect(model.revoked.contains(s.id), "held at the deletion, never revoked: \(s) in \(story)")
                } else {
                    #expect(!model.revoked.contains(s.id), "a sign-in after the deletion lost its token: \(s) in \(story)")
                }
            }
            #expect(!model.tokens.values.contains { $0.signedInAt <= deletion }, "a token from before the deletion is still stored: \(story)")
        }
        #expect(staleDeletions > 200, "the histories rarely make the deletion stale: \(staleDeletions)")
    }
}
