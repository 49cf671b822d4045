import Foundation
import Testing

/// Handing a verifier the wrong kind of file is a usage error (64) that says what the file is;
/// exit 2, which an auditor reads as "tampered", is kept for a file of the right kind that fails.
@Suite(.serialized) struct EvidenceFileTests {
    /// A ledger with alice, and every kind of file its commands write.
    static func files() throws -> (dir: String, key: String) {
        let dir = ConsentctlTests.temporaryFolder()
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let old = dir + "/old.checkpoint"
        try Data(try ConsentctlTests.run(["checkpoint"], ledger: ledger).stdout.utf8).write(to: URL(fileURLWithPath: old))
        try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        try ConsentctlTests.run(["export", "--subject", "alice", "--out", dir + "/export.json"], ledger: ledger)
        try ConsentctlTests.run(["export", "--subject", "alice", "--format", "fhir", "--out", dir + "/fhir.json"], ledger: ledger)
        try ConsentctlTests.run(["prove-state", "--subject", "alice", "--out", dir + "/state.json"], ledger: ledger)
        try ConsentctlTests.run(["prove-consistency", "--from", old, "--out", dir + "/consistency.json"], ledger: ledger)
        try ConsentctlTests.run(["report", "--html", dir + "/report.html"], ledger: ledger)
        let key = try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .newlines)
        return (dir, key)
    }

    static let commands = [("verify-export", "export.json", "an export bundle"), ("verify-state", "state.json", "a state proof"), ("verify-consistency", "consistency.json", "a consistency proof")]
    static let others = [("export.json", "an export bundle"), ("state.json", "a state proof"), ("consistency.json", "a consistency proof"), ("fhir.json", "a FHIR Bundle"),
                         ("report.html", "an HTML or XML document"), ("ledger/ledger.jsonl", "a ledger's log"), ("ledger/catalog.json", "a catalogue")]

    @Test func theWrongKindOfFileIsAUsageErrorThatSaysWhatItIs() throws {
        let (dir, key) = try Self.files()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for (command, own, name) in Self.commands {
            #expect(try ConsentctlTests.run([command, dir + "/" + own, "--key", key], ledger: nil).status == 0, "\(command) \(own)")
            for (file, kind) in Self.others where file != own {
                let refused = try ConsentctlTests.run([command, dir + "/" + file, "--key", key], ledger: nil)
                #expect(refused.status == 64, "\(command) \(file): \(refused.stderr)")
                #expect(refused.stderr.contains("is \(kind)") && refused.stderr.contains("not \(name)"), "\(command) \(file): \(refused.stderr)")
            }
        }
    }

    /// A file of the right kind that fails, tampered or cut short, is still exit 2.
    @Test func aDamagedFileOfTheRightKindIsStillAnIntegrityFailure() throws {
        let (dir, key) = try Self.files()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for (command, own, _) in Self.commands {
            let bytes = try #require(FileManager.default.contents(atPath: dir + "/" + own))
            try bytes.prefix(bytes.count / 2).write(to: URL(fileURLWithPath: dir + "/cut.json"))
            let cut = try ConsentctlTests.run([command, dir + "/cut.json", "--key", key], ledger: nil)
            #expect(cut.status == 2, "\(command) on a file cut short: \(cut.stderr)")
            var text = String(decoding: bytes, as: UTF8.self)
            let root = try #require(text.range(of: "\"root\":\"") ?? text.range(of: "\\n", options: .backwards))
            let at = text.index(root.upperBound, offsetBy: 2)
            text.replaceSubrange(at...at, with: text[at] == "A" ? "B" : "A")
            try Data(text.utf8).write(to: URL(fileURLWithPath: dir + "/tampered.json"))
            let tampered = try ConsentctlTests.run([command, dir + "/tampered.json", "--key", key], ledger: nil)
            #expect(tampered.status == 2, "\(command) on a tampered file: \(tampered.stderr)")
        }
    }
}
