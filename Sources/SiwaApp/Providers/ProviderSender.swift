import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime

/// Makes the queued provider calls (`siwa.provider_calls`) at the hosted providers, as the
/// forward sender delivers forwards: leases due calls (one short transaction), makes them outside
/// any transaction on `Options.concurrency` call threads, records the outcomes (another short
/// transaction). Per user and provider only the earliest waiting call is ever due
/// (`ProviderCallStatements.claim`). A provider that is down holds no worker batch: the worker
/// only queued the call; the call waits here, retried with backoff, until the provider answers.
public final class ProviderSender: Service {
    public struct Options: Sendable {
        /// Calls in flight at most (call threads). Default 8.
        public var concurrency: Int = 8
        /// Most calls leased per claim. Default 50.
        public var batchSize: Int = 50
        /// Between polls when no NOTIFY arrives (retries fall due without one). Default 1 s.
        public var pollInterval: Duration = .seconds(1)
        /// How long a call (all its requests) may take before its lease runs out. Default 60 s.
        public var callTimeout: Duration = .seconds(60)
        /// How long a stop waits for the calls in flight. Default 11 s.
        public var stopGrace: Duration = .seconds(11)
        public var schedule = ProviderCallSchedule()
        /// What a provider's rate-limit reset (Unix seconds) is compared with: the same clock
        /// its client was given, so a test moves the reset instead of waiting for it.
        public var wallClock: WallClock = .system
        public init() {}
    }

    private let loop: CallLoop<ClaimedProviderCall, ProviderSender.Answer>
    public var name: String { loop.name }
    /// Woken by new calls (NOTIFY), by answers of the call threads, and by `stop`.
    public var wakeups: WakeSignal { loop.wakeups }
    public var stopBudget: StopBudget { loop.stopBudget }

    /// What one call gave.
    struct Answer: Sendable {
        var outcome: ProviderOutcome
        var jitter: Double
        /// An email service's call: what it changed in siwa-notify's record of its suppressions.
        var ledger = SuppressionLedger()
    }

    /// `clients`: the hosted providers' (`SIWA_APPLY_TO`); `senders`: the email services'
    /// (`SIWA_EMAIL_SENDERS`). One queue, one loop: each target is a client on it.
    public init(
        conninfo: String, clients: [any HostedProviderClient], senders: [any EmailSenderClient] = [], options: Options = Options(),
        logger: Logger, metrics: Metrics
    ) {
        var byTarget: [CallTarget: any CallClient] = [:]
        for client in clients { byTarget[.provider(client.provider)] = HostedCall(client: client) }
        for client in senders { byTarget[.sender(client.sender)] = SenderCall(client: client) }
        let targets = CallTarget.all.filter { byTarget[$0] != nil }
        let steps = Steps(schedule: options.schedule, lease: options.callTimeout + .seconds(5), logger: logger, metrics: metrics)
        var settings = CallLoop<ClaimedProviderCall, Answer>.Settings(
            name: "provider sender", thread: "siwa-providers", calls: "siwa-provider", callsInFlight: options.concurrency,
            poll: options.pollInterval, stopGrace: options.stopGrace)
        settings.batchSize = options.batchSize
        settings.budget = .halfOfWhatIsLeft
        let clientsByTarget = byTarget
        let wallClock = options.wallClock
        loop = CallLoop(
            settings, logger: logger,
            connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify providers") },
            claim: { c, limit, rounds in
                // A provider that asked not to be called (its rate limit) gets no call until then.
                let now = wallClock.sinceEpoch
                let open = targets.filter { (clientsByTarget[$0]?.pausedUntil() ?? .zero) <= now }
                return try steps.cycle(&rounds, claimLimit: open.isEmpty ? 0 : limit, targets: open, on: c)
            },
            makeLocal: { () },
            call: { item, _ in
                // The claim only returns calls of configured targets.
                let result =
                    clientsByTarget[item.target]?.call(item)
                    ?? SenderResult(.refused(ProviderFailure(reason: "target_not_configured", blame: .request)))
                return Answer(outcome: result.outcome, jitter: Double.random(in: 0..<1), ledger: result.ledger)
            },
            record: { c, rounds in _ = try steps.cycle(&rounds, claimLimit: 0, targets: [], on: c) })
    }

