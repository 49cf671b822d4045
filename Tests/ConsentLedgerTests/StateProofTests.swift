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

/// State proofs (`Spec/state-proof.md`): what `prove-state` writes verifies offline to the
/// state a replay of the log gives, and any event missing, added, altered or out of order, or a
/// map proof that does not lead to the signed root, fails with its reason.
@Suite struct StateProofTests {
    /// The tiny ledger of the ledger vectors, then a new policy version of Timeline's optional-a
    /// and alice's re-consent to it: subject streams and the ledger's own stream of two.
    static func ledger(at path: String) throws -> Ledger {
        let ledger = try VectorTests.buildTinyLedger(at: path)
        try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "optional-a", "2.0")]), actor: "vector-generator")
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        return ledger
    }

    @Test(arguments: ["alice", "bob"])
    func aProofVerifiesToTheStateTheLedgerReports(_ subject: String) throws {
        let temp = TemporaryFolder("state-proof-\(subject)")
        defer { temp.remove() }
        let ledger = try Self.ledger(at: temp.path + "/l")
        let key = try ledger.verifierKey
        let proof = try ledger.proveState(for: subject)
        let report = try StateProofVerifier.verify(proof.bytes, pinnedKey: key)
        #expect(report.listing == (try ledger.report(for: subject)).listing)
        #expect(report.events == (try ledger.report(for: subject)).events)
        // As of each of the subject's event times, and before the first.
        for at in [Timestamp(canonical: "2026-01-15T08:00:00.000Z")!] + report.events.map(\.at) {
            let asOf = try StateProofVerifier.verify(try ledger.proveState(for: subject, at: at).bytes, pinnedKey: key)
            #expect(asOf.listing == (try ledger.report(for: subject, asOf: at)).listing, "as of \(at)")
        }
    }

    @Test func aSubjectTheLedgerDoesNotKnowIsRefused() throws {
        let temp = TemporaryFolder("state-proof-unknown")
        defer { temp.remove() }
        let ledger = try Self.ledger(at: temp.path + "/l")
        #expect(throws: ConsentError.notFound(.subject, "the ledger has no subject 'carol'")) { try ledger.proveState(for: "carol") }
    }

    /// A proof read from a tampered file or row is never handed out: the map and the tree hashes
    /// it is built from are checked on the way.
    @Test func aTamperedSubjectMapGivesNoProof() throws {
        let temp = TemporaryFolder("state-proof-map")
        defer { temp.remove() }
        let ledger = try Self.ledger(at: temp.path + "/l")
        var map = readBytes(temp.path + "/l/subjects.map")
        let count = map.count / SubjectMapRecord.size
        for r in 0..<count where map[r * SubjectMapRecord.size] == 1 { map[r * SubjectMapRecord.size + 31] ^= 1 }
        writeBytes(map, to: temp.path + "/l/subjects.map")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: temp.path + "/l"))
        #expect(throws: ConsentError.self) { try reopened.proveState(for: "alice") }
    }
}

/// `Spec/vectors/state/`: state proofs made from the ledger above, and tampered copies, each
/// with the outcome a verifier must reach (`expected.json`). Rebuilt here and compared byte for
/// byte; set CONSENTLEDGER_UPDATE_VECTORS=1 to rewrite them after a deliberate change.
@Suite struct StateProofVectorTests {
    static let folder = packageRoot + "/Spec/vectors/state"

    struct Case {
        let file: String
        let ok: Bool
        let seq: Int?
        let reason: String
        let bytes: [UInt8]
    }

