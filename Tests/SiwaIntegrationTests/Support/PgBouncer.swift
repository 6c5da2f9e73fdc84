import Foundation
import SiwaPostgres

#if canImport(Glibc)
import Glibc
#endif

/// A PgBouncer started by the test from a temporary directory (small ini file, trust auth, a
/// loopback port of its own) in front of the test PostgreSQL, which it reaches over that
/// server's unix socket. PgBouncer refuses to run as root: as root it runs as `postgres`, like
/// the test cluster.
final class PgBouncer {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// The pgbouncer binary (PATH, then /usr/sbin where Debian puts it), or nil.
    static var binary: String? {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        return (path + ["/usr/sbin", "/usr/bin"]).map { $0 + "/pgbouncer" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static var isInstalled: Bool { binary != nil }

    let directory: String
    let port: UInt16

    /// Starts PgBouncer in `poolMode` (`session` or `transaction`) with `poolSize` server
    /// connections per database/user, forwarding every database name to the PostgreSQL whose
    /// conninfo (`host=<socket dir> port=<port> …`) is `upstream`.
    init(upstream: String, poolMode: String, poolSize: Int = 2) throws {
        guard let binary = Self.binary else { throw Failure(description: "pgbouncer is not installed (scripts/setup installs it)") }
        let fields = Self.fields(upstream)
        let host = fields["host"] ?? "/tmp"
        let upstreamPort = fields["port"] ?? "5432"
        directory = NSTemporaryDirectory() + "siwa-pgbouncer-\(UInt32.random(in: 0...UInt32.max))"
        port = ServerProcess.freePort()
        let fm = FileManager.default
        try fm.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try "\"postgres\" \"\"\n".write(toFile: directory + "/users.txt", atomically: true, encoding: .utf8)
        try """
        [databases]
        * = host=\(host) port=\(upstreamPort)

        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = \(port)
        unix_socket_dir =
        auth_type = trust
        auth_file = \(directory)/users.txt
        pool_mode = \(poolMode)
        default_pool_size = \(poolSize)
        max_client_conn = 200
        ignore_startup_parameters = extra_float_digits
        logfile = \(directory)/pgbouncer.log
        pidfile = \(directory)/pgbouncer.pid
        admin_users = postgres

        """.write(toFile: directory + "/pgbouncer.ini", atomically: true, encoding: .utf8)
        if geteuid() == 0 {
            for name in ["", "/users.txt", "/pgbouncer.ini"] {
                try fm.setAttributes([.ownerAccountName: "postgres"], ofItemAtPath: directory + name)
            }
        }
        // Daemonized (-d), like pg_ctl starts PostgreSQL: the launcher exits at once and the
        // daemon is stopped by `SHUTDOWN` on its admin console (signals are no good: a child
        // of the test process inherits a mask that blocks SIGTERM). Started with posix_spawn
        // and waitpid: Foundation's `Process` waits for the daemon too (it inherits the pipe
        // `Process` watches), so `waitUntilExit` would never return.
        let command =
            (geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : [])
            + [binary, "-d", directory + "/pgbouncer.ini"]
        let launched = Self.run(command)
        let ready =
            launched == 0
            && eventually(timeout: 15) {
                (try? PostgresConnection(conninfo: conninfo(dbname: "postgres")).execute("SELECT 1").scalar) == "1"
            }
        guard ready else {
            let log = self.log
            stop()
            throw Failure(description: "pgbouncer did not start (launcher exit \(launched)): \(log.suffix(800))")
        }
    }

    /// A conninfo that goes through this PgBouncer to `dbname`.
    func conninfo(dbname: String) -> String {
        "host=127.0.0.1 port=\(port) user=postgres dbname=\(dbname)"
    }

    var log: String { (try? String(contentsOfFile: directory + "/pgbouncer.log", encoding: .utf8)) ?? "" }

    /// The daemon's pid (its pid file), while that process is alive and not a zombie.
    var pid: pid_t? {
        guard let text = try? String(contentsOfFile: directory + "/pgbouncer.pid", encoding: .utf8),
            let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0,
            let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            stat.contains("(pgbouncer)"), !stat.contains(") Z ")
        else { return nil }
        return pid
    }

    /// `SHUTDOWN` on the admin console; SIGKILL (which no mask blocks) if it is still there after
    /// 3 s. Removes the directory.
    func stop() {
        if pid != nil {
            _ = try? PostgresConnection(conninfo: "host=127.0.0.1 port=\(port) user=postgres dbname=pgbouncer")
                .execute("SHUTDOWN")
            if !eventually(timeout: 3, { pid == nil }), let pid { kill(pid, SIGKILL) }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs `command` to completion (posix_spawn, waitpid), output discarded; returns the exit
    /// code, or -1 when it could not run or was killed.
    static func run(_ command: [String]) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] {
            posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        // Nothing else of the test process goes to the daemon (a pipe that Foundation's
        // `Process` watches for another child, held by pgbouncer, would hide that child's exit).
        // (glibc ≥ 2.34 has posix_spawn_file_actions_addclosefrom_np; Swift's Glibc module does not export it.)
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }
        var argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, command[0], &actions, nil, &argv, environ) == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    }

    /// `key=value` pairs of a keyword/value conninfo.
    static func fields(_ conninfo: String) -> [String: String] {
        var out: [String: String] = [:]
        for part in conninfo.split(separator: " ") {
            let kv = part.split(separator: "=", maxSplits: 1)
            if kv.count == 2 { out[String(kv[0])] = String(kv[1]) }
        }
        return out
    }
}
