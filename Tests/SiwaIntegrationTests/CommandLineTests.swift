import Foundation
import SiwaApp
import SiwaPostgres
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The real binary: `serve --dev` with its embedded database, and `simulate`.
@Suite("Command line", .serialized)
struct CommandLineTests {
    static var binary: String {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("siwa-notify").path,
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent(".build/debug/siwa-notify").path,
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates[0]
    }

    /// A free loopback port (bound and released).
    static func freePort() -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    static func run(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test("serve --dev + simulate consent-revoked revokes the user's older sessions within a second")
    func serveAndSimulate() throws {
        let dir = NSTemporaryDirectory() + "siwa-cli-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let port = Self.freePort()
        let env = ["SIWA_DATA_DIR": dir, "SIWA_LISTEN": "127.0.0.1:\(port)",
                   "SIWA_ADMIN_LISTEN": "127.0.0.1:\(Self.freePort())", "SIWA_DATABASE_URL": ""]
        let server = Process()
        server.executableURL = URL(fileURLWithPath: Self.binary)
        server.arguments = ["serve", "--dev"]
        server.environment = ProcessInfo.processInfo.environment.merging(env) { _, new in new }
            .filter { $0.key != "SIWA_DATABASE_URL" }
        let log = dir + ".log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: log) }
        server.standardError = FileHandle(forWritingAtPath: log)
        server.standardOutput = FileHandle.nullDevice
        try server.run()
        defer {
            if server.isRunning {
                server.terminate()
                server.waitUntilExit()
            }
        }
        let conninfo = "host=\(dir)/postgres/run port=5432 user=postgres dbname=postgres"
        let up = eventually(timeout: 60) {
            (try? TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.sessions")) != nil
                && ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("worker started")
        }
        #expect(up, "serve --dev did not come up: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        let logText = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(logText.contains("DEVELOPMENT MODE"))

        let sub = "000739.cli.0001"
        let before = try TestDatabase.query(conninfo, """
            INSERT INTO siwa.sessions (apple_sub, created_at) VALUES ($1, now() - interval '1 hour') RETURNING id
            """, [sub]).scalar
        let simulated = try Self.run(["simulate", "--type", "consent-revoked", "--sub", sub], environment: env)
        #expect(simulated.status == 0, "\(simulated.output)")
        #expect(simulated.output.contains("200"))
        let started = Date()
        let revoked = eventually(timeout: 1) {
            (try? TestDatabase.query(conninfo, "SELECT revoked_at IS NOT NULL FROM siwa.sessions WHERE id = $1", [before]).scalar) == "t"
        }
        #expect(revoked, "session not revoked within 1 s")
        #expect(Date().timeIntervalSince(started) <= 1.0)

        // SIGTERM: graceful stop, embedded database stopped.
        server.terminate()
        server.waitUntilExit()
        #expect(server.terminationStatus == 0)
        let finalLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(finalLog.contains("embedded PostgreSQL stopped"))
        #expect(!finalLog.contains(sub), "logs must not contain the raw sub")
    }

    @Test("a bad configuration stops the program with one line naming the variable")
    func badConfiguration() throws {
        let result = try Self.run(["serve"], environment: ["SIWA_MAX_BODY": "lots", "SIWA_AUDIENCES": "com.example.app"])
        #expect(result.status != 0)
        #expect(result.output.contains("SIWA_MAX_BODY"))
        #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        let missing = try Self.run(["serve"], environment: ["SIWA_AUDIENCES": ""])
        #expect(missing.status != 0)
        #expect(missing.output.contains("SIWA_AUDIENCES"))
    }

    @Test("--help works on every command")
    func help() throws {
        for command in [[], ["serve"], ["receive"], ["work"], ["migrate"], ["simulate"]] {
            let result = try Self.run(command + ["--help"], environment: [:])
            #expect(result.status == 0, "\(command)")
            #expect(result.output.contains("USAGE"), "\(command)")
        }
    }
}
