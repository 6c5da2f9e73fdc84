import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Makes the queued provider calls (`siwa.provider_calls`) at the hosted providers, as the
/// forward sender delivers forwards: leases due calls (one short transaction), makes them outside
/// any transaction on `Options.concurrency` call threads, records the outcomes (another short
/// transaction). Per user and provider only the earliest waiting call is ever due
/// (`ProviderCallStatements.claim`). A provider that is down holds no worker batch: the worker
/// only queued the call; the call waits here, retried with backoff, until the provider answers.
/// A provider that answers "too many requests" holds all its calls until its `Retry-After`
/// (`ProviderThrottle`): a burst paces itself at the provider's limit.
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
    }

    public init(
        conninfo: String, clients: [any HostedProviderClient], options: Options = Options(), logger: Logger, metrics: Metrics
    ) {
        var byTarget: [HostedProvider: any HostedProviderClient] = [:]
        for client in clients { byTarget[client.provider] = client }
        let targets = HostedProvider.allCases.filter { byTarget[$0] != nil }
        let steps = Steps(
            schedule: options.schedule, lease: options.callTimeout + .seconds(5), targets: targets, logger: logger, metrics: metrics)
        var settings = CallLoop<ClaimedProviderCall, Answer>.Settings(
            name: "provider sender", thread: "siwa-providers", calls: "siwa-provider", callsInFlight: options.concurrency,
            poll: options.pollInterval, stopGrace: options.stopGrace)
        settings.batchSize = options.batchSize
        settings.budget = .halfOfWhatIsLeft
        let clientsByTarget = byTarget
        loop = CallLoop(
            settings, logger: logger,
            connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify providers") },
            claim: { c, limit, rounds in try steps.cycle(&rounds, claimLimit: limit, on: c) },
            makeLocal: { () },
            call: { item, _ in
                // The claim only returns calls of configured providers.
                let outcome =
                    clientsByTarget[item.target]?.apply(item.effect, sub: item.sub)
                    ?? .refused(ProviderFailure(reason: "target_not_configured", blame: .request))
                return Answer(outcome: outcome, jitter: Double.random(in: 0..<1))
            },
            record: { c, rounds in _ = try steps.cycle(&rounds, claimLimit: 0, on: c) })
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
        let next = schedule.next(after: answer.outcome, attempts: item.attempts + 1, age: .seconds(item.ageSeconds), jitter: answer.jitter)
        var row = ProviderCallStatements.Outcome(id: item.id, state: .pending, status: nil, reason: nil, actions: nil, retryInSeconds: 0)
        switch answer.outcome {
        case .done(let actions, let status):
            row.status = status
            row.actions = actions.map(\.rawValue).joined(separator: ",")
        case .userNotFound(let status):
            row.status = status
        case .retryLater(let failure), .refused(let failure):
            row.status = failure.status
            row.reason = failure.blame.map { "\(failure.reason) [\($0.rawValue)]" } ?? failure.reason
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
        let targets: [HostedProvider]
        let logger: Logger
        let metrics: Metrics

        /// The targets held by a throttle, shared by the claim and the record steps.
        let throttle = Throttle()

        final class Throttle: Sendable {
            let state = Mutex(ProviderThrottle())
        }

        /// Records the outcomes and claims up to `claimLimit` due calls of the targets not held,
        /// in one short transaction; counts and logs the outcomes once committed. Outcomes not
        /// recorded are kept.
        func cycle(
            _ rounds: inout CallRounds<ClaimedProviderCall, Answer>, claimLimit: Int, on c: PostgresConnection
        ) throws -> [ClaimedProviderCall] {
            let done = rounds.takeAnswers()
            let open = holdThrottled(done, at: .now)
            let limit = open.isEmpty ? 0 : claimLimit
            guard !done.isEmpty || limit > 0 else { return [] }
            let recorded = done.map { ProviderSender.recorded($0.0, $0.1, schedule: schedule) }
            do {
                let claimed = try c.transaction(begin: ForwardStatements.beginCycle) { c throws(PostgresError) in
                    if !recorded.isEmpty { try c.affected(ProviderCallStatements.recordOutcomes, recorded.map(\.0)) }
                    guard limit > 0 else { return [ClaimedProviderCall]() }
                    return try c.rows(
                        ProviderCallStatements.claim, .init(limit: limit, leaseSeconds: lease.inSeconds, targets: open))
                }
                report(zip(done.map(\.0), recorded))
                return claimed
            } catch {
                rounds.keep(done)
                throw error
            }
        }

        /// Notes the throttled answers (logging each hold that starts) and returns the targets
        /// whose calls may be claimed at `now`.
        private func holdThrottled(_ done: [(ClaimedProviderCall, Answer)], at now: Deadline) -> [HostedProvider] {
            throttle.state.withLock { t in
                for (item, answer) in done {
                    guard let until = t.note(answer.outcome, of: item.target, at: now) else { continue }
                    logger.warning(
                        "provider throttled: its calls wait",
                        metadata: ["target": "\(item.target.rawValue)", "hold": "\(until.timeLeft(at: now))"])
                }
                return t.open(targets, at: now)
            }
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
