import CCrypto
import Foundation
import Testing

@testable import SiwaCrypto

// MARK: - Helpers

/// A private temporary directory, removed by `cleanup()`.
struct TempDir {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "siwa-ec-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func file(_ name: String, _ contents: String) throws -> String {
        let p = path + "/" + name
        try contents.write(toFile: p, atomically: true, encoding: .utf8)
        return p
    }

    func file(_ name: String, bytes: [UInt8]) throws -> String {
        let p = path + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: p))
        return p
    }

    func read(_ name: String) throws -> String { try String(contentsOfFile: path + "/" + name, encoding: .utf8) }

    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs the openssl CLI; returns exit status and combined output.
@discardableResult
func openssl(_ arguments: [String], in dir: String) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl"] + arguments
    process.currentDirectoryURL = URL(fileURLWithPath: dir)
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

enum SharedECKeys {
    static let key: ECPrivateKey = try! ECPrivateKey.generate()
    static let other: ECPrivateKey = try! ECPrivateKey.generate()
}

func expectECError(
    _ code: ECKeyError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("expected \(code.rawValue), got success", sourceLocation: sourceLocation)
    } catch let error as ECKeyError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(code.rawValue), got \(error)", sourceLocation: sourceLocation)
    }
}

// MARK: - ES256

@Suite struct ES256Tests {
    let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJURUFNIn0".utf8)

    @Test func signVerifyRoundTrip() throws {
        let key = SharedECKeys.key
        let signature = try key.signES256(message: message)
        #expect(signature.count == 64)
        #expect(key.publicKey.verifyES256(message: message, signature: signature))
        // ECDSA is randomized; both signatures verify.
        let again = try key.signES256(message: message)
        #expect(again != signature)
        #expect(key.publicKey.verifyES256(message: message, signature: again))
        #expect(try key.signES256(message: []).count == 64)
    }

    @Test func tamperingAndWrongKeyFail() throws {
        let key = SharedECKeys.key
        let signature = try key.signES256(message: message)
        #expect(!key.publicKey.verifyES256(message: message + [0x2e], signature: signature))
        for i in [0, 31, 32, 63] {
            var bad = signature
            bad[i] ^= 0x01
            #expect(!key.publicKey.verifyES256(message: message, signature: bad))
        }
        #expect(!SharedECKeys.other.publicKey.verifyES256(message: message, signature: signature))
        #expect(!key.publicKey.verifyES256(message: message, signature: Array(signature.prefix(63))))
        #expect(!key.publicKey.verifyES256(message: message, signature: signature + [0]))
        #expect(!key.publicKey.verifyES256(message: message, signature: []))
        // The DER form is not accepted where JOSE is expected.
        #expect(!key.publicKey.verifyES256(message: message, signature: try key.signES256DER(message: message)))
        #expect(!key.publicKey.verifyES256(message: message, signature: [UInt8](repeating: 0, count: 64)))
        #expect(ERR_peek_error() == 0)
    }

    @Test func pkcs8RoundTrip() throws {
        let pem = SharedECKeys.key.pkcs8PEM()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        let loaded = try ECPrivateKey(pem: pem)
        #expect(loaded.publicKey.spkiDER == SharedECKeys.key.publicKey.spkiDER)
        let signature = try loaded.signES256(message: message)
        #expect(SharedECKeys.key.publicKey.verifyES256(message: message, signature: signature))
        let pub = try ECPublicKey(pem: SharedECKeys.key.publicKey.pemRepresentation)
        #expect(pub.spkiDER == SharedECKeys.key.publicKey.spkiDER)
        #expect(pub.verifyES256(message: message, signature: signature))
    }

