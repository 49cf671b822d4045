import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// The verifier key has one spelling, NAME+HASH+BASE64: `init`, `verify` and `key show` print
/// it, and `--key` takes it as text or as a file, saying which it tried when it fails.
@Suite(.serialized) struct KeyCommandTests {
    @Test func initVerifyAndKeyShowPrintTheSameVerifierKey() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        let created = try ConsentctlTests.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/consents"], ledger: ledger)
        let key = try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .newlines)
        #expect(key.hasPrefix("clinic.example/consents+") && key.split(separator: "+", maxSplits: 2).count == 3)
        #expect(created.stdout.contains("verifier key: " + key))
        #expect(try ConsentctlTests.run(["verify"], ledger: ledger).stdout.contains(key))
        #expect(try ConsentctlTests.json(try ConsentctlTests.run(["verify", "--json"], ledger: ledger).stdout)["verifierKey"] as? String == key)
        let json = try ConsentctlTests.json(try ConsentctlTests.run(["key", "show", "--format", "json"], ledger: ledger).stdout)
        #expect(json["verifierKey"] as? String == key && json["name"] as? String == "clinic.example/consents")
        #expect(try ConsentctlTests.run(["key"], ledger: ledger).stdout.trimmingCharacters(in: .newlines) == key, "'key' alone shows it")
    }

    /// A signing key that others could read or swap is refused before it is used, with the fix;
    /// a FIFO in its place does not hang the command; reads never touch the key.
    /// (how the key file is spoiled, what the message must say)
    @Test(arguments: [
        ("world-readable", "can be read or written by group or others (mode 0644); make it private to its owner: chmod 600"),
        ("group-writable", "can be read or written by group or others (mode 0620)"),
        ("symlink", "is a symbolic link; it must be a file of its own"),
        ("fifo", "is not a regular file"),
    ])
    func anUnsafeSigningKeyIsRefusedWithItsFix(_ case_: (String, String)) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger", key = ledger + "/secret.key"
        let created = try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        #expect(created.status == 0, "\(created.stderr)")
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        switch case_.0 {
        case "world-readable": #expect(chmod(key, 0o644) == 0)
        case "group-writable": #expect(chmod(key, 0o620) == 0)
        case "symlink":
            #expect(rename(key, dir + "/elsewhere.key") == 0 && symlink(dir + "/elsewhere.key", key) == 0)
        default:
            #expect(unlink(key) == 0 && mkfifo(key, 0o600) == 0)
        }
        let before = ConsentctlTests.snapshot(ledger)
        let give = try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(give.status == 64 && give.stderr.contains("the signing key \(key) ") && give.stderr.contains(case_.1), "\(give.stderr)")
        #expect(ConsentctlTests.snapshot(ledger) == before, "nothing was appended")
        // Reads need no key: they answer as before.
        let status = try ConsentctlTests.run(["status", "--subject", "alice"], ledger: ledger)
        #expect(status.status == 0 && status.stdout.contains("Timeline"), "\(status.stderr)")
        #expect(try ConsentctlTests.run(["verify"], ledger: ledger).status == 0)
    }

    /// (what --key is given, what the message must say)
    @Test(arguments: [
        ("hex", "is a raw public key in hex"),
        ("missing-file", "is neither a verifier key NAME+HASH+BASE64"),
        ("garbled-text", "the text given is not a verifier key"),
        ("file-with-garbage", "is not a verifier key"),
        ("file-with-hex", "is a raw public key in hex"),
    ])
    func aKeyThatIsNotAVerifierKeySaysWhatWasTried(_ case_: (String, String)) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        try ConsentctlTests.run(["export", "--subject", "alice", "--out", dir + "/alice.json"], ledger: ledger)
        let good = try ConsentctlTests.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .newlines)
        let publicKeyFile = try #require(FileManager.default.contents(atPath: ledger + "/public.key"))
        let publicKey = String(decoding: publicKeyFile, as: UTF8.self).trimmingCharacters(in: .newlines)
        let argument: String
        switch case_.0 {
        case "hex": argument = publicKey
        case "missing-file": argument = dir + "/no-such.vkey"
        case "garbled-text": argument = good.replacingOccurrences(of: "+", with: "+x", options: [], range: good.range(of: "+"))
        case "file-with-garbage":
            argument = dir + "/garbage.vkey"
            try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: argument))
        default:
            argument = dir + "/hex.vkey"
            try Data((publicKey + "\n").utf8).write(to: URL(fileURLWithPath: argument))
        }
        let refused = try ConsentctlTests.run(["verify-export", dir + "/alice.json", "--key", argument], ledger: nil)
        #expect(refused.status == 64, "a usage error, not tampering: \(refused.stderr)")
        #expect(refused.stderr.contains(case_.1), "\(refused.stderr)")
        // The right key, as text and as a file, verifies.
        try Data((good + "\n").utf8).write(to: URL(fileURLWithPath: dir + "/good.vkey"))
        #expect(try ConsentctlTests.run(["verify-export", dir + "/alice.json", "--key", good], ledger: nil).status == 0)
        #expect(try ConsentctlTests.run(["verify-export", dir + "/alice.json", "--key", dir + "/good.vkey"], ledger: nil).status == 0)
    }
}
