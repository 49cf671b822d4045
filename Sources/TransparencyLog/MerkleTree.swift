/// The RFC 6962 (RFC 9162 section 2.1) Merkle tree over the log's entries, with the storage
/// layout and proof algorithms of Go's `golang.org/x/mod/sumdb/tlog`, ported function by
/// function so that proofs made here check with `tlog.CheckRecord` and `tlog.CheckTree`.
///
/// - The entry of record n (0-based, the event with seq n) is its log line without the newline.
/// - Leaf hash: SHA-256(0x00 ‖ entry). Node hash: SHA-256(0x01 ‖ left ‖ right).
/// - Every complete subtree's hash is stored once, at ``storedHashIndex(level:n:)``: the hash of
///   the n-th subtree of 2^level leaves. A tree of any size is then hashed, and any proof made,
///   from O(log n) stored hashes.
public enum MerkleTree {
    /// Reads stored hashes by storage index.
    public typealias HashReader = ([Int64]) throws -> [Digest]

    public static func leafHash(_ entry: UnsafeRawBufferPointer, hasher: any SHA256Hasher) -> Digest {
        // Copied with one `memcpy`: the generic initialisation it replaced copied a byte at a
        // time, 12 instructions a byte, and every line of a commit and of a verify is hashed.
        withUnsafeTemporaryAllocation(byteCount: entry.count + 1, alignment: 1) { buffer in
            buffer[0] = 0
            if let source = entry.baseAddress { (buffer.baseAddress! + 1).copyMemory(from: source, byteCount: entry.count) }
            return hasher.sha256(UnsafeRawBufferPointer(buffer))
        }
    }

    public static func leafHash(_ entry: [UInt8], hasher: any SHA256Hasher) -> Digest {
        entry.withUnsafeBytes { leafHash($0, hasher: hasher) }
    }

    public static func nodeHash(_ left: Digest, _ right: Digest, hasher: any SHA256Hasher) -> Digest {
        // On the stack: proofs and verify hash millions of nodes.
        withUnsafeTemporaryAllocation(byteCount: 65, alignment: 8) { buffer in
            buffer[0] = 1
            left.copyBytes(to: buffer.baseAddress! + 1)
            right.copyBytes(to: buffer.baseAddress! + 33)
            return hasher.sha256(UnsafeRawBufferPointer(buffer))
        }
    }

    /// The largest power of two smaller than n (n > 1), and its log2.
    static func maxPow2(_ n: Int64) -> (k: Int64, level: Int) {
        var level = 0
        while (Int64(1) << (level + 1)) < n { level += 1 }
        return (Int64(1) << level, level)
    }

    /// Where the hash of the n-th subtree of 2^level leaves is stored.
    public static func storedHashIndex(level: Int, n: Int64) -> Int64 {
        // Level L's n-th hash is written right after level L+1's 2n+1-th hash; work down to
        // level 0, where the n-th hash is at n + n/2 + n/4 + …, then add back the levels.
        var n = n
        for _ in stride(from: level, to: 0, by: -1) { n = 2 * n + 1 }
        var i: Int64 = 0
        while n > 0 {
            i += n
            n >>= 1
        }
        return i + Int64(level)
    }

    /// How many hashes are stored for a tree of n records.
    public static func storedHashCount(_ n: Int64) -> Int64 {
        guard n > 0 else { return 0 }
        var count = storedHashIndex(level: 0, n: n - 1) + 1
        var i = UInt64(n - 1)
        while i & 1 != 0 {
            count += 1
            i >>= 1
        }
        return count
    }

    /// The level and n of the subtree whose hash is stored at `index`: the inverse of
    /// ``storedHashIndex(level:n:)`` (tlog's `SplitStoredHashIndex`).
    public static func splitStoredHashIndex(_ index: Int64) -> (level: Int, n: Int64) {
        // storedHashIndex(0, n) < 2n, so the record whose hashes hold `index` is in
        // [index/2, index/2 + log2(index)]; record n adds 1 + trailingZeros(n + 1) hashes.
        var n = index / 2
        var indexN = storedHashIndex(level: 0, n: n)
        precondition(indexN <= index, "tlog: bad math in splitStoredHashIndex")
        while true {
            let next = indexN + 1 + Int64((UInt64(n) + 1).trailingZeroBitCount)
            if next > index { break }
            n += 1
            indexN = next
        }
        let level = Int(index - indexN)
        return (level, n >> level)
    }

