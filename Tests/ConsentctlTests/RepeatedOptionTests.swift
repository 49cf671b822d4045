import Foundation
import Testing

/// An option that holds one value must never drop a repeated occurrence in silence: a repeat is
/// refused with exit 64 before anything runs, and `--consent` (the one repeatable option) is
/// honoured in full.
@Suite(.serialized) struct RepeatedOptionTests {
    typealias CLI = ConsentctlTests

    static let repeats: [[String]] = [
        ["give", "--subject", "p1", "--subject", "p2", "--feature", "timeline", "--consent", "required"],
        ["give", "--subject", "p1", "--feature", "timeline", "--feature", "medication-management", "--consent", "required"],
        ["give", "--subject", "p1", "--feature", "timeline", "--consent", "required", "--actor", "a", "--actor=b"],
        ["revoke", "--subject", "p1", "--subject=p2", "--feature", "timeline", "--consent", "required"],
        ["status", "--subject", "p1", "--subject", "p2"],
        ["status", "--subject", "p1", "--at", "2026-01-01", "--at", "2027-01-01"],
        ["history", "--subject", "p1", "--until", "2026-01-01", "--until", "2027-01-01"],
        ["report", "--subject", "p1", "--subject", "p2"],
        ["report", "--from", "2026-01-01", "--from", "2026-02-01"],
        ["export", "--subject", "p1", "--out", "/tmp/a.json", "--out", "/tmp/b.json"],
        ["init", "--insecure-plaintext-key", "--name", "a", "--name", "b"],
        ["status", "--subject", "p1", "--json", "--json"],
    ]

    @Test(arguments: repeats)
    func aRepeatedSingleValueOptionIsRefusedAndChangesNothing(_ arguments: [String]) throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try CLI.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let before = CLI.snapshot(ledger)
        let run = try CLI.run(arguments, ledger: ledger)
        #expect(run.status == 64, "\(arguments): \(run.stderr)")
        let names = arguments.filter { $0.hasPrefix("--") }.map { String($0.split(separator: "=")[0]) }
        let option = try #require(names.first { name in names.filter { $0 == name }.count > 1 })
        #expect(run.stderr.contains("\(option) is given more than once"), "\(run.stderr)")
        #expect(CLI.snapshot(ledger) == before)
    }

    @Test func theLedgerOptionRepeatedIsRefusedToo() throws {
        let run = try CLI.run(["--ledger", "/tmp/a", "--ledger", "/tmp/b", "status", "--subject", "p1"], ledger: nil)
        #expect(run.status == 64)
        #expect(run.stderr.contains("--ledger is given more than once"))
    }

    /// `revoke --consent required --consent optional-a` withdrew only optional-a: the parser
    /// kept the last value. Both are withdrawn now, in one command.
    @Test func revokeWithdrawsEveryNamedConsent() throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try CLI.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        #expect(try CLI.run(["give", "--subject", "p1", "--feature", "timeline", "--consent", "required", "--consent", "optional-a", "--consent", "optional-b"], ledger: ledger).status == 0)
        let revoke = try CLI.run(["revoke", "--subject", "p1", "--feature", "timeline", "--consent", "required", "--consent", "optional-a", "--json"], ledger: ledger)
        #expect(revoke.status == 0, "\(revoke.stderr)")
        let appended = try #require(try CLI.json(revoke.stdout)["appended"] as? [[String: Any]])
        #expect(appended.map { $0["consent"] as? String } == ["optional-a", "required", "optional-b"])
        #expect(appended.map { $0["type"] as? String } == ["withdrawn", "withdrawn", "cascade-withdrawn"])
        let status = try CLI.json(try CLI.run(["status", "--subject", "p1", "--json"], ledger: ledger).stdout)
        let features = try #require(status["features"] as? [[String: Any]])
        let timeline = try #require(features.first { $0["key"] as? String == "timeline" })
        #expect(timeline["active"] as? Bool == false)
        #expect(try CLI.run(["verify"], ledger: ledger).status == 0)
    }

    /// `apply` takes a list of consents to revoke, and checks the subject and actor of every
    /// line before appending anything.
    @Test func applyRevokesSeveralAndChecksEveryLineFirst() throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        #expect(try CLI.run(["init", "--insecure-plaintext-key"], ledger: ledger).status == 0)
        let good = dir + "/good.jsonl"
        try Data("""
            {"subject":"p1","feature":"timeline","give":["required","optional-a","optional-b"]}
            {"subject":"p1","feature":"timeline","revoke":["optional-b","required"]}

            """.utf8).write(to: URL(fileURLWithPath: good))
        let run = try CLI.run(["apply", good], ledger: ledger)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.split(separator: "\n").last == #"{"events":[4,5,6],"line":2,"ok":true}"#)
        for (name, line) in [
            ("empty subject", #"{"subject":"","feature":"timeline","give":["required"]}"#),
            ("control character", #"{"subject":"p\u0007","feature":"timeline","give":["required"]}"#),
            ("long actor", #"{"subject":"p2","feature":"timeline","give":["required"],"actor":"\#(String(repeating: "x", count: 200))"}"#),
        ] {
            let bad = dir + "/bad.jsonl"
            try Data((#"{"subject":"p3","feature":"timeline","give":["required"]}"# + "\n" + line + "\n").utf8).write(to: URL(fileURLWithPath: bad))
            let before = CLI.snapshot(ledger)
            let refused = try CLI.run(["apply", bad], ledger: ledger)
            #expect(refused.status == 64, "\(name): \(refused.stderr)")
            #expect(refused.stderr.contains("line 2"), "\(name): \(refused.stderr)")
            #expect(CLI.snapshot(ledger) == before, "\(name): nothing appended")
        }
    }
}
