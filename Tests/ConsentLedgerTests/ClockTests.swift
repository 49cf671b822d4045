import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
import TransparencyLog

/// The ledger's clock (Spec/ledger-format.md, Clock corrections): a write takes this writer's
/// clock, or the ledger's time when that is later but within the allowed skew; a ledger whose
/// time is further ahead refuses writes until a signed `clock.corrected` event sets its time
/// back; as-of questions count in effective times.
@Suite struct ClockTests {
    static func give(_ subject: String, _ feature: String = "timeline", _ consents: [String] = ["required"]) -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents))
    }

    static func revoke(_ subject: String, _ feature: String = "timeline", _ consent: String = "required") -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .revoke(feature: feature, consent: consent))
    }

    /// A ledger made on 26.11.2026 with the seed scenario, and a clock the test moves.
    static func ledger(_ label: String) throws -> (Ledger, SteppingClock, String) {
        let clock = SteppingClock(start: "2026-11-26T09:00:00.000Z", step: 1000)
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext, clock: clock.clock)
        try ledger.execute(Self.give("alice"))
        return (ledger, clock, path)
    }

    /// Bob's grant written by a machine whose clock says 2999; then the clock is right again
    /// (26.11.2026 10:00).
    static func poison(_ ledger: Ledger, _ clock: SteppingClock) throws {
        clock.set("2999-01-01T00:00:00.000Z")
        try ledger.execute(Self.give("bob"))
        clock.set("2026-11-26T10:00:00.000Z")
    }

    /// Every byte of every file in the folder.
    static func folderBytes(_ path: String) -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for name in ["ledger.jsonl", "lines.idx", "tree.hashes", "subjects.map", "subjects.jsonl", "checkpoints.jsonl", "head"] {
            files[name] = readBytes(path + "/" + name)
        }
        return files
    }

    /// The finding: one event stamped in 2999 pinned every later event's time to 2999. Now the
    /// next writer with a right clock refuses, naming both times and the way out, and changes
    /// nothing.
    @Test func aWriterRefusesToCarryAPoisonedTimeForward() throws {
        let (ledger, clock, path) = try Self.ledger("clock-poisoned")
        defer { removeFolder(path) }
        try Self.poison(ledger, clock)
        let before = Self.folderBytes(path)
        for write in [{ try ledger.execute(Self.give("carol")) }, { _ = try ledger.erase("alice", actor: "dpo") }, { _ = try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0")])) }] as [() throws -> Void] {
            do {
                try write()
                Issue.record("a write carried the time 2999 forward")
            } catch ConsentError.clockAhead(let ahead) {
                #expect(ahead.ledgerTime == Timestamp(canonical: "2999-01-01T00:00:00.000Z"))
                #expect(ahead.allowedSkewMilliseconds == 300_000)
                #expect("\(ConsentError.clockAhead(ahead))".contains("consentctl clock correct"))
            }
        }
        #expect(Self.folderBytes(path) == before)
        let report = try ledger.verify()
        #expect(report.clockAhead?.ledgerTime == Timestamp(canonical: "2999-01-01T00:00:00.000Z"))
        #expect(report.clockCorrections.isEmpty)
    }

    /// Within the skew the ledger's time is carried (times never go backwards); past it, the
    /// write refuses; the skew is the writer's to set.
    @Test(arguments: [(aheadSeconds: 240, skewSeconds: 300, refused: false), (301, 300, true), (90, 60, true), (59, 60, false), (1, 0, true)])
    func theAllowedSkewDecides(aheadSeconds: Int, skewSeconds: Int, refused: Bool) throws {
        let (ledger, clock, path) = try Self.ledger("clock-skew")
        defer { removeFolder(path) }
        ledger.maximumClockSkew = .seconds(skewSeconds)
        clock.set("2026-11-26T10:00:00.000Z")
        try ledger.execute(Self.give("bob"))
        clock.set(Timestamp(millisecondsSinceEpoch: Timestamp(canonical: "2026-11-26T10:00:00.000Z")!.millisecondsSinceEpoch - Int64(aheadSeconds) * 1000).rfc3339)
        do {
            try ledger.execute(Self.give("carol"))
            #expect(!refused)
            let last = try ledger.report(for: "carol").events.last!
            #expect(last.at == Timestamp(canonical: "2026-11-26T10:00:00.000Z"), "the ledger's later time is carried")
        } catch ConsentError.clockAhead {
            #expect(refused)
        }
    }

    /// `correctClock` writes one signed event that names the wrong time and sets the ledger's
    /// time back; writes go on at the right time, `verify` lists the correction, and a second
    /// correction finds nothing to correct.
    @Test func aCorrectionSetsTheLedgersTimeBackAndWritesGoOn() throws {
        let (ledger, clock, path) = try Self.ledger("clock-correct")
        defer { removeFolder(path) }
        try Self.poison(ledger, clock)
        // A dry run says what it would write and re-date (bob's grant, seq 2), and writes nothing.
        let before = Self.folderBytes(path)
        let dry = try #require(try ledger.correctClock(reason: "NTP served 2999", actor: "ops", dryRun: true))
        #expect(!dry.written && dry.redated == 2...2)
        #expect(Self.folderBytes(path) == before)
        clock.set("2026-11-26T10:00:00.000Z")
        let receipt = try #require(try ledger.correctClock(reason: "NTP served 2999", actor: "ops"))
        #expect(receipt.written && receipt.redated == 2...2)
        let event = receipt.event
        guard case .clockCorrected(let correction) = event.payload else { Issue.record("not a clock correction"); return }
        #expect(correction.correctedFrom.rfc3339.hasPrefix("2999-01-01T00:00:0"))
        #expect(event.at == Timestamp(canonical: "2026-11-26T10:00:00.000Z"))
        #expect(try ledger.correctClock() == nil, "nothing left to correct")
        try ledger.execute(Self.give("carol"))
        let carol = try ledger.report(for: "carol").events.last!
        #expect(carol.at < Timestamp(canonical: "2027-01-01T00:00:00.000Z")!)
        // A new process reads and verifies it; the correction is listed.
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let report = try reopened.verify()
        #expect(report.clockAhead == nil)
        #expect(report.clockCorrections.corrections.map(\.seq) == [event.seq])
        #expect(report.clockCorrections.corrections.first?.reason == "NTP served 2999")
        #expect(try reopened.clockStatus().corrections.corrections.count == 1)
    }

    /// A machine whose clock is before the ledger's creation cannot correct the ledger's clock
    /// to it (rule 5b): it is that clock that is wrong.
    @Test func aCorrectionFromAClockBeforeTheLedgersCreationIsRefused() throws {
        let (ledger, clock, path) = try Self.ledger("clock-floor")
        defer { removeFolder(path) }
        clock.set("2026-11-26T08:00:00.000Z")
        let before = Self.folderBytes(path)
        #expect(throws: ConsentError.self) { try ledger.correctClock() }
        #expect(Self.folderBytes(path) == before)
    }

    /// A ledger whose clock served 2999 for bob's grant, corrected at 10:00, after which bob
    /// withdrew at 11:00.
    static func correctedThenWithdrawn(_ label: String) throws -> (Ledger, String) {
        let (ledger, clock, path) = try ledger(label)
        try poison(ledger, clock)
        try ledger.correctClock()
        clock.set("2026-11-26T11:00:00.000Z")
        try ledger.execute(revoke("bob"))
        return (ledger, path)
    }

    /// As-of questions count in effective times: the event stamped 2999 happened before the
    /// correction, so the state as of a time after the correction holds it and what came later
    /// (a recorded-time cut would have stopped at it and hidden the later withdrawal). The
    /// library, the state proof and its verifier, and the audit report agree.
    @Test func asOfQuestionsAfterACorrectionSeeEveryEventBeforeIt() throws {
        let (ledger, path) = try Self.correctedThenWithdrawn("clock-as-of")
        defer { removeFolder(path) }
        let later = Timestamp(canonical: "2026-11-26T12:00:00.000Z")!
        let between = Timestamp(canonical: "2026-11-26T10:30:00.000Z")!
        let before = Timestamp(canonical: "2026-11-26T09:30:00.000Z")!
        func given(_ listing: ConsentListing) -> [String] { listing.features.flatMap { f in f.consents.filter(\.isGiven).map { "\(f.feature.key)/\($0.definition.code)" } } }
        #expect(given(try ledger.report(for: "bob", asOf: later).listing) == [])
        #expect(try ledger.report(for: "bob", asOf: later).events.count == 2)
        #expect(given(try ledger.report(for: "bob", asOf: between).listing) == ["timeline/required"])
        #expect(try ledger.report(for: "bob", asOf: before).events.isEmpty)
        let key = try ledger.verifierKey
        for (at, expected) in [(later, [String]()), (between, ["timeline/required"]), (before, [])] {
            let proof = try ledger.proveState(for: "bob", at: at)
            let verified = try StateProofVerifier.verify(proof.bytes, pinnedKey: key)
            #expect(given(verified.listing) == expected)
        }
        let report = try ledger.auditReport(ReportScope(asOf: between)).report
        #expect(report.entries.contains { $0.kind == .given && $0.at.rfc3339.hasPrefix("2999") })
        #expect(!report.entries.contains { $0.kind == .withdrawn })
        // Spans, intervals and durations are in effective times: none ends before it starts,
        // and bob's grant lasted from the correction (10:00) to his withdrawal (11:00).
        let whole = try ledger.auditReport(ReportScope()).report
        #expect(whole.intervals.allSatisfy { i in i.until.map { $0 >= i.from } ?? true })
        #expect(whole.givenSpans.allSatisfy { s in s.until.map { $0 >= s.from } ?? true })
        let timeline = try #require(whole.withdrawals.first { $0.feature == 2 })
        #expect(timeline.medianGrantToRevocationMs == 3_600_000)
        // The activity of the grant stamped 2999 is in the report as of a time after the
        // correction, from the correction's time.
        #expect(report.intervals.contains { $0.from == Timestamp(canonical: "2026-11-26T10:00:00.000Z")! && $0.until == nil })
    }

    /// The HTML report's chart places every entry at its effective time, on the axis of the
    /// active intervals: the grant stamped 2999 sits at the correction (10:00), so the axis
    /// spans the day and not ten centuries. Its tooltip keeps the recorded time and says when it
    /// took effect.
    @Test func theReportsChartPlacesEntriesAtTheirEffectiveTimes() throws {
        let (ledger, path) = try Self.correctedThenWithdrawn("clock-chart")
        defer { removeFolder(path) }
        let report = try ledger.auditReport(ReportScope())
        let grant = try #require(report.report.entries.first { $0.kind == .given && $0.at.rfc3339.hasPrefix("2999") })
        #expect(report.report.effectiveTime(of: grant) == Timestamp(canonical: "2026-11-26T10:00:00.000Z")!)
        let html = report.html(in: .utc)
        let axis = try #require(html.range(of: "<g class=\"axis\">").flatMap { start in html[start.lowerBound...].range(of: "</g>").map { String(html[start.lowerBound..<$0.upperBound]) } })
        #expect(axis.contains("2026") && !axis.contains("2999"), "the axis runs to 2999: \(axis)")
        #expect(html.contains("(by 26.11.2026 10:00, after a clock correction)"))
    }

    /// A format-2 export of the whole ledger and of one subject carries the correction, and
    /// both verify.
    @Test func exportsWithACorrectionVerify() throws {
        let (ledger, clock, path) = try Self.ledger("clock-export")
        defer { removeFolder(path) }
        try Self.poison(ledger, clock)
        try ledger.correctClock(reason: "wrong NTP")
        try ledger.execute(Self.revoke("bob"))
        let key = try ledger.verifierKey
        #expect(try ExportVerifier.verify(try ledger.exportAll().bytes, pinnedKey: key).events == 5)
        #expect(try ExportVerifier.verify(try ledger.exportSubject("bob").bytes, pinnedKey: key).events == 2)
    }
}

