import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import LogWitness
@testable import TransparencyLog

/// A witness handed requests directly: the ledger's client logic and the witness's protocol
/// logic meet without HTTP (the HTTP face is tested in the service package).
struct DirectWitnessTransport: WitnessTransport {
    let witnesses: [String: Witness]
    func addCheckpoint(_ body: [UInt8], to url: String) throws -> WitnessResponse {
        guard let witness = witnesses[url] else { throw ConsentError.unavailable("connection refused: \(url)") }
        return witness.addCheckpoint(body)
    }
}

/// C2SP tlog-witness and tlog-cosignature: the encoding against the specs' own examples, every
/// status code of add-checkpoint, and a ledger gathering a quorum that auditors check.
@Suite struct WitnessTests {
    static let vectors = packageRoot + "/Spec/vectors/witness"
    static let timestamp: UInt64 = 1_767_258_000
    /// Witness seeds: bytes 0x40… and 0x60… (test keys, like the ledger vector key).
    static let seedA: [UInt8] = Array(0x40..<0x60), seedB: [UInt8] = Array(0x60..<0x80)

    static func witness(_ seed: [UInt8], _ name: String, logs: [NoteVerifierKey], state: String, clock: UInt64 = timestamp) throws -> Witness {
        let signer = SodiumSigner(seed: seed)!
        return try Witness(key: try CosignerKey(name: name, publicKey: signer.publicKey), signer: signer, logs: logs,
                           state: try WitnessStateStore(directory: state), clock: { clock })
    }

    // MARK: The specs' examples

    /// The cosignature line of C2SP tlog-cosignature's example: key id, then the big-endian
    /// timestamp the example's signed message names (1679315147), then 64 signature bytes.
    @Test func theSpecsExampleCosignatureLineDecodes() throws {
        let note = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
            + "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
            + "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
        let (text, lines) = try SignedNote.split(note)
        #expect(lines.count == 2 && lines[1].name == "witness.example.com/w1")
        #expect(lines[1].keyHash == 0x8D66CF3F)
        let cosignature = try Cosignature(lineBytes: lines[1].bytes)
        #expect(cosignature.timestamp == 1_679_315_147)
        // The signed message, byte for byte as the spec prints it.
        let expected = "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        #expect(Cosignature.message(checkpointText: text, timestamp: cosignature.timestamp) == Array(expected.utf8))
        // And the line is re-encoded exactly.
        #expect(cosignature.line(key: try CosignerKey(name: "witness.example.com/w1", publicKey: PublicKey(bytes: [UInt8](repeating: 9, count: 32))!)).bytes == lines[1].bytes)
    }

    /// C2SP tlog-witness's example request body parses into its parts, and re-encodes to the
    /// same bytes.
    @Test func theSpecsExampleRequestParses() throws {
        let body = "old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\njrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\n"
            + "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
            + "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
            + "— example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n"
        let request = try AddCheckpointRequest(body: Array(body.utf8))
        #expect(request.oldSize == 20_852_014 && request.proof.count == 4)
        #expect(try Checkpoint(text: SignedNote.split(request.note).text).size == 20_852_163)
        #expect(request.body == Array(body.utf8))
    }

    @Test(arguments: [
        ("old 01\n\nx\n", "leading zeros"),
        ("old -1\n\nx\n", "leading zeros"),
        ("new 1\n\nx\n", "'old SIZE'"),
        ("old 1\nnot base64\n\nx\n", "base64 of 32 bytes"),
        ("old 1\n", "ends inside its header"),
        ("old 1\n" + String(repeating: "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n", count: 64) + "\nx\n", "more than 63"),
    ])
    func malformedRequestsAreRefused(body: String, reason: String) {
        do {
            _ = try AddCheckpointRequest(body: Array(body.utf8))
            Issue.record("accepted: \(body)")
        } catch {
            #expect(error.description.contains(reason), "\(error)")
        }
    }

