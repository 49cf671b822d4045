import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Publishing catalogue versions, outdated consents, re-consent, and replay under the
/// catalogue in force.
@Suite struct PolicyVersionTests {
    /// The seed catalogue with some consents' versions changed.
    static func catalog(bumping changes: [(String, String, String)]) -> Catalog {
        let features = SeedCatalog.catalog.features.map { f in
            Feature(code: f.code, key: f.key, names: f.names, consents: f.consents.map { c in
                let version = changes.first { $0.0 == f.key && $0.1 == c.code }?.2 ?? c.version
                return ConsentDefinition(code: c.code, names: c.names, isRequired: c.isRequired, link: c.link, version: version)
            })
        }
        return try! Catalog(features: features)
    }

    static func ledger(_ label: String, clock: SteppingClock = SteppingClock(step: 60_000)) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext, clock: clock.clock)
        try ledger.execute(Array(seedScenario))
        return (ledger, path)
    }

    func line(_ ledger: Ledger, _ subject: String, _ feature: String) throws -> FeatureLine {
        try ledger.report(for: subject).listing.features.first { $0.feature.key == feature }!
    }

    /// A long-running writer keeps the catalogue versions it read, and reads them again once the
    /// ledger stream has a newer event: a version another process published decides its next
    /// grant.
    @Test func aWriterSeesAVersionAnotherProcessPublished() throws {
        // The other process keeps the same time: its clock and the writer's are one machine's.
        let clock = SteppingClock(step: 60_000)
        let (writer, path) = try Self.ledger("other-process", clock: clock)
        defer { removeFolder(path) }
        try writer.execute(LedgerCommand(subjectID: "erin", request: .give(feature: "timeline", consents: ["required"])))
        let other = try Ledger.open(store: FileLedgerStore(directory: path), clock: clock.clock)
        try other.publish(Self.catalog(bumping: [("timeline", "required", "2.0")]))
        let (result, _) = try writer.execute(LedgerCommand(subjectID: "frank", request: .give(feature: "timeline", consents: ["required"])))
        guard case .consentGiven(let given) = try #require(result.events.first).payload else { Issue.record("not a grant"); return }
        #expect(given.version == "2.0")
        #expect(try writer.verify().events > 0)
    }

    @Test func aChangedRequiredVersionOutdatesGrantsAndDeactivatesTheFeature() throws {
        let (ledger, path) = try Self.ledger("outdated")
        defer { removeFolder(path) }
        #expect(try line(ledger, "alice", "timeline").isActive)
        let event = try #require(try ledger.publish(Self.catalog(bumping: [("timeline", "required", "2.0")])))
        guard case .catalogPublished(let published) = event.payload else { Issue.record("not a publish event"); return }
        #expect(published.notices.count == 6)
        #expect(published.notices.first { $0.feature == 2 && $0.consent == "required" }?.version == "2.0")

        let timeline = try line(ledger, "alice", "timeline")
        #expect(!timeline.isActive, "an outdated required consent deactivates the feature")
        let required = timeline.consents[0]
        #expect(required.isOutdated && required.givenVersion == "1.0" && required.definition.version == "2.0")
        #expect(!timeline.consents[1].isOutdated, "optional consents of an unchanged version stay current")
        #expect(timeline.consents[1].isGiven, "outdated is not withheld: no cascade")

        // An optional consent alone cannot be given while the feature is inactive.
        #expect(throws: ConsentError.self) {
            try ledger.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "optional-a")))
            try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        }
        // Re-consent records the new version and names the grant it renews.
        let (result, _) = try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        guard case .consentGiven(let given) = result.events[0].payload else { Issue.record("not a grant"); return }
        #expect(given.version == "2.0" && given.renews == 3)
        #expect(HistoryEntry(result.events[0])?.kind == .reconsent)
        #expect(try line(ledger, "alice", "timeline").isActive)
        #expect(try ledger.verify().events == 11)
    }

    @Test func aChangedOptionalVersionIsOutdatedButKeepsTheFeatureActive() throws {
        let (ledger, path) = try Self.ledger("optional")
        defer { removeFolder(path) }
        try ledger.publish(Self.catalog(bumping: [("timeline", "optional-b", "1.1")]))
        let timeline = try line(ledger, "alice", "timeline")
        #expect(timeline.isActive)
        #expect(timeline.consents[2].isOutdated && !timeline.consents[1].isOutdated)
        let (result, _) = try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-b"])))
        #expect(result.events.count == 1)
        #expect(!(try line(ledger, "alice", "timeline")).consents[2].isOutdated)
    }

    @Test func replayAtATimeUsesTheCatalogueInForceThen() throws {
        let clock = SteppingClock(step: 60_000)
        let (ledger, path) = try Self.ledger("asof-catalog", clock: clock)
        defer { removeFolder(path) }
        let before = try ledger.report(for: "alice").events.last!.at
        try ledger.publish(Self.catalog(bumping: [("timeline", "required", "2.0")]))
        #expect(try ledger.report(for: "alice", asOf: before).listing.features[1].isActive, "before the publication Timeline was active")
        #expect(!(try ledger.report(for: "alice").listing.features[1].isActive))
        let versions = try ledger.catalogHistory()
        #expect(versions.map(\.seq) == [0, 8])
    }

    /// Publishing the catalogue in force is a no-op; a structural change, or a policy version of
    /// the wrong shape, is refused. Neither appends anything.
    @Test func publishingRefusesStructuralChangesAndIgnoresNoOps() throws {
        let (ledger, path) = try Self.ledger("publish-refused")
        defer { removeFolder(path) }
        let log = readLog(path)
        #expect(try ledger.publish(SeedCatalog.catalog) == nil)
        #expect(try ledger.previewPublication(SeedCatalog.catalog).changes.isEmpty)
        let fewer = try Catalog(features: [SeedCatalog.catalog.features[0]])
        #expect(throws: ConsentError.self) { try ledger.publish(fewer) }
        #expect(throws: ConsentError.self) { try ledger.previewPublication(fewer) }
        #expect(throws: ConsentError.self) { try ledger.publish(Self.catalog(bumping: [("timeline", "required", "2.0 ")])) }
        #expect(readLog(path) == log)
    }

    /// The preview names each changed consent and counts the subjects whose current grant
    /// would become outdated (a grant already outdated, or of another consent, is not counted).
    @Test func aPreviewCountsTheSubjectsAPublicationWouldOutdate() throws {
        let (ledger, path) = try Self.ledger("preview")
        defer { removeFolder(path) }
        let before = try ledger.loadAll().subjects.count
        let preview = try ledger.previewPublication(Self.catalog(bumping: [("timeline", "required", "2.0"), ("timeline", "optional-b", "1.1")]))
        #expect(preview.changes.map { "\($0.feature)/\($0.consent) \($0.oldVersion)->\($0.newVersion)" } == ["timeline/required 1.0->2.0", "timeline/optional-b 1.0->1.1"])
        let replay = try ledger.loadAll()
        let requiredGiven = replay.subjects.values.filter { $0.isGiven(feature: 2, consent: "required") }.count
        let optionalBGiven = replay.subjects.values.filter { $0.isGiven(feature: 2, consent: "optional-b") }.count
        #expect(preview.changes[0].subjectsOutdated == requiredGiven && preview.changes[1].subjectsOutdated == optionalBGiven)
        #expect(preview.subjectsOutdated == requiredGiven && requiredGiven > 0 && requiredGiven <= before)
    }

    @Test(arguments: [("1.0", true), ("2026-06", true), ("v2", true), ("1.0+de", true), ("1_0", true), ("2.0 ", false), (" 2.0", false), ("", false), ("2 0", false), ("-1", false), ("1.", false), (String(repeating: "9", count: 33), false), ("é", false)])
    func policyVersionsHaveOneShape(_ case_: (String, Bool)) {
        #expect((Catalog.versionProblem(case_.0) == nil) == case_.1, "\(case_.0.debugDescription)")
    }

    @Test func exportsCarryTheCatalogueVersionsAndVerify() throws {
        let (ledger, path) = try Self.ledger("export-versions")
        defer { removeFolder(path) }
        try ledger.publish(Self.catalog(bumping: [("timeline", "required", "2.0")]))
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let bundle = try ledger.exportSubject("alice")
        #expect(bundle.catalogEvents.count == 1)
        #expect(try ExportVerifier.verify(bundle.bytes, pinnedKey: try ledger.verifierKey).events == 8)
        #expect(try ExportVerifier.verify(try ledger.exportAll().bytes, pinnedKey: try ledger.verifierKey).events == 10)
        // Without the catalogue version, the re-consent does not replay.
        var object = bundle.json.objectValue!
        object["catalogVersions"] = .array([])
        #expect(throws: ExportVerificationError.self) { try ExportVerifier.verify(CanonicalJSON.serialize(.object(object)), pinnedKey: try ledger.verifierKey) }
    }

    @Test func aPublishedCatalogueWhoseHashIsWrongFailsVerify() throws {
        let (ledger, path) = try Self.ledger("bad-hash")
        defer { removeFolder(path) }
        try ledger.publish(Self.catalog(bumping: [("timeline", "required", "2.0")]))
        // Re-sign a publish event whose catalog member is another hash: the signature is good,
        // the hash is not. (In the older layout, whose unsigned `SEQ HASH` head a tamperer
        // without the key can write.)
        useHeadFileLayout(path)
        let lines = readLog(path).split(separator: 0x0A).map(Array.init)
        let record = try EventCodec.decode(line: lines[8])
        guard case .catalogPublished(let published) = record.event.payload else { Issue.record("no publish"); return }
        let forged = LedgerEvent(seq: record.event.seq, at: record.event.at, actor: record.event.actor, command: record.event.command,
                                 payload: .catalogPublished(CatalogPublished(catalog: published.catalog, catalogHash: String(repeating: "ab", count: 32), notices: published.notices)))
        let signer = try ledger.keys!.unlockSigner(passphrase: nil)
        let (sealed, newHead) = try ledger.chain.seal([forged], after: record.prev, signer: signer, streams: emptyStreams())
        writeBytes(Array(lines[0..<8].map { $0 + [0x0A] }.joined()) + sealed[0].line, to: path + "/ledger.jsonl")
        writeBytes(Array("8 \(newHead.hex)\n".utf8), to: path + "/head")
        removeFolder(path + "/tree.hashes", path + "/lines.idx")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else { Issue.record("must fail"); return }
        #expect(failure.problem.contains("SHA-256 differs"))
    }
}
