import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// The signing key sealed under a passphrase, end to end: where the passphrase comes from, which
/// commands ask for it, what a missing or wrong one does (exit 77, nothing changed), and
/// `key passphrase`.
@Suite(.serialized) struct PassphraseCommandTests {
    static let passphrase = "correct horse battery staple"
    static let give = ["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"]

    static func encryptedLedger() throws -> (dir: String, ledger: String) {
        let dir = ConsentctlTests.temporaryFolder()
        let ledger = dir + "/ledger"
        let created = try ConsentctlTests.run(["init", "--name", "clinic.example/sealed"], ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": passphrase])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.contains("sealed under your passphrase"))
        return (dir, ledger)
    }

    @Test func initSealsTheKeyInAPrivateFileThatHoldsNoSeed() throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let key = try #require(FileManager.default.contents(atPath: ledger + "/secret.key"))
        let object = try #require(try JSONSerialization.jsonObject(with: key) as? [String: Any])
        #expect(object["type"] as? String == "consentledger-signing-key")
        #expect((object["kdf"] as? [String: Any])?["memlimit"] as? Int == 64 << 20, "INTERACTIVE by default")
        var st = stat()
        #expect(stat(ledger + "/secret.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }

    /// (how the passphrase is given; nil means not at all)
    @Test(arguments: ["file", "fd", "environment", "none", "wrong"])
    func aWriteUnlocksWithThePassphraseFromEachSourceAndOnlyWithIt(source: String) throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Data((Self.passphrase + "\n").utf8).write(to: URL(fileURLWithPath: dir + "/passphrase"))
        let before = ConsentctlTests.snapshot(ledger)
        let run: ConsentctlTests.Run
        switch source {
        case "file": run = try ConsentctlTests.run(["--passphrase-file", dir + "/passphrase"] + Self.give, ledger: ledger)
        case "fd": run = try ConsentctlTests.run(["--passphrase-fd", "0"] + Self.give, ledger: ledger, input: Self.passphrase + "\r\n")
        case "environment": run = try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": Self.passphrase])
        case "wrong": run = try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": "not the passphrase"])
        default: run = try ConsentctlTests.run(Self.give, ledger: ledger)
        }
        switch source {
        case "none":
            #expect(run.status == 77 && run.stderr.contains("the signing key \(ledger)/secret.key is encrypted and no passphrase was given: give --passphrase-file FILE"), "\(run.stderr)")
            #expect(ConsentctlTests.snapshot(ledger) == before)
        case "wrong":
            #expect(run.status == 77 && run.stderr.contains("wrong passphrase for the signing key \(ledger)/secret.key"), "\(run.stderr)")
            #expect(ConsentctlTests.snapshot(ledger) == before)
        default:
            #expect(run.status == 0, "\(run.stderr)")
            #expect(try ConsentctlTests.run(["status", "--subject", "alice"], ledger: ledger).stdout.contains("Timeline"))
        }
    }

