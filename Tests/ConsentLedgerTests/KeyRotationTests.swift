import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Key rotation: a `key.rotated` event signed by the key in force, with the new key's handover
/// signature; from then on the new key signs events, heads, checkpoints and subject records.
@Suite struct KeyRotationTests {
    /// A folder ledger with alice's grant, its plaintext key file's signer, and the folder.
    static func ledger(_ label: String) throws -> (Ledger, SodiumSigner, String) {
        let path = LedgerPropertyTests.folder("rotate-\(label)")
        let genesis = SodiumSigner.generate()
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "consentledger.example/\(label)", keyProtection: .insecurePlaintext, signer: genesis)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        return (ledger, genesis, path)
    }

    static func reopen(_ path: String) throws -> Ledger { try Ledger.open(store: FileLedgerStore(directory: path)) }

    @Test func afterARotationTheNewKeySignsAndTheWholeHistoryVerifies() throws {
        let (ledger, genesis, path) = try Self.ledger("signs")
        defer { removeFolder(path) }
        let new = SodiumSigner.generate()
        let receipt = try ledger.rotateKey(to: new, protection: .insecurePlaintext, actor: "security")
        let (retired, current) = (try ledger.noteKey(genesis.publicKey), try ledger.noteKey(new.publicKey))
        #expect(receipt.seq == 2 && receipt.retired == retired && receipt.current == current)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))

        // Events after the rotation carry the new key's id; the rotation itself the old one's.
        let events = try FileLedgerStore(directory: path).snapshot().entries.map { try EventCodec.decode(line: $0) }
        let newID = ledger.chain.keyID(of: new.publicKey)
        #expect(events.map(\.keyID) == [ledger.keyID, ledger.keyID, ledger.keyID, newID, newID])
        // The head is the new key's, and the key file holds the new key (no pending file left).
        let head = try #require(newestHead(path))
        #expect(throws: Never.self) { try head.verify(key: try ledger.noteKey(new.publicKey), verifier: Sodium()) }
        #expect(throws: NoteError.self) { try head.verify(key: try ledger.verifierKey, verifier: Sodium()) }
        #expect(try FileKeyStore(path: path + "/secret.key").unlockSigner(passphrase: nil).publicKey == new.publicKey)
        #expect(PosixFile.kind(of: path + "/secret.key.next") == .missing)

        // A fresh process verifies, reads and writes with the new key; bob's record is the new key's.
        let again = try Self.reopen(path)
        let report = try again.verify()
        #expect(report.events == 5 && report.keys.periods.map(\.from) == [0, 3] && report.keys.current.key == new.publicKey)
        #expect(try again.keyHistory() == report.keys)
        #expect(try again.currentVerifierKey() == current)
        #expect(try again.report(for: "alice").events.count == 2)
        #expect(try again.report(for: "bob").events.count == 1)
        try again.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
        let (_, note) = try again.signedCheckpoint()
        #expect(throws: Never.self) { try SignedNote.open(note, key: try again.noteKey(new.publicKey)) }
        #expect(try again.verify().events == 6)
    }

    /// The rotations are found through the subject map, a derived file: a map that hides the
    /// rotation (an older map made to claim the whole log) must give an integrity error, never
    /// a read under the retired key.
    @Test func aSubjectMapThatHidesTheRotationGivesAnIntegrityErrorNotAnotherKey() throws {
        let (ledger, _, path) = try Self.ledger("hidden")
        defer { removeFolder(path) }
        let before = readBytes(path + "/subjects.map")
        try ledger.rotateKey(protection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let size = try FileLedgerStore(directory: path).logState().size
        // The old map's root record, made to claim the log as it is now.
        let size88 = SubjectMapRecord.size
        let root = try SubjectMapRecord.decodeRoot(Array(before[(before.count - size88)...]))
        var forged = Array(before[..<(before.count - size88)])
        SubjectMapRecord.append(SubjectMapRecord.Root(coveredSize: Int64(size), node: root.node, hash: root.hash, keyCount: root.keyCount), to: &forged)
        writeBytes(forged, to: path + "/subjects.map")
        let reopened = try KeyRotationTests.reopen(path)
        for read in [{ _ = try reopened.report(for: "alice") }, { _ = try reopened.keyHistory() }] as [() throws -> Void] {
            #expect {
                try read()
            } throws: { error in
                guard case ConsentError.integrity(let failure) = error else { return false }
                return failure.problem.contains("the derived data hides a key rotation")
            }
        }
        #expect {
            _ = try reopened.verify()
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.problem.contains("subject map")
        }
    }

    @Test func aSecondRotationChainsFromTheFirst() throws {
        let (ledger, _, path) = try Self.ledger("twice")
        defer { removeFolder(path) }
        try ledger.rotateKey(protection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let third = SodiumSigner.generate()
        try ledger.rotateKey(to: third, protection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
        let report = try Self.reopen(path).verify()
        #expect(report.keys.periods.count == 3 && report.keys.periods.map(\.from) == [0, 3, 5] && report.keys.current.key == third.publicKey)
    }

    /// A thief who kept the retired key appends an event it signs, with a valid chain link:
    /// reads and verify refuse it.
    @Test func anEventSignedByTheRetiredKeyAfterTheRotationIsRefused() throws {
        let (ledger, genesis, path) = try Self.ledger("thief")
        defer { removeFolder(path) }
        try ledger.rotateKey(protection: .insecurePlaintext)
        let store = FileLedgerStore(directory: path)
        let log = try store.logState()
        let ref = try #require(try ledger.subjectRef(for: "alice"))
        let seq = log.last.event.seq + 1
        let forged = LedgerEvent(seq: seq, at: log.last.event.at, actor: "thief", command: CommandSpan(first: seq, size: 1),
                                 payload: .consentRevoked(ConsentRevoked(subject: ref, feature: 2, consent: "required", reason: .withdrawn)))
        var streams: StreamState? = try ledger.streamStateForSealing([forged])
        let (records, _) = try ledger.chain.seal([forged], after: ledger.chain.hash(ofBody: log.last.body), signer: genesis, streams: &streams)
        // Where the log's content ends, in the space its writer reserved, as a writer appends.
        let file = try PosixFile(path: path + "/ledger.jsonl", flags: O_WRONLY)
        try file.write(records[0].lineWithoutNewline + [0x0A], at: UInt64(readLog(path).count))

        let reopened = try Self.reopen(path)
        for attempt in [{ _ = try reopened.verify() }, { _ = try reopened.report(for: "alice") }] as [() throws -> Void] {
            #expect {
                try attempt()
            } throws: { error in
                guard case ConsentError.integrity(let failure) = error else { return false }
                return failure.seq == seq && failure.problem.contains("a key this ledger has rotated away from")
            }
        }
    }

    /// Events built as a holder of the key in force would, to check what readers refuse.
    static func appendRotation(_ ledger: Ledger, signer: any EventSigner, newKey: PublicKey, handoverBy: any EventSigner, path: String) throws -> UInt64 {
        let log = try FileLedgerStore(directory: path).logState()
        let seq = log.last.event.seq + 1
        let prev = ledger.chain.hash(ofBody: log.last.body)
        let handover = KeyHandover.message(ledger: ledger.genesis.ledgerName, prev: prev, from: signer.publicKey, to: newKey).withUnsafeBytes { handoverBy.sign($0) }
        let event = LedgerEvent(seq: seq, at: log.last.event.at, actor: "x", command: CommandSpan(first: seq, size: 1),
                                payload: .keyRotated(KeyRotated(publicKey: newKey.hex, handover: handover.hex)))
        var streams: StreamState? = try ledger.streamStateForSealing([event])
        let (records, _) = try ledger.chain.seal([event], after: prev, signer: signer, streams: &streams)
        // Where the log's content ends, in the space its writer reserved, as a writer appends.
        let file = try PosixFile(path: path + "/ledger.jsonl", flags: O_WRONLY)
        try file.write(records[0].lineWithoutNewline + [0x0A], at: UInt64(readLog(path).count))
        return seq
    }

    @Test(arguments: ["handover by another key", "a key used before", "signed by a stranger"])
    func aRotationThatDoesNotChainIsRefused(_ kind: String) throws {
        let (ledger, genesis, path) = try Self.ledger("forged-\(kind.split(separator: " ").last!)")
        defer { removeFolder(path) }
        let new = SodiumSigner.generate(), stranger = SodiumSigner.generate()
        let seq: UInt64
        let expected: String
        switch kind {
        case "handover by another key":
            seq = try Self.appendRotation(ledger, signer: genesis, newKey: new.publicKey, handoverBy: stranger, path: path)
            expected = "handover signature does not verify with the new key"
        case "a key used before":
            seq = try Self.appendRotation(ledger, signer: genesis, newKey: genesis.publicKey, handoverBy: genesis, path: path)
            expected = "which this ledger has used before"
        default:
            seq = try Self.appendRotation(ledger, signer: stranger, newKey: new.publicKey, handoverBy: new, path: path)
            expected = "not the ledger's key in force"
        }
        #expect {
            _ = try Self.reopen(path).verify()
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.seq == seq && failure.problem.contains(expected)
        }
    }

    /// The new key file is stored before the event is committed; a crash before it takes the
    /// old file's place is finished by the next write.
    @Test func aRotationCutShortBeforeTheKeyFileSwapIsFinishedByTheNextWrite() throws {
        let (ledger, _, path) = try Self.ledger("crash")
        defer { removeFolder(path) }
        let keys = FileKeyStore(path: path + "/secret.key")
        let new = SodiumSigner.generate()
        let file = try SigningKeyFile.file(for: new, protection: .insecurePlaintext, random: systemRandom)
        try ledger.rotate(to: new, actor: "security") { try keys.savePendingKeyFile(file) }
        #expect(PosixFile.kind(of: keys.pendingPath) == .file)
        let again = try Self.reopen(path)
        try again.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try keys.unlockSigner(passphrase: nil).publicKey == new.publicKey)
        #expect(PosixFile.kind(of: keys.pendingPath) == .missing)
        #expect(try again.verify().events == 4)
    }

    @Test func aKeyFileHoldingTheRetiredKeyIsRefusedByName() throws {
        let (ledger, genesis, path) = try Self.ledger("retired")
        defer { removeFolder(path) }
        let backup = readBytes(path + "/secret.key")
        try ledger.rotateKey(protection: .insecurePlaintext)
        writeBytes(backup, to: path + "/secret.key")
        #expect {
            try Self.reopen(path).execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.problem.contains("key \(ledger.chain.keyID(of: genesis.publicKey)), which the ledger rotated away from at seq 2")
        }
        // A signer of one's own must be the key in force too.
        #expect(throws: ConsentError.self) { try Ledger.open(store: FileLedgerStore(directory: path), signer: genesis) }
    }

    /// A process that unlocked the key before another one rotated it writes nothing with the
    /// retired key: the write is refused as a conflict, and the next one uses the new key.
    @Test func aProcessHoldingTheRetiredKeyCannotWriteWithIt() throws {
        let (first, _, path) = try Self.ledger("stale")
        defer { removeFolder(path) }
        let second = try Self.reopen(path)
        try second.unlock()
        try first.rotateKey(protection: .insecurePlaintext)
        let before = try FileLedgerStore(directory: path).snapshot()
        #expect {
            try second.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        } throws: { error in
            guard case ConsentError.conflict(let message) = error else { return false }
            return message.contains("rotated")
        }
        #expect(try FileLedgerStore(directory: path).snapshot() == before)
        try second.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try second.verify().events == 4)
    }

    @Test(arguments: [
        (#""handover":"00","kid":"#, "member 'handover' is not 128 lowercase hex digits"),
        (#""publicKey":"zz"#, "member 'publicKey' is not 64 lowercase hex digits"),
        (#""v":1"#, "a 'key.rotated' event belongs only to format version 2"),
    ])
    func aMalformedRotationBodyIsRefused(_ edit: (String, String)) throws {
        let event = LedgerEvent(seq: 5, at: Timestamp(millisecondsSinceEpoch: 0), actor: "x", command: CommandSpan(first: 5, size: 1),
                                payload: .keyRotated(KeyRotated(publicKey: String(repeating: "ab", count: 32), handover: String(repeating: "cd", count: 64))))
        var body = String(decoding: EventCodec.body(of: event, prev: .zero, keyID: "0123456789abcdef"), as: UTF8.self)
        #expect(EventCodec.body(of: event, prev: .zero, keyID: "0123456789abcdef") == EventCodec.bodyViaGenericSerialiser(of: event, prev: .zero, keyID: "0123456789abcdef"))
        let bytes = Array(body.utf8)
        #expect(try bytes.withUnsafeBufferPointer { try EventBodyReader.read($0) }.event == event)
        switch edit.0 {
        case let e where e.hasPrefix(#""handover""#): body = body.replacingOccurrences(of: #""handover":"\#(String(repeating: "cd", count: 64))","kid":"#, with: e)
        case let e where e.hasPrefix(#""publicKey""#): body = body.replacingOccurrences(of: #""publicKey":"\#(String(repeating: "ab", count: 32))"#, with: e)
        default: body = body.replacingOccurrences(of: #""v":2"#, with: edit.0)
        }
        #expect {
            try Array(body.utf8).withUnsafeBufferPointer { try EventBodyReader.read($0) }
        } throws: { error in
            (error as? EventDecodingError)?.problem == edit.1
        }
    }
}

/// Bundles, state proofs and consistency proofs of a rotated ledger carry the rotations, so an
/// auditor who pinned the genesis key and one who pinned the current key both verify them.
@Suite struct RotatedBundleTests {
    static func rotated(_ label: String) throws -> (Ledger, String, old: String, genesisKey: NoteVerifierKey, currentKey: NoteVerifierKey) {
        let (ledger, _, path) = try KeyRotationTests.ledger(label)
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let (_, old) = try ledger.signedCheckpoint()
        try ledger.rotateKey(protection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "optional-b", "1.1")]))
        try ledger.rotateKey(protection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-b"])))
        return (ledger, path, old, try ledger.verifierKey, try ledger.currentVerifierKey())
    }

    @Test func everyBundleVerifiesWithTheGenesisKeyAndWithTheCurrentOne() throws {
        let (ledger, path, old, genesisKey, currentKey) = try Self.rotated("bundles")
        defer { removeFolder(path) }
        #expect(genesisKey != currentKey)
        let subject = try ledger.exportSubject("alice")
        let statementForm = try ledger.exportSubjectWithStatement("alice")
        let all = try ledger.exportAll()
        let state = try ledger.proveState(for: "alice")
        let consistency = try ledger.proveConsistency(from: old)
        #expect(subject.keys.count == 2 && statementForm.keys.count == 2 && all.keys.count == 2 && state.keys.count == 2 && consistency.keys.count == 2)
        for key in [genesisKey, currentKey] {
            #expect(throws: Never.self) { try ExportVerifier.verify(subject.bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try ExportVerifier.verify(statementForm.bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try ExportVerifier.verify(all.bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try StateProofVerifier.verify(state.bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try ExportVerifier.verifyConsistency(try ConsistencyProof(bytes: CanonicalJSON.serialize(consistency.json)), pinnedKey: key) }
        }
        // A key that is not in the chain, with the ledger's name, is refused.
        let stranger = try NoteVerifierKey(name: genesisKey.name, publicKey: SodiumSigner.generate().publicKey, hasher: OpenSSLSHA256())
        #expect {
            try ExportVerifier.verify(subject.bytes, pinnedKey: stranger)
        } throws: { error in
            (error as? ExportVerificationError)?.problem.contains("is neither the ledger's genesis key nor a key") == true
        }
    }

    /// Leaving a rotation out of 'keys', or out of the ledger stream, breaks the chain.
    @Test(arguments: ["the last rotation", "the first rotation", "a rotation among the catalogue versions"])
    func aBundleMissingARotationIsRefused(_ what: String) throws {
        let (ledger, path, _, genesisKey, currentKey) = try Self.rotated("missing-\(what.split(separator: " ")[1])")
        defer { removeFolder(path) }
        var value = try CanonicalJSON.parse(try ledger.proveState(for: "alice").bytes, canonical: false)
        guard case .object(var members) = value, case .array(var keys) = members["keys"], case .array(var versions) = members["catalogVersions"] else {
            Issue.record("no keys")
            return
        }
        switch what {
        case "the last rotation": keys.removeLast()
        case "the first rotation": keys.removeFirst()
        default: versions.removeAll { $0["line"]?.stringValue?.contains("key.rotated") == true }
        }
        members["keys"] = .array(keys)
        members["catalogVersions"] = .array(versions)
        value = .object(members)
        let bytes = CanonicalJSON.serialize(value)
        for key in [genesisKey, currentKey] {
            #expect(throws: ExportVerificationError.self) { try StateProofVerifier.verify(bytes, pinnedKey: key) }
        }
    }
}

/// Revocation: a `key.revoked` event, signed by the key in force, marks a retired key
/// compromised from a seq on and re-attests the honest events it signed since; an event of that
/// window it does not attest is refused.
@Suite struct KeyRevocationTests {
    /// Alice, bob and carol each give a consent under the genesis key (seq 1–3), then a rotation (seq 4).
    static func rotated(_ label: String) throws -> (Ledger, SodiumSigner, String) {
        let (ledger, genesis, path) = try KeyRotationTests.ledger(label)
        for subject in ["bob", "carol"] {
            try ledger.execute(LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required"])))
        }
        try ledger.rotateKey(protection: .insecurePlaintext)
        return (ledger, genesis, path)
    }

    @Test func aRevocationReattestsTheHonestEventsAndTheLedgerStillVerifies() throws {
        let (ledger, genesis, path) = try Self.rotated("honest")
        defer { removeFolder(path) }
        let receipt = try ledger.revokeKey(compromisedSince: 2, actor: "security")
        let revokedKey = try ledger.noteKey(genesis.publicKey)
        #expect(receipt.seq == 5 && receipt.compromisedSince == 2 && receipt.attested == 3 && receipt.revoked == revokedKey)
        try ledger.execute(LedgerCommand(subjectID: "dan", request: .give(feature: "timeline", consents: ["required"])))
        let report = try KeyRotationTests.reopen(path).verify()
        #expect(report.events == 7 && report.keys.revocations.count == 1)
        #expect(report.keys.revocations.first.map { ($0.since, $0.until, $0.attested.count) } ?? (0, 0, 0) == (2, 4, 3))
        // Bundles and proofs carry the revocation in the ledger stream and still verify.
        for key in [try ledger.verifierKey, try ledger.currentVerifierKey()] {
            #expect(throws: Never.self) { try ExportVerifier.verify(try ledger.exportSubject("bob").bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try ExportVerifier.verify(try ledger.exportSubjectWithStatement("bob").bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try ExportVerifier.verify(try ledger.exportAll().bytes, pinnedKey: key) }
            #expect(throws: Never.self) { try StateProofVerifier.verify(try ledger.proveState(for: "carol").bytes, pinnedKey: key) }
        }
    }

    /// A record carries no seq, so the leaked key's signature on records is trusted no more: the
    /// revocation signs again the records the subject map vouches for, removes the rest, and
    /// reads refuse a record the leaked key signed afterwards.
    @Test func aRevocationSignsTheVouchedRecordsAgainAndReadsRefuseOneTheLeakedKeySigned() throws {
        let (ledger, genesis, path) = try Self.rotated("records")
        defer { removeFolder(path) }
        let store = FileLedgerStore(directory: path)
        func signedRecord(_ id: String, salt: UInt8, by key: SodiumSigner) -> (subjectID: SubjectID, record: SubjectRecord) {
            let salt = [UInt8](repeating: salt, count: 16)
            return (SubjectID(id), SubjectRecord(salt: salt, signature: Pseudonym.recordMessage(id: SubjectID(id), salt: salt).withUnsafeBytes { key.sign($0) }))
        }
        // A salt a failed command left, signed by the genesis key before the leak was found.
        try store.write { tx in _ = try tx.commit(LedgerCommit(firstSeq: try tx.logState().size, entries: [], derived: DerivedUpdate(indexFrom: try tx.logState().size, streamKeys: [], treeFrom: Int64(try tx.logState().size), treeHashes: [], subjectMap: nil), subjects: [signedRecord("ghost", salt: 7, by: genesis)], head: nil)) }
        let receipt = try ledger.revokeKey(compromisedSince: 2, actor: "security")
        #expect(receipt.resignedRecords == 3 && receipt.removedRecords == 1)
        let records = try store.read { try $0.subjectRecords() }
        #expect(records.keys.map(\.text).sorted() == ["alice", "bob", "carol"])
        let inForce = try ledger.keyHistory().current.key
        for (id, record) in records {
            let message = Pseudonym.recordMessage(id: id, salt: record.salt)
            #expect(message.withUnsafeBytes { Sodium().isValid(record.signature!, of: $0, by: inForce) }, "\(id.text) is signed by the key in force")
        }
        #expect(try KeyRotationTests.reopen(path).verify().events == 6)
        #expect(try KeyRotationTests.reopen(path).report(for: "bob").events.count == 1)
        // The thief, still holding the genesis key, swaps bob's record for one of their own.
        var lines = String(decoding: readBytes(path + "/subjects.jsonl"), as: UTF8.self).split(separator: "\n").map(String.init)
        let forged = signedRecord("bob", salt: 9, by: genesis)
        lines = lines.map { $0.contains("\"bob\"") ? String(decoding: FileLedgerStore.encodeSubjectLines([forged]).dropLast(), as: UTF8.self) : $0 }
        writeBytes(Array((lines.joined(separator: "\n") + "\n").utf8), to: path + "/subjects.jsonl")
        let message = "is signed only by key \(KeySchedule.keyID(of: genesis.publicKey, hasher: Sodium())), which the ledger revoked at seq 5"
        for attempt in ["status", "verify"] {
            #expect(throws: ConsentError.self, "\(attempt)") {
                do {
                    let fresh = try KeyRotationTests.reopen(path)
                    if attempt == "status" { _ = try fresh.report(for: "bob") } else { _ = try fresh.verify() }
                } catch ConsentError.integrity(let failure) where failure.problem.contains(message) {
                    throw ConsentError.integrity(failure)
                }
            }
        }
    }

    @Test(arguments: [
        (UInt64(1), "rotate first"),  // the key in force signed seq 1: no rotation yet
        (UInt64(99), "past the log's end"),
    ])
    func aRevocationThatCannotBeIsRefusedAndChangesNothing(_ c: (UInt64, String)) throws {
        let (ledger, _, path) = try KeyRotationTests.ledger("refused-\(c.0)")
        defer { removeFolder(path) }
        if c.0 == 99 { try ledger.rotateKey(protection: .insecurePlaintext) }
        let before = try FileLedgerStore(directory: path).snapshot()
        #expect {
            try ledger.revokeKey(compromisedSince: c.0)
        } throws: { error in
            guard case ConsentError.invalidRequest(let message) = error else { return false }
            return message.contains(c.1)
        }
        #expect(try FileLedgerStore(directory: path).snapshot() == before)
    }

    @Test func aKeyIsRevokedOnce() throws {
        let (ledger, _, path) = try Self.rotated("twice")
        defer { removeFolder(path) }
        try ledger.revokeKey(compromisedSince: 3)
        #expect {
            try ledger.revokeKey(compromisedSince: 1)
        } throws: { error in
            guard case ConsentError.invalidRequest(let message) = error else { return false }
            return message.contains("which was revoked before")
        }
    }

    /// A revocation that does not attest one of the window's events (as one written with the key
    /// in force but leaving out a line the thief put in): verify names that event.
    @Test func anEventOfTheCompromisedWindowThatIsNotReattestedIsRefused() throws {
        let (ledger, _, path) = try Self.rotated("unattested")
        defer { removeFolder(path) }
        let store = FileLedgerStore(directory: path)
        let log = try store.logState()
        let entries = try store.snapshot().entries
        var attested = (2...4).map { ledger.chain.hash(ofBody: try! EventCodec.decode(line: entries[$0]).body).hex }
        attested[1] = Digest.zero.hex  // seq 3 left out
        let seq = log.last.event.seq + 1
        let event = LedgerEvent(seq: seq, at: log.last.event.at, actor: "security", command: CommandSpan(first: seq, size: 1),
                                payload: .keyRevoked(KeyRevoked(publicKey: ledger.publicKey.hex, compromisedSince: 2, attested: attested)))
        var streams: StreamState? = try ledger.streamStateForSealing([event])
        let current = try FileKeyStore(path: path + "/secret.key").unlockSigner(passphrase: nil)
        let (records, _) = try ledger.chain.seal([event], after: ledger.chain.hash(ofBody: log.last.body), signer: current, streams: &streams)
        // The records signed again by the key in force, as a revocation does.
        try store.write { tx in
            let size = try tx.logState().size
            let revised = try tx.subjectRecords().map { id, r in
                (subjectID: id, record: Optional(SubjectRecord(salt: r.salt, signature: Pseudonym.recordMessage(id: id, salt: r.salt).withUnsafeBytes { current.sign($0) })))
            }
            _ = try tx.commit(LedgerCommit(firstSeq: size, entries: [], derived: DerivedUpdate(indexFrom: size, streamKeys: [], treeFrom: Int64(size), treeHashes: [], subjectMap: nil), subjects: [], head: nil, revisedSubjects: revised))
        }
        // Where the log's content ends, in the space its writer reserved, as a writer appends.
        let file = try PosixFile(path: path + "/ledger.jsonl", flags: O_WRONLY)
        try file.write(records[0].lineWithoutNewline + [0x0A], at: UInt64(readLog(path).count))
        #expect {
            _ = try KeyRotationTests.reopen(path).verify()
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.seq == 3 && failure.problem.contains("not re-attested by its revocation at seq 5")
        }
        // A bundle of carol (her grant is seq 3) carries the revocation, and its verifier refuses her event too.
        let reopened = try KeyRotationTests.reopen(path)
        let bundles = [try reopened.exportSubjectWithStatement("carol").bytes, try reopened.exportAll().bytes]
        for bytes in bundles {
            #expect {
                try ExportVerifier.verify(bytes, pinnedKey: try reopened.currentVerifierKey())
            } throws: { error in
                guard let failure = error as? ExportVerificationError else { return false }
                return failure.seq == 3 && failure.problem.contains("does not re-attest it")
            }
        }
    }
}
