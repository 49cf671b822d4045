import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// The tree hashes a process keeps once a check authenticated them: used by later reads, and
/// never the reason a read passes.
@Suite struct TreeHashCacheTests {
    @Test func storedHashIndexesSplitBackIntoTheirLevelAndN() {
        var wrong: [String] = []
        for level in 0..<12 {
            for n in Int64(0)..<300 {
                let split = MerkleTree.splitStoredHashIndex(MerkleTree.storedHashIndex(level: level, n: n))
                if split != (level, n) { wrong.append("(\(level), \(n)) → \(split)") }
            }
        }
        for index in Int64(0)..<20_000 {
            let (level, n) = MerkleTree.splitStoredHashIndex(index)
            if MerkleTree.storedHashIndex(level: level, n: n) != index { wrong.append("index \(index) → (\(level), \(n))") }
        }
        #expect(wrong.isEmpty, "\(wrong.prefix(5))")
    }

    /// A ledger of 300 commands (each a subject's first grant): a tree with subtrees of 64 and
    /// more leaves, whose hashes a read keeps.
    static func ledger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let writer = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        try writer.execute((0..<300).map { WarmWriterTests.give("s\($0)") })
        return (try Ledger.open(store: FileLedgerStore(directory: path)), path)
    }

    @Test func aReadKeepsTheUpperTreeHashesItAuthenticated() throws {
        let (reader, path) = try Self.ledger("tree-cache-keep")
        defer { removeFolder(path) }
        #expect(reader.treeHashCache.kept.count == 0)
        let first = try reader.currentListing(for: "s7")
        let kept = reader.treeHashCache.kept
        #expect(kept.count > 0)
        let stored = try FileLedgerStore(directory: path).read { tx in try tx.treeHashes(Array(0..<MerkleTree.storedHashCount(Int64(try tx.logState().size)))) }
        for (index, hash) in try #require(Self.keptHashes(reader)) {
            #expect(MerkleTree.splitStoredHashIndex(index).level >= kept.minimumLevel)
            #expect(stored[Int(index)] == hash)
        }
        #expect(try reader.currentListing(for: "s7") == first)
    }

    /// Wrong hashes in memory (as a log rewritten under the same key would leave): the read
    /// forgets them, checks from the storage alone and answers. Wrong in memory and in the
    /// storage: an integrity error, not an answer.
    @Test func keptHashesThatDisagreeAreForgottenAndNeverDecide() throws {
        let (reader, path) = try Self.ledger("tree-cache-wrong")
        defer { removeFolder(path) }
        let answer = try reader.currentListing(for: "s200")
        let kept = try #require(Self.keptHashes(reader))
        #expect(!kept.isEmpty)
        reader.treeHashCache.keep(TreeHashCache.Reading(fetched: kept.map { (index: $0.key, hash: Digest.zero) }))
        #expect(Self.keptHashes(reader)?.values.allSatisfy { $0 == .zero } == true)
        #expect(try reader.currentListing(for: "s200") == answer)
        #expect(Self.keptHashes(reader)?.values.contains(.zero) == false, "the wrong hashes were forgotten")

        reader.treeHashCache.keep(TreeHashCache.Reading(fetched: kept.map { (index: $0.key, hash: Digest.zero) }))
        let treePath = path + "/tree.hashes"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: treePath)))
        for index in kept.keys { bytes.replaceSubrange(Int(index) * 32..<Int(index) * 32 + 32, with: [UInt8](repeating: 0, count: 32)) }
        try Data(bytes).write(to: URL(fileURLWithPath: treePath))
        #expect(throws: ConsentError.self) { _ = try reader.currentListing(for: "s200") }
    }

    static func keptHashes(_ ledger: Ledger) -> [Int64: Digest]? {
        ledger.treeHashCache.snapshot
    }
}
