import ConsentDomain
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// Derived and side files edited by someone without the key must give an integrity error, never
/// a trap, a wrong answer or a passing `verify`.
@Suite struct DerivedDataRegressionTests {
    static func ledger(_ label: String) throws -> (String, Ledger) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/\(label)", keyProtection: .insecurePlaintext, clock: SteppingClock().clock)
        return (path, ledger)
    }

    /// An offset near 2^64 in `lines.idx` made `status` and `give` trap on arithmetic overflow.
    @Test(arguments: [UInt64.max, UInt64.max - 10, UInt64(1) << 63])
    func aHugeOffsetInTheLineIndexIsAnIntegrityErrorNotATrap(_ offset: UInt64) throws {
        let (path, ledger) = try Self.ledger("huge-offset")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        var index = readBytes(path + "/lines.idx")
        // Record 2 (p1's second event) and record 1: offset is the first 8 bytes, little-endian.
        for record in [2, 1] {
            for i in 0..<8 { index[record * 32 + i] = UInt8(truncatingIfNeeded: offset >> (8 * UInt64(i))) }
            writeBytes(index, to: path + "/lines.idx")
            let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
            #expect(throws: ConsentError.self) { try reopened.report(for: "p1") }
            #expect(throws: ConsentError.self) { try reopened.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-b"]))) }
            if case .failed(let error) = verifyFolder(path) {
                guard case .integrity = error else { Issue.record("not an integrity failure: \(error)"); continue }
            } else {
                Issue.record("verify passed with a tampered line index")
            }
        }
    }

    /// Reads repaired derived files that a crash had left behind, so a read on a full disk or a
    /// read-only mount failed. Now a read computes what is missing in memory and writes nothing;
    /// the next write makes it durable.
    @Test(arguments: ["lines.idx", "tree.hashes", "subjects.map", "all"])
    func readsWriteNothingWhenDerivedDataIsBehind(_ cut: String) throws {
        let (path, ledger) = try Self.ledger("behind")
        defer { removeFolder(path) }
        try ledger.execute(Array(seedScenario))
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        let truth = try ledger.report(for: "alice")
        let proof = try ledger.proveState(for: "p1")
        // As a crash before the last commit's derived data was synced leaves them: behind.
        let sizes = ["lines.idx": 32 * 3, "tree.hashes": 32 * 6, "subjects.map": 88 * 5]
        for (name, drop) in sizes where cut == name || cut == "all" {
            let bytes = readBytes(path + "/" + name)
            writeBytes(Array(bytes.dropLast(drop)), to: path + "/" + name)
        }
        let files = ["ledger.jsonl", "lines.idx", "tree.hashes", "subjects.map", "subjects.jsonl", "checkpoints.jsonl"]
        let before = files.map { readBytes(path + "/" + $0) }
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.report(for: "alice") == truth)
        #expect(try reopened.proveState(for: "p1").json == proof.json)
        #expect(try reopened.verify().events == 10)
        _ = try reopened.auditReport(ReportScope())
        _ = try reopened.inclusionProof(seq: 3, size: 10)
        _ = try reopened.catalogHistory()
        #expect(files.map { readBytes(path + "/" + $0) } == before, "no read wrote anything")
        // The next write makes the missing entries durable with its own.
        try reopened.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try reopened.verify().events == 11)
        #expect(readBytes(path + "/lines.idx").count == 11 * 32)
    }

    /// Derived data past what the next write puts there (bytes someone appended, records of
    /// entries past the log's end) is cut by that write: each file ends where a copy of the
    /// ledger without them ends after the same write. The write knows the files' sizes from its
    /// own reading of them in the same transaction; the extra bytes are not whole records.
    @Test(arguments: ["lines.idx", "tree.hashes"])
    func aWriteCutsDerivedDataPastWhatItWrites(_ name: String) throws {
        let (path, ledger) = try Self.ledger("ahead")
        let twin = path + "-twin"
        defer { removeFolder(path, twin) }
        try ledger.execute(Array(seedScenario))
        copyFolder(path, to: twin)
        writeBytes(readBytes(path + "/" + name) + [UInt8](repeating: 0xA5, count: 32 * 40 + 8), to: path + "/" + name)
        let command = LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "required"))
        for folder in [path, twin] {
            let writer = try Ledger.open(store: FileLedgerStore(directory: folder), clock: SteppingClock(start: "2026-06-01T09:00:00.000Z").clock)
            try writer.execute(command)
        }
        for file in ["lines.idx", "tree.hashes", "subjects.map"] {
            #expect(readBytes(path + "/" + file).count == readBytes(twin + "/" + file).count, "\(file) after extra bytes in \(name)")
        }
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == Ledger.open(store: FileLedgerStore(directory: twin)).verify().events)
    }

    /// Cutting the last command and rewriting `head` passed `verify`, although
    /// `checkpoints.jsonl` held a signed checkpoint of the longer log.
    @Test func aCutLogFailsVerifyAgainstTheRecordedCheckpoints() throws {
        let (path, ledger) = try Self.ledger("cut")
        let before = path + "-before"
        defer { removeFolder(path, before) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        _ = try ledger.signedCheckpoint()
        copyFolder(path, to: before)
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .revoke(feature: "timeline", consent: "required")))
        _ = try ledger.signedCheckpoint()
        #expect(verifyFolder(path) == .ok(events: 3))
        // The cut: the log (with its head lines) and derived files as they were one command
        // ago; the recorded checkpoints stay.
        for name in ["ledger.jsonl", "lines.idx", "tree.hashes"] {
            writeBytes(readBytes(before + "/" + name), to: path + "/" + name)
        }
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed a log cut below a signed checkpoint")
            return
        }
        #expect(failure.problem.contains("signed events were removed"), "\(failure.problem)")
        #expect(failure.kind == .head, "a caller tells a cut log from a damaged cache by the kind")
        #expect(failure.problem.contains("checkpoints.jsonl"), "names where the checkpoint is recorded")
    }

    /// A write cuts a torn tail off before it appends; with the head rolled back and the last
    /// commit cut mid-line, that would have dropped events a recorded checkpoint covers. The
    /// write refuses instead, and changes nothing.
    @Test func aTornTailCutNeverDropsSignedEvents() throws {
        let (path, ledger) = try Self.ledger("cut-signed")
        let before = path + "-before"
        defer { removeFolder(path, before) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        copyFolder(path, to: before)
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-a", "optional-b"])))
        _ = try ledger.signedCheckpoint()
        // Take off the last commit's head line and cut inside its last event: its events look
        // like a commit a crash cut short.
        let log = Array(lines(of: readLog(path)).dropLast().joined())
        writeBytes(Array(log.dropLast(40)), to: path + "/ledger.jsonl")
        let files = ["ledger.jsonl", "subjects.jsonl", "checkpoints.jsonl"].map { readBytes(path + "/" + $0) }
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect {
            try reopened.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.kind == .head && failure.problem.contains("checkpoints.jsonl")
        }
        #expect(["ledger.jsonl", "subjects.jsonl", "checkpoints.jsonl"].map { readBytes(path + "/" + $0) } == files, "nothing changed")
        guard case .failed(.integrity) = verifyFolder(path) else { Issue.record("verify passed a log cut below a signed checkpoint"); return }
    }

    /// A recorded checkpoint whose root is not the log's (the log was rewritten after signing)
    /// fails verify, as does a recorded note whose signature does not verify.
    @Test func aRecordedCheckpointThatDisagreesWithTheLogFailsVerify() throws {
        let (path, ledger) = try Self.ledger("rewritten")
        let other = path + "-other"
        defer { removeFolder(path, other) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        _ = try ledger.signedCheckpoint()
        let recorded = readBytes(path + "/checkpoints.jsonl")
        // A note of the same size signed by the same key over another log cannot be made
        // without the key; flipping a signature byte stands for a forged one.
        var forged = recorded
        let at = forged.lastIndex(of: UInt8(ascii: "\""))! - 8
        forged[at] = forged[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        writeBytes(forged, to: path + "/checkpoints.jsonl")
        guard case .failed(.integrity) = verifyFolder(path) else {
            Issue.record("verify passed a recorded checkpoint whose signature is broken")
            return
        }
        writeBytes(recorded, to: path + "/checkpoints.jsonl")
        #expect(verifyFolder(path) == .ok(events: 2))
    }
}

/// The signed head: every commit ends with one, and nothing is signed from `tree.hashes` that
/// the head's root does not vouch for.
@Suite struct SignedHeadTests {
    static func trueRoot(_ path: String, size: Int64) throws -> Digest {
        let lines = eventLines(of: readLog(path)).prefix(Int(size)).map { Array($0.dropLast()) }
        var frontier = MerkleFrontier()
        for line in lines { frontier.append(MerkleTree.leafHash(line, hasher: OpenSSLSHA256()), hasher: OpenSSLSHA256()) }
        return frontier.root(hasher: OpenSSLSHA256())
    }

    @Test func everyCommitEndsWithASignedHeadOfTheWholeLog() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("head")
        defer { removeFolder(path) }
        for (i, command) in seedScenario.enumerated() {
            try ledger.execute(command)
            let head = try #require(newestHead(path))
            try head.verify(key: try ledger.verifierKey, verifier: Sodium())
            let all = lines(of: readLog(path))
            let size = Int64(all.filter { !isHeadLine($0) }.count)
            #expect(head.checkpoint.size == size, "after command \(i)")
            #expect(all.last.map(isHeadLine) == true && all.filter(isHeadLine).count == i + 2, "one head line per commit, the genesis's included, in the same write")
            #expect(head.checkpoint.root == (try Self.trueRoot(path, size: size)))
        }
        // A publication goes through the same commit path.
        _ = try ledger.publish(try CatalogCodec.decode(readBytes(packageRoot + "/Samples/catalog-v2.json")))
        let head = try #require(newestHead(path))
        #expect(head.checkpoint.root == (try Self.trueRoot(path, size: head.checkpoint.size)))
    }

    /// A corrupted `tree.hashes` made the ledger sign a wrong root (equivocation).
    @Test(arguments: [0, 1, 2])
    func aCorruptedTreeHashIsNeverSigned(_ which: Int) throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("tree")
        defer { removeFolder(path) }
        for id in ["p1", "p2", "p3"] {
            try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        }
        let size: Int64 = 7
        var tree = readBytes(path + "/tree.hashes")
        // 0: the last stored hash (a frontier node); 1: the first leaf; 2: every hash.
        let positions = which == 0 ? [tree.count - 32] : which == 1 ? [0] : Array(stride(from: 0, to: tree.count, by: 32))
        for p in positions { tree[p] ^= 0xFF }
        writeBytes(tree, to: path + "/tree.hashes")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let truth = try Self.trueRoot(path, size: size)
        // A checkpoint is the true root or an integrity error, never a root from the bad hashes.
        do {
            let (checkpoint, _) = try reopened.signedCheckpoint()
            #expect(checkpoint.root == truth)
        } catch let error as ConsentError {
            guard case .integrity = error else { Issue.record("\(error)"); return }
        }
        // A write signs a new head only from a frontier the old head vouches for.
        do {
            try reopened.execute(LedgerCommand(subjectID: "p4", request: .give(feature: "timeline", consents: ["required"])))
            let head = try #require(newestHead(path))
            #expect(head.checkpoint.root == (try Self.trueRoot(path, size: size + 1)), "a wrong root was signed")
        } catch let error as ConsentError {
            guard case .integrity(let failure) = error else { Issue.record("\(error)"); return }
            #expect(failure.problem.contains("tree.hashes"), "names the repair: \(failure.problem)")
        }
        // An export never hands out a proof that does not lead to the signed root.
        do {
            let bundle = try reopened.exportSubject("p1")
            _ = try ExportVerifier.verify(bundle.bytes, pinnedKey: try reopened.verifierKey)
        } catch let error as ConsentError {
            guard case .integrity = error else { Issue.record("\(error)"); return }
        }
        guard case .failed(.integrity) = verifyFolder(path) else {
            Issue.record("verify passed with a corrupted tree.hashes")
            return
        }
    }

    @Test func aTamperedHeadIsAnIntegrityError() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("badhead")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        // Another root, same signature: the signature no longer verifies.
        rewriteNewestHead(path) { head in
            let lines = head.split(separator: "\n", omittingEmptySubsequences: false)
            return ([lines[0], lines[1], Substring(Base64.encode([UInt8](repeating: 7, count: 32)))] + lines.dropFirst(3)).joined(separator: "\n")
        }
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(throws: ConsentError.self) { try reopened.report(for: "p1") }
        #expect(throws: ConsentError.self) { try reopened.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-a"]))) }
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed with a tampered head")
            return
        }
        #expect(failure.problem.contains("does not verify with the ledger's key"), "\(failure.problem)")
    }

    /// A log of one-command commits keeps a head per commit, whose signatures verify checks on
    /// all cores: of two heads with a bad signature, the first in log order is reported.
    @Test func ofManyEarlierHeadsTheFirstBadOneIsReported() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("many-heads")
        defer { removeFolder(path) }
        for i in 0..<100 {
            try ledger.execute(LedgerCommand(subjectID: "p\(i)", request: .give(feature: "timeline", consents: ["required"])))
        }
        #expect(verifyFolder(path) == .ok(events: 101))
        var all = lines(of: readLog(path))
        let heads = all.indices.filter { isHeadLine(all[$0]) }
        #expect(heads.count == 101)
        func damage(_ line: Int) throws -> UInt64 {
            let head = try SignedHead(logLine: Array(all[line].dropLast()))
            var bytes = Array(head.note.utf8)
            let at = bytes.count - 6
            bytes[at] = bytes[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            all[line] = CanonicalJSON.serialize(.object(["head": .string(String(decoding: bytes, as: UTF8.self))])) + [0x0A]
            return head.seq
        }
        _ = try damage(heads[80])
        let first = try damage(heads[30])
        writeBytes(Array(all.joined()), to: path + "/ledger.jsonl")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed with two bad earlier heads")
            return
        }
        #expect(failure.kind == .head && failure.seq == first, "\(failure)")
        #expect(failure.problem.contains("does not verify with the ledger's key"), "\(failure.problem)")
    }

    /// Every head line is checked by verify, not only the newest: one whose signature or root
    /// is wrong, or that stands where its size does not say, fails it; reads skip them.
    @Test(arguments: ["signature", "place"])
    func anEarlierHeadLineThatIsWrongFailsVerify(_ change: String) throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("earlier-head")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        var all = lines(of: readLog(path))
        let heads = all.indices.filter { isHeadLine(all[$0]) }
        #expect(heads.count == 3)
        let middle = heads[1]
        if change == "signature" {
            let note = try SignedHead(logLine: Array(all[middle].dropLast())).note
            var bytes = Array(note.utf8)
            let at = bytes.count - 6
            bytes[at] = bytes[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            all[middle] = CanonicalJSON.serialize(.object(["head": .string(String(decoding: bytes, as: UTF8.self))])) + [0x0A]
        } else {
            // The head of size 2 moved after the genesis event's own head.
            let moved = all.remove(at: middle)
            all.insert(moved, at: heads[0] + 1)
            // The events' offsets changed with it: the line index is rebuilt.
            removeFolder(path + "/lines.idx")
        }
        writeBytes(Array(all.joined()), to: path + "/ledger.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.report(for: "p1").listing.activeFeatures.map(\.feature.key) == ["timeline"], "reads skip earlier heads")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed with a wrong earlier head line")
            return
        }
        #expect(failure.kind == .head)
        #expect(failure.problem.contains(change == "signature" ? "does not verify with the ledger's key" : "covers 2 entries but follows 1"), "\(failure.problem)")
    }

    /// A ledger whose head is of the older `SEQ HASH` form opens, verifies, and gets a signed
    /// head at its next write.
    @Test func anUnsignedHeadIsReplacedByTheNextWrite() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("oldhead")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        useHeadFileLayout(path)
        let signed = try #require(newestHead(path))
        writeBytes(Array("\(signed.seq) \(signed.chainHash.hex)\n".utf8), to: path + "/head")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.verify().events == 2)
        #expect(try reopened.signedCheckpoint().checkpoint.root == signed.checkpoint.root)
        try reopened.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        let next = try #require(newestHead(path))
        #expect(next.checkpoint.size == 3)
        #expect(next.checkpoint.root == (try Self.trueRoot(path, size: 3)))
    }
}

