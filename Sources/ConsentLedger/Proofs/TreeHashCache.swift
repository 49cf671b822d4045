import Synchronization
import TransparencyLog

/// Tree hashes this process has authenticated: each was read from the storage for a check that
/// then led to a signed root. A complete subtree's hash never changes in an append-only log, so
/// later checks take it from here instead of reading it again. Each check still computes the
/// signed root it is checked against, so a hash kept here can make a check fail (a log whose
/// history was rewritten under the same key), never pass; the ledger then forgets them all and
/// checks again from the storage alone.
///
/// Only the upper part of the tree is kept. The events of one stream lie far apart in the log, so
/// their paths share the upper subtrees; the lower ones lie next to each leaf in the storage and
/// are read with it in one call anyway. When more than `capacity` hashes would be kept, the lowest
/// level kept goes up by one.
final class TreeHashCache: Sendable {
    private struct State {
        var hashes: [Int64: Digest] = [:]
        var minimumLevel: Int
    }

    private let state: Mutex<State>
    let capacity: Int

    init(minimumLevel: Int = 6, capacity: Int = 1 << 18) {
        state = Mutex(State(minimumLevel: minimumLevel))
        self.capacity = capacity
    }

    /// What one check read: the hashes it took from memory, and those it read from the storage
    /// (to be kept once the check succeeds).
    struct Reading {
        var fetched: [(index: Int64, hash: Digest)] = []
        var usedKept = false
    }

    /// Reads `indexes`: those kept here from memory, the rest through `read`, in one call.
    func read(_ indexes: [Int64], through read: MerkleTree.HashReader, _ reading: inout Reading) throws -> [Digest] {
        var hashes = [Digest?](repeating: nil, count: indexes.count)
        state.withLock { state in
            guard !state.hashes.isEmpty else { return }
            for (i, index) in indexes.enumerated() { hashes[i] = state.hashes[index] }
        }
        let missing = indexes.indices.filter { hashes[$0] == nil }
        if missing.count < indexes.count { reading.usedKept = true }
        if !missing.isEmpty {
            let stored = try read(missing.map { indexes[$0] })
            for (k, i) in missing.enumerated() where k < stored.count {
                hashes[i] = stored[k]
                reading.fetched.append((indexes[i], stored[k]))
            }
            // A reader that returned too few hashes: the check fails on the count.
            if stored.count < missing.count { return hashes.prefix { $0 != nil }.map { $0! } }
        }
        return hashes.map { $0! }
    }

    /// Keeps the upper-level hashes a successful check read.
    func keep(_ reading: Reading) {
        guard !reading.fetched.isEmpty else { return }
        state.withLock { state in
            for (index, hash) in reading.fetched where MerkleTree.splitStoredHashIndex(index).level >= state.minimumLevel {
                state.hashes[index] = hash
            }
            while state.hashes.count > capacity {
                state.minimumLevel += 1
                let level = state.minimumLevel
                state.hashes = state.hashes.filter { MerkleTree.splitStoredHashIndex($0.key).level >= level }
            }
        }
    }

    func removeAll() {
        state.withLock { $0.hashes = [:] }
    }

    /// The hashes kept, by storage index.
    var snapshot: [Int64: Digest] {
        state.withLock { $0.hashes }
    }

    /// How many hashes are kept, and the lowest level kept.
    var kept: (count: Int, minimumLevel: Int) {
        state.withLock { ($0.hashes.count, $0.minimumLevel) }
    }
}

extension Ledger {
    /// Runs `check` with a reader of tree hashes that takes those this process authenticated
    /// before from memory (``TreeHashCache``) and the rest from the view. A check that succeeds
    /// (returns non-nil) keeps what it read. One that fails after taking hashes from memory runs
    /// again on the view alone, the kept hashes forgotten: what it finds then is the answer.
    func withAuthenticatedTreeHashes<T>(_ view: LogView, _ check: (MerkleTree.HashReader) throws -> T?) throws -> T? {
        let cache = treeHashCache
        var reading = TreeHashCache.Reading()
        if let result = try check({ try cache.read($0, through: view.treeHashes, &reading) }) {
            cache.keep(reading)
            return result
        }
        guard reading.usedKept else { return nil }
        cache.removeAll()
        return try check(view.treeHashes)
    }
}
