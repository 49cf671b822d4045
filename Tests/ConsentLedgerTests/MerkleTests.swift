import ConsentDomain
import Foundation
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// RFC 6962 section 2.1, written from the RFC and nothing else: MTH, PATH and PROOF by their
/// recursive definitions, over whole lists of entries. The stored-hash implementation must agree.
enum RFC6962 {
    static let hasher = Sodium()  // a different SHA-256 implementation than the ledger's default

    static func sha(_ b: [UInt8]) -> [UInt8] { hasher.sha256(b).bytes }

    /// The largest power of two smaller than n.
    static func k(_ n: Int) -> Int {
        var k = 1
        while k * 2 < n { k *= 2 }
        return k
    }

    static func mth(_ d: ArraySlice<[UInt8]>) -> [UInt8] {
        if d.isEmpty { return sha([]) }
        if d.count == 1 { return sha([0] + d.first!) }
        let k = k(d.count)
        return sha([1] + mth(d.prefix(k)) + mth(d.dropFirst(k)))
    }

    static func path(_ m: Int, _ d: ArraySlice<[UInt8]>) -> [[UInt8]] {
        if d.count == 1 { return [] }
        let k = k(d.count)
        if m < k { return path(m, d.prefix(k)) + [mth(d.dropFirst(k))] }
        return path(m - k, d.dropFirst(k)) + [mth(d.prefix(k))]
    }

    static func subproof(_ m: Int, _ d: ArraySlice<[UInt8]>, _ b: Bool) -> [[UInt8]] {
        let n = d.count
        if m == n { return b ? [] : [mth(d)] }
        let k = k(n)
        if m <= k { return subproof(m, d.prefix(k), b) + [mth(d.dropFirst(k))] }
        return subproof(m - k, d.dropFirst(k), false) + [mth(d.prefix(k))]
    }

    static func proof(_ m: Int, _ d: ArraySlice<[UInt8]>) -> [[UInt8]] { subproof(m, d, true) }
}

/// An in-memory tlog store, filled exactly as the ledger fills tree.hashes.
struct MemoryTree {
    var stored: [Digest] = []
    let hasher = OpenSSLSHA256()

    init(_ entries: [[UInt8]]) {
        for (n, e) in entries.enumerated() {
            let current = stored
            stored += try! MerkleTree.storedHashes(forRecord: Int64(n), leaf: MerkleTree.leafHash(e, hasher: hasher), hasher: hasher) { $0.map { current[Int($0)] } }
        }
    }

    func read(_ indexes: [Int64]) -> [Digest] { indexes.map { stored[Int($0)] } }
}

@Suite struct MerkleTreeTests {
    static func entries(_ n: Int, salt: Int = 0) -> [[UInt8]] {
        (0..<n).map { Array("entry \($0) \(salt)".utf8) }
    }

    /// RFC 6962's leaf hash, SHA-256(0x00 ‖ entry), for entries of every length a line may
    /// have and the empty one (whose hash RFC 6962 gives).
    @Test(arguments: [0, 1, 63, 64, 65, 333, 575, 4096])
    func aLeafHashIsTheHashOfAZeroByteAndTheEntry(length: Int) {
        let h = OpenSSLSHA256()
        let entry = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        #expect(MerkleTree.leafHash(entry, hasher: h) == h.sha256([0] + entry))
        if length == 0 {
            #expect(MerkleTree.leafHash(entry, hasher: h).hex == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
        }
    }

    @Test func storedHashCountMatchesTheStore() {
        for n in 1...200 {
            #expect(MerkleTree.storedHashCount(Int64(n)) == Int64(MemoryTree(Self.entries(n)).stored.count))
        }
    }

