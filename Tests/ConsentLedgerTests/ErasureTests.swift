import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Erasure (GDPR Art. 17) by destroying the subject's record: the log is untouched and every
/// proof stays valid, while nothing written afterwards links the id to anything.
@Suite struct ErasureTests {
    /// A folder ledger where alice has a history (with evidence) and bob one of his own.
    static func ledger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder("erase-\(label)")
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "consentledger.example/\(label)", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice-0042", request: .give(feature: "timeline", consents: ["required", "optional-a"]), evidence: GrantEvidence(channel: .paper, reference: Self.aliceEvidence)))
        try ledger.execute(LedgerCommand(subjectID: "alice-0042", request: .revoke(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "medication-management", consents: ["required"])))
        return (ledger, path)
    }

    /// Alice's evidence reference: personal data (it names her id), which the log must hold
    /// only sealed under her key.
    static let aliceEvidence = "paper form of alice-0042, signed at the front desk"

    static func files(_ folder: String) -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in (try? FileManager.default.subpathsOfDirectory(atPath: folder)) ?? [] {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: folder + "/" + name, isDirectory: &isDirectory), !isDirectory.boolValue {
                out[name] = readBytes(folder + "/" + name)
            }
        }
        return out
    }

    /// The byte strings that would link the person to the pseudonym: the id, the salt in hex and
    /// in base64, and the salt's bytes.
    static func traces(id: String, salt: [UInt8]) -> [[UInt8]] {
        let key = SubjectKey(id: SubjectID(id), salt: salt, hasher: Sodium()).bytes
        return [Array(id.utf8), Array(Hex.encode(salt).utf8), Array(Base64.encode(salt).utf8), salt, key, Array(Hex.encode(key).utf8), Array(aliceEvidence.utf8)]
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    @Test func afterAnErasureEveryProofStillVerifiesAndNothingLinksTheId() throws {
        let (ledger, path) = try Self.ledger("proofs")
        defer { removeFolder(path) }
        let key = try ledger.verifierKey
        let salt = try #require(try ledger.salt(of: "alice-0042"))
        let before = try ledger.exportSubject("alice-0042")
        let allBefore = try ledger.exportAll()
        let stateBefore = try ledger.proveState(for: "alice-0042")
        let (_, oldNote) = try ledger.signedCheckpoint()
        let logBefore = readLog(path)
        // Before: the log holds her evidence only sealed; the ledger, which holds her record,
        // shows it in clear.
        #expect(!Self.contains(logBefore, Array(Self.aliceEvidence.utf8)) && !Self.contains(logBefore, Array("alice-0042".utf8)))
        #expect(try ledger.report(for: "alice-0042").events.compactMap { if case .consentGiven(let g) = $0.payload { g.evidence.reference } else { nil } } == [Self.aliceEvidence, Self.aliceEvidence])
        #expect(try ledger.auditReport(ReportScope()).csv.contains(Self.aliceEvidence))

        let receipt = try ledger.erase("alice-0042", actor: "dpo", reason: "request 2026-118")
        let erasedRef = try ledger.subjectRefOfErased(receipt)
        #expect(receipt.appended && receipt.events == 5 && receipt.pseudonym == erasedRef)
        // The log was only appended to.
        let logAfter = readLog(path)
        #expect(logAfter.starts(with: logBefore))

        // Everything verifies: the ledger, every checkpoint, the bundles and proofs issued before,
        // and consistency from a checkpoint issued before.
        #expect(try ledger.verify().events == 7)
        #expect(throws: Never.self) { try ExportVerifier.verify(before.bytes, pinnedKey: key) }
        #expect(throws: Never.self) { try ExportVerifier.verify(allBefore.bytes, pinnedKey: key) }
        #expect(throws: Never.self) { try StateProofVerifier.verify(stateBefore.bytes, pinnedKey: key) }
        #expect(throws: Never.self) { try ExportVerifier.verifyConsistency(try ledger.proveConsistency(from: oldNote), pinnedKey: key) }
        #expect(throws: Never.self) { try ExportVerifier.verify(try ledger.exportAll().bytes, pinnedKey: key) }

        // The ledger knows no such subject: status and history answer as for an unknown id.
        #expect(try ledger.subjectRef(for: "alice-0042") == nil)
        #expect(try ledger.report(for: "alice-0042").events.isEmpty)
        #expect(throws: ConsentError.self) { try ledger.exportSubject("alice-0042") }

        // Nothing written afterwards holds the id or the salt: the folder's files, a report in
        // every format, the all bundle and the FHIR export.
        let report = try ledger.auditReport(ReportScope())
        var outputs: [String: [UInt8]] = Self.files(path).mapKeys { "folder: " + $0 }
        outputs["report text"] = Array(report.text.utf8)
        outputs["report json"] = CanonicalJSON.serialize(report.json)
        outputs["report csv"] = Array(report.csv.utf8)
        outputs["report html"] = Array(report.html(in: .utc).utf8)
        outputs["all bundle"] = try ledger.exportAll().bytes
        for (name, bytes) in outputs {
            for trace in Self.traces(id: "alice-0042", salt: salt) {
                #expect(!Self.contains(bytes, trace), "\(name) holds a trace of the erased subject")
            }
        }
        // The report keeps the counts and shows the pseudonym as erased.
        #expect(report.report.erased[SubjectRef(receipt.pseudonym)] == receipt.seq)
        #expect(report.report.counts.first { $0.feature == 2 && $0.consent == "required" }?.given == 1)
        #expect(report.text.contains("erased") && report.html(in: .utc).contains("(erased)"))
        // Her evidence stays in the log, sealed for good: the key went with the record.
        let grants = report.report.entries.filter { $0.subject == SubjectRef(receipt.pseudonym) && $0.kind == .given }
        #expect(grants.count == 2 && grants.allSatisfy { $0.evidence.isReferenceSealed && $0.evidence.channel == .paper })
        #expect(report.csv.contains("(sealed)") && report.html(in: .utc).contains("evidence sealed"))
    }

    @Test func aNewCommandForTheSameIdStartsANewPseudonym() throws {
        let (ledger, path) = try Self.ledger("again")
        defer { removeFolder(path) }
        let receipt = try ledger.erase("alice-0042", actor: "dpo")
        try ledger.execute(LedgerCommand(subjectID: "alice-0042", request: .give(feature: "timeline", consents: ["required"])))
        let ref = try #require(try ledger.subjectRef(for: "alice-0042"))
        #expect(ref.value != receipt.pseudonym)
        #expect(try ledger.report(for: "alice-0042").events.count == 1)
        #expect(try ledger.verify().events == 8)
        // And a fresh process agrees.
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path), keys: FileKeyStore(path: path + "/secret.key"))
        #expect(try reopened.subjectRef(for: "alice-0042") == ref)
    }

    /// A process that remembered the subject's salt before another process erased the subject
    /// writes for the id as a new subject, never for the erased pseudonym.
    @Test func aProcessThatRememberedTheSaltStartsANewPseudonym() throws {
        let (service, path) = try Self.ledger("two-processes")
        defer { removeFolder(path) }
        _ = try service.report(for: "alice-0042")
        try service.execute(LedgerCommand(subjectID: "alice-0042", request: .give(feature: "medication-management", consents: ["required"])))
        let other = try Ledger.open(store: FileLedgerStore(directory: path), keys: FileKeyStore(path: path + "/secret.key"))
        let receipt = try other.erase("alice-0042", actor: "dpo")
        let result = try service.execute(LedgerCommand(subjectID: "alice-0042", request: .give(feature: "timeline", consents: ["required"])))
        #expect(result.result.events.count == 1)
        #expect(try service.subjectRef(for: "alice-0042")?.value != receipt.pseudonym)
        #expect(try other.verify().events == 9)
    }

    @Test(arguments: [
        ("nobody", nil as String?, "no subject 'nobody'"),
        ("bob", String(repeating: "x", count: 201), "201 bytes, more than 200"),
        ("bob", "line\nfeed", "control character"),
        ("bob", "", "the reason is empty"),
    ])
    func aRefusedErasureChangesNothing(subject: String, reason: String?, message: String) throws {
        let (ledger, path) = try Self.ledger("refused-\(subject)-\(reason?.count ?? -1)")
        defer { removeFolder(path) }
        let before = Self.files(path)
        do {
            _ = try ledger.erase(subject, actor: "dpo", reason: reason)
            Issue.record("accepted")
        } catch {
            #expect("\(error)".contains(message), "\(error)")
        }
        #expect(Self.files(path) == before)
    }

    /// A crash between the event and the record's destruction leaves the record: verify says so,
    /// and erasing again finishes the job without a second event.
    @Test func anErasureCutShortIsFinishedByErasingAgain() throws {
        let (ledger, path) = try Self.ledger("cut-short")
        defer { removeFolder(path) }
        let records = readBytes(path + "/subjects.jsonl")
        let receipt = try ledger.erase("alice-0042", actor: "dpo")
        writeBytes(records, to: path + "/subjects.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path), keys: FileKeyStore(path: path + "/secret.key"))
        do {
            _ = try reopened.verify()
            Issue.record("an erased subject's record that remains must fail verify")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.problem.contains("was erased, but a record of it remains"), "\(failure)")
        }
        let again = try reopened.erase("alice-0042", actor: "dpo")
        #expect(!again.appended && again.seq == receipt.seq && again.pseudonym == receipt.pseudonym)
        #expect(try reopened.verify().events == 7)
        #expect(!Self.contains(readBytes(path + "/subjects.jsonl"), Array("alice-0042".utf8)))
    }

    /// The record is overwritten in place before the file is replaced: a reader meeting the
    /// overwritten line (a crash between the two steps) skips it.
    @Test func anOverwrittenRecordLineIsSkippedByReaders() throws {
        let (ledger, path) = try Self.ledger("blank-line")
        defer { removeFolder(path) }
        _ = try ledger.erase("alice-0042", actor: "dpo")
        var bytes = readBytes(path + "/subjects.jsonl")
        bytes = [UInt8](repeating: 0x20, count: 90) + [0x0A] + bytes
        writeBytes(bytes, to: path + "/subjects.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path), keys: FileKeyStore(path: path + "/secret.key"))
        #expect(try reopened.verify().events == 7)
        #expect(try reopened.subjectRef(for: "bob") != nil)
        // The next erasure drops the blank line.
        _ = try reopened.erase("bob", actor: "dpo")
        #expect(readBytes(path + "/subjects.jsonl").isEmpty)
    }

    @Test func nothingOfTheSubjectMayFollowItsErasure() throws {
        var state = SubjectState()
        let ref = SubjectRef("00112233445566778899aabbccddeeff")
        let at = Timestamp(canonical: "2026-01-15T09:00:00.000Z")!
        let give = LedgerEvent(seq: 1, at: at, actor: "self", command: CommandSpan(first: 1, size: 1), payload: .consentGiven(ConsentGiven(subject: ref, feature: 2, consent: "required", version: "1.0")))
        let erase = LedgerEvent(seq: 2, at: at, actor: "dpo", command: CommandSpan(first: 2, size: 1), payload: .subjectErased(SubjectErased(subject: ref)))
        try state.apply(give, catalog: SeedCatalog.catalog)
        try state.apply(erase, catalog: SeedCatalog.catalog)
        #expect(state.erasedAt == 2)
        let after = LedgerEvent(seq: 3, at: at, actor: "self", command: CommandSpan(first: 3, size: 1), payload: .consentGiven(ConsentGiven(subject: ref, feature: 1, consent: "required", version: "1.0")))
        #expect(throws: ReplayViolation(seq: 3, problem: "the subject was erased at seq 2: no event of theirs may follow")) { try state.apply(after, catalog: SeedCatalog.catalog) }
        var fresh = SubjectState()
        let inACommandOfTwo = LedgerEvent(seq: 1, at: at, actor: "dpo", command: CommandSpan(first: 1, size: 2), payload: .subjectErased(SubjectErased(subject: ref)))
        #expect(throws: ReplayViolation(seq: 1, problem: "an erasure is a command of its own, of one event")) { try fresh.apply(inACommandOfTwo, catalog: SeedCatalog.catalog) }
    }
}

extension Ledger {
    /// The pseudonym of the erasure event named by a receipt, read from the log.
    func subjectRefOfErased(_ receipt: ErasureReceipt) throws -> String {
        let line = try reading { view in try view.tx.entry(Int(receipt.seq)) }
        guard case .subjectErased(let e) = try EventCodec.decode(line: line).event.payload else { return "" }
        return e.subject.value
    }
}

extension Dictionary {
    func mapKeys<K: Hashable>(_ transform: (Key) -> K) -> [K: Value] {
        Dictionary<K, Value>(uniqueKeysWithValues: map { (transform($0.key), $0.value) })
    }
}
