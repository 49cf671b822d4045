import ConsentDomain
import TransparencyLog
/// The subject map: a sparse Merkle tree from each stream's 16-byte key (a subject's pseudonym,
/// or 16 zero bytes for the ledger's own stream) to the sequence number of the stream's newest
/// event. Its root is written into the log itself (``StreamLink/root``, on the last event of
/// every commit), so the RFC 6962 root of the log, and every signed head, commits to it: with
/// the map and each event's link to its stream's previous event, a subject's whole event set is
/// authenticated in O(log n) hashes plus one inclusion proof per event, with no replay. See
/// `Spec/ledger-format.md`, "Streams and the subject map".
///
/// The tree has shortcut leaves: an empty subtree hashes to 32 zero bytes, a subtree holding one
/// key hashes to that key's leaf (wherever the leaf sits), and any other subtree to
/// `SHA-256(0x03 || left || right)`. A leaf is `SHA-256(0x02 || key || seq as 8 bytes,
/// big-endian)`. Bit `i` of a key (most significant bit of byte 0 first) picks the side at depth
/// `i`.
///
/// Nodes come from a store (`read`) and are checked against the hash their parent gives them
/// before use, so a map read from tampered derived data fails instead of answering. Nodes, once
/// read, stay in memory; changes are made in place and kept until
/// ``takeNewRecords(firstIndex:coveringSize:)`` hands them to the store as new records (stored
/// records are never rewritten).
///
/// Copies of a map share its nodes (they are objects, for speed: a long-running writer changes
/// a resident tree in place). A map is used by one thread at a time: the writer under the
/// ledger's lock, or one reader with a map of its own.
public struct SubjectMap: @unchecked Sendable {
    public static let keyLength = 16
    public static let ledgerStream = [UInt8](repeating: 0, count: keyLength)

    /// A node in memory. A leaf has a key; an inner node has two children.
    ///
    /// A map is used by one thread at a time (see above), so the runtime's exclusivity checks on
    /// these properties, about a dozen per update, are turned off.
    final class Node {
        @exclusivity(unchecked) var key: [UInt8]?
        @exclusivity(unchecked) var seq: UInt64 = 0
        @exclusivity(unchecked) var left: Child = .empty
        @exclusivity(unchecked) var right: Child = .empty
        /// Nil when changed since it was last hashed.
        @exclusivity(unchecked) var hash: Digest?
        /// The record it is stored as, while it is unchanged since.
        @exclusivity(unchecked) var stored: Int64?

        init(key: [UInt8], seq: UInt64) {
            self.key = key
            self.seq = seq
        }

        init(left: Child, right: Child) {
            self.left = left
            self.right = right
        }
    }

    /// A child: nothing, a stored record not yet read (with the hash it must have), or a node.
    enum Child {
        case empty
        case unread(Int64, Digest)
        case node(Node)
    }

    /// What every copy of the map shares.
    private final class Tree {
        @exclusivity(unchecked) var root: Child
        @exclusivity(unchecked) var rootHash: Digest
        @exclusivity(unchecked) var keyCount: Int64
        @exclusivity(unchecked) var dirty = false

        init(root: Child, rootHash: Digest, keyCount: Int64) {
            self.root = root
            self.rootHash = rootHash
            self.keyCount = keyCount
        }
    }

    /// A map whose stored node cannot be used: it is not there, is malformed, or does not hash
    /// to what its parent says.
    public struct Damaged: Error, CustomStringConvertible {
        public let problem: String
        public var description: String { problem }
    }

    let hasher: any SHA256Hasher
    /// Reads a stored record by index: through the transaction the map is used in.
    package var reader: (Int64) throws -> [UInt8]
    private let tree: Tree

    /// The root; call ``computeRoot()`` first after changes.
    public var rootHash: Digest {
        precondition(!tree.dirty, "computeRoot() after changes")
        return tree.rootHash
    }

