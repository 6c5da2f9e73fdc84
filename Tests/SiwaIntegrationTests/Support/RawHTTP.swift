import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A bare TCP client for requests curl will not make (chunked bodies of any size, lies in
/// Content-Length, slow senders): writes bytes, reads until the server closes or `timeout`.
struct RawHTTP {
    let port: UInt16

    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Opens a connection to 127.0.0.1:port.
    func connect() throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw Failure(description: "connect failed")
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// Writes all bytes; false when the peer closed (EPIPE/ECONNRESET).
    @discardableResult
    static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }

    /// Reads until EOF or timeout.
    static func readAll(_ fd: Int32) -> String {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            data.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Sends `head` + `body` in one go and returns the raw response.
    func exchange(_ head: String, body: [UInt8] = []) throws -> String {
        let fd = try connect()
        defer { close(fd) }
        RawHTTP.write(fd, Array(head.utf8) + body)
        return RawHTTP.readAll(fd)
    }

    /// The status code of a raw response ("HTTP/1.1 413 ..." → 413).
    static func status(_ response: String) -> Int? {
        let parts = response.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/") else { return nil }
        return Int(parts[1])
    }
}
