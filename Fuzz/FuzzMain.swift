// libFuzzer entry points of the one fuzz binary (`scripts/fuzz TARGET`): every target lives in
// this binary, and `SIWA_FUZZ_TARGET` (set by scripts/fuzz) picks the one to run, so SiwaCore is
// compiled once for all of them. See Fuzz/README.md.

#if canImport(Glibc)
import Glibc
#endif

/// One parser under fuzz: its checks for one input and, optionally, its own mutator.
struct FuzzTarget: Sendable {
    var name: String
    var setUp: @Sendable () -> Void = {}
    var test: @Sendable ([UInt8]) -> Void
    /// Structure-aware mutation: new input bytes, or nil for libFuzzer's byte-level mutation.
    var mutate: @Sendable ([UInt8], inout SplitMix64) -> [UInt8]? = { _, _ in nil }
    /// One mutation in this many is libFuzzer's byte-level one, whatever `mutate` would do.
    var plainMutationOneIn = 3
}

enum FuzzTargets {
    static let all: [FuzzTarget] = [
        FuzzTarget(
            name: "verifier", setUp: VerifierTarget.initialize, test: VerifierTarget.testOneInput,
            mutate: { body, rng in StructuredMutator.mutate(body, &rng) }, plainMutationOneIn: 5),
        IDTokenTarget.target,
        AppleAnswersTarget.target,
        APIBodiesTarget.target,
        APITokenFileTarget.target,
        ForwardSecretFileTarget.target,
        TransferListTarget.target,
    ]

    nonisolated(unsafe) static var selected = all[0]
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> CInt {
    let name = getenv("SIWA_FUZZ_TARGET").map { String(cString: $0) } ?? "verifier"
    guard let target = FuzzTargets.all.first(where: { $0.name == name }) else {
        let names = FuzzTargets.all.map(\.name).joined(separator: ", ")
        let message = Array("fuzz: unknown SIWA_FUZZ_TARGET \(name) (one of: \(names))\n".utf8)
        _ = message.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        exit(2)
    }
    FuzzTargets.selected = target
    target.setUp()
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.selected.test(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

@_extern(c, "LLVMFuzzerMutate")
func LLVMFuzzerMutate(_ data: UnsafeMutablePointer<UInt8>, _ size: Int, _ maxSize: Int) -> Int

@_cdecl("LLVMFuzzerCustomMutator")
public func fuzzCustomMutator(_ data: UnsafeMutablePointer<UInt8>, _ size: Int, _ maxSize: Int, _ seed: UInt32) -> Int {
    let target = FuzzTargets.selected
    var rng = SplitMix64(state: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 &+ 1)
    if rng.below(target.plainMutationOneIn) == 0 { return LLVMFuzzerMutate(data, size, maxSize) }  // plain byte-level mutation
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let out = target.mutate(input, &rng), out.count <= maxSize, out != input else {
        return LLVMFuzzerMutate(data, size, maxSize)
    }
    out.withUnsafeBufferPointer { data.update(from: $0.baseAddress!, count: out.count) }
    return out.count
}

// MARK: - Shared helpers of the parser targets

enum FuzzCheck {
    /// True when `needle` (at least 8 bytes) occurs in `haystack`: a message that echoes a secret.
    static func leaks(_ haystack: String, _ needle: some StringProtocol) -> Bool {
        needle.utf8.count >= 8 && FuzzChecks.contains(haystack, String(needle))
    }

    /// The lines of a file as the parsers split it (on `\n`, empty ones kept).
    static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
    }

    static func utf8Equal(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (let x?, let y?): return x.utf8.elementsEqual(y.utf8)
        default: return false
        }
    }
}

/// Mutates one member of a JSON object body (set to an interesting value, delete, re-type).
enum JSONObjectMutator {
    static func mutate(_ body: [UInt8], keys: [String], values: [String: [JSONValue]], _ rng: inout SplitMix64) -> [UInt8]? {
        guard var object = (try? JSONParser.parse(body))?.objectValue else { return nil }
        let key = rng.below(5) == 0 && !object.isEmpty ? rng.pick(Array(object.keys)) : rng.pick(keys)
        switch rng.below(6) {
        case 0: object[key] = nil
        case 1:
            // The member's string, mutated byte-wise.
            object[key] = .string(StructuredMutator.mutateText(object[key]?.stringValue ?? ""))
        default:
            if let own = values[key], rng.below(3) != 0 {
                object[key] = rng.pick(own)
            } else {
                object[key] = rng.pick(StructuredMutator.strings + StructuredMutator.times)
            }
        }
        return Array(JSONValue.object(object).serialized().utf8)
    }
}

/// Line-level mutation of a line-based file: insert, duplicate, drop, or replace a line.
enum LineMutator {
    static func mutate(_ bytes: [UInt8], interesting: [String], _ rng: inout SplitMix64) -> [UInt8]? {
        var lines = FuzzCheck.lines(bytes).map { Array($0) }
        let at = rng.below(lines.count + 1)
        switch rng.below(5) {
        case 0, 1: lines.insert(Array(rng.pick(interesting).utf8), at: at)
        case 2: if at < lines.count { lines.insert(lines[at], at: at) }
        case 3: if at < lines.count { lines.remove(at: at) }
        default: if at < lines.count { lines[at] = StructuredMutator.mutateBytes(lines[at]) }
        }
        return Array(lines.joined(separator: [UInt8(ascii: "\n")]))
    }
}