    /// How many keys the map holds.
    public var keyCount: Int64 { tree.keyCount }

    /// An empty map, with nothing stored.
    public init(hasher: any SHA256Hasher) {
        self.hasher = hasher
        self.reader = { throw Damaged(problem: "no stored record \($0)") }
        self.tree = Tree(root: .empty, rootHash: .zero, keyCount: 0)
    }

    /// The map whose root record is `root`, its nodes read from a store by record index.
    package init(hasher: any SHA256Hasher, root: SubjectMapRecord.Root, read: @escaping (Int64) throws -> [UInt8]) {
        self.hasher = hasher
        self.reader = read
        self.tree = Tree(root: root.node.map { .unread($0, root.hash) } ?? .empty, rootHash: root.hash, keyCount: root.keyCount)
    }

    // MARK: Hashes

    // Both hash a stack buffer: the map hashes about 15 times per command.

    public static func leafHash(key: [UInt8], seq: UInt64, hasher: any SHA256Hasher) -> Digest {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1 + keyLength + 8) { buffer in
            buffer[0] = 0x02
            for i in 0..<keyLength { buffer[1 + i] = key[i] }
            for i in 0..<8 { buffer[1 + keyLength + i] = UInt8(truncatingIfNeeded: seq >> (8 * UInt64(7 - i))) }
            return hasher.sha256(UnsafeRawBufferPointer(buffer))
        }
    }

    public static func nodeHash(_ left: Digest, _ right: Digest, hasher: any SHA256Hasher) -> Digest {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 65) { buffer in
            buffer[0] = 0x03
            left.copyBytes(to: UnsafeMutableRawPointer(buffer.baseAddress! + 1))
            right.copyBytes(to: UnsafeMutableRawPointer(buffer.baseAddress! + 33))
            return hasher.sha256(UnsafeRawBufferPointer(buffer))
        }
    }

    /// Bit `depth` of `key`, most significant bit of byte 0 first.
    static func bit(_ key: [UInt8], _ depth: Int) -> Int {
        Int(key[depth >> 3] >> (7 - UInt8(depth & 7))) & 1
    }

    /// The hash of a child whose nodes are all hashed.
    private static func hash(of child: Child) -> Digest {
        switch child {
        case .empty: .zero
        case .unread(_, let hash): hash
        case .node(let node): node.hash!
        }
    }

    // MARK: Reading

    /// The node of `child`, reading and checking it first if it is still unread (the parent
    /// then holds the node read).
    private func resolve(_ child: inout Child) throws -> Node? {
        switch child {
        case .empty:
            return nil
        case .node(let node):
            return node
        case .unread(let index, let expected):
            let node = try load(index, expected: expected)
            child = .node(node)
            return node
        }
    }

    private func load(_ index: Int64, expected: Digest) throws -> Node {
        let decoded: SubjectMapRecord.Decoded
        do {
            decoded = try SubjectMapRecord.decodeNode(try reader(index))
        } catch let error as Damaged {
            throw error
        } catch {
            throw Damaged(problem: "record \(index): \(error)")
        }
        let node: Node
        let hash: Digest
        switch decoded {
        case .leaf(let key, let seq):
            node = Node(key: key, seq: seq)
            hash = Self.leafHash(key: key, seq: seq, hasher: hasher)
        case .inner(let l, let r, let lh, let rh):
            guard (l == nil) == (lh == .zero), (r == nil) == (rh == .zero) else {
                throw Damaged(problem: "record \(index): an empty child with a non-zero hash, or the reverse")
            }
            node = Node(left: l.map { .unread($0, lh) } ?? .empty, right: r.map { .unread($0, rh) } ?? .empty)
            hash = Self.nodeHash(lh, rh, hasher: hasher)
        }
        guard hash == expected else {
            throw Damaged(problem: "record \(index) does not hash to the value its parent records")
        }
        node.hash = hash
        node.stored = index
        return node
    }

    /// The sequence number of the newest event of stream `key`, or nil if the stream has none,
    /// with the proof of either against ``rootHash``.
    public func lookup(_ key: [UInt8]) throws -> (seq: UInt64?, proof: SubjectMapProof) {
        precondition(key.count == Self.keyLength)
        precondition(!tree.dirty, "computeRoot() after changes")
        var siblings: [Digest] = []
        guard var node = try resolve(&tree.root) else { return (nil, SubjectMapProof(siblings: [], end: .empty)) }
        var depth = 0
        while true {
            if let k = node.key {
                return (k == key ? node.seq : nil, SubjectMapProof(siblings: siblings, end: .leaf(key: k, seq: node.seq)))
            }
            guard depth < 8 * Self.keyLength else { throw Damaged(problem: "the tree is deeper than a key has bits") }
            let next: Node?
            if Self.bit(key, depth) == 0 {
                siblings.append(Self.hash(of: node.right))
                next = try resolve(&node.left)
            } else {
                siblings.append(Self.hash(of: node.left))
                next = try resolve(&node.right)
            }
            guard let next else { return (nil, SubjectMapProof(siblings: siblings, end: .empty)) }
            node = next
            depth += 1
        }
    }

    /// Every key with its sequence number, each node checked on the way: `verify`'s full check
    /// of a stored map.
    public func entries() throws -> [(key: [UInt8], seq: UInt64)] {
        precondition(!tree.dirty, "computeRoot() after changes")
        var found: [(key: [UInt8], seq: UInt64)] = []
        func walk(_ node: Node, depth: Int) throws {
            if let key = node.key {
                found.append((key, node.seq))
                return
            }
            guard depth < 8 * Self.keyLength else { throw Damaged(problem: "the tree is deeper than a key has bits") }
            if let l = try resolve(&node.left) { try walk(l, depth: depth + 1) }
            if let r = try resolve(&node.right) { try walk(r, depth: depth + 1) }
        }
        if let root = try resolve(&tree.root) { try walk(root, depth: 0) }
        return found
    }

    // MARK: Writing

    /// Records `seq` as the newest event of stream `key`. Hashes are computed later, once per
    /// changed node, by ``computeRoot()``: a batch of commands hashes the union of its paths.
    public mutating func set(_ key: [UInt8], seq: UInt64) throws {
        precondition(key.count == Self.keyLength)
        try set(&tree.root, depth: 0, key: key, seq: seq)
        tree.dirty = true
    }

    private func set(_ child: inout Child, depth: Int, key: [UInt8], seq: UInt64) throws {
        guard let node = try resolve(&child) else {
            tree.keyCount += 1
            child = .node(Node(key: key, seq: seq))
            return
        }
        if let k = node.key {
            if k == key {
                node.seq = seq
                node.hash = nil
                node.stored = nil
                return
            }
            tree.keyCount += 1
            child = .node(split(depth: depth, node, Node(key: key, seq: seq)))
            return
        }
        guard depth < 8 * Self.keyLength else { throw Damaged(problem: "the tree is deeper than a key has bits") }
        if Self.bit(key, depth) == 0 {
            try set(&node.left, depth: depth + 1, key: key, seq: seq)
        } else {
            try set(&node.right, depth: depth + 1, key: key, seq: seq)
        }
        node.hash = nil
        node.stored = nil
    }

    /// The subtree at `depth` holding exactly two leaves.
    private func split(depth: Int, _ a: Node, _ b: Node) -> Node {
        let (sideA, sideB) = (Self.bit(a.key!, depth), Self.bit(b.key!, depth))
        if sideA != sideB {
            return sideA == 0 ? Node(left: .node(a), right: .node(b)) : Node(left: .node(b), right: .node(a))
        }
        let child = split(depth: depth + 1, a, b)
        return sideA == 0 ? Node(left: .node(child), right: .empty) : Node(left: .empty, right: .node(child))
    }

    /// The root after the changes so far, hashing every changed node once.
    @discardableResult
    public mutating func computeRoot() -> Digest {
        if tree.dirty {
            tree.rootHash = finish(tree.root)
            tree.dirty = false
        }
        return tree.rootHash
    }

    /// The hash of `child`, computing the hashes of the changed nodes under it.
    private func finish(_ child: Child) -> Digest {
        guard case .node(let node) = child else { return Self.hash(of: child) }
        if let hash = node.hash { return hash }
        let hash: Digest
        if let key = node.key {
            hash = Self.leafHash(key: key, seq: node.seq, hasher: hasher)
        } else {
            hash = Self.nodeHash(finish(node.left), finish(node.right), hasher: hasher)
        }
        node.hash = hash
        return hash
    }

    /// Every node of the map as new records from index 0, and a root record: a compact copy of
    /// a map whose appended records have grown far beyond the nodes still in use. Reads (and
    /// checks) every stored node first.
    public mutating func allRecords(coveringSize: Int64) throws -> SubjectMapRecords {
        computeRoot()
        func unstore(_ child: inout Child) throws {
            guard let node = try resolve(&child) else { return }
            node.stored = nil
            if node.key == nil {
                try unstore(&node.left)
                try unstore(&node.right)
            }
        }
        try unstore(&tree.root)
        return takeNewRecords(firstIndex: 0, coveringSize: coveringSize)
    }

    /// Whether `recordCount` stored records are so many more than the map needs (about two per
    /// key) that a compact copy should replace them.
    public func wantsCompaction(recordCount: Int64) -> Bool {
        Self.wantsCompaction(recordCount: recordCount, keyCount: tree.keyCount)
    }

    /// Whether a map of `keyCount` keys stored in `recordCount` records wants a compact copy.
    public static func wantsCompaction(recordCount: Int64, keyCount: Int64) -> Bool {
        recordCount > compactionRecordsPerKey * keyCount + compactionSlack
    }

    /// Whether a compaction left to the storage, off the commit path, is so late (twice the
    /// records that call for one) that the commit should make it instead.
    public func compactionOverdue(recordCount: Int64) -> Bool {
        recordCount > 2 * (Self.compactionRecordsPerKey * tree.keyCount + Self.compactionSlack)
    }

    /// Records allowed beyond ``compactionRecordsPerKey`` per key before compacting (small in
    /// tests and the torture run, to exercise it).
    nonisolated(unsafe) package static var compactionSlack: Int64 = 65_536
    /// Records per key allowed before compacting: a compact map holds about two (fewer in the
    /// torture run, so that kills land in compactions).
    nonisolated(unsafe) package static var compactionRecordsPerKey: Int64 = 8

    /// The records of the nodes changed since they were last stored, children before parents,
    /// numbered from `firstIndex`, followed by a root record for a log of `coveringSize`
    /// records. Afterwards the nodes count as stored there.
    public mutating func takeNewRecords(firstIndex: Int64, coveringSize: Int64) -> SubjectMapRecords {
        computeRoot()
        var records = SubjectMapRecords()
        func reference(_ child: Child) -> Int64? {
            switch child {
            case .empty: return nil
            case .unread(let index, _): return index
            case .node(let node): return node.stored
            }
        }
        func place(_ child: Child) {
            guard case .node(let node) = child, node.stored == nil else { return }
            place(node.left)
            place(node.right)
            if let key = node.key {
                records.append(.leaf(key: key, seq: node.seq))
            } else {
                records.append(.inner(reference(node.left), reference(node.right), Self.hash(of: node.left), Self.hash(of: node.right)))
            }
            node.stored = firstIndex + Int64(records.count - 1)
        }
        place(tree.root)
        records.append(SubjectMapRecord.Root(coveredSize: coveringSize, node: reference(tree.root), hash: tree.rootHash, keyCount: tree.keyCount))
        return records
    }
}

