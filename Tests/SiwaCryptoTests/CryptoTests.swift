import CCrypto
import Foundation
import SiwaCore
import SiwaCrypto
import Synchronization
import Testing

// MARK: - Helpers

func base64URLDecode(_ string: String) -> [UInt8] {
    var s = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while s.count % 4 != 0 { s += "=" }
    guard let data = Data(base64Encoded: s) else {
        Issue.record("bad base64url in test vector")
        return []
    }
    return [UInt8](data)
}

func hexBytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var it = hex.makeIterator()
    while let hi = it.next(), let lo = it.next() {
        out.append(UInt8(String([hi, lo]), radix: 16)!)
    }
    return out
}

/// Keys are expensive to generate; share them across tests.
enum SharedKeys {
    static let key2048: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)
    static let other2048: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)
}

/// A random odd big-endian integer with exactly `bits` bits.
func syntheticModulus(bits: Int) -> [UInt8] {
    var bytes = SecureRandom.bytes((bits + 7) / 8)
    let topBits = bits % 8 == 0 ? 8 : bits % 8
    bytes[0] &= UInt8(0xff >> (8 - topBits))
    bytes[0] |= UInt8(1 << (topBits - 1))
    bytes[bytes.count - 1] |= 1
    return bytes
}

let message = Array("header.payload".utf8)

// MARK: - Sign / verify

@Suite struct RS256Tests {
    @Test func signVerifyRoundTrip() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        #expect(pub.bits == 2048)
        #expect(key.bits == 2048)
        #expect(key.exponent == [0x01, 0x00, 0x01])
        #expect(key.modulus.count == 256 && key.modulus[0] != 0)
        let sig = try key.signRS256(message)
        #expect(sig.count == 256)
        #expect(pub.verifyRS256(message: message, signature: sig))
        // PKCS#1 v1.5 is deterministic.
        #expect(try key.signRS256(message) == sig)
        // Empty message is a valid input.
        let emptySig = try key.signRS256([])
        #expect(pub.verifyRS256(message: [], signature: emptySig))
        #expect(!pub.verifyRS256(message: [0], signature: emptySig))
    }

    @Test func tamperedMessageFails() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        let sig = try key.signRS256(message)
        for index in message.indices {
            var tampered = message
            tampered[index] ^= 0x01
            #expect(!pub.verifyRS256(message: tampered, signature: sig))
        }
        #expect(!pub.verifyRS256(message: message + [0], signature: sig))
        #expect(!pub.verifyRS256(message: Array(message.dropLast()), signature: sig))
        #expect(!pub.verifyRS256(message: [], signature: sig))
    }

    @Test func tamperedSignatureFails() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        let sig = try key.signRS256(message)
        for index in [0, 1, 100, 254, 255] {
            var tampered = sig
            tampered[index] ^= 0x80
            #expect(!pub.verifyRS256(message: message, signature: tampered))
        }
        #expect(!pub.verifyRS256(message: message, signature: [UInt8](repeating: 0, count: 256)))
        #expect(!pub.verifyRS256(message: message, signature: [UInt8](repeating: 0xff, count: 256)))
        // Signature representative equal to the modulus (out of range).
        #expect(!pub.verifyRS256(message: message, signature: key.modulus))
    }

    @Test func wrongKeyFails() throws {
        let sig = try SharedKeys.key2048.signRS256(message)
        let otherPub = try SharedKeys.other2048.publicKey()
        #expect(!otherPub.verifyRS256(message: message, signature: sig))
        #expect(otherPub.verifyRS256(message: message, signature: try SharedKeys.other2048.signRS256(message)))
    }

    @Test func wrongLengthSignaturesFail() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        let sig = try key.signRS256(message)
        #expect(!pub.verifyRS256(message: message, signature: []))
        #expect(!pub.verifyRS256(message: message, signature: Array(sig.dropLast())))
        #expect(!pub.verifyRS256(message: message, signature: Array(sig.prefix(128))))
        #expect(!pub.verifyRS256(message: message, signature: sig + [0]))
        // A leading zero makes the integer equal but the encoding over-long.
        #expect(!pub.verifyRS256(message: message, signature: [0] + sig))
        #expect(!pub.verifyRS256(message: message, signature: sig + sig))
        // Sanity: the untouched signature still verifies.
        #expect(pub.verifyRS256(message: message, signature: sig))
    }

    @Test func failedVerifyLeavesErrorQueueEmpty() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        var sig = try key.signRS256(message)
        sig[10] ^= 1
        ERR_clear_error()
        #expect(!pub.verifyRS256(message: message, signature: sig))
        #expect(ERR_peek_error() == 0)
        #expect(!pub.verifyRS256(message: message, signature: [1, 2, 3]))
        #expect(ERR_peek_error() == 0)
    }

    @Test func publicKeyFromLeadingZeroBytesIsSameKey() throws {
        let key = SharedKeys.key2048
        let sig = try key.signRS256(message)
        let pub = try RSAPublicKey(modulus: [0, 0] + key.modulus, exponent: [0, 0, 0] + key.exponent)
        #expect(pub.bits == 2048)
        #expect(pub.verifyRS256(message: message, signature: sig))
    }

    @Test func concurrentVerificationWithTasks() async throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        let sig = try key.signRS256(message)
        var badSig = sig
        badSig[200] ^= 0x04
        let good = sig, bad = badSig
        let results = await withTaskGroup(of: (Int, Bool).self) { group in
            for i in 0..<400 {
                group.addTask {
                    (i, pub.verifyRS256(message: message, signature: i % 2 == 0 ? good : bad))
                }
            }
            var out: [(Int, Bool)] = []
            for await r in group { out.append(r) }
            return out
        }
        #expect(results.count == 400)
        for (i, ok) in results {
            #expect(ok == (i % 2 == 0), "task \(i)")
        }
    }

    @Test func concurrentVerificationWithThreads() throws {
        let key = SharedKeys.key2048
        let pub = try key.publicKey()
        let sig = try key.signRS256(message)
        let otherSig = try SharedKeys.other2048.signRS256(message)
        let mismatches = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 64) { i in
            for j in 0..<20 {
                let expected = (i + j) % 3 != 0
                let got = pub.verifyRS256(message: message, signature: expected ? sig : otherSig)
                if got != expected { mismatches.withLock { $0 += 1 } }
            }
        }
        #expect(mismatches.withLock { $0 } == 0)
    }
}

