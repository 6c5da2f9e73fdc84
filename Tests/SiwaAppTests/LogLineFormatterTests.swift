import Foundation
import Logging
import SiwaCore
import Testing

@testable import SiwaApp

/// The log line a collector parses: one JSON object, keys in a fixed order then the metadata
/// sorted, every string escaped so that any message or value parses back to itself.
@Suite("Log line format")
struct LogLineFormatterTests {
    static let date = Date(timeIntervalSince1970: 1_752_572_190.719)

    /// A value that is neither a number nor a boolean: written as its description, quoted.
    struct Kind: CustomStringConvertible, Sendable {
        var description: String { "error" }
    }

    @Test("a line pinned byte for byte: fixed keys, then metadata sorted; numbers, booleans, arrays, objects")
    func pinned() {
        let formatter = LogLineFormatter(label: "siwa-notify", format: .json)
        let metadata: Logger.Metadata = [
            "type": "consent-revoked", "event_id": .stringConvertible(Int64(42)), "ok": .stringConvertible(true),
            "seconds": .stringConvertible(0.25), "ids": .array(["a", .stringConvertible(7)]),
            "nested": .dictionary(["z": "1", "a": .stringConvertible(-3)]), "kind": .stringConvertible(Kind()),
        ]
        let line = formatter.line(level: .info, message: "event applied", metadata: metadata, date: Self.date)
        #expect(
            line
                == #"{"ts":"2025-07-15T09:36:30.719Z","level":"info","logger":"siwa-notify","msg":"event applied","event_id":42,"#
                + #""ids":["a",7],"kind":"error","nested":{"a":-3,"z":"1"},"ok":true,"seconds":0.25,"type":"consent-revoked"}"#
                + "\n")
        #expect(
            LogLineFormatter(label: "x", format: .text).line(level: .warning, message: "m", metadata: ["b": "2", "a": "1"], date: Self.date)
                == "2025-07-15T09:36:30.719Z WARNING x: m a=1 b=2\n")
    }

    @Test("escapes: quote, backslash, every control character; other UTF-8 as it is; parses back to the same string")
    func escapes() throws {
        let formatter = LogLineFormatter(label: "l", format: .json)
        let line = formatter.line(level: .info, message: "a\"b\\c\nd\re\tf\u{01}g\u{1F}h\u{7F}é🙂", metadata: [:], date: Self.date)
        #expect(line.contains(#""msg":"a\"b\\c\nd\re\tf\u0001g\u001fh"# + "\u{7F}é🙂\"}"))
        #expect(formatter.line(level: .info, message: "\u{0}", metadata: [:], date: Self.date).contains(#""msg":"\u0000""#))
        // Every byte from 0x01 to 0x7F and a few scalars beyond, as a message, a key and a value
        // (NUL, escaped above, is one the parser refuses).
        var all = String((1..<0x80).map { Character(Unicode.Scalar(UInt8($0))) })
        all += "é€🙂\u{2028}"
        let parsed = try JSONParser.parse(formatter.line(level: .info, message: all, metadata: [all: .string(all)], date: Self.date))
        #expect(parsed["msg"]?.stringValue == all)
        #expect(parsed[all]?.stringValue == all)
        #expect(parsed["ts"]?.stringValue == "2025-07-15T09:36:30.719Z")
    }

    @Test("timestamps: zero-padded fields, milliseconds, a year of five digits whole")
    func timestamps() {
        #expect(LogLineFormatter.timestamp(Date(timeIntervalSince1970: 0.125)) == "1970-01-01T00:00:00.125Z")
        #expect(LogLineFormatter.timestamp(Date(timeIntervalSince1970: 1_000_000_000.5)) == "2001-09-09T01:46:40.500Z")
        #expect(LogLineFormatter.timestamp(Date(timeIntervalSince1970: 253_402_300_800)) == "10000-01-01T00:00:00.000Z")
    }
}
