import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// The derived data beside the log (line locations and the Merkle tree's stored hashes) and
/// what it serves: checkpoints and proofs. All of it is rebuildable from the log; `verify`
/// checks it against the log.
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
        try checkHead(log)
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
        var view = LogView(tx: tx, log: log, indexTrusted: indexTrusted, pendingKeys: pendingKeys, treeTrusted: MerkleTree.storedHashCount(Int64(trustedTreeSize)), pendingTree: pendingTree, map: nil)
        if version >= 2 {
            view.map = try checkedMap(StoredMap(map: map, nextIndex: stored?.nextIndex ?? 0, coveredSize: Int64(log.size)), log: log)
        }
        return view
    }

    /// Runs `body` in a read transaction, with the view of the log in it.
    package func reading<T>(_ body: (LogView) throws -> T) throws -> T {
        try store.read { tx in try body(try view(tx)) }
    }

    // MARK: - Keys and checkpoints

    /// The verifier key of the ledger's checkpoints: the ledger's name and public key in the
    /// C2SP signed-note text form.
    public var verifierKey: NoteVerifierKey {
        get throws {
            do {
                return try NoteVerifierKey(name: genesis.ledgerName, publicKey: publicKey, hasher: chain.hasher)
            } catch {
                throw ConsentError.invalidRequest("this ledger's name cannot name a checkpoint key: \(error)")
            }
        }
    }

    /// The checkpoint (unsigned) of an older size, from the stored tree hashes: for comparing
    /// with a signed checkpoint of that size, never for signing.
    package func checkpoint(size: Int64, _ view: LogView) throws -> Checkpoint {
        Checkpoint(origin: genesis.ledgerName, size: size, root: try MerkleTree.treeHash(size: size, hasher: chain.hasher, read: view.treeHashes))
    }

    /// The checkpoint (unsigned) of an older size, read in a transaction of its own.
    func checkpoint(size: Int64) throws -> Checkpoint {
        try reading { view in try checkpoint(size: size, view) }
    }

    /// The checkpoint of the whole log, its root from signed data only (``trustedRoot(_:)``).
    func currentCheckpoint(_ view: LogView) throws -> Checkpoint {
        Checkpoint(origin: genesis.ledgerName, size: Int64(view.size), root: try trustedRoot(view))
    }

    /// An inclusion proof from the stored tree hashes, checked against the trusted root before
    /// it is handed out: a corrupted `tree.hashes` gives an integrity error, not a bad proof.
    func checkedInclusionProof(record: Int64, line: [UInt8], checkpoint: Checkpoint, _ view: LogView) throws -> [Digest] {
        let proof = try MerkleTree.inclusionProof(record: record, size: checkpoint.size, hasher: chain.hasher, read: view.treeHashes)
        guard MerkleTree.checkInclusion(proof, record: record, leaf: MerkleTree.leafHash(line, hasher: chain.hasher), size: checkpoint.size, root: checkpoint.root, hasher: chain.hasher) else {
            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: Int(record) + 1, seq: UInt64(record), problem: "the stored tree hashes give an inclusion proof that does not lead to the signed root (\(store.names.derivedRepair))"))
        }
        return proof
    }

    /// The current signed checkpoint: a C2SP `tlog-checkpoint` signed as a `signed-note`.
    public func signedCheckpoint() throws -> (checkpoint: Checkpoint, note: String) {
        let signer = try signingKey()
        let issued = try reading { view in
            let checkpoint = try currentCheckpoint(view)
            return (checkpoint, SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer))
        }
        recordIssued(IssuedCheckpoint(size: issued.0.size, note: issued.1))
        return issued
    }

    /// The signed checkpoints this ledger issued and recorded, by tree size.
    public func issuedCheckpoints() throws -> [IssuedCheckpoint] {
        try store.read { tx in try tx.checkpoints() }
    }

    /// The inclusion proof of record `seq` in the tree of `size` records.
    public func inclusionProof(seq: Int64, size: Int64) throws -> [Digest] {
        try reading { view in
            guard seq >= 0, seq < size else { throw ConsentError.invalidRequest("record \(seq) is not in a tree of \(size) records") }
            guard size <= Int64(view.size) else { throw ConsentError.invalidRequest("the ledger has only \(view.size) records, not \(size)") }
            guard size == Int64(view.size) else {
                // An older tree's root is not kept signed here; the caller checks the proof
                // against the checkpoint of that size it holds.
                return try MerkleTree.inclusionProof(record: seq, size: size, hasher: chain.hasher, read: view.treeHashes)
            }
            return try checkedInclusionProof(record: seq, line: try view.tx.entry(Int(seq)), checkpoint: try currentCheckpoint(view), view)
        }
    }

    /// A consistency proof from an older signed checkpoint of this ledger to the current one.
    /// Fails if the old checkpoint is not signed by this ledger's key, or is not a prefix of
    /// this log (a fork).
    public func proveConsistency(from oldNote: String) throws -> ConsistencyProof {
        let key = try verifierKey
        let old: Checkpoint
        do {
            old = try Checkpoint(text: SignedNote.open(oldNote, key: key, verifier: verifier))
        } catch {
            throw ConsentError.invalidRequest("old checkpoint: \(error)")
        }
        guard old.origin == genesis.ledgerName else {
            throw ConsentError.invalidRequest("old checkpoint is for '\(old.origin)', not this ledger '\(genesis.ledgerName)'")
        }
        let (new, newNote) = try signedCheckpoint()
        guard old.size >= 1 else { throw ConsentError.invalidRequest("old checkpoint has size 0") }
        guard old.size <= new.size else {
            throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the ledger holds \(new.size) records but a checkpoint it signed covers \(old.size): signed events were removed"))
        }
        return try reading { view in
            let rootThen = try MerkleTree.treeHash(size: old.size, hasher: chain.hasher, read: view.treeHashes)
            guard rootThen == old.root else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the old checkpoint's root differs from this ledger's tree at size \(old.size): the log was changed after that checkpoint was signed"))
            }
            let proof = try MerkleTree.consistencyProof(old: old.size, new: new.size, hasher: chain.hasher, read: view.treeHashes)
            guard MerkleTree.checkConsistency(proof, old: old.size, oldRoot: old.root, new: new.size, newRoot: new.root, hasher: chain.hasher) else {
                throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the stored tree hashes give a consistency proof that does not lead to the signed root (\(store.names.derivedRepair))"))
            }
            return ConsistencyProof(oldNote: oldNote, newNote: newNote, proof: proof)
        }
    }
}

