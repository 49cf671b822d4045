import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// `--out -` is standard output everywhere a file is written, and a folder that does not exist
/// is a usage error (64) that names it, never "no ledger".
@Suite(.serialized) struct OutputTests {
    @Test(arguments: [["export", "--subject", "alice"], ["export", "--all"], ["prove-state", "--subject", "alice"], ["report", "--format", "html"], ["report", "--html"]])
    func outDashIsStandardOutputAndAMissingFolderIsAUsageError(_ command: [String]) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let flag = command.last == "--html" ? [String]() : ["--out"]
        let piped = try ConsentctlTests.run(command + flag + ["-"], ledger: ledger)
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stdout.hasPrefix("{") || piped.stdout.hasPrefix("<!DOCTYPE html>"), "the file itself on standard output")
        #expect(piped.stderr.contains("to standard output"), "the message goes to standard error")
        #expect(!FileManager.default.fileExists(atPath: FileManager.default.currentDirectoryPath + "/-"), "no file named -")
        let missing = try ConsentctlTests.run(command + flag + [dir + "/no-such-folder/out"], ledger: ledger)
        #expect(missing.status == 64 && missing.stderr.contains("folder \(dir)/no-such-folder does not exist"), "\(missing.stderr)")
    }

    /// `--out` naming a FIFO or a device writes into it: a rename over it would replace the
    /// device itself (`--out /dev/null` once turned /dev/null into a regular file). A FIFO that
    /// nobody reads fails at once instead of hanging.
    @Test(arguments: [["export", "--subject", "alice", "--format", "fhir"], ["export", "--all", "--format", "fhir"]])
    func outIntoAFIFOWritesThroughItAndLeavesItAFIFO(_ command: [String]) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger", fifo = dir + "/pipe"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(mkfifo(fifo, 0o600) == 0)
        let unread = try ConsentctlTests.run(command + ["--out", fifo], ledger: ledger)
        #expect(unread.status == 3 && unread.stderr.contains("cannot open \(fifo) for writing"), "\(unread.stderr)")
        let reader = open(fifo, O_RDONLY | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        let run = try ConsentctlTests.run(command + ["--out", fifo], ledger: ledger)
        #expect(run.status == 0, "\(run.stderr)")
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        let n = read(reader, &buffer, buffer.count)
        #expect(n > 0 && (buffer[0] == UInt8(ascii: "{") || buffer[0] == UInt8(ascii: "<")), "the output came through the FIFO")
        var st = stat()
        #expect(lstat(fifo, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO, "still a FIFO")
    }
}

/// A mistyped command gets "did you mean", and completion scripts are a command of their own.
@Suite struct CommandLineConventionTests {
    @Test(arguments: [("stauts", "did you mean 'status'?"), ("histroy", "did you mean 'history'?"), ("verfy", "did you mean 'verify'?"), ("frobnicate", "see 'consentctl --help'")])
    func aMistypedCommandIsNamedWithTheNearestOnes(_ case_: (String, String)) throws {
        let run = try ConsentctlTests.run([case_.0, "--subject", "x"], ledger: nil)
        #expect(run.status == 64 && run.stderr.contains("unknown command '\(case_.0)'") && run.stderr.contains(case_.1), "\(run.stderr)")
    }

    @Test(arguments: ["bash", "zsh", "fish"])
    func completionScriptsNameTheCommands(_ shell: String) throws {
        let run = try ConsentctlTests.run(["completion", shell], ledger: nil)
        #expect(run.status == 0 && run.stdout.contains("verify-export") && run.stdout.contains("subjects"), "\(shell)")
    }
}

