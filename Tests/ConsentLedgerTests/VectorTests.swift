import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// `Spec/vectors/` is produced by this scenario with a fixed key, clock and salts. The test
/// rebuilds it and demands the same bytes, so the vectors and the code cannot drift apart.
/// Set CONSENTLEDGER_UPDATE_VECTORS=1 to rewrite the vectors after a deliberate format change.
@Suite struct VectorTests {
    static let vectors = packageRoot + "/Spec/vectors"

    static func buildTinyLedger(at path: String) throws -> Ledger {
        let clock = SteppingClock()
        let random = CountingRandom()
        let ledger = try Ledger.create(
            store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog,
            name: "consentledger.example/vectors", keyProtection: .insecurePlaintext, actor: "vector-generator",
            signer: SodiumSigner(seed: vectorSeed)!, clock: clock.clock, random: random.source
        )
        try ledger.execute(Array(seedScenario[0...1]))
        try ledger.execute(seedScenario[2])
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"]), actor: "dr.house"))
        // A grant with its evidence: agreed on paper half a second before it was recorded.
        let evidence = GrantEvidence(effectiveAt: Timestamp(rfc3339: "2026-01-15T09:00:03.500Z"), channel: .paper, noticeLanguage: "de", reference: "scan-0042")
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["optional-b"]), evidence: evidence))
        return ledger
    }

    /// The seed of the key the rotated ledger hands over to: bytes 20 21 … 3f.
    static let rotatedSeed: [UInt8] = Array(32..<64)

    /// A ledger of the vectors' key, the stepping clock and counting salts.
    static func vectorLedger(at path: String, name: String, clock: SteppingClock) throws -> Ledger {
        try Ledger.create(
            store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog,
            name: name, keyProtection: .insecurePlaintext, actor: "vector-generator",
            signer: SodiumSigner(seed: vectorSeed)!, clock: clock.clock, random: CountingRandom().source
        )
    }

    /// A file of a ledger the code wrote, as a vector holds it: the log without the zero bytes
    /// reserved after its content (a vector is the content; a reserve is no part of it).
    static func vectorContent(_ path: String) -> [UInt8] {
        path.hasSuffix("/ledger.jsonl") || path.hasSuffix("/subjects.jsonl") ? withoutReserve(readBytes(path)) : readBytes(path)
    }

    /// The vector folder `name` holds the files the code wrote at `path` (rewritten with
    /// CONSENTLEDGER_UPDATE_VECTORS), and the committed folder verifies as it is.
    static func expectVectorFolder(_ name: String, writtenAt path: String, scratch: String, events: Int) {
        let files = ["ledger.jsonl", "catalog.json", "public.key", "secret.key", "subjects.jsonl"]
        if getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil {
            _ = system("mkdir -p '\(vectors)/\(name)'")
            for f in files { writeBytes(vectorContent(path + "/" + f), to: "\(vectors)/\(name)/\(f)") }
        }
        for f in files {
            let same = vectorContent(path + "/" + f) == readBytes("\(vectors)/\(name)/\(f)")
            #expect(same, "Spec/vectors/\(name)/\(f) differs from what the code writes")
        }
        let copy = scratch + "/copy"
        copyFolder(vectors + "/" + name, to: copy)
        #expect(verifyFolder(copy) == .ok(events: events))
    }

    /// `Spec/vectors/rotated-ledger`: the seed scenario with a key rotation between its second
    /// and third commands, then bob's grant, under the new key.
    static func buildRotatedLedger(at path: String) throws -> Ledger {
        let ledger = try vectorLedger(at: path, name: "consentledger.example/rotated", clock: SteppingClock())
        try ledger.execute(Array(seedScenario[0...1]))
        try ledger.rotateKey(to: SodiumSigner(seed: rotatedSeed)!, protection: .insecurePlaintext, actor: "vector-generator")
        try ledger.execute(seedScenario[2])
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"]), actor: "dr.house"))
        // The genesis key is marked compromised from seq 3 on: events 3–6 are re-attested.
        try ledger.revokeKey(compromisedSince: 3, actor: "vector-generator")
        return ledger
    }

    /// `Spec/vectors/clock-ledger`: alice's seed commands, then bob's grant written by a machine
    /// whose clock said 2999, the ledger's clock corrected back to 09:10, and bob's withdrawal.
    static func buildClockLedger(at path: String) throws -> Ledger {
        let clock = SteppingClock()
        let ledger = try vectorLedger(at: path, name: "consentledger.example/clock", clock: clock)
        try ledger.execute(Array(seedScenario[0...1]))
        clock.set("2999-01-01T00:00:00.000Z")
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"]), actor: "dr.house"))
        clock.set("2026-01-15T09:10:00.000Z")
        try ledger.correctClock(reason: "NTP server served 2999", actor: "vector-generator")
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .revoke(feature: "timeline", consent: "required")))
        return ledger
    }

    @Test func clockVectorsMatchTheCode() throws {
        let folder = TemporaryFolder("clock")
        defer { folder.remove() }
        let path = folder.path + "/clock-ledger"
        let ledger = try Self.buildClockLedger(at: path)
        let report = try ledger.verify()
        #expect(report.clockCorrections.corrections.map(\.seq) == [UInt64(report.events - 2)])
        Self.expectVectorFolder("clock-ledger", writtenAt: path, scratch: folder.path, events: report.events)
    }

    @Test func rotatedVectorsMatchTheCode() throws {
        let folder = TemporaryFolder("rotated")
        defer { folder.remove() }
        let path = folder.path + "/rotated-ledger"
        let ledger = try Self.buildRotatedLedger(at: path)
        let report = try ledger.verify()
        #expect(report.keys.periods.map(\.from) == [0, 7] && report.events == 11 && report.keys.revocations.map(\.since) == [3])
        Self.expectVectorFolder("rotated-ledger", writtenAt: path, scratch: folder.path, events: 11)
    }

    /// The negative vectors: a change to the tiny ledger's log, and what `verify` must report.
    static let tamperings: [(name: String, line: Int, change: @Sendable ([[UInt8]]) -> [[UInt8]], expect: String)] = [
        ("flipped-signature-byte", 3, { l in var l = l; l[2][l[2].count - 10] = l[2][l[2].count - 10] == 0x30 ? 0x31 : 0x30; return l }, "signature does not verify"),
        ("edited-consent", 5, { l in
            var l = l
            let s = String(decoding: l[4], as: UTF8.self).replacingOccurrences(of: "\"consent\":\"optional-a\"", with: "\"consent\":\"optional-b\"")
            l[4] = Array(s.utf8); return l
        }, "signature does not verify"),
        ("swapped-lines", 5, { l in var l = l; l.swapAt(4, 5); return l }, "expected seq 4"),
        ("deleted-line", 6, { l in var l = l; l.remove(at: 5); return l }, "expected seq 5"),
        ("non-canonical-whitespace", 2, { l in
            var l = l
            l[1] = Array(String(decoding: l[1], as: UTF8.self).replacingOccurrences(of: "{\"actor\":", with: "{ \"actor\":").utf8)
            return l
        }, "not canonical"),
    ]

    @Test func vectorsMatchTheCode() throws {
        let folder = TemporaryFolder("vectors")
        defer { folder.remove() }
        let path = folder.path + "/tiny-ledger"
        let ledger = try Self.buildTinyLedger(at: path)
        let report = try ledger.verify()
        let files = ["ledger.jsonl", "catalog.json", "public.key", "secret.key", "subjects.jsonl"]
        let expected = try expectedJSON(ledger: ledger, path: path, report: report)
        let update = getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil
        if update {
            _ = system("mkdir -p '\(Self.vectors)/tiny-ledger' '\(Self.vectors)/tampered'")
            for f in files { writeBytes(Self.vectorContent(path + "/" + f), to: "\(Self.vectors)/tiny-ledger/\(f)") }
            writeBytes(expected, to: Self.vectors + "/expected.json")
        }
        for f in files {
            let same = Self.vectorContent(path + "/" + f) == readBytes("\(Self.vectors)/tiny-ledger/\(f)")
            #expect(same, "Spec/vectors/tiny-ledger/\(f) differs from what the code writes")
        }
        let same = readBytes(Self.vectors + "/expected.json") == expected
            #expect(same, "Spec/vectors/expected.json differs")
        let original = lines(of: readLog(path))
        for t in Self.tamperings {
            let bytes = Array(changingEvents(original, t.change).joined())
            let vectorPath = "\(Self.vectors)/tampered/\(t.name).jsonl"
            if update { writeBytes(bytes, to: vectorPath) }
            let same = readBytes(vectorPath) == bytes
            #expect(same, "\(vectorPath) differs")
        }
    }

    /// Every negative vector fails `verify` at the documented line, for the documented reason.
    @Test func tamperedVectorsFailVerify() throws {
        let expected = try CanonicalJSON.parse(readBytes(Self.vectors + "/expected.json"), canonical: false)
        let cases = expected["tampered"]?.arrayValue ?? []
        #expect(cases.count == Self.tamperings.count)
        for c in cases {
            let name = c["file"]!.stringValue!
            let folder = TemporaryFolder("tampered")
            defer { folder.remove() }
            let copy = folder.path + "/ledger"
            copyFolder(Self.vectors + "/tiny-ledger", to: copy)
            writeBytes(readBytes(Self.vectors + "/tampered/" + name), to: copy + "/ledger.jsonl")
            guard case .failed(.integrity(let failure)) = verifyFolder(copy) else {
                Issue.record("\(name) passed verify")
                continue
            }
            #expect(failure.line == Int(c["line"]!.intValue!), "\(name): \(failure)")
            #expect(failure.problem.contains(c["reason"]!.stringValue!), "\(name): \(failure)")
        }
    }

    /// The committed tiny ledger verifies as it is.
    @Test func tinyLedgerVerifies() throws {
        let folder = TemporaryFolder("tiny")
        defer { folder.remove() }
        copyFolder(Self.vectors + "/tiny-ledger", to: folder.path + "/l")
        #expect(verifyFolder(folder.path + "/l") == .ok(events: 10))
    }

    func expectedJSON(ledger: Ledger, path: String, report: VerificationReport) throws -> [UInt8] {
        let hasher = Sodium()
        var events: [JSONValue] = []
        for (i, line) in eventLines(of: readLog(path)).enumerated() {
            let record = try EventCodec.decode(line: Array(line.dropLast()))
            events.append(.object([
                "line": .int(Int64(i + 1)),
                "seq": .int(Int64(record.event.seq)),
                "type": .string(record.event.payload.typeName),
                "prev": .string(record.prev.hex),
                "bodySha256": .string(hasher.sha256(record.body).hex),
                "signedMessageSha256": .string(hasher.sha256(EventCodec.signedMessage(body: record.body)).hex),
            ]))
        }
        let salts = try FileLedgerStore(directory: path).readSubjectRecords().mapValues(\.salt)
        let subjects: [JSONValue] = salts.keys.sorted().map { id in
            .object(["id": .string(id.text), "salt": .string(Hex.encode(salts[id]!)), "ref": .string(ledger.subjectRef(id: id.text, salt: salts[id]!).value)])
        }
        let value: JSONValue = .object([
            "description": .string("Expected values for Spec/vectors/tiny-ledger; see Spec/ledger-format.md section 'Test vectors'. The secret key is a test key: seed bytes 00 01 02 ... 1f."),
            "publicKey": .string(ledger.publicKey.hex),
            "keyID": .string(ledger.keyID),
            "catalogSha256": .string(hasher.sha256(ledger.catalogBytes).hex),
            "ledgerName": .string(ledger.genesis.ledgerName),
            "events": .array(events),
            "head": .object(["seq": .int(Int64(report.head.seq)), "hash": .string(report.head.hash.hex)]),
            "subjects": .array(subjects),
            "finalState": finalState(ledger),
            "tampered": .array(Self.tamperings.map { t in
                .object(["file": .string(t.name + ".jsonl"), "line": .int(Int64(t.line)), "reason": .string(t.expect)])
            }),
        ])
        return CanonicalJSON.serialize(value) + [0x0A]
    }

    func finalState(_ ledger: Ledger) -> JSONValue {
        var subjects: [String: JSONValue] = [:]
        for id in ["alice", "bob"] {
            let report = try! ledger.report(for: id)
            var features: [String: JSONValue] = [:]
            for f in report.listing.features {
                features[f.feature.key] = .object([
                    "active": .bool(f.isActive),
                    "given": .array(f.consents.filter(\.isGiven).map { .string($0.definition.code) }),
                ])
            }
            subjects[id] = .object(features)
        }
        return .object(subjects)
    }
}