    @Test func shortRAndSAreLeftPadded() throws {
        // About 1 signature in 128 has r or s below 2^248 (a leading zero byte in the JOSE
        // form, a shorter INTEGER in DER). Sign until both kinds have been seen.
        let key = SharedECKeys.key
        var sawShortR = false, sawShortS = false
        var attempts = 0
        while !(sawShortR && sawShortS) && attempts < 20_000 {
            attempts += 1
            let msg = message + Array(String(attempts).utf8)
            let jose = try key.signES256(message: msg)
            guard jose[0] == 0 || jose[32] == 0 else { continue }
            #expect(jose.count == 64)
            #expect(key.publicKey.verifyES256(message: msg, signature: jose))
            let der = try #require(ECDSASignature.der(fromJOSE: jose))
            #expect(ECDSASignature.jose(fromDER: der) == jose)
            if jose[0] == 0 {
                sawShortR = true
                #expect(der[3] < 33)  // r's INTEGER is shorter than a full-width one
            }
            if jose[32] == 0 { sawShortS = true }
        }
        #expect(sawShortR && sawShortS, "after \(attempts) signatures")
    }
}

// MARK: - DER <-> JOSE

@Suite struct ECDSASignatureEncodingTests {
    func jose(_ r: [UInt8], _ s: [UInt8]) -> [UInt8] {
        [UInt8](repeating: 0, count: 32 - r.count) + r + [UInt8](repeating: 0, count: 32 - s.count) + s
    }

    @Test func encodesMinimalIntegers() {
        // r with the high bit set gets a 0x00 pad; s = 1 is one byte.
        let r = [UInt8](repeating: 0xff, count: 32)
        let der = ECDSASignature.der(fromJOSE: jose(r, [1]))!
        #expect(der == [0x30, 38, 0x02, 33, 0x00] + r + [0x02, 1, 1])
        #expect(ECDSASignature.jose(fromDER: der) == jose(r, [1]))
        // Leading zero bytes in the JOSE form vanish in DER, and come back.
        let short = jose([0x00, 0x00, 0x7f, 0x01], [0x80])
        let shortDER = ECDSASignature.der(fromJOSE: short)!
        #expect(shortDER == [0x30, 8, 0x02, 2, 0x7f, 0x01, 0x02, 2, 0x00, 0x80])
        #expect(ECDSASignature.jose(fromDER: shortDER) == short)
        #expect(ECDSASignature.der(fromJOSE: [UInt8](repeating: 1, count: 63)) == nil)
    }

    @Test func randomRoundTrips() {
        for i in 0..<2000 {
            var bytes = SecureRandom.bytes(64)
            // Force some leading zeros and high bits.
            for k in 0..<(i % 5) {
                bytes[k] = 0
                bytes[32 + (k * 7 % 32)] = 0
            }
            if i % 3 == 0 { bytes[0] |= 0x80 }
            let der = ECDSASignature.der(fromJOSE: bytes)!
            #expect(ECDSASignature.jose(fromDER: der) == bytes)
        }
    }

    @Test func refusesNonStrictDER() {
        let good: [UInt8] = [0x30, 6, 0x02, 1, 0x05, 0x02, 1, 0x07]
        #expect(ECDSASignature.jose(fromDER: good) == jose([5], [7]))
        let bad: [[UInt8]] = [
            [],
            [0x31, 6, 0x02, 1, 0x05, 0x02, 1, 0x07],  // not a SEQUENCE
            [0x30, 7, 0x02, 1, 0x05, 0x02, 1, 0x07],  // wrong length
            [0x30, 6, 0x02, 1, 0x05, 0x02, 1, 0x07, 0x00],  // trailing byte
            [0x30, 6, 0x03, 1, 0x05, 0x02, 1, 0x07],  // not an INTEGER
            [0x30, 6, 0x02, 1, 0x85, 0x02, 1, 0x07],  // negative
            [0x30, 7, 0x02, 2, 0x00, 0x05, 0x02, 1, 0x07],  // non-minimal
            [0x30, 3, 0x02, 1, 0x05],  // one INTEGER
            [0x30, 0x81, 6, 0x02, 1, 0x05, 0x02, 1, 0x07],  // long-form length
            [0x30, 6, 0x02, 0, 0x02, 2, 0x01, 0x07],  // empty INTEGER
            [0x30, 38, 0x02, 33, 0x01] + [UInt8](repeating: 1, count: 32) + [0x02, 1, 1],  // 33 significant bytes
        ]
        for der in bad {
            #expect(ECDSASignature.jose(fromDER: der) == nil, "\(der)")
        }
    }
}

