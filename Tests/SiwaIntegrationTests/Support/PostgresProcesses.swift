import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The processes of a PostgreSQL cluster this test started: its postmaster (first line of
/// `<data>/postmaster.pid`) and the postmaster's children (backends, checkpointer, walwriter, …),
/// found in /proc. `freeze` sends SIGSTOP to all of them — PostgreSQL then accepts nothing and
/// answers nothing (a hung database, where `pg_ctl stop` is a down one); `thaw` sends SIGCONT.
final class PostgresProcesses: @unchecked Sendable {
    let dataDirectory: String
    private let lock = NSLock()
    private var frozen: [pid_t] = []

    init(dataDirectory: String) {
        self.dataDirectory = dataDirectory
    }

    /// The postmaster's pid, from postmaster.pid.
    func postmaster() -> pid_t? {
        guard let text = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
            let first = text.split(separator: "\n").first, let pid = pid_t(first.trimmingCharacters(in: .whitespaces)),
            pid > 0
        else { return nil }
        return pid
    }

    /// Direct children of `parent`, from /proc/<pid>/stat (field 4 is the parent pid).
    static func children(of parent: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name -> pid_t? in
            guard let pid = pid_t(name),
                let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // "pid (comm) state ppid ...": the command may contain spaces and parentheses.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, pid_t(fields[1]) == parent else { return nil }
            return pid
        }
    }

    /// SIGSTOP the postmaster first (it can fork no more), then every child; returns how many
    /// processes were stopped.
    @discardableResult
    func freeze() -> Int {
        guard let master = postmaster() else { return 0 }
        lock.lock()
        defer { lock.unlock() }
        kill(master, SIGSTOP)
        frozen = [master]
        // Twice: a child forked just before the postmaster stopped is caught by the second pass.
        for _ in 0..<2 {
            for child in Self.children(of: master) where !frozen.contains(child) {
                kill(child, SIGSTOP)
                frozen.append(child)
            }
        }
        return frozen.count
    }

    /// SIGCONT everything `freeze` stopped (children first, the postmaster last). Safe to call twice.
    func thaw() {
        lock.lock()
        defer { lock.unlock() }
        for pid in frozen.reversed() { kill(pid, SIGCONT) }
        frozen = []
    }
}
