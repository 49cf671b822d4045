import ConsentDomain
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// The subject map against a reference written from its definition (`Spec/ledger-format.md`,
/// "Streams and the subject map"): the same root for any set of keys, proofs that verify for
/// present and absent keys and fail when changed, and stored records that read back the same.
@Suite struct SubjectMapTests {
    static let hasher = OpenSSLSHA256()

    /// The root by the definition: recursion over the keys under each prefix.
    static func referenceRoot(_ entries: [[UInt8]: UInt64], depth: Int = 0) -> Digest {
        guard !entries.isEmpty else { return .zero }
        if entries.count == 1, let (key, seq) = entries.first { return SubjectMap.leafHash(key: key, seq: seq, hasher: hasher) }
        let left = entries.filter { SubjectMap.bit($0.key, depth) == 0 }
        let right = entries.filter { SubjectMap.bit($0.key, depth) == 1 }
        return SubjectMap.nodeHash(referenceRoot(left, depth: depth + 1), referenceRoot(right, depth: depth + 1), hasher: hasher)
    }

    static func key(_ n: Int, prefixBits: Int = 0) -> [UInt8] {
        // Keys that share long prefixes exercise deep splits.
        var key = Array(hasher.sha256(Array(String(n).utf8)).bytes.prefix(16))
        if prefixBits > 0 { for i in 0..<min(prefixBits / 8, 15) { key[i] = 0xA5 } }
        return key
    }

    @Test func anEmptyMapHasTheZeroRoot() throws {
        let map = SubjectMap(hasher: Self.hasher)
        #expect(map.rootHash == .zero)
        let (seq, proof) = try map.lookup(Self.key(1))
        #expect(seq == nil)
        #expect(proof.value(for: Self.key(1), root: .zero, hasher: Self.hasher) == .some(nil))
    }

    @Test func rootsProofsAndStoredRecordsMatchTheDefinition() async {
        let input = zip(Gen.int(in: 1...60), Gen.int(in: 0...120), Gen.int(in: 0...3))
        await propertyCheck(count: 60, input: input) { count, prefixBits, rounds in
            var reference: [[UInt8]: UInt64] = [:]
            var map = SubjectMap(hasher: Self.hasher)
            var stored: [[UInt8]] = []
            var seq: UInt64 = 0
            for round in 0...rounds {
                for n in 0..<count where (n + round) % (round + 1) == 0 {
                    let key = Self.key(n, prefixBits: n % 2 == 0 ? prefixBits : 0)
                    seq += 1
                    try! map.set(key, seq: seq)
                    reference[key] = seq
                    if n % 3 == 0 { #expect(map.computeRoot() == Self.referenceRoot(reference)) }
                }
                #expect(map.computeRoot() == Self.referenceRoot(reference))
                // Store what changed and read the map back from the records.
                let new = map.takeNewRecords(firstIndex: Int64(stored.count), coveringSize: Int64(seq))
                stored += (0..<new.count).map { new[$0] }
                let records = stored
                let root = try! SubjectMapRecord.decodeRoot(records.last!)
                map = SubjectMap(hasher: Self.hasher, root: root, read: { records[Int($0)] })
                #expect(map.keyCount == Int64(reference.count))
            }
            let root = map.rootHash
            for (key, value) in reference {
                let (found, proof) = try! map.lookup(key)
                #expect(found == value)
                #expect(proof.value(for: key, root: root, hasher: Self.hasher) == .some(value))
                // A changed value, sibling or root does not verify.
                if case .leaf(let k, let s) = proof.end {
                    #expect(SubjectMapProof(siblings: proof.siblings, end: .leaf(key: k, seq: s + 1)).value(for: key, root: root, hasher: Self.hasher) == nil)
                }
                if !proof.siblings.isEmpty {
                    var siblings = proof.siblings
                    siblings[siblings.count - 1] = Self.hasher.sha256([1])
                    #expect(SubjectMapProof(siblings: siblings, end: proof.end).value(for: key, root: root, hasher: Self.hasher) == nil)
                }
                #expect(proof.value(for: key, root: Self.hasher.sha256([2]), hasher: Self.hasher) == nil)
            }
            let absent = Self.key(100_000 + count)
            let (none, proof) = try! map.lookup(absent)
            #expect(none == nil)
            #expect(proof.value(for: absent, root: root, hasher: Self.hasher) == .some(nil))
        }
    }

    /// A present key's proof cannot be passed off as another key's absence, nor the reverse.
    @Test func aProofAnswersOnlyForItsKey() throws {
        var map = SubjectMap(hasher: Self.hasher)
        for n in 0..<20 { try map.set(Self.key(n), seq: UInt64(n)) }
        map.computeRoot()
        let (_, proof) = try map.lookup(Self.key(3))
        #expect(proof.value(for: Self.key(3), root: map.rootHash, hasher: Self.hasher) == .some(3))
        // Key 4 generally does not share key 3's path; where it does, the proof shows it absent.
        let other = proof.value(for: Self.key(4), root: map.rootHash, hasher: Self.hasher)
        #expect(other == nil || other == .some(nil))
    }

    /// A stored node that does not hash to what its parent records is damage, not an answer.
    @Test func aTamperedStoredRecordIsDetected() throws {
        var map = SubjectMap(hasher: Self.hasher)
        for n in 0..<8 { try map.set(Self.key(n), seq: UInt64(n)) }
        let new = map.takeNewRecords(firstIndex: 0, coveringSize: 8)
        var records = (0..<new.count).map { new[$0] }
        let root = try SubjectMapRecord.decodeRoot(records.last!)
        // Change one leaf's seq.
        let leaf = try #require(records.firstIndex { $0[0] == 1 })
        records[leaf][31] ^= 1
        let tampered = records
        let reread = SubjectMap(hasher: Self.hasher, root: root, read: { tampered[Int($0)] })
        var failures = 0
        for n in 0..<8 {
            do { _ = try reread.lookup(Self.key(n)) } catch is SubjectMap.Damaged { failures += 1 }
        }
        #expect(failures >= 1)
    }
}

/// `subjects.map` only grows (records are appended, never rewritten); when it holds far more
/// records than the map needs, a commit writes the map afresh and replaces the file at once.
@Suite struct SubjectMapCompactionTests {
    @Test func aGrownMapIsReplacedByACompactCopyAndStillAnswers() throws {
        let path = LedgerPropertyTests.folder("compact")
        defer { removeFolder(path) }
        let saved = SubjectMap.compactionSlack
        SubjectMap.compactionSlack = 0
        defer { SubjectMap.compactionSlack = saved }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "compact", keyProtection: .insecurePlaintext)
        var largest = 0
        for round in 0..<30 {
            for subject in ["p1", "p2", "p3"] {
                let request: ConsentRequest = round % 2 == 0 ? .give(feature: "timeline", consents: ["required", "optional-a"]) : .revoke(feature: "timeline", consent: "required")
                try ledger.execute(LedgerCommand(subjectID: subject, request: request))
                largest = max(largest, readBytes(path + "/subjects.map").count / SubjectMapRecord.size)
            }
        }
        // Four streams (three subjects and the ledger's own): at most 8 records each before a
        // compaction, plus one commit's worth.
        #expect(largest <= 8 * 4 + 16, "the map grew to \(largest) records")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.report(for: "p2").listing.activeFeatures.isEmpty)
        // 15 grants of two consents and 15 withdrawals with their cascade.
        #expect(try reopened.report(for: "p2").events.count == 60)
        guard case .ok = verifyFolder(path) else { Issue.record("verify failed after compactions"); return }
    }
}
