#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a key file could not be read: the path and the system's reason (never its contents).
struct KeyFileReadError: Error {
    var message: String
}

/// Reads a small file (a key) into memory. Refuses files larger than `maxBytes`.
func readKeyFile(_ path: String, maxBytes: Int = 64 * 1024) throws(KeyFileReadError) -> [UInt8] {
    func failure(_ what: String, _ code: Int32) -> KeyFileReadError {
        KeyFileReadError(message: "cannot \(what) \(path): \(String(cString: strerror(code)))")
    }
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw failure("open", errno) }
    defer { close(fd) }
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw failure("read", errno)
        }
        if n == 0 { break }
        out.append(contentsOf: chunk[0..<n])
        guard out.count <= maxBytes else {
            throw KeyFileReadError(message: "\(path) is larger than \(maxBytes) bytes: not a key file")
        }
    }
    return out
}