    @Test func witnessKeysHaveTheirOwnTypeAndID() throws {
        let signer = SodiumSigner(seed: Self.seedA)!
        let key = try CosignerKey(name: "witness.example/a", publicKey: signer.publicKey)
        #expect(try CosignerKey(text: key.text) == key)
        #expect(key.text.hasPrefix("witness.example/a+"))
        // The same public key as a note signer (0x01) has another id, and neither text passes for the other.
        let noteKey = try NoteVerifierKey(name: "witness.example/a", publicKey: signer.publicKey)
        #expect(noteKey.keyHash != key.keyID)
        #expect(throws: NoteError.self) { try CosignerKey(text: noteKey.text) }
        #expect(throws: NoteError.self) { try NoteVerifierKey(text: key.text) }
        var wrongID = Array(key.text)
        wrongID[key.name.count + 1] = wrongID[key.name.count + 1] == "0" ? "1" : "0"
        #expect(throws: NoteError.self) { try CosignerKey(text: String(wrongID)) }
    }

    // MARK: Vectors

    /// `Spec/vectors/witness/`: the tiny ledger's checkpoint cosigned by two test witnesses, a
    /// request, and quorum cases; rebuilt here byte for byte (CONSENTLEDGER_UPDATE_VECTORS=1
    /// rewrites them). `verify_witness.py` checks them independently.
    @Test func theWitnessVectorsAreRebuiltByteForByte() throws {
        let temp = TemporaryFolder("witness-vectors")
        defer { temp.remove() }
        let ledger = try VectorTests.buildTinyLedger(at: temp.path + "/tiny")
        let key = try ledger.verifierKey
        let (checkpoint, note) = try ledger.signedCheckpoint()
        let a = try Self.witness(Self.seedA, "witness.example/a", logs: [key], state: temp.path + "/a")
        let b = try Self.witness(Self.seedB, "witness.example/b", logs: [key], state: temp.path + "/b", clock: Self.timestamp + 1)
        let fromZero = AddCheckpointRequest(oldSize: 0, proof: [], note: note).body
        let lineA = a.addCheckpoint(fromZero), lineB = b.addCheckpoint(fromZero)
        #expect(lineA.status == 200 && lineB.status == 200)
        let cosigned = note + String(decoding: lineA.body + lineB.body, as: UTF8.self)
        let proof = try ledger.reading { view in try MerkleTree.consistencyProof(old: 6, new: 10, hasher: OpenSSLSHA256(), read: view.treeHashes) }
        let request = AddCheckpointRequest(oldSize: 6, proof: proof, note: note).body
        var flipped = Array(String(decoding: lineA.body, as: UTF8.self))
        flipped[flipped.count - 10] = flipped[flipped.count - 10] == "A" ? "B" : "A"
        let badA = note + String(flipped) + String(decoding: lineB.body, as: UTF8.self)
        let files: [(String, [UInt8])] = [
            ("witness-a.vkey", Array((a.key.text + "\n").utf8)),
            ("witness-b.vkey", Array((b.key.text + "\n").utf8)),
            ("cosigned-checkpoint.txt", Array(cosigned.utf8)),
            ("bad-cosignature-a.txt", Array(badA.utf8)),
            ("add-checkpoint-6-10.txt", request),
        ]
        func witnessJSON(_ w: Witness, _ seed: [UInt8]) -> JSONValue {
            .object(["name": .string(w.key.name), "verifierKey": .string(w.key.text), "keyID": .string(VerifierKeyText.hex(w.key.keyID)),
                     "seed": .string(Hex.encode(seed)), "publicKey": .string(w.key.publicKey.hex)])
        }
        func quorum(_ file: String, _ witnesses: [String], _ k: Int, _ ok: Bool, _ reason: String) -> JSONValue {
            .object(["file": .string(file), "witnesses": .array(witnesses.map { .string($0) }), "quorum": .int(Int64(k)), "ok": .bool(ok), "reason": .string(reason)])
        }
        let expected: JSONValue = .object([
            "description": .string("C2SP tlog-cosignature (cosignature/v1, Ed25519, type 0x04) over the tiny ledger's signed head, and a tlog-witness add-checkpoint request; see Spec/witness.md"),
            "ledgerVerifierKey": .string(key.text),
            "checkpointSize": .int(checkpoint.size),
            "witnesses": .array([witnessJSON(a, Self.seedA), witnessJSON(b, Self.seedB)]),
            "timestamps": .array([.int(Int64(Self.timestamp)), .int(Int64(Self.timestamp + 1))]),
            "signedMessageSha256": .array([Self.timestamp, Self.timestamp + 1].map { .string(OpenSSLSHA256().sha256(Cosignature.message(checkpointText: try! SignedNote.split(note).text, timestamp: $0)).hex) }),
            "request": .object(["file": .string("add-checkpoint-6-10.txt"), "oldSize": .int(6), "proofHashes": .int(Int64(proof.count))]),
            "quorumCases": .array([
                quorum("cosigned-checkpoint.txt", ["a", "b"], 2, true, ""),
                quorum("cosigned-checkpoint.txt", ["a"], 1, true, ""),
                quorum("cosigned-checkpoint.txt", ["b"], 1, true, ""),
                quorum("../export/checkpoint.txt", ["a", "b"], 1, false, "valid cosignatures from 0 of the 1"),
                quorum("bad-cosignature-a.txt", ["b"], 1, true, ""),
                quorum("bad-cosignature-a.txt", ["a", "b"], 1, false, "does not verify"),
            ]),
        ])
        if getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil {
            try? FileManager.default.createDirectory(atPath: Self.vectors, withIntermediateDirectories: true)
            for (name, bytes) in files { writeBytes(bytes, to: Self.vectors + "/" + name) }
            writeBytes(CanonicalJSON.serialize(expected) + [0x0A], to: Self.vectors + "/expected.json")
        }
        for (name, bytes) in files {
            #expect(readBytes(Self.vectors + "/" + name) == bytes, "Spec/vectors/witness/\(name) is what the code writes")
        }
        #expect(readBytes(Self.vectors + "/expected.json") == CanonicalJSON.serialize(expected) + [0x0A])
        // The quorum cases hold in Swift too.
        let keys = ["a": a.key, "b": b.key]
        for case .object(let c) in expected.objectValue!["quorumCases"]!.arrayValue! {
            let text = String(decoding: readBytes(Self.vectors + "/" + c["file"]!.stringValue!), as: UTF8.self)
            let policy = try WitnessPolicy(witnesses: c["witnesses"]!.arrayValue!.map { keys[$0.stringValue!]! }, quorum: Int(c["quorum"]!.intValue!))
            do {
                try policy.check(text)
                #expect(c["ok"] == .bool(true), "\(c)")
            } catch {
                #expect(c["ok"] == .bool(false) && error.description.contains(c["reason"]!.stringValue!), "\(c): \(error)")
            }
        }
    }