    /// Reading, verifying, showing the key, and handing out checkpoints, all-bundles and proofs
    /// (the signed head, signed when its events were written) never ask for the passphrase.
    @Test(arguments: [["status", "--subject", "alice"], ["history", "--subject", "alice"], ["verify"], ["key", "show"], ["subjects", "list"], ["report"],
                      ["prove-state", "--subject", "alice", "--out", "-"], ["export", "--subject", "alice", "--format", "fhir", "--out", "-"],
                      ["checkpoint"], ["export", "--all", "--out", "-"], ["export", "--subject", "alice", "--out", "-"]])
    func aReadNeedsNoPassphrase(_ command: [String]) throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": Self.passphrase]).status == 0)
        let run = try ConsentctlTests.run(command, ledger: ledger)
        #expect(run.status == 0, "\(run.stderr)")
    }

    /// The passphrase is never an argument: there is no option that takes it.
    @Test(arguments: [["--passphrase", passphrase], ["--passphrase=" + passphrase]])
    func thePassphraseIsNeverAnArgument(_ option: [String]) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let run = try ConsentctlTests.run(["init"] + option, ledger: dir + "/ledger")
        #expect(run.status == 64 && run.stderr.contains("Unknown option '--passphrase"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/ledger/ledger.jsonl"))
    }

    /// (what init is given, the exit code, what stderr says)
    @Test(arguments: [
        ([String](), [String: String](), Int32(64), "a new key file is sealed under a passphrase, and none was given"),
        (["--insecure-plaintext-key"], [:], 0, "warning: the secret key is stored unencrypted"),
        ([], ["CONSENTCTL_PASSPHRASE": "seven77"], 64, "the passphrase is too short: a new key's passphrase has at least 8 bytes"),
        (["--passphrase-file", "/no/such/file"], [:], 64, "cannot read the passphrase file /no/such/file"),
    ])
    func initWithoutAUsablePassphraseCreatesNothing(_ case_: ([String], [String: String], Int32, String)) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (flags, environment, code, message) = case_
        let global = flags.first == "--passphrase-file" ? flags : []
        let local = flags.first == "--passphrase-file" ? [] : flags
        let run = try ConsentctlTests.run(global + ["init"] + local, ledger: dir + "/ledger", environment: environment)
        #expect(run.status == code && run.stderr.contains(message), "\(run.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir + "/ledger/ledger.jsonl") == (code == 0))
    }

    @Test func keyPassphraseChangesThePassphraseAndKeepsTheKey() throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let verifierKey = try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout
        let newPassphrase = "a new and longer passphrase"
        try Data(newPassphrase.utf8).write(to: URL(fileURLWithPath: dir + "/new"))
        let wrong = try ConsentctlTests.run(["key", "passphrase", "--new-passphrase-file", dir + "/new"], ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": "not it at all"])
        #expect(wrong.status == 77, "the current passphrase is checked first: \(wrong.stderr)")
        let changed = try ConsentctlTests.run(["key", "passphrase", "--new-passphrase-file", dir + "/new", "--kdf", "moderate"], ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": Self.passphrase])
        #expect(changed.status == 0 && changed.stdout.contains("sealed under the new passphrase (Argon2id, 3 passes over 256 MiB)"), "\(changed.stderr)")
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": Self.passphrase]).status == 77, "the old passphrase no longer opens it")
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": newPassphrase]).status == 0)
        #expect(try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout == verifierKey, "the same key")
        #expect(try ConsentctlTests.run(["verify"], ledger: ledger).status == 0)
    }

    @Test func aPlaintextKeyIsEncryptedByKeyPassphrase() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let sealed = try ConsentctlTests.run(["key", "passphrase", "--format", "json"], ledger: ledger, environment: ["CONSENTCTL_NEW_PASSPHRASE": Self.passphrase])
        #expect(sealed.status == 0, "\(sealed.stderr)")
        #expect(try ConsentctlTests.json(sealed.stdout)["wasEncrypted"] as? Bool == false)
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger).status == 77)
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger, environment: ["CONSENTCTL_PASSPHRASE": Self.passphrase]).status == 0)
    }

    /// A consistency proof is between signed heads: no key. Nor does a subject's bundle: the
    /// subject map under the signed head proves it complete.
    @Test func aConsistencyProofAndASubjectBundleNeedNoKey() throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let unlocked = ["CONSENTCTL_PASSPHRASE": Self.passphrase]
        #expect(try ConsentctlTests.run(Self.give, ledger: ledger, environment: unlocked).status == 0)
        let old = try ConsentctlTests.run(["checkpoint"], ledger: ledger)
        #expect(old.status == 0 && old.stdout.contains("\nchain "), "the signed head, with its chain line")
        try Data(old.stdout.utf8).write(to: URL(fileURLWithPath: dir + "/old.checkpoint"))
        #expect(try ConsentctlTests.run(["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger, environment: unlocked).status == 0)
        let proof = try ConsentctlTests.run(["prove-consistency", "--from", dir + "/old.checkpoint", "--out", dir + "/proof.json"], ledger: ledger)
        #expect(proof.status == 0, "\(proof.stderr)")
        let key = try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .newlines)
        #expect(try ConsentctlTests.run(["verify-consistency", dir + "/proof.json", "--key", key], ledger: nil).status == 0)
        #expect(try ConsentctlTests.run(["export", "--subject", "alice", "--out", dir + "/alice.json"], ledger: ledger).status == 0)
        #expect(try ConsentctlTests.run(["verify-export", dir + "/alice.json", "--key", key], ledger: nil).status == 0)
    }

    /// Runs consentctl on a pseudo-terminal (util-linux `script`), answering each prompt as it
    /// appears; returns the exit status and the terminal's transcript.
    static func onTerminal(_ arguments: [String], answers: [String]) throws -> (status: Int32, transcript: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        let command = ([ConsentctlTests.binary] + arguments).map { "'" + $0 + "'" }.joined(separator: " ")
        process.arguments = ["-qec", command, "/dev/null"]
        var env = ProcessInfo.processInfo.environment
        for name in ["CONSENTCTL_PASSPHRASE", "CONSENTCTL_NEW_PASSPHRASE", "CONSENTCTL_LEDGER", "CONSENTCTL_STORE"] { env.removeValue(forKey: name) }
        process.environment = env
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
        var transcript = Data()
        let reader = output.fileHandleForReading
        for (i, answer) in answers.enumerated() {
            // Wait for the (i+1)-th prompt, which ends with ": ", before typing the answer: a
            // prompt flushes what was typed ahead of it.
            let deadline = Date().addingTimeInterval(30)
            while String(decoding: transcript, as: UTF8.self).components(separatedBy: ": ").count <= i + 1, Date() < deadline {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                transcript.append(chunk)
            }
            input.fileHandleForWriting.write(Data((answer + "\n").utf8))
        }
        try input.fileHandleForWriting.close()
        transcript.append(reader.readDataToEndOfFile())
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: transcript, as: UTF8.self))
    }

    /// At a terminal the passphrase is asked for without echo (twice for a new key), and a
    /// mistyped confirmation creates nothing.
    @Test func aTerminalIsAskedWithoutEcho() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "util-linux script runs the command on a pseudo-terminal")
        let mismatched = try Self.onTerminal(["--ledger", dir + "/other", "init"], answers: [Self.passphrase, Self.passphrase + "!"])
        #expect(mismatched.status == 64 && mismatched.transcript.contains("the two passphrases differ"), "\(mismatched.transcript)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/other/ledger.jsonl"))
        let created = try Self.onTerminal(["--ledger", dir + "/ledger", "init"], answers: [Self.passphrase, Self.passphrase])
        #expect(created.status == 0 && created.transcript.contains("New passphrase for the signing key: "), "\(created.transcript)")
        #expect(!created.transcript.contains(Self.passphrase), "nothing typed is echoed")
        let give = try Self.onTerminal(["--ledger", dir + "/ledger"] + Self.give, answers: [Self.passphrase])
        #expect(give.status == 0 && give.transcript.contains("Passphrase for the signing key \(dir)/ledger/secret.key: ") && !give.transcript.contains(Self.passphrase), "\(give.transcript)")
    }

    /// `apply -` reads its commands from standard input, so the passphrase cannot come from
    /// descriptor 0 as well (it would read the commands to their end): refused, nothing appended.
    @Test func applyFromStandardInputAndAPassphraseFromItAreRefusedTogether() throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let before = ConsentctlTests.snapshot(ledger)
        let run = try ConsentctlTests.run(["--passphrase-fd", "0", "apply", "-"], ledger: ledger,
                                          input: #"{"subject":"alice","feature":"timeline","give":["required"]}"# + "\n")
        #expect(run.status == 64 && run.stderr.contains("the passphrase cannot come from descriptor 0 too"), "\(run.stderr)")
        #expect(ConsentctlTests.snapshot(ledger) == before)
    }

    /// A passphrase file may be a pipe, as process substitution gives
    /// (`--passphrase-file <(pass show clinic)`); a folder is refused.
    @Test func aPassphraseFileMayBeAPipe() throws {
        let (dir, ledger) = try Self.encryptedLedger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let pipe = dir + "/passphrase.pipe"
        #expect(mkfifo(pipe, 0o600) == 0)
        let writer = Thread {
            let fd = open(pipe, O_WRONLY)
            guard fd >= 0 else { return }
            let line = Array((Self.passphrase + "\n").utf8)
            _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        writer.start()
        let give = try ConsentctlTests.run(["--passphrase-file", pipe] + Self.give, ledger: ledger)
        #expect(give.status == 0, "\(give.stderr)")
        let folder = try ConsentctlTests.run(["--passphrase-file", dir] + Self.give, ledger: ledger)
        #expect(folder.status == 64 && folder.stderr.contains("is neither a regular file nor a pipe"), "\(folder.stderr)")
    }
}
