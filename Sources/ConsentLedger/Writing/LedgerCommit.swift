import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// The one commit path: every write (consent commands and catalogue publications) seals its
/// events onto the chain, appends them, writes the derived data and ends with a signed head.
extension Ledger {
    struct Committed {
        /// The log's size after the commit.
        let size: Int
        let head: ChainHead
        let signedHead: SignedHead
        /// The frontier at the new head's size.
        let frontier: MerkleFrontier
        /// Set when the events are durable but the derived data or the head after them could
        /// not be written; the command still succeeded (see ``ExecutionReport/warning``).
        let warning: String?
        /// The streams after the commit, with the index of the subject map's next record.
        let streams: (state: StreamState, nextIndex: Int64)?
    }

    /// Commits `events` after the log's last complete commit, in the write transaction `tx`
    /// whose view is `view`, with the subject records they first use. The storage makes the
    /// entries, the derived data (what the view caught up in memory, then the new entries') and
    /// the signed head durable in one call.
    ///
    /// The new root extends the frontier that the previous signed head vouches for
    /// (``trustedFrontier(_:)``), never a root read from derived data, so a corrupted
    /// `tree.hashes` is found here rather than signed.
    ///
    /// `streams` (format 2, from ``streamState(for:_:)``) links the events into their streams
    /// and gives the subject map whose new records are written with the derived data.
    ///
    /// `signer` must hold the key in force; a key rotation (its events signed by the key it
    /// retires) gives the new key as `headSigner`, since the head after it is the new key's.
    func commit(_ events: [LedgerEvent], _ view: LogView, _ tx: any LedgerWriteTransaction, signer: any EventSigner, headSigner: (any EventSigner)? = nil, streams: consuming (state: StreamState, nextIndex: Int64)?, subjects: [(subjectID: SubjectID, record: SubjectRecord)], erasing: [SubjectID] = [], revising: [(subjectID: SubjectID, record: SubjectRecord?)] = []) throws -> Committed {
        // Consumed, not copied: sealing adds to the streams' newest events, and a second
        // reference would make that copy the newest event of every stream met so far.
        let nextIndex = streams?.nextIndex
        let sealer = self.sealer(view, signer: signer, streams: (consume streams)?.state)
        try seal(events, with: sealer)
        return try commit(sealed: sealer, view, tx, signer: signer, headSigner: headSigner, mapNextIndex: nextIndex, subjects: subjects, erasing: erasing, revising: revising)
    }

    /// A sealer of events after the log's last complete commit (``ChainSealer``): a write hands
    /// it the events it decides as it goes, then commits them with
    /// ``commit(sealed:_:_:signer:headSigner:mapNextIndex:subjects:erasing:revising:)``.
    func sealer(_ view: LogView, signer: any EventSigner, streams: consuming StreamState?) -> ChainSealer {
        ChainSealer(chain: chain, after: chain.hash(ofBody: view.log.last.body), signer: signer, streams: streams)
    }

    /// Hands `events` to `sealer`, in order. Its only failure is the subject map's.
    func seal(_ events: [LedgerEvent], with sealer: ChainSealer) throws {
        do {
            for event in events { try sealer.append(event) }
        } catch {
            throw mapFailure("\(error)")
        }
    }

    /// Commits the events `sealer` was given (see above); `mapNextIndex` is the index of the
    /// subject map's next record, with the streams the sealer was made with.
    func commit(sealed sealer: ChainSealer, _ view: LogView, _ tx: any LedgerWriteTransaction, signer: any EventSigner, headSigner: (any EventSigner)? = nil, mapNextIndex nextIndex: Int64?, subjects: [(subjectID: SubjectID, record: SubjectRecord)], erasing: [SubjectID] = [], revising: [(subjectID: SubjectID, record: SubjectRecord?)] = []) throws -> Committed {
        precondition(sealer.count > 0, "a commit appends events")
        let log = view.log
        let inForce = view.keys.current
        guard signer.publicKey == inForce.key else {
            // Another process rotated the key since this one unlocked it: unlock again next time.
            memory.withLock { $0.signer = nil }
            throw ConsentError.conflict("the ledger's key was rotated (at seq \(inForce.rotation ?? 0)) after this process unlocked the key it retired; nothing was written: try again, and the key in force (\(inForce.keyID)) is unlocked")
        }
        var frontier = try trustedFrontier(view)
        let hasher = chain.hasher
        let (sealed, newHash): ([SealedEntry], Digest)
        var state: StreamState?
        do {
            (sealed, newHash, state) = try sealer.finish()
        } catch {
            throw mapFailure("\(error)")
        }
        var entries: [[UInt8]] = []
        entries.reserveCapacity(sealed.count)
        var keys: [[UInt8]] = []
        keys.reserveCapacity(sealed.count)
        var treeHashes: [Digest] = []
        for entry in sealed {
            keys.append(entry.streamKey)
            treeHashes += frontier.append(entry.leafHash, hasher: hasher)
            entries.append(entry.line)
        }
        let (firstSeq, lastSeq) = (sealed.first!.record.event.seq, sealed.last!.record.event.seq)
        let head = ChainHead(seq: lastSeq, hash: newHash)
        let headSigner = headSigner ?? signer
        let signedHead = SignedHead.sign(
            Checkpoint(origin: genesis.ledgerName, size: frontier.size, root: frontier.root(hasher: hasher)),
            chainHash: newHash, key: try noteKey(headSigner.publicKey), signer: headSigner)
        var derived = view.pendingDerived(newKeys: keys, newHashes: treeHashes)
        if state != nil, let first = nextIndex {
            let appended = state!.map.takeNewRecords(firstIndex: first, coveringSize: frontier.size)
            derived.subjectMap = (appended, first)
            // Records are appended, never rewritten: when they have grown far beyond the nodes
            // in use, the whole map is written afresh instead (and replaces the old one at
            // once), unless the storage makes that copy itself, off the commit path, and is
            // not late with it. A map that cannot be read whole (damaged derived data, found by
            // the next read) is simply not compacted.
            let records = first + Int64(appended.count)
            if state!.map.wantsCompaction(recordCount: records), !tx.compactsSubjectMapInBackground || state!.map.compactionOverdue(recordCount: records),
               let all = try? state!.map.allRecords(coveringSize: frontier.size) {
                derived.subjectMap = (all, 0)
            }
        }
        let warning = try tx.commit(LedgerCommit(firstSeq: log.size, entries: entries, derived: derived, subjects: subjects, head: signedHead, erasedSubjects: erasing, revisedSubjects: revising)).map {
            "events seq \(firstSeq)–\(head.seq) are durably appended, but writing the derived data or the head after them failed (\($0)); the next write repairs them"
        }
        let after = warning == nil ? state.map { ($0, (derived.subjectMap?.at ?? 0) + Int64(derived.subjectMap?.records.count ?? 0)) } : nil
        return Committed(size: log.size + sealed.count, head: head, signedHead: signedHead, frontier: frontier, warning: warning, streams: after)
    }

