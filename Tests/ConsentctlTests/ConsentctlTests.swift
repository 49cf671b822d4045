import Foundation
import Testing

/// End-to-end: the built `consentctl` binary, run as a user would.
@Suite(.serialized) struct ConsentctlTests {
    /// `swift test` builds consentctl next to the test bundle.
    static let binary: String = {
        let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return exe.deletingLastPathComponent().appendingPathComponent("consentctl").path
    }()

    struct Run {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    @discardableResult
    static func run(_ arguments: [String], ledger: String?, environment: [String: String] = [:], input: String? = nil, executable: String? = nil) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable ?? binary)
        process.arguments = (ledger.map { ["--ledger", $0] } ?? []) + arguments
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "CONSENTCTL_LEDGER")
        env.removeValue(forKey: "CONSENTCTL_STORE")
        env.removeValue(forKey: "CONSENTCTL_PASSPHRASE")
        env.removeValue(forKey: "CONSENTCTL_NEW_PASSPHRASE")
        for (k, v) in environment { env[k] = v }
        process.environment = env
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let stdin = input.map { _ in Pipe() }
        process.standardInput = stdin ?? FileHandle.nullDevice
        try process.run()
        if let stdin, let input {
            stdin.fileHandleForWriting.write(Data(input.utf8))
            try stdin.fileHandleForWriting.close()
        }
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    static func temporaryFolder() -> String {
        let path = NSTemporaryDirectory() + "consentctl-e2e-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func snapshot(_ ledger: String) -> [String: Data] {
        var files: [String: Data] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: ledger)) ?? [] where name != "lock" {
            files[name] = FileManager.default.contents(atPath: ledger + "/" + name)
        }
        return files
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func seedScenarioEndToEnd() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let give = try Self.run(["give", "--subject", "alice", "--feature", "medication-management", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        #expect(give.status == 0)
        #expect(give.stdout.contains("Appended 2 events for alice"))
        #expect(try Self.run(["give", "--subject", "alice", "--feature", "2", "--consent", "required", "--consent", "optional-a", "--consent", "optional-b"], ledger: ledger).status == 0)
        let revoke = try Self.run(["revoke", "--subject", "alice", "--feature", "medication-management", "--consent", "required"], ledger: ledger)
        #expect(revoke.status == 0)
        #expect(revoke.stdout.contains("cascade"))
        #expect(revoke.stdout.contains("Medication Management is inactive for alice."))

        let status = try Self.json(try Self.run(["status", "--subject", "alice", "--json"], ledger: ledger).stdout)
        let features = try #require(status["features"] as? [[String: Any]])
        #expect(features.map { $0["key"] as? String } == ["medication-management", "timeline"])
        #expect(features.map { $0["active"] as? Bool } == [false, true])
        let timeline = try #require(features[1]["consents"] as? [[String: Any]])
        #expect(timeline.allSatisfy { $0["state"] as? String == "given" && $0["validFrom"] is String })
        #expect(timeline.map { $0["required"] as? Bool } == [true, false, false], "required first (R7)")

        let history = try Self.json(try Self.run(["history", "--subject", "alice", "--json"], ledger: ledger).stdout)
        let events = try #require(history["events"] as? [[String: Any]])
        #expect(events.count == 7)
        #expect(events.map { $0["seq"] as? Int } == [1, 2, 3, 4, 5, 6, 7])
        #expect(events[6]["cause"] as? Int == 6)
        #expect(events[6]["type"] as? String == "cascade-withdrawn")
        #expect(events[5]["cause"] == nil)
        #expect(events.allSatisfy { $0["at"] is String && $0["actor"] as? String == "self" && $0["feature"] is String && $0["consent"] is String })

        let humanStatus = try Self.run(["status", "--subject", "alice"], ledger: ledger)
        #expect(humanStatus.stdout.contains("Timeline (timeline, code 2): active"))
        let verify = try Self.run(["verify"], ledger: ledger)
        #expect(verify.status == 0)
        #expect(verify.stdout.split(separator: "\n").contains { $0.hasPrefix("  events ") && $0.hasSuffix(" 8") }, "\(verify.stdout)")
        let verifyJSON = try Self.json(try Self.run(["verify", "--json"], ledger: ledger).stdout)
        #expect(verifyJSON["ok"] as? Bool == true && verifyJSON["events"] as? Int == 8 && verifyJSON["subjects"] as? Int == 1)

        // Flip one byte of line 4's signature: verify names the entry and exits 2.
        var log = try #require(FileManager.default.contents(atPath: ledger + "/ledger.jsonl"))
        // The fourth event line (head lines, `{"head":…}`, between the commits).
        var offset = 0, eventCount = 0
        for line in log.split(separator: 0x0A, omittingEmptySubsequences: false) where eventCount < 4 {
            offset += line.count + 1
            if line.dropFirst(2).first != UInt8(ascii: "h") { eventCount += 1 }
        }
        offset -= 10
        log[offset] = log[offset] == 0x30 ? 0x31 : 0x30
        try log.write(to: URL(fileURLWithPath: ledger + "/ledger.jsonl"))
        let tampered = try Self.run(["verify"], ledger: ledger)
        #expect(tampered.status == 2)
        #expect(tampered.stderr.contains("seq 3, entry 4: signature does not verify"))
        let tamperedJSON = try Self.json(try Self.run(["verify", "--json"], ledger: ledger).stdout)
        #expect(tamperedJSON["ok"] as? Bool == false && tamperedJSON["entry"] as? Int == 4 && tamperedJSON["seq"] as? Int == 3)
    }

    @Test func badInputGetsItsExitCodeAndChangesNothing() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let before = Self.snapshot(ledger)
        let cases: [([String], Int32, String)] = [
            (["give", "--subject", "bob", "--feature", "timeline", "--consent", "optional-a"], 1, "rule R2"),
            (["give", "--subject", "bob", "--feature", "diary", "--consent", "required"], 64, "unknown feature 'diary'"),
            (["give", "--subject", "bob", "--feature", "timeline", "--consent", "optional-z"], 64, "unknown consent 'optional-z'"),
            (["give", "--subject", "", "--feature", "timeline", "--consent", "required"], 64, "subject id must not be empty"),
            (["give", "--feature", "timeline", "--consent", "required"], 64, "--subject"),
            (["give", "--subject", "bob", "--feature", "timeline"], 64, "--consent"),
            (["status", "--subject", "alice", "--at", "last tuesday"], 64, "is not a time"),
            (["frobnicate"], 64, "frobnicate"),
            (["init", "--insecure-plaintext-key"], 73, "a ledger already exists"),
        ]
        for (arguments, code, message) in cases {
            let result = try Self.run(arguments, ledger: ledger)
            #expect(result.status == code, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        // No-ops succeed without appending.
        let again = try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(again.status == 0 && again.stdout.contains("already given"))
        let withheld = try Self.run(["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "optional-a"], ledger: ledger)
        #expect(withheld.status == 0 && withheld.stdout.contains("withheld (never given)"))
        #expect(Self.snapshot(ledger) == before, "bad input and no-ops change no byte")

        #expect(try Self.run(["status", "--subject", "alice"], ledger: dir + "/nowhere").status == 66)
        // A malformed catalogue: 65, and no ledger is created.
        try Data(#"{"features": [{"code": 1, "key": "a", "name": {"en": "A"}, "consents": []}]}"#.utf8).write(to: URL(fileURLWithPath: dir + "/bad.json"))
        let badCatalog = try Self.run(["init", "--insecure-plaintext-key", "--catalog", dir + "/bad.json"], ledger: dir + "/other")
        #expect(badCatalog.status == 65)
        #expect(badCatalog.stderr.contains("features[0] (a)"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/other"))
        // A storage error: 3.
        try FileManager.default.createDirectory(atPath: ledger + "/head", withIntermediateDirectories: false)
        #expect(try Self.run(["status", "--subject", "alice"], ledger: ledger).status == 3)
    }

    @Test func malformedLedgerIsAnIntegrityFailureNamingTheLine() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        try Self.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        var text = try String(contentsOfFile: ledger + "/ledger.jsonl", encoding: .utf8)
        text = text.replacingOccurrences(of: #"{"body":{"actor":"self""#, with: #"{"body":{"actor" :"self""#)
        try text.write(toFile: ledger + "/ledger.jsonl", atomically: false, encoding: .utf8)
        let before = Self.snapshot(ledger)
        let verify = try Self.run(["verify"], ledger: ledger)
        #expect(verify.status == 2)
        #expect(verify.stderr.contains("entry 2"), "\(verify.stderr)")
        let give = try Self.run(["give", "--subject", "carol", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(give.status == 2, "no append onto a damaged ledger: \(give.stderr)")
        #expect(Self.snapshot(ledger) == before)
    }

    @Test func emptyStateDefaultFolderAndHelp() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = ["CONSENTCTL_LEDGER": dir + "/from-env"]
        #expect(try Self.run(["init", "--insecure-plaintext-key"], ledger: nil, environment: env).status == 0)
        #expect(FileManager.default.fileExists(atPath: dir + "/from-env/ledger.jsonl"))
        let empty = try Self.run(["status", "--subject", "zoe"], ledger: nil, environment: env)
        #expect(empty.status == 0 && empty.stdout.contains("Nothing was ever recorded for 'zoe'") && empty.stdout.contains("Every feature is off"), "R1, R8")
        #expect(try Self.json(try Self.run(["status", "--subject", "zoe", "--json"], ledger: nil, environment: env).stdout)["empty"] as? Bool == true)
        #expect(try Self.run(["history", "--subject", "zoe"], ledger: nil, environment: env).stdout.contains("Nothing was ever recorded for 'zoe'"))
        let catalog = try Self.json(try Self.run(["catalog", "--json"], ledger: nil, environment: env).stdout)
        let features = try #require(catalog["features"] as? [[String: Any]])
        #expect(features.count == 2)
        let consent = try #require((features[0]["consents"] as? [[String: Any]])?.first)
        #expect(Set(consent.keys) == ["code", "name", "required", "link", "version"], "the catalogue file's own members")
        let help = try Self.run(["--help"], ledger: nil)
        #expect(help.stdout.contains("EXIT CODES") && help.stdout.contains("integrity failure"))
        #expect(try Self.run(["give", "--help"], ledger: nil).stdout.contains("Example"))
    }

    /// Writers killed at random moments (SIGKILL) never cost an acknowledged event and never
    /// leave a ledger that cannot be opened.
    @Test func killedWritersLoseNothingAcknowledged() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        var acknowledged: [String] = []
        for i in 0..<24 {
            let subject = "k\(i)"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.binary)
            process.arguments = ["--ledger", ledger, "give", "--subject", subject, "--feature", "timeline", "--consent", "required", "--consent", "optional-a", "--consent", "optional-b"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            usleep(UInt32.random(in: 0...15_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            if process.terminationReason == .exit && process.terminationStatus == 0 { acknowledged.append(subject) }
            let verify = try Self.run(["verify"], ledger: ledger)
            #expect(verify.status == 0, "after kill \(i): \(verify.stderr)")
        }
        for subject in acknowledged {
            let status = try Self.json(try Self.run(["status", "--subject", subject, "--json"], ledger: ledger).stdout)
            #expect((status["features"] as? [[String: Any]])?[1]["active"] as? Bool == true, "\(subject) was acknowledged")
        }
        // A final write succeeds on whatever the kills left.
        #expect(try Self.run(["give", "--subject", "final", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        #expect(try Self.run(["verify"], ledger: ledger).status == 0)
    }

    @Test func checkpointExportAndConsistencyEndToEnd() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/consents"], ledger: ledger).status == 0)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        try Self.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let checkpoint = try Self.run(["checkpoint"], ledger: ledger)
        #expect(checkpoint.status == 0)
        #expect(checkpoint.stdout.hasPrefix("clinic.example/consents\n4\n"))
        #expect(checkpoint.stdout.contains("\n\n\u{2014} clinic.example/consents "))
        try checkpoint.stdout.write(toFile: dir + "/old.checkpoint", atomically: true, encoding: .utf8)
        let key = try Self.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.hasPrefix("clinic.example/consents+"))
        try Self.run(["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)

        // Export one subject, verify it offline with the pinned key.
        #expect(try Self.run(["export", "--subject", "alice", "--out", dir + "/alice.json"], ledger: ledger).status == 0)
        let verified = try Self.run(["verify-export", dir + "/alice.json", "--key", key, "--json"], ledger: nil)
        #expect(verified.status == 0, "\(verified.stderr)")
        let report = try Self.json(verified.stdout)
        #expect(report["ok"] as? Bool == true && report["events"] as? Int == 4 && report["subject"] as? String == "alice")
        // A flipped byte in an event: exit 2, the event named.
        var bundle = try String(contentsOfFile: dir + "/alice.json", encoding: .utf8)
        // (the first occurrence: the same line may be the bundle's 'last' entry too)
        let flipped = try #require(bundle.range(of: #"\"consent\":\"optional-a\""#))
        bundle.replaceSubrange(flipped, with: #"\"consent\":\"optional-b\""#)
        try bundle.write(toFile: dir + "/tampered.json", atomically: true, encoding: .utf8)
        let tampered = try Self.run(["verify-export", dir + "/tampered.json", "--key", key], ledger: nil)
        #expect(tampered.status == 2)
        #expect(tampered.stderr.contains("seq 2"), "\(tampered.stderr)")
        // Another ledger's key is not trusted.
        try Self.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/consents"], ledger: dir + "/other")
        let otherKey = try Self.run(["key", "show"], ledger: nil, environment: ["CONSENTCTL_LEDGER": dir + "/other"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let wrongKey = try Self.run(["verify-export", dir + "/alice.json", "--key", otherKey], ledger: nil)
        #expect(wrongKey.status == 2 && wrongKey.stderr.contains("differs from the pinned key"))
        #expect(try Self.run(["verify-export", dir + "/alice.json", "--key", "not-a-key"], ledger: nil).status == 64)

        // The whole ledger.
        #expect(try Self.run(["export", "--all", "--out", dir + "/all.json"], ledger: ledger).status == 0)
        #expect(try Self.run(["verify-export", dir + "/all.json", "--key", key], ledger: nil).status == 0)

        // The log only grew since the old checkpoint.
        #expect(try Self.run(["prove-consistency", "--from", dir + "/old.checkpoint", "--out", dir + "/proof.json"], ledger: ledger).status == 0)
        let consistent = try Self.run(["verify-consistency", dir + "/proof.json", "--key", key], ledger: nil)
        #expect(consistent.status == 0 && consistent.stdout.contains("size 6 extends its checkpoint at size 4"), "\(consistent.stdout)\(consistent.stderr)")

        // Usage errors.
        #expect(try Self.run(["export", "--out", dir + "/x.json"], ledger: ledger).status == 64)
        #expect(try Self.run(["export", "--subject", "alice", "--all", "--out", dir + "/x.json"], ledger: ledger).status == 64)
        #expect(try Self.run(["export", "--subject", "nobody", "--out", dir + "/x.json"], ledger: ledger).status == 64)
        #expect(try Self.run(["init", "--insecure-plaintext-key", "--name", "has space"], ledger: dir + "/third").status == 64)
    }

    /// Review findings: a missing head is damage (exit 2), and outputs may not land in the
    /// ledger folder (exit 64, nothing written).
    @Test func missingHeadAndOutputsInsideTheLedgerFolder() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let before = Self.snapshot(ledger)
        let inside = try Self.run(["export", "--all", "--out", ledger + "/ledger.jsonl"], ledger: ledger)
        #expect(inside.status == 64 && inside.stderr.contains("inside the ledger folder"))
        #expect(try Self.run(["report", "--html", ledger + "/head"], ledger: ledger).status == 64)
        #expect(Self.snapshot(ledger) == before)
        // The head lines taken out of the log.
        let log = try #require(FileManager.default.contents(atPath: ledger + "/ledger.jsonl"))
        // Its content: the zero bytes its writer reserved after it left out.
        let events = log.prefix(through: log.lastIndex { $0 != 0 }!).split(separator: 0x0A).filter { $0.dropFirst(2).first != UInt8(ascii: "h") }
        try Data(events.map { Data($0) + Data([0x0A]) }.joined()).write(to: URL(fileURLWithPath: ledger + "/ledger.jsonl"))
        let verify = try Self.run(["verify"], ledger: ledger)
        #expect(verify.status == 2 && verify.stderr.contains("the log holds no head line"), "\(verify.stderr)")
    }

    /// Catalogue versions through the binary: publishing, outdated status, re-consent in history, and bad
    /// catalogues refused without changing a byte.
    @Test func publishOutdatedReconsentAndRefusedCatalogues() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Samples")
        let before = Self.snapshot(ledger)
        // The same catalogue again: nothing to publish, exit 0; a malformed one: refused. Nothing changes.
        let same = try Self.run(["catalog", "publish", samples.appendingPathComponent("catalog.json").path], ledger: ledger)
        #expect(same.status == 0 && same.stdout.contains("Nothing to publish"), "\(same.stdout)")
        try Data("{\"features\": [".utf8).write(to: URL(fileURLWithPath: dir + "/broken.json"))
        #expect(try Self.run(["catalog", "publish", dir + "/broken.json"], ledger: ledger).status == 65)
        #expect(Self.snapshot(ledger) == before)
        let published = try Self.run(["catalog", "publish", samples.appendingPathComponent("catalog-v2.json").path], ledger: ledger)
        #expect(published.status == 0 && published.stdout.contains("timeline/required"))
        let status = try Self.json(try Self.run(["status", "--subject", "alice", "--json"], ledger: ledger).stdout)
        let timeline = try #require((status["features"] as? [[String: Any]])?[1])
        let required = try #require((timeline["consents"] as? [[String: Any]])?[0])
        #expect(timeline["active"] as? Bool == false)
        #expect(required["state"] as? String == "outdated" && required["version"] as? String == "1.0" && required["currentVersion"] as? String == "2.0")
        let refused = try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "optional-b"], ledger: ledger)
        #expect(refused.status == 1 && refused.stderr.contains("outdated"), "\(refused.stderr)")
        #expect(try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        let history = try Self.json(try Self.run(["history", "--subject", "alice", "--json"], ledger: ledger).stdout)
        let last = try #require((history["events"] as? [[String: Any]])?.last)
        #expect(last["type"] as? String == "re-consent" && last["renews"] as? Int == 1 && last["version"] as? String == "2.0")
        #expect(try Self.run(["verify"], ledger: ledger).status == 0)
    }

    @Test func applyChecksEveryLineFirstThenAcknowledgesEachCommand() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let before = Self.snapshot(ledger)
        let bad: [(String, String)] = [
            (#"{"subject":"a","feature":"timeline","give":["required"]}"# + "\n{oops", "line 2: not JSON"),
            (#"{"subject":"a","feature":"diary","give":["required"]}"#, "unknown feature 'diary'"),
            (#"{"subject":"a","feature":"timeline","give":["optional-z"]}"#, "no consent 'optional-z'"),
            (#"{"subject":"a","feature":"timeline","give":["required"],"revoke":"required"}"#, "exactly one of"),
            (#"{"subject":"a","feature":"timeline","give":["required"],"colour":1}"#, "unknown member"),
            (#"["subject"]"#, "not a JSON object"),
            ("\n\n", "holds no commands"),
        ]
        for (content, problem) in bad {
            try content.write(toFile: dir + "/commands.jsonl", atomically: true, encoding: .utf8)
            let run = try Self.run(["apply", dir + "/commands.jsonl"], ledger: ledger)
            #expect(run.status == 64 && run.stderr.contains(problem), "\(problem): \(run.stderr)")
            #expect(Self.snapshot(ledger) == before, "a bad file appends nothing: \(problem)")
        }
        // A refused command stops the run; those before it stay, as their acknowledgements say.
        try """
            {"subject":"a","feature":"timeline","give":["required","optional-a"]}

            {"subject":"b","feature":"timeline","give":["optional-b"]}
            {"subject":"a","feature":"timeline","revoke":"required"}
            """.write(toFile: dir + "/commands.jsonl", atomically: true, encoding: .utf8)
        let partial = try Self.run(["apply", dir + "/commands.jsonl"], ledger: ledger)
        #expect(partial.status == 1)
        #expect(partial.stdout.split(separator: "\n").first == #"{"events":[1,2],"line":1,"ok":true}"#)
        // The refusal names the line whose command it refused, in JSON and on standard error.
        let refusal = try Self.json(String(try #require(partial.stdout.split(separator: "\n").last)))
        #expect(refusal["ok"] as? Bool == false && refusal["line"] as? Int == 3 && refusal["rule"] as? String == "R2")
        #expect(partial.stderr.contains("commands.jsonl line 3: rule violation"), "\(partial.stderr)")
        #expect(try Self.json(try Self.run(["verify", "--json"], ledger: ledger).stdout)["events"] as? Int == 3)
        // --atomic: all or nothing.
        let atomic = try Self.run(["apply", "--atomic", dir + "/commands.jsonl"], ledger: ledger)
        #expect(atomic.status == 1 && atomic.stdout.contains(#""ok":false"#) && !atomic.stdout.contains(#""ok":true"#))
        #expect(try Self.json(try Self.run(["verify", "--json"], ledger: ledger).stdout)["events"] as? Int == 3)
    }

    /// apply commits up to 256 commands per sync: 600 commands are 3 commits (3 signed heads
    /// in the log, each written again after its large commit), each command acknowledged, and
    /// the log holds every event once.
    @Test func applyCommitsInGroupsOfUpTo256() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let commands = (0..<600).map { #"{"subject":"p\#($0)","feature":"timeline","give":["required","optional-a"]}"# }
        try (commands.joined(separator: "\n") + "\n").write(toFile: dir + "/commands.jsonl", atomically: true, encoding: .utf8)
        let run = try Self.run(["apply", dir + "/commands.jsonl"], ledger: ledger)
        #expect(run.status == 0, "\(run.stderr)")
        let acknowledged = run.stdout.split(separator: "\n")
        #expect(acknowledged.count == 600 && acknowledged.allSatisfy { $0.contains(#""ok":true"#) })
        #expect(acknowledged.last == #"{"events":[1199,1200],"line":600,"ok":true}"#)
        let log = try String(contentsOfFile: ledger + "/ledger.jsonl", encoding: .utf8)
        let lines = log.split(separator: "\n")
        // A commit of more than 64 KiB has its head line written twice (Spec/ledger-format.md,
        // Writing, step 5): each of these three does.
        let heads = lines.indices.filter { lines[$0].hasPrefix(#"{"head""#) }
        let commits = heads.filter { lines[$0] != lines[$0 - 1] }
        #expect(commits.count == 1 + 3, "the genesis commit, then 256 + 256 + 88 commands")
        #expect(heads.count == 1 + 2 * 3, "the three large commits' head lines each written again")
        #expect(try Self.json(try Self.run(["verify", "--json"], ledger: ledger).stdout)["events"] as? Int == 1201)
    }

    /// prove-state writes a proof without the secret key; verify-state checks it offline,
    /// prints the state, and exits 2 naming the reason when an event was left out.
    @Test func proveStateAndVerifyStateOffline() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/states"], ledger: ledger).status == 0)
        try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        try Self.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        try Self.run(["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let key = try Self.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // No secret key is needed to prove.
        try FileManager.default.moveItem(atPath: ledger + "/secret.key", toPath: dir + "/secret.key")
        let before = Self.snapshot(ledger)
        let proved = try Self.run(["prove-state", "--subject", "alice", "--out", dir + "/alice.json"], ledger: ledger)
        #expect(proved.status == 0, "\(proved.stderr)")
        #expect(Self.snapshot(ledger) == before, "proving writes nothing in the ledger")
        let verified = try Self.run(["verify-state", dir + "/alice.json", "--key", key, "--json"], ledger: nil)
        #expect(verified.status == 0, "\(verified.stderr)")
        let report = try Self.json(verified.stdout)
        #expect(report["ok"] as? Bool == true && report["events"] as? Int == 4 && report["subject"] as? String == "alice")
        let text = try Self.run(["verify-state", dir + "/alice.json", "--key", key], ledger: nil)
        #expect(text.status == 0 && text.stdout.contains("No feature is active."), "\(text.stdout)")
        // The withdrawal left out: exit 2, with the reason.
        var object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/alice.json"))) as! [String: Any]
        object["events"] = Array((object["events"] as! [Any]).dropLast(2))
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: dir + "/cut.json"))
        let cut = try Self.run(["verify-state", dir + "/cut.json", "--key", key], ledger: nil)
        #expect(cut.status == 2 && cut.stderr.contains("events are missing or added"), "\(cut.stderr)")
        // As of a time before anything was given.
        #expect(try Self.run(["prove-state", "--subject", "alice", "--at", "2000-01-01", "--out", dir + "/old.json"], ledger: ledger).status == 0)
        let old = try Self.json(try Self.run(["verify-state", dir + "/old.json", "--key", key, "--json"], ledger: nil).stdout)
        #expect(old["events"] as? Int == 0 && old["at"] as? String == "2000-01-01T23:59:59.999Z")
        // Usage errors: an unknown subject, a bad time, no --out.
        #expect(try Self.run(["prove-state", "--subject", "carol", "--out", dir + "/c.json"], ledger: ledger).status == 64)
        #expect(try Self.run(["prove-state", "--subject", "alice", "--at", "yesterday", "--out", dir + "/c.json"], ledger: ledger).status == 64)
        #expect(try Self.run(["prove-state", "--subject", "alice"], ledger: ledger).status == 64)
    }

    @Test func migrateCopiesAFolderByteForByte() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try Self.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        #expect(try Self.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        let checkpoint = try Self.run(["checkpoint"], ledger: ledger).stdout
        let migrated = try Self.run(["migrate", "--to", dir + "/copy"], ledger: ledger)
        #expect(migrated.status == 0 && migrated.stdout.contains("verified equal in both"))
        #expect(try Self.run(["checkpoint"], ledger: dir + "/copy").stdout == checkpoint)
        var original = Self.snapshot(ledger), copy = Self.snapshot(dir + "/copy")
        original.removeValue(forKey: "recovered")
        copy.removeValue(forKey: "recovered")
        // The subject map is a cache whose records the copy writes compactly, in one go: the same
        // root (bytes 24–55 of the last record), fewer records.
        let (originalMap, copyMap) = (Array(original.removeValue(forKey: "subjects.map") ?? Data()), Array(copy.removeValue(forKey: "subjects.map") ?? Data()))
        #expect(originalMap.count >= 88 && Array(originalMap.suffix(88))[24..<56] == Array(copyMap.suffix(88))[24..<56])
        #expect(original == copy)
        #expect(try Self.run(["migrate", "--to", dir + "/copy"], ledger: ledger).status == 73)
        #expect(try Self.run(["migrate", "--to", ledger], ledger: ledger).status == 64)
        let noPostgres = try Self.run(["migrate", "--to", "mysql://x@y/z"], ledger: ledger)
        #expect(noPostgres.status == 64 && noPostgres.stderr.contains("neither a folder nor a postgres:// URL"))
    }
}