/// A report window that is empty or inverted is a usage error, never an empty report.
@Suite struct ReportWindowTests {
    @Test(arguments: [("2026-06-30", "2026-01-01", "inverted"), ("2026-03-01T10:00:00Z", "2026-03-01T10:00:00Z", "empty")])
    func anEmptyOrInvertedWindowIsRefused(_ case_: (String, String, String)) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        let run = try ConsentctlTests.run(["report", "--from", case_.0, "--to", case_.1], ledger: ledger)
        #expect(run.status == 64 && run.stderr.contains("the window is \(case_.2)"), "\(run.stderr)")
        #expect(try ConsentctlTests.run(["report", "--from", "2026-01-01", "--to", "2026-06-30"], ledger: ledger).status == 0)
    }
}

/// Every command that prints takes `--format json` (and `--json`, its short form) and prints
/// one JSON object; `--json` with `--format text` is refused.
@Suite(.serialized) struct JSONEverywhereTests {
    static let commands: [[String]] = [
        ["init", "--insecure-plaintext-key"], ["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"],
        ["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "optional-a"],
        ["status", "--subject", "alice"], ["history", "--subject", "alice"], ["verify"], ["checkpoint"],
        ["key", "show"], ["catalog", "show"], ["subjects", "list"],
        ["prove-state", "--subject", "alice", "--out", "DIR/state.json"], ["prove-consistency", "--from", "DIR/old.checkpoint", "--out", "DIR/proof.json"],
        ["verify-export", "DIR/export.json", "--key", "KEY"], ["verify-state", "DIR/state.json", "--key", "KEY"],
    ]

    @Test(arguments: commands)
    func aCommandPrintsOneJSONObjectWithFormatJSONAndWithJSON(_ command: [String]) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        if command != ["init", "--insecure-plaintext-key"] {
            try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
            try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
            try Data(try ConsentctlTests.run(["checkpoint"], ledger: ledger).stdout.utf8).write(to: URL(fileURLWithPath: dir + "/old.checkpoint"))
            try ConsentctlTests.run(["give", "--subject", "carol", "--feature", "timeline", "--consent", "required"], ledger: ledger)
            try ConsentctlTests.run(["export", "--subject", "alice", "--out", dir + "/export.json"], ledger: ledger)
            try ConsentctlTests.run(["prove-state", "--subject", "alice", "--out", dir + "/state.json"], ledger: ledger)
        }
        let key = command == ["init", "--insecure-plaintext-key"] ? "" : try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .newlines)
        let arguments = command.map { $0.replacingOccurrences(of: "DIR", with: dir) == "KEY" ? key : $0.replacingOccurrences(of: "DIR", with: dir) }
        for form in [["--format", "json"], ["--json"]] {
            if command == ["init", "--insecure-plaintext-key"] { try? FileManager.default.removeItem(atPath: ledger) }
            let run = try ConsentctlTests.run(arguments + form, ledger: ledger)
            #expect(run.status == 0, "\(arguments + form): \(run.stderr)")
            #expect(run.stdout.filter { $0 == "\n" }.count == 1, "one line: \(run.stdout)")
            #expect((try? ConsentctlTests.json(run.stdout)) != nil, "\(arguments + form): \(run.stdout)")
        }
        let both = try ConsentctlTests.run(arguments + ["--json", "--format", "text"], ledger: ledger)
        #expect(both.status == 64, "\(both.stderr)")
    }
}

/// Help text is written as paragraphs that the parser wraps to the terminal: at any width a
/// sentence is not broken by hand-made line ends, and examples stay whole commands.
@Suite struct HelpTextTests {
    @Test(arguments: [
        (["give", "--help"], "To activate an inactive feature, give its required consent, with any optional ones in the same command (rules R2 and R5)."),
        (["verify-export", "--help"], "Checks the checkpoint's signature with the pinned key (never the key inside the bundle alone), every event's signature and inclusion proof,"),
        (["catalog", "publish", "--help"], "FILE is a catalogue in the format 'consentctl catalog show --format json' prints."),
    ])
    func aParagraphIsOneLineOnAWideTerminal(_ case_: ([String], String)) throws {
        let help = try ConsentctlTests.run(case_.0, ledger: nil, environment: ["COLUMNS": "400"])
        #expect(help.stdout.split(separator: "\n").contains { $0.contains(case_.1) }, "\(help.stdout)")
    }
}