/// Subject-map records in one buffer, ``SubjectMapRecord/size`` bytes each, as a store writes
/// them.
public struct SubjectMapRecords: Sendable {
    public private(set) var bytes: [UInt8] = []

    package init() {}

    public var count: Int { bytes.count / SubjectMapRecord.size }

    /// Record `i`.
    public subscript(i: Int) -> [UInt8] { Array(bytes[(i * SubjectMapRecord.size)..<((i + 1) * SubjectMapRecord.size)]) }

    package mutating func append(_ node: SubjectMapRecord.Decoded) {
        SubjectMapRecord.append(node, to: &bytes)
    }

    package mutating func append(_ root: SubjectMapRecord.Root) {
        SubjectMapRecord.append(root, to: &bytes)
    }
}

/// A proof of what the subject map holds for one key: the sibling hashes from the root down to
/// where the key's path ends, and what it ends in.
public struct SubjectMapProof: Hashable, Sendable {
    public enum End: Hashable, Sendable {
        /// An empty subtree: the key is absent.
        case empty
        /// A leaf: the key's own (present), or another key's that shares the path (absent).
        case leaf(key: [UInt8], seq: UInt64)
    }

    /// `siblings[i]` is the sibling of the path's node at depth `i + 1`.
    public let siblings: [Digest]
    public let end: End

