import Foundation
import SiwaApp
import SiwaCore
import Testing

/// Forwards go out over TLS with the certificate verified (README "Forwarding to your app"): a receiver whose
/// certificate no trusted authority signed gets nothing. The receiver is a real `openssl
/// s_server` on loopback with a self-signed certificate made here; were verification off, the
/// handshake would succeed and its `-www` page answer the POST with a 200.
@Suite("Forwarding over TLS", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"), "needs the openssl command"))
struct ForwardingTLSTests {
    @Test("a receiver with a self-signed certificate is not delivered to; the error says TLS")
    func selfSignedReceiverRefused() throws {
        let dir = NSTemporaryDirectory() + "siwa-tls-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(dir)/key.pem", "-out", "\(dir)/cert.pem",
                "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            ])
        let port = ServerProcess.freePort()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        server.arguments = ["s_server", "-accept", "127.0.0.1:\(port)", "-cert", "\(dir)/cert.pem", "-key", "\(dir)/key.pem", "-www", "-quiet"]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        server.standardInput = FileHandle.nullDevice
        try server.run()
        defer {
            // SIGKILL: a child may inherit a blocked SIGTERM from the test process.
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        try waitForListener(port: port)

        let secrets = "\(dir)/secrets"
        try "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".write(toFile: secrets, atomically: true, encoding: .utf8)
        let delivery = try ForwardDelivery.load(
            ForwardingConfiguration(url: "https://127.0.0.1:\(port)/hooks", secretFile: secrets), timeout: .seconds(5))
        let attempt = delivery.send(ForwardDelivery.sample(audience: "com.example.app"))
        #expect(!attempt.delivered)
        #expect(attempt.status == nil, "no HTTP answer may be read from an unverified peer")
        let error = attempt.error ?? ""
        #expect(error.localizedCaseInsensitiveContains("tls") || error.localizedCaseInsensitiveContains("cert"), "\(error)")
    }

    private func run(_ path: String, _ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        try #require(p.terminationStatus == 0, "\(path) \(arguments.first ?? "") failed")
    }

    /// Waits (at most 10 s) until something accepts connections on the loopback port.
    private func waitForListener(port: UInt16) throws {
        for _ in 0..<200 {
            if let fd = try? RawHTTP(port: port).connect() {
                close(fd)
                return
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Issue.record("openssl s_server did not listen on \(port)")
    }
}