    /// The hashes to store when record n, with leaf hash `leaf`, is appended: the leaf, then the
    /// hash of every subtree it completes. Reads the left siblings through `read`.
    public static func storedHashes(forRecord n: Int64, leaf: Digest, hasher: any SHA256Hasher, read: HashReader) throws -> [Digest] {
        var hashes = [leaf]
        let m = (UInt64(n) + 1).trailingZeroBitCount
        var indexes = [Int64](repeating: 0, count: m)
        for i in 0..<m {
            indexes[m - 1 - i] = storedHashIndex(level: i, n: (n >> i) - 1)
        }
        let old = try read(indexes)
        var h = leaf
        for i in 0..<m {
            h = nodeHash(old[m - 1 - i], h, hasher: hasher)
            hashes.append(h)
        }
        return hashes
    }

    // MARK: - Tree hash

    static func subTreeIndex(_ lo: Int64, _ hi: Int64, _ need: inout [Int64]) {
        var lo = lo
        while lo < hi {
            let (k, level) = maxPow2(hi - lo + 1)
            precondition(lo & (k - 1) == 0, "tlog: bad math in subTreeIndex")
            need.append(storedHashIndex(level: level, n: lo >> level))
            lo += k
        }
    }

    static func subTreeHash(_ lo: Int64, _ hi: Int64, _ hashes: inout ArraySlice<Digest>, hasher: any SHA256Hasher) throws(ProofError) -> Digest {
        var lo = lo
        var count = 0
        while lo < hi {
            let (k, _) = maxPow2(hi - lo + 1)
            count += 1
            lo += k
        }
        guard hashes.count >= count, count > 0 else { throw ProofError("not enough hashes") }
        let taken = Array(hashes.prefix(count))
        hashes = hashes.dropFirst(count)
        var h = taken[count - 1]
        for i in stride(from: count - 2, through: 0, by: -1) { h = nodeHash(taken[i], h, hasher: hasher) }
        return h
    }

    /// The root hash of the tree of the first n records (n ≥ 1).
    public static func treeHash(size n: Int64, hasher: any SHA256Hasher, read: HashReader) throws -> Digest {
        precondition(n > 0)
        var indexes: [Int64] = []
        subTreeIndex(0, n, &indexes)
        var hashes = try read(indexes)[...]
        return try subTreeHash(0, n, &hashes, hasher: hasher)
    }

    // MARK: - Inclusion proofs

    static func leafProofIndex(_ lo: Int64, _ hi: Int64, _ n: Int64, _ need: inout [Int64]) {
        guard lo + 1 != hi else { return }
        let (k, _) = maxPow2(hi - lo)
        if n < lo + k {
            leafProofIndex(lo, lo + k, n, &need)
            subTreeIndex(lo + k, hi, &need)
        } else {
            subTreeIndex(lo, lo + k, &need)
            leafProofIndex(lo + k, hi, n, &need)
        }
    }

    static func leafProof(_ lo: Int64, _ hi: Int64, _ n: Int64, _ hashes: inout ArraySlice<Digest>, hasher: any SHA256Hasher) throws(ProofError) -> [Digest] {
        guard lo + 1 != hi else { return [] }
        let (k, _) = maxPow2(hi - lo)
        var proof: [Digest]
        let sibling: Digest
        if n < lo + k {
            proof = try leafProof(lo, lo + k, n, &hashes, hasher: hasher)
            sibling = try subTreeHash(lo + k, hi, &hashes, hasher: hasher)
        } else {
            sibling = try subTreeHash(lo, lo + k, &hashes, hasher: hasher)
            proof = try leafProof(lo + k, hi, n, &hashes, hasher: hasher)
        }
        proof.append(sibling)
        return proof
    }

    /// The inclusion proof (RFC 6962 audit path, leaf end first) of record n in the tree of
    /// `size` records.
    public static func inclusionProof(record n: Int64, size: Int64, hasher: any SHA256Hasher, read: HashReader) throws -> [Digest] {
        guard n >= 0, n < size else { throw ProofError("record \(n) is not in a tree of \(size)") }
        var indexes: [Int64] = []
        leafProofIndex(0, size, n, &indexes)
        var hashes = try read(indexes)[...]
        return try leafProof(0, size, n, &hashes, hasher: hasher)
    }

    static func runInclusionProof(_ proof: ArraySlice<Digest>, _ lo: Int64, _ hi: Int64, _ n: Int64, _ leaf: Digest, hasher: any SHA256Hasher) throws(ProofError) -> Digest {
        if lo + 1 == hi {
            guard proof.isEmpty else { throw ProofError("inclusion proof is too long") }
            return leaf
        }
        guard let last = proof.last else { throw ProofError("inclusion proof is too short") }
        let (k, _) = maxPow2(hi - lo)
        if n < lo + k {
            return nodeHash(try runInclusionProof(proof.dropLast(), lo, lo + k, n, leaf, hasher: hasher), last, hasher: hasher)
        }
        return nodeHash(last, try runInclusionProof(proof.dropLast(), lo + k, hi, n, leaf, hasher: hasher), hasher: hasher)
    }

