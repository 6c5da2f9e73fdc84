import SiwaCore
import SiwaCrypto
import SiwaHTTP
import Synchronization

extension DevApple {
    /// The transfer identifiers minted by sending teams, where the receiving team's fake finds
    /// them: Apple's side of an app transfer (TN3159). Thread-safe; share one between the two
    /// `DevApple` instances of a transfer.
    public final class TransferRegistry: Sendable {
        /// One minted transfer identifier.
        public struct Transfer: Sendable, Equatable {
            public var fromTeam: String
            public var toTeam: String
            /// The user in the sending team (its `sub`, email and relay flag).
            public var user: User
        }

        private let transfers = Mutex<[String: Transfer]>([:])

        public init() {}

        /// The transfer behind `transferSub`, if one was minted.
        public func transfer(_ transferSub: String) -> Transfer? { transfers.withLock { $0[transferSub] } }

        /// Transfer identifiers minted so far.
        public var count: Int { transfers.withLock { $0.count } }

        func record(_ transferSub: String, _ transfer: Transfer) { transfers.withLock { $0[transferSub] = transfer } }
    }

    /// The transfer identifier of `sub` of `fromTeam` for `toTeam`: stable, as Apple's (one per
    /// user and recipient team), and revealing neither.
    public static func transferSub(sub: String, fromTeam: String, toTeam: String) -> String {
        "000000." + String(SHA256.hex(SHA256.hash(Array("transfer\u{0}\(fromTeam)\u{0}\(sub)\u{0}\(toTeam)".utf8))).prefix(32)) + ".0000"
    }

    /// The `sub` the user of `sub` (in another team) has in `team` after a transfer.
    public static func transferredSub(sub: String, team: String) -> String {
        "000001." + String(SHA256.hex(SHA256.hash(Array("sub\u{0}\(team)\u{0}\(sub)".utf8))).prefix(32)) + ".0001"
    }
}

extension DevApple.Endpoint {
    /// The live access token named by an `Authorization: Bearer` header; nil when absent,
    /// unknown or expired (a 401).
    func accessGrant(_ authorization: String?) -> AccessGrant? {
        guard let authorization, authorization.count > 7, authorization.lowercased().hasPrefix("bearer ") else { return nil }
        let token = String(authorization.dropFirst(7))
        let now = self.now
        return state.withLock { state in
            guard let grant = state.accessTokens[token], grant.expiresAt > now else { return nil }
            return grant
        }
    }

    /// `/auth/usermigrationinfo` once the access token, client id and client secret passed: `sub`
    /// and `target` (the sending team: a transfer identifier) or `transfer_sub` (the receiving
    /// team: the user's new `sub` and email).
    func migration(_ form: [String: String], call: inout DevApple.Call, effective: Bool) -> HTTPResponse {
        let team = configuration.teamID
        if let transferSub = form["transfer_sub"], !transferSub.isEmpty {
            call.transferSub = transferSub
            let accepted = state.withLock { $0.accepted[transferSub] }
            let user: DevApple.User
            if let accepted {
                user = accepted
            } else if let transfer = configuration.transfers.transfer(transferSub), transfer.toTeam == team {
                let sub = DevApple.transferredSub(sub: transfer.user.sub, team: team)
                let relay = transfer.user.isPrivateEmail ?? (transfer.user.email == nil)
                user = DevApple.User(
                    sub: sub,
                    email: relay ? "\(String(SubjectHashLike.of(sub).prefix(12)))@privaterelay.appleid.com" : transfer.user.email,
                    isPrivateEmail: relay)
            } else {
                return .json(400, #"{"error":"invalid_request"}"#)
            }
            call.sub = user.sub
            var body: [String: JSONValue] = ["sub": .string(user.sub)]
            if let email = user.email { body["email"] = .string(email) }
            if let flag = user.isPrivateEmail { body["is_private_email"] = .bool(flag) }
            return .json(200, JSONValue.object(body).serialized())
        }
        guard let sub = form["sub"], !sub.isEmpty, let target = form["target"], !target.isEmpty, target != team else {
            return .json(400, #"{"error":"invalid_request"}"#)
        }
        call.sub = sub
        let (revoked, known) = state.withLock { ($0.revokedUsers.contains(sub), $0.users[sub]) }
        guard !revoked else { return .json(400, #"{"error":"invalid_request"}"#) }
        let transferSub = DevApple.transferSub(sub: sub, fromTeam: team, toTeam: target)
        call.transferSub = transferSub
        if effective {
            configuration.transfers.record(
                transferSub,
                DevApple.TransferRegistry.Transfer(fromTeam: team, toTeam: target, user: known ?? DevApple.User(sub: sub)))
        }
        return .json(200, JSONValue.object(["transfer_sub": .string(transferSub)]).serialized())
    }
}

/// A relay-address local part derived from a `sub` (the hex of its SHA-256), as the dev fakes make them.
enum SubjectHashLike {
    static func of(_ sub: String) -> String { SHA256.hex(SHA256.hash(Array(sub.utf8))) }
}