    public init(siblings: [Digest], end: End) {
        self.siblings = siblings
        self.end = end
    }

    /// What the map of root `root` holds for `key`: `.some(seq)` or `.some(nil)` (absent), or
    /// nil when the proof does not lead to `root`.
    public func value(for key: [UInt8], root: Digest, hasher: any SHA256Hasher) -> UInt64?? {
        guard key.count == SubjectMap.keyLength, siblings.count <= 8 * SubjectMap.keyLength else { return nil }
        var hash: Digest
        var found: UInt64?
        switch end {
        case .empty:
            hash = .zero
        case .leaf(let other, let seq):
            guard other.count == SubjectMap.keyLength else { return nil }
            if other == key {
                found = seq
            } else {
                // Another key's leaf proves absence only where it shares the path.
                for depth in 0..<siblings.count where SubjectMap.bit(other, depth) != SubjectMap.bit(key, depth) { return nil }
            }
            hash = SubjectMap.leafHash(key: other, seq: seq, hasher: hasher)
        }
        for depth in stride(from: siblings.count - 1, through: 0, by: -1) {
            hash = SubjectMap.bit(key, depth) == 0
                ? SubjectMap.nodeHash(hash, siblings[depth], hasher: hasher)
                : SubjectMap.nodeHash(siblings[depth], hash, hasher: hasher)
        }
        guard hash == root else { return nil }
        return .some(found)
    }
}

