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
    let process = Process()

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
        let asRoot = geteuid() == 0
        if asRoot {
            for name in ["", "/users.txt", "/pgbouncer.ini"] {
                try fm.setAttributes([.ownerAccountName: "postgres"], ofItemAtPath: directory + name)
            }
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", "postgres", "--", binary, directory + "/pgbouncer.ini"]
        } else {
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [directory + "/pgbouncer.ini"]
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let ready = eventually(timeout: 15) {
            (try? PostgresConnection(conninfo: conninfo(dbname: "postgres")).execute("SELECT 1").scalar) == "1"
                || !process.isRunning
        }
        guard ready, process.isRunning else {
            stop()
            throw Failure(description: "pgbouncer did not start: \(log.suffix(800))")
        }
    }

    /// A conninfo that goes through this PgBouncer to `dbname`.
    func conninfo(dbname: String) -> String {
        "host=127.0.0.1 port=\(port) user=postgres dbname=\(dbname)"
    }

    var log: String { (try? String(contentsOfFile: directory + "/pgbouncer.log", encoding: .utf8)) ?? "" }

    /// SIGTERM to pgbouncer itself (its pid file: runuser in between may not pass signals on),
    /// waits for it, removes the directory.
    func stop() {
        if let text = try? String(contentsOfFile: directory + "/pgbouncer.pid", encoding: .utf8),
           let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0 {
            kill(pid, SIGTERM)
        }
        if process.isRunning && !eventually(timeout: 10, { !process.isRunning }) {
            kill(process.processIdentifier, SIGKILL)
        }
        if process.isRunning { process.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: directory)
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
