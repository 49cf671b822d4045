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

/// `Spec/vectors/export/`: a checkpoint, bundles and a consistency proof made from the tiny
/// ledger of the ledger vectors, and tampered copies, each with the outcome a verifier must
/// reach (`expected.json`). Rebuilt here and compared byte for byte; set
/// CONSENTLEDGER_UPDATE_VECTORS=1 to rewrite them after a deliberate change.
@Suite struct ExportVectorTests {
    static let folder = packageRoot + "/Spec/vectors/export"

    struct Case {
        let file: String
        let kind: String  // "bundle" or "consistency"
        let ok: Bool
        let seq: Int?
        let reason: String
        let bytes: [UInt8]
    }

    static func cases() throws -> (key: NoteVerifierKey, checkpoint: String, cases: [Case]) {
        let temp = TemporaryFolder("export-vectors")
        defer { temp.remove() }
        let ledger = try VectorTests.buildTinyLedger(at: temp.path + "/tiny")
        let key = try ledger.verifierKey
        let signer = SodiumSigner(seed: vectorSeed)!
        let (_, checkpoint) = try ledger.signedCheckpoint()
        let alice = try ledger.exportSubject("alice")
        let all = try ledger.exportAll()
        let oldCheckpoint = SignedNote.sign(try ledger.checkpoint(size: 6).text, key: key, signer: signer)
        let consistency = try ledger.proveConsistency(from: oldCheckpoint)

        func edit(_ bundle: AuditExport, _ change: (inout [String: JSONValue]) -> Void) -> [UInt8] {
            var object = bundle.json.objectValue!
            change(&object)
            return CanonicalJSON.serialize(.object(object)) + [0x0A]
        }
        func events(_ o: [String: JSONValue]) -> [JSONValue] { o["events"]!.arrayValue! }
        // Another key with the same name: seed bytes 32…63.
        let impostor = SodiumSigner(seed: Array(32..<64))!
        let impostorKey = try NoteVerifierKey(name: key.name, publicKey: impostor.publicKey)
        let forged = SignedNote.sign(try ledger.checkpoint(size: 10).text, key: impostorKey, signer: impostor)
        var badProof = consistency.proof
        badProof[0] = Digest(bytes: badProof[0].bytes.map { $0 ^ 0x01 })!

        let list: [Case] = [
            Case(file: "alice.bundle.json", kind: "bundle", ok: true, seq: nil, reason: "", bytes: alice.bytes),
            Case(file: "all.bundle.json", kind: "bundle", ok: true, seq: nil, reason: "", bytes: all.bytes),
            Case(file: "consistency-6-10.json", kind: "consistency", ok: true, seq: nil, reason: "", bytes: CanonicalJSON.serialize(consistency.json) + [0x0A]),
            Case(file: "bad-flipped-event-byte.json", kind: "bundle", ok: false, seq: 2, reason: "signature does not verify", bytes: edit(alice) { o in
                var e = events(o)
                var line = Array(e[1]["line"]!.stringValue!.utf8)
                line[line.count - 10] = line[line.count - 10] == 0x30 ? 0x31 : 0x30
                var m = e[1].objectValue!
                m["line"] = .string(String(decoding: line, as: UTF8.self))
                e[1] = .object(m)
                o["events"] = .array(e)
            }),
            Case(file: "bad-dropped-event.json", kind: "bundle", ok: false, seq: nil, reason: "the subject map says the newest event of the subject is seq 7", bytes: edit(alice) { o in
                o["events"] = .array(Array(events(o).dropLast(2)))
            }),
            Case(file: "bad-swapped-pair.json", kind: "bundle", ok: false, seq: 3, reason: "as the previous event of the subject", bytes: edit(alice) { o in
                var e = events(o)
                e.swapAt(1, 2)
                o["events"] = .array(e)
            }),
            Case(file: "bad-proof-for-other-checkpoint.json", kind: "bundle", ok: false, seq: 0, reason: "inclusion proof", bytes: edit(alice) { o in
                o["checkpoint"] = .string(oldCheckpoint)
            }),
            Case(file: "bad-checkpoint-other-key.json", kind: "bundle", ok: false, seq: nil, reason: "checkpoint: the note has no signature by key", bytes: edit(alice) { o in
                o["checkpoint"] = .string(forged)
            }),
            Case(file: "bad-embedded-key-differs.json", kind: "bundle", ok: false, seq: nil, reason: "differs from the pinned key", bytes: edit(alice) { o in
                o["checkpoint"] = .string(forged)
                o["verifierKey"] = .string(impostorKey.text)
            }),
            Case(file: "bad-consistency-changed-hash.json", kind: "consistency", ok: false, seq: nil, reason: "does not verify", bytes: CanonicalJSON.serialize(ConsistencyProof(oldNote: consistency.oldNote, newNote: consistency.newNote, proof: badProof).json) + [0x0A]),
        ]
        return (key, checkpoint, list)
    }

