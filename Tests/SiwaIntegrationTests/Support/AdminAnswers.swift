import Foundation
import Synchronization

/// Answers of the admin listener seen by the tests, for the check against docs/openapi.yaml
/// (`scripts/openapi-check responses`): with `SIWA_OPENAPI_RECORD` set (scripts/test sets it),
/// every answer from a registered admin listener is appended to that file as a JSON line, and
/// scripts/test checks the file after the run, so no test of the API can see an answer the
/// description does not document.
enum AdminAnswers {
    private static let bases = Mutex<Set<String>>([])
    private static let file = Mutex<FileHandle?>(nil)

    /// From now on, answers from `baseURL` (`http://127.0.0.1:PORT`) are admin answers.
    static func register(_ baseURL: String) {
        bases.withLock { _ = $0.insert(baseURL) }
    }

    /// `baseURL`'s listener has stopped: its port may next belong to another test's server (a
    /// fake Apple), whose answers are no admin answers.
    static func unregister(_ baseURL: String) {
        _ = bases.withLock { $0.remove(baseURL) }
    }

    /// One answer as the line `scripts/openapi-check responses` reads.
    static func line(method: String, path: String, status: Int, headers: [String: String], body: [UInt8]) -> String {
        let contentType = headers.first { $0.key.lowercased() == "content-type" }?.value ?? ""
        let object: [String: Any] = [
            "method": method, "path": path, "status": status, "content_type": contentType,
            "body": String(decoding: body, as: UTF8.self),
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Records the answer when `url` is on a registered admin listener and recording is on.
    static func record(method: String, url: String, status: Int, headers: [String: String], body: [UInt8]) {
        guard let target = ProcessInfo.processInfo.environment["SIWA_OPENAPI_RECORD"], !target.isEmpty else { return }
        guard let base = bases.withLock({ b in b.first { url.hasPrefix($0 + "/") } }) else { return }
        var path = String(url.dropFirst(base.count))
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        let text = line(method: method, path: path, status: status, headers: headers, body: body)
        file.withLock { handle in
            if handle == nil {
                if !FileManager.default.fileExists(atPath: target) { _ = FileManager.default.createFile(atPath: target, contents: nil) }
                handle = FileHandle(forWritingAtPath: target)
                _ = try? handle?.seekToEnd()
            }
            try? handle?.write(contentsOf: Data(text.utf8))
        }
    }
}
