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

    func mapFailure(_ problem: String, seq: UInt64? = nil) -> LedgerError {
        .integrity(IntegrityFailure(line: seq.map { Int($0) + 1 }, seq: seq, problem: "the subject map disagrees with the log: \(problem) (\(store.derivedRepair))"))
    }

    /// The newest complete root record of the stored map and the map it roots; nil when none is
    /// stored (a new or rebuilt store). Not yet checked against the log.
    func storedMap() throws -> StoredMap? {
        let count = try store.subjectMapCount()
        var index = count - 1
        while index >= 0, count - index <= Self.rootSearchLimit {
            let record = try store.readSubjectMap(index)
            if SubjectMapRecord.isRoot(record) {
                let root: SubjectMapRecord.Root
                do {
                    root = try SubjectMapRecord.decodeRoot(record)
                } catch {
                    throw mapFailure("record \(index): \(error)")
                }
                let store = self.store
                let map = SubjectMap(hasher: chain.hasher, root: root, read: { try store.readSubjectMap($0) })
                return StoredMap(map: map, nextIndex: index + 1, coveredSize: root.coveredSize)
            }
            index -= 1
        }
        return nil
    }

    /// The subject map of the whole log, checked against the root the log's last event signs.
    /// Call with derived data current.
    func currentMap(_ log: LogState) throws -> StoredMap {
        guard let stored = try storedMap(), stored.coveredSize == Int64(log.end.lines) else {
            throw mapFailure("it does not cover the log's \(log.end.lines) records")
        }
        try checkLastEvent(log)
        guard let root = log.last.stream.root else {
            throw LedgerError.integrity(IntegrityFailure(line: Int(log.last.event.seq) + 1, seq: log.last.event.seq, problem: "the log's last event carries no subject-map root"))
        }
        guard stored.map.rootHash == root else {
            throw mapFailure("its root \(stored.map.rootHash.hex) is not the root \(root.hex) that the log's last event signs", seq: log.last.event.seq)
        }
        return stored
    }

    /// The log's last event is what every stream read starts from: it must be the signed head's
    /// (checked by ``checkHead(_:)``) or carry a valid signature of its own (a complete command
    /// past the head, left by a crash).
    func checkLastEvent(_ log: LogState) throws {
        if let head = log.signedHead, head.chainHead.seq == log.last.event.seq, head.chainHead.hash == chain.hash(ofBody: log.last.body) { return }
        try checkSignature(log.last, line: Int(log.last.event.seq) + 1)
    }

    /// Brings the stored subject map up to the end of the log, from the lines it has not seen.
    /// Checks every root the log's events sign on the way. Call with the exclusive lock held and
    /// the line index current.
    func updateMap(_ log: LogState) throws {
        guard version >= 2 else { return }
        let end = Int64(log.end.lines)
        var stored = try storedMap()
        if let s = stored, s.coveredSize > end || s.coveredSize < 1 { stored = nil }
        if let s = stored, s.coveredSize == end { return }
        var map = stored?.map ?? SubjectMap(hasher: chain.hasher)
        let start = stored?.coveredSize ?? 0
        var from = LogCursor.start
        if start > 0 {
            let previous = try store.readLineLocations(Int(start - 1)..<Int(start))[0]
            guard previous.offset < log.end.offset, UInt64(previous.length) < log.end.offset - previous.offset else {
                throw LedgerError.integrity(IntegrityFailure(line: Int(start), seq: UInt64(start - 1), problem: "the line index places this line past the log's end (\(store.derivedRepair))"))
            }
            from = LogCursor(offset: previous.offset + UInt64(previous.length) + 1, lines: Int(start))
        }
        do {
            try store.scan(from: from, to: log.end, batchSize: 4096, containing: nil) { batch in
                for i in 0..<batch.count {
                    let record = try decode(batch.line(i), number: batch.number(i))
                    guard record.event.seq == record.event.command.last else { continue }
                    try map.set(StreamKey.of(record.event.payload), seq: record.event.seq)
                    if let root = record.stream.root {
                        let built = map.computeRoot()
                        guard built == root else {
                            throw mapFailure("after seq \(record.event.seq) it gives root \(built.hex), but the event signs \(root.hex)", seq: record.event.seq)
                        }
                    }
                }
            }
        } catch let damaged as SubjectMap.Damaged {
            throw mapFailure("\(damaged)")
        }
        let first = stored?.nextIndex ?? 0
        let records = map.takeNewRecords(firstIndex: first, coveringSize: end)
        try store.writeDerived(locations: [], at: log.end.lines, treeHashes: [], at: MerkleTree.storedHashCount(end), subjectMap: (records, first))
    }

    /// One event of a stream, as read from the log.
    struct StreamEntry {
        let line: [UInt8]
        let record: EventRecord
        var seq: Int { Int(record.event.seq) }
    }

    /// Every event of stream `key` in the log, oldest first, each the event the stream names:
    /// the newest from the subject map, each earlier one by its successor's `streamPrev`. Each
    /// line is authenticated by an inclusion proof against the log's trusted root (the signed
    /// head's), so no derived file decides which events are the stream's.
    /// A ledger of format 1 has no streams: its events are found through the line index.
    func streamEntries(_ key: [UInt8], log: LogState) throws -> [StreamEntry] {
        guard version >= 2 else { return try indexedEntries(key, log: log) }
        let stored = try currentMap(log)
        let newest: UInt64?
        do {
            newest = try stored.map.lookup(key).seq
        } catch {
            throw mapFailure("\(error)")
        }
        guard var seq = newest else { return [] }
        let checkpoint = try currentCheckpoint(log)
        var entries: [StreamEntry] = []
        while true {
            guard seq < UInt64(log.end.lines) else { throw mapFailure("it names seq \(seq), past the log's end", seq: seq) }
            let line = try readLine(seq: Int(seq))
            _ = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint)
            let record = try decode(line, number: Int(seq) + 1)
            guard record.event.seq == seq, StreamKey.of(record.event.payload) == key else {
                throw LedgerError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the event at this position is not the stream's event it should be"))
            }
            entries.append(StreamEntry(line: line, record: record))
            guard let previous = record.stream.previous else { break }
            seq = previous
        }
        return entries.reversed()
    }

    /// Format 1: a stream's events through the line index, each checked to be the event the
    /// index says. The index is not authenticated; format 2 ledgers do not use this.
    private func indexedEntries(_ key: [UInt8], log: LogState) throws -> [StreamEntry] {
        var entries: [StreamEntry] = []
        for (seq, location) in try store.findLineLocations(subject: key) where seq < log.end.lines {
            let line = try store.readLine(at: location)
            let record = try decode(line, number: seq + 1)
            guard record.event.seq == UInt64(seq), StreamKey.of(record.event.payload) == key else {
                throw LedgerError.integrity(IntegrityFailure(line: seq + 1, seq: UInt64(seq), problem: "the line index points at another event (\(store.derivedRepair))"))
            }
            entries.append(StreamEntry(line: line, record: record))
        }
        return entries
    }

    /// The line of `seq`, found through the line index (what is found is checked by the caller).
    func readLine(seq: Int) throws -> [UInt8] {
        try store.readLine(at: try store.readLineLocations(seq..<(seq + 1))[0])
    }

    /// What sealing new events of streams `keys` needs: each stream's newest event (from the
    /// map, whose root the log's last event signs) and the map itself. Nil for a format-1 ledger.
    func streamState(for keys: Set<[UInt8]>, log: LogState) throws -> (state: StreamState, nextIndex: Int64)? {
        guard version >= 2 else { return nil }
        let stored = try currentMap(log)
        var state = rememberedStreams(nextIndex: stored.nextIndex, root: stored.map.rootHash) ?? StreamState(newest: [:], map: stored.map)
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
            guard seq < UInt64(log.end.lines) else { throw mapFailure("it names seq \(seq), past the log's end", seq: seq) }
            state.newest[key] = seq
        }
        return (state, stored.nextIndex)
    }
}