    static func outcome(_ c: Case, key: NoteVerifierKey) -> ExportVerificationError? {
        do throws(ExportVerificationError) {
            if c.kind == "bundle" {
                _ = try ExportVerifier.verify(c.bytes, pinnedKey: key)
            } else {
                _ = try ExportVerifier.verifyConsistency(try ConsistencyProof(bytes: c.bytes), pinnedKey: key)
            }
            return nil
        } catch {
            return error
        }
    }

    @Test func exportVectorsMatchTheCodeAndVerifyAsExpected() throws {
        let (key, checkpoint, cases) = try Self.cases()
        let expected = CanonicalJSON.serialize(.object([
            "description": .string("Expected outcomes for Spec/vectors/export; see Spec/export-format.md section 'Test vectors'. Made from Spec/vectors/tiny-ledger."),
            "verifierKey": .string(key.text),
            "checkpoint": .string("checkpoint.txt"),
            "cases": .array(cases.map { c in
                var m: [String: JSONValue] = ["file": .string(c.file), "kind": .string(c.kind), "ok": .bool(c.ok)]
                if !c.ok { m["reason"] = .string(c.reason) }
                if let seq = c.seq { m["seq"] = .int(Int64(seq)) }
                return .object(m)
            }),
        ])) + [0x0A]
        if getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil {
            _ = system("mkdir -p '\(Self.folder)'")
            writeBytes(Array((key.text + "\n").utf8), to: Self.folder + "/verifier-key.txt")
            writeBytes(Array(checkpoint.utf8), to: Self.folder + "/checkpoint.txt")
            writeBytes(expected, to: Self.folder + "/expected.json")
            for c in cases { writeBytes(c.bytes, to: Self.folder + "/" + c.file) }
        }
        #expect(readBytes(Self.folder + "/verifier-key.txt") == Array((key.text + "\n").utf8))
        #expect(readBytes(Self.folder + "/checkpoint.txt") == Array(checkpoint.utf8))
        #expect(readBytes(Self.folder + "/expected.json") == expected)
        for c in cases {
            let same = readBytes(Self.folder + "/" + c.file) == c.bytes
            #expect(same, "\(c.file) differs from what the code makes")
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

/// `Spec/vectors/rotated/`: bundles, a state proof and a consistency proof of the rotated ledger
/// of the ledger vectors (`rotated-ledger/`), each verified with the genesis key and with the
/// current key, and tampered copies, with the outcome a verifier must reach (`expected.json`).
@Suite struct RotatedVectorTests {
    static let folder = packageRoot + "/Spec/vectors/rotated"

    struct Case {
        let file: String
        let kind: String  // "bundle", "state" or "consistency"
        let key: String  // "genesis" or "current": which key the verifier pins
        let ok: Bool
        let seq: Int?
        let reason: String
        let bytes: [UInt8]
    }

    static func cases() throws -> (genesis: NoteVerifierKey, current: NoteVerifierKey, cases: [Case]) {
        let temp = TemporaryFolder("rotated-vectors")
        defer { temp.remove() }
        let ledger = try VectorTests.buildRotatedLedger(at: temp.path + "/rotated")
        let genesisKey = try ledger.verifierKey
        let currentKey = try ledger.currentVerifierKey()
        let alice = try ledger.exportSubject("alice")
        let statementForm = try ledger.exportSubjectWithStatement("alice")
        let all = try ledger.exportAll()
        let state = try ledger.proveState(for: "alice")
        let oldCheckpoint = SignedNote.sign(try ledger.checkpoint(size: 6).text, key: genesisKey, signer: SodiumSigner(seed: vectorSeed)!)
        let consistency = try ledger.proveConsistency(from: oldCheckpoint)
        func edit(_ json: JSONValue, _ change: (inout [String: JSONValue]) -> Void) -> [UInt8] {
            var object = json.objectValue!
            change(&object)
            return CanonicalJSON.serialize(.object(object)) + [0x0A]
        }
        // The rotation's handover with one hex digit changed, in 'keys' and in the ledger stream.
        func flippedHandover(_ o: inout [String: JSONValue], lists: [String]) {
            for list in lists {
                o[list] = .array(o[list]!.arrayValue!.map { entry in
                    guard let line = entry["line"]?.stringValue, line.contains("key.rotated") else { return entry }
                    var m = entry.objectValue!
                    m["line"] = .string(line.replacingOccurrences(of: "\"handover\":\"5", with: "\"handover\":\"6"))
                    return .object(m)
                })
            }
        }
        var list: [Case] = []
        for key in ["genesis", "current"] {
            list += [
                Case(file: "alice.bundle.json", kind: "bundle", key: key, ok: true, seq: nil, reason: "", bytes: alice.bytes),
                Case(file: "alice-statement.bundle.json", kind: "bundle", key: key, ok: true, seq: nil, reason: "", bytes: statementForm.bytes),
                Case(file: "all.bundle.json", kind: "bundle", key: key, ok: true, seq: nil, reason: "", bytes: all.bytes),
                Case(file: "alice.state.json", kind: "state", key: key, ok: true, seq: nil, reason: "", bytes: state.bytes),
                Case(file: "consistency-6-11.json", kind: "consistency", key: key, ok: true, seq: nil, reason: "", bytes: CanonicalJSON.serialize(consistency.json) + [0x0A]),
            ]
        }
        list += [
            Case(file: "bad-keys-left-out.json", kind: "bundle", key: "genesis", ok: false, seq: nil, reason: "differs from the pinned key", bytes: edit(alice.json) { o in
                o["keys"] = nil
            }),
            Case(file: "bad-keys-left-out.state.json", kind: "state", key: "current", ok: false, seq: 0, reason: "signature does not verify with the pinned key", bytes: edit(state.json) { o in
                o["keys"] = nil
            }),
            Case(file: "bad-handover.json", kind: "bundle", key: "current", ok: false, seq: 6, reason: "signature does not verify", bytes: edit(alice.json) { o in
                flippedHandover(&o, lists: ["keys", "catalogVersions"])
            }),
            Case(file: "bad-verifier-key-is-genesis.json", kind: "bundle", key: "genesis", ok: false, seq: nil, reason: "is not the key that signs its checkpoint", bytes: edit(all.json) { o in
                o["verifierKey"] = .string(genesisKey.text)
            }),
        ]
        return (genesisKey, currentKey, list)
    }

    @Test func rotatedVectorsMatchTheCodeAndVerifyAsExpected() throws {
        let (genesisKey, currentKey, cases) = try Self.cases()
        let expected = CanonicalJSON.serialize(.object([
            "description": .string("Expected outcomes for Spec/vectors/rotated; see Spec/export-format.md section 'Test vectors'. Made from Spec/vectors/rotated-ledger; 'key' says which verifier key to pin."),
            "genesisKey": .string(genesisKey.text),
            "currentKey": .string(currentKey.text),
            "cases": .array(cases.map { c in
                var m: [String: JSONValue] = ["file": .string(c.file), "kind": .string(c.kind), "key": .string(c.key), "ok": .bool(c.ok)]
                if !c.ok { m["reason"] = .string(c.reason) }
                if let seq = c.seq { m["seq"] = .int(Int64(seq)) }
                return .object(m)
            }),
        ])) + [0x0A]
        if getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil {
            _ = system("mkdir -p '\(Self.folder)'")
            writeBytes(expected, to: Self.folder + "/expected.json")
            for c in cases { writeBytes(c.bytes, to: Self.folder + "/" + c.file) }
        }
        #expect(readBytes(Self.folder + "/expected.json") == expected)
        for c in cases {
            let same = readBytes(Self.folder + "/" + c.file) == c.bytes
            #expect(same, "\(c.file) differs from what the code makes")
            let key = c.key == "genesis" ? genesisKey : currentKey
            let error: ExportVerificationError?
            do throws(ExportVerificationError) {
                switch c.kind {
                case "bundle": _ = try ExportVerifier.verify(c.bytes, pinnedKey: key)
                case "state": _ = try StateProofVerifier.verify(c.bytes, pinnedKey: key)
                default: _ = try ExportVerifier.verifyConsistency(try ConsistencyProof(bytes: c.bytes), pinnedKey: key)
                }
                error = nil
            } catch let failure {
                error = failure
            }
            if c.ok {
                #expect(error == nil, "\(c.file) with the \(c.key) key: \(String(describing: error))")
            } else {
                #expect(error?.problem.contains(c.reason) == true, "\(c.file): \(String(describing: error))")
                if let seq = c.seq { #expect(error?.seq == UInt64(seq), "\(c.file): \(String(describing: error))") }
            }
        }
    }
}
