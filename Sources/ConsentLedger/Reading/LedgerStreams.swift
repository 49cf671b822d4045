import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// Streams and the subject map (format 2): how a reader finds exactly one subject's events, or
/// the catalogue versions, without trusting any derived data. The map's root comes from the
/// log's last event (signed, and vouched for by the signed head); the map gives the stream's
/// newest event; each event names its predecessor by sequence number, and each line read is
/// proved to be at its position by the Merkle tree the signed head commits to.
extension Ledger {
    /// The subject map as stored, with the index its next record goes to.
    struct StoredMap {
        var map: SubjectMap
        var nextIndex: Int64
        /// The log size the stored map covers.
        let coveredSize: Int64
    }

    /// How far back from the end a root record is looked for: a crash leaves at most one
    /// unfinished write's records after the last root.
    private static let rootSearchLimit: Int64 = 1 << 20

    func mapFailure(_ problem: String, seq: UInt64? = nil) -> ConsentError {
        .integrity(IntegrityFailure(.derivedData, line: seq.map { Int($0) + 1 }, seq: seq, problem: "the subject map disagrees with the log: \(problem) (\(store.names.derivedRepair))"))
    }

    /// The newest complete root record of the stored map and the map it roots; nil when none is
    /// stored (a new or rebuilt store). Not yet checked against the log.
    func storedMap(_ tx: any LedgerReadTransaction) throws -> StoredMap? {
        let count = try tx.derivedCounts().subjectMapRecords
        var index = count - 1
        while index >= 0, count - index <= Self.rootSearchLimit {
            let record = try tx.subjectMapRecord(index)
            if SubjectMapRecord.isRoot(record) {
                let root: SubjectMapRecord.Root
                do {
                    root = try SubjectMapRecord.decodeRoot(record)
                } catch {
                    throw mapFailure("record \(index): \(error)")
                }
                let map = SubjectMap(hasher: chain.hasher, root: root, read: { try tx.subjectMapRecord($0) })
                return StoredMap(map: map, nextIndex: index + 1, coveredSize: root.coveredSize)
            }
            index -= 1
        }
        return nil
    }

    /// The subject map of the whole log, checked against the root the log's last event signs.
    func checkedMap(_ stored: StoredMap, log: LogState, keys: KeySchedule) throws -> StoredMap {
        var stored = stored
        try checkLastEvent(log, keys: keys)
        guard let root = log.last.stream.root else {
            throw ConsentError.integrity(IntegrityFailure(line: Int(log.last.event.seq) + 1, seq: log.last.event.seq, problem: "the log's last event carries no subject-map root"))
        }
        let built = stored.map.computeRoot()
        guard built == root else {
            throw mapFailure("its root \(built.hex) is not the root \(root.hex) that the log's last event signs", seq: log.last.event.seq)
        }
        return stored
    }

    /// The subject map of the view (format 2).
    func currentMap(_ view: LogView) throws -> StoredMap {
        guard let map = view.map else { throw ConsentError.invalidRequest("this ledger is of format version 1 and has no subject map") }
        return map
    }

    /// The log's last event is what every stream read starts from: it must be the signed head's
    /// (checked by ``checkHead(_:)``) or carry a valid signature of its own (a complete command
    /// past the head, left by a crash).
    func checkLastEvent(_ log: LogState, keys: KeySchedule) throws {
        if let head = log.signedHead, head.chainHead.seq == log.last.event.seq, head.chainHead.hash == chain.hash(ofBody: log.last.body) { return }
        try checkSignature(log.last, line: Int(log.last.event.seq) + 1, keys: keys)
    }

    /// One event of a stream, as read from the log.
    struct StreamEntry {
        let line: [UInt8]
        let record: EventRecord
        var seq: Int { Int(record.event.seq) }
    }

