import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools

#if canImport(Glibc)
import Glibc
#endif

/// Two teams of an app transfer: a database, a fake Apple and the `SIWA_*` environment each, the
/// two fakes sharing one transfer registry. The sending team is `AppleTestSetup.teamID`.
final class TransferTeams {
    typealias S = AppleTestSetup
    static let receivingTeamID = "TEAMB00000"

    let directory: String
    let sendingDatabase: String
    let receivingDatabase: String
    let sending: FakeApple
    let receiving: FakeApple
    let sendingEnvironment: [String: String]
    let receivingEnvironment: [String: String]

    init() throws {
        directory = NSTemporaryDirectory() + "siwa-transfer-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let receivingKey = try ECPrivateKey.generate()
        let registry = DevApple.TransferRegistry()
        sending = try FakeApple(
            teamID: S.teamID, keyID: S.keyID, secretKey: S.teamKey.publicKey, clientIDs: [S.clientID], transfers: registry)
        receiving = try FakeApple(
            teamID: Self.receivingTeamID, keyID: S.keyID, secretKey: receivingKey.publicKey, clientIDs: [S.clientID],
            transfers: registry)
        sendingDatabase = try TestDatabase.create()
        receivingDatabase = try TestDatabase.create()
        let tokenKey = directory + "/token.key"
        try Self.write(SHA256.hex(SecureRandom.bytes(32)), to: tokenKey)
        let directory = self.directory
        func environment(_ team: String, _ key: ECPrivateKey, _ fake: FakeApple, _ database: String) throws -> [String: String] {
            let keyFile = directory + "/\(team).p8"
            try Self.write(key.pkcs8PEM(), to: keyFile)
            return [
                "SIWA_DATABASE_URL": database, "SIWA_TEAM_ID": team, "SIWA_KEY_ID": S.keyID, "SIWA_PRIVATE_KEY_FILE": keyFile,
                "SIWA_TOKEN_KEY_FILE": tokenKey, "SIWA_APPLE_URL": fake.baseURL, "SIWA_AUDIENCES": S.clientID,
            ]
        }
        sendingEnvironment = try environment(S.teamID, S.teamKey, sending, sendingDatabase)
        receivingEnvironment = try environment(Self.receivingTeamID, receivingKey, receiving, receivingDatabase)
    }

    deinit {
        sending.stop()
        receiving.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    static func write(_ text: String, to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown)
        }
    }

    /// Accounts of the sending team: `active` users `001.a<i>`, `consent_revoked` ones `001.c<i>`
    /// (still users: exported) and `deleted` ones `001.d<i>` (never exported).
    func seedSending(active: Int, revoked: Int = 0, deleted: Int = 0) throws {
        _ = try TestDatabase.query(
            sendingDatabase,
            """
            INSERT INTO siwa.accounts (apple_sub, email, is_private_email, status)
            SELECT '001.a' || g, 'u' || g || '@privaterelay.appleid.com', true, 'active' FROM generate_series(1, $1::int) g
            UNION ALL SELECT '001.c' || g, NULL, NULL, 'consent_revoked' FROM generate_series(1, $2::int) g
            UNION ALL SELECT '001.d' || g, NULL, NULL, 'deleted' FROM generate_series(1, $3::int) g
            """, [String(active), String(revoked), String(deleted)])
    }

    /// A command's end: exit status, stdout and stderr apart.
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        /// The last line of stderr (the command's one-line verdict).
        var lastLine: String { stderr.split(separator: "\n").last.map(String.init) ?? "" }
    }

    /// Starts `siwa-notify <arguments>` with stdout and stderr in files; `finish` waits for it.
    func start(_ arguments: [String], environment: [String: String], stdin: String = "") throws -> (Process, () -> Run) {
        let id = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let out = directory + "/\(id).out", err = directory + "/\(id).err", input = directory + "/\(id).in"
        for path in [out, err] { try Self.write("", to: path) }
        try Self.write(stdin, to: input)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ServerProcess.binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: input))
        try process.run()
        return (
            process,
            {
                process.waitUntilExit()
                let read = { (path: String) in String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self) }
                return Run(status: process.terminationStatus, stdout: read(out), stderr: read(err))
            }
        )
    }

    /// Runs `siwa-notify <arguments>` to its end.
    func run(_ arguments: [String], environment: [String: String], stdin: String = "") throws -> Run {
        try start(arguments, environment: environment, stdin: stdin).1()
    }

    func export(_ extra: [String] = []) throws -> Run {
        try run(["transfer", "export", "--to-team", Self.receivingTeamID, "--rate", "2000"] + extra, environment: sendingEnvironment)
    }

    func `import`(_ list: String, _ extra: [String] = []) throws -> Run {
        try run(["transfer", "import", "--rate", "2000"] + extra, environment: receivingEnvironment, stdin: list)
    }

    /// One column of a query's rows.
    static func column(_ database: String, _ sql: String) throws -> [String?] {
        try TestDatabase.query(database, sql).rows.map { $0[0] }
    }

    static func count(_ database: String, _ sql: String) throws -> Int {
        Int(try column(database, sql).first.flatMap { $0 } ?? "") ?? -1
    }

    /// Successful `/auth/usermigrationinfo` calls of `fake`, by the form field `field`.
    static func answered(_ fake: FakeApple, by field: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        for call in fake.calls(to: "/auth/usermigrationinfo") where call.status == 200 {
            counts[call.form?[field] ?? "", default: 0] += 1
        }
        return counts
    }
}
