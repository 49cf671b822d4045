import ConsentDomain
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog
import Testing

/// What every ``LedgerStore`` must do, whatever it keeps its data in. Each check takes a fresh
/// storage; the memory and file storages run every check here, the PostgreSQL storage in its
/// own test target (this file is linked there too).
enum StorageConformance: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case createdLedgerHoldsTheGenesisEntryAndItsHead
    case aSecondCreateIsRefused
    case aCommitAppendsEntriesDerivedDataSubjectsAndHead
    case aCommitThatDoesNotFollowTheLogIsRefusedAndChangesNothing
    case aWriteThatThrowsBeforeCommittingChangesNothing
    case entriesAreReadByRangeInBatchesInOrder
    case derivedDataIsReplacedFromWhereTheCommitSays
    case aCommitOfEntriesWithoutItsHeadIsRefused
    case theIndexFindsAStreamsEntriesBelowALimit
    case subjectRecordsRoundTripByteForByte
    case aRevisionSignsRecordsAgainAndRemovesOthers
    case checkpointsAreRecordedOncePerSizeAndListedBySize
    case anErasedSubjectsRecordIsDestroyedAndTheLedgerStillVerifies
    case aKeyRotationIsFollowedByReadsWritesAndVerify

    var testDescription: String { rawValue }

    /// A fresh, empty storage.
    typealias Make = () throws -> any LedgerStore

    func run(_ make: Make) throws {
        let store = try make()
        let fixture = try Fixture(store)
        switch self {
        case .createdLedgerHoldsTheGenesisEntryAndItsHead:
            try store.read { tx throws -> Void in
                let log = try tx.logState()
                #expect(log.size == 1 && log.torn == nil)
                #expect(log.signedHead?.note == fixture.genesisHead.note)
                #expect(try tx.entry(0) == fixture.genesisLine)
                let (catalog, key) = try tx.metadata()
                #expect(catalog == CatalogCodec.canonicalBytes(SeedCatalog.catalog) && key == fixture.ledger.publicKey)
                let counts = try tx.derivedCounts()
                #expect(counts.indexed == 1 && counts.treeHashes == 1 && counts.subjectMapRecords >= 1)
                #expect(try tx.treeHashes([0]) == [MerkleTree.leafHash(fixture.genesisLine, hasher: OpenSSLSHA256())])
                #expect(try tx.subjectRecords().isEmpty && tx.checkpoints().isEmpty)
            }
        case .aSecondCreateIsRefused:
            #expect(throws: ConsentError.alreadyExists("")) {
                do {
                    _ = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "again", keyProtection: .insecurePlaintext)
                } catch ConsentError.alreadyExists {
                    throw ConsentError.alreadyExists("")
                }
            }
        case .aCommitAppendsEntriesDerivedDataSubjectsAndHead:
            let commit = try fixture.commit(subject: "alice", count: 3)
            #expect(try store.write { try $0.commit(commit) } == nil)
            try store.read { tx throws -> Void in
                let log = try tx.logState()
                #expect(log.size == 4 && log.recordedHead == commit.head!.chainHead)
                #expect(try (1..<4).map { try tx.entry($0) } == commit.entries)
                #expect(try tx.derivedCounts().indexed == 4 && tx.derivedCounts().treeHashes == commit.derived.treeFrom + Int64(commit.derived.treeHashes.count))
                #expect(try tx.treeHashes([1, 2]) == Array(commit.derived.treeHashes[0..<2]))
                #expect(try tx.subjectRecord(SubjectID("alice")) == commit.subjects[0].record)
            }
        case .aCommitThatDoesNotFollowTheLogIsRefusedAndChangesNothing:
            let before = try store.snapshot()
            let commit = try fixture.commit(subject: "alice", count: 2, at: 2)
            #expect(throws: ConsentError.self) { _ = try store.write { try $0.commit(commit) } }
            #expect(try store.snapshot() == before)
        case .aWriteThatThrowsBeforeCommittingChangesNothing:
            let before = try store.snapshot()
            struct Refused: Error {}
            #expect(throws: Refused.self) {
                try store.write { tx -> Void in
                    _ = try tx.logState()
                    throw Refused()
                }
            }
            #expect(try store.snapshot() == before)
        case .entriesAreReadByRangeInBatchesInOrder:
            let commit = try fixture.commit(subject: "bob", count: 7)
            _ = try store.write { try $0.commit(commit) }
            for batchSize in [1, 3, 100] {
                var seen: [Int] = []
                var lines: [[UInt8]] = []
                try store.read { tx throws -> Void in
                    try tx.entries(2..<7, batchSize: batchSize, indexedKeys: true) { batch in
                        #expect(batch.count <= batchSize)
                        #expect(batch.indexedKeys?.count == batch.count)
                        for i in 0..<batch.count {
                            seen.append(batch.seq(i))
                            lines.append(batch.entry(i))
                        }
                    }
                }
                #expect(seen == Array(2..<7))
                #expect(lines == Array(commit.entries[1..<6]))
            }
        case .derivedDataIsReplacedFromWhereTheCommitSays:
            let first = try fixture.commit(subject: "carol", count: 2)
            _ = try store.write { try $0.commit(first) }
            // The next commit rewrites the index from entry 1 and the tree from its start.
            var commit = try fixture.commit(subject: "carol", count: 1, at: 3, newSubject: false)
            let keys = [[UInt8]](repeating: [UInt8](repeating: 7, count: 16), count: 3)
            let hashes = (0..<5).map { Digest(bytes: [UInt8](repeating: UInt8($0), count: 32))! }
            commit = LedgerCommit(firstSeq: 3, entries: commit.entries, derived: DerivedUpdate(indexFrom: 1, streamKeys: keys, treeFrom: 0, treeHashes: hashes, subjectMap: nil), subjects: [], head: commit.head)
            _ = try store.write { try $0.commit(commit) }
            try store.read { tx throws -> Void in
                #expect(try tx.derivedCounts().indexed == 4 && tx.derivedCounts().treeHashes == 5)
                #expect(try tx.treeHashes(Array(0..<5)) == hashes)
                var indexed: [[UInt8]] = []
                try tx.entries(0..<4, batchSize: 10, indexedKeys: true) { indexed += $0.indexedKeys ?? [] }
                #expect(Array(indexed[1...]) == keys)
            }
        case .aCommitOfEntriesWithoutItsHeadIsRefused:
            let full = try fixture.commit(subject: "dave", count: 2)
            let headless = LedgerCommit(firstSeq: 1, entries: full.entries, derived: full.derived, subjects: full.subjects, head: nil)
            #expect(throws: ConsentError.self) { _ = try store.write { try $0.commit(headless) } }
            let wrongSize = LedgerCommit(firstSeq: 1, entries: Array(full.entries.prefix(1)), derived: full.derived, subjects: full.subjects, head: full.head)
            #expect(throws: ConsentError.self) { _ = try store.write { try $0.commit(wrongSize) } }
            try store.read { tx throws -> Void in
                let log = try tx.logState()
                #expect(log.size == 1, "nothing was written")
                #expect(log.recordedHead == fixture.genesisHead.chainHead)
                #expect(try tx.subjectRecords().isEmpty)
            }
        case .theIndexFindsAStreamsEntriesBelowALimit:
            let alice = try fixture.commit(subject: "alice", count: 2)
            _ = try store.write { try $0.commit(alice) }
            let bob = try fixture.commit(subject: "bob", count: 1, at: 3)
            _ = try store.write { try $0.commit(bob) }
            let again = try fixture.commit(subject: "alice", count: 1, at: 4, newSubject: false)
            _ = try store.write { try $0.commit(again) }
            let key = alice.derived.streamKeys[0]
            try store.read { tx throws -> Void in
                #expect(try tx.indexedEntries(of: key, below: 5) == [1, 2, 4])
                #expect(try tx.indexedEntries(of: key, below: 4) == [1, 2])
                #expect(try tx.indexedEntries(of: SubjectMap.ledgerStream, below: 5) == [0])
            }
        case .subjectRecordsRoundTripByteForByte:
            // Canonically equivalent ids are distinct subjects: compared byte for byte.
            let ids = ["alice", "Jos\u{E9}", "Jose\u{301}", "a\"quote\\and\u{1}"].map(SubjectID.init)
            let records = ids.enumerated().map { i, id in
                (subjectID: id, record: SubjectRecord(salt: [UInt8](repeating: UInt8(i), count: 16), signature: i == 0 ? nil : Signature(bytes: [UInt8](repeating: UInt8(i), count: 64))))
            }
            let commit = try fixture.commit(subject: "alice", count: 1)
            _ = try store.write { try $0.commit(LedgerCommit(firstSeq: 1, entries: commit.entries, derived: commit.derived, subjects: records, head: commit.head)) }
            try store.read { tx throws -> Void in
                #expect(try tx.subjectRecords() == Dictionary(uniqueKeysWithValues: records.map { ($0.subjectID, $0.record) }))
                for (id, record) in records { #expect(try tx.subjectRecord(id) == record) }
                #expect(try tx.subjectRecord(SubjectID("nobody")) == nil)
            }
        case .aRevisionSignsRecordsAgainAndRemovesOthers:
            func record(_ salt: UInt8, _ sig: UInt8) -> SubjectRecord { SubjectRecord(salt: [UInt8](repeating: salt, count: 16), signature: Signature(bytes: [UInt8](repeating: sig, count: 64))) }
            let stored = ["alice": record(1, 1), "bob": record(2, 2), "carol": record(3, 3), "dan": record(4, 4)]
            let commit = try fixture.commit(subject: "alice", count: 1)
            _ = try store.write { try $0.commit(LedgerCommit(firstSeq: 1, entries: commit.entries, derived: commit.derived, subjects: stored.sorted { $0.key < $1.key }.map { (SubjectID($0.key), $0.value) }, head: commit.head)) }
            let next = try fixture.commit(subject: "alice", count: 1, at: 2, newSubject: false)
            // alice signed again; bob removed; carol's replacement names another salt (nothing
            // changes); erin has no record (nothing is added); dan is not named.
            let revised: [(subjectID: SubjectID, record: SubjectRecord?)] = [(SubjectID("alice"), record(1, 9)), (SubjectID("bob"), nil), (SubjectID("carol"), record(7, 9)), (SubjectID("erin"), record(5, 9))]
            _ = try store.write { try $0.commit(LedgerCommit(firstSeq: 2, entries: next.entries, derived: next.derived, subjects: [], head: next.head, revisedSubjects: revised)) }
            try store.read { tx throws -> Void in
                #expect(try tx.subjectRecords() == [SubjectID("alice"): record(1, 9), SubjectID("carol"): record(3, 3), SubjectID("dan"): record(4, 4)])
                #expect(try tx.subjectRecord(SubjectID("bob")) == nil && tx.subjectRecord(SubjectID("alice")) == record(1, 9))
                #expect(try tx.logState().size == 3)
            }
        case .anErasedSubjectsRecordIsDestroyedAndTheLedgerStillVerifies:
            for subject in ["alice", "bob"] {
                try fixture.ledger.execute(LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required"])))
            }
            let receipt = try fixture.ledger.erase("alice", actor: "dpo", reason: "request 1")
            #expect(receipt.appended && receipt.events == 2)
            try store.read { tx throws -> Void in
                #expect(try tx.subjectRecord(SubjectID("alice")) == nil)
                #expect(try tx.subjectRecords().keys.map(\.text) == ["bob"])
            }
            #expect(try fixture.ledger.verify().events == 4)
            // Reopened, the ledger knows no alice; a new command for her id starts a new pseudonym.
            let reopened = try Ledger.open(store: store, signer: fixture.signer)
            #expect(try reopened.subjectRef(for: "alice") == nil)
            try reopened.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
            #expect(try reopened.subjectRef(for: "alice")?.value != receipt.pseudonym)
            #expect(try reopened.verify().events == 5)
        case .aKeyRotationIsFollowedByReadsWritesAndVerify:
            try fixture.ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
            let new = SodiumSigner.generate()
            let receipt = try fixture.ledger.rotateKey(to: new as any EventSigner, actor: "security")
            #expect(receipt.seq == 2)
            try fixture.ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
            // Another process: it must bring the new key, and finds the history whole.
            #expect(throws: ConsentError.self) { try Ledger.open(store: store, signer: fixture.signer) }
            let reopened = try Ledger.open(store: store, signer: new)
            let report = try reopened.verify()
            #expect(report.events == 4 && report.keys.periods.map(\.from) == [0, 3])
            #expect(try reopened.report(for: "alice").events.count == 1 && reopened.report(for: "bob").events.count == 1)
            try reopened.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
            #expect(try reopened.verify().events == 5)
            // The retired key revoked from alice's grant on: the grant and the rotation re-attested.
            let revocation = try reopened.revokeKey(compromisedSince: 1, actor: "security")
            #expect(revocation.attested == 2)
            #expect(try Ledger.open(store: store, signer: new).verify().keys.revocations.count == 1)
        case .checkpointsAreRecordedOncePerSizeAndListedBySize:
            // (and a witnessed checkpoint replaces the one of its size)
            try store.write { tx throws -> Void in
                for size in [5, 3, 9, 3] as [Int64] { try tx.recordCheckpoint(IssuedCheckpoint(size: size, note: "note \(size) of \(size == 3 ? "first" : "one")\n")) }
            }
            try store.write { tx throws -> Void in try tx.recordCheckpoint(IssuedCheckpoint(size: 3, note: "another note\n")) }
            let recorded = try store.readCheckpoints()
            #expect(recorded.map(\.size) == [3, 5, 9])
            #expect(recorded[0].note == "note 3 of first\n", "the first note of a size stays")
            #expect(try store.read { try $0.newestCheckpoint() } == IssuedCheckpoint(size: 9, note: "note 9 of one\n"))
            // The same checkpoint cosigned by witnesses since: it takes the place of the first.
            try store.write { tx throws -> Void in try tx.recordCheckpoint(IssuedCheckpoint(size: 3, note: "note 3, cosigned\n", replaces: true)) }
            let replaced = try store.readCheckpoints()
            #expect(replaced.map(\.size) == [3, 5, 9] && replaced[0].note == "note 3, cosigned\n" && replaced[1].note == "note 5 of one\n")
            #expect(try store.read { try $0.newestCheckpoint() } == IssuedCheckpoint(size: 9, note: "note 9 of one\n"), "the newest is the largest size's, whatever was replaced since")
            // The largest size cosigned: it is the newest, with its cosignatures.
            try store.write { tx throws -> Void in try tx.recordCheckpoint(IssuedCheckpoint(size: 9, note: "note 9, cosigned\n", replaces: true)) }
            #expect(try store.read { try $0.newestCheckpoint() } == IssuedCheckpoint(size: 9, note: "note 9, cosigned\n"))
        }
    }

    /// A ledger in the storage under test, and entries to commit to it: well-formed signed events
    /// of one subject (a storage checks no signature, hash or rule; it must only keep them).
    struct Fixture {
        let store: any LedgerStore
        let ledger: Ledger
        let genesisLine: [UInt8]
        let genesisHead: SignedHead
        let signer: SodiumSigner

        init(_ store: any LedgerStore) throws {
            self.store = store
            ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "conformance", keyProtection: .insecurePlaintext, signer: SodiumSigner(seed: vectorSeed)!, clock: SteppingClock().clock, random: CountingRandom().source)
            (genesisLine, genesisHead) = try store.read { tx in (try tx.entry(0), try tx.logState().signedHead!) }
            signer = SodiumSigner(seed: vectorSeed)!
        }

        /// A commit of `count` events of `subject` after entry `at - 1` (by default, the log's end).
        func commit(subject: String, count: Int, at: Int? = nil, newSubject: Bool = true) throws -> LedgerCommit {
            let log = try store.logState()
            let first = at ?? log.size
            let salt = [UInt8](repeating: 0x5A, count: 16)
            let ref = ledger.subjectRef(id: subject, salt: salt)
            let span = CommandSpan(first: UInt64(first), size: count)
            let events = (0..<count).map { i in
                LedgerEvent(seq: UInt64(first + i), at: log.last.event.at, actor: "self", command: span, payload: .consentGiven(ConsentGiven(subject: ref, feature: 2, consent: "optional-\(i)", version: "1.0")))
            }
            var streams: StreamState? = emptyStreams()
            let (records, hash) = try ledger.chain.seal(events, after: ledger.chain.hash(ofBody: log.last.body), signer: signer, streams: &streams)
            let lines = records.map { $0.lineWithoutNewline }
            let key = StreamKey.of(subject: ref)
            let record = SubjectRecord(salt: salt, signature: Pseudonym.recordMessage(id: SubjectID(subject), salt: salt).withUnsafeBytes { signer.sign($0) })
            let treeFrom = MerkleTree.storedHashCount(Int64(first))
            let hashes = (0..<MerkleTree.storedHashCount(Int64(first + count)) - treeFrom).map { Digest(bytes: [UInt8](repeating: UInt8(truncatingIfNeeded: treeFrom + $0), count: 32))! }
            let head = SignedHead.sign(Checkpoint(origin: "conformance", size: Int64(first + count), root: .zero), chainHash: hash, key: try ledger.verifierKey, signer: signer)
            return LedgerCommit(
                firstSeq: first, entries: lines,
                derived: DerivedUpdate(indexFrom: first, streamKeys: Array(repeating: key, count: count), treeFrom: treeFrom, treeHashes: hashes, subjectMap: nil),
                subjects: newSubject ? [(SubjectID(subject), record)] : [], head: head)
        }
    }
}