    /// Every event of stream `key` in the log, oldest first, each the event the stream names:
    /// the newest from the subject map, each earlier one by its successor's `streamPrev`. The
    /// lines are authenticated together, by the log's trusted root (the signed head's) computed
    /// from their leaves and the stored hashes between them, before any is handed out, so no
    /// derived file decides which events are the stream's. When that fails, each line is
    /// checked by its own inclusion proof, newest first, to name the first the log does not
    /// hold: the line whose `streamPrev` the walk followed before it was authenticated.
    /// A ledger of format 1 has no streams: its events are found through the line index.
    func streamEntries(_ key: [UInt8], _ view: LogView) throws -> [StreamEntry] {
        guard version >= 2 else { return try indexedEntries(key, view) }
        let stored = try currentMap(view)
        let newest: UInt64?
        do {
            newest = try stored.map.lookup(key).seq
        } catch {
            throw mapFailure("\(error)")
        }
        guard var seq = newest else { return [] }
        let checkpoint = try currentCheckpoint(view)
        var entries: [StreamEntry] = []
        // The lines read so far, newest first, each by its own inclusion proof: the first the log
        // does not hold is the one named, before anything a changed line led the walk to.
        func proveEachReadSoFar() throws {
            for entry in entries { _ = try checkedInclusionProof(record: Int64(entry.seq), line: entry.line, checkpoint: checkpoint, view) }
        }
        while true {
            guard seq < UInt64(view.size) else { throw mapFailure("it names seq \(seq), past the log's end", seq: seq) }
            let line: [UInt8]
            let record: EventRecord
            do {
                line = try view.tx.entry(Int(seq))
            } catch {
                try proveEachReadSoFar()
                throw error
            }
            do {
                record = try decode(line, number: Int(seq) + 1)
                guard record.event.seq == seq, StreamKey.of(record.event.payload) == key else {
                    throw ConsentError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the event at this position is not the stream's event it should be"))
                }
            } catch {
                try proveEachReadSoFar()
                _ = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint, view)
                throw error
            }
            entries.append(StreamEntry(line: line, record: record))
            guard let previous = record.stream.previous else { break }
            // The decoder refuses a `streamPrev` that is not earlier; the walk does not rely on it.
            guard previous < seq else {
                try proveEachReadSoFar()
                throw ConsentError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the event names seq \(previous) as its stream's previous event, which is not earlier"))
            }
            seq = previous
        }
        let leaves = entries.map { (record: Int64($0.seq), leaf: MerkleTree.leafHash($0.line, hasher: chain.hasher)) }
        let hasher = chain.hasher
        let together = try withAuthenticatedTreeHashes(view) { read in
            try MerkleTree.checkInclusions(leaves, size: checkpoint.size, root: checkpoint.root, hasher: hasher, read: read) ? true : nil
        }
        guard together != nil else {
            try proveEachReadSoFar()
            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the stored tree hashes do not lead the stream's events to the signed root (\(store.names.derivedRepair))"))
        }
        return entries.reversed()
    }

    /// Format 1: a stream's events through the line index, each checked to be the event the
    /// index says. The index is not authenticated; format 2 ledgers do not use this.
    private func indexedEntries(_ key: [UInt8], _ view: LogView) throws -> [StreamEntry] {
        var seqs = try view.tx.indexedEntries(of: key, below: view.indexTrusted)
        for (i, pending) in view.pendingKeys.enumerated() where pending == key { seqs.append(view.indexTrusted + i) }
        return try seqs.map { seq in
            let line = try view.tx.entry(seq)
            let record = try decode(line, number: seq + 1)
            guard record.event.seq == UInt64(seq), StreamKey.of(record.event.payload) == key else {
                throw ConsentError.integrity(IntegrityFailure(.derivedData, line: seq + 1, seq: UInt64(seq), problem: "the line index points at another event (\(store.names.derivedRepair))"))
            }
            return StreamEntry(line: line, record: record)
        }
    }

    /// What sealing new events of streams `keys` needs: each stream's newest event (from the
    /// map, whose root the log's last event signs) and the map itself. Nil for a format-1 ledger.
    func streamState(for keys: Set<[UInt8]>, _ view: LogView) throws -> (state: StreamState, nextIndex: Int64)? {
        guard version >= 2 else { return nil }
        let stored = try currentMap(view)
        var state = StreamState(newest: [:], map: stored.map)
        // The streams this process committed last, while the map is still the one it stored:
        // their nodes are resident, and read, if at all, through this transaction.
        if stored.nextIndex > 0, var remembered = takeRememberedStreams(nextIndex: stored.nextIndex, root: stored.map.rootHash) {
            let tx = view.tx
            remembered.map.reader = { try tx.subjectMapRecord($0) }
            state = remembered
        }
        // Bounded memory: the newest events of a million streams at most.
        if state.newest.count > 1_000_000 { state.newest = [:] }
        for key in keys where state.newest[key] == nil {
            let seq: UInt64?
            do {
                seq = try state.map.lookup(key).seq
            } catch {
                throw mapFailure("\(error)")
            }
            guard let seq else { continue }
            guard seq < UInt64(view.size) else { throw mapFailure("it names seq \(seq), past the log's end", seq: seq) }
            state.newest[key] = seq
        }
        return (state, stored.nextIndex)
    }
}
