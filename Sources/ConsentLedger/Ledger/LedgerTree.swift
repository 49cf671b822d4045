import ConsentDomain

/// The derived data beside the log (line locations and the Merkle tree's stored hashes) and
/// what it serves: checkpoints and proofs. All of it is rebuildable from the log; `verify`
/// checks it against the log.
extension Ledger {
    /// Brings the derived data up to the end of the log. Entries after the recorded head are not
    /// trusted (a crash may have cut their write short) and are computed again. Call with the
    /// exclusive lock held.
    func updateDerived(_ log: LogState) throws {
        try updateIndexAndTree(log)
        try updateMap(log)
    }

    private func updateIndexAndTree(_ log: LogState) throws {
        let counts = try store.derivedCounts()
        let acknowledged = Int(log.recordedHead.seq) + 1
        var trusted = min(counts.lines, acknowledged, log.end.lines)
        while trusted > 0, counts.treeHashes < MerkleTree.storedHashCount(Int64(trusted)) { trusted -= 1 }
        if trusted == log.end.lines, counts.lines == trusted, counts.treeHashes == MerkleTree.storedHashCount(Int64(trusted)) { return }
        // Lines past the head may have been left unsynced by a writer that died: make them
        // durable before the derived data (and anything signed from it) vouches for them.
        if log.end.lines > acknowledged { try store.syncLog() }
        var from = LogCursor.start
        if trusted > 0 {
            let last = try store.readLineLocations((trusted - 1)..<trusted)[0]
            // Checked before adding: a tampered offset must not trap.
            guard last.offset < log.end.offset, UInt64(last.length) < log.end.offset - last.offset else {
                throw LedgerError.integrity(IntegrityFailure(line: trusted, seq: UInt64(trusted - 1), problem: "the line index places this line at offset \(last.offset), length \(last.length), past the log's \(log.end.offset) bytes (\(store.derivedRepair))"))
            }
            from = LogCursor(offset: last.offset + UInt64(last.length) + 1, lines: trusted)
        }
        // Rebuilt from the log's lines onto the stored frontier; before anything is signed from
        // it, ``trustedFrontier(_:)`` checks that frontier against the signed head.
        var frontier = try MerkleFrontier(size: Int64(trusted), read: readHashes)
        var locations: [LineLocation] = []
        var treeHashes: [Digest] = []
        let hasher = chain.hasher
        try store.scan(from: from, to: log.end, batchSize: 4096, containing: nil) { batch in
            for i in 0..<batch.count {
                let line = batch.line(i)
                let record = try decode(line, number: batch.number(i))
                locations.append(batch.location(i, subject: StreamKey.of(record.event.payload)))
                treeHashes += frontier.append(MerkleTree.leafHash(line, hasher: hasher), hasher: hasher)
            }
        }
        try store.writeDerived(locations: locations, at: trusted, treeHashes: treeHashes, at: MerkleTree.storedHashCount(Int64(trusted)), subjectMap: nil)
    }

    /// Runs `body` under the shared lock with derived data that is current, repairing it under
    /// the exclusive lock first if a crash or an older version left it behind.
    func withCurrentDerived<T>(_ body: (LogState) throws -> T) throws -> T {
        let current = try store.withLock(exclusive: false) { () throws -> T? in
            let log = try store.logState()
            try checkHead(log)
            let counts = try store.derivedCounts()
            guard log.last.event.seq == log.recordedHead.seq, counts.lines == log.end.lines,
                counts.treeHashes == MerkleTree.storedHashCount(Int64(log.end.lines)),
                try version < 2 || storedMap()?.coveredSize == Int64(log.end.lines)
            else { return nil }
            return try body(log)
        }
        if let current { return current }
        return try store.withLock(exclusive: true) {
            let log = try store.logState()
            try checkHead(log)
            try updateDerived(log)
            // A complete command that reached the log but not the head (a crash between the two)
            // is durable; reads take it as it is, each checking the signatures it relies on, and
            // the next write signs a head that covers it (reads never sign).
            return try body(log)
        }
    }

    // MARK: - Keys and checkpoints

    /// The verifier key of the ledger's checkpoints: the ledger's name and public key in the
    /// C2SP signed-note text form.
    public var verifierKey: NoteVerifierKey {
        get throws {
            do {
                return try NoteVerifierKey(name: genesis.ledgerName, publicKey: publicKey, hasher: chain.hasher)
            } catch {
                throw LedgerError.invalidRequest("this ledger's name cannot name a checkpoint key: \(error)")
            }
        }
    }

    func readHashes(_ indexes: [Int64]) throws -> [Digest] { try store.readTreeHashes(indexes) }

    /// The checkpoint (unsigned) of an older size, from the stored tree hashes: for comparing
    /// with a signed checkpoint of that size, never for signing.
    func checkpoint(size: Int64) throws -> Checkpoint {
        Checkpoint(origin: genesis.ledgerName, size: size, root: try MerkleTree.treeHash(size: size, hasher: chain.hasher, read: readHashes))
    }

