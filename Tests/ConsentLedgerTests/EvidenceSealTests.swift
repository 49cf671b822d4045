import ConsentDomain
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import TransparencyLog

/// A grant's evidence reference is personal data: the log holds it only sealed under its
/// subject's key (Spec/erasure.md, Sealed evidence), which goes with the subject's record.
@Suite struct EvidenceSealTests {
    static let bob = SubjectKey(id: SubjectID("bob"), salt: Array(repeating: 2, count: 16), hasher: Sodium())
    static let alice = SubjectKey(id: SubjectID("alice"), salt: Array(repeating: 1, count: 16), hasher: Sodium())

    @Test func theSubjectKeyIsTheHashOfTheContextTheSaltAndTheId() {
        let expected = Sodium().sha256(Array("consentledger-evidence-key-v1\n".utf8) + Array(repeating: 2, count: 16) + Array("bob".utf8)).bytes
        #expect(Self.bob.bytes == expected)
    }

    @Test func aSealedReferenceOpensUnderItsSubjectsKeyAndSealingIsDeterministic() throws {
        let sealed = EvidenceSeal.seal("scan-0042", seq: 9, key: Self.bob, hasher: Sodium())
        #expect(sealed.count == EvidenceSeal.overhead + 9)
        #expect(sealed == EvidenceSeal.seal("scan-0042", seq: 9, key: Self.bob, hasher: Sodium()))
        #expect(try EvidenceSeal.open(sealed, key: Self.bob) == "scan-0042")
        // The nonce is the first 24 bytes of SHA-256(context ‖ key ‖ seq ‖ reference).
        let seqBytes: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 9]
        #expect(Array(sealed.prefix(24)) == Array(Sodium().sha256(Array("consentledger-evidence-nonce-v1\n".utf8) + Self.bob.bytes + seqBytes + Array("scan-0042".utf8)).bytes.prefix(24)))
        // Another event, or another reference, gets another nonce.
        #expect(EvidenceSeal.seal("scan-0042", seq: 10, key: Self.bob, hasher: Sodium()).prefix(24) != sealed.prefix(24))
        #expect(EvidenceSeal.seal("scan-0043", seq: 9, key: Self.bob, hasher: Sodium()).prefix(24) != sealed.prefix(24))
    }

    @Test(arguments: [
        ("another subject's key", "alice", "the sealed evidence reference does not open under the subject's key"),
        ("a flipped ciphertext byte", "last", "the sealed evidence reference does not open under the subject's key"),
        ("a flipped nonce byte", "first", "the sealed evidence reference does not open under the subject's key"),
        ("a cut tag", "cut", "the sealed evidence reference is 40 bytes, not 41 to 552"),
    ])
    func aSealedReferenceThatDoesNotOpenIsRefused(_ case_: (String, String, String)) {
        var sealed = EvidenceSeal.seal("scan-0042", seq: 9, key: Self.bob, hasher: Sodium())
        switch case_.1 {
        case "last": sealed[sealed.count - 1] ^= 1
        case "first": sealed[0] ^= 1
        case "cut": sealed = Array(sealed.prefix(40))
        default: break
        }
        let key = case_.1 == "alice" ? Self.alice : Self.bob
        #expect(throws: EvidenceSealError(problem: case_.2), "\(case_.0)") { try EvidenceSeal.open(sealed, key: key) }
    }

    /// A box that opens must hold a reference a command could have recorded.
    @Test(arguments: [
        ("bytes that are not UTF-8", [0xFF, 0x41] as [UInt8], "the sealed evidence reference opens to bytes that are not UTF-8"),
        ("a control character", Array("scan\u{1}".utf8), "the sealed evidence reference opens to one no command records: the evidence reference contains a control character"),
        ("a trailing space", Array("scan ".utf8), "the sealed evidence reference opens to one no command records: the evidence reference has leading or trailing spaces"),
    ])
    func aSealedReferenceMustOpenToAReference(_ case_: (String, [UInt8], String)) {
        let nonce = [UInt8](repeating: 7, count: 24)
        let box = case_.1.withUnsafeBytes { m in Self.bob.bytes.withUnsafeBytes { k in SecretBox.seal(m, nonce: nonce, key: k) } }
        #expect(throws: EvidenceSealError(problem: case_.2), "\(case_.0)") { try EvidenceSeal.open(nonce + box, key: Self.bob) }
    }

    /// The tiny ledger's seq 9 holds bob's reference sealed; his record's key opens it.
    @Test func theVectorGrantHoldsItsReferenceSealedAndBobsRecordOpensIt() throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        #expect(!String(decoding: tiny[9], as: UTF8.self).contains("scan-0042"))
        let record = try EventCodec.decode(line: Array(tiny[9].dropLast()))
        guard case .consentGiven(let g) = record.event.payload else { Issue.record("not a grant"); return }
        #expect(g.evidence.reference == nil && g.evidence.isReferenceSealed)
        let opened = try EvidenceSeal.opening(g.evidence, key: Self.bob)
        #expect(opened.reference == "scan-0042" && opened.channel == .paper && opened.noticeLanguage == "de")
        #expect(throws: EvidenceSealError.self) { try EvidenceSeal.opening(g.evidence, key: Self.alice) }
    }

    /// A ledger written before sealing holds references in clear: they are still read.
    @Test func aReferenceInClearFromAnOlderLedgerIsStillRead() throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[3].dropLast(), as: UTF8.self).replacingOccurrences(of: #""feature":"#, with: #""evidence":"scan-0007","feature":"#)
        let record = try EventCodec.decode(line: Array(line.utf8))
        guard case .consentGiven(let g) = record.event.payload else { Issue.record("not a grant"); return }
        #expect(g.evidence.reference == "scan-0007" && g.evidence.sealedReference == nil)
        // Opening leaves a reference in clear as it is.
        #expect(try EvidenceSeal.opening(g.evidence, key: Self.bob) == g.evidence)
    }

    /// The member's shape, checked before any key is at hand.
    @Test(arguments: [
        ("odd length", #""sealedEvidence":"abc","seq":"#, "member 'sealedEvidence' must be 82 to 1104 lowercase hex digits (a nonce, a tag and a sealed reference of 1 to 512 bytes)"),
        ("too short for a reference", #""sealedEvidence":"\#(String(repeating: "ab", count: 40))","seq":"#, "member 'sealedEvidence' must be 82 to 1104 lowercase hex digits (a nonce, a tag and a sealed reference of 1 to 512 bytes)"),
        ("too long", #""sealedEvidence":"\#(String(repeating: "ab", count: 553))","seq":"#, "member 'sealedEvidence' must be 82 to 1104 lowercase hex digits (a nonce, a tag and a sealed reference of 1 to 512 bytes)"),
        ("uppercase hex", #""sealedEvidence":"\#(String(repeating: "AB", count: 41))","seq":"#, "member 'sealedEvidence' must be 82 to 1104 lowercase hex digits (a nonce, a tag and a sealed reference of 1 to 512 bytes)"),
        ("not a string", #""sealedEvidence":12,"seq":"#, "member 'sealedEvidence' must be a string"),
    ])
    func theSealedMemberHasItsShape(_ case_: (String, String, String)) {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[3].dropLast(), as: UTF8.self).replacingOccurrences(of: #""seq":"#, with: case_.1)
        #expect(throws: EventDecodingError(problem: case_.2), "\(case_.0)") { try EventCodec.decode(line: Array(line.utf8)) }
    }

    @Test func aReferenceIsEitherSealedOrInClearNeverBoth() {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[9].dropLast(), as: UTF8.self).replacingOccurrences(of: #""feature":"#, with: #""evidence":"scan-0042","feature":"#)
        #expect(throws: EventDecodingError(problem: "a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both")) { try EventCodec.decode(line: Array(line.utf8)) }
    }

    @Test func aSealedReferenceOnAWithdrawalIsNotPartOfItsEvent() {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let revoked = String(decoding: tiny.first { String(decoding: $0, as: UTF8.self).contains("consent.revoked") }!.dropLast(), as: UTF8.self)
        let line = revoked.replacingOccurrences(of: #""seq":"#, with: #""sealedEvidence":"\#(String(repeating: "ab", count: 41))","seq":"#)
        #expect(throws: EventDecodingError(problem: "member 'sealedEvidence' does not belong to a 'consent.revoked' event")) { try EventCodec.decode(line: Array(line.utf8)) }
    }

    /// The ledger answers with evidence in clear, writes it sealed, and calls a reference that
    /// does not open under the subject's record an integrity failure, naming the event.
    @Test func theLedgerSealsOnWriteAndOpensOnRead() throws {
        let path = LedgerPropertyTests.folder("evidence-seal")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "consentledger.example/seal", keyProtection: .insecurePlaintext)
        let reference = "Scan 17 of Zoë Müller's paper form"
        let (result, _) = try ledger.execute(LedgerCommand(subjectID: "zoe", request: .give(feature: "timeline", consents: ["required"]), evidence: GrantEvidence(channel: .paper, reference: reference)))
        #expect(result.listing.features.flatMap(\.consents).contains { if case .given(let g) = $0.status { g.evidence.reference == reference } else { false } })
        let log = readLog(path)
        #expect(!ErasureTests.contains(log, Array(reference.utf8)) && ErasureTests.contains(log, Array("sealedEvidence".utf8)))
        for fresh in [ledger, try Ledger.open(store: FileLedgerStore(directory: path))] {
            let grant = try #require(try fresh.report(for: "zoe").events.first)
            guard case .consentGiven(let g) = grant.payload else { Issue.record("not a grant"); return }
            #expect(g.evidence.reference == reference && g.evidence.sealedReference != nil)
            #expect(try fresh.currentListing(for: "zoe").features.flatMap(\.consents).contains { if case .given(let g) = $0.status { g.evidence.reference == reference } else { false } })
        }
        #expect(try ledger.verify().events == 2)
        let sealed = g0(try ledger.report(for: "zoe"))
        #expect(throws: ConsentError.integrity(IntegrityFailure(line: 2, seq: 1, problem: "the sealed evidence reference does not open under the subject's key (the key of the subject's record in subjects.jsonl): the event or the record is not what the ledger wrote"))) {
            try ledger.openEvidence(GrantEvidence(sealedReference: sealed), seq: 1, key: Self.bob)
        }
    }

    private func g0(_ report: SubjectReport) -> [UInt8]? {
        for event in report.events { if case .consentGiven(let g) = event.payload, let s = g.evidence.sealedReference { return s } }
        return nil
    }
}