    @Test func rootsPathsAndProofsAgreeWithTheRFCForEverySmallTree() throws {
        let all = Self.entries(40)
        let tree = MemoryTree(all)
        for n in 1...all.count {
            let d = all[0..<n]
            let root = try MerkleTree.treeHash(size: Int64(n), hasher: tree.hasher, read: tree.read)
            #expect(root.bytes == RFC6962.mth(d), "MTH of \(n)")
            for m in 0..<n {
                let proof = try MerkleTree.inclusionProof(record: Int64(m), size: Int64(n), hasher: tree.hasher, read: tree.read)
                #expect(proof.map(\.bytes) == RFC6962.path(m, d), "PATH(\(m), D[\(n)])")
            }
            for m in 1...n {
                let proof = try MerkleTree.consistencyProof(old: Int64(m), new: Int64(n), hasher: tree.hasher, read: tree.read)
                #expect(proof.map(\.bytes) == RFC6962.proof(m, d), "PROOF(\(m), D[\(n)])")
            }
        }
    }

    /// For random trees and every index: the proof verifies, and fails for every other leaf and
    /// every changed hash.
    @Test func inclusionProofsVerifyAndFailForOtherLeavesAndChangedHashes() async {
        await propertyCheck(count: 40, input: zip(Gen.int(in: 1...150), Gen.int(in: 0...1000))) { n, salt in
            let entries = Self.entries(n, salt: salt)
            let tree = MemoryTree(entries)
            let h = tree.hasher
            let root = try! MerkleTree.treeHash(size: Int64(n), hasher: h, read: tree.read)
            for m in 0..<n {
                let proof = try! MerkleTree.inclusionProof(record: Int64(m), size: Int64(n), hasher: h, read: tree.read)
                let leaf = MerkleTree.leafHash(entries[m], hasher: h)
                #expect(MerkleTree.checkInclusion(proof, record: Int64(m), leaf: leaf, size: Int64(n), root: root, hasher: h))
                let other = (m + 1 + salt) % n
                if other != m {
                    #expect(!MerkleTree.checkInclusion(proof, record: Int64(m), leaf: MerkleTree.leafHash(entries[other], hasher: h), size: Int64(n), root: root, hasher: h))
                    #expect(!MerkleTree.checkInclusion(proof, record: Int64(other), leaf: leaf, size: Int64(n), root: root, hasher: h))
                }
                for i in proof.indices {
                    var changed = proof
                    var bytes = changed[i].bytes
                    bytes[(m + i) % 32] ^= 0x40
                    changed[i] = Digest(bytes: bytes)!
                    #expect(!MerkleTree.checkInclusion(changed, record: Int64(m), leaf: leaf, size: Int64(n), root: root, hasher: h))
                }
                #expect(!MerkleTree.checkInclusion(proof + [leaf], record: Int64(m), leaf: leaf, size: Int64(n), root: root, hasher: h))
            }
        }
    }

    /// Several records checked at once: true for any set of the tree's records, with fewer
    /// hashes read than their separate proofs; false when any leaf, any stored hash read, or any
    /// record number is changed.
    @Test func severalRecordsAreCheckedAtOnceAndEveryChangeIsCaught() async {
        await propertyCheck(count: 60, input: zip(Gen.int(in: 1...300), Gen.int(in: 1...24), Gen.int(in: 0...100_000))) { n, wanted, salt in
            let entries = Self.entries(n, salt: salt)
            let tree = MemoryTree(entries)
            let h = tree.hasher
            let size = Int64(n)
            let root = try! MerkleTree.treeHash(size: size, hasher: h, read: tree.read)
            // A spread of distinct records, chosen by the salt.
            var records = Set<Int64>()
            var x = UInt64(salt) &* 6_364_136_223_846_793_005 &+ 1
            while records.count < min(wanted, n) {
                x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                records.insert(Int64((x >> 33) % UInt64(n)))
            }
            let leaves = records.map { (record: $0, leaf: MerkleTree.leafHash(entries[Int($0)], hasher: h)) }
            var read: [Int64] = []
            #expect(try! MerkleTree.checkInclusions(leaves, size: size, root: root, hasher: h) { read += $0; return tree.read($0) })
            // The stored hashes the records' separate proofs read.
            var separately: [Int64] = []
            for record in records { MerkleTree.leafProofIndex(0, size, record, &separately) }
            #expect(read.count <= Set(separately).count)
            #expect(Set(read).count == read.count, "no stored hash is read twice")
            for i in leaves.indices {
                var changed = leaves
                var bytes = changed[i].leaf.bytes
                bytes[i % 32] ^= 0x01
                changed[i].leaf = Digest(bytes: bytes)!
                #expect(!(try! MerkleTree.checkInclusions(changed, size: size, root: root, hasher: h, read: tree.read)))
                // Another record's number for this leaf.
                let moved = (leaves[i].record + 1) % size
                if !records.contains(moved) {
                    var renumbered = leaves
                    renumbered[i].record = moved
                    #expect(!(try! MerkleTree.checkInclusions(renumbered, size: size, root: root, hasher: h, read: tree.read)))
                }
            }
            for index in read {
                var stored = tree.stored
                var bytes = stored[Int(index)].bytes
                bytes[Int(index) % 32] ^= 0x80
                stored[Int(index)] = Digest(bytes: bytes)!
                #expect(!(try! MerkleTree.checkInclusions(leaves, size: size, root: root, hasher: h) { $0.map { stored[Int($0)] } }))
            }
            #expect(!(try! MerkleTree.checkInclusions(leaves + [leaves[0]], size: size, root: root, hasher: h, read: tree.read)), "a record named twice")
            #expect(!(try! MerkleTree.checkInclusions([(record: size, leaf: leaves[0].leaf)], size: size, root: root, hasher: h, read: tree.read)), "a record past the tree")
            #expect(!(try! MerkleTree.checkInclusions([], size: size, root: root, hasher: h, read: tree.read)))
        }
    }

