import Foundation
import SiwaFetch

#if canImport(Glibc)
import Glibc
#endif

/// moto's server (PyPI `moto[server]`, installed by scripts/setup) on a loopback port of its
/// own: a local Amazon Cognito user pool API for the Cognito client's tests. Its output goes to
/// a log file shown when it does not start.
final class MotoServer {
    struct Failure: Error, CustomStringConvertible { var description: String }

    let port: UInt16
    private let process = Process()
    private let logPath: String

    var url: String { "http://127.0.0.1:\(port)/" }

    init() throws {
        port = ServerProcess.freePort()
        logPath = NSTemporaryDirectory() + "siwa-moto-\(port).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", "\(port)"]
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let ready = eventually(timeout: 30) {
            guard process.isRunning else { return true }
            let probe = FetchRequest(url: url + "moto-api/data.json", connectTimeout: .seconds(1), totalTimeout: .seconds(2), allowedSchemes: [.http])
            return (try? Fetcher.perform(probe))?.status == 200
        }
        guard ready, process.isRunning else {
            let output = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            stop()
            throw Failure(
                description: "moto's server did not start within 30 s (scripts/setup installs moto[server]): \(output.suffix(800))")
        }
    }

    /// SIGKILL: a child of the test process inherits a mask that blocks SIGTERM.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }
}