/// Subject records bind an id to its pseudonym: swapped or removed records fail `verify`, and a
/// bundle cannot be relabelled as another subject.
@Suite struct SubjectBindingTests {
    @Test func swappedSaltsInSubjectsJSONLFailVerify() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("swap")
        defer { removeFolder(path) }
        for id in ["p1", "p2"] {
            try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"])))
        }
        #expect(verifyFolder(path) == .ok(events: 3))
        let original = readBytes(path + "/subjects.jsonl")
        writeBytes(Self.swappingSalts(original), to: path + "/subjects.jsonl")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed with two salts swapped")
            return
        }
        #expect(failure.problem.contains("does not carry the ledger key's signature over its id and salt"), "\(failure.problem)")
        #expect(failure.kind == .subjectRecord)
        // One record removed fails too; a signed record with no events (a failed command's) does not.
        writeBytes(Array(lines(of: original)[1]), to: path + "/subjects.jsonl")
        guard case .failed(.integrity) = verifyFolder(path) else {
            Issue.record("verify passed with a subject record removed")
            return
        }
        let salt = [UInt8](repeating: 7, count: 16)
        let signer = try ledger.keys!.unlockSigner(passphrase: nil)
        let signature = Pseudonym.recordMessage(id: SubjectID("nobody"), salt: salt).withUnsafeBytes { signer.sign($0) }
        writeBytes(original + Array(#"{"id":"nobody","salt":"07070707070707070707070707070707","sig":"\#(signature.hex)"}"#.utf8) + [0x0A], to: path + "/subjects.jsonl")
        #expect(verifyFolder(path) == .ok(events: 3))
    }

    /// subjects.jsonl with the salts of its first two records swapped (signatures kept).
    static func swappingSalts(_ bytes: [UInt8]) -> [UInt8] {
        var records = lines(of: bytes).map { String(decoding: $0, as: UTF8.self) }
        func salt(_ line: String) -> String {
            let start = line.range(of: #""salt":""#)!.upperBound
            return String(line[start..<line.index(start, offsetBy: 32)])
        }
        let (s0, s1) = (salt(records[0]), salt(records[1]))
        records[0] = records[0].replacingOccurrences(of: s0, with: s1)
        records[1] = records[1].replacingOccurrences(of: s1, with: s0)
        return Array(records.joined().utf8)
    }

    /// With two salts swapped, `status` found none of the patient's events and answered "no
    /// consents", and a write filed the patient's choices under another pseudonym: the record is
    /// signed, so a read or a write that uses it refuses it.
    @Test func aReadRefusesASwappedSubjectRecord() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("swap-read")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "medication-management", consents: ["required"])))
        writeBytes(Self.swappingSalts(readBytes(path + "/subjects.jsonl")), to: path + "/subjects.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        for id in ["p1", "p2"] {
            do {
                let report = try reopened.report(for: id)
                Issue.record("\(id): answered from a swapped record: \(report.listing.activeFeatures.map(\.feature.key))")
            } catch ConsentError.integrity(let failure) {
                #expect(failure.problem.contains("subjects.jsonl") && failure.problem.contains("signature"), "\(failure.problem)")
            }
            #expect(throws: ConsentError.self) { try reopened.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["optional-a"]))) }
        }
    }

    /// Moving bytes between the salt and the id kept the pseudonym, and `verify-export`
    /// accepted the bundle for another id ("patient-1042" became "42").
    @Test func aBundleCannotBeRelabelledAsAnotherSubject() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("relabel")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "patient-1042", request: .give(feature: "timeline", consents: ["required"])))
        let bundle = try ledger.exportSubject("patient-1042")
        let key = try ledger.verifierKey
        #expect(try ExportVerifier.verify(bundle.bytes, pinnedKey: key).subjectID == "patient-1042")
        var object = bundle.json.objectValue!
        let subject = object["subject"]!.objectValue!
        let salt = subject["salt"]!.stringValue! + Hex.encode(Array("patient-10".utf8))
        object["subject"] = .object(["id": .string("42"), "ref": subject["ref"]!, "salt": .string(salt)])
        let relabelled = CanonicalJSON.serialize(.object(object))
        #expect(throws: ExportVerificationError.self) { try ExportVerifier.verify(relabelled, pinnedKey: key) }
        do {
            _ = try ExportVerifier.verify(relabelled, pinnedKey: key)
        } catch {
            #expect(error.description.contains("26 bytes, not 16"), "\(error)")
        }
        // The statement (of a bundle in that form) now fixes the salt length it was made with.
        let statement = try ExportStatement(text: SignedNote.open(try ledger.exportSubjectWithStatement("patient-1042").statement!, key: key, verifier: Sodium()))
        #expect(statement.saltLength == 16)
    }
}