// MARK: - Key validation

@Suite struct KeyValidationTests {
    @Test func generated1024BitKeyIsRejectedOnImport() throws {
        let small = try RSAPrivateKey.generate(bits: 1024)
        #expect(small.bits == 1024)
        #expect(throws: CryptoError(code: .keyTooSmall)) { try small.publicKey() }
        #expect(throws: CryptoError(code: .keyTooSmall)) {
            try RSAPublicKey(modulus: small.modulus, exponent: small.exponent)
        }
        // Signing with it still works (generation is allowed for tests).
        #expect(try small.signRS256(message).count == 128)
    }

    @Test func modulusSizeBoundaries() throws {
        let e: [UInt8] = [1, 0, 1]
        #expect(throws: CryptoError(code: .keyTooSmall)) {
            try RSAPublicKey(modulus: syntheticModulus(bits: 2047), exponent: e)
        }
        #expect(try RSAPublicKey(modulus: syntheticModulus(bits: 2048), exponent: e).bits == 2048)
        #expect(try RSAPublicKey(modulus: syntheticModulus(bits: 8192), exponent: e).bits == 8192)
        #expect(throws: CryptoError(code: .keyTooLarge)) {
            try RSAPublicKey(modulus: syntheticModulus(bits: 8193), exponent: e)
        }
        // Leading zeros do not count toward size.
        #expect(throws: CryptoError(code: .keyTooSmall)) {
            try RSAPublicKey(modulus: [UInt8](repeating: 0, count: 200) + syntheticModulus(bits: 1024), exponent: e)
        }
    }

    @Test func emptyOrEvenModulusRejected() {
        #expect(throws: CryptoError(code: .invalidKey)) { try RSAPublicKey(modulus: [], exponent: [1, 0, 1]) }
        #expect(throws: CryptoError(code: .invalidKey)) { try RSAPublicKey(modulus: [0, 0, 0], exponent: [1, 0, 1]) }
        var even = syntheticModulus(bits: 2048)
        even[even.count - 1] &= 0xfe
        #expect(throws: CryptoError(code: .invalidKey)) { try RSAPublicKey(modulus: even, exponent: [1, 0, 1]) }
    }

    @Test(
        arguments: [
            [UInt8](),  // missing
            [0],  // zero
            [0, 0, 1],  // one (after leading zeros)
            [1],  // one
            [2],  // even
            [1, 0, 0],  // 65536: even
            [1, 0, 0, 0, 0, 0, 0, 0, 1],  // 65 bits, odd
        ] as [[UInt8]])
    func badExponentRejected(exponent: [UInt8]) {
        #expect(throws: CryptoError(code: .invalidKey)) {
            try RSAPublicKey(modulus: SharedKeys.key2048.modulus, exponent: exponent)
        }
    }

    @Test func acceptableExponents() throws {
        let n = SharedKeys.key2048.modulus
        #expect(try RSAPublicKey(modulus: n, exponent: [3]).bits == 2048)
        #expect(try RSAPublicKey(modulus: n, exponent: [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).bits == 2048)
        #expect(try RSAPublicKey(modulus: n, exponent: [0, 0x80, 0, 0, 0, 0, 0, 0, 1]).bits == 2048)
    }

    @Test func generateRejectsOutOfRangeSizes() {
        #expect(throws: CryptoError(code: .keyTooSmall)) { try RSAPrivateKey.generate(bits: 512) }
        #expect(throws: CryptoError(code: .keyTooSmall)) { try RSAPrivateKey.generate(bits: 0) }
        #expect(throws: CryptoError(code: .keyTooLarge)) { try RSAPrivateKey.generate(bits: 16384) }
    }

    @Test func errorDescriptionIsCodeOnly() {
        let error = CryptoError(code: .keyTooSmall)
        #expect(error.description == "crypto error: keyTooSmall")
        #expect("\(CryptoError(code: .invalidPEM))" == "crypto error: invalidPEM")
    }
}

