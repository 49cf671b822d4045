import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Exports, checkpoints and consistency proofs, and every tampering an auditor must catch.
@Suite struct AuditExportTests {
    /// A ledger with the seed scenario and two more subjects.
    static func ledger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "consentledger.example/\(label)", keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required", "optional-b"])))
        try ledger.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "medication-management", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "medication-management", consents: ["required"])))
        return (ledger, path)
    }

    func verify(_ bundle: [UInt8], _ key: NoteVerifierKey) -> ExportVerificationError? {
        do {
            _ = try ExportVerifier.verify(bundle, pinnedKey: key)
            return nil
        } catch {
            return error
        }
    }

    /// The bundle as JSON with one change applied.
    func changed(_ bundle: AuditExport, _ change: (inout [String: JSONValue]) -> Void) -> [UInt8] {
        var object = bundle.json.objectValue!
        change(&object)
        return CanonicalJSON.serialize(.object(object))
    }

    @Test func subjectExportVerifiesAndRevealsNoOtherSubject() throws {
        let (ledger, path) = try Self.ledger("export")
        defer { removeFolder(path) }
        let bundle = try ledger.exportSubject("alice")
        let report = try ExportVerifier.verify(bundle.bytes, pinnedKey: try ledger.verifierKey)
        #expect(report.events == 8 && report.subjectID == "alice" && report.checkpoint.size == 12)
        let text = String(decoding: bundle.bytes, as: UTF8.self)
        for other in ["bob", "carol"] {
            let ref = try #require(try ledger.subjectRef(for: other))
            #expect(!text.contains(ref.value), "\(other)'s pseudonym must not appear")
            #expect(!text.contains("\"\(other)\""))
        }
        #expect(bundle.state == ListingJSON.encode(try ledger.report(for: "alice").listing))
    }

    /// Where no subject map can prove a bundle complete (a ledger without streams, a log no head
    /// covers), a statement signed by the key does; both forms verify, and a left-out event is
    /// caught by each.
    @Test func theSignedStatementFormStillProvesABundleComplete() throws {
        let (ledger, path) = try Self.ledger("statement-form")
        defer { removeFolder(path) }
        let key = try ledger.verifierKey
        let byStatement = try ledger.exportSubjectWithStatement("alice")
        let byStreams = try ledger.exportSubject("alice")
        #expect(byStatement.statement != nil && byStatement.streamProof == nil)
        #expect(byStreams.statement == nil && byStreams.streamProof != nil)
        #expect(byStatement.events == byStreams.events && byStatement.state == byStreams.state)
        #expect(verify(byStatement.bytes, key) == nil && verify(byStreams.bytes, key) == nil)
        for bundle in [byStatement, byStreams] {
            let dropped = changed(bundle) { o in o["events"] = .array(Array(o["events"]!.arrayValue!.dropLast())) }
            let error = verify(dropped, key)
            #expect(error?.problem.contains(bundle.statement != nil ? "the signed export statement lists events" : "the subject map says the newest event of the subject") == true, "\(String(describing: error))")
        }
        // Both at once is not a bundle.
        var both = byStreams.json.objectValue!
        both["statement"] = .string(byStatement.statement!)
        #expect(throws: ExportVerificationError.self) { try AuditExport(bytes: CanonicalJSON.serialize(.object(both))) }
    }

    @Test func everyTamperingIsCaught() throws {
        let (ledger, path) = try Self.ledger("tamper-export")
        defer { removeFolder(path) }
        let key = try ledger.verifierKey
        let bundle = try ledger.exportSubject("alice")
        #expect(verify(bundle.bytes, key) == nil)

        // A flipped byte in an event.
        var flipped = bundle.events
        var line = Array(flipped[2].line.utf8)
        line[line.count - 20] = line[line.count - 20] == 0x30 ? 0x31 : 0x30
        flipped[2] = ExportedEvent(seq: flipped[2].seq, line: String(decoding: line, as: UTF8.self), proof: flipped[2].proof)
        let e1 = verify(changed(bundle) { $0["events"] = AuditExport(scope: .subject, ledger: bundle.ledger, verifierKey: bundle.verifierKey, checkpoint: bundle.checkpoint, catalog: bundle.catalog, genesis: bundle.genesis, subject: bundle.subject, events: flipped, state: bundle.state).json["events"] }, key)
        #expect(e1?.seq == UInt64(bundle.events[2].seq) && e1?.problem.contains("signature") == true, "\(String(describing: e1))")

        // A dropped event: the replayed state no longer matches (or a command is cut).
        let dropped = verify(changed(bundle) { $0["events"] = .array(Array($0["events"]!.arrayValue!.dropLast())) }, key)
        #expect(dropped != nil, "dropping the last event must be caught")
        let droppedMiddle = verify(changed(bundle) { var a = $0["events"]!.arrayValue!; a.remove(at: 3); $0["events"] = .array(a) }, key)
        #expect(droppedMiddle != nil)

        // A swapped pair.
        let swapped = verify(changed(bundle) { var a = $0["events"]!.arrayValue!; a.swapAt(1, 2); $0["events"] = .array(a) }, key)
        #expect(swapped?.problem.contains("order") == true, "\(String(describing: swapped))")

        // A proof for the wrong checkpoint: an older checkpoint with today's proofs.
        let (_, note) = try ledger.signedCheckpoint()
        try ledger.execute(LedgerCommand(subjectID: "dave", request: .give(feature: "timeline", consents: ["required"])))
        let newer = try ledger.exportSubject("alice")
        let wrongCheckpoint = verify(changed(newer) { $0["checkpoint"] = .string(note) }, key)
        #expect(wrongCheckpoint?.problem.contains("inclusion proof") == true, "\(String(describing: wrongCheckpoint))")

        // A checkpoint signed by another key (with that key embedded, and with ours embedded).
        let impostor = SodiumSigner.generate()
        let impostorKey = try NoteVerifierKey(name: key.name, publicKey: impostor.publicKey)
        let (checkpoint, _) = try ledger.signedCheckpoint()
        let forgedNote = SignedNote.sign(checkpoint.text, key: impostorKey, signer: impostor)
        let otherSigner = verify(changed(newer) { $0["checkpoint"] = .string(forgedNote) }, key)
        #expect(otherSigner?.problem.contains("checkpoint") == true, "\(String(describing: otherSigner))")

        // A bundle whose embedded key differs from the pinned one.
        let embedded = verify(changed(newer) { $0["verifierKey"] = .string(impostorKey.text); $0["checkpoint"] = .string(forgedNote) }, key)
        #expect(embedded?.problem.contains("differs from the pinned key") == true, "\(String(describing: embedded))")

        // A state that is not the replay of the events.
        let state = verify(changed(newer) { $0["state"] = .object(["features": .array([])]) }, key)
        #expect(state?.problem.contains("state differs from the replay") == true, "\(String(describing: state))")
    }

    @Test func wholeLedgerExportVerifiesAndCatchesAMissingEvent() throws {
        let (ledger, path) = try Self.ledger("export-all")
        defer { removeFolder(path) }
        let bundle = try ledger.exportAll()
        #expect(try ExportVerifier.verify(bundle.bytes, pinnedKey: try ledger.verifierKey).events == 12)
        let missing = verify(changed(bundle) { var a = $0["events"]!.arrayValue!; a.remove(at: 5); $0["events"] = .array(a) }, try ledger.verifierKey)
        #expect(missing != nil)
    }

    /// A whole-ledger bundle is read and checked a batch of entries at a time; the batch size
    /// changes nothing: every tampering is reported with the same seq and reason at every
    /// size, and the pages given back are only ever below what is still to be read.
    @Test(arguments: [1, 2, 5, 11, 12, 13, 4096])
    func wholeLedgerBundlesVerifyTheSameInBatchesOfAnySize(batchSize: Int) throws {
        let (ledger, path) = try Self.ledger("export-batches-\(batchSize)")
        defer { removeFolder(path) }
        let key = try ledger.verifierKey
        let bundle = try ledger.exportAll()
        func outcome(_ bytes: [UInt8], batch: Int) -> String {
            var released: [Int] = []
            let result = bytes.withUnsafeBufferPointer { buffer -> String in
                do throws(ExportVerificationError) {
                    return "ok \(try ExportVerifier.verify(buffer, pinnedKey: key, release: { released.append($0) }, batchSize: batch).events)"
                } catch {
                    return "seq \(error.seq.map(String.init) ?? "-"): \(error.problem)"
                }
            }
            // Each pass gives back from the front to the end, never past it.
            #expect(released.allSatisfy { $0 <= bytes.count })
            return result
        }
        let events = bundle.json["events"]!.arrayValue!
        var cases: [[UInt8]] = [bundle.bytes]
        for i in [0, 4, 9] {
            var dropped = events
            dropped.remove(at: i)
            cases.append(changed(bundle) { $0["events"] = .array(dropped) })
            var swapped = events
            swapped.swapAt(i, i + 1)
            cases.append(changed(bundle) { $0["events"] = .array(swapped) })
            var flipped = events
            var entry = flipped[i].objectValue!
            entry["line"] = .string(entry["line"]!.stringValue!.replacingOccurrences(of: "\"seq\":", with: "\"seq\": "))
            flipped[i] = .object(entry)
            cases.append(changed(bundle) { $0["events"] = .array(flipped) })
        }
        // Two faults: the first in log order is reported, whatever the batches (a bad
        // signature at seq 3, a wrong seq at seq 7).
        var two = events
        var third = two[2].objectValue!
        third["line"] = .string(third["line"]!.stringValue!.replacingOccurrences(of: "\"sig\":\"", with: "\"sig\":\"0").replacingOccurrences(of: "0\"}", with: "\"}"))
        two[2] = .object(third)
        var seventh = two[6].objectValue!
        seventh["seq"] = .int(8)
        two[6] = .object(seventh)
        let twoFaults = changed(bundle) { $0["events"] = .array(two) }
        #expect(outcome(twoFaults, batch: batchSize).hasPrefix("seq 3: "))
        cases.append(twoFaults)
        // An entry without a line is a malformed bundle (step 0), before the checkpoint (step 1).
        var lineless = events
        lineless[4] = .object(lineless[4].objectValue!.filter { $0.key != "line" })
        let malformed = changed(bundle) { $0["events"] = .array(lineless); $0["checkpoint"] = .string("garbled") }
        #expect(outcome(malformed, batch: batchSize) == "seq -: an event entry lacks 'seq' or 'line'")
        cases.append(malformed)
        for c in cases {
            #expect(outcome(c, batch: batchSize) == outcome(c, batch: 4096))
        }
        #expect(outcome(bundle.bytes, batch: batchSize) == "ok 12")
    }

    /// The finding: a 60 MB bundle took 881 MB, read whole into a tree. Now the entries of a
    /// whole-ledger bundle are read as the check goes: the reader is told, batch after batch,
    /// that everything below a point further on will not be read again, on the pass that checks
    /// them as JSON and on the pass that verifies them, up to the last entry.
    @Test func aWholeLedgerBundleIsGivenBackAsItIsRead() throws {
        let (ledger, path) = try Self.ledger("export-release")
        defer { removeFolder(path) }
        let bytes = try ledger.exportAll().bytes
        var released: [Int] = []
        let report = try bytes.withUnsafeBufferPointer { buffer in
            try ExportVerifier.verify(buffer, pinnedKey: try ledger.verifierKey, release: { released.append($0) }, batchSize: 1)
        }
        #expect(report.events == 12)
        // With batches of one entry, each entry's start is given as the point below which
        // nothing is read again, once the entry before it is done.
        let offsets = try #require(try bytes.withUnsafeBufferPointer { try CanonicalJSON.parseObject($0, lazy: "events", canonical: false).offsets })
        #expect(offsets.count == 11)
        #expect(Set(offsets.dropFirst()).isSubset(of: Set(released)))
        #expect(released.allSatisfy { $0 <= bytes.count })
    }

    /// A bundle is ordinary JSON to its reader: whitespace and another member order are
    /// allowed (Spec/export-format.md, The bundle), also around the entries that are read
    /// lazily.
    @Test func aPrettyPrintedWholeLedgerBundleVerifies() throws {
        let (ledger, path) = try Self.ledger("export-pretty")
        defer { removeFolder(path) }
        let bundle = try ledger.exportAll().bytes
        let object = try JSONSerialization.jsonObject(with: Data(bundle))
        let pretty = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .withoutEscapingSlashes])
        #expect(Array(pretty) != bundle)
        #expect(try ExportVerifier.verify(Array(pretty), pinnedKey: try ledger.verifierKey).events == 12)
    }

    @Test func consistencyProofsShowTheLogOnlyGrewAndCatchARewrite() throws {
        let (ledger, path) = try Self.ledger("consistency")
        defer { removeFolder(path) }
        let (_, old) = try ledger.signedCheckpoint()
        try ledger.execute(LedgerCommand(subjectID: "erin", request: .give(feature: "timeline", consents: ["required"])))
        let proof = try ledger.proveConsistency(from: old)
        let (o, n) = try ExportVerifier.verifyConsistency(proof, pinnedKey: try ledger.verifierKey)
        #expect(o.size == 12 && n.size == 13)
        let bytes = CanonicalJSON.serialize(proof.json)
        #expect(try ConsistencyProof(bytes: bytes) == proof)
        // A proof with a changed hash fails.
        var bad = proof.proof
        bad[0] = Digest(bytes: bad[0].bytes.map { $0 ^ 1 })!
        #expect(throws: ExportVerificationError.self) {
            try ExportVerifier.verifyConsistency(ConsistencyProof(oldNote: proof.oldNote, newNote: proof.newNote, proof: bad), pinnedKey: try ledger.verifierKey)
        }
        // An old checkpoint whose root is not this log's prefix (a rewritten history) is refused.
        let signer = try ledger.keys!.unlockSigner(passphrase: nil)
        let forged = SignedNote.sign(Checkpoint(origin: ledger.genesis.ledgerName, size: 5, root: Digest.zero).text, key: try ledger.verifierKey, signer: signer)
        #expect(throws: ConsentError.self) { try ledger.proveConsistency(from: forged) }
    }

    @Test func derivedDataIsRebuiltFromTheLogAndCheckedByVerify() throws {
        let (ledger, path) = try Self.ledger("derived")
        defer { removeFolder(path) }
        let tree = readBytes(path + "/tree.hashes"), index = readBytes(path + "/lines.idx")
        let (before, _) = try ledger.signedCheckpoint()
        // Deleted (as by an older version or by hand): computed again by reads, which write
        // nothing, and made durable, identical, by the next write.
        removeFolder(path + "/tree.hashes", path + "/lines.idx")
        let (after, _) = try ledger.signedCheckpoint()
        #expect(after == before)
        #expect(!FileManager.default.fileExists(atPath: path + "/tree.hashes") && !FileManager.default.fileExists(atPath: path + "/lines.idx"))
        try ledger.storeDerivedData()
        #expect(readBytes(path + "/tree.hashes") == tree && readBytes(path + "/lines.idx") == index)
        // Corrupted: verify says so.
        var bad = tree
        bad[40] ^= 1
        writeBytes(bad, to: path + "/tree.hashes")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("a corrupted tree hash must fail verify")
            return
        }
        #expect(failure.problem.contains("tree hash"))
    }

    /// Derived entries after the recorded head are recomputed: a crash that cut the newest
    /// commit's head line leaves them untrusted.
    @Test func derivedEntriesAfterTheHeadAreRecomputed() throws {
        let (ledger, path) = try Self.ledger("after-head")
        defer { removeFolder(path) }
        let tree = readBytes(path + "/tree.hashes")
        try ledger.execute(LedgerCommand(subjectID: "zed", request: .give(feature: "timeline", consents: ["required"])))
        let good = readBytes(path + "/tree.hashes")
        // Simulate: new derived bytes garbled, the commit's head line cut off.
        var garbled = good
        for i in tree.count..<garbled.count { garbled[i] = 0xEE }
        writeBytes(garbled, to: path + "/tree.hashes")
        writeBytes(Array(lines(of: readLog(path)).dropLast().joined()), to: path + "/ledger.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let (checkpoint, _) = try reopened.signedCheckpoint()
        #expect(checkpoint.size == 13, "the command past the head is read, its tree hashes computed again")
        #expect(readBytes(path + "/tree.hashes") == garbled, "a read writes nothing")
        try reopened.execute(LedgerCommand(subjectID: "zoe", request: .give(feature: "timeline", consents: ["required"])))
        #expect(readBytes(path + "/tree.hashes").prefix(good.count) == good[...], "the next write replaces the untrusted hashes")
        #expect(try reopened.verify().events == 14)
    }
}