/// The stored form of the subject map's nodes: fixed records of ``size`` bytes, appended and
/// never rewritten. Record `i` is referred to as `i + 1` (0 is the empty subtree). A leaf is
/// tag 1, key (16), seq (8, big-endian); an inner node is tag 2, left and right references
/// (8 each, big-endian), left and right hashes (32 each); a root record is tag 3, the log size it
/// covers, the root reference, the root hash and the number of keys. Bytes 1–7 and any unused
/// tail are zero. See `Spec/ledger-format.md`.
public enum SubjectMapRecord {
    public static let size = 88

    public struct Root: Hashable, Sendable {
        public let coveredSize: Int64
        /// The root node's record index; nil for the empty map.
        package let node: Int64?
        public let hash: Digest
        public let keyCount: Int64

        package init(coveredSize: Int64, node: Int64?, hash: Digest, keyCount: Int64) {
            self.coveredSize = coveredSize
            self.node = node
            self.hash = hash
            self.keyCount = keyCount
        }
    }

    /// A node record: a leaf, or an inner node with its children's record indexes (nil: empty)
    /// and hashes.
    package enum Decoded {
        case leaf(key: [UInt8], seq: UInt64)
        case inner(Int64?, Int64?, Digest, Digest)
    }

    static func encode(_ node: Decoded) -> [UInt8] {
        var out: [UInt8] = []
        append(node, to: &out)
        return out
    }

