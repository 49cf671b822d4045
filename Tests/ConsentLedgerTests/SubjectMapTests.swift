import ConsentDomain
import PropertyBased
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog
#if canImport(Glibc)
import Glibc
#endif

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
/// records than the map needs, a compact copy replaces the file at once: made by the commit,
/// or, for a store that commits often (a long-running writer), off the commit path by
/// ``SubjectMapCompactor`` and installed by a later commit. Serialized: they set the
/// compaction's slack for the whole process.
@Suite(.serialized) struct SubjectMapCompactionTests {
    static func give(_ subject: String, _ round: Int) -> LedgerCommand {
        let request: ConsentRequest = round % 2 == 0 ? .give(feature: "timeline", consents: ["required", "optional-a"]) : .revoke(feature: "timeline", consent: "required")
        return LedgerCommand(subjectID: subject, request: request)
    }

    static func withSlack<T>(_ slack: Int64, _ body: () throws -> T) rethrows -> T {
        let saved = SubjectMap.compactionSlack
        SubjectMap.compactionSlack = slack
        defer { SubjectMap.compactionSlack = saved }
        return try body()
    }

    /// A store whose compactor works in the background from its first commit (or never).
    static func store(_ path: String, inBackground: Bool) -> FileLedgerStore {
        let store = FileLedgerStore(directory: path)
        store.mapCompactor.backgroundAfterCommits.store(inBackground ? 0 : Int.max, ordering: .relaxed)
        store.mapCompactor.minimumRecords.store(0, ordering: .relaxed)
        return store
    }

    static func waitUntilIdle(_ compactor: SubjectMapCompactor, ready: Bool = false) {
        for _ in 0..<2000 where compactor.copying || (!ready && compactor.busy) { usleep(5_000) }
    }

    /// A ledger of subjects a, b, c and d whose store has started a copy in the background, held
    /// at the gate given to `body`.
    static func withHeldCopy(_ label: String, _ body: (String, FileLedgerStore, Ledger, Gate) throws -> Void) throws {
        let path = LedgerPropertyTests.folder(label)
        defer { removeFolder(path) }
        try withSlack(0) {
            let store = store(path, inBackground: false)
            let ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
            for subject in ["a", "b", "c", "d"] { try ledger.execute(give(subject, 0)) }
            var round = 1
            let gate = try startHeldCopy(store) {
                try ledger.execute(give("a", round))
                round += 1
            }
            try body(path, store, ledger, gate)
        }
    }

    /// Commits (`next`) until the store's compactor starts a copy in the background, which
    /// then waits at the gate returned.
    static func startHeldCopy(_ store: FileLedgerStore, _ next: () throws -> Void) throws -> Gate {
        let gate = Gate()
        store.mapCompactor.beforeCopying.withLock { $0 = { gate.wait() } }
        store.mapCompactor.backgroundAfterCommits.store(0, ordering: .relaxed)
        while !store.mapCompactor.copying { try next() }
        return gate
    }

    static func mapRecords(_ path: String) -> Int { readBytes(path + "/subjects.map").count / SubjectMapRecord.size }

