import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// What `verify` found in a sound ledger.
public struct VerificationReport: Hashable, Sendable {
    public let events: Int
    public let subjects: Int
    /// The newest event and its chain hash.
    public let head: ChainHead
    public let ledgerName: String
    /// The genesis key.
    public let publicKey: PublicKey
    /// Every key of the ledger, as its rotations give them (one when it never rotated).
    public let keys: KeySchedule
    /// A torn tail left by a crash (not part of the ledger; the next write removes it).
    public let torn: TornTail?
    /// Every clock correction of the log.
    public let clockCorrections: ClockCorrections
    /// Set when the ledger's clock went wrong and is not corrected: its newest event's time is
    /// ahead of this process's clock by more than ``Ledger/maximumClockSkew``, so writes refuse.
    public let clockAhead: ClockAhead?
}

extension Ledger {
    /// Checks the whole ledger: every line's encoding, signature, hash link and sequence number,
    /// the rules on replay, and that the recorded head lies on the chain. Signatures and hashes
    /// are checked on all cores; the links and the replay in order. Throws
    /// `ConsentError.integrity(_:)` naming the first bad entry.
    public func verify() throws -> VerificationReport {
        try store.read { tx in
            let log: LogState
            do {
                log = try tx.logState()
            } catch ConsentError.integrity(let tailFailure) {
                // The tail is damaged; an earlier entry may be too. Report the first bad one.
                try scanForFirstFailure(tx)
                throw ConsentError.integrity(tailFailure)
            }
            let counts = try tx.derivedCounts()
            // Derived data behind the log (a crash, an older version) is rebuilt by the next
            // write or export; when it is all there, it is checked in the same pass.
            // Each is checked when it covers the log: a line index that is complete is checked
            // even when the tree hashes are behind.
            let derivedComplete: DerivedCheck = counts.indexed < log.size ? .none
                : counts.treeHashes >= MerkleTree.storedHashCount(Int64(log.size)) ? .all : .indexOnly
            let recorded = try tx.checkpoints()
            var wanted = Set(recorded.map(\.size))
            if let signed = log.signedHead { wanted.insert(signed.checkpoint.size) }
            // Every head the storage keeps (a folder: one per commit) is checked like a recorded
            // checkpoint: signed by the ledger's key, committing to this log's prefix.
            // Their failures come after the lines' (the first bad entry is wanted first).
            var heads: [SignedHead] = []
            var headsFailure: (any Error)?
            do {
                try tx.heads { head in
                    // A large commit's head line written twice is checked once.
                    if head != log.signedHead, head != heads.last { heads.append(head) }
                    wanted.insert(head.checkpoint.size)
                }
            } catch {
                headsFailure = error
            }
            let (replay, previous, headSeen, roots, streams, keys, sealed) = try checkLines(tx, to: log.size, head: log.recordedHead, derived: derivedComplete, roots: wanted)
            // The head's key is known once the lines gave every rotation.
            try checkSignedHead(log, keys: keys)
            let head = log.recordedHead
            guard headSeen, let lastSeq = replay.lastSeq else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: replay.eventCount + 1, seq: replay.lastSeq.map { $0 + 1 }, problem: "the log ends at seq \(replay.lastSeq.map(String.init) ?? "none") but seq \(head.seq) was acknowledged: acknowledged events are missing (truncated log)"))
            }
            try checkAttestations(tx, keys: keys)
            if let open = replay.incompleteCommand {
                throw ConsentError.integrity(IntegrityFailure(line: Int(open.first) + 1, seq: open.first, problem: "the command starting here is incomplete"))
            }
            guard replay.genesis == genesis else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: 1, seq: 0, problem: "the genesis event differs from the one the ledger was opened with"))
            }
            if let signed = log.signedHead, roots[signed.checkpoint.size] != signed.checkpoint.root {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed head commits to root \(signed.checkpoint.root.hex) at size \(signed.checkpoint.size), but the log's first \(signed.checkpoint.size) records hash to another root"))
            }
            try checkRecordedCheckpoints(recorded, roots: roots, size: Int64(replay.eventCount), keys: keys)
            if let headsFailure { throw headsFailure }
            try checkEarlierHeads(heads, roots: roots, keys: keys)
            try checkStoredMap(tx, streams, size: Int64(replay.eventCount))
            try checkSubjectRecords(tx, keys: keys, logSubjects: replay.subjects.filter { $0.value.erasedAt == nil }.keys,
                                    erased: Set(replay.subjects.filter { $0.value.erasedAt != nil }.keys), sealed: sealed)
            let now = clock(), skew = maximumClockSkew.milliseconds
            let ahead = log.last.event.at.millisecondsSinceEpoch - now.millisecondsSinceEpoch > skew
                ? ClockAhead(ledgerTime: log.last.event.at, seq: log.last.event.seq, clock: now, allowedSkewMilliseconds: skew) : nil
            return VerificationReport(events: replay.eventCount, subjects: replay.subjects.count, head: ChainHead(seq: lastSeq, hash: previous), ledgerName: genesis.ledgerName, publicKey: publicKey, keys: keys, torn: log.torn,
                                      clockCorrections: replay.clockCorrections, clockAhead: ahead)
        }
    }

    /// Each revoked key's window, from the seq it was compromised to its rotation, holds exactly
    /// the events its revocation attests: an event it signed there that the ledger did not
    /// re-attest (a line put in by whoever held the leaked key) is refused.
    func checkAttestations(_ tx: any LedgerReadTransaction, keys: KeySchedule) throws {
        let hasher = chain.hasher
        for revocation in keys.revocations {
            try tx.entries(Int(revocation.since)..<Int(revocation.until) + 1, batchSize: 4096, indexedKeys: false) { batch in
                for i in 0..<batch.count {
                    let seq = batch.seq(i)
                    let hash = try batch.withEntry(i) { line throws -> Digest in
                        hasher.sha256(UnsafeRawBufferPointer(try EventCodec.splitLine(line, decodeSignature: false).body))
                    }
                    guard hash == revocation.attested[seq - Int(revocation.since)] else {
                        throw ConsentError.integrity(IntegrityFailure(line: seq + 1, seq: UInt64(seq), problem: "signed by key \(revocation.keyID) after it was compromised (seq \(revocation.since) on), and not re-attested by its revocation at seq \(revocation.seq)"))
                    }
                }
            }
        }
    }

    /// Scans to `end` only to find the first bad line; throws it if there is one.
    private func scanForFirstFailure(_ tx: any LedgerReadTransaction) throws {
        _ = try checkLines(tx, to: Int.max, head: nil, derived: .none, roots: [])
    }

    /// The stored subject map, when it covers the whole log, must hold exactly what the log
    /// builds: the same root. (One that is behind is brought up to date by the next write.)
    private func checkStoredMap(_ tx: any LedgerReadTransaction, _ streams: LogChecker.StreamCheck?, size: Int64) throws {
        var streams = streams
        streams?.map.computeRoot()
        guard let streams, streams.version >= 2 else { return }
        guard streams.lastHasRoot else {
            throw ConsentError.integrity(IntegrityFailure(line: Int(size), seq: UInt64(size - 1), problem: "the log's last event carries no subject-map root (every commit ends with one)"))
        }
        guard let stored = try storedMap(tx), stored.coveredSize == size else { return }
        guard stored.map.rootHash == streams.map.rootHash else {
            throw mapFailure("its root \(stored.map.rootHash.hex) differs from \(streams.map.rootHash.hex), the root the log's events build")
        }
        // Every stored node, not only the root record: a node no read has reached yet is checked too.
        let entries: [(key: [UInt8], seq: UInt64)]
        do {
            entries = try stored.map.entries()
        } catch {
            throw mapFailure("\(error)")
        }
        guard entries.count == streams.newest.count, entries.allSatisfy({ streams.newest[$0.key] == $0.seq }) else {
            throw mapFailure("its entries differ from each stream's newest event in the log")
        }
    }

    /// Checks every line up to `end`: encoding, key id, signature and hash on all cores; sequence,
    /// links, rules and the recorded head in order. Computes the tree's roots at `roots` sizes
    /// from the lines.
    enum DerivedCheck { case none, indexOnly, all }

    private func checkLines(_ tx: any LedgerReadTransaction, to end: Int, head: ChainHead?, derived: DerivedCheck, roots: Set<Int64>) throws -> (LedgerReplay, Digest, Bool, [Int64: Digest], LogChecker.StreamCheck?, KeySchedule, [LogChecker.SealedReference]) {
        var checker = LogChecker(tx: tx, names: store.names, hasher: chain.hasher, signatures: verifier)
        checker.checkDerived = derived == .all
        checker.checkIndexOnly = derived == .indexOnly
        checker.rootsWanted = roots
        var progress = LogChecker.Progress(replay: LedgerReplay(catalog: catalog), previous: .zero)
        progress.streams = LogChecker.StreamCheck(version: version, hasher: chain.hasher)
        progress.keys = genesisSchedule
        progress.sealed = []
        let result = try checker.run(from: 0, to: end, head: head, progress: progress)
        return (result.replay, result.previous, result.headSeen, result.roots, result.streams, result.keys ?? genesisSchedule, result.sealed ?? [])
    }

    /// Every pseudonym in the log must have exactly one subject record whose id and salt hash to
    /// it: swapped, altered or missing records would make `status` answer for the wrong patient
    /// or for nobody. A record whose pseudonym has no events is allowed: its salt was saved by a
    /// command that failed before its events were appended. An erased subject has no record, and
    /// must have none: one that remains is an erasure left unfinished. Every sealed evidence
    /// reference of a subject with a record must open under the key the record gives; an erased
    /// subject's stay sealed.
    func checkSubjectRecords(_ tx: any LedgerReadTransaction, keys: KeySchedule, logSubjects: some Collection<SubjectRef>, erased: Set<SubjectRef> = [], sealed: [LogChecker.SealedReference] = []) throws {
        let place = "\(store.names.subjects) of \(store.names.location)"
        var recorded: [SubjectRef: SubjectID] = [:]
        var subjectKeys: [SubjectRef: SubjectKey] = [:]
        for (id, salt) in try subjectSalts(tx, keys: keys) {
            let ref = subjectRef(id: id.text, salt: salt)
            if !sealed.isEmpty { subjectKeys[ref] = subjectKey(id.text, salt: salt) }
            if erased.contains(ref) {
                throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject of pseudonym \(ref.value) was erased, but a record of it remains in \(place): the erasure was cut short; run `consentctl erase --subject` for that id again to finish it"))
            }
            if let other = recorded.updateValue(id, forKey: ref) {
                throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "two subject records in \(place) have the same pseudonym \(ref.value) (ids \(min(id, other).text.debugDescription) and \(max(id, other).text.debugDescription))"))
            }
        }
        let missing = logSubjects.filter { recorded[$0] == nil }
        if !missing.isEmpty {
            let sample = missing.map(\.value).sorted().prefix(3).joined(separator: ", ")
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "\(missing.count) pseudonym(s) in the log have no subject record in \(place) whose id and salt hash to them (\(sample)): subject records were altered, swapped or removed"))
        }
        for reference in sealed {
            guard let key = subjectKeys[reference.subject] else { continue }
            _ = try openEvidence(reference.evidence, seq: reference.seq, key: key)
        }
    }

    /// The heads of earlier commits that the storage keeps: each signed by the ledger's key and
    /// name, with the root of the log's first SIZE entries. The signatures are checked on all
    /// cores (a folder keeps one head per commit, nearly one per event in a log of one-command
    /// commits); the first head at fault, in log order, is reported.
    func checkEarlierHeads(_ heads: [SignedHead], roots: [Int64: Digest], keys: KeySchedule) throws {
        let failures = parallelMap(heads.count) { [self] i -> String? in
            do {
                try heads[i].verify(key: try noteKey(keys.forCheckpoint(size: heads[i].checkpoint.size).key), verifier: verifier)
                return nil
            } catch {
                return "\(error)"
            }
        }
        for (head, failure) in zip(heads, failures) {
            if let failure {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: head.seq, problem: "the head kept after entry \(head.seq) does not verify with the ledger's key: \(failure)"))
            }
            guard head.checkpoint.origin == genesis.ledgerName, roots[head.checkpoint.size] == head.checkpoint.root else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: head.seq, problem: "the head kept after entry \(head.seq) commits to root \(head.checkpoint.root.hex) of '\(head.checkpoint.origin)', but the log's first \(head.checkpoint.size) records hash to another root"))
            }
        }
    }

    /// Every checkpoint the ledger recorded must be signed by its key and commit to a prefix of
    /// this log: a signed checkpoint larger than the log means acknowledged events were cut
    /// off, even when the head was rewritten to match the shorter log.
    func checkRecordedCheckpoints(_ recorded: [IssuedCheckpoint], roots: [Int64: Digest], size: Int64, keys: KeySchedule) throws {
        let place = "\(store.names.checkpoints) of \(store.names.location)"
        for issued in recorded {
            let checkpoint: Checkpoint
            do {
                checkpoint = try Checkpoint(text: SignedNote.open(issued.note, key: try noteKey(keys.forCheckpoint(size: issued.size).key), verifier: verifier))
            } catch {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the recorded checkpoint of size \(issued.size) in \(place) does not verify with the ledger's key: \(error)"))
            }
            guard checkpoint.origin == genesis.ledgerName, checkpoint.size == issued.size else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the recorded checkpoint of size \(issued.size) in \(place) is for '\(checkpoint.origin)' at size \(checkpoint.size)"))
            }
            guard checkpoint.size <= size else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the ledger signed a checkpoint of \(checkpoint.size) records (in \(place)), but the log holds only \(size): signed events were removed from the end of the log"))
            }
            guard checkpoint.size == 0 || roots[checkpoint.size] == checkpoint.root else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed checkpoint of size \(checkpoint.size) (in \(place)) commits to root \(checkpoint.root.hex), but the log's first \(checkpoint.size) records hash to another root: the log was changed after it was signed"))
            }
        }
    }
}