    static func encode(_ root: Root) -> [UInt8] {
        var out: [UInt8] = []
        append(root, to: &out)
        return out
    }

    /// Appends a node's record to `out`.
    package static func append(_ node: Decoded, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: size))
        switch node {
        case .leaf(let key, let seq):
            out[start] = 1
            out.replaceSubrange((start + 8)..<(start + 24), with: key)
            put(seq, at: start + 24, in: &out)
        case .inner(let l, let r, let lh, let rh):
            out[start] = 2
            put(reference(l), at: start + 8, in: &out)
            put(reference(r), at: start + 16, in: &out)
            out.withUnsafeMutableBytes { raw in
                lh.copyBytes(to: raw.baseAddress! + start + 24)
                rh.copyBytes(to: raw.baseAddress! + start + 56)
            }
        }
    }

    /// Appends a root record to `out`.
    package static func append(_ root: Root, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: size))
        out[start] = 3
        put(UInt64(root.coveredSize), at: start + 8, in: &out)
        put(reference(root.node), at: start + 16, in: &out)
        out.withUnsafeMutableBytes { raw in root.hash.copyBytes(to: raw.baseAddress! + start + 24) }
        put(UInt64(root.keyCount), at: start + 56, in: &out)
    }

    package static func isRoot(_ record: [UInt8]) -> Bool { record.count == size && record[0] == 3 }

    package static func decodeRoot(_ record: [UInt8]) throws -> Root {
        guard isRoot(record), record[1..<8].allSatisfy({ $0 == 0 }), record[64..<88].allSatisfy({ $0 == 0 }) else {
            throw SubjectMap.Damaged(problem: "not a root record")
        }
        let covered = get(record, 8), keys = get(record, 56)
        guard covered <= UInt64(Int64.max), keys <= UInt64(Int64.max) else { throw SubjectMap.Damaged(problem: "a root record's counts are out of range") }
        let node = try ref(get(record, 16))
        let hash = Digest(bytes: Array(record[24..<56]))!
        guard (node == nil) == (hash == .zero) else { throw SubjectMap.Damaged(problem: "a root record's reference and hash disagree") }
        return Root(coveredSize: Int64(covered), node: node, hash: hash, keyCount: Int64(keys))
    }

    package static func decodeNode(_ record: [UInt8]) throws -> Decoded {
        guard record.count == size, record[1..<8].allSatisfy({ $0 == 0 }) else { throw SubjectMap.Damaged(problem: "not a node record") }
        switch record[0] {
        case 1:
            guard record[32..<88].allSatisfy({ $0 == 0 }) else { throw SubjectMap.Damaged(problem: "a leaf record's unused bytes are not zero") }
            return .leaf(key: Array(record[8..<24]), seq: get(record, 24))
        case 2:
            let l = try ref(get(record, 8)), r = try ref(get(record, 16))
            return .inner(l, r, Digest(bytes: Array(record[24..<56]))!, Digest(bytes: Array(record[56..<88]))!)
        default:
            throw SubjectMap.Damaged(problem: "record tag \(record[0]) is not a node")
        }
    }

    private static func reference(_ index: Int64?) -> UInt64 {
        index.map { UInt64($0) + 1 } ?? 0
    }

    private static func ref(_ value: UInt64) throws -> Int64? {
        guard value <= UInt64(Int64.max) else { throw SubjectMap.Damaged(problem: "a record reference is out of range") }
        return value == 0 ? nil : Int64(value - 1)
    }

    private static func put(_ value: UInt64, at offset: Int, in out: inout [UInt8]) {
        for i in 0..<8 { out[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(7 - i))) }
    }

    private static func get(_ record: [UInt8], _ offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for i in 0..<8 { value = value << 8 | UInt64(record[offset + i]) }
        return value
    }
}