    public func start() { loop.start() }

    public func prepareToStop() { loop.prepareToStop() }

    /// Stops leasing; waits for the calls in flight and records their outcomes. A call still out
    /// then is made again by whoever runs next, once its lease expires (each effect is idempotent
    /// at the provider).
    public func stop(deadline: Deadline) { loop.stop(deadline: deadline) }
}

extension ProviderSender {
    /// The row an outcome writes, and what it means.
    static func recorded(
        _ item: ClaimedProviderCall, _ answer: Answer, schedule: ProviderCallSchedule
    )
        -> (ProviderCallStatements.Outcome, ProviderCallSchedule.Next)
    {
        var outcome = answer.outcome
        if case .provider(let effect) = item.effect {
            outcome = ProviderRules.settled(answer.outcome, effect: effect, foundBefore: item.foundBefore)
        }
        let next = schedule.next(after: outcome, attempts: item.attempts + 1, age: .seconds(item.ageSeconds), jitter: answer.jitter)
        var row = ProviderCallStatements.Outcome(id: item.id, state: .pending, status: nil, reason: nil, actions: nil, retryInSeconds: 0)
        switch outcome {
        case .done(let actions, let status):
            row.status = status
            row.actions = actions.map(\.rawValue).joined(separator: ",")
        case .userNotFound(let status):
            // Zero: nothing was asked (an erase with nothing to erase).
            row.status = status > 0 ? status : nil
        case .retryLater(let failure), .refused(let failure):
            row.status = failure.status
            row.reason = failure.blame.map { "\(failure.reason) [\($0.rawValue)]" } ?? failure.reason
            // Empty when the user was found and nothing done yet: not null says found.
            row.actions = failure.progress.map { done in done.map(\.rawValue).joined(separator: ",") }
        }
        switch next {
        case .done: row.state = .done
        case .userUnknown: row.state = .userUnknown
        case .dead: row.state = .dead
        case .retry(let delay):
            row.state = .pending
            row.retryInSeconds = delay.inSeconds
        }
        return (row, next)
    }

    /// Records the outcomes and claims the next calls (the loop's steps).
    struct Steps: Sendable {
        let schedule: ProviderCallSchedule
        /// A claimed call's lease: its timeout, and 5 s to record the outcome.
        let lease: Duration
        let logger: Logger
        let metrics: Metrics

        /// Records the outcomes and claims up to `claimLimit` due calls of `targets`, in one short
        /// transaction; counts and logs the outcomes once committed. Outcomes not recorded are kept.
        func cycle(
            _ rounds: inout CallRounds<ClaimedProviderCall, Answer>, claimLimit: Int, targets: [CallTarget], on c: PostgresConnection
        ) throws -> [ClaimedProviderCall] {
            guard rounds.hasAnswers || claimLimit > 0 else { return [] }
            let done = rounds.takeAnswers()
            let recorded = done.map { ProviderSender.recorded($0.0, $0.1, schedule: schedule) }
            do {
                let claimed = try c.transaction(begin: ForwardStatements.beginCycle) { c throws(PostgresError) in
                    if !recorded.isEmpty { try c.affected(ProviderCallStatements.recordOutcomes, recorded.map(\.0)) }
                    try Self.recordSuppressions(zip(done, recorded).map { ($0.0, $0.1, $1.1) }, on: c)
                    guard claimLimit > 0 else { return [ClaimedProviderCall]() }
                    return try c.rows(
                        ProviderCallStatements.claim, .init(limit: claimLimit, leaseSeconds: lease.inSeconds, targets: targets))
                }
                report(zip(done.map(\.0), recorded))
                return claimed
            } catch {
                rounds.keep(done)
                throw error
            }
        }