    /// The Merkle frontier of the whole log (up to its last complete command), built only from
    /// what is signed: the frontier of stored tree hashes at the signed head's size, checked
    /// against the head's root, then extended with the leaves of any complete lines past the
    /// head (a crash between the log's sync and the head's), each of whose signatures is checked.
    /// A ledger with an older, unsigned head starts from its newest recorded checkpoint, or from
    /// nothing.
    func trustedFrontier(_ view: LogView) throws -> MerkleFrontier {
        let log = view.log
        let hasher = chain.hasher
        var anchor: (size: Int64, root: Digest, what: String)?
        var remembered: MerkleFrontier?
        if let head = log.signedHead, let frontier = rememberedFrontier(for: head) {
            remembered = frontier
        } else if let head = log.signedHead {
            anchor = (head.checkpoint.size, head.checkpoint.root, "the signed head")
        } else if let recorded = try view.tx.checkpoints().last(where: { $0.size > 0 && $0.size <= Int64(log.size) }) {
            let checkpoint: Checkpoint
            do {
                checkpoint = try Checkpoint(text: SignedNote.open(recorded.note, key: try noteKey(view.keys.forCheckpoint(size: recorded.size).key), verifier: verifier))
            } catch {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the recorded checkpoint of size \(recorded.size) in \(store.names.checkpoints) does not verify with the ledger's key: \(error)"))
            }
            anchor = (checkpoint.size, checkpoint.root, "the recorded checkpoint of size \(checkpoint.size)")
        }
        var frontier = remembered ?? MerkleFrontier()
        if remembered == nil, let anchor {
            frontier = try MerkleFrontier(size: anchor.size, read: view.treeHashes)
            let root = frontier.root(hasher: hasher)
            guard root == anchor.root else {
                throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the stored tree hashes give root \(root.hex) at size \(anchor.size), but \(anchor.what) signs \(anchor.root.hex) (\(store.names.derivedRepair))"))
            }
        }
        guard frontier.size < Int64(log.size) else { return frontier }
        try view.tx.entries(Int(frontier.size)..<log.size, batchSize: 4096, indexedKeys: false) { batch in
            for i in 0..<batch.count {
                let line = batch.entry(i)
                let record = try decode(line, number: batch.seq(i) + 1)
                guard record.event.seq == UInt64(frontier.size) else {
                    throw ConsentError.integrity(IntegrityFailure(.derivedData, line: batch.seq(i) + 1, seq: record.event.seq, problem: "expected seq \(frontier.size) past the signed head, found seq \(record.event.seq) (\(store.names.derivedRepair))"))
                }
                try checkSignature(record, line: batch.seq(i) + 1, keys: view.keys)
                frontier.append(MerkleTree.leafHash(line, hasher: hasher), hasher: hasher)
            }
        }
        guard frontier.size == Int64(log.size) else {
            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the log past the signed head holds \(frontier.size) records, not \(log.size) (\(store.names.derivedRepair))"))
        }
        return frontier
    }

    /// A signed head for the log as it stands (a ledger whose head is of the older unsigned
    /// form, being copied).
    func signHead(for view: LogView) throws -> SignedHead {
        let signer = try signingKey()
        return SignedHead.sign(Checkpoint(origin: genesis.ledgerName, size: Int64(view.size), root: try trustedRoot(view)),
                               chainHash: chain.hash(ofBody: view.log.last.body), key: try noteKey(signer.publicKey), signer: signer)
    }

    /// The root of the whole log, from signed data (``trustedFrontier(_:)``).
    func trustedRoot(_ view: LogView) throws -> Digest {
        if let head = view.log.signedHead, head.checkpoint.size == Int64(view.size) { return head.checkpoint.root }
        return try trustedFrontier(view).root(hasher: chain.hasher)
    }
}
