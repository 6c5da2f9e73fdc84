import Logging
import SiwaClock
import SiwaCore
import SiwaPostgres

/// Holds a `LISTEN` connection on a NOTIFY channel and wakes a loop when a notification arrives
/// (the worker on new events, the forward sender on new forwards). A `ConnectedLoop`: on every
/// connect it wakes the target too (what was committed while nobody listened is looked at now);
/// it checks the connection every `checkInterval`, so a half-open one is noticed and replaced.
/// Wake-ups are an optimisation: the woken loops poll anyway.
public final class WakeUpListener: Service {
    public let name = "wake-up listener"
    private let loop: ConnectedLoop<PostgresConnection, Void>
    private let checkInterval: Duration

    public init(
        conninfo: String, channel: String, waking target: WakeSignal, logger: Logger,
        checkInterval: Duration = .seconds(1), clock: any MonotonicClock = SystemClock.shared
    ) {
        self.checkInterval = checkInterval
        loop = ConnectedLoop(
            name: "wake-up listener", threadName: "siwa-listener", wakeups: WakeSignal(clock: clock),
            body: .init(
                connect: {
                    let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify listener") {
                        c throws(PostgresError) in try c.listen(channel)
                    }
                    target.wake()
                    logger.debug("listening for new events", metadata: ["channel": "\(channel)"])
                    return connection
                },
                makeState: {},
                round: { connection, _ in
                    if try !connection.waitForNotifications(timeout: checkInterval).isEmpty { target.wake() }
                    return .again
                },
                failed: { error, _, _ in
                    logger.debug("listener connection lost, reconnecting", metadata: ["error": "\(error)"])
                }))
    }

    public func start() { loop.start() }

    public func prepareToStop() { loop.prepareToStop() }

    /// A round ends within `checkInterval`: the wait is bounded by that, not by the whole budget.
    public func stop(deadline: Deadline) {
        loop.stop(until: min(deadline, loop.clock.now.adding(checkInterval + .milliseconds(500))))
    }
}