// MARK: - PEM

@Suite struct PEMTests {
    @Test func pkcs8RoundTrip() throws {
        let key = SharedKeys.key2048
        let pem = key.pemRepresentation
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        #expect(pem.hasSuffix("-----END PRIVATE KEY-----\n"))
        let parsed = try RSAPrivateKey(pem: pem)
        #expect(parsed.modulus == key.modulus)
        #expect(parsed.exponent == key.exponent)
        #expect(parsed.bits == 2048)
        #expect(try parsed.signRS256(message) == key.signRS256(message))
        #expect(parsed.pemRepresentation == pem)
    }

    @Test func pkcs1PEMAccepted() throws {
        let key = try RSAPrivateKey(pem: Vectors.pkcs1PrivateKeyPEM)
        #expect(key.bits == 2048)
        #expect(key.modulus == base64URLDecode(Vectors.jwkN))
        #expect(key.exponent == base64URLDecode(Vectors.jwkE))
        #expect(key.pemRepresentation.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test func garbageRejected() {
        let truncated = String(Vectors.pkcs1PrivateKeyPEM.prefix(400)) + "\n-----END RSA PRIVATE KEY-----\n"
        var corrupted = Array(Vectors.pkcs1PrivateKeyPEM.utf8)
        corrupted[100] = UInt8(ascii: "!")
        for pem in [
            "",
            "not a pem",
            "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            truncated,
            String(decoding: corrupted, as: UTF8.self),
            Vectors.publicKeyPEM,
        ] {
            #expect(throws: CryptoError(code: .invalidPEM)) { try RSAPrivateKey(pem: pem) }
        }
        #expect(ERR_peek_error() == 0)
    }