    @Test func everyRecordAtOnceNeedsNoStoredHash() throws {
        let entries = Self.entries(77)
        let tree = MemoryTree(entries)
        let root = try MerkleTree.treeHash(size: 77, hasher: tree.hasher, read: tree.read)
        let leaves = entries.indices.map { (record: Int64($0), leaf: MerkleTree.leafHash(entries[$0], hasher: tree.hasher)) }
        var read: [Int64] = []
        #expect(try MerkleTree.checkInclusions(leaves, size: 77, root: root, hasher: tree.hasher) { read += $0; return tree.read($0) })
        #expect(read.isEmpty)
    }

    /// For random pairs m ≤ n: the consistency proof verifies, and fails when any entry before m
    /// differs.
    @Test func consistencyProofsVerifyAndFailWhenAnEarlierEntryDiffers() async {
        await propertyCheck(count: 60, input: zip(Gen.int(in: 1...120), Gen.int(in: 0...119), Gen.int(in: 0...1000))) { n, rawM, salt in
            let m = rawM % n + 1
            let entries = Self.entries(n, salt: salt)
            let tree = MemoryTree(entries)
            let h = tree.hasher
            let oldRoot = try! MerkleTree.treeHash(size: Int64(m), hasher: h, read: tree.read)
            let newRoot = try! MerkleTree.treeHash(size: Int64(n), hasher: h, read: tree.read)
            let proof = try! MerkleTree.consistencyProof(old: Int64(m), new: Int64(n), hasher: h, read: tree.read)
            #expect(MerkleTree.checkConsistency(proof, old: Int64(m), oldRoot: oldRoot, new: Int64(n), newRoot: newRoot, hasher: h))
            // A log whose first m entries differ anywhere has another old root: the proof fails.
            var forged = entries
            forged[salt % m] = Array("forged".utf8)
            let forgedTree = MemoryTree(Array(forged[0..<m]))
            let forgedRoot = try! MerkleTree.treeHash(size: Int64(m), hasher: h, read: forgedTree.read)
            #expect(!MerkleTree.checkConsistency(proof, old: Int64(m), oldRoot: forgedRoot, new: Int64(n), newRoot: newRoot, hasher: h))
            if n > 1 {
                #expect(!MerkleTree.checkConsistency(proof, old: Int64(m), oldRoot: oldRoot, new: Int64(n), newRoot: oldRoot == newRoot ? forgedRoot : oldRoot, hasher: h))
            }
        }
    }
}

/// C2SP signed-note, checked against the example of Go's golang.org/x/mod/sumdb/note.
@Suite struct SignedNoteTests {
    static let goVerifierKey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    static let goText = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
    static let goNote = goText + "\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"

