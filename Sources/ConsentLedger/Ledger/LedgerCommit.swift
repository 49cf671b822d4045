import ConsentDomain

/// The one commit path: every write (consent commands and catalogue publications) seals its
/// events onto the chain, appends them, writes the derived data and ends with a signed head.
extension Ledger {
    struct Committed {
        let cursor: LogCursor
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

    /// Appends `events` after the log's last complete command. Call under the exclusive lock,
    /// after ``checkHead(_:)`` and ``updateDerived(_:)``.
    ///
    /// The new root extends the frontier that the previous signed head vouches for
    /// (``trustedFrontier(_:)``), never a root read from derived data, so a corrupted
    /// `tree.hashes` is found here rather than signed.
    ///
    /// `streams` (format 2, from ``streamState(for:log:)``) links the events into their streams
    /// and gives the subject map whose new records are written with the derived data.
    func commit(_ events: [LedgerEvent], after log: LogState, signer: SodiumSigner, streams: (state: StreamState, nextIndex: Int64)?) throws -> Committed {
        var frontier = try trustedFrontier(log)
        let hasher = chain.hasher
        var state = streams?.state
        let (records, newHash): ([EventRecord], Digest)
        do {
            (records, newHash) = try chain.seal(events, after: chain.hash(ofBody: log.last.body), signer: signer, streams: &state)
        } catch {
            throw mapFailure("\(error)")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(records.count * 520)
        var ends: [Int] = []
        ends.reserveCapacity(records.count)
        for record in records {
            record.appendLine(to: &bytes)
            ends.append(bytes.count)
        }
        let head = ChainHead(seq: events.last!.seq, hash: newHash)
        // Durable in this order: the log, the derived data, then the head that vouches for both.
        let cursor = try store.append(bytes, lineCount: records.count, at: log.end)
        var locations: [LineLocation] = []
        var treeHashes: [Digest] = []
        bytes.withUnsafeBytes { all in
            var start = 0
            for (record, end) in zip(records, ends) {
                // The line without its newline is the Merkle tree's entry.
                let line = UnsafeRawBufferPointer(rebasing: all[start..<(end - 1)])
                locations.append(LineLocation(offset: log.end.offset + UInt64(start), length: UInt32(line.count), subject: StreamKey.of(record.event.payload)))
                treeHashes += frontier.append(MerkleTree.leafHash(line, hasher: hasher), hasher: hasher)
                start = end
            }
        }
        let signedHead = SignedHead.sign(
            Checkpoint(origin: genesis.ledgerName, size: frontier.size, root: frontier.root(hasher: hasher)),
            chainHash: newHash, key: try verifierKey, signer: signer)
        // From here the events are committed: a failure to write what follows them must not
        // report the command as failed (the next write rebuilds the derived data and signs a
        // head that covers these events).
        var mapRecords: (records: SubjectMapRecords, at: Int64)?
        if state != nil, let first = streams?.nextIndex {
            let appended = state!.map.takeNewRecords(firstIndex: first, coveringSize: frontier.size)
            mapRecords = (appended, first)
            // Records are appended, never rewritten: when they have grown far beyond the nodes
            // in use, the whole map is written afresh instead (and replaces the file at once).
            // The events are durable by now, so a map that cannot be read whole (damaged derived
            // data, found by the next read) is simply not compacted.
            if state!.map.wantsCompaction(recordCount: first + Int64(appended.count)), let all = try? state!.map.allRecords(coveringSize: frontier.size) {
                mapRecords = (all, 0)
            }
        }
        var warning: String?
        do {
            try store.writeDerived(locations: locations, at: log.end.lines, treeHashes: treeHashes, at: MerkleTree.storedHashCount(Int64(log.end.lines)), subjectMap: mapRecords)
            try store.writeHead(signedHead)
        } catch {
            warning = "events seq \(events.first!.seq)–\(head.seq) are durably appended, but writing the derived data or the head after them failed (\(error)); the next write repairs them"
        }
        let after = warning == nil ? state.map { ($0, (mapRecords?.at ?? 0) + Int64(mapRecords?.records.count ?? 0)) } : nil
        return Committed(cursor: cursor, head: head, signedHead: signedHead, frontier: frontier, warning: warning, streams: after)
    }

    /// The Merkle frontier of the whole log (up to its last complete command), built only from
    /// what is signed: the frontier of stored tree hashes at the signed head's size, checked
    /// against the head's root, then extended with the leaves of any complete lines past the
    /// head (a crash between the log's sync and the head's), each of whose signatures is checked.
    /// A ledger with an older, unsigned head starts from its newest recorded checkpoint, or from
    /// nothing.
    func trustedFrontier(_ log: LogState) throws -> MerkleFrontier {
        let hasher = chain.hasher
        var anchor: (size: Int64, root: Digest, what: String)?
        var remembered: MerkleFrontier?
        if let head = log.signedHead, let frontier = rememberedFrontier(for: head) {
            remembered = frontier
        } else if let head = log.signedHead {
            anchor = (head.checkpoint.size, head.checkpoint.root, "the signed head")
        } else if let recorded = try store.readCheckpoints().last(where: { $0.size > 0 && $0.size <= Int64(log.end.lines) }) {
            let checkpoint: Checkpoint
            do {
                checkpoint = try Checkpoint(text: SignedNote.open(recorded.note, key: try verifierKey, verifier: verifier))
            } catch {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the recorded checkpoint of size \(recorded.size) in \(store.checkpointsPlace) does not verify with the ledger's key: \(error)"))
            }
            anchor = (checkpoint.size, checkpoint.root, "the recorded checkpoint of size \(checkpoint.size)")
        }
        var frontier = remembered ?? MerkleFrontier()
        if remembered == nil, let anchor {
            frontier = try MerkleFrontier(size: anchor.size, read: readHashes)
            let root = frontier.root(hasher: hasher)
            guard root == anchor.root else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the stored tree hashes give root \(root.hex) at size \(anchor.size), but \(anchor.what) signs \(anchor.root.hex) (\(store.derivedRepair))"))
            }
        }
        guard frontier.size < Int64(log.end.lines) else { return frontier }
        var from = LogCursor.start
        if frontier.size > 0 {
            let n = Int(frontier.size)
            let previous = try store.readLineLocations((n - 1)..<n)[0]
            guard previous.offset < log.end.offset, UInt64(previous.length) < log.end.offset - previous.offset else {
                throw LedgerError.integrity(IntegrityFailure(line: n, seq: UInt64(n - 1), problem: "the line index places this line past the log's end (\(store.derivedRepair))"))
            }
            from = LogCursor(offset: previous.offset + UInt64(previous.length) + 1, lines: n)
        }
        try store.scan(from: from, to: log.end, batchSize: 4096, containing: nil) { batch in
            for i in 0..<batch.count {
                let line = batch.line(i)
                let record = try decode(line, number: batch.number(i))
                guard record.event.seq == UInt64(frontier.size) else {
                    throw LedgerError.integrity(IntegrityFailure(line: batch.number(i), seq: record.event.seq, problem: "expected seq \(frontier.size) past the signed head, found seq \(record.event.seq) (\(store.derivedRepair))"))
                }
                try checkSignature(record, line: batch.number(i))
                frontier.append(MerkleTree.leafHash(line, hasher: hasher), hasher: hasher)
            }
        }
        guard frontier.size == Int64(log.end.lines) else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the log past the signed head holds \(frontier.size) records, not \(log.end.lines) (\(store.derivedRepair))"))
        }
        return frontier
    }

    /// A signed head for the log as it stands (a ledger whose head is of the older unsigned
    /// form, being copied).
    func signHead(for log: LogState) throws -> SignedHead {
        SignedHead.sign(Checkpoint(origin: genesis.ledgerName, size: Int64(log.end.lines), root: try trustedRoot(log)),
                        chainHash: chain.hash(ofBody: log.last.body), key: try verifierKey, signer: try signingKey())
    }

    /// The root of the whole log, from signed data (``trustedFrontier(_:)``).
    func trustedRoot(_ log: LogState) throws -> Digest {
        if let head = log.signedHead, head.checkpoint.size == Int64(log.end.lines) { return head.checkpoint.root }
        return try trustedFrontier(log).root(hasher: chain.hasher)
    }
}