    @Test func encryptedPEMRefusedWithoutPrompting() {
        #expect(throws: CryptoError(code: .invalidPEM)) {
            try RSAPrivateKey(pem: Vectors.encryptedPrivateKeyPEM)
        }
    }

    @Test func nonRSAKeyRejected() {
        #expect(throws: CryptoError(code: .invalidKey)) { try RSAPrivateKey(pem: Vectors.ecPrivateKeyPEM) }
    }
}

// MARK: - Interop with the openssl CLI

@Suite struct InteropTests {
    @Test func verifiesOpenSSLGeneratedSignature() throws {
        let pub = try RSAPublicKey(modulus: base64URLDecode(Vectors.jwkN), exponent: base64URLDecode(Vectors.jwkE))
        #expect(pub.bits == 2048)
        let msg = Array(Vectors.message.utf8)
        let sig = base64URLDecode(Vectors.signature)
        #expect(sig.count == 256)
        #expect(pub.verifyRS256(message: msg, signature: sig))
        #expect(!pub.verifyRS256(message: msg + Array(".".utf8), signature: sig))
        #expect(!pub.verifyRS256(message: msg, signature: try SharedKeys.key2048.signRS256(msg)))
    }

    @Test func signingMatchesOpenSSLCLIByteForByte() throws {
        let key = try RSAPrivateKey(pem: Vectors.pkcs1PrivateKeyPEM)
        let sig = try key.signRS256(Array(Vectors.message.utf8))
        #expect(sig == base64URLDecode(Vectors.signature))
    }
}

// MARK: - Digests and randomness

@Suite struct DigestTests {
    @Test func sha256KnownAnswers() {
        #expect(SHA256.hexDigest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hexDigest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hash(Array("abc".utf8)) == hexBytes("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        #expect(
            SHA256.hexDigest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(SHA256.hexDigest("é") == SHA256.hex(SHA256.hash([0xc3, 0xa9])))
    }

    @Test func hmacSHA256RFC4231() {
        // RFC 4231 test case 2.
        #expect(
            HMACSHA256.authenticate(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
                == hexBytes("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
        // RFC 4231 test case 1.
        #expect(
            HMACSHA256.authenticate(key: [UInt8](repeating: 0x0b, count: 20), message: Array("Hi There".utf8))
                == hexBytes("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"))
        // RFC 4231 test case 6: key longer than the block size.
        #expect(
            HMACSHA256.authenticate(
                key: [UInt8](repeating: 0xaa, count: 131),
                message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))
                == hexBytes("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"))
        // Empty key and message.
        #expect(
            HMACSHA256.authenticate(key: [], message: [])
                == hexBytes("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"))
    }

    @Test("HMAC-SHA256 signs forwards exactly as the Standard Webhooks reference vector")
    func standardWebhooksVector() throws {
        // From the Standard Webhooks specification and its libraries' tests.
        let key = try StandardWebhookSecret.parse(file: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").get()[0]
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let header = StandardWebhook.signature(
            id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body, keys: [key], mac: HMACSHA256.authenticate)
        #expect(header == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(
            StandardWebhook.verify(
                signatureHeader: "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
                timestamp: 1_614_265_330, body: body, key: key, mac: HMACSHA256.authenticate))
    }

    @Test func secureRandom() {
        #expect(SecureRandom.bytes(0).isEmpty)
        let a = SecureRandom.bytes(32), b = SecureRandom.bytes(32)
        #expect(a.count == 32 && b.count == 32)
        #expect(a != b)
        #expect(a != [UInt8](repeating: 0, count: 32))
        #expect(SecureRandom.bytes(100_000).count == 100_000)
    }
}
