import SiwaCrypto

/// Encrypts and decrypts stored refresh tokens (AES-256-GCM). The first key encrypts; every key
/// decrypts what names its id, so a key can rotate: put the new file first in
/// `SIWA_TOKEN_KEY_FILE` and keep the old one after a comma until no token uses it.
/// The user and client id are the additional data: a ciphertext moved to another row does not open.
public struct TokenVault: Sendable {
    public let current: TokenKey
    private let keys: [String: TokenKey]

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public init(keys: [TokenKey]) {
        precondition(!keys.isEmpty, "at least one token key")
        current = keys[0]
        var byID: [String: TokenKey] = [:]
        for key in keys where byID[key.id] == nil { byID[key.id] = key }
        self.keys = byID
    }

    /// Loads `SIWA_TOKEN_KEY_FILE`: one file, or several separated by commas (first = current).
    public static func load(files: String) throws -> TokenVault {
        let paths = paths(files)
        guard !paths.isEmpty else { throw Failure(description: "names no file") }
        var keys: [TokenKey] = []
        for path in paths {
            do {
                keys.append(try TokenKey(contentsOfFile: path))
            } catch {
                throw Failure(description: "\(path): \(error)")
            }
        }
        return TokenVault(keys: keys)
    }

    /// The ids of the configured keys, newest first.
    public var keyIDs: [String] { [current.id] + keys.keys.filter { $0 != current.id }.sorted() }

    /// True when a configured key has this id.
    public func holds(keyID: String) -> Bool { keys[keyID] != nil }

    /// The files `SIWA_TOKEN_KEY_FILE` names (comma-separated, first = current).
    public static func paths(_ files: String) -> [String] {
        files.split(separator: ",").map { String($0).trimmingCharactersOfSpace() }.filter { !$0.isEmpty }
    }

    static func aad(sub: String, clientID: String) -> [UInt8] {
        Array(sub.utf8) + [0] + Array(clientID.utf8)
    }

    func seal(_ refreshToken: String, sub: String, clientID: String) throws -> DeletionStatements.StoredToken {
        let sealed = try current.seal(Array(refreshToken.utf8), aad: Self.aad(sub: sub, clientID: clientID))
        return DeletionStatements.StoredToken(keyID: current.id, ciphertext: sealed)
    }

    func open(_ stored: DeletionStatements.StoredToken, sub: String, clientID: String) throws -> String {
        guard let key = keys[stored.keyID] else {
            throw Failure(description: "token_key_unknown: the token was encrypted with key \(stored.keyID), which SIWA_TOKEN_KEY_FILE does not hold")
        }
        do {
            return String(decoding: try key.open(stored.ciphertext, aad: Self.aad(sub: sub, clientID: clientID)), as: UTF8.self)
        } catch {
            throw Failure(description: "token_undecryptable: the stored token does not open with key \(stored.keyID)")
        }
    }
}

extension String {
    fileprivate func trimmingCharactersOfSpace() -> String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}
