import ArgumentParser
import ConsentDomain
import ConsentLedger

struct SubjectsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subjects",
        abstract: "The subjects the ledger holds events for.",
        subcommands: [SubjectsList.self],
        defaultSubcommand: SubjectsList.self
    )
}

struct SubjectsList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the ids of the subjects with events, in byte order.",
        discussion: """
            Each id comes from a subject record the ledger's key signed, and is listed only when \
            the log holds events under its pseudonym.

            Examples:
              consentctl subjects list
              consentctl subjects list --prefix patient-10 --format json
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    @Option(help: ArgumentHelp("Only ids that start with this text.", valueName: "P"))
    var prefix: String = ""

    func run() throws {
        try reporting(json: output.isJSON) {
            let ids = try root.openLedger().subjectIDs(prefix: prefix)
            if output.isJSON {
                printJSON(.object(["subjects": .array(ids.map(JSONValue.string)), "count": .int(Int64(ids.count))]))
                return
            }
            if ids.isEmpty {
                print(prefix.isEmpty ? "No subject has events yet." : "No subject id starts with '\(prefix)'.")
                return
            }
            for id in ids { print(id) }
        }
    }
}

/// What commands say about a subject the ledger holds no events for: that is a normal answer
/// (every feature off, rules R1 and R8), said plainly, with the known ids it may be a typo of.
func unknownSubjectNote(_ ledger: Ledger, _ subjectID: String) -> String {
    let near = (try? ledger.subjectsNear(subjectID)) ?? []
    let hint = near.isEmpty ? "" : " Did you mean " + near.map { "'\($0)'" }.joined(separator: " or ") + "?"
    return "Nothing was ever recorded for '\(subjectID)'.\(hint)"
}

/// The `--must-exist` flag: an unknown subject becomes a usage error, for scripts.
struct SubjectPresence: ParsableArguments {
    @Flag(help: "Fail (exit 64) when the ledger holds no events for the subject, instead of answering for a subject with none.")
    var mustExist = false

    func check(_ ledger: Ledger, _ subjectID: String) throws -> Bool {
        let known = try subjectHasEvents(ledger, subjectID)
        if !known && mustExist { throw ConsentError.notFound(.subject, unknownSubjectNote(ledger, subjectID)) }
        return known
    }
}

/// Whether the ledger holds events for the subject (``Ledger/subjectIDs(prefix:)``).
func subjectHasEvents(_ ledger: Ledger, _ subjectID: String) throws -> Bool {
    try ledger.hasEvents(subjectID: subjectID)
}

/// `export` and `prove-state` have nothing to prove for a subject without events: a usage error.
func requireEvents(_ ledger: Ledger, _ subjectID: String, for what: String) throws {
    guard try subjectHasEvents(ledger, subjectID) else { throw noEvents(ledger, subjectID, for: what) }
}

/// The error of `export` and `prove-state` for a subject without events.
func noEvents(_ ledger: Ledger, _ subjectID: String, for what: String) -> ConsentError {
    .notFound(.subject, unknownSubjectNote(ledger, subjectID) + " There is nothing for \(what) to prove.")
}

/// The shells `consentctl completion` writes a script for.
enum Shell: String, ExpressibleByArgument, CaseIterable {
    case bash, zsh, fish

    var completionShell: CompletionShell {
        switch self {
        case .bash: .bash
        case .zsh: .zsh
        case .fish: .fish
        }
    }
}

struct Completion: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "completion",
        abstract: "Print a shell completion script.",
        discussion: """
            Examples:
              consentctl completion bash > /etc/bash_completion.d/consentctl
              consentctl completion zsh > "${fpath[1]}/_consentctl"
              consentctl completion fish > ~/.config/fish/completions/consentctl.fish
            """
    )

    @Argument(help: ArgumentHelp("bash, zsh or fish.", valueName: "SHELL"))
    var shell: Shell

    func run() throws {
        Swift.print(ConsentCtl.completionScript(for: shell.completionShell))
    }
}