    // MARK: add-checkpoint, status by status

    /// A ledger, its checkpoints at two sizes, and a witness of it.
    struct Setup {
        let ledger: Ledger
        let folder: String
        let key: NoteVerifierKey
        let witness: Witness
        let state: String

        init(_ label: String) throws {
            folder = LedgerPropertyTests.folder("witness-\(label)")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            ledger = try Ledger.create(store: FileLedgerStore(directory: folder + "/ledger"), catalog: SeedCatalog.catalog, name: "consentledger.example/\(label)", keyProtection: .insecurePlaintext)
            key = try ledger.verifierKey
            state = folder + "/witness-state"
            witness = try WitnessTests.witness(WitnessTests.seedA, "witness.example/a", logs: [key], state: state)
        }

        func grow(_ subject: String) throws {
            try ledger.execute(LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required"])))
        }

        func request(old: Int64, note: String? = nil) throws -> [UInt8] {
            let (checkpoint, signed) = try ledger.signedCheckpoint()
            let proof = old > 0 && old < checkpoint.size ? try ledger.reading { view in
                try MerkleTree.consistencyProof(old: old, new: checkpoint.size, hasher: OpenSSLSHA256(), read: view.treeHashes)
            } : []
            return AddCheckpointRequest(oldSize: old, proof: proof, note: note ?? signed).body
        }

        func remove() { removeFolder(folder) }
    }