    @Test func goExampleKeyAndNoteVerifyAndAreReproducedByteForByte() throws {
        // The example's signer key: PRIVATE+KEY+PeterNeumann+c74f20a3+<base64(0x01 ‖ seed)>.
        let seed = try #require(Base64.decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"))
        let signer = try #require(SodiumSigner(seed: Array(seed.dropFirst())))
        let key = try NoteVerifierKey(name: "PeterNeumann", publicKey: signer.publicKey)
        #expect(key.text == Self.goVerifierKey)
        #expect(try NoteVerifierKey(text: Self.goVerifierKey) == key)
        #expect(SignedNote.sign(Self.goText, key: key, signer: signer) == Self.goNote)
        #expect(try SignedNote.open(Self.goNote, key: key) == Self.goText)
    }

    @Test func changedNotesAndWrongKeysAreRefused() throws {
        let key = try NoteVerifierKey(text: Self.goVerifierKey)
        #expect(throws: NoteError.self) { try SignedNote.open(Self.goNote.replacingFirst("cryptography", "cryptographY"), key: key) }
        let other = try NoteVerifierKey(name: "PeterNeumann", publicKey: SodiumSigner.generate().publicKey)
        #expect(throws: NoteError.self) { try SignedNote.open(Self.goNote, key: other) }
        #expect(throws: NoteError.self) { try NoteVerifierKey(text: Self.goVerifierKey.replacingFirst("c74f20a3", "c74f20a4")) }
        #expect(throws: NoteError.self) { try NoteVerifierKey(name: "has space", publicKey: other.publicKey) }
    }

    /// A note with 40,000 signature lines was read whole, each line decoded. At most 100 are read,
    /// as Go's note package allows; other keys' lines up to that still count for nothing.
    @Test(arguments: [(99, true), (100, false), (40_000, false)])
    func aNoteOfMoreThanAHundredSignatureLinesIsRefused(_ others: Int, _ opens: Bool) throws {
        let key = try NoteVerifierKey(text: Self.goVerifierKey)
        // Another key's line, as short as a line may be (14 bytes: 40,000 of them fit in 1 MiB).
        let otherLine = "\u{2014} x AAAAAAAA\n"
        let note = Self.goNote + String(repeating: otherLine, count: others)
        if opens {
            #expect(try SignedNote.open(note, key: key) == Self.goText)
        } else {
            #expect { try SignedNote.open(note, key: key) } throws: { "\($0)".contains("more than 100 signature lines") }
        }
    }

    @Test func checkpointsRoundTrip() throws {
        let root = Digest(bytes: Array(0..<32))!
        let c = Checkpoint(origin: "example.com/log", size: 42, root: root)
        #expect(c.text == "example.com/log\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")
        #expect(try Checkpoint(text: c.text) == c)
        #expect(throws: NoteError.self) { try Checkpoint(text: "example.com/log\n042\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n") }
        #expect(Base64.decode("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=") == nil, "non-canonical base64")
    }
}

extension String {
    func replacingFirst(_ a: String, _ b: String) -> String {
        guard let r = range(of: a) else { return self }
        return replacingCharacters(in: r, with: b)
    }
}

/// The ledger's SHA-256 (OpenSSL's low-level functions, in a context on the stack) against the
/// FIPS 180-4 examples and against libsodium's, at every length around the 64-byte block and
/// its padding boundary (55/56 bytes), as the tree's 64- and 65-byte node inputs are.
@Suite struct OpenSSLSHA256Tests {
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func theStandardsExamplesHashAsPublished(message: String, digest: String) {
        #expect(Array(message.utf8).withUnsafeBytes { OpenSSLSHA256().sha256($0) }.hex == digest)
    }

    @Test(arguments: 0...200)
    func everyLengthUpToThreeBlocksHashesAsLibsodiumDoes(length: Int) {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        let ours = bytes.withUnsafeBytes { OpenSSLSHA256().sha256($0) }
        let sodium = bytes.withUnsafeBytes { Sodium().sha256($0) }
        #expect(ours == sodium)
    }
}