// MARK: - Audit exports

extension Ledger {
    /// One subject's export: their events with inclusion proofs, the genesis event with its
    /// proof, the catalogue, a freshly signed checkpoint and the replayed state. Other subjects
    /// appear only as hashes on the audit paths.
    public func exportSubject(_ subjectID: String) throws -> AuditExport {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        let signer = try signingKey()
        guard let salt = try salt(of: subjectID) else {
            throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'")
        }
        let ref = subjectRef(id: subjectID, salt: salt)
        return try reading { view in
            let size = Int64(view.size)
            let checkpoint = try currentCheckpoint(view)
            let note = SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer)
            let ledgerStream = try streamEntries(SubjectMap.ledgerStream, view)
            let versions = try catalogVersions(ledgerStream)
            var catalogEvents: [ExportedEvent] = []
            for entry in ledgerStream.dropFirst() {
                let proof = try checkedInclusionProof(record: Int64(entry.seq), line: entry.line, checkpoint: checkpoint, view)
                catalogEvents.append(ExportedEvent(seq: Int64(entry.seq), line: String(decoding: entry.line, as: UTF8.self), proof: proof))
            }
            var state = SubjectState()
            var events: [ExportedEvent] = []
            for entry in try streamEntries(StreamKey.of(subject: ref), view) {
                let (seq, line, record) = (entry.seq, entry.line, entry.record)
                if version < 2 { try checkSignature(record, line: seq + 1) }
                do throws(ReplayViolation) {
                    try state.apply(record.event, catalog: Self.catalog(in: versions, before: UInt64(seq)))
                } catch {
                    throw ConsentError.integrity(IntegrityFailure(line: seq + 1, seq: error.seq, problem: error.problem))
                }
                let proof = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint, view)
                events.append(ExportedEvent(seq: Int64(seq), line: String(decoding: line, as: UTF8.self), proof: proof))
            }
            let genesisLine = try view.tx.entry(0)
            let genesisProof = try checkedInclusionProof(record: 0, line: genesisLine, checkpoint: checkpoint, view)
            let statement = ExportStatement(origin: genesis.ledgerName, size: size, subject: ref.value, catalogVersions: catalogEvents.map(\.seq), events: events.map(\.seq))
            return AuditExport(
                scope: .subject, ledger: genesis.ledgerName, verifierKey: try verifierKey.text, checkpoint: note,
                catalog: CatalogCodec.encode(catalog),
                genesis: ExportedEvent(seq: 0, line: String(decoding: genesisLine, as: UTF8.self), proof: genesisProof),
                subject: (subjectID, ref.value, Hex.encode(salt)), events: events,
                state: ListingJSON.encode(ConsentListing(state: state, catalog: versions.last!.catalog)),
                catalogEvents: catalogEvents,
                statement: SignedNote.sign(statement.text, key: try verifierKey, signer: signer)
            )
        }
    }

    /// The whole ledger with one signed checkpoint; the verifier rebuilds the tree.
    public func exportAll() throws -> AuditExport {
        let signer = try signingKey()
        return try reading { view in
            let checkpoint = try currentCheckpoint(view)
            let note = SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer)
            var events: [ExportedEvent] = []
            try view.tx.entries(0..<view.size, batchSize: 4096, indexedKeys: false) { batch in
                for i in 0..<batch.count {
                    events.append(ExportedEvent(seq: Int64(batch.seq(i)), line: String(decoding: batch.entry(i), as: UTF8.self), proof: []))
                }
            }
            let first = events.removeFirst()
            let genesisProof = try checkedInclusionProof(record: 0, line: Array(first.line.utf8), checkpoint: checkpoint, view)
            return AuditExport(
                scope: .all, ledger: genesis.ledgerName, verifierKey: try verifierKey.text, checkpoint: note,
                catalog: CatalogCodec.encode(catalog),
                genesis: ExportedEvent(seq: 0, line: first.line, proof: genesisProof),
                subject: nil, events: events, state: nil
            )
        }
    }
}