/// Human output shows date and time (`dd.MM.yyyy HH:mm`, UTC), and `--at` takes that form back.
@Suite struct HumanTimeTests {
    @Test func statusShowsTheTimeAndAtTakesItBack() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let status = try ConsentctlTests.run(["status", "--subject", "alice"], ledger: ledger).stdout
        let shown = try #require(status.range(of: #"since \d\d\.\d\d\.\d{4} \d\d:\d\d"#, options: .regularExpression).map { String(status[$0].dropFirst(6)) }, "\(status)")
        // The day shown, a bare date: its end, after the grant (and at most a day from now).
        let later = try ConsentctlTests.run(["status", "--subject", "alice", "--at", String(shown.prefix(10))], ledger: ledger)
        #expect(later.status == 0 && later.stdout.contains("active"), "\(later.stderr)")
        let future = try ConsentctlTests.run(["status", "--subject", "alice", "--at", "31.12.2099 23:59"], ledger: ledger)
        #expect(future.status == 64 && future.stderr.contains("is in the future"), "\(future.stderr)")
        #expect(try ConsentctlTests.run(["history", "--subject", "alice", "--at", shown], ledger: ledger).status == 0)
        let bad = try ConsentctlTests.run(["status", "--subject", "alice", "--at", "31.12.99"], ledger: ledger)
        #expect(bad.status == 64 && bad.stderr.contains("'21.11.2026 10:00'"), "\(bad.stderr)")
    }
}

/// `--tz` shows times in a zone, reads dd.MM.yyyy HH:mm in it, and leaves JSON in UTC.
@Suite(.serialized) struct TimeZoneOptionTests {
    @Test func timesAreShownAndReadInTheZoneAndJSONStaysUTC() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let history = try ConsentctlTests.json(try ConsentctlTests.run(["history", "--subject", "alice", "--json", "--tz", "+05:30"], ledger: ledger).stdout)
        let at = try #require((history["events"] as? [[String: Any]])?.first?["at"] as? String)
        #expect(at.hasSuffix("Z"), "JSON stays RFC 3339 UTC")
        let utc = try #require(ISO8601DateFormatter.withFractions.date(from: at))
        let shifted = DateFormatter.dayMonthYearTime(offset: 19_800).string(from: utc)
        let text = try ConsentctlTests.run(["history", "--subject", "alice", "--tz", "+05:30"], ledger: ledger).stdout
        #expect(text.contains("AT (+05:30)") && text.contains(shifted), "\(text)")
        // A typed local time is read in the zone: the event is found as of its own local minute + 1.
        let next = DateFormatter.dayMonthYearTime(offset: 19_800).string(from: utc.addingTimeInterval(60))
        let status = try ConsentctlTests.run(["status", "--subject", "alice", "--at", next, "--tz", "+05:30", "--json"], ledger: ledger).stdout
        let consents = try ConsentctlTests.json(status)["features"] as? [[String: Any]]
        #expect(consents?.contains { $0["key"] as? String == "timeline" && $0["active"] as? Bool == true } == true, "\(status)")
        let bad = try ConsentctlTests.run(["status", "--subject", "alice", "--tz", "Mars/Base"], ledger: ledger)
        #expect(bad.status == 64 && bad.stderr.contains("is not a time zone"))
    }
}

extension ISO8601DateFormatter {
    static var withFractions: ISO8601DateFormatter {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f
    }
}

extension DateFormatter {
    static func dayMonthYearTime(offset: Int) -> DateFormatter {
        let f = DateFormatter()
        f.dateFormat = "dd.MM.yyyy HH:mm"
        f.timeZone = TimeZone(secondsFromGMT: offset)
        f.locale = Locale(identifier: "en_US_POSIX")
        return f
    }
}
