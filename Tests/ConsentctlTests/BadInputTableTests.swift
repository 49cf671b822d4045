import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// Bad input for every command: missing, extra or repeated arguments; unknown subjects,
/// features and consents; control characters and bytes that are not UTF-8; a subject id of
/// 100 KB and a command file line of 1 MB; times in the future and the far past; a folder that
/// is not a ledger; a FIFO, a symbolic link or a folder where a file should be; a held lock.
/// (A full disk and a read-only mount: `HostileInputTests`.) Each case checks the exit code, a
/// message that says what is wrong, and that no byte of the ledger changed.
@Suite struct BadInputTableTests {
    typealias CLI = ConsentctlTests

    /// What a case needs besides its arguments.
    enum Setup: Sendable {
        case none
        /// The folder given is an empty folder, not a ledger.
        case notALedger
        /// A ledger file replaced: by a FIFO, a folder or a symbolic link to a copy of itself.
        case replaced(String, String)
        /// Another process holds the ledger's lock (exclusively).
        case heldLock
        /// An argument holds the byte 0xFF (never UTF-8): the command runs through the shell.
        case invalidUTF8
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let arguments: [String]
        let setup: Setup
        let code: Int32
        let message: String
        var testDescription: String { name }

        init(_ name: String, _ arguments: [String], _ code: Int32, _ message: String, _ setup: Setup = .none) {
            (self.name, self.arguments, self.code, self.message, self.setup) = (name, arguments, code, message, setup)
        }
    }

