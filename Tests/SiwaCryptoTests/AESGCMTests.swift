import Foundation
import Testing

@testable import SiwaCrypto

@Suite struct AESGCMTests {
    let key = SecureRandom.bytes(32)

    @Test func roundTrip() throws {
        for size in [0, 1, 15, 16, 17, 300, 4096] {
            let plaintext = SecureRandom.bytes(size)
            let sealed = try AESGCM.seal(plaintext: plaintext, key: key, aad: Array("sub|aud".utf8))
            #expect(sealed.count == 12 + size + 16)
            #expect(try AESGCM.open(sealed: sealed, key: key, aad: Array("sub|aud".utf8)) == plaintext)
        }
        // A fresh nonce each time.
        let a = try AESGCM.seal(plaintext: [1, 2, 3], key: key)
        let b = try AESGCM.seal(plaintext: [1, 2, 3], key: key)
        #expect(a != b && a.prefix(12) != b.prefix(12))
    }

    @Test func knownAnswer() throws {
        // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 14 (AES-256, zero key/IV/plaintext).
        let sealed = try AESGCM.seal(
            plaintext: [UInt8](repeating: 0, count: 16), key: [UInt8](repeating: 0, count: 32),
            aad: [], nonce: [UInt8](repeating: 0, count: 12))
        #expect(Array(sealed[12...]) == hexBytes("cea7403d4d606b6e074ec5d3baf39d18" + "d0d1c8a799996bf0265b98b5d48ab919"))
        #expect(try AESGCM.open(sealed: sealed, key: [UInt8](repeating: 0, count: 32)) == [UInt8](repeating: 0, count: 16))
    }

    @Test func tamperingIsDetected() throws {
        let plaintext = Array("a refresh token".utf8)
        let sealed = try AESGCM.seal(plaintext: plaintext, key: key, aad: [7])
        for i in sealed.indices {
            var bad = sealed
            bad[i] ^= 0x01
            #expect(throws: AESGCMError.authenticationFailed) { try AESGCM.open(sealed: bad, key: key, aad: [7]) }
        }
        // The last tag byte replaced by another value (a fixed 0 is no change 1 time in 256).
        #expect(throws: AESGCMError.authenticationFailed) {
            try AESGCM.open(sealed: sealed.dropLast() + [sealed[sealed.count - 1] ^ 0xFF], key: key, aad: [7])
        }
        #expect(throws: AESGCMError.authenticationFailed) { try AESGCM.open(sealed: Array(sealed.dropLast()), key: key, aad: [7]) }
        #expect(throws: AESGCMError.authenticationFailed) { try AESGCM.open(sealed: sealed, key: key, aad: [8]) }
        #expect(throws: AESGCMError.authenticationFailed) { try AESGCM.open(sealed: sealed, key: key) }
        #expect(throws: AESGCMError.authenticationFailed) { try AESGCM.open(sealed: sealed, key: SecureRandom.bytes(32), aad: [7]) }
        #expect(throws: AESGCMError.malformedCiphertext) { try AESGCM.open(sealed: Array(sealed.prefix(27)), key: key) }
        #expect(throws: AESGCMError.malformedCiphertext) { try AESGCM.open(sealed: [], key: key) }
    }

    @Test func keyMustBe32Bytes() {
        for size in [0, 16, 31, 33, 64] {
            #expect(throws: AESGCMError.invalidKeyLength) { try AESGCM.seal(plaintext: [1], key: SecureRandom.bytes(size)) }
            #expect(throws: AESGCMError.invalidKeyLength) {
                try AESGCM.open(sealed: [UInt8](repeating: 0, count: 40), key: SecureRandom.bytes(size))
            }
        }
    }
}

@Suite struct TokenKeyTests {
    func key(_ contents: [UInt8]) throws(TokenKeyError) -> TokenKey { try TokenKey(fileContents: contents) }