/// `init` must never follow a planted symlink, and never delete what it did not create.
@Suite struct InitSymlinkTests {
    static func victim() -> String {
        let path = LedgerPropertyTests.folder("victim")
        mkdir(path, 0o700)
        writeBytes(Array("precious\n".utf8), to: path + "/data.txt")
        return path
    }

    @Test func aStagingLinkInsideAnEmptyTargetIsRefusedAndFollowedNowhere() throws {
        let victim = Self.victim()
        let target = LedgerPropertyTests.folder("target")
        defer { removeFolder(victim, target) }
        mkdir(target, 0o700)
        #expect(symlink(victim, target + "/.init-1") == 0)
        #expect(throws: ConsentError.self) {
            try Ledger.create(store: FileLedgerStore(directory: target), catalog: SeedCatalog.catalog, name: "t", keyProtection: .insecurePlaintext)
        }
        #expect(readBytes(victim + "/data.txt") == Array("precious\n".utf8), "the linked folder is untouched")
        #expect(PosixFile.ownKind(of: target + "/.init-1") == .symlink, "the link is not removed either")
    }

    @Test func aLinkAtTheOldStagingNameBesideTheTargetIsLeftAlone() throws {
        let victim = Self.victim()
        let target = LedgerPropertyTests.folder("target")
        let planted = PosixFile.parent(of: target) + "/.\(target.split(separator: "/").last!).init-\(getpid())"
        defer { removeFolder(victim, target); unlink(planted) }
        #expect(symlink(victim, planted) == 0)
        _ = try Ledger.create(store: FileLedgerStore(directory: target), catalog: SeedCatalog.catalog, name: "t", keyProtection: .insecurePlaintext)
        #expect(readBytes(victim + "/data.txt") == Array("precious\n".utf8))
        #expect(PosixFile.directoryEntries(victim) == ["data.txt"])
        #expect(verifyFolder(target) == .ok(events: 1))
    }

    @Test func aTargetThatIsALinkIsRefused() throws {
        let victim = Self.victim()
        let target = LedgerPropertyTests.folder("target")
        defer { removeFolder(victim); unlink(target) }
        #expect(symlink(victim, target) == 0)
        #expect(throws: ConsentError.self) {
            try Ledger.create(store: FileLedgerStore(directory: target), catalog: SeedCatalog.catalog, name: "t", keyProtection: .insecurePlaintext)
        }
        #expect(PosixFile.directoryEntries(victim) == ["data.txt"])
    }

    @Test func aLinkWithALedgerFileNameInTheTargetIsRefused() throws {
        let victim = Self.victim()
        let target = LedgerPropertyTests.folder("target")
        defer { removeFolder(victim, target) }
        mkdir(target, 0o700)
        #expect(symlink(victim + "/data.txt", target + "/head") == 0)
        #expect(throws: ConsentError.self) {
            try Ledger.create(store: FileLedgerStore(directory: target), catalog: SeedCatalog.catalog, name: "t", keyProtection: .insecurePlaintext)
        }
        #expect(readBytes(victim + "/data.txt") == Array("precious\n".utf8))
    }
}