// MARK: - Catalogue versions

/// A catalogue version and where it took effect.
public struct CatalogVersion: Sendable {
    public let seq: UInt64
    public let at: Timestamp
    public let catalog: Catalog
    /// The `catalog.published` event, or nil for the genesis catalogue.
    public let published: CatalogPublished?
}

extension Ledger {
    /// Every catalogue version of the log: the genesis catalogue, then each published one, from
    /// the ledger's own stream. Call with derived data current.
    func catalogVersions(_ view: LogView) throws -> [CatalogVersion] {
        try catalogVersions(try streamEntries(SubjectMap.ledgerStream, view))
    }

    /// The catalogue versions of the ledger stream's events.
    func catalogVersions(_ ledgerStream: [StreamEntry]) throws -> [CatalogVersion] {
        var versions = [CatalogVersion(seq: 0, at: genesisTime, catalog: catalog, published: nil)]
        for entry in ledgerStream where entry.seq > 0 {
            guard case .catalogPublished(let published) = entry.record.event.payload else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a ledger event after the genesis event is not a published catalogue"))
            }
            if version < 2 { try checkSignature(entry.record, line: entry.seq + 1) }
            try checkCatalogHash(published, seq: UInt64(entry.seq))
            versions.append(CatalogVersion(seq: entry.record.event.seq, at: entry.record.event.at, catalog: published.catalog, published: published))
        }
        return versions
    }

    /// A published catalogue's `catalog` member must be the SHA-256 of its canonical bytes.
    func checkCatalogHash(_ published: CatalogPublished, seq: UInt64) throws {
        guard chain.hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash else {
            throw ConsentError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the published catalogue's SHA-256 differs from its 'catalog' member"))
        }
    }

    /// The catalogue in force for an event at `seq`: the newest version published before it.
    static func catalog(in versions: [CatalogVersion], before seq: UInt64) -> Catalog {
        versions.last { $0.seq < seq }?.catalog ?? versions[0].catalog
    }

    /// The catalogue in force at a time (the newest one when `at` is nil).
    static func catalog(in versions: [CatalogVersion], at: Timestamp?) -> Catalog {
        guard let at else { return versions.last!.catalog }
        return versions.last { $0.at <= at }?.catalog ?? versions[0].catalog
    }

    /// The catalogue versions of the ledger, oldest first.
    public func catalogHistory() throws -> [CatalogVersion] {
        try reading { view in try catalogVersions(view) }
    }

    /// Publishes a new catalogue version as a signed event: from now on grants record its policy
    /// versions, and earlier grants of a changed version are outdated (a changed required
    /// consent deactivates its feature until the subject consents again). Each consent's notice
    /// hash is the SHA-256 of its link.
    @discardableResult
    public func publish(_ newCatalog: Catalog, actor: String = "consentctl") throws -> LedgerEvent {
        try Self.validateText(actor, what: "actor", maxBytes: 128)
        let signer = try signingKey()
        return try writing { tx, view, afterCommit in
            let log = view.log
            let current = try catalogVersions(view).last!.catalog
            if let problem = newCatalog.problemAsUpdate(of: current) {
                throw ConsentError.invalidRequest("cannot publish this catalogue: \(problem)")
            }
            let hasher = chain.hasher
            let notices = newCatalog.features.flatMap { f in
                f.consents.map { PolicyNotice(feature: f.code, consent: $0.code, version: $0.version, sha256: hasher.sha256(Array($0.link.utf8)).hex) }
            }
            let published = CatalogPublished(catalog: newCatalog, catalogHash: hasher.sha256(CatalogCodec.canonicalBytes(newCatalog)).hex, notices: notices)
            let seq = log.last.event.seq + 1
            let event = LedgerEvent(seq: seq, at: max(clock(), log.last.event.at), actor: actor, command: CommandSpan(first: seq, size: 1), payload: .catalogPublished(published))
            let committed = try commit([event], view, tx, signer: signer, streams: try streamState(for: [SubjectMap.ledgerStream], view), subjects: [])
            if let warning = committed.warning { lastWarning.withLock { $0 = warning } }
            afterCommit.append { [self] in
                if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
                memory(streams: committed.streams)
                advanceMemory(from: log.size, to: committed.size, events: [event], head: committed.head)
            }
            return event
        }
    }
}

// MARK: - Fast reads from the in-memory replay

extension Ledger {
    /// A subject's current consents. When ``loadAll()`` keeps a replay in memory and the log has
    /// not moved on, the answer comes from it (no log reads, no signature checks: the replay was
    /// built from checked lines); otherwise from ``report(for:asOf:)``.
    public func currentListing(for subjectID: String) throws -> ConsentListing {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        if let listing = try store.read({ tx throws -> ConsentListing? in
            let log = try tx.logState()
            guard let (replay, size) = warmReplay(), size == log.size else { return nil }
            guard let ref = try subjectRef(for: subjectID) else { return ConsentListing(state: SubjectState(), catalog: replay.catalog) }
            return ConsentListing(state: replay.state(of: ref), catalog: replay.catalog)
        }) {
            return listing
        }
        return try report(for: subjectID).listing
    }
}
