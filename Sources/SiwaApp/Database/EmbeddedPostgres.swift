import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaRuntime

/// A private PostgreSQL cluster for `serve` without `SIWA_DATABASE_URL` (and for tests):
/// `initdb` on first use, `pg_ctl start` on a unix socket only (no TCP), `pg_ctl stop` on exit.
/// PostgreSQL refuses to run as root: as root the cluster is owned by and run as the `postgres`
/// user (via `runuser`).
public final class EmbeddedPostgres: Service {
    public let name = "embedded PostgreSQL"
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Where the cluster lives (`<data dir>/postgres`, or a root-owned fallback when the
    /// `postgres` user cannot reach the data dir).
    public let clusterDirectory: String
    /// The unix socket directory.
    public let socketDirectory: String
    private let binDirectory: String
    private let runAs: String?
    private let logger: Logger

    /// The libpq conninfo of the running cluster.
    public var conninfo: String { "host=\(socketDirectory) port=5432 user=postgres dbname=postgres" }

    public init(dataDirectory: String, logger: Logger) throws(Failure) {
        guard let bin = Self.findBinaries() else {
            throw Failure(
                description:
                    "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin; install postgresql or set SIWA_DATABASE_URL"
            )
        }
        self.binDirectory = bin
        self.logger = logger
        let absolute = URL(fileURLWithPath: dataDirectory).standardizedFileURL.path
        let isRoot = geteuid() == 0
        self.runAs = isRoot ? "postgres" : nil
        var cluster = absolute + "/postgres"
        if isRoot {
            do {
                try FileManager.default.createDirectory(atPath: absolute, withIntermediateDirectories: true)
            } catch {
                throw Failure(description: "cannot create data directory \(absolute)")
            }
            if !Subprocess.run(["/usr/sbin/runuser", "-u", "postgres", "--", "test", "-x", absolute]).ok {
                // The postgres user cannot reach the data dir (e.g. under /root): keep the cluster
                // in a directory of its own, named after the data dir.
                cluster = "/var/lib/siwa-notify/" + String(SHA256.hexDigest(absolute).prefix(16)) + "/postgres"
            }
        }
        self.clusterDirectory = cluster
        self.socketDirectory = cluster + "/run"
    }

    /// Finds a directory holding `initdb` and `pg_ctl`: PATH first, then the newest
    /// `/usr/lib/postgresql/<version>/bin`.
    public static func findBinaries() -> String? {
        let fm = FileManager.default
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) {
            if fm.isExecutableFile(atPath: dir + "/initdb") && fm.isExecutableFile(atPath: dir + "/pg_ctl") { return dir }
        }
        let root = "/usr/lib/postgresql"
        let versions = ((try? fm.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted(by: >)
        for v in versions where fm.isExecutableFile(atPath: "\(root)/\(v)/bin/pg_ctl") {
            return "\(root)/\(v)/bin"
        }
        return nil
    }

    /// Creates the cluster if needed and starts it (or adopts one already running there).
    public func start() throws(Failure) {
        let fm = FileManager.default
        do {
            // The directories above the cluster must stay traversable for the `postgres` user;
            // the cluster itself (and its socket directory) is private to it.
            let parent = (clusterDirectory as NSString).deletingLastPathComponent
            try fm.createDirectory(
                atPath: parent, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o755])
            try fm.createDirectory(
                atPath: socketDirectory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: clusterDirectory)
        } catch {
            throw Failure(description: "cannot create \(socketDirectory)")
        }
        if let runAs {
            _ = Subprocess.run(["/bin/chown", "-R", "\(runAs):\(runAs)", clusterDirectory])
        }
        let data = clusterDirectory + "/data"
        if !fm.fileExists(atPath: data + "/PG_VERSION") {
            logger.info("creating embedded PostgreSQL cluster", metadata: ["dir": "\(data)"])
            let r = pg(["initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-instructions"])
            guard r.ok else { throw Failure(description: "initdb failed: \(r.output.suffix(300))") }
        }
        if pg(["pg_ctl", "-D", data, "status"]).ok {
            logger.info("embedded PostgreSQL already running", metadata: ["dir": "\(data)"])
            return
        }
        let options = "-c listen_addresses='' -c unix_socket_directories='\(socketDirectory)' -c max_connections=200"
        let r = pg(["pg_ctl", "-D", data, "-l", clusterDirectory + "/postgres.log", "-o", options, "-w", "-t", "60", "start"])
        guard r.ok else {
            throw Failure(description: "pg_ctl start failed (see \(clusterDirectory)/postgres.log): \(r.output.suffix(300))")
        }
        logger.info("embedded PostgreSQL started", metadata: ["socket": "\(socketDirectory)"])
    }

    /// Stops the cluster (fast shutdown: open transactions roll back, committed data is safe).
    public func stop(deadline: Deadline) {
        stop()
    }

    /// Stops the cluster now.
    public func stop() {
        let r = pg(["pg_ctl", "-D", clusterDirectory + "/data", "-m", "fast", "-w", "-t", "60", "stop"])
        if r.ok { logger.info("embedded PostgreSQL stopped") }
    }

    private func pg(_ arguments: [String]) -> (ok: Bool, output: String) {
        var command = arguments
        command[0] = binDirectory + "/" + command[0]
        if let runAs { command = ["/usr/sbin/runuser", "-u", runAs, "--"] + command }
        return Subprocess.run(command)
    }

}
