import SiwaCrypto
import Testing

@Suite("Hex")
struct HexTests {
    @Test func roundTripAndRefusals() {
        let bytes: [UInt8] = [0x00, 0x0a, 0x7f, 0x80, 0xff]
        #expect(Hex.encode(bytes) == "000a7f80ff")
        #expect(Hex.decode(Array("000a7f80ff".utf8)) == bytes)
        #expect(Hex.decode(Array("000A7F80FF".utf8)) == bytes)
        #expect(Hex.decode(Array("".utf8)) == [])
        #expect(Hex.decode(Array("abc".utf8)) == nil)  // odd length
        #expect(Hex.decode(Array("0g".utf8)) == nil)  // not a digit
    }
}
