import ArgumentParser
import SiwaApp

/// `siwa-notify operator add|list|remove`: the console's named operators.
struct ConsoleOperatorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "operator",
        abstract: "The console's named operators: each signs in with their own token.",
        discussion: """
            Names are 1 to 63 characters: lowercase letters, digits, '.', '_', '-', starting with a letter or digit. \
            Only a token's SHA-256 is stored; the audit trail (siwa.operator_actions) names the operator.
            """,
        subcommands: [Add.self, List.self, Remove.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an operator and print their console token, once (only its hash is stored).")
        @Argument(help: "The operator's name.")
        var name: String
        @OptionGroup var options: ConfigurationOptions

        func run() throws {
            let conninfo = try operatorDatabase(try options.load(requireAudiences: false))
            let token: String
            do {
                token = try ConsoleOperators.add(name: name, conninfo: conninfo)
            } catch {
                throw CLIError("operator add: \(PermissionDenied.explained(error))")
            }
            print(token)
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the operators: name, created, last sign-in (UTC).")
        @OptionGroup var options: ConfigurationOptions

        func run() throws {
            let conninfo = try operatorDatabase(try options.load(requireAudiences: false))
            let operators: [ConsoleOperators.Operator]
            do {
                operators = try ConsoleOperators.list(conninfo: conninfo)
            } catch {
                throw CLIError("operator list: \(PermissionDenied.explained(error))")
            }
            let width = max(4, operators.map(\.name.count).max() ?? 0)
            func pad(_ s: String) -> String { s + String(repeating: " ", count: max(0, width - s.count)) }
            print(pad("name") + "  created (UTC)        last sign-in (UTC)")
            for o in operators { print(pad(o.name) + "  " + o.createdAt + "  " + (o.lastSignInAt ?? "never")) }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an operator: their token stops working and their console sessions end at once.")
        @Argument(help: "The operator's name.")
        var name: String
        @OptionGroup var options: ConfigurationOptions

        func run() throws {
            let conninfo = try operatorDatabase(try options.load(requireAudiences: false))
            do {
                let open = try ConsoleOperators.remove(name: name, conninfo: conninfo)
                print("removed operator \(name); ended \(open) open console session\(open == 1 ? "" : "s")")
            } catch {
                throw CLIError("operator remove: \(PermissionDenied.explained(error))")
            }
        }
    }
}