        /// Writes what email services' calls changed of siwa-notify's record of its suppressions
        /// (whatever their outcome: an entry added before a failure is still siwa-notify's), and
        /// after a finished `erase`, forgets the user's addresses at that service.
        static func recordSuppressions(
            _ calls: [(ClaimedProviderCall, Answer, ProviderCallSchedule.Next)], on c: PostgresConnection
        ) throws(PostgresError) {
            var added: [EmailSuppressionStatements.Change] = []
            var removed: [EmailSuppressionStatements.Change] = []
            var forgotten: [(target: EmailSender, sub: String)] = []
            for (item, answer, next) in calls {
                guard case .sender(let sender) = item.target else { continue }
                for entry in answer.ledger.added { added.append(.init(target: sender, sub: item.sub, entry: entry, callID: item.id)) }
                for entry in answer.ledger.removed { removed.append(.init(target: sender, sub: item.sub, entry: entry, callID: item.id)) }
                if item.effect == .sender(.erase) && (next == .done || next == .userUnknown) { forgotten.append((sender, item.sub)) }
            }
            if !removed.isEmpty { try c.affected(EmailSuppressionStatements.forgetRemoved, removed) }
            if !added.isEmpty { try c.affected(EmailSuppressionStatements.recordAdded, added) }
            if !forgotten.isEmpty { try c.affected(EmailSuppressionStatements.forget, forgotten) }
        }

        /// Counts and logs outcomes once they are committed (no sub: its hash; no credential).
        private func report(_ outcomes: Zip2Sequence<[ClaimedProviderCall], [(ProviderCallStatements.Outcome, ProviderCallSchedule.Next)]>) {
            for (item, (row, next)) in outcomes {
                var metadata: Logger.Metadata = [
                    "call_id": "\(item.id)", "target": "\(item.target.rawValue)", "effect": "\(item.effect.rawValue)",
                    "sub_hash": "\(SubjectHash.of(item.sub))", "attempts": "\(item.attempts + 1)",
                ]
                if let status = row.status { metadata["status"] = "\(status)" }
                if let reason = row.reason { metadata["reason"] = "\(reason)" }
                switch next {
                case .done:
                    metrics.providerCall(target: item.target.rawValue, outcome: "done")
                    metadata["actions"] = "\(row.actions ?? "")"
                    logger.info("provider call done", metadata: metadata)
                case .userUnknown:
                    metrics.providerCall(target: item.target.rawValue, outcome: "user_unknown")
                    logger.info("provider call: the provider does not know the user", metadata: metadata)
                case .retry(let delay):
                    metrics.providerCall(target: item.target.rawValue, outcome: "retry")
                    metadata["retry_in"] = "\(delay.inSeconds)"
                    logger.warning("provider call failed, will retry", metadata: metadata)
                case .dead:
                    metrics.providerCall(target: item.target.rawValue, outcome: "dead")
                    logger.error(
                        "provider call dead; `siwa-notify replay --provider-calls` makes it again", metadata: metadata)
                }
            }
        }
    }
}

/// One kind of client the call queue drives: a hosted provider's or an email service's.
protocol CallClient: Sendable {
    func call(_ item: ClaimedProviderCall) -> SenderResult
    func pausedUntil() -> Duration
}

/// A hosted provider's client on the queue.
struct HostedCall: CallClient {
    let client: any HostedProviderClient

    func call(_ item: ClaimedProviderCall) -> SenderResult {
        guard case .provider(let effect) = item.effect else {
            return SenderResult(.refused(ProviderFailure(reason: "effect_not_of_target", blame: .request)))
        }
        return SenderResult(client.apply(effect, sub: item.sub))
    }

    func pausedUntil() -> Duration { client.pausedUntil() }
}

/// An email service's client on the queue.
struct SenderCall: CallClient {
    let client: any EmailSenderClient

    func call(_ item: ClaimedProviderCall) -> SenderResult {
        guard case .sender(let effect) = item.effect else {
            return SenderResult(.refused(ProviderFailure(reason: "effect_not_of_target", blame: .request)))
        }
        return client.apply(effect, address: item.email, recorded: item.recorded)
    }

    func pausedUntil() -> Duration { client.pausedUntil() }
}