    /// Placeholders replaced by the case's files: FILES is a folder of inputs beside the ledger.
    static let cases: [Case] = [
        // init
        Case("init over a ledger", ["init", "--insecure-plaintext-key"], 73, "a ledger already exists"),
        Case("init with a catalogue FIFO nobody writes", ["--ledger", "FILES/new", "init", "--insecure-plaintext-key", "--catalog", "FILES/fifo"], 64, "nothing was written to it for 5 s"),
        Case("init with a catalogue that is a folder", ["--ledger", "FILES/new", "init", "--insecure-plaintext-key", "--catalog", "FILES"], 64, "is a folder, not a file to read"),
        // catalog
        Case("catalog publish without a file", ["catalog", "publish"], 64, "Missing expected argument"),
        Case("catalog publish of a folder", ["catalog", "publish", "FILES"], 64, "is a folder, not a file to read"),
        Case("catalog publish of bytes that are not UTF-8", ["catalog", "publish", "FILES/not-utf8"], 65, "invalid catalogue"),
        Case("catalog show with an extra argument", ["catalog", "show", "extra"], 64, "Unexpected argument 'extra'"),
        // give and revoke
        Case("give without a subject", ["give", "--feature", "timeline", "--consent", "required"], 64, "--subject"),
        Case("give of an unknown feature", ["give", "--subject", "bob", "--feature", "diary", "--consent", "required"], 64, "unknown feature 'diary'"),
        Case("give of an unknown consent", ["give", "--subject", "bob", "--feature", "timeline", "--consent", "optional-z"], 64, "unknown consent 'optional-z'"),
        Case("give with a repeated subject", ["give", "--subject", "bob", "--subject", "carol", "--feature", "timeline", "--consent", "required"], 64, "--subject is given more than once"),
        Case("give for a subject id with an escape sequence", ["give", "--subject", "bob\u{1B}[2J", "--feature", "timeline", "--consent", "required"], 64, "control character"),
        Case("give for a subject id that is not UTF-8", ["give", "--subject", "bob\u{FFFD}", "--feature", "timeline", "--consent", "required"], 64, "is not UTF-8", .invalidUTF8),
        Case("give for a subject id of 100 KB", ["give", "--subject", String(repeating: "x", count: 100_000), "--feature", "timeline", "--consent", "required"], 64, "subject id"),
        Case("give agreed in the future", ["give", "--subject", "bob", "--feature", "timeline", "--consent", "required", "--effective-at", "2999-01-01T00:00:00Z"], 64, "is in the future"),
        Case("give agreed before the subject's last event", ["give", "--subject", "alice", "--feature", "timeline", "--consent", "optional-b", "--effective-at", "1970-01-02T00:00:00Z"], 64, "is before the subject's previous event about 'timeline'"),
        Case("give of an optional consent alone", ["give", "--subject", "bob", "--feature", "timeline", "--consent", "optional-a"], 1, "rule R2"),
        Case("revoke without a consent", ["revoke", "--subject", "alice", "--feature", "timeline"], 64, "--consent"),
        Case("revoke for an unknown subject that must exist", ["revoke", "--subject", "nobody", "--feature", "timeline", "--consent", "required", "--must-exist"], 64, "nobody"),
        // erase
        Case("erase without a subject", ["erase"], 64, "--subject"),
        Case("erase of an unknown subject", ["erase", "--subject", "nobody"], 64, "has no subject 'nobody'"),
        // clock
        Case("clock correct with a reason holding a newline", ["clock", "correct", "--reason", "NTP\nOK: 99 events"], 64, "contains a control character"),
        Case("clock correct with a reason of 201 bytes", ["clock", "correct", "--reason", String(repeating: "r", count: 201)], 64, "more than 200"),
        Case("clock correct with an empty actor", ["clock", "correct", "--actor", ""], 64, "actor"),
        Case("clock correct with an extra argument", ["clock", "correct", "now"], 64, "Unexpected argument 'now'"),
        Case("a negative --clock-skew", ["--clock-skew=-5", "clock", "show"], 64, "--clock-skew must be a number of seconds"),
        Case("clock with an unknown subcommand", ["clock", "reset"], 64, "reset"),
        // status, history, subjects, completion
        Case("status as of the year 9999", ["status", "--subject", "alice", "--at", "9999-12-31T23:59:59Z"], 64, "is in the future"),
        Case("status as of a time that is no time", ["status", "--subject", "alice", "--at", "last tuesday"], 64, "is not a time"),
        Case("status with an extra argument", ["status", "--subject", "alice", "extra"], 64, "Unexpected argument 'extra'"),
        Case("status in a zone that is none", ["status", "--subject", "alice", "--tz", "Mars/Olympus"], 64, "is not a time zone"),
        Case("status of an unknown subject that must exist", ["status", "--subject", "nobody", "--must-exist"], 64, "nobody"),
        Case("history as of the year 9999", ["history", "--subject", "alice", "--at", "9999-01-01"], 64, "is in the future"),
        Case("subjects list without a prefix value", ["subjects", "list", "--prefix"], 64, "Missing value for '--prefix"),
        Case("completion for an unknown shell", ["completion", "tcsh"], 64, "'tcsh' is invalid"),
        // report, verify, checkpoint
        Case("report in an unknown format", ["report", "--format", "xml"], 64, "'xml' is invalid"),
        Case("report from a time that is no time", ["report", "--from", "yesterday-ish"], 64, "is not a time"),
        Case("verify with an extra argument", ["verify", "now"], 64, "Unexpected argument 'now'"),
        Case("checkpoint with a quorum but no witnesses", ["checkpoint", "--quorum", "2"], 64, "witness"),
        // keys and witnesses
        Case("key show with an extra argument", ["key", "show", "extra"], 64, "Unexpected argument 'extra'"),
        Case("key revoke without the seq", ["key", "revoke"], 64, "--compromised-since"),
        Case("key revoke of a seq past the log", ["key", "revoke", "--compromised-since", "999"], 64, "999"),
        Case("key move-out of a folder", ["key", "move-out"], 64, "PostgreSQL"),
        Case("witness keygen without a name", ["witness", "keygen"], 64, "--name"),
        Case("witness show of a missing key file", ["witness", "show", "--name", "witness.example/w1", "--key", "FILES/missing.key"], 66, "no witness key file at FILES/missing.key"),
        // exports and proofs
        Case("export of an unknown subject", ["export", "--subject", "nobody", "--out", "FILES/out.json"], 64, "nobody"),
        Case("export into the ledger folder", ["export", "--subject", "alice", "--out", "LEDGER/alice.json"], 64, "inside the ledger folder"),
        Case("export of a subject and everything", ["export", "--subject", "alice", "--all", "--out", "FILES/out.json"], 64, "--all"),
        Case("verify-export of a FIFO nobody writes", ["verify-export", "FILES/fifo", "--key", "FILES/key.txt"], 64, "nothing was written to it for 5 s"),
        Case("verify-export of a folder", ["verify-export", "FILES", "--key", "FILES/key.txt"], 64, "is a folder, not a file to read"),
        Case("verify-export of bytes that are not UTF-8", ["verify-export", "FILES/not-utf8", "--key", "FILES/key.txt"], 64, "FILES/not-utf8"),
        Case("verify-export with a key that is none", ["verify-export", "FILES/alice.json", "--key", "not-a-key"], 64, "neither a verifier key"),
        Case("prove-consistency from a missing checkpoint", ["prove-consistency", "--from", "FILES/missing.txt"], 64, "no such file"),
        Case("prove-consistency from a checkpoint that is none", ["prove-consistency", "--from", "FILES/not-utf8"], 64, "checkpoint"),
        Case("verify-consistency without a key", ["verify-consistency", "FILES/alice.json"], 64, "--key"),
        Case("prove-state of an unknown subject", ["prove-state", "--subject", "nobody", "--out", "FILES/out.json"], 64, "nobody"),
        Case("prove-state as of the year 9999", ["prove-state", "--subject", "alice", "--at", "9999-12-31", "--out", "FILES/out.json"], 64, "is in the future"),
        Case("verify-state of a bundle, not a state proof", ["verify-state", "FILES/alice.json", "--key", "FILES/key.txt"], 64, "not a state proof"),
        // apply and migrate
        Case("apply without a file", ["apply"], 64, "Missing expected argument"),
        Case("apply of a folder", ["apply", "FILES"], 64, "is a folder, not a file to read"),
        Case("apply of a line that is not UTF-8", ["apply", "FILES/not-utf8"], 64, "line 1"),
        Case("apply of a line with a 1 MB subject id", ["apply", "FILES/huge-subject.jsonl"], 64, "line 1"),
        Case("apply of a line with an unknown member", ["apply", "FILES/unknown-member.jsonl"], 64, "unknown member \"when\""),
        Case("migrate into the same folder", ["migrate", "--to", "LEDGER"], 64, "the same store"),
        Case("migrate into a ledger", ["migrate", "--to", "FILES/other"], 73, "already"),
        // the folder itself
        Case("status of a folder that is not a ledger", ["status", "--subject", "alice"], 66, "no ledger at", .notALedger),
        Case("a lock timeout that is no time", ["--lock-timeout", "soon", "status", "--subject", "alice"], 64, "lock-timeout"),
        Case("give while another process holds the lock", ["--lock-timeout", "0.2", "give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], 3, "stayed locked for 0.2 s", .heldLock),
        Case("apply while another process holds the lock", ["--lock-timeout", "0", "apply", "FILES/commands.jsonl"], 3, "is locked by process", .heldLock),
        Case("checkpoint while another process holds the lock", ["--lock-timeout", "0", "checkpoint"], 3, "is locked by process", .heldLock),
        Case("key rotate while another process holds the lock", ["--lock-timeout", "0", "key", "rotate"], 3, "is locked by process", .heldLock),
        Case("status with the log a FIFO", ["status", "--subject", "alice"], 3, "ledger.jsonl is a FIFO, not a regular file", .replaced("ledger.jsonl", "FIFO")),
        Case("give with the subjects file a folder", ["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], 3, "subjects.jsonl is a folder, not a regular file", .replaced("subjects.jsonl", "folder")),
        Case("verify with the log a symbolic link", ["verify"], 3, "ledger.jsonl is a symbolic link, not a regular file", .replaced("ledger.jsonl", "link")),
    ]

    /// A ledger with alice's consents, a recorded checkpoint, an export and a state proof of
    /// her, and input files beside it; made once, copied for each case.
    static let template: String = {
        let dir = CLI.temporaryFolder()
        let ledger = dir + "/ledger", files = dir + "/files"
        _ = try? CLI.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/bad-input"], ledger: ledger)
        _ = try? CLI.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        _ = try? CLI.run(["checkpoint"], ledger: ledger)
        mkdir(files, 0o700)
        _ = try? CLI.run(["export", "--subject", "alice", "--out", files + "/alice.json"], ledger: ledger)
        _ = try? CLI.run(["init", "--insecure-plaintext-key"], ledger: files + "/other")
        let key = (try? CLI.run(["key", "show"], ledger: ledger).stdout.split(separator: "\n").first.map(String.init)) ?? ""
        FileManager.default.createFile(atPath: files + "/key.txt", contents: Data((key + "\n").utf8))
        FileManager.default.createFile(atPath: files + "/not-utf8", contents: Data([0xFF, 0xFE, 0x7B, 0x0A]))
        FileManager.default.createFile(atPath: files + "/huge-subject.jsonl", contents: Data(("{\"subject\":\"" + String(repeating: "y", count: 1 << 20) + "\",\"feature\":\"timeline\",\"give\":[\"required\"]}\n").utf8))
        FileManager.default.createFile(atPath: files + "/unknown-member.jsonl", contents: Data(#"{"subject":"bob","feature":"timeline","give":["required"],"when":"now"}"#.utf8 + [0x0A]))
        FileManager.default.createFile(atPath: files + "/commands.jsonl", contents: Data(#"{"subject":"bob","feature":"timeline","give":["required"]}"#.utf8 + [0x0A]))
        mkfifo(files + "/fifo", 0o600)
        return dir
    }()

    @Test(arguments: cases)
    func badInputGetsItsExitCodeAndMessageAndChangesNothing(_ test: Case) throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(system("cp -a '\(Self.template)/.' '\(dir)/'") == 0)
        var ledger = dir + "/ledger"
        let files = dir + "/files"
        var release: (() -> Void)?
        switch test.setup {
        case .none, .invalidUTF8: break
        case .notALedger:
            ledger = dir + "/empty"
            mkdir(ledger, 0o700)
        case .replaced(let name, let kind):
            let path = ledger + "/" + name
            #expect(rename(path, files + "/kept-" + name) == 0)
            switch kind {
            case "FIFO": #expect(mkfifo(path, 0o600) == 0)
            case "folder": #expect(mkdir(path, 0o700) == 0)
            default: #expect(symlink(files + "/kept-" + name, path) == 0)
            }
        case .heldLock:
            release = try HostileInputTests.holdLock(ledger, exclusive: true).release
        }
        defer { release?() }
        let before = CLI.snapshot(ledger), filesBefore = CLI.snapshot(files + "/other")
        let arguments = test.arguments.map { $0.replacingOccurrences(of: "FILES", with: files).replacingOccurrences(of: "LEDGER", with: ledger) }
        let explicitLedger = arguments.contains("--ledger")
        let run: CLI.Run
        if case .invalidUTF8 = test.setup {
            // A byte that is not UTF-8 cannot travel in a Swift string: the shell puts it in.
            let quoted = (explicitLedger ? [] : ["--ledger", ledger]) + arguments
            let line = quoted.map { "'" + $0.replacingOccurrences(of: "\u{FFFD}", with: "'\"$(printf '\\377')\"'") + "'" }.joined(separator: " ")
            run = try CLI.run(["-c", "exec '\(CLI.binary)' \(line)"], ledger: nil, executable: "/bin/sh")
        } else {
            run = try CLI.run(arguments, ledger: explicitLedger ? nil : ledger)
        }
        #expect(run.status == test.code, "\(test.name): exit \(run.status): \(run.stderr)")
        let message = test.message.replacingOccurrences(of: "FILES", with: files)
        #expect(run.stderr.contains(message), "\(test.name): \(run.stderr)")
        #expect(!run.stderr.contains("Fatal error") && !run.stderr.contains("Stack dump"), "\(test.name) crashed: \(run.stderr)")
        #expect(CLI.snapshot(ledger) == before, "\(test.name) changed the ledger")
        #expect(CLI.snapshot(files + "/other") == filesBefore, "\(test.name) changed the other ledger")
    }
}
