import ArgumentParser

/// How a command prints its result.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json
}

/// The output option every printing command takes: `--format text|json`, `--json` for short.
struct OutputOptions: ParsableArguments {
    @Option(help: ArgumentHelp("How to print the result: text (for people) or json (for scripts).", valueName: "FORMAT"))
    var format: OutputFormat = .text

    @Flag(help: "Same as --format json.")
    var json = false

    var isJSON: Bool { json || format == .json }

    func validate() throws {
        if json && format == .text && CommandLine.arguments.contains(where: { $0 == "--format" || $0.hasPrefix("--format=") }) {
            throw ValidationError("--json and --format text contradict each other; give one")
        }
    }
}