    @Test func aFirstCheckpointIsCosignedAndRecorded() throws {
        let s = try Setup("first")
        defer { s.remove() }
        try s.grow("alice")
        let answer = s.witness.addCheckpoint(try s.request(old: 0))
        #expect(answer.status == 200)
        let (checkpoint, note) = try s.ledger.signedCheckpoint()
        let cosigned = try SignedNote.split(note).text + "\n" + String(decoding: answer.body, as: UTF8.self)
        #expect(try Cosignature.verifiedCosigners(of: note + String(decoding: answer.body, as: UTF8.self), keys: [s.witness.key])[s.witness.key] == Self.timestamp)
        #expect(try Cosignature.verifiedCosigners(of: cosigned, keys: [s.witness.key]).count == 1)
        let stored = try #require(try WitnessStateStore(directory: s.state).latest(origin: checkpoint.origin))
        #expect(try Checkpoint(text: SignedNote.split(stored).text) == checkpoint)
        // The same checkpoint again, from its own size: cosigned again.
        #expect(s.witness.addCheckpoint(try s.request(old: checkpoint.size)).status == 200)
    }

    @Test func aStaleOldSizeGets409WithTheWitnessSize() throws {
        let s = try Setup("stale")
        defer { s.remove() }
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)
        let size = try s.ledger.signedCheckpoint().checkpoint.size
        try s.grow("bob")
        let answer = s.witness.addCheckpoint(try s.request(old: 1))
        #expect(answer.status == 409 && answer.contentType == "text/x.tlog.size")
        #expect(answer.body == Array("\(size)\n".utf8) && answer.conflictSize == size)
        // From size 0 once something is cosigned: 409 too.
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).conflictSize == size)
        #expect(s.witness.addCheckpoint(try s.request(old: size)).status == 200)
    }

    @Test func aProofThatDoesNotVerifyGets422() throws {
        let s = try Setup("fork")
        defer { s.remove() }
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)
        let size = try s.ledger.signedCheckpoint().checkpoint.size
        try s.grow("bob")
        try s.grow("carol")
        var request = try AddCheckpointRequest(body: try s.request(old: size))
        request = AddCheckpointRequest(oldSize: size, proof: request.proof.map { Digest(bytes: $0.bytes.map { $0 ^ 1 })! }, note: request.note)
        let answer = s.witness.addCheckpoint(request.body)
        #expect(answer.status == 422)
        // Nothing was recorded: the honest proof still works from the old size.
        #expect(s.witness.addCheckpoint(try s.request(old: size)).status == 200)
    }

    @Test func anUnknownLogGets404AndABadSignature403() throws {
        let s = try Setup("unknown")
        defer { s.remove() }
        let other = try Setup("unknown-other")
        defer { other.remove() }
        #expect(s.witness.addCheckpoint(try other.request(old: 0)).status == 404)
        // Signed by another key under this ledger's name.
        let (checkpoint, _) = try s.ledger.signedCheckpoint()
        let impostor = SodiumSigner(seed: Array(32..<64))!
        let forged = SignedNote.sign(try s.ledger.checkpoint(size: checkpoint.size).text, key: try NoteVerifierKey(name: s.key.name, publicKey: impostor.publicKey), signer: impostor)
        #expect(s.witness.addCheckpoint(try s.request(old: 0, note: forged)).status == 403)
        // A note whose signature line names the right key but is changed.
        let (_, real) = try s.ledger.signedCheckpoint()
        let broken = String(real.dropLast(5)) + (real.dropLast(4).last == "A" ? "B" : "A") + String(real.suffix(4))
        #expect(s.witness.addCheckpoint(try s.request(old: 0, note: broken)).status == 403)
    }

    @Test func malformedBodiesAndAnOldSizeAboveTheCheckpointGet400() throws {
        let s = try Setup("bad-request")
        defer { s.remove() }
        #expect(s.witness.addCheckpoint(Array("hello".utf8)).status == 400)
        #expect(s.witness.addCheckpoint(Array("old 0\n\nnot a note".utf8)).status == 400)
        #expect(s.witness.addCheckpoint(try s.request(old: 50)).status == 400)
        #expect(s.witness.addCheckpoint([UInt8](repeating: 0x41, count: AddCheckpointRequest.maximumBytes + 1)).status == 400)
    }

    @Test func theSameSizeWithAnotherRootGets409() throws {
        let s = try Setup("same-size")
        defer { s.remove() }
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)
        let (checkpoint, _) = try s.ledger.signedCheckpoint()
        // The ledger's key signs a checkpoint of the same size and another root: a split view.
        let signer = try FileKeyStore(path: s.folder + "/ledger/secret.key").unlockSigner(passphrase: nil)
        let other = Checkpoint(origin: checkpoint.origin, size: checkpoint.size, root: Digest(bytes: [UInt8](repeating: 7, count: 32))!)
        let split = SignedNote.sign(other.text, key: s.key, signer: signer)
        let answer = s.witness.addCheckpoint(AddCheckpointRequest(oldSize: checkpoint.size, proof: [], note: split).body)
        #expect(answer.status == 409 && answer.conflictSize == checkpoint.size)
    }

    /// An edited state file must not make the witness forget what it cosigned.
    @Test func aStateFileWithoutTheWitnessCosignatureIsNotTrusted() throws {
        let s = try Setup("state")
        defer { s.remove() }
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)
        let (checkpoint, note) = try s.ledger.signedCheckpoint()
        let path = try #require(FileManager.default.contentsOfDirectory(atPath: s.state).first { $0.hasSuffix(".checkpoint") })
        writeBytes(Array(note.utf8), to: s.state + "/" + path)
        let answer = s.witness.addCheckpoint(try s.request(old: checkpoint.size))
        #expect(answer.status == 500)
        #expect(answer.problem?.contains("cannot be trusted") == true)
        #expect(!String(decoding: answer.body, as: UTF8.self).contains(s.state), "a 500 names no path")
    }

    // MARK: The ledger's side

    @Test func twoWitnessesAndAQuorumOfTwoAcceptTheHonestLogAndRefuseAFork() throws {
        let s = try Setup("quorum")
        defer { s.remove() }
        let witnessB = try Self.witness(Self.seedB, "witness.example/b", logs: [s.key], state: s.folder + "/b-state")
        let transport = DirectWitnessTransport(witnesses: ["https://a.example": s.witness, "https://b.example": witnessB])
        let endpoints = [WitnessEndpoint(url: "https://a.example", key: s.witness.key), WitnessEndpoint(url: "https://b.example", key: witnessB.key)]
        let policy = try WitnessPolicy(witnesses: [s.witness.key, witnessB.key], quorum: 2)
        try s.grow("alice")
        let first = try s.ledger.witnessCheckpoint(by: endpoints, transport: transport)
        #expect(first.refusals.isEmpty && first.cosignedBy == ["witness.example/a", "witness.example/b"])
        try policy.check(first.note)
        // Recorded: the checkpoint, the exports and proofs carry the cosignatures from now on.
        #expect(try s.ledger.signedCheckpoint().note == first.note)
        let alice = try s.ledger.exportSubject("alice")
        #expect(throws: Never.self) { try ExportVerifier.verify(alice.bytes, pinnedKey: s.key, witnesses: policy) }
        #expect(throws: Never.self) { try ExportVerifier.verify(try s.ledger.exportAll().bytes, pinnedKey: s.key, witnesses: policy) }
        #expect(throws: Never.self) { try StateProofVerifier.verify(try s.ledger.proveState(for: "alice").bytes, pinnedKey: s.key, witnesses: policy) }
        #expect(try verifyFolderOK(s.folder + "/ledger"))

        // The log grows; the witnesses get a consistency proof from the size they cosigned.
        let oldNote = first.note
        let fork = s.folder + "/fork"
        copyFolder(s.folder + "/ledger", to: fork)
        try s.grow("bob")
        let second = try s.ledger.witnessCheckpoint(by: endpoints, transport: transport)
        #expect(second.refusals.isEmpty && second.cosignedBy.count == 2)
        let consistency = try s.ledger.proveConsistency(from: oldNote)
        #expect(throws: Never.self) { try ExportVerifier.verifyConsistency(consistency, pinnedKey: s.key, witnesses: policy) }

        // A fork of the same ledger (its key, another history) is refused by both, as evidence.
        let forked = try Ledger.open(store: FileLedgerStore(directory: fork), keys: FileKeyStore(path: fork + "/secret.key"))
        try forked.execute(LedgerCommand(subjectID: "mallory", request: .give(feature: "timeline", consents: ["required"])))
        let refused = try forked.witnessCheckpoint(by: endpoints, transport: transport)
        #expect(refused.cosignedBy.isEmpty && refused.refusals.count == 2 && refused.refusals.allSatisfy(\.isEvidence))
        // Its exports carry no cosignature, so an auditor asking for the quorum refuses them.
        let forkedExport = try forked.exportSubject("alice")
        #expect(throws: ExportVerificationError.self) { try ExportVerifier.verify(forkedExport.bytes, pinnedKey: s.key, witnesses: policy) }
        // Without a quorum asked for, the fork's export is still signed by the ledger's key: what
        // witnesses add is that the auditor can tell.
        #expect(throws: Never.self) { try ExportVerifier.verify(forkedExport.bytes, pinnedKey: s.key) }
        // And a fork that grows further is refused the same way.
        try forked.execute(LedgerCommand(subjectID: "mallory", request: .give(feature: "timeline", consents: ["optional-a"])))
        try forked.execute(LedgerCommand(subjectID: "trudy", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try forked.witnessCheckpoint(by: endpoints, transport: transport).refusals.allSatisfy(\.isEvidence))
    }

    /// The ledger learns a witness's size from its 409 when its own records do not show it.
    @Test func theLedgerLearnsTheWitnessSizeFromA409() throws {
        let s = try Setup("learn")
        defer { s.remove() }
        let transport = DirectWitnessTransport(witnesses: ["https://a.example": s.witness])
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)  // not recorded by the ledger
        try s.grow("bob")
        let result = try s.ledger.witnessCheckpoint(by: [WitnessEndpoint(url: "https://a.example", key: s.witness.key)], transport: transport)
        #expect(result.refusals.isEmpty && result.cosignedBy == ["witness.example/a"])
    }

    /// Another submitter moves the witness on between two requests: the ledger tries again from
    /// the new size; that is no evidence against anyone.
    @Test func aWitnessMovedOnByAnotherSubmitterIsAskedAgain() throws {
        let s = try Setup("moved-on")
        defer { s.remove() }
        try s.grow("alice")
        #expect(s.witness.addCheckpoint(try s.request(old: 0)).status == 200)
        let first = try s.ledger.signedCheckpoint().checkpoint.size
        try s.grow("bob")
        let middle = try s.ledger.signedCheckpoint().checkpoint.size
        let signer = try FileKeyStore(path: s.folder + "/ledger/secret.key").unlockSigner(passphrase: nil)
        let middleNote = SignedNote.sign(try s.ledger.checkpoint(size: middle).text, key: s.key, signer: signer)
        let middleProof = try s.ledger.reading { view in try MerkleTree.consistencyProof(old: first, new: middle, hasher: OpenSSLSHA256(), read: view.treeHashes) }
        try s.grow("carol")
        final class Interloper: WitnessTransport, @unchecked Sendable {
            let witness: Witness, body: [UInt8]
            var calls = 0
            init(_ witness: Witness, _ body: [UInt8]) { (self.witness, self.body) = (witness, body) }
            func addCheckpoint(_ request: [UInt8], to url: String) throws -> WitnessResponse {
                calls += 1
                // Before the ledger's second request, another submitter brings the witness to the middle size.
                if calls == 2 { _ = witness.addCheckpoint(body) }
                return witness.addCheckpoint(request)
            }
        }
        let transport = Interloper(s.witness, AddCheckpointRequest(oldSize: first, proof: middleProof, note: middleNote).body)
        let result = try s.ledger.witnessCheckpoint(by: [WitnessEndpoint(url: "https://a.example", key: s.witness.key)], transport: transport)
        #expect(result.refusals.isEmpty && result.cosignedBy == ["witness.example/a"], "\(result.refusals)")
        #expect(transport.calls == 3)
    }

    @Test func anUnreachableWitnessIsAnOutageNotEvidence() throws {
        let s = try Setup("outage")
        defer { s.remove() }
        let result = try s.ledger.witnessCheckpoint(by: [WitnessEndpoint(url: "https://down.example", key: s.witness.key)], transport: DirectWitnessTransport(witnesses: [:]))
        #expect(result.cosignedBy.isEmpty && result.refusals.count == 1 && !result.refusals[0].isEvidence)
        #expect(try s.ledger.issuedCheckpoints().allSatisfy { try Cosignature.verifiedCosigners(of: $0.note, keys: [s.witness.key]).isEmpty })
    }

    /// A witness whose answer carries a cosignature by another key (or none that verifies):
    /// nothing is added.
    @Test func aCosignatureThatDoesNotVerifyIsDropped() throws {
        let s = try Setup("wrong-key")
        defer { s.remove() }
        try s.grow("alice")
        let impostor = try Self.witness(Self.seedB, "witness.example/a", logs: [s.key], state: s.folder + "/b")
        let result = try s.ledger.witnessCheckpoint(by: [WitnessEndpoint(url: "https://a.example", key: s.witness.key)], transport: DirectWitnessTransport(witnesses: ["https://a.example": impostor]))
        #expect(result.cosignedBy.isEmpty && result.refusals.count == 1)
        #expect(try s.ledger.signedCheckpoint().note.components(separatedBy: "\n— ").count == 2)
    }

    /// The newest recorded checkpoint is read from the end of `checkpoints.jsonl`, whatever the
    /// length of its line, and a torn last line is not it.
    @Test(arguments: [100, 70_000, 200_000])
    func theNewestRecordedCheckpointIsReadFromTheEnd(noteBytes: Int) throws {
        let s = try Setup("newest-\(noteBytes)")
        defer { s.remove() }
        let store = FileLedgerStore(directory: s.folder + "/ledger")
        let long = String(repeating: "n", count: noteBytes) + "\n"
        try store.write { tx in
            try tx.recordCheckpoint(IssuedCheckpoint(size: 1, note: "first\n"))
            try tx.recordCheckpoint(IssuedCheckpoint(size: 2, note: long))
        }
        #expect(try store.read { try $0.newestCheckpoint() } == IssuedCheckpoint(size: 2, note: long))
        // A crash mid-append leaves a partial line: not a record.
        let path = s.folder + "/ledger/checkpoints.jsonl"
        writeBytes(readBytes(path) + Array(#"{"note":"torn"#.utf8), to: path)
        #expect(try store.read { try $0.newestCheckpoint() } == IssuedCheckpoint(size: 2, note: long))
    }

    @Test(arguments: [(0, "between 1"), (3, "between 1")])
    func aQuorumOutsideTheWitnessesIsRefused(quorum: Int, reason: String) throws {
        let a = try CosignerKey(name: "a", publicKey: SodiumSigner(seed: Self.seedA)!.publicKey)
        let b = try CosignerKey(name: "b", publicKey: SodiumSigner(seed: Self.seedB)!.publicKey)
        #expect(throws: NoteError.self) { try WitnessPolicy(witnesses: [a, b], quorum: quorum) }
        #expect(throws: NoteError.self) { try WitnessPolicy(witnesses: [a, a], quorum: 1) }
    }

    /// A line naming a trusted witness whose signature does not verify is refused, not skipped.
    @Test func aForgedCosignatureByATrustedWitnessIsRefused() throws {
        let s = try Setup("forged-cosig")
        defer { s.remove() }
        try s.grow("alice")
        let answer = s.witness.addCheckpoint(try s.request(old: 0))
        let (_, note) = try s.ledger.signedCheckpoint()
        var line = Array(String(decoding: answer.body, as: UTF8.self))
        line[line.count - 6] = line[line.count - 6] == "A" ? "B" : "A"
        let forged = note + String(line)
        #expect(throws: NoteError.self) { try WitnessPolicy(witnesses: [s.witness.key], quorum: 1).check(forged) }
    }
}

func verifyFolderOK(_ path: String) throws -> Bool {
    if case .ok = verifyFolder(path) { return true }
    return false
}