    func expectError(_ code: TokenKeyError.Code, _ contents: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try key(contents)
            Issue.record("expected \(code.rawValue)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("SIWA_TOKEN_KEY_FILE: exactly 32 raw bytes, or 64 hex characters with at most one trailing newline")
    func acceptedFormats() throws {
        var raw = SecureRandom.bytes(32)
        raw[0] = 0x00  // certainly not all printable
        let id = String(SHA256.hex(SHA256.hash(raw)).prefix(8))
        let hex = SHA256.hex(raw)
        for contents in [raw, Array(hex.utf8), Array((hex + "\n").utf8), Array((hex.uppercased() + "\n").utf8)] {
            let k = try key(contents)
            #expect(k.id == id)
            #expect(k.id.count == 8)
        }
    }

    @Test("anything else is refused: a passphrase (with or without its newline), base64, stray whitespace, other lengths")
    func refusedContents() {
        expectError(.weakKey, Array("correct horse battery staple 123".utf8))  // 32 printable characters
        expectError(.weakKey, Array("correct horse battery staple 12\n".utf8))  // 31 and a newline: was taken as a raw key
        expectError(.weakKey, Array("correct horse\tbattery staple!!\r\n".utf8))
        expectError(.weakKey, [UInt8](repeating: 0, count: 32))
        expectError(.weakKey, Array(String(repeating: "00", count: 32).utf8))
        expectError(.wrongFormat, SecureRandom.bytes(31))
        expectError(.wrongFormat, SecureRandom.bytes(33))
        expectError(.wrongFormat, SecureRandom.bytes(32) + [0x0a])  // raw bytes take no newline
        expectError(.wrongFormat, [])
        let raw = SecureRandom.bytes(32)
        let hex = SHA256.hex(raw)
        let base64 = Data(raw).base64EncodedString()
        expectError(.wrongFormat, Array(base64.utf8))  // base64 of 32 bytes: no longer accepted
        expectError(.wrongFormat, Array((base64 + "\n").utf8))
        expectError(.wrongFormat, Array((hex + "\n\n").utf8))
        expectError(.wrongFormat, Array((hex + "\r\n").utf8))
        expectError(.wrongFormat, Array((" " + hex).utf8))
        expectError(.wrongFormat, Array((hex + " ").utf8))
        expectError(.wrongFormat, Array(String(repeating: "ab", count: 31).utf8))  // 62 hex
        expectError(.wrongFormat, Array(String(repeating: "zz", count: 32).utf8))  // 64, not hex
        expectError(.wrongFormat, Array("not a key at all, just a sentence!!".utf8))
    }

    @Test func fileLoadingAndUse() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let raw = SecureRandom.bytes(32)
        let path = try dir.file("token.key", SHA256.hex(raw) + "\n")
        let k = try TokenKey(contentsOfFile: path)
        #expect(k == (try TokenKey(bytes: raw)))
        #expect(k.description == "TokenKey(\(k.id))")
        #expect(!"\(k)".contains(SHA256.hex(raw)))
        let sealed = try k.seal(Array("r.token".utf8), aad: Array("aud".utf8))
        #expect(try AESGCM.open(sealed: sealed, key: raw, aad: Array("aud".utf8)) == Array("r.token".utf8))
        #expect(try k.open(sealed, aad: Array("aud".utf8)) == Array("r.token".utf8))
        #expect(throws: AESGCMError.authenticationFailed) { try TokenKey.generate().open(sealed, aad: Array("aud".utf8)) }
        #expect(TokenKey.generate().id != TokenKey.generate().id)
        do {
            _ = try TokenKey(contentsOfFile: dir.path + "/nope.key")
            Issue.record("expected unreadable_file")
        } catch {
            #expect(error.code == .unreadableFile && error.message.contains("nope.key"))
        }
    }

    @Test func errorCodesAreStable() {
        #expect(TokenKeyError.Code.allCases.map(\.rawValue) == ["unreadable_file", "wrong_format", "weak_key"])
        #expect(
            AESGCMError.allCases.map(\.rawValue) == [
                "invalid_key_length", "malformed_ciphertext", "authentication_failed",
                "encryption_failed",
            ])
    }
}
