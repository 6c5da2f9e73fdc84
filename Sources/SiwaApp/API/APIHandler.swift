import Foundation
import Logging
import SiwaCore
import SiwaHTTP
import SiwaRuntime
import Synchronization

/// The API on the admin listener (`POST /apple/tokens`, `POST /apple/refresh-tokens`), checked in
/// this order before the body is read: method (`405`), API configured (`SIWA_API_TOKEN_FILE`,
/// else `404`), bearer token (`401` + `WWW-Authenticate: Bearer`), JSON body (`415`), in-app
/// deletion configured (`404 in_app_deletion_off`); then, with the body, a free slot of the API's
/// own executor (`503 busy` + `Retry-After` beyond `SIWA_API_CONCURRENCY`).
public final class APIHandler: Sendable {
    /// The token file, re-read by `reload` (SIGHUP).
    public final class Tokens: Sendable {
        /// The token file cannot be used; names `SIWA_API_TOKEN_FILE`, never a token.
        public struct TokenFileError: Error, CustomStringConvertible, Sendable {
            public var description: String
        }

        public let file: String
        private let current: Mutex<APITokens>

        /// Reads `file`; errors name `SIWA_API_TOKEN_FILE`.
        public init(file: String) throws {
            self.file = file
            current = Mutex(try Self.read(file))
        }

        static func read(_ file: String) throws -> APITokens {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw TokenFileError(description: "SIWA_API_TOKEN_FILE: cannot read \(file)")
            }
            do {
                return try APITokens(fileContents: Array(data))
            } catch {
                throw TokenFileError(description: "SIWA_API_TOKEN_FILE: \(file) \(error)")
            }
        }

        /// Re-reads the file; on error the tokens in use stay (and the error is thrown). The file
        /// may be being rewritten in place (`echo ... > file`): it must read the same twice and its
        /// last line must end (a newline), or the tokens in use stay; a file renamed over it
        /// (write a new one, `mv` it) is always whole.
        public func reload() throws -> Int {
            let fresh = try Self.readSettled(file)
            current.withLock { $0 = fresh }
            return fresh.count
        }

        static func readSettled(_ file: String, attempts: Int = 10, pause: Duration = .milliseconds(50)) throws -> APITokens {
            func bytes() throws -> [UInt8] {
                guard let data = FileManager.default.contents(atPath: file) else {
                    throw TokenFileError(description: "SIWA_API_TOKEN_FILE: cannot read \(file)")
                }
                return Array(data)
            }
            var previous = try bytes()
            let pauses = WakeSignal()  // never stopped: each wait ends at its deadline
            for _ in 0..<attempts {
                pauses.wait(for: pause)
                let again = try bytes()
                guard again == previous else {
                    previous = again
                    continue
                }
                guard again.last == UInt8(ascii: "\n") else {
                    throw TokenFileError(
                        description: "SIWA_API_TOKEN_FILE: \(file) ends inside a line (still being written? write a new file and rename it over)")
                }
                do {
                    return try APITokens(fileContents: again)
                } catch {
                    throw TokenFileError(description: "SIWA_API_TOKEN_FILE: \(file) \(error)")
                }
            }
            throw TokenFileError(description: "SIWA_API_TOKEN_FILE: \(file) kept changing while read")
        }

        func admits(_ authorization: String?) -> Bool { current.withLock { $0 }.admits(authorization: authorization) }
    }

    private let tokens: Tokens?
    private let exchange: TokenExchange?
    private let executor: CallExecutor<Void>
    private let logger: Logger

    public init(tokens: Tokens?, exchange: TokenExchange?, concurrency: Int, logger: Logger) {
        self.tokens = tokens
        self.exchange = exchange
        self.logger = logger
        executor = CallExecutor(limit: concurrency, name: "siwa-api")
    }

    /// Calls in flight.
    public var busy: Int { executor.busy }

    static func error(_ status: Int, _ code: String, headers: [HTTPHeader] = []) -> HTTPResponse {
        .json(status, "{\"error\":\"\(code)\"}", headers: headers)
    }

    /// The answer before the body is read, nil to read it.
    func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        guard head.method == "POST" else {
            return Self.error(405, "method_not_allowed", headers: [HTTPHeader("Allow", "POST")])
        }
        guard let tokens else { return Self.error(404, "not_found") }
        guard tokens.admits(head.authorization) else {
            return Self.error(401, "unauthorized", headers: [HTTPHeader("WWW-Authenticate", "Bearer")])
        }
        guard let type = head.contentType, RequestGate.isJSONMediaType(type) else {
            return Self.error(415, "unsupported_media_type")
        }
        guard exchange != nil else { return Self.error(404, "in_app_deletion_off") }
        return nil
    }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        guard let exchange else { return responder.respond(Self.error(404, "in_app_deletion_off")) }
        let path = request.head.path, body = request.body
        let admitted = executor.submit {
            let answer = exchange.handle(path: path, body: body)
            let headers = answer.retryAfter.map { [HTTPHeader("Retry-After", String($0))] } ?? []
            responder.respond(.json(answer.status, answer.body, headers: headers))
        }
        if !admitted {
            responder.respond(Self.error(503, "busy", headers: [HTTPHeader("Retry-After", "1")]))
        }
    }

    /// Refuses new calls and lets those in flight answer, until `deadline`.
    func drain(until deadline: Deadline) {
        if !executor.drain(until: deadline) {
            logger.warning("API calls still running at the end of the shutdown budget")
        }
    }
}
