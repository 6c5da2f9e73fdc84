import ArgumentParser
import SiwaApp
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The process's first instruction: a SIGHUP (an operator's token rotation, a log rotator's
/// signal to every process) must never kill it, also while it starts, before `serve`, `receive`
/// or `work` installs its reload handler. Until then a SIGHUP is only remembered; the runner
/// reloads once when it installs its handler and finds one was received.
///
/// A command that fails prints its one line after the log lines queued before the failure (the
/// log writer drains them on a thread of its own): a refused start's reason is its last line.
@main
enum Entry {
    static func main() {
        EarlySignals.holdHangUps()
        do {
            var command = try SiwaNotify.parseAsRoot()
            try command.run()
        } catch {
            LogWriter.standardError.flush(timeout: .seconds(2))
            SiwaNotify.exit(withError: PermissionDenied.explained(error))
        }
    }
}

enum EarlySignals {
    /// A SIGHUP came before the reload handler was installed.
    static let hangUpReceived = Atomic<Bool>(false)

    static func holdHangUps() {
        _ = hangUpReceived.load(ordering: .relaxed)  // initialized here, never first in the handler
        signal(SIGHUP) { _ in EarlySignals.hangUpReceived.store(true, ordering: .relaxed) }
    }

    /// Called right before the reload handler replaces this one: a SIGHUP still pending (a parent
    /// that spawned us with it blocked) counts as received, as installing the handler drops it.
    static func notePending() {
        var pending = sigset_t()
        sigemptyset(&pending)
        if sigpending(&pending) == 0 && sigismember(&pending, SIGHUP) == 1 {
            hangUpReceived.store(true, ordering: .relaxed)
        }
    }
}