    /// Checks that `proof` shows record n with leaf hash `leaf` in the tree of `size` records
    /// whose root is `root`.
    public static func checkInclusion(_ proof: [Digest], record n: Int64, leaf: Digest, size: Int64, root: Digest, hasher: any SHA256Hasher) -> Bool {
        guard n >= 0, n < size, let computed = try? runInclusionProof(proof[...], 0, size, n, leaf, hasher: hasher) else { return false }
        return computed == root
    }

    // MARK: - Several records at once

    /// The stored hashes that, with the leaves of `records` (sorted, distinct, all in
    /// `lo..<hi`), give the hash of the subtree `lo..<hi`: those of the subtrees holding none of
    /// them, in the order ``leavesHash(_:_:_:_:hasher:)`` takes them.
    static func leavesIndex(_ lo: Int64, _ hi: Int64, _ records: ArraySlice<Int64>, _ need: inout [Int64]) {
        if records.isEmpty { return subTreeIndex(lo, hi, &need) }
        guard lo + 1 != hi else { return }
        let (k, _) = maxPow2(hi - lo)
        let split = records.firstIndex { $0 >= lo + k } ?? records.endIndex
        leavesIndex(lo, lo + k, records[..<split], &need)
        leavesIndex(lo + k, hi, records[split...], &need)
    }

    static func leavesHash(_ lo: Int64, _ hi: Int64, _ leaves: ArraySlice<(record: Int64, leaf: Digest)>, _ hashes: inout ArraySlice<Digest>, hasher: any SHA256Hasher) throws(ProofError) -> Digest {
        if leaves.isEmpty { return try subTreeHash(lo, hi, &hashes, hasher: hasher) }
        guard lo + 1 != hi else { return leaves[leaves.startIndex].leaf }
        let (k, _) = maxPow2(hi - lo)
        let split = leaves.firstIndex { $0.record >= lo + k } ?? leaves.endIndex
        let left = try leavesHash(lo, lo + k, leaves[..<split], &hashes, hasher: hasher)
        let right = try leavesHash(lo + k, hi, leaves[split...], &hashes, hasher: hasher)
        return nodeHash(left, right, hasher: hasher)
    }

    /// Whether the records of `leaves` (record numbers with their leaf hashes) are all in the
    /// tree of `size` records whose root is `root`. The root is computed from their leaves and
    /// the stored hashes of the subtrees between them, read in one call: for m records of a
    /// tree of n, about m·log2(n/m) hashes instead of the m·log2(n) of m separate proofs, and
    /// the paths' shared upper nodes are hashed once. As with ``checkInclusion(_:record:leaf:size:root:hasher:)``,
    /// only a match with a root from signed data proves anything: a wrong stored hash gives a
    /// mismatch, never a false match. False for an empty list, a record outside the tree, or a
    /// record named twice.
    public static func checkInclusions(_ leaves: [(record: Int64, leaf: Digest)], size: Int64, root: Digest, hasher: any SHA256Hasher, read: HashReader) throws -> Bool {
        let sorted = leaves.sorted { $0.record < $1.record }
        guard let first = sorted.first, first.record >= 0, sorted.last!.record < size else { return false }
        for i in sorted.indices.dropFirst() where sorted[i].record == sorted[i - 1].record { return false }
        var indexes: [Int64] = []
        leavesIndex(0, size, sorted.map(\.record)[...], &indexes)
        var hashes = try read(indexes)[...]
        guard hashes.count == indexes.count, let computed = try? leavesHash(0, size, sorted[...], &hashes, hasher: hasher), hashes.isEmpty else { return false }
        return computed == root
    }

    // MARK: - Consistency proofs

    static func treeProofIndex(_ lo: Int64, _ hi: Int64, _ n: Int64, _ need: inout [Int64]) {
        if n == hi {
            if lo != 0 { subTreeIndex(lo, hi, &need) }
            return
        }
        let (k, _) = maxPow2(hi - lo)
        if n <= lo + k {
            treeProofIndex(lo, lo + k, n, &need)
            subTreeIndex(lo + k, hi, &need)
        } else {
            subTreeIndex(lo, lo + k, &need)
            treeProofIndex(lo + k, hi, n, &need)
        }
    }

    static func treeProof(_ lo: Int64, _ hi: Int64, _ n: Int64, _ hashes: inout ArraySlice<Digest>, hasher: any SHA256Hasher) throws(ProofError) -> [Digest] {
        if n == hi {
            if lo == 0 { return [] }
            return [try subTreeHash(lo, hi, &hashes, hasher: hasher)]
        }
        let (k, _) = maxPow2(hi - lo)
        var proof: [Digest]
        let sibling: Digest
        if n <= lo + k {
            proof = try treeProof(lo, lo + k, n, &hashes, hasher: hasher)
            sibling = try subTreeHash(lo + k, hi, &hashes, hasher: hasher)
        } else {
            sibling = try subTreeHash(lo, lo + k, &hashes, hasher: hasher)
            proof = try treeProof(lo + k, hi, n, &hashes, hasher: hasher)
        }
        proof.append(sibling)
        return proof
    }

