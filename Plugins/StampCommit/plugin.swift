import Foundation
import PackagePlugin

/// Writes `BuildCommit.swift` (the commit the sources were built from) before every build of the
/// target it is applied to. A prebuild command runs on every build, so a new commit is never
/// missed; the script rewrites the file only when its text changes, so an unchanged commit
/// recompiles nothing. Outside a git checkout (a source archive) the commit is "unknown".
@main
struct StampCommit: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "generated")
        let script = """
            set -u
            mkdir -p "$2"
            commit=$(git -C "$1" rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
            if [ "$commit" != unknown ] && [ -n "$(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
              commit="$commit-dirty"
            fi
            printf '// Generated at build time by Plugins/StampCommit: not in git.\\nextension BuildInfo {\\n    public static let commit = "%s"\\n}\\n' "$commit" > "$2/BuildCommit.swift.new"
            if cmp -s "$2/BuildCommit.swift.new" "$2/BuildCommit.swift"; then rm -f "$2/BuildCommit.swift.new"
            else mv "$2/BuildCommit.swift.new" "$2/BuildCommit.swift"; fi
            """
        return [
            .prebuildCommand(
                displayName: "Stamping the commit",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: ["-c", script, "stamp", context.package.directoryURL.path, output.path],
                outputFilesDirectory: output)
        ]
    }
}
