/// Strict RFC 8259 JSON parser over UTF-8 bytes.
///
/// Rejects: invalid UTF-8 (including encoded surrogates and overlong forms), a byte order mark,
/// lone or unpaired surrogate escapes, the escape `\u0000` (PostgreSQL `jsonb` cannot store it),
/// raw control characters in strings, duplicate object keys (compared as Swift `String`s, i.e. also
/// canonically equivalent ones), trailing non-whitespace, nesting deeper than `maxDepth`, numbers
/// that are not finite doubles, leading zeros, and every other deviation from the grammar.
public enum JSONParser {
    /// Parses `bytes` as one JSON text.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = 32) throws(JSONError) -> JSONValue {
        var parser = Parser(bytes: bytes, maxDepth: maxDepth)
        return try parser.parseDocument()
    }

    /// Parses the UTF-8 encoding of `text` as one JSON text.
    public static func parse(_ text: String, maxDepth: Int = 32) throws(JSONError) -> JSONValue {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }
}

private struct Parser {
    let bytes: [UInt8]
    let maxDepth: Int
    var index = 0
    var depth = 0
    var scratch: [UInt8] = []

    init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    func error(_ message: String, at offset: Int? = nil) -> JSONError {
        JSONError(offset: offset ?? index, message: message)
    }

    mutating func parseDocument() throws(JSONError) -> JSONValue {
        skipWhitespace()
        guard index < bytes.count else { throw error("unexpected end of input") }
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw error("unexpected data after the JSON value") }
        return value
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(JSONError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let start = index
        let utf8 = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for expected in utf8 {
            guard index < bytes.count, bytes[index] == expected else { throw error("invalid literal", at: start) }
            index += 1
        }
    }

    mutating func enterContainer() throws(JSONError) {
        depth += 1
        if depth > maxDepth { throw error("nesting too deep") }
    }

    mutating func parseObject() throws(JSONError) -> JSONValue {
        try enterContainer()
        index += 1  // '{'
        // Room for a JWT's claims at once: growing from empty rehashes every member at each
        // doubling (bench/README.md, "`receive`, profiled").
        var members = [String: JSONValue](minimumCapacity: 8)
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            guard bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let keyOffset = index
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            guard bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            if members.updateValue(value, forKey: key) != nil {
                throw error("duplicate object key", at: keyOffset)
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
            case UInt8(ascii: "}"):
                index += 1
                depth -= 1
                return .object(members)
            default:
                throw error("expected ',' or '}'")
            }
        }
    }

    mutating func parseArray() throws(JSONError) -> JSONValue {
        try enterContainer()
        index += 1  // '['
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return .array(elements)
            default:
                throw error("expected ',' or ']'")
            }
        }
    }

    // MARK: Strings

    mutating func parseString() throws(JSONError) -> String {
        index += 1  // opening quote
        // Plain bytes (and validated multi-byte sequences) are taken as runs; only an escape
        // copies through `scratch`. A string without escapes is made from the input directly.
        var runStart = index
        var escaped = false
        while true {
            guard index < bytes.count else { throw error("unterminated string") }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                let run = bytes[runStart..<index]
                index += 1
                // Validated UTF-8 either way, so decoding never substitutes.
                if !escaped { return String(decoding: run, as: UTF8.self) }
                scratch.append(contentsOf: run)
                return String(decoding: scratch, as: UTF8.self)
            case UInt8(ascii: "\\"):
                if !escaped {
                    scratch.removeAll(keepingCapacity: true)
                    escaped = true
                }
                scratch.append(contentsOf: bytes[runStart..<index])
                try parseEscape()
                runStart = index
            case 0x00..<0x20:
                throw error("control character in string")
            case 0x20..<0x80:
                index += 1
            default:
                try skipMultiByteSequence()
            }
        }
    }

    /// Validates one UTF-8 multi-byte sequence at `index` (no overlongs, no surrogates, nothing
    /// above U+10FFFF) and steps over it.
    mutating func skipMultiByteSequence() throws(JSONError) {
        let lead = bytes[index]
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            secondHigh = 0x9F
        case 0xF0:
            length = 4
            secondLow = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            secondHigh = 0x8F
        default: throw error("invalid UTF-8")
        }
        guard index + length <= bytes.count else { throw error("invalid UTF-8") }
        let second = bytes[index + 1]
        guard second >= secondLow, second <= secondHigh else { throw error("invalid UTF-8") }
        var i = 2
        while i < length {
            guard bytes[index + i] & 0xC0 == 0x80 else { throw error("invalid UTF-8") }
            i += 1
        }
        index += length
    }

    mutating func parseEscape() throws(JSONError) {
        let start = index
        index += 1  // backslash
        guard index < bytes.count else { throw error("unterminated string") }
        let c = bytes[index]
        index += 1
        switch c {
        case UInt8(ascii: "\""): scratch.append(0x22)
        case UInt8(ascii: "\\"): scratch.append(0x5C)
        case UInt8(ascii: "/"): scratch.append(0x2F)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            let unit = try parseHex4()
            var scalar: UInt32
            switch unit {
            case 0:
                throw error("\\u0000 is not allowed", at: start)
            case 0xD800...0xDBFF:
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw error("unpaired surrogate escape", at: start)
                }
                index += 2
                let low = try parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate escape", at: start) }
                scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
            case 0xDC00...0xDFFF:
                throw error("unpaired surrogate escape", at: start)
            default:
                scalar = UInt32(unit)
            }
            appendUTF8(scalar)
        default:
            throw error("invalid escape", at: start)
        }
    }

    mutating func parseHex4() throws(JSONError) -> UInt16 {
        guard index + 4 <= bytes.count else { throw error("invalid \\u escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let b = bytes[index]
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | (scalar >> 6)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | (scalar >> 12)))
            scratch.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        default:
            scratch.append(UInt8(0xF0 | (scalar >> 18)))
            scratch.append(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            scratch.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        }
    }

    // MARK: Numbers

    func isDigit(_ i: Int) -> Bool {
        i < bytes.count && bytes[i] >= UInt8(ascii: "0") && bytes[i] <= UInt8(ascii: "9")
    }

    mutating func parseNumber() throws(JSONError) -> Double {
        let start = index
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard isDigit(index) else { throw error("invalid number", at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if isDigit(index) { throw error("leading zero in number", at: start) }
        } else {
            while isDigit(index) { index += 1 }
        }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard isDigit(index) else { throw error("invalid number", at: start) }
            while isDigit(index) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard isDigit(index) else { throw error("invalid number", at: start) }
            while isDigit(index) { index += 1 }
        }
        let digitsStart = negative ? start + 1 : start
        // Fast path: up to 15 digits are exact in a Double.
        if isInteger, index - digitsStart <= 15 {
            var value: Int64 = 0
            for i in digitsStart..<index { value = value * 10 + Int64(bytes[i] - UInt8(ascii: "0")) }
            if negative { return value == 0 ? -0.0 : -Double(value) }
            return Double(value)
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw error("number out of range", at: start)
        }
        return value
    }
}
