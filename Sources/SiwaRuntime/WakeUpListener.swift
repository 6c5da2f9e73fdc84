import Foundation
import Logging
import SiwaPostgres
import SiwaRuntime

/// Holds a `LISTEN siwa_events` connection and wakes the worker when new events are committed
/// (the statement trigger on `siwa.events` notifies). It checks the connection every
/// `checkInterval` seconds, so a half-open one is noticed, and reconnects with backoff. Wake-ups
/// are an optimisation: the worker polls anyway.
public final class WakeUpListener: Service {
    public let name = "wake-up listener"
    private let conninfo: String
    private let target: WakeSignal
    private let logger: Logger
    private let checkInterval: Double
    private let stopping = StopSignal()
    private let finished = StopSignal()

    /// The NOTIFY channel listened on (nil: the worker's, `siwa_events`).
    private let channel: String

    public init(
        conninfo: String, channel: String? = nil, waking target: WakeSignal, logger: Logger,
        checkInterval: Double = 1
    ) {
        self.channel = channel ?? WorkerStatements.channel
        self.conninfo = conninfo
        self.target = target
        self.logger = logger
        self.checkInterval = checkInterval
    }

    public func start() {
        let thread = Thread { [self] in
            loop()
            finished.stop()
        }
        thread.name = "siwa-listener"
        thread.start()
    }

    public func stop(deadline: ShutdownDeadline) {
        stopping.stop()
        finished.wait(timeout: min(deadline.remaining, checkInterval + 0.5))
    }

    private func loop() {
        var connection: PostgresConnection?
        var backoff = 0.2
        while !stopping.isStopped {
            do {
                if connection == nil || !(connection!.isHealthy) {
                    connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify listener") { c throws(PostgresError) in
                        try c.listen(self.channel)
                    }
                    // Events committed while nobody listened: look now.
                    target.wake()
                    logger.debug("listening for new events")
                }
                if try !connection!.waitForNotifications(timeout: checkInterval).isEmpty {
                    target.wake()
                }
                backoff = 0.2
            } catch {
                logger.debug("listener connection lost, reconnecting", metadata: ["error": "\(error)"])
                connection = nil
                stopping.wait(timeout: backoff)
                backoff = min(backoff * 2, 5)
            }
        }
    }
}
