import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// What ``LedgerCopy/copy(from:to:keys:passphrase:batchLines:)`` copied, and the checks it made on the copy.
public struct LedgerCopyReport: Hashable, Sendable {
    /// Events copied, the genesis event included.
    public let events: Int
    /// Subjects with events.
    public let subjects: Int
    /// Issued checkpoints copied.
    public let checkpoints: Int
    /// The newest event and its chain hash: the same in both stores.
    public let head: ChainHead
    /// The Merkle tree root over all events: the same in both stores.
    public let root: Digest
}

/// Copies a ledger from one store to another, byte for byte: the same lines (so the same
/// signatures and hash chain), catalogue, key, subject salts, issued checkpoints and signed head.
/// No event is re-signed: only heads of the parts the copy is written in (a storage keeps each
/// commit's head with its entries). `consentctl migrate` uses it to move a ledger between a folder and PostgreSQL.
public enum LedgerCopy {
    /// Verifies the source, copies it into `target` (which must hold no ledger yet; it is
    /// created with the source's head, so an interrupted copy is a truncated ledger), rebuilds
    /// the target's derived data, then verifies the copy and compares its head, tree root and
    /// checkpoints with the source's. A copy that was interrupted leaves a target to delete
    /// before trying again. The source's log is only read (like any command, opening it may
    /// first rebuild its derived files if a crash left them behind).
    public static func copy(from source: any LedgerStore, to target: any LedgerStore, keys: (any KeyStore)? = nil, passphrase: PassphraseSource? = nil, batchLines: Int = 4096) throws -> LedgerCopyReport {
        let original = try Ledger.open(store: source, keys: keys, passphrase: passphrase)
        let sourceReport = try original.verify()
        guard sourceReport.keys.periods.count == 1 else {
            // The copy's first heads would need the retired keys, which signed the source's.
            throw ConsentError.invalidRequest("this ledger's key was rotated (\(sourceReport.keys.periods.count - 1) time(s)); copying a rotated ledger to another store is not supported yet")
        }
        let signer = try original.signingKey()
        var (size, setup, head, checkpoints, salts, frontier) = try source.read { tx in
            let view = try original.view(tx)
            let log = view.log
            guard log.last.event.seq == sourceReport.head.seq else {
                throw ConsentError.invalidRequest("the source ledger changed while it was being copied; try again")
            }
            let (catalog, publicKey) = try tx.metadata()
            let genesisLine = try tx.entry(0)
            let genesis = try EventCodec.decode(line: genesisLine)
            // The copy carries the source's signed head as it is; only a source whose head is
            // of the older unsigned form, or behind its log, gets a head signed for it now.
            let head = try log.signedHead.flatMap { $0.seq == log.last.event.seq ? $0 : nil } ?? original.signHead(for: view)
            // The copy starts as a ledger of its genesis event alone (its head signed again: the
            // same bytes as the source's first head, signatures being deterministic), grows
            // ahead of that head, and gets the source's head with its last entries.
            var frontier = MerkleFrontier()
            let hasher = original.chain.hasher
            let hashes = frontier.append(MerkleTree.leafHash(genesisLine, hasher: hasher), hasher: hasher)
            var map: SubjectMapRecords?
            if original.version >= 2 {
                var genesisMap = SubjectMap(hasher: hasher)
                try genesisMap.set(SubjectMap.ledgerStream, seq: 0)
                map = genesisMap.takeNewRecords(firstIndex: 0, coveringSize: 1)
            }
            let first = SignedHead.sign(Checkpoint(origin: original.genesis.ledgerName, size: 1, root: frontier.root(hasher: hasher)),
                                        chainHash: original.chain.hash(ofBody: genesis.body), key: try original.verifierKey, signer: signer)
            let setup = LedgerSetup(
                catalog: catalog, publicKey: publicKey, genesis: genesis,
                derived: DerivedUpdate(indexFrom: 0, streamKeys: [SubjectMap.ledgerStream], treeFrom: 0, treeHashes: hashes, subjectMap: map.map { ($0, 0) }),
                head: first)
            return (log.size, setup, head, try tx.checkpoints(), try tx.subjectRecords(), frontier)
        }
        try target.create(setup)
        // The key file goes over as it is (an encrypted key stays encrypted under its passphrase),
        // when the target keeps keys at all: a PostgreSQL target does not, and its writers load
        // the key from where it is now.
        if let targetKeys = target.keyStore, let sourceKeys = original.keys {
            try targetKeys.saveKeyFile(try sourceKeys.loadKeyFile())
        }
        let hasher = original.chain.hasher
        var next = 1
        var subjects = salts.sorted { $0.key < $1.key }.map { (subjectID: $0.key, record: $0.value) }
        // The source is read in one transaction per part; the parts are its lines up to the
        // size verified above, which no later write changes.
        while next < size {
            let upper = min(size, next + max(1, batchLines))
            var entries: [[UInt8]] = []
            try source.read { tx in
                try tx.entries(next..<upper, batchSize: batchLines, indexedKeys: false) { batch in
                    for i in 0..<batch.count { entries.append(batch.entry(i)) }
                }
            }
            let first = next
            let pending = subjects
            // Each part is a commit with a head of its own, signed for the copy (a commit's
            // entries and its head are stored together); the last part's is the source's head.
            for entry in entries { _ = frontier.append(MerkleTree.leafHash(entry, hasher: hasher), hasher: hasher) }
            let partHead = upper == size ? head : SignedHead.sign(
                Checkpoint(origin: original.genesis.ledgerName, size: Int64(upper), root: frontier.root(hasher: hasher)),
                chainHash: original.chain.hash(ofBody: try EventCodec.decode(line: entries[entries.count - 1]).body), key: try original.verifierKey, signer: signer)
            try target.write { tx in
                let counts = try tx.derivedCounts()
                let unchanged = DerivedUpdate(indexFrom: counts.indexed, streamKeys: [], treeFrom: counts.treeHashes, treeHashes: [], subjectMap: nil)
                if let warning = try tx.commit(LedgerCommit(firstSeq: first, entries: entries, derived: unchanged, subjects: pending, head: partHead)) {
                    throw ConsentError.storage("copying entries \(first)–\(upper - 1): \(warning)")
                }
            }
            subjects = []
            next = upper
        }
        if size == 1 {
            try target.write { tx in
                let counts = try tx.derivedCounts()
                _ = try tx.commit(LedgerCommit(firstSeq: 1, entries: [], derived: DerivedUpdate(indexFrom: counts.indexed, streamKeys: [], treeFrom: counts.treeHashes, treeHashes: [], subjectMap: nil), subjects: subjects, head: head))
            }
        }
        let copy = try Ledger.open(store: target)
        try copy.storeDerivedData()
        try target.write { tx in
            for checkpoint in checkpoints { try tx.recordCheckpoint(checkpoint) }
        }
        let copyReport = try copy.verify()
        guard copyReport.head == sourceReport.head, copyReport.events == sourceReport.events else {
            throw ConsentError.storage("the copy's head \(copyReport.head) differs from the source's \(sourceReport.head)")
        }
        let total = Int64(sourceReport.events)
        let sourceRoot = try original.reading { view in try original.checkpoint(size: total, view).root }
        let copyRoot = try copy.reading { view in try copy.checkpoint(size: total, view).root }
        guard sourceRoot == copyRoot else {
            throw ConsentError.storage("the copy's Merkle root \(copyRoot.hex) differs from the source's \(sourceRoot.hex)")
        }
        guard try copy.issuedCheckpoints() == checkpoints else {
            throw ConsentError.storage("the copy's recorded checkpoints differ from the source's")
        }
        return LedgerCopyReport(events: copyReport.events, subjects: copyReport.subjects, checkpoints: checkpoints.count, head: copyReport.head, root: copyRoot)
    }
}

extension Ledger {
    /// Makes the derived data that the storage lacks durable (computed from the log, as every
    /// read computes it in memory): a commit of no entries. Nothing is signed.
    public func storeDerivedData() throws {
        try store.write { tx in
            var view = try view(tx)
            var derived = view.pendingDerived(newKeys: [], newHashes: [])
            if var map = view.map {
                let records = map.map.takeNewRecords(firstIndex: map.nextIndex, coveringSize: Int64(view.size))
                derived.subjectMap = (records, map.nextIndex)
                view.map = map
            }
            guard !derived.streamKeys.isEmpty || !derived.treeHashes.isEmpty || (derived.subjectMap?.records.count ?? 0) > 1 else { return }
            if let warning = try tx.commit(LedgerCommit(firstSeq: view.size, entries: [], derived: derived, subjects: [], head: nil)) {
                throw ConsentError.storage(warning)
            }
        }
        memory(streams: nil)
    }
}
