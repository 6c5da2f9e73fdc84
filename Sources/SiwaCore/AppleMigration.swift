/// Apple's answers for an app transfer between teams (TN3159): the `client_credentials` access
/// token and the two shapes of `/auth/usermigrationinfo`. Every token in them is a secret.
public struct AppleAccessToken: Sendable, Equatable {
    /// `access_token`: the Bearer token of `/auth/usermigrationinfo`.
    public var token: String
    /// `expires_in`: seconds it lives (Apple: 3600).
    public var expiresIn: Int64

    public init(token: String, expiresIn: Int64) {
        self.token = token
        self.expiresIn = expiresIn
    }

    /// Parses a 200 body `{"access_token", "token_type", "expires_in"}`. Throws `.malformedJSON`
    /// or `.malformedField` (no access token, or `expires_in` not a positive integer).
    public static func parse(_ body: [UInt8]) throws(AppleResponseError) -> AppleAccessToken {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let token = object["access_token"]?.stringValue, !token.isEmpty else { throw .malformedField }
        guard let expiresIn = object["expires_in"]?.int64Value, expiresIn > 0 else { throw .malformedField }
        return AppleAccessToken(token: token, expiresIn: expiresIn)
    }
}

/// The sending team's answer: `{"transfer_sub": "..."}`.
public enum AppleTransferSub {
    public static func parse(_ body: [UInt8]) throws(AppleResponseError) -> String {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let transferSub = object["transfer_sub"]?.stringValue, TransferList.isIdentifier(transferSub) else {
            throw .malformedField
        }
        return transferSub
    }
}

/// The receiving team's answer: the user's `sub` in this team, and email.
public struct AppleMigratedUser: Sendable, Equatable {
    public var sub: String
    public var email: String?
    /// `is_private_email` (a boolean or the string "true"/"false").
    public var isPrivateEmail: Bool?

    public init(sub: String, email: String? = nil, isPrivateEmail: Bool? = nil) {
        self.sub = sub
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }

    /// Parses `{"sub", "email"?, "is_private_email"?}`. Throws `.malformedJSON` or `.malformedField`.
    public static func parse(_ body: [UInt8]) throws(AppleResponseError) -> AppleMigratedUser {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let sub = object["sub"]?.stringValue, !sub.isEmpty else { throw .malformedField }
        var email: String?
        if let value = object["email"], value != .null {
            guard let s = value.stringValue else { throw .malformedField }
            email = s.isEmpty ? nil : s
        }
        var flag: Bool?
        if let value = object["is_private_email"], value != .null {
            guard let b = value.appleFlag else { throw .malformedField }
            flag = b
        }
        return AppleMigratedUser(sub: sub, email: email, isPrivateEmail: flag)
    }
}

/// The list `transfer export` writes and `transfer import` reads: one JSON object a line,
/// `{"transfer_sub":"..."}`, and nothing else (Apple's rule: the recipient gets transfer
/// identifiers only, never a `sub` or a private email). `import` also takes bare identifiers,
/// one a line; blank lines and lines starting with `#` are skipped.
public enum TransferList {
    /// Why a line of the list cannot be read; `rawValue` is a stable reason code.
    public enum LineError: String, Error, Sendable, Equatable {
        /// Neither `{"transfer_sub":"..."}` nor a bare identifier.
        case malformedLine = "malformed_line"
        /// A JSON object with members other than `transfer_sub` (a `sub`, an email...).
        case unexpectedMember = "unexpected_member"
    }

    /// The line for `transferSub` (without the newline).
    public static func line(_ transferSub: String) -> String {
        JSONValue.object(["transfer_sub": .string(transferSub)]).serialized()
    }

    /// The identifier on `line`; nil for a line to skip (blank, `#` comment).
    public static func parse(line: Substring) throws(LineError) -> String? {
        let text = line.trimmingSpaces
        if text.isEmpty || text.hasPrefix("#") { return nil }
        if text.hasPrefix("{") {
            guard let object = (try? JSONParser.parse(Array(text.utf8)))?.objectValue,
                let transferSub = object["transfer_sub"]?.stringValue, isIdentifier(transferSub)
            else { throw .malformedLine }
            guard object.count == 1 else { throw .unexpectedMember }
            return transferSub
        }
        guard isIdentifier(text) else { throw .malformedLine }
        return text
    }

    /// Reads a whole list: identifiers in order, each once. Errors name the 1-based line.
    public static func parse(_ text: String) throws(TransferListError) -> [String] {
        var seen = Set<String>()
        var out: [String] = []
        var number = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let id: String?
            do {
                id = try parse(line: line)
            } catch {
                throw TransferListError(line: number, reason: error)
            }
            if let id, seen.insert(id).inserted { out.append(id) }
        }
        return out
    }

    /// Plausible identifier: 1–256 printable ASCII characters, no space, quote or backslash.
    public static func isIdentifier(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 256 else { return false }
        return bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }
}

/// A line of a transfer list that cannot be read.
public struct TransferListError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var reason: TransferList.LineError
    public var description: String { "line \(line): \(reason.rawValue)" }
}

/// Apple's 60-day transfer period: the migration endpoint works for both teams for 60 days from
/// the day the app transfer completes.
public enum TransferWindow {
    public static let days = 60

    /// Whole days left at `now` of a window that opened at `start` (Unix seconds); 0 once closed.
    public static func daysLeft(start: Double, now: Double) -> Int {
        let end = start + Double(days) * 86_400
        guard now < end else { return 0 }
        return Int(((end - now) / 86_400).rounded(.up))
    }
}

extension StringProtocol {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" || c == "\r" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" { s = s.dropLast() }
        return String(s)
    }
}
