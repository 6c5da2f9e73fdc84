import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch

/// `inspect`: decodes a notification and reports every check in order, with the first failure's
/// reason code. Runs on the operator's machine, so details (alg, aud, dates) are shown.
public enum Inspector {
    public struct Result: Sendable {
        public var steps: [InspectionStep]
        /// The reason the server would answer, nil when it would accept.
        public var rejection: RejectReason?
    }

    /// `input`: a compact JWS or a whole body `{"payload":"..."}`. `jwks`: the key set document.
    public static func inspect(
        input: String, jwks: [UInt8]?, audiences: Set<String>,
        now: Int64 = Int64(Date().timeIntervalSince1970)
    ) -> Result {
        let verifier = NotificationVerifier(policy: VerificationPolicy(audiences: audiences))
        let trimmed = input.trimmingCharacters(in: .whitespacesAndNewlines)
        var token = trimmed
        if trimmed.hasPrefix("{") {
            do throws(RejectReason) {
                token = try verifier.extractToken(fromBody: Array(trimmed.utf8))
            } catch {
                return Result(
                    steps: [InspectionStep(name: "body", passed: false, reason: error, detail: error.summary)],
                    rejection: error)
            }
        }
        var keys: [String: RSAPublicKey] = [:]
        var keysError: String?
        if let jwks {
            do {
                keys = try KeyStore.parse(jwks, logger: Logger(label: "inspect") { _ in SwiftLogNoOpLogHandler() })
            } catch {
                keysError = "\(error)"
            }
        }
        let steps = verifier.inspect(token: token, now: now) { kid, input, signature in
            if jwks == nil || keysError != nil { return .keysUnavailable }
            guard let key = keys[kid] else { return .unknownKey }
            return key.verifyRS256(message: input, signature: signature) ? .valid : .invalid
        }
        return Result(steps: steps, rejection: steps.first { !$0.passed }?.reason)
    }

    /// One line per check: `PASS name  detail` / `FAIL name  reason: detail`.
    public static func render(_ result: Result) -> String {
        var out = ""
        for step in result.steps {
            let mark = step.passed ? "PASS" : "FAIL"
            let reason = step.reason.map { "\($0.rawValue): " } ?? ""
            out += "\(mark)  \(step.name.padding(toLength: 10, withPad: " ", startingAt: 0))  \(reason)\(step.detail)\n"
        }
        if let rejection = result.rejection {
            out += "=> rejected: \(rejection.httpStatus) {\"error\":\"\(rejection.rawValue)\"}\n"
        } else {
            out += "=> accepted\n"
        }
        return out
    }
}