/// A subject's event set is authenticated (streams and the subject map), so no derived file
/// decides which events are a subject's.
@Suite struct SubjectCompletenessTests {
    /// Overwriting the subject bytes of a withdrawal's and its cascade's `lines.idx` records made
    /// `status` and `history` report the feature active, `export` vouch for the shortened history,
    /// and `give … optional-b` sign an event that breaks R2; shortening `tree.hashes` as well made
    /// `verify` pass.
    @Test func hidingAWithdrawalInTheLineIndexChangesNoAnswer() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("hide-withdrawal")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        try ledger.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        let revoke = try ledger.execute(LedgerCommand(subjectID: "p1", request: .revoke(feature: "timeline", consent: "required")))
        #expect(revoke.result.events.count == 2, "the withdrawal and its cascade")
        let truth = try ledger.report(for: "p1")
        #expect(truth.listing.activeFeatures.isEmpty)
        var index = readBytes(path + "/lines.idx")
        let p2 = Array(index[(3 * 32 + 16)..<(3 * 32 + 32)])
        for event in revoke.result.events {
            let record = Int(event.seq)
            index.replaceSubrange((record * 32 + 16)..<(record * 32 + 32), with: p2)
        }
        writeBytes(index, to: path + "/lines.idx")
        let tree = readBytes(path + "/tree.hashes")
        writeBytes(Array(tree.dropLast(32)), to: path + "/tree.hashes")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let after = try reopened.report(for: "p1")
        #expect(after.listing == truth.listing, "status answers from the signed streams")
        #expect(after.events == truth.events, "history holds every event")
        let bundle = try reopened.exportSubject("p1")
        #expect(bundle.events.map(\.seq) == truth.events.map { Int64($0.seq) })
        #expect(throws: ConsentError.self, "R2: no optional consent without the required one") {
            try reopened.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-b"])))
        }
        guard case .failed(.integrity) = verifyFolder(path) else { Issue.record("verify passed with a tampered line index"); return }
    }

    /// A subject-map record changed on disk gives an integrity error that names the repair; it
    /// never answers.
    @Test func aTamperedSubjectMapIsAnIntegrityError() throws {
        let (path, ledger) = try DerivedDataRegressionTests.ledger("map-tamper")
        defer { removeFolder(path) }
        for p in ["p1", "p2", "p3"] {
            try ledger.execute(LedgerCommand(subjectID: p, request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        }
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .revoke(feature: "timeline", consent: "required")))
        var map = readBytes(path + "/subjects.map")
        // Point p1's newest event at its grant: change the seq of every leaf record of the last
        // write's records to an earlier one.
        let count = map.count / SubjectMapRecord.size
        for r in 0..<count where map[r * SubjectMapRecord.size] == 1 { map[r * SubjectMapRecord.size + 31] = 1 }
        writeBytes(map, to: path + "/subjects.map")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        do {
            let report = try reopened.report(for: "p1")
            Issue.record("answered from a tampered map: \(report.listing)")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.problem.contains("subjects.map"), "names the file and the repair: \(failure.problem)")
            #expect(failure.kind == .derivedData)
        }
        #expect(throws: ConsentError.self) {
            try reopened.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-b"])))
        }
        guard case .failed(.integrity) = verifyFolder(path) else { Issue.record("verify passed with a tampered subject map"); return }
        // The repair the message names works.
        removeFolder(path + "/subjects.map")
        let repaired = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try repaired.report(for: "p1").listing.activeFeatures.isEmpty)
        #expect(verifyFolder(path) == .ok(events: 9))
    }
}