// MARK: - Loading .p8 files

@Suite struct ECKeyLoadingTests {
    @Test func loadsOpenSSLGeneratedP8AndInteroperates() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        // A P-256 key in PKCS#8, the shape of Apple's AuthKey_XXXXXXXXXX.p8.
        #expect(
            try openssl(
                ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "AuthKey.p8"],
                in: dir.path
            ).status == 0)
        let key = try ECPrivateKey(contentsOfFile: dir.path + "/AuthKey.p8")
        #expect(try dir.read("AuthKey.p8").hasPrefix("-----BEGIN PRIVATE KEY-----"))

        // Our signature (converted to DER) verifies with `openssl dgst -verify`.
        let message = Array("header.claims".utf8)
        _ = try dir.file("msg", bytes: message)
        _ = try dir.file("pub.pem", key.publicKey.pemRepresentation)
        let jose = try key.signES256(message: message)
        _ = try dir.file("sig.der", bytes: ECDSASignature.der(fromJOSE: jose)!)
        let verify = try openssl(["dgst", "-sha256", "-verify", "pub.pem", "-signature", "sig.der", "msg"], in: dir.path)
        #expect(verify.status == 0 && verify.output.contains("Verified OK"), "\(verify.output)")

        // openssl's signature (DER) verifies with ours after conversion; and openssl's public key matches.
        #expect(try openssl(["dgst", "-sha256", "-sign", "AuthKey.p8", "-out", "theirs.der", "msg"], in: dir.path).status == 0)
        let theirs = [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir.path + "/theirs.der")))
        let converted = try #require(ECDSASignature.jose(fromDER: theirs))
        #expect(key.publicKey.verifyES256(message: message, signature: converted))
        #expect(try openssl(["pkey", "-in", "AuthKey.p8", "-pubout", "-out", "theirpub.pem"], in: dir.path).status == 0)
        #expect(try ECPublicKey(pem: dir.read("theirpub.pem")).spkiDER == key.publicKey.spkiDER)

        // Our PKCS#8 export is readable by openssl.
        _ = try dir.file("ours.p8", key.pkcs8PEM())
        #expect(try openssl(["pkey", "-in", "ours.p8", "-noout"], in: dir.path).status == 0)

        // SEC 1 ("EC PRIVATE KEY") is accepted too.
        #expect(try openssl(["ec", "-in", "AuthKey.p8", "-out", "sec1.pem"], in: dir.path).status == 0)
        #expect(try ECPrivateKey(contentsOfFile: dir.path + "/sec1.pem").publicKey.spkiDER == key.publicKey.spkiDER)
    }

    @Test func refusesOtherCurvesAndKeyTypes() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let made: [(String, [String])] = [
            ("p384.p8", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]),
            ("k256.p8", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1"]),
            ("ed25519.p8", ["genpkey", "-algorithm", "ED25519"]),
        ]
        for (name, args) in made {
            #expect(try openssl(args + ["-out", name], in: dir.path).status == 0)
        }
        expectECError(.wrongCurve) { _ = try ECPrivateKey(contentsOfFile: dir.path + "/p384.p8") }
        expectECError(.wrongCurve) { _ = try ECPrivateKey(contentsOfFile: dir.path + "/k256.p8") }
        do {
            _ = try ECPrivateKey(contentsOfFile: dir.path + "/p384.p8")
        } catch {
            #expect(error.message.contains("secp384r1"))
            #expect(error.description.hasPrefix("wrong_curve: "))
        }
        expectECError(.notEC) { _ = try ECPrivateKey(contentsOfFile: dir.path + "/ed25519.p8") }
        // RSA in PKCS#8 (same "BEGIN PRIVATE KEY" label) and in PKCS#1.
        let rsa = SharedKeys.key2048.pemRepresentation
        #expect(rsa.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        expectECError(.rsaKey) { _ = try ECPrivateKey(pem: rsa) }
        expectECError(.rsaKey) { _ = try ECPrivateKey(pem: Vectors.pkcs1PrivateKeyPEM) }
        // Public keys of other curves.
        #expect(try openssl(["pkey", "-in", "p384.p8", "-pubout", "-out", "p384pub.pem"], in: dir.path).status == 0)
        expectECError(.wrongCurve) { _ = try ECPublicKey(pem: dir.read("p384pub.pem")) }
        // Encrypted PKCS#8 is refused without a prompt.
        #expect(
            try openssl(
                [
                    "pkcs8", "-topk8", "-v2", "aes256", "-in", "p384.p8", "-passout", "pass:secret",
                    "-out", "enc.p8",
                ], in: dir.path
            ).status == 0)
        expectECError(.encryptedKey) { _ = try ECPrivateKey(contentsOfFile: dir.path + "/enc.p8") }
    }

    @Test func refusesGarbageAndTruncation() throws {
        let pem = SharedECKeys.key.pkcs8PEM()
        expectECError(.notPEM) { _ = try ECPrivateKey(pem: "") }
        expectECError(.notPEM) { _ = try ECPrivateKey(pem: "just some text\n") }
        expectECError(.notPEM) { _ = try ECPrivateKey(pem: String(decoding: SecureRandom.bytes(300), as: UTF8.self)) }
        expectECError(.notPrivateKey) { _ = try ECPrivateKey(pem: SharedECKeys.key.publicKey.pemRepresentation) }
        expectECError(.notPrivateKey) { _ = try ECPrivateKey(pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") }
        // Truncated: the base64 body cut in half, with and without the END line.
        let lines = pem.split(separator: "\n")
        let half = lines.prefix(lines.count / 2).joined(separator: "\n") + "\n"
        expectECError(.malformedKey) { _ = try ECPrivateKey(pem: half) }
        expectECError(.malformedKey) { _ = try ECPrivateKey(pem: half + "-----END PRIVATE KEY-----\n") }
        expectECError(.malformedKey) {
            _ = try ECPrivateKey(pem: "-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n")
        }
        // A corrupted byte inside the DER.
        var corrupt = Array(lines)
        corrupt[1] = Substring(String(corrupt[1].reversed()))
        expectECError(.malformedKey) { _ = try ECPrivateKey(pem: corrupt.joined(separator: "\n") + "\n") }
        #expect(ERR_peek_error() == 0)
    }

    @Test func unreadableFiles() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        expectECError(.unreadableFile) { _ = try ECPrivateKey(contentsOfFile: dir.path + "/missing.p8") }
        do {
            _ = try ECPrivateKey(contentsOfFile: dir.path + "/missing.p8")
        } catch {
            #expect(error.message.contains("missing.p8") && error.message.contains("No such file"))
        }
        expectECError(.unreadableFile) { _ = try ECPrivateKey(contentsOfFile: dir.path) }  // a directory
        let big = try dir.file("big.p8", bytes: [UInt8](repeating: 0x41, count: 70_000))
        expectECError(.unreadableFile) { _ = try ECPrivateKey(contentsOfFile: big) }
    }

    @Test func errorCodesAreStable() {
        #expect(
            ECKeyError.Code.allCases.map(\.rawValue) == [
                "unreadable_file", "not_pem", "not_private_key", "encrypted_key", "malformed_key", "rsa_key", "not_ec",
                "wrong_curve", "invalid_public_key", "key_generation_failed", "signing_failed",
            ])
    }
}
