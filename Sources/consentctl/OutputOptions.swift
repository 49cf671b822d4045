import ArgumentParser
import ConsentDomain
import ConsentLedger

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

    @OptionGroup var zone: ZoneOption

    var isJSON: Bool { json || format == .json }

    func validate() throws {
        if json && format == .text && CommandLine.arguments.contains(where: { $0 == "--format" || $0.hasPrefix("--format=") }) {
            throw ValidationError("--json and --format text contradict each other; give one")
        }
    }
}

/// The time zone people read times in: `--tz ZONE` or `$CONSENTCTL_TZ`, UTC by default. It
/// changes only how times are printed and how a typed `dd.MM.yyyy HH:mm` or date is read; JSON,
/// CSV and everything stored stay UTC (RFC 3339).
struct ZoneOption: ParsableArguments {
    @Option(name: .customLong("tz"), help: ArgumentHelp("Show times (and read dd.MM.yyyy HH:mm) in this zone: an IANA name (Europe/Berlin) or an offset (+01:00). Default: $CONSENTCTL_TZ, else UTC.", valueName: "ZONE"))
    var name: String?

    func validate() throws {
        guard let requested = name ?? environment("CONSENTCTL_TZ"), !requested.isEmpty else { return }
        displayZone = try loadZone(requested, option: name != nil ? "--tz" : "$CONSENTCTL_TZ")
    }
}

/// The zone human output uses; set once from `--tz` while the arguments are validated.
nonisolated(unsafe) var displayZone = ZoneRules.utc

/// A zone by offset or IANA name, from the system's time zone database.
func loadZone(_ name: String, option: String) throws -> ZoneRules {
    if let fixed = ZoneRules(offset: name) { return fixed }
    let folder = environment("TZDIR") ?? "/usr/share/zoneinfo"
    let safe = !name.isEmpty && name.first != "/" && !name.split(separator: "/").contains("..") && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "/_+-".contains($0)) }
    guard safe, let bytes = try? LocalFile.read(folder + "/" + name, limit: 1 << 20), let zone = ZoneRules(name: name, tzif: bytes) else {
        throw ValidationError("\(option) '\(name)' is not a time zone: give an IANA name from \(folder) (such as Europe/Berlin) or an offset such as +01:00")
    }
    return zone
}

extension Timestamp {
    /// `dd.MM.yyyy HH:mm` in the zone people asked for (UTC unless --tz).
    var shown: String { dayMonthYearTime(in: displayZone) }
}
