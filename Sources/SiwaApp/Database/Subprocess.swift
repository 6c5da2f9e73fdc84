import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Runs a helper program (initdb, pg_ctl, runuser) to completion with `posix_spawn` and
/// `waitpid`, its output captured in a temporary file. (Foundation's `Process` can miss the
/// exit of a child whose own children keep running, which pg_ctl's postmaster does.)
enum Subprocess {
    static func run(_ command: [String]) -> (ok: Bool, output: String) {
        let outputPath = NSTemporaryDirectory() + "siwa-subprocess-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, command[0], &actions, nil, &argv, environ)
        guard spawned == 0 else { return (false, "cannot run \(command[0])") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = (status & 0x7f) == 0
        let code = (status >> 8) & 0xff
        return (exited && code == 0, output)
    }
}
