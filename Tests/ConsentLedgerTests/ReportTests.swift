import ConsentDomain
import Foundation
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Every report section, every format, and as-of queries equal to replaying exactly the
/// events up to the time.
@Suite struct ReportTests {
    static func scenario(_ label: String) throws -> (Ledger, String) {
        let clock = SteppingClock(step: 3_600_000)
        let (ledger, path) = try PolicyVersionTests.ledger(label, clock: clock)
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required", "optional-a"]), actor: "dr.house"))
        try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0")]))
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .revoke(feature: "timeline", consent: "optional-a")))
        return (ledger, path)
    }

    @Test func everySectionOfTheReport() throws {
        let (ledger, path) = try Self.scenario("report")
        defer { removeFolder(path) }
        let report = try ledger.auditReport(ReportScope())
        let r = report.report
        #expect(r.entries.map(\.kind) == [.given, .given, .given, .given, .given, .withdrawn, .cascade, .given, .given, .policy, .reconsent, .withdrawn])
        #expect(r.entries.first { $0.kind == .cascade }?.cause == 6)
        #expect(r.entries.first { $0.kind == .reconsent }?.cause == 3)
        #expect(r.entries.first { $0.kind == .policy }?.changes == [AuditReport.PolicyChange(feature: 2, consent: "required", from: "1.0", to: "2.0")])
        let timelineRequired = r.counts.first { $0.feature == 2 && $0.consent == "required" }
        #expect(timelineRequired?.given == 2 && timelineRequired?.reconsent == 1)
        #expect(r.outdated.map { report.subjectID($0.subject) } == ["bob"])
        // Activity intervals: alice's Timeline ends at the publication and starts again at the
        // re-consent; Medication Management ends at the revocation.
        let alice = try #require(try ledger.subjectRef(for: "alice"))
        let aliceTimeline = r.intervals.filter { $0.subject == alice && $0.feature == 2 }
        #expect(aliceTimeline.count == 2 && aliceTimeline[0].until != nil && aliceTimeline[1].until == nil)
        let mm = try #require(r.withdrawals.first { $0.feature == 1 })
        // The seed scenario ran as one batch: granted and revoked at the same time.
        #expect(mm.revocations == 2 && mm.cascades == 1 && mm.medianGrantToRevocationMs == 0)
        let tl = try #require(r.withdrawals.first { $0.feature == 2 })
        let bobEvents = try ledger.report(for: "bob").events
        #expect(tl.revocations == 1 && tl.cascades == 0)
        #expect(tl.medianGrantToRevocationMs == bobEvents.last!.at.millisecondsSinceEpoch - bobEvents.first!.at.millisecondsSinceEpoch)
        #expect(tl.medianGrantToRevocationMs! > 0)
        #expect(report.checkpoint.size == 13)
        #expect(report.checkpoint.root == (try ledger.signedCheckpoint().checkpoint.root))
    }

    @Test func scopeFiltersBySubjectFeatureWindowAndActor() throws {
        let (ledger, path) = try Self.scenario("report-scope")
        defer { removeFolder(path) }
        let bob = try #require(try ledger.subjectRef(for: "bob"))
        let bySubject = try ledger.auditReport(ReportScope(subject: bob)).report
        #expect(bySubject.entries.allSatisfy { $0.subject == nil || $0.subject == bob })
        #expect(bySubject.subjects == [bob])
        let byFeature = try ledger.auditReport(ReportScope(feature: 1)).report
        #expect(byFeature.entries.allSatisfy { $0.feature == nil || $0.feature == 1 })
        let byActor = try ledger.auditReport(ReportScope(actor: "dr.house")).report
        #expect(byActor.entries.count == 2 && byActor.entries.allSatisfy { $0.actor == "dr.house" })
        // Every section, not only the events: only the subject dr.house acted on.
        #expect(byActor.subjects == [bob])
        #expect(byActor.intervals.allSatisfy { $0.subject == bob } && !byActor.intervals.isEmpty)
        #expect(byActor.outdated.allSatisfy { $0.subject == bob })
        #expect(byActor.counts.map(\.given).reduce(0, +) == 2)
        let events = try ledger.report(for: "alice").events
        let window = try ledger.auditReport(ReportScope(from: events[2].at, to: events[4].at)).report
        #expect(window.entries.allSatisfy { $0.at >= events[2].at && $0.at <= events[4].at })
        #expect(!window.entries.isEmpty)
    }

    /// A cell a spreadsheet would run as a formula (OWASP "CSV injection") starts with `'`:
    /// actors and subject ids come from whoever wrote the command.
    @Test(arguments: [("=HYPERLINK(\"http://x\")", "\"'=HYPERLINK(\"\"http://x\"\")\""), ("+49 30 1234", "'+49 30 1234"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"),
                      ("\tx", "'\tx"), ("\rx", "\"'\rx\""), ("dr.house", "dr.house"), ("a,b", "\"a,b\""), ("it's", "it's")])
    func csvCellsAreNeutralisedAgainstFormulas(_ case_: (String, String)) {
        #expect(LedgerReport.csvField(case_.0) == case_.1)
    }

    @Test func aFormulaActorReachesTheCSVAsText() throws {
        let path = LedgerPropertyTests.folder("csv-injection")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "csv", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "=cmd|' /C calc'!A0", request: .give(feature: "timeline", consents: ["required"]), actor: "@SUM(1+1)*cmd"))
        let csv = try ledger.auditReport(ReportScope()).csv
        let cells = parseCSV(csv).dropFirst().flatMap { $0 }
        #expect(cells.contains("'@SUM(1+1)*cmd") && cells.contains("'=cmd|' /C calc'!A0"), "\(csv)")
        #expect(!cells.contains { $0.first.map { "=+-@".contains($0) } == true }, "no cell starts a formula")
    }

    @Test func jsonCsvTextAndHtmlFormats() throws {
        let (ledger, path) = try Self.scenario("report-formats")
        defer { removeFolder(path) }
        let report = try ledger.auditReport(ReportScope())
        let json = try #require(try JSONSerialization.jsonObject(with: Data(CanonicalJSON.serialize(report.json))) as? [String: Any])
        #expect((json["events"] as? [Any])?.count == 12)
        let policy = (json["events"] as? [[String: Any]])?.first { $0["type"] as? String == "policy-change" }
        #expect((policy?["changes"] as? [[String: Any]])?.first?["to"] as? String == "2.0", "typed policy changes, not a display string")
        let counts = json["counts"] as? [[String: Any]]
        #expect(counts?.allSatisfy { Set($0.keys) == ["feature", "consent", "given", "re-consent", "withdrawn", "cascade-withdrawn"] } == true, "one vocabulary")
        #expect((json["withdrawal"] as? [[String: Any]])?.allSatisfy { $0["cascadeWithdrawals"] is Int && $0["withdrawals"] is Int } == true)
        #expect(report.text.split(separator: "\n").allSatisfy { $0.count <= LedgerReport.textWidth }, "text fits 100 columns")
        #expect(((json["checkpoint"] as? [String: Any])?["size"] as? Int) == 13)
        // CSV parsed back: the same events and counts.
        let rows = parseCSV(report.csv)
        #expect(rows.first == LedgerReport.csvHeader)
        let records = rows.dropFirst().map { Dictionary(uniqueKeysWithValues: zip(LedgerReport.csvHeader, $0)) }
        #expect(records.filter { $0["section"] == "event" }.map { $0["seq"]! } == report.report.entries.map { String($0.seq) })
        #expect(records.filter { $0["section"] == "count" }.count == report.report.counts.count)
        #expect(records.first { $0["section"] == "checkpoint" }?["value"]?.hasSuffix(Base64.encode(report.checkpoint.root.bytes)) == true)
        #expect(LedgerReport.csvField("a,\"b\"") == "\"a,\"\"b\"\"\"")
        #expect(report.text.contains("Subjects with outdated consents (1)"))
        let html = report.html
        #expect(html.contains("<svg class=\"chart\"") && html.contains("size \(report.checkpoint.size)"))
        #expect(!html.contains("<script src") && !html.contains("<link") && !html.contains("url(") && html.contains("default-src 'none'"))
    }

    /// The state at T equals replaying exactly the events up to T (with catalogue versions).
    @Test func stateAtATimeEqualsReplayingExactlyTheEventsUpToIt() async throws {
        await propertyCheck(count: 20, input: zip(LedgerPropertyTests.histories, Gen.int(in: 0...39))) { numbers, publishAt in
            let path = LedgerPropertyTests.folder("asof-prop")
            defer { removeFolder(path) }
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "asof", keyProtection: .insecurePlaintext, clock: SteppingClock(step: 60_000).clock)
            for (i, n) in numbers.enumerated() {
                if i == publishAt % numbers.count { try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0"), ("medication-management", "optional-a", "1.1")])) }
                _ = try? ledger.execute(LedgerCommand(subjectID: LedgerPropertyTests.command(n).subjectID, request: LedgerPropertyTests.command(n).request))
            }
            let lines = eventLines(of: readLog(path)).map { try! EventCodec.decode(line: Array($0.dropLast())).event }
            for cut in lines.indices where cut % 3 == 0 {
                let t = lines[cut].at
                var replay = LedgerReplay(catalog: SeedCatalog.catalog)
                for e in lines where e.at <= t { try! replay.apply(e) }
                for subject in LedgerPropertyTests.subjects {
                    guard let ref = try ledger.subjectRef(for: subject) else { continue }
                    let expected = ConsentListing(state: replay.state(of: ref), catalog: replay.catalog)
                    #expect(try ledger.report(for: subject, asOf: t).listing == expected, "\(subject) at \(t)")
                }
                let outdated = try ledger.auditReport(ReportScope(to: t)).report.outdated.count
                var expectedOutdated = 0
                for (_, state) in replay.subjects {
                    for f in replay.catalog.features { expectedOutdated += f.consents.filter { state.isOutdated(f, $0) }.count }
                }
                #expect(outdated == expectedOutdated)
            }
        }
    }

    func parseCSV(_ text: String) -> [[String]] {
        var rows: [[String]] = [], row: [String] = [], field = "", quoted = false
        var chars = Array(text)[...]
        while let c = chars.popFirst() {
            if quoted {
                if c == "\"" {
                    if chars.first == "\"" { field.append("\""); chars.removeFirst() } else { quoted = false }
                } else { field.append(c) }
            } else if c == "\"" { quoted = true }
            else if c == "," { row.append(field); field = "" }
            else if c == "\r\n" || c == "\n" { row.append(field); rows.append(row); row = []; field = "" }
            else { field.append(c) }
        }
        return rows
    }

    /// The HTML report a DPO reads at a glance: one chart, one time axis for every subject,
    /// markers of every event type, the cascade linked to its cause, policy changes across the
    /// chart, versions on the bars, a card per subject, the legend before the chart.
    @Test func theHTMLReportHasOneSharedAxisMarkersAndALegendFirst() throws {
        let (ledger, path) = try Self.scenario("report-html")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "<script>alert(1)</script>", request: .give(feature: "timeline", consents: ["required"])))
        let report = try ledger.auditReport(ReportScope())
        let html = report.html
        func count(_ needle: String) -> Int { html.components(separatedBy: needle).count - 1 }
        #expect(count("<svg class=\"chart\"") == 1, "one chart, so one axis")
        #expect(count("<g class=\"axis\">") == 1)
        let kinds = report.report.entries.filter { $0.kind != .policy }.map(\.kind.rawValue)
        for kind in Set(kinds) { #expect(count("<g class=\"marker \(kind)\">") == kinds.filter { $0 == kind }.count, "\(kind)") }
        #expect(count("<g class=\"policy-line\">") == report.report.entries.filter { $0.kind == .policy }.count)
        #expect(count("class=\"cause-link\"") == report.report.entries.filter { $0.kind == .cascade }.count)
        #expect(count("<g class=\"bar\">") == report.report.intervals.count)
        #expect(html.contains(">v2.0</text>") || html.contains(">v1.0</text>"), "versions on the bars")
        #expect(count("<article class=\"card\">") == report.report.subjects.count)
        let legend = try #require(html.range(of: "id=\"legend\"")), chart = try #require(html.range(of: "id=\"timeline\""))
        #expect(legend.lowerBound < chart.lowerBound)
        #expect(!html.contains("<script>alert(1)</script>") && html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "data is text, not markup")
        // Cards in subject-id order, not pseudonym order.
        let cardNames = html.components(separatedBy: "<article class=\"card\"><h3>").dropFirst().map { String($0.prefix { $0 != "<" }) }
        #expect(cardNames == cardNames.sorted())
        // Tick labels put the time under the date: on one line, neighbouring labels overlapped.
        let axis = try #require(html.components(separatedBy: "<g class=\"axis\">").dropFirst().first?.components(separatedBy: "</g>").first)
        let labels = axis.components(separatedBy: "<text ").dropFirst()
        #expect(labels.count == 6)
        for label in labels {
            let firstLine = label.drop { $0 != ">" }.dropFirst().prefix { $0 != "<" }
            #expect(firstLine.count == 10 && label.contains("<tspan "), "date alone on the first line: \(label)")
        }
    }
}