/// Rules 2 and 5b on replay (Spec/ledger-format.md, Replay).
@Suite struct ClockReplayRuleTests {
    static let t0 = Timestamp(canonical: "2026-11-26T09:00:00.000Z")!
    static let wrong = Timestamp(canonical: "2999-01-01T00:00:00.000Z")!
    static let genesis = LedgerEvent(seq: 0, at: t0, actor: "consentctl", command: CommandSpan(first: 0, size: 1), payload: .ledgerCreated(LedgerCreated(ledgerName: "x", catalogHash: "", publicKey: "")))
    static let poisoned = LedgerEvent(seq: 1, at: wrong, actor: "self", command: CommandSpan(first: 1, size: 1), payload: .consentGiven(ConsentGiven(subject: SubjectRef("00"), feature: 2, consent: "required", version: "1.0")))

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let events: [LedgerEvent]
        let problem: String?
        var testDescription: String { name }
    }

    static func correction(seq: UInt64 = 2, at: Timestamp = t0, from: Timestamp = wrong, size: Int = 1) -> LedgerEvent {
        LedgerEvent(seq: seq, at: at, actor: "ops", command: CommandSpan(first: seq, size: size), payload: .clockCorrected(ClockCorrected(correctedFrom: from)))
    }

    static let cases: [Case] = [
        Case(name: "a correction back to the right time is accepted", events: [genesis, poisoned, correction()], problem: nil),
        Case(name: "rule 2: any other event going back is refused", events: [genesis, poisoned, LedgerEvent(seq: 2, at: t0, actor: "self", command: CommandSpan(first: 2, size: 1), payload: .subjectErased(SubjectErased(subject: SubjectRef("00"))))], problem: "time 2026-11-26T09:00:00.000Z is earlier than the previous event's 2999-01-01T00:00:00.000Z"),
        Case(name: "rule 5b: it names the previous event's time", events: [genesis, poisoned, correction(from: Timestamp(canonical: "2998-01-01T00:00:00.000Z")!)], problem: "a clock correction names the time it corrects, the previous event's 2999-01-01T00:00:00.000Z, but this one names 2998-01-01T00:00:00.000Z"),
        Case(name: "rule 5b: it moves time back", events: [genesis, poisoned, correction(at: wrong)], problem: "a clock correction moves the ledger's time back, but 2999-01-01T00:00:00.000Z is not earlier than the previous event's 2999-01-01T00:00:00.000Z"),
        Case(name: "rule 5b: alone in its command", events: [genesis, poisoned, correction(size: 2)], problem: "a clock correction is alone in its command, after the genesis event"),
        Case(name: "rule 5b: after the genesis event", events: [correction(seq: 0, at: t0, from: t0)], problem: "a clock correction is alone in its command, after the genesis event"),
        Case(name: "rule 5b: not before the genesis event", events: [genesis, poisoned, correction(at: Timestamp(millisecondsSinceEpoch: t0.millisecondsSinceEpoch - 1))], problem: "a clock correction cannot set the ledger's time to 2026-11-26T08:59:59.999Z, before the genesis event's 2026-11-26T09:00:00.000Z"),
        Case(name: "rule 5b: not before the previous correction", events: [genesis, poisoned, correction(at: Timestamp(canonical: "2026-11-26T10:00:00.000Z")!),
                                                                            LedgerEvent(seq: 3, at: wrong, actor: "self", command: CommandSpan(first: 3, size: 1), payload: .subjectErased(SubjectErased(subject: SubjectRef("00")))),
                                                                            correction(seq: 4, at: Timestamp(canonical: "2026-11-26T09:59:59.000Z")!)],
             problem: "a clock correction cannot set the ledger's time to 2026-11-26T09:59:59.000Z, before the previous clock correction's 2026-11-26T10:00:00.000Z"),
        Case(name: "a second correction at the first's time is accepted", events: [genesis, poisoned, correction(at: Timestamp(canonical: "2026-11-26T10:00:00.000Z")!),
                                                                                     LedgerEvent(seq: 3, at: wrong, actor: "self", command: CommandSpan(first: 3, size: 1), payload: .subjectErased(SubjectErased(subject: SubjectRef("00")))),
                                                                                     correction(seq: 4, at: Timestamp(canonical: "2026-11-26T10:00:00.000Z")!)], problem: nil),
        Case(name: "after a correction, rule 2 holds from its time", events: [genesis, poisoned, correction(), LedgerEvent(seq: 3, at: Timestamp(millisecondsSinceEpoch: t0.millisecondsSinceEpoch - 1), actor: "self", command: CommandSpan(first: 3, size: 1), payload: .subjectErased(SubjectErased(subject: SubjectRef("00"))))], problem: "time 2026-11-26T08:59:59.999Z is earlier than the previous event's 2026-11-26T09:00:00.000Z"),
    ]

    @Test(arguments: cases)
    func clockRule(_ c: Case) {
        var replay = LedgerReplay(catalog: SeedCatalog.catalog)
        var problem: String?
        for event in c.events {
            do throws(ReplayViolation) { try replay.apply(event) } catch { problem = error.problem; break }
        }
        #expect(problem == c.problem)
    }

    /// A `clock.corrected` body the reader refuses, as `Spec/ledger-format.md` (Reading a body)
    /// words it.
    @Test(arguments: [
        (#""v":2"#, #""v":1"#, "a 'clock.corrected' event belongs only to format version 2"),
        (#""reason":"NTP""#, #""reason":"""#, "member 'reason': the reason is empty"),
        (#""correctedFrom":"2999-01-01T00:00:00.000Z""#, #""correctedFrom":"2999-01-01T00:00:00Z""#, "member 'correctedFrom' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        (#""correctedFrom":"2999-01-01T00:00:00.000Z","#, "", "member 'correctedFrom' is missing from a 'clock.corrected' event"),
        (#""cmdSize":1,"#, #""cmdSize":1,"consent":"required","#, "member 'consent' does not belong to a 'clock.corrected' event"),
    ])
    func aMalformedCorrectionIsRefused(find: String, replace: String, problem: String) throws {
        let event = LedgerEvent(seq: 7, at: Self.t0, actor: "ops", command: CommandSpan(first: 7, size: 1), payload: .clockCorrected(ClockCorrected(correctedFrom: Self.wrong, reason: "NTP")))
        let body = String(decoding: EventCodec.body(of: event, prev: Digest(bytes: [UInt8](repeating: 1, count: 32))!, keyID: "k"), as: UTF8.self)
        #expect(body.contains(find))
        let edited = Array(body.replacingOccurrences(of: find, with: replace).utf8)
        #expect(throws: EventDecodingError(problem: problem)) { try edited.withUnsafeBufferPointer { try EventBodyReader.read($0) } }
    }

    /// The event's bytes: the direct writer and the generic serialiser agree, and the reader
    /// gives the event back.
    @Test(arguments: [nil, "NTP served 2999"] as [String?])
    func aCorrectionRoundTrips(reason: String?) throws {
        let event = LedgerEvent(seq: 7, at: Self.t0, actor: "ops", command: CommandSpan(first: 7, size: 1), payload: .clockCorrected(ClockCorrected(correctedFrom: Self.wrong, reason: reason)))
        let prev = Digest(bytes: [UInt8](repeating: 1, count: 32))!
        let body = EventCodec.body(of: event, prev: prev, keyID: "k", stream: StreamLink(previous: 3))
        #expect(body == EventCodec.bodyViaGenericSerialiser(of: event, prev: prev, keyID: "k", stream: StreamLink(previous: 3)))
        let read = try body.withUnsafeBufferPointer { try EventBodyReader.read($0) }
        #expect(read.event == event)
    }
}