    @Test(arguments: [false, true])
    func aGrownMapIsReplacedByACompactCopyAndStillAnswers(inBackground: Bool) throws {
        let path = LedgerPropertyTests.folder("compact")
        defer { removeFolder(path) }
        try Self.withSlack(0) {
            let store = Self.store(path, inBackground: inBackground)
            let ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "compact", keyProtection: .insecurePlaintext)
            var largest = 0
            for round in 0..<30 {
                for subject in ["p1", "p2", "p3"] {
                    try ledger.execute(Self.give(subject, round))
                    largest = max(largest, Self.mapRecords(path))
                    // Each copy is done before the next commit, which installs it.
                    if inBackground { Self.waitUntilIdle(store.mapCompactor, ready: true) }
                }
            }
            // Four streams (three subjects and the ledger's own): at most 8 records each before a
            // compaction, plus one commit's worth; in the background, a copy is installed by the
            // commit after the one that wanted it.
            // (A commit here appends 5 to 8 records; an overdue one compacts past 2 * 8 * 4.)
            #expect(largest <= (inBackground ? 8 * 4 + 24 : 8 * 4 + 16), "the map grew to \(largest) records")
            if inBackground {
                #expect(store.mapCompactor.installed.load(ordering: .relaxed) >= 10)
                // A copy made after the last commit is installed by the next, which starts none.
                if store.mapCompactor.busy { try ledger.execute(Self.give("p1", 30)) }
                #expect(!store.mapCompactor.busy)
            }
            let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
            #expect(try reopened.report(for: "p2").listing.activeFeatures.isEmpty)
            // 15 grants of two consents and 15 withdrawals with their cascade.
            #expect(try reopened.report(for: "p2").events.count == 60)
            guard case .ok = verifyFolder(path) else { Issue.record("verify failed after compactions"); return }
            #expect(!PosixFile.directoryEntries(path).contains { $0.contains(".tmp-") }, "a copy was left behind")
        }
    }

    /// Another writer (another process) commits while the copy is made: its records, after the
    /// copy's root, are renumbered into the copy when it is installed, and every subject still
    /// reads as it should, in this process (which forgot its resident map) and in a new one.
    @Test func recordsAnotherWriterAppendedWhileTheCopyWasMadeAreKept() throws {
        let path = LedgerPropertyTests.folder("compact-tail")
        defer { removeFolder(path) }
        let subjects = (0..<20).map { "s\($0)" }
        try Self.withSlack(0) {
            let store = Self.store(path, inBackground: false)
            let ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "compact-tail", keyProtection: .insecurePlaintext)
            // Each subject's last round: an even one gives, an odd one withdraws. Each command
            // flips its subject, so that every one appends.
            var last: [String: Int] = [:]
            func flip(_ ledger: Ledger, _ subject: String) throws {
                let round = last[subject, default: -1] + 1
                #expect(try ledger.execute(Self.give(subject, round)).result.events.count > 0)
                last[subject] = round
            }
            for subject in subjects { try flip(ledger, subject) }
            // The copy waits, once started, until the other writer has committed.
            var n = 0
            let gate = try Self.startHeldCopy(store) {
                try flip(ledger, subjects[n % 20])
                n += 1
            }
            let before = Self.mapRecords(path)
            // The other writer compacts neither in its commits nor (held) in the background.
            let otherStore = Self.store(path, inBackground: true)
            let otherGate = Gate()
            defer { otherGate.open() }
            otherStore.mapCompactor.beforeCopying.withLock { $0 = { otherGate.wait() } }
            let other = try Ledger.open(store: otherStore)
            for n in 0..<5 { try flip(other, subjects[n]) }
            #expect(Self.mapRecords(path) > before)
            gate.open()
            Self.waitUntilIdle(store.mapCompactor, ready: true)
            try flip(ledger, "s7")
            #expect(store.mapCompactor.installed.load(ordering: .relaxed) == 1)
            #expect(Self.mapRecords(path) < before)
            let fresh = try Ledger.open(store: FileLedgerStore(directory: path))
            for subject in subjects {
                let expected = last[subject]! % 2 == 0 ? 1 : 0
                #expect(try ledger.report(for: subject).listing.activeFeatures.count == expected, "\(subject)")
                #expect(try fresh.report(for: subject).listing.activeFeatures.count == expected, "\(subject)")
            }
            // Both writers go on, on the new file.
            try flip(ledger, "s1")
            try flip(other, "s2")
            guard case .ok = verifyFolder(path) else { Issue.record("verify failed after the copy was installed"); return }
            for subject in ["s1", "s2"] {
                #expect(try Ledger.open(store: FileLedgerStore(directory: path)).report(for: subject).listing.activeFeatures.count == (last[subject]! % 2 == 0 ? 1 : 0))
            }
        }
    }

    /// The map was replaced after the copy was made and before a commit could install it
    /// (another writer compacted it in its commit): the copy is dropped, its file removed, and
    /// the ledger reads and verifies.
    @Test func aCopyOfAMapThatWasReplacedMeanwhileIsDropped() throws {
        try Self.withHeldCopy("compact-dropped") { path, store, ledger, gate in
            gate.open()
            Self.waitUntilIdle(store.mapCompactor, ready: true)
            #expect(store.mapCompactor.busy, "no copy was made")
            // A short-lived writer compacts in its commit.
            let other = try Ledger.open(store: Self.store(path, inBackground: false))
            let inode = Self.inode(path)
            for n in 0..<20 where Self.inode(path) == inode { try other.execute(Self.give("b", n + 1)) }
            #expect(Self.inode(path) != inode, "the other writer did not compact")
            try ledger.execute(Self.give("c", 1))
            #expect(store.mapCompactor.installed.load(ordering: .relaxed) == 0)
            #expect(!store.mapCompactor.busy)
            #expect(!PosixFile.directoryEntries(path).contains { $0.contains(".tmp-") }, "the dropped copy was left behind")
            #expect(try ledger.report(for: "c").listing.activeFeatures.isEmpty)
            guard case .ok = verifyFolder(path) else { Issue.record("verify failed"); return }
        }
    }

    /// A map whose records refer in a circle (bytes no writer writes) ends the copy: nothing
    /// hangs, nothing is installed, no file is left.
    @Test func aCopyOfACircularMapEnds() throws {
        try Self.withHeldCopy("compact-circle") { path, store, _, gate in
            // Every inner node's left child becomes the node itself.
            var bytes = readBytes(path + "/subjects.map")
            for start in stride(from: 0, to: bytes.count, by: SubjectMapRecord.size) where bytes[start] == 2 {
                let me = UInt64(start / SubjectMapRecord.size + 1)
                for i in 0..<8 { bytes[start + 8 + i] = UInt8(truncatingIfNeeded: me >> (8 * UInt64(7 - i))) }
            }
            writeBytes(bytes, to: path + "/subjects.map")
            gate.open()
            Self.waitUntilIdle(store.mapCompactor)
            #expect(!store.mapCompactor.busy)
            #expect(store.mapCompactor.installed.load(ordering: .relaxed) == 0)
            #expect(!PosixFile.directoryEntries(path).contains { $0.contains(".tmp-") })
        }
    }

    static func inode(_ path: String) -> UInt64 {
        var st = stat()
        return stat(path + "/subjects.map", &st) == 0 ? UInt64(st.st_ino) : 0
    }
}

/// A gate a thread waits at until the test opens it.
final class Gate: @unchecked Sendable {
    private let opened = Mutex(false)
    func open() { opened.withLock { $0 = true } }
    func wait() { while !opened.withLock({ $0 }) { usleep(2_000) } }
}
