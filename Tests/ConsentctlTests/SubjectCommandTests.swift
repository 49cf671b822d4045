import Foundation
import Testing

/// Subjects can be listed and found, and a subject with no events is a normal answer that says
/// so, naming the ids it may be a typo of; `--must-exist` makes it an error for scripts.
@Suite(.serialized) struct SubjectCommandTests {
    static func ledger() throws -> (dir: String, ledger: String) {
        let dir = ConsentctlTests.temporaryFolder()
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        for subject in ["patient-1043", "alice", "patient-1042", "alicia", "bob"] {
            try ConsentctlTests.run(["give", "--subject", subject, "--feature", "timeline", "--consent", "required"], ledger: ledger)
        }
        return (dir, ledger)
    }

    @Test func subjectsListShowsTheIdsWithEventsInByteOrder() throws {
        let (dir, ledger) = try Self.ledger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // A give that is refused saves no events for its subject: not listed.
        #expect(try ConsentctlTests.run(["give", "--subject", "carol", "--feature", "timeline", "--consent", "optional-a"], ledger: ledger).status == 1)
        let listed = try ConsentctlTests.run(["subjects", "list"], ledger: ledger)
        #expect(listed.status == 0 && listed.stdout == "alice\nalicia\nbob\npatient-1042\npatient-1043\n", "\(listed.stdout)")
        let json = try ConsentctlTests.json(try ConsentctlTests.run(["subjects", "list", "--prefix", "patient-", "--format", "json"], ledger: ledger).stdout)
        #expect(json["subjects"] as? [String] == ["patient-1042", "patient-1043"] && json["count"] as? Int == 2)
        #expect(try ConsentctlTests.run(["subjects", "--prefix", "zz"], ledger: ledger).stdout.contains("No subject id starts with 'zz'"))
    }

    /// (command, expected exit code without --must-exist)
    @Test(arguments: [(["status"], 0), (["history"], 0), (["revoke", "--feature", "timeline", "--consent", "required"], 0), (["export", "--out", "OUT"], 64), (["prove-state", "--out", "OUT"], 64)])
    func anUnknownSubjectIsANormalAnswerThatNamesCloseMatches(_ case_: ([String], Int)) throws {
        let (dir, ledger) = try Self.ledger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let before = ConsentctlTests.snapshot(ledger)
        let arguments = [case_.0[0], "--subject", "alcie"] + case_.0.dropFirst().map { $0 == "OUT" ? dir + "/out.json" : $0 }
        let run = try ConsentctlTests.run(arguments, ledger: ledger)
        #expect(Int(run.status) == case_.1, "\(arguments): \(run.stderr)")
        let said = run.stdout + run.stderr
        #expect(said.contains("Nothing was ever recorded for 'alcie'") && said.contains("Did you mean 'alice' or 'alicia'?"), "\(said)")
        #expect(ConsentctlTests.snapshot(ledger) == before, "nothing appended, nothing written")
        #expect(!FileManager.default.fileExists(atPath: dir + "/out.json"))
        if case_.1 == 0 {
            let strict = try ConsentctlTests.run(arguments + ["--must-exist"], ledger: ledger)
            #expect(strict.status == 64 && strict.stderr.contains("Nothing was ever recorded for 'alcie'"), "\(strict.stderr)")
        }
    }

