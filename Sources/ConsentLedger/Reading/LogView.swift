import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// One transaction's view of the log, with the derived data caught up in memory: what a
/// storage holds may lack the newest commits (a crash before it was synced, an older version
/// that did not write it), and a read never writes, so what is missing is computed from the log
/// here, for this transaction only. The next commit makes it durable
/// (``pendingDerived(newKeys:newHashes:)``).
package struct LogView {
    package let tx: any LedgerReadTransaction
    package let log: LogState
    /// Stored per-subject index entries trusted (below the head and the log's end), and the
    /// stream keys of the entries after them.
    package let indexTrusted: Int
    package let pendingKeys: [[UInt8]]
    /// Stored tree hashes trusted, and the hashes after them, from the entries.
    package let treeTrusted: Int64
    package let pendingTree: [Digest]
    /// Format 2: the subject map of the whole log, checked against the root its last event
    /// signs, with the index of the next stored record.
    var map: Ledger.StoredMap?
    /// Which key signs which event and checkpoint of the log (``Ledger/keySchedule(_:map:size:)``).
    package var keys: KeySchedule

    package var size: Int { log.size }

    /// Tree hashes by storage index: stored ones below ``treeTrusted``, computed ones above.
    package func treeHashes(_ indexes: [Int64]) throws -> [Digest] {
        if indexes.allSatisfy({ $0 < treeTrusted }) { return try tx.treeHashes(indexes) }
        return try indexes.map { index in
            if index < treeTrusted { return try tx.treeHashes([index])[0] }
            let i = index - treeTrusted
            guard i < Int64(pendingTree.count) else {
                throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the tree has no hash at index \(index)"))
            }
            return pendingTree[Int(i)]
        }
    }

    /// The derived data a commit of new entries (with these stream keys and tree hashes) writes:
    /// what the storage lacks, then the new entries'.
    package func pendingDerived(newKeys: [[UInt8]], newHashes: [Digest]) -> DerivedUpdate {
        DerivedUpdate(indexFrom: indexTrusted, streamKeys: pendingKeys + newKeys, treeFrom: treeTrusted, treeHashes: pendingTree + newHashes, subjectMap: nil)
    }
}

extension Ledger {
    /// The view of the log in `tx`: its state, checked against the recorded head, and derived
    /// data caught up in memory.
    func view(_ tx: any LedgerReadTransaction) throws -> LogView {
        let log = try tx.logState()
        // The head is checked once the key schedule is known: the rotations are found through
        // the subject map, brought up to date below (and itself checked after the head).
        let counts = try tx.derivedCounts()
        let acknowledged = Int(log.recordedHead.seq) + 1
        // Derived entries past the head may be from a write a crash cut short: not trusted.
        let indexTrusted = min(counts.indexed, acknowledged, log.size)
        var trustedTreeSize = min(acknowledged, log.size)
        while trustedTreeSize > 0, counts.treeHashes < MerkleTree.storedHashCount(Int64(trustedTreeSize)) { trustedTreeSize -= 1 }
        var stored: StoredMap?
        if version >= 2 {
            stored = try storedMap(tx)
            if let s = stored, s.coveredSize > Int64(log.size) || s.coveredSize < 1 { stored = nil }
        }
        let mapCovered = version >= 2 ? Int(stored?.coveredSize ?? 0) : log.size
        let from = min(indexTrusted, trustedTreeSize, mapCovered)
        var pendingKeys: [[UInt8]] = []
        var pendingTree: [Digest] = []
        var map = stored?.map ?? SubjectMap(hasher: chain.hasher)
        if from < log.size {
            // Rebuilt from the log's entries onto the stored frontier; before anything is signed
            // from it, ``trustedFrontier(_:)`` checks that frontier against the signed head.
            var frontier = try MerkleFrontier(size: Int64(trustedTreeSize), read: tx.treeHashes)
            let hasher = chain.hasher
            do {
                try tx.entries(from..<log.size, batchSize: 4096, indexedKeys: false) { batch in
                    for i in 0..<batch.count {
                        let seq = batch.seq(i)
                        let line = batch.entry(i)
                        let record = try decode(line, number: seq + 1)
                        guard record.event.seq == UInt64(seq) else {
                            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: seq + 1, seq: record.event.seq, problem: "line \(seq + 1) holds seq \(record.event.seq), expected seq \(seq) (\(store.names.derivedRepair))"))
                        }
                        let key = StreamKey.of(record.event.payload)
                        if seq >= indexTrusted { pendingKeys.append(key) }
                        if seq >= trustedTreeSize { pendingTree += frontier.append(MerkleTree.leafHash(line, hasher: hasher), hasher: hasher) }
                        if seq >= mapCovered, version >= 2, record.event.seq == record.event.command.last {
                            try map.set(key, seq: record.event.seq)
                            if let root = record.stream.root {
                                let built = map.computeRoot()
                                guard built == root else {
                                    throw mapFailure("after seq \(record.event.seq) it gives root \(built.hex), but the event signs \(root.hex)", seq: record.event.seq)
                                }
                            }
                        }
                    }
                }
            } catch let damaged as SubjectMap.Damaged {
                throw mapFailure("\(damaged)")
            }
        }
        let keys = try keySchedule(tx, map: version >= 2 ? map : nil, size: log.size)
        try checkHead(log, keys: keys)
        var view = LogView(tx: tx, log: log, indexTrusted: indexTrusted, pendingKeys: pendingKeys, treeTrusted: MerkleTree.storedHashCount(Int64(trustedTreeSize)), pendingTree: pendingTree, map: nil, keys: keys)
        if version >= 2 {
            view.map = try checkedMap(StoredMap(map: map, nextIndex: stored?.nextIndex ?? 0, coveredSize: Int64(log.size)), log: log, keys: keys)
        }
        return view
    }

    /// Runs `body` in a read transaction, with the view of the log in it.
    package func reading<T>(_ body: (LogView) throws -> T) throws -> T {
        try store.read { tx in try body(try view(tx)) }
    }
}
