import Foundation
import Testing

/// The catalogue workflow: show, edit, preview, publish.
@Suite(.serialized) struct CatalogCommandTests {
    static func ledgerWithTwoSubjects() throws -> (dir: String, ledger: String) {
        let dir = ConsentctlTests.temporaryFolder()
        let ledger = dir + "/ledger"
        try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        try ConsentctlTests.run(["give", "--subject", "bob", "--feature", "medication-management", "--consent", "required"], ledger: ledger)
        return (dir, ledger)
    }

    /// The catalogue as `catalog show --format json` prints it, with `change` applied.
    static func shownCatalogue(_ ledger: String, _ change: (inout [String: Any]) -> Void = { _ in }) throws -> Data {
        let shown = try ConsentctlTests.run(["catalog", "show", "--format", "json"], ledger: ledger)
        #expect(shown.status == 0)
        var catalogue = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        change(&catalogue)
        return try JSONSerialization.data(withJSONObject: catalogue, options: [.sortedKeys])
    }

    static func setVersion(_ version: String, feature: String, consent: String) -> (inout [String: Any]) -> Void {
        { catalogue in
            var features = catalogue["features"] as! [[String: Any]]
            let f = features.firstIndex { $0["key"] as? String == feature }!
            var consents = features[f]["consents"] as! [[String: Any]]
            let c = consents.firstIndex { $0["code"] as? String == consent }!
            consents[c]["version"] = version
            features[f]["consents"] = consents
            catalogue["features"] = features
        }
    }

    @Test func catalogShowJSONIsWhatPublishReadsAndTheSameCatalogueIsANoOp() throws {
        let (dir, ledger) = try Self.ledgerWithTwoSubjects()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let shown = try ConsentctlTests.run(["catalog", "show", "--format", "json"], ledger: ledger).stdout
        try Data(shown.utf8).write(to: URL(fileURLWithPath: dir + "/catalog.json"))
        let before = ConsentctlTests.snapshot(ledger)
        let again = try ConsentctlTests.run(["catalog", "publish", dir + "/catalog.json"], ledger: ledger)
        #expect(again.status == 0 && again.stdout.contains("Nothing to publish"), "\(again.stdout) \(again.stderr)")
        #expect(ConsentctlTests.snapshot(ledger) == before, "nothing appended")
        // `catalog` alone shows it; `--json` is `--format json`.
        #expect(try ConsentctlTests.run(["catalog", "--json"], ledger: ledger).stdout == shown)
        #expect(try ConsentctlTests.run(["catalog"], ledger: ledger).stdout.contains("Timeline (key timeline, code 2)"))
    }

    @Test func aDryRunNamesEachChangeAndCountsOutdatedSubjectsAndAppendsNothing() throws {
        let (dir, ledger) = try Self.ledgerWithTwoSubjects()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.shownCatalogue(ledger, Self.setVersion("2.0", feature: "timeline", consent: "required")).write(to: URL(fileURLWithPath: dir + "/v2.json"))
        let before = ConsentctlTests.snapshot(ledger)
        let dry = try ConsentctlTests.run(["catalog", "publish", dir + "/v2.json", "--dry-run"], ledger: ledger)
        #expect(dry.status == 0)
        #expect(dry.stdout.contains("timeline/required") && dry.stdout.contains("v1.0 -> v2.0") && dry.stdout.contains("2 subjects' grants outdated"), "\(dry.stdout)")
        let json = try ConsentctlTests.json(try ConsentctlTests.run(["catalog", "publish", dir + "/v2.json", "--dry-run", "--format", "json"], ledger: ledger).stdout)
        #expect(json["published"] as? Bool == false && json["subjectsOutdated"] as? Int == 2)
        let change = try #require((json["changes"] as? [[String: Any]])?.first)
        #expect(change["feature"] as? String == "timeline" && change["oldVersion"] as? String == "1.0" && change["newVersion"] as? String == "2.0" && change["subjectsOutdated"] as? Int == 2)
        #expect(ConsentctlTests.snapshot(ledger) == before, "a dry run appends nothing")
        let published = try ConsentctlTests.run(["catalog", "publish", dir + "/v2.json"], ledger: ledger)
        #expect(published.status == 0 && published.stdout.contains("Published catalogue version"), "\(published.stdout)")
        #expect(ConsentctlTests.snapshot(ledger) != before)
    }

    @Test(arguments: ["2.0 ", " 2.0", "", "2 0", "2.0\t", ".2", "2.0-", String(repeating: "1", count: 33)])
    func aVersionOfTheWrongShapeIsRefusedAndChangesNothing(_ version: String) throws {
        let (dir, ledger) = try Self.ledgerWithTwoSubjects()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.shownCatalogue(ledger, Self.setVersion(version, feature: "timeline", consent: "required")).write(to: URL(fileURLWithPath: dir + "/bad.json"))
        let before = ConsentctlTests.snapshot(ledger)
        for arguments in [["catalog", "publish", dir + "/bad.json"], ["catalog", "publish", dir + "/bad.json", "--dry-run"]] {
            let refused = try ConsentctlTests.run(arguments, ledger: ledger)
            #expect(refused.status == 64 || refused.status == 65, "\(version.debugDescription): \(refused.stderr)")
            #expect(refused.stderr.contains("version"), "\(refused.stderr)")
        }
        #expect(ConsentctlTests.snapshot(ledger) == before)
    }
}