    @Test func aKnownSubjectIsNotUnknownAndStatusJSONSaysWhichItIs() throws {
        let (dir, ledger) = try Self.ledger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let known = try ConsentctlTests.json(try ConsentctlTests.run(["status", "--subject", "alice", "--json", "--must-exist"], ledger: ledger).stdout)
        #expect(known["known"] as? Bool == true && known["note"] == nil)
        let unknown = try ConsentctlTests.json(try ConsentctlTests.run(["status", "--subject", "zed", "--json"], ledger: ledger).stdout)
        #expect(unknown["known"] as? Bool == false && unknown["empty"] as? Bool == true && (unknown["note"] as? String)?.contains("Nothing was ever recorded for 'zed'.") == true)
        // revoke answers an unknown subject in the shape of every command result: every feature
        // off, nothing appended, the warning as a note.
        let revoked = try ConsentctlTests.json(try ConsentctlTests.run(["revoke", "--subject", "zed", "--feature", "timeline", "--consent", "required", "--json"], ledger: ledger).stdout)
        let features = try #require(revoked["features"] as? [[String: Any]])
        #expect(revoked["known"] as? Bool == false && (revoked["appended"] as? [Any])?.isEmpty == true)
        #expect(features.count == 2 && features.allSatisfy { $0["active"] as? Bool == false })
        #expect((revoked["notes"] as? [String])?.first?.contains("Nothing was ever recorded for 'zed'.") == true)
        // A withdrawn subject is known: its history is not empty.
        try ConsentctlTests.run(["revoke", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(try ConsentctlTests.run(["history", "--subject", "bob", "--must-exist"], ledger: ledger).status == 0)
    }
}

/// Asking about one subject checks that subject's record only: an unrelated damaged record does
/// not stop the answer (verify names it), and the read costs one record, not all of them (the
/// first version checked every record's signature, 0.4 s at 10,000 subjects).
@Suite(.serialized) struct SubjectRecordScopeTests {
    @Test func aDamagedRecordOfAnotherSubjectDoesNotStopStatus() throws {
        let (dir, ledger) = try SubjectCommandTests.ledger()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = ledger + "/subjects.jsonl"
        var lines = String(decoding: try #require(FileManager.default.contents(atPath: path)), as: UTF8.self).split(separator: "\n").map(String.init)
        let bob = try #require(lines.firstIndex { $0.contains(#""id":"bob""#) })
        let sig = try #require(lines[bob].range(of: #""sig":""#))
        let at = lines[bob].index(sig.upperBound, offsetBy: 3)
        lines[bob].replaceSubrange(at...at, with: lines[bob][at] == "0" ? "1" : "0")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
        let alice = try ConsentctlTests.run(["status", "--subject", "alice", "--must-exist"], ledger: ledger)
        #expect(alice.status == 0 && alice.stdout.contains("Timeline"), "\(alice.stderr)")
        #expect(try ConsentctlTests.run(["status", "--subject", "bob"], ledger: ledger).status == 2)
        #expect(try ConsentctlTests.run(["verify"], ledger: ledger).status == 2)
    }
}

/// `give --effective-at/--channel/--notice-language/--evidence` and the same members in `apply`:
/// recorded on the grant, shown by history and status, refused with exit 64 when wrong.
@Suite(.serialized) struct GrantEvidenceCommandTests {
    @Test func aPaperConsentGivenYesterdayKeepsBothTimes() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        let yesterday = String(ISO8601DateFormatter().string(from: Date(timeIntervalSinceNow: -86_400)))
        let give = try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required", "--effective-at", yesterday,
                                            "--channel", "paper", "--notice-language", "de", "--evidence", "scan-0042"], ledger: ledger)
        #expect(give.status == 0, "\(give.stderr)")
        let history = try ConsentctlTests.json(try ConsentctlTests.run(["history", "--subject", "bob", "--json"], ledger: ledger).stdout)
        let event = (history["events"] as? [[String: Any]])?.first
        #expect(event?["channel"] as? String == "paper" && event?["noticeLanguage"] as? String == "de" && event?["evidence"] as? String == "scan-0042")
        let effective = event?["effectiveAt"] as? String, recorded = event?["at"] as? String
        #expect(effective != nil && recorded != nil && effective! < recorded!)
        let status = try ConsentctlTests.json(try ConsentctlTests.run(["status", "--subject", "bob", "--json"], ledger: ledger).stdout)
        let timeline = (status["features"] as? [[String: Any]])?.first { $0["key"] as? String == "timeline" }
        let required = (timeline?["consents"] as? [[String: Any]])?.first
        #expect(required?["effectiveAt"] as? String == effective && required?["validFrom"] as? String == recorded)
        let text = try ConsentctlTests.run(["history", "--subject", "bob"], ledger: ledger).stdout
        #expect(text.contains("paper") && text.contains("evidence scan-0042"), "\(text)")
        #expect(try ConsentctlTests.run(["verify"], ledger: ledger).status == 0)
    }

    /// A paper form dated today is recorded with the date alone: a bare date means the start of
    /// that day here (the end of the day would be a time in the future), in the zone of --tz.
    @Test(arguments: [("UTC", "T00:00:00.000Z"), ("+02:00", "T22:00:00.000Z")])
    func aBareEffectiveDateMeansTheStartOfThatDay(zone: String, suffix: String) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate]
        let today = formatter.string(from: Date())
        let give = try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required", "--effective-at", today, "--tz", zone, "--json"], ledger: ledger)
        #expect(give.status == 0, "\(give.stderr)")
        let event = (try ConsentctlTests.json(give.stdout)["appended"] as? [[String: Any]])?.first
        let effective = try #require(event?["effectiveAt"] as? String)
        // With +02:00 the local day starts at 22:00 UTC the day before.
        #expect(effective.hasSuffix(suffix), "\(effective)")
        #expect(zone != "UTC" || effective.hasPrefix(today))
    }

    /// (extra arguments, what the message names)
    @Test(arguments: [
        (["--effective-at", "2999-01-01T00:00:00Z"], "in the future"),
        (["--effective-at", "yesterday"], "--effective-at"),
        (["--channel", "fax"], "--channel"),
        (["--notice-language", "de_DE"], "BCP 47"),
        (["--evidence", ""], "evidence reference is empty"),
    ])
    func wrongEvidenceIsAUsageErrorAndAppendsNothing(extra: [String], names: String) throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        let before = try Data(contentsOf: URL(fileURLWithPath: ledger + "/ledger.jsonl"))
        let run = try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"] + extra, ledger: ledger)
        #expect(run.status == 64 && run.stderr.contains(names), "\(run.status) \(run.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: ledger + "/ledger.jsonl")) == before)
    }

    @Test func applyLinesCarryEvidenceAndARevokeWithEvidenceIsRefused() throws {
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        let good = dir + "/good.jsonl", bad = dir + "/bad.jsonl"
        try #"{"subject":"carol","feature":"timeline","give":["required"],"channel":"phone","noticeLanguage":"en-GB"}"#.write(toFile: good, atomically: true, encoding: .utf8)
        #expect(try ConsentctlTests.run(["apply", good], ledger: ledger).status == 0)
        let history = try ConsentctlTests.json(try ConsentctlTests.run(["history", "--subject", "carol", "--json"], ledger: ledger).stdout)
        #expect((history["events"] as? [[String: Any]])?.first?["channel"] as? String == "phone")
        try #"{"subject":"carol","feature":"timeline","revoke":"required","channel":"phone"}"#.write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try ConsentctlTests.run(["apply", bad], ledger: ledger)
        #expect(refused.status == 64 && refused.stderr.contains("line 1"), "\(refused.stderr)")
    }
}