    /// The checkpoint of the whole log, its root from signed data only (``trustedRoot(_:)``).
    func currentCheckpoint(_ log: LogState) throws -> Checkpoint {
        Checkpoint(origin: genesis.ledgerName, size: Int64(log.end.lines), root: try trustedRoot(log))
    }

    /// An inclusion proof from the stored tree hashes, checked against the trusted root before
    /// it is handed out: a corrupted `tree.hashes` gives an integrity error, not a bad proof.
    func checkedInclusionProof(record: Int64, line: [UInt8], checkpoint: Checkpoint) throws -> [Digest] {
        let proof = try MerkleTree.inclusionProof(record: record, size: checkpoint.size, hasher: chain.hasher, read: readHashes)
        guard MerkleTree.checkInclusion(proof, record: record, leaf: MerkleTree.leafHash(line, hasher: chain.hasher), size: checkpoint.size, root: checkpoint.root, hasher: chain.hasher) else {
            throw LedgerError.integrity(IntegrityFailure(line: Int(record) + 1, seq: UInt64(record), problem: "the stored tree hashes give an inclusion proof that does not lead to the signed root (\(store.derivedRepair))"))
        }
        return proof
    }

    /// The current signed checkpoint: a C2SP `tlog-checkpoint` signed as a `signed-note`.
    public func signedCheckpoint() throws -> (checkpoint: Checkpoint, note: String) {
        let signer = try signingKey()
        let issued = try withCurrentDerived { log in
            let checkpoint = try currentCheckpoint(log)
            return (checkpoint, SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer))
        }
        recordIssued(IssuedCheckpoint(size: issued.0.size, note: issued.1))
        return issued
    }

    /// The signed checkpoints this ledger issued and recorded, by tree size.
    public func issuedCheckpoints() throws -> [IssuedCheckpoint] {
        try store.withLock(exclusive: false) { try store.readCheckpoints() }
    }

    /// The inclusion proof of record `seq` in the tree of `size` records.
    public func inclusionProof(seq: Int64, size: Int64) throws -> [Digest] {
        try withCurrentDerived { log in
            guard size <= Int64(log.end.lines) else { throw LedgerError.invalidRequest("the ledger has only \(log.end.lines) records, not \(size)") }
            guard size == Int64(log.end.lines) else {
                // An older tree's root is not kept signed here; the caller checks the proof
                // against the checkpoint of that size it holds.
                return try MerkleTree.inclusionProof(record: seq, size: size, hasher: chain.hasher, read: readHashes)
            }
            let location = try store.readLineLocations(Int(seq)..<Int(seq) + 1)[0]
            return try checkedInclusionProof(record: seq, line: try store.readLine(at: location), checkpoint: try currentCheckpoint(log))
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
            throw LedgerError.invalidRequest("old checkpoint: \(error)")
        }
        guard old.origin == genesis.ledgerName else {
            throw LedgerError.invalidRequest("old checkpoint is for '\(old.origin)', not this ledger '\(genesis.ledgerName)'")
        }
        let (new, newNote) = try signedCheckpoint()
        guard old.size >= 1 else { throw LedgerError.invalidRequest("old checkpoint has size 0") }
        guard old.size <= new.size else {
            throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the ledger holds \(new.size) records but a checkpoint it signed covers \(old.size): signed events were removed"))
        }
        return try withCurrentDerived { _ in
            let rootThen = try MerkleTree.treeHash(size: old.size, hasher: chain.hasher, read: readHashes)
            guard rootThen == old.root else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the old checkpoint's root differs from this ledger's tree at size \(old.size): the log was changed after that checkpoint was signed"))
            }
            let proof = try MerkleTree.consistencyProof(old: old.size, new: new.size, hasher: chain.hasher, read: readHashes)
            guard MerkleTree.checkConsistency(proof, old: old.size, oldRoot: old.root, new: new.size, newRoot: new.root, hasher: chain.hasher) else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the stored tree hashes give a consistency proof that does not lead to the signed root (\(store.derivedRepair))"))
            }
            return ConsistencyProof(oldNote: oldNote, newNote: newNote, proof: proof)
        }
    }
}

/// A consistency proof between two signed checkpoints of one ledger.
public struct ConsistencyProof: Hashable, Sendable {
    public let oldNote: String
    public let newNote: String
    public let proof: [Digest]