    static func cases() throws -> (key: NoteVerifierKey, cases: [Case]) {
        let temp = TemporaryFolder("state-vectors")
        defer { temp.remove() }
        let ledger = try StateProofTests.ledger(at: temp.path + "/l")
        let key = try ledger.verifierKey
        let alice = try ledger.proveState(for: "alice")
        let bob = try ledger.proveState(for: "bob")
        let asOf = try ledger.proveState(for: "alice", at: Timestamp(canonical: "2026-01-15T09:00:01.500Z")!)
        func edit(_ proof: StateProof, _ change: (inout [String: JSONValue]) -> Void) -> [UInt8] {
            var object = proof.json.objectValue!
            change(&object)
            return CanonicalJSON.serialize(.object(object)) + [0x0A]
        }
        func events(_ o: [String: JSONValue]) -> [JSONValue] { o["events"]!.arrayValue! }
        let impostor = SodiumSigner(seed: Array(32..<64))!
        let impostorKey = try NoteVerifierKey(name: key.name, publicKey: impostor.publicKey)
        let aliceSeqs = alice.events.map(\.seq)
        let list: [Case] = [
            Case(file: "alice.state.json", ok: true, seq: nil, reason: "", bytes: alice.bytes),
            Case(file: "bob.state.json", ok: true, seq: nil, reason: "", bytes: bob.bytes),
            Case(file: "alice-as-of.state.json", ok: true, seq: nil, reason: "", bytes: asOf.bytes),
            Case(file: "bad-dropped-newest-event.json", ok: false, seq: nil, reason: "events are missing or added", bytes: edit(alice) { o in
                o["events"] = .array(Array(events(o).dropLast()))
            }),
            Case(file: "bad-dropped-middle-event.json", ok: false, seq: Int(aliceSeqs[2]), reason: "an event is missing, added or out of order", bytes: edit(alice) { o in
                var e = events(o)
                e.remove(at: 1)
                o["events"] = .array(e)
            }),
            Case(file: "bad-added-event.json", ok: false, seq: Int(bob.events[0].seq), reason: "is not one of the subject", bytes: edit(alice) { o in
                var e = events(o)
                e.insert(StateProof.eventJSON(bob.events[0]), at: 2)
                o["events"] = .array(e)
            }),
            Case(file: "bad-swapped-events.json", ok: false, seq: Int(aliceSeqs[2]), reason: "an event is missing, added or out of order", bytes: edit(alice) { o in
                var e = events(o)
                e.swapAt(1, 2)
                o["events"] = .array(e)
            }),
            Case(file: "bad-flipped-event-byte.json", ok: false, seq: Int(aliceSeqs[1]), reason: "signature does not verify", bytes: edit(alice) { o in
                var e = events(o)
                var line = Array(e[1]["line"]!.stringValue!.utf8)
                line[line.count - 10] = line[line.count - 10] == 0x30 ? 0x31 : 0x30
                var m = e[1].objectValue!
                m["line"] = .string(String(decoding: line, as: UTF8.self))
                e[1] = .object(m)
                o["events"] = .array(e)
            }),
            Case(file: "bad-map-sibling.json", ok: false, seq: nil, reason: "does not lead to the root", bytes: edit(alice) { o in
                var map = o["subjectMap"]!.objectValue!
                var siblings = map["siblings"]!.arrayValue!
                siblings[0] = .string(Base64.encode([UInt8](repeating: 7, count: 32)))
                map["siblings"] = .array(siblings)
                o["subjectMap"] = .object(map)
            }),
            Case(file: "bad-map-claims-older-event.json", ok: false, seq: nil, reason: "does not lead to the root", bytes: edit(alice) { o in
                var map = o["subjectMap"]!.objectValue!
                var end = map["end"]!.objectValue!
                end["seq"] = .int(aliceSeqs[aliceSeqs.count - 2])
                map["end"] = .object(end)
                o["subjectMap"] = .object(map)
                o["events"] = .array(Array(events(o).dropLast()))
            }),
            Case(file: "bad-last-not-the-checkpoints.json", ok: false, seq: Int(alice.events[0].seq), reason: "is not the checkpoint's last", bytes: edit(alice) { o in
                o["last"] = StateProof.eventJSON(alice.events[0])
            }),
            Case(file: "bad-dropped-catalogue-version.json", ok: false, seq: nil, reason: "the ledger's own stream", bytes: edit(alice) { o in
                o["catalogVersions"] = .array([])
            }),
            Case(file: "bad-state.json", ok: false, seq: nil, reason: "state differs from the replay", bytes: edit(alice) { o in
                let other = bob.json.objectValue!
                o["state"] = other["state"]!
            }),
            Case(file: "bad-relabelled-subject.json", ok: false, seq: nil, reason: "pseudonym does not match its id and salt", bytes: edit(alice) { o in
                var s = o["subject"]!.objectValue!
                s["id"] = .string("bob")
                o["subject"] = .object(s)
            }),
            Case(file: "bad-chain-names-another-event.json", ok: false, seq: Int(alice.last.seq), reason: "the checkpoint's chain line names another event than 'last'", bytes: edit(alice) { o in
                // The ledger's own key signs a head whose chain line names another hash.
                var lines = alice.checkpoint.components(separatedBy: "\n\n")[0].components(separatedBy: "\n")
                lines[3] = "chain " + String(repeating: "ab", count: 32)
                o["checkpoint"] = .string(SignedNote.sign(lines.joined(separator: "\n") + "\n", key: key, signer: SodiumSigner(seed: vectorSeed)!))
            }),
            Case(file: "bad-checkpoint-other-key.json", ok: false, seq: nil, reason: "checkpoint: the note has no signature by key", bytes: edit(alice) { o in
                let forged = SignedNote.sign(alice.checkpoint.components(separatedBy: "\n\n")[0] + "\n", key: impostorKey, signer: impostor)
                o["checkpoint"] = .string(forged)
            }),
        ]
        return (key, list)
    }

    static func outcome(_ c: Case, key: NoteVerifierKey) -> ExportVerificationError? {
        do throws(ExportVerificationError) {
            _ = try StateProofVerifier.verify(c.bytes, pinnedKey: key)
            return nil
        } catch {
            return error
        }
    }

    @Test func stateVectorsMatchTheCodeAndVerifyAsExpected() throws {
        let (key, cases) = try Self.cases()
        let expected = CanonicalJSON.serialize(.object([
            "description": .string("Expected outcomes for Spec/vectors/state; see Spec/state-proof.md section 'Test vectors'."),
            "verifierKey": .string(key.text),
            "cases": .array(cases.map { c in
                var m: [String: JSONValue] = ["file": .string(c.file), "ok": .bool(c.ok)]
                if !c.ok { m["reason"] = .string(c.reason) }
                if let seq = c.seq { m["seq"] = .int(Int64(seq)) }
                return .object(m)
            }),
        ])) + [0x0A]
        if getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil {
            _ = system("mkdir -p '\(Self.folder)'")
            writeBytes(Array((key.text + "\n").utf8), to: Self.folder + "/verifier-key.txt")
            writeBytes(expected, to: Self.folder + "/expected.json")
            for c in cases { writeBytes(c.bytes, to: Self.folder + "/" + c.file) }
        }
        #expect(readBytes(Self.folder + "/verifier-key.txt") == Array((key.text + "\n").utf8))
        #expect(readBytes(Self.folder + "/expected.json") == expected)
        for c in cases {
            #expect(readBytes(Self.folder + "/" + c.file) == c.bytes, "\(c.file) differs from what the code makes")
            let error = Self.outcome(c, key: key)
            if c.ok {
                #expect(error == nil, "\(c.file): \(String(describing: error))")
            } else {
                #expect(error?.problem.contains(c.reason) == true, "\(c.file): \(String(describing: error))")
                if let seq = c.seq { #expect(error?.seq == UInt64(seq), "\(c.file): \(String(describing: error))") }
            }
        }
    }
}