    /// The consistency proof (RFC 6962 section 2.1.2) that the tree of `old` records is a prefix
    /// of the tree of `new` records (1 ≤ old ≤ new).
    public static func consistencyProof(old: Int64, new: Int64, hasher: any SHA256Hasher, read: HashReader) throws -> [Digest] {
        guard old >= 1, old <= new else { throw ProofError("no consistency proof from size \(old) to size \(new)") }
        var indexes: [Int64] = []
        treeProofIndex(0, new, old, &indexes)
        var hashes = try read(indexes)[...]
        return try treeProof(0, new, old, &hashes, hasher: hasher)
    }

    static func runConsistencyProof(_ proof: ArraySlice<Digest>, _ lo: Int64, _ hi: Int64, _ n: Int64, _ old: Digest, hasher: any SHA256Hasher) throws(ProofError) -> (old: Digest, new: Digest) {
        if n == hi {
            if lo == 0 {
                guard proof.isEmpty else { throw ProofError("consistency proof is too long") }
                return (old, old)
            }
            guard proof.count == 1 else { throw ProofError("consistency proof has the wrong length") }
            return (proof[proof.startIndex], proof[proof.startIndex])
        }
        guard let last = proof.last else { throw ProofError("consistency proof is too short") }
        let (k, _) = maxPow2(hi - lo)
        if n <= lo + k {
            let (oh, th) = try runConsistencyProof(proof.dropLast(), lo, lo + k, n, old, hasher: hasher)
            return (oh, nodeHash(th, last, hasher: hasher))
        }
        let (oh, th) = try runConsistencyProof(proof.dropLast(), lo + k, hi, n, old, hasher: hasher)
        return (nodeHash(last, oh, hasher: hasher), nodeHash(last, th, hasher: hasher))
    }

    /// Checks that `proof` shows the tree of `old` records with root `oldRoot` is a prefix of
    /// the tree of `new` records with root `newRoot`.
    public static func checkConsistency(_ proof: [Digest], old: Int64, oldRoot: Digest, new: Int64, newRoot: Digest, hasher: any SHA256Hasher) -> Bool {
        guard old >= 1, old <= new, let (o, n) = try? runConsistencyProof(proof[...], 0, new, old, oldRoot, hasher: hasher) else { return false }
        return o == oldRoot && n == newRoot
    }
}

/// A proof that could not be made or does not check.
public struct ProofError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The Merkle frontier: the roots of the complete subtrees that a tree of `size` records
/// decomposes into, largest (leftmost) first, one per set bit of `size`. It is all that is
/// needed to append records and to compute the root, so the one place that extends the tree
/// (appends, verification, the signed head) works on it.
public struct MerkleFrontier: Hashable, Sendable {
    public private(set) var size: Int64
    public private(set) var hashes: [Digest]

    /// The frontier of the empty tree.
    public init() {
        size = 0
        hashes = []
    }

    /// The frontier of a tree of `size` records, read from the stored hashes. The caller must
    /// check its ``root(hasher:)`` against a signed root before trusting it.
    public init(size: Int64, read: MerkleTree.HashReader) throws {
        var indexes: [Int64] = []
        var start: Int64 = 0
        for level in stride(from: 62, through: 0, by: -1) where size & (Int64(1) << level) != 0 {
            indexes.append(MerkleTree.storedHashIndex(level: level, n: start >> level))
            start += Int64(1) << level
        }
        self.size = size
        hashes = indexes.isEmpty ? [] : try read(indexes)
    }

    /// Appends the record with leaf hash `leaf`; returns the hashes stored for it: the leaf,
    /// then each subtree it completes (``MerkleTree/storedHashes(forRecord:leaf:hasher:read:)``).
    @discardableResult
    public mutating func append(_ leaf: Digest, hasher: any SHA256Hasher) -> [Digest] {
        var stored = [leaf]
        var h = leaf
        var n = size
        while n & 1 == 1 {
            h = MerkleTree.nodeHash(hashes.removeLast(), h, hasher: hasher)
            stored.append(h)
            n >>= 1
        }
        hashes.append(h)
        size += 1
        return stored
    }

    /// The RFC 6962 root: the complete subtrees folded from the right. The empty tree's root is
    /// SHA-256 of nothing.
    public func root(hasher: any SHA256Hasher) -> Digest {
        guard var root = hashes.last else { return hasher.sha256([]) }
        for left in hashes.dropLast().reversed() { root = MerkleTree.nodeHash(left, root, hasher: hasher) }
        return root
    }
}