    public init(oldNote: String, newNote: String, proof: [Digest]) {
        self.oldNote = oldNote
        self.newNote = newNote
        self.proof = proof
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
            throw LedgerError.invalidRequest("the ledger has no subject '\(subjectID)'")
        }
        let ref = subjectRef(id: subjectID, salt: salt)
        return try withCurrentDerived { log in
            let size = Int64(log.end.lines)
            let checkpoint = try currentCheckpoint(log)
            let note = SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer)
            let ledgerStream = try streamEntries(SubjectMap.ledgerStream, log: log)
            let versions = try catalogVersions(ledgerStream)
            var catalogEvents: [ExportedEvent] = []
            for entry in ledgerStream.dropFirst() {
                let proof = try checkedInclusionProof(record: Int64(entry.seq), line: entry.line, checkpoint: checkpoint)
                catalogEvents.append(ExportedEvent(seq: Int64(entry.seq), line: String(decoding: entry.line, as: UTF8.self), proof: proof))
            }
            var state = SubjectState()
            var events: [ExportedEvent] = []
            for entry in try streamEntries(StreamKey.of(subject: ref), log: log) {
                let (seq, line, record) = (entry.seq, entry.line, entry.record)
                if version < 2 { try checkSignature(record, line: seq + 1) }
                do throws(ReplayViolation) {
                    try state.apply(record.event, catalog: Self.catalog(in: versions, before: UInt64(seq)))
                } catch {
                    throw LedgerError.integrity(IntegrityFailure(line: seq + 1, seq: error.seq, problem: error.problem))
                }
                let proof = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint)
                events.append(ExportedEvent(seq: Int64(seq), line: String(decoding: line, as: UTF8.self), proof: proof))
            }
            let genesisLine = try store.readLine(at: try store.readLineLocations(0..<1)[0])
            let genesisProof = try checkedInclusionProof(record: 0, line: genesisLine, checkpoint: checkpoint)
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
        return try withCurrentDerived { log in
            let checkpoint = try currentCheckpoint(log)
            let note = SignedNote.sign(checkpoint.text, key: try verifierKey, signer: signer)
            var events: [ExportedEvent] = []
            try store.scan(from: .start, to: log.end, batchSize: 4096, containing: nil) { batch in
                for i in 0..<batch.count {
                    events.append(ExportedEvent(seq: Int64(batch.number(i) - 1), line: String(decoding: batch.line(i), as: UTF8.self), proof: []))
                }
            }
            let first = events.removeFirst()
            let genesisProof = try checkedInclusionProof(record: 0, line: Array(first.line.utf8), checkpoint: checkpoint)
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
    func catalogVersions(_ log: LogState) throws -> [CatalogVersion] {
        try catalogVersions(try streamEntries(SubjectMap.ledgerStream, log: log))
    }

    /// The catalogue versions of the ledger stream's events.
    func catalogVersions(_ ledgerStream: [StreamEntry]) throws -> [CatalogVersion] {
        var versions = [CatalogVersion(seq: 0, at: genesisTime, catalog: catalog, published: nil)]
        for entry in ledgerStream where entry.seq > 0 {
            guard case .catalogPublished(let published) = entry.record.event.payload else {
                throw LedgerError.integrity(IntegrityFailure(line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a ledger event after the genesis event is not a published catalogue"))
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
            throw LedgerError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the published catalogue's SHA-256 differs from its 'catalog' member"))
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
        try withCurrentDerived { log in try catalogVersions(log) }
    }

    /// Publishes a new catalogue version as a signed event: from now on grants record its policy
    /// versions, and earlier grants of a changed version are outdated (a changed required
    /// consent deactivates its feature until the subject consents again). Each consent's notice
    /// hash is the SHA-256 of its link.
    @discardableResult
    public func publish(_ newCatalog: Catalog, actor: String = "consentctl") throws -> LedgerEvent {
        try Self.validateText(actor, what: "actor", maxBytes: 128)
        let signer = try signingKey()
        return try writing { afterCommit in
            let log = try store.logState()
            try checkHead(log)
            try updateDerived(log)
            let current = try catalogVersions(log).last!.catalog
            if let problem = newCatalog.problemAsUpdate(of: current) {
                throw LedgerError.invalidRequest("cannot publish this catalogue: \(problem)")
            }
            let hasher = chain.hasher
            let notices = newCatalog.features.flatMap { f in
                f.consents.map { PolicyNotice(feature: f.code, consent: $0.code, version: $0.version, sha256: hasher.sha256(Array($0.link.utf8)).hex) }
            }
            let published = CatalogPublished(catalog: newCatalog, catalogHash: hasher.sha256(CatalogCodec.canonicalBytes(newCatalog)).hex, notices: notices)
            let seq = log.last.event.seq + 1
            let event = LedgerEvent(seq: seq, at: max(clock(), log.last.event.at), actor: actor, command: CommandSpan(first: seq, size: 1), payload: .catalogPublished(published))
            let committed = try commit([event], after: log, signer: signer, streams: try streamState(for: [SubjectMap.ledgerStream], log: log))
            if let warning = committed.warning { lastWarning.withLock { $0 = warning } }
            afterCommit.append { [self] in
                if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
                memory(streams: committed.streams)
                advanceMemory(from: log.end, to: committed.cursor, events: [event], head: committed.head)
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
        if let listing = try store.withLock(exclusive: false, { () throws -> ConsentListing? in
            let log = try store.logState()
            guard let (replay, cursor) = warmReplay(), cursor == log.end else { return nil }
            guard let ref = try subjectRef(for: subjectID) else { return ConsentListing(state: SubjectState(), catalog: replay.catalog) }
            return ConsentListing(state: replay.state(of: ref), catalog: replay.catalog)
        }) {
            return listing
        }
        return try report(for: subjectID).listing
    }
}
