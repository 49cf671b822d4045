import ConsentDomain

/// The derived data beside the log (line locations and the Merkle tree's stored hashes) and
/// what it serves: checkpoints and proofs. All of it is rebuildable from the log; `verify`
/// checks it against the log.
extension Ledger {
    /// Line locations and tree hashes for records appended after `existing`.
    struct DerivedAppend {
        var locations: [LineLocation] = []
        var treeHashes: [Digest] = []
    }

    /// The derived data for `lines` (without newlines), records `firstSeq…`, starting at log
    /// offset `offset`, given that everything before `firstSeq` is already stored.
    func derive(lines: [[UInt8]], subjects: [[UInt8]], firstSeq: Int, offset: UInt64) throws -> DerivedAppend {
        var result = DerivedAppend()
        let stored = MerkleTree.storedHashCount(Int64(firstSeq))
        var position = offset
        let hasher = chain.hasher
        for (i, line) in lines.enumerated() {
            result.locations.append(LineLocation(offset: position, length: UInt32(line.count), subject: subjects[i]))
            position += UInt64(line.count) + 1
            let leaf = MerkleTree.leafHash(line, hasher: hasher)
            let pending = result.treeHashes
            let hashes = try MerkleTree.storedHashes(forRecord: Int64(firstSeq + i), leaf: leaf, hasher: hasher) { indexes in
                try indexes.map { index in
                    index < stored ? try store.readTreeHashes([index])[0] : pending[Int(index - stored)]
                }
            }
            result.treeHashes += hashes
        }
        return result
    }

    static func subjectBytes(_ payload: EventPayload) -> [UInt8] {
        payload.subject.flatMap { Hex.decode($0.value) } ?? LineLocation.noSubject
    }

    /// Brings the derived data up to the end of the log. Entries after the recorded head are not
    /// trusted (a crash may have cut their write short) and are computed again. Call with the
    /// exclusive lock held.
    func updateDerived(_ log: LogState) throws {
        let counts = try store.derivedCounts()
        let acknowledged = Int(log.recordedHead.seq) + 1
        var trusted = min(counts.lines, acknowledged, log.end.lines)
        while trusted > 0, counts.treeHashes < MerkleTree.storedHashCount(Int64(trusted)) { trusted -= 1 }
        if trusted == log.end.lines, counts.lines == trusted, counts.treeHashes == MerkleTree.storedHashCount(Int64(trusted)) { return }
        var from = LogCursor.start
        if trusted > 0 {
            let last = try store.readLineLocations((trusted - 1)..<trusted)[0]
            from = LogCursor(offset: last.offset + UInt64(last.length) + 1, lines: trusted)
        }
        var lines: [[UInt8]] = []
        var subjects: [[UInt8]] = []
        var firstOffset: UInt64?
        try store.scan(from: from, to: log.end, batchSize: 4096, containing: nil) { batch in
            for i in 0..<batch.count {
                if firstOffset == nil { firstOffset = batch.location(i, subject: []).offset }
                let line = batch.line(i)
                let record = try decode(line, number: batch.number(i))
                lines.append(line)
                subjects.append(Self.subjectBytes(record.event.payload))
            }
        }
        let derived = try derive(lines: lines, subjects: subjects, firstSeq: trusted, offset: firstOffset ?? from.offset)
        try store.writeDerived(locations: derived.locations, at: trusted, treeHashes: derived.treeHashes, at: MerkleTree.storedHashCount(Int64(trusted)))
    }

    /// Runs `body` under the shared lock with derived data that is current, repairing it under
    /// the exclusive lock first if a crash or an older version left it behind.
    func withCurrentDerived<T>(_ body: (LogState) throws -> T) throws -> T {
        let current = try store.withLock(exclusive: false) { () throws -> T? in
            let log = try store.logState()
            try checkHead(log)
            let counts = try store.derivedCounts()
            guard log.last.event.seq == log.recordedHead.seq, counts.lines == log.end.lines,
                counts.treeHashes == MerkleTree.storedHashCount(Int64(log.end.lines))
            else { return nil }
            return try body(log)
        }
        if let current { return current }
        return try store.withLock(exclusive: true) {
            let log = try store.logState()
            try checkHead(log)
            try updateDerived(log)
            return try body(log)
        }
    }

    // MARK: - Keys and checkpoints

    /// The verifier key of the ledger's checkpoints: the ledger's name and public key in the
    /// C2SP signed-note text form.
    public var verifierKey: NoteVerifierKey {
        // The name was checked when the ledger was created.
        try! NoteVerifierKey(name: genesis.ledgerName, publicKey: publicKey, hasher: chain.hasher)
    }

    func readHashes(_ indexes: [Int64]) throws -> [Digest] { try store.readTreeHashes(indexes) }

    /// The current checkpoint (unsigned) of the log's `size` records.
    func checkpoint(size: Int64) throws -> Checkpoint {
        Checkpoint(origin: genesis.ledgerName, size: size, root: try MerkleTree.treeHash(size: size, hasher: chain.hasher, read: readHashes))
    }

    /// The current signed checkpoint: a C2SP `tlog-checkpoint` signed as a `signed-note`.
    public func signedCheckpoint() throws -> (checkpoint: Checkpoint, note: String) {
        let signer = try signingKey()
        return try withCurrentDerived { log in
            let checkpoint = try checkpoint(size: Int64(log.end.lines))
            return (checkpoint, SignedNote.sign(checkpoint.text, key: verifierKey, signer: signer))
        }
    }

    /// The inclusion proof of record `seq` in the tree of `size` records.
    public func inclusionProof(seq: Int64, size: Int64) throws -> [Digest] {
        try withCurrentDerived { log in
            guard size <= Int64(log.end.lines) else { throw LedgerError.invalidRequest("the ledger has only \(log.end.lines) records, not \(size)") }
            return try MerkleTree.inclusionProof(record: seq, size: size, hasher: chain.hasher, read: readHashes)
        }
    }

    /// A consistency proof from an older signed checkpoint of this ledger to the current one.
    /// Fails if the old checkpoint is not signed by this ledger's key, or is not a prefix of
    /// this log (a fork).
    public func proveConsistency(from oldNote: String) throws -> ConsistencyProof {
        let key = verifierKey
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
        guard old.size >= 1, old.size <= new.size else {
            throw LedgerError.invalidRequest("old checkpoint has size \(old.size); the ledger has \(new.size) records")
        }
        return try withCurrentDerived { _ in
            let rootThen = try MerkleTree.treeHash(size: old.size, hasher: chain.hasher, read: readHashes)
            guard rootThen == old.root else {
                throw LedgerError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "the old checkpoint's root differs from this ledger's tree at size \(old.size): the log was changed after that checkpoint was signed"))
            }
            let proof = try MerkleTree.consistencyProof(old: old.size, new: new.size, hasher: chain.hasher, read: readHashes)
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
        guard let salt = try store.readSubjectSalts()[SubjectID(subjectID)] else {
            throw LedgerError.invalidRequest("the ledger has no subject '\(subjectID)'")
        }
        let ref = subjectRef(id: subjectID, salt: salt)
        return try withCurrentDerived { log in
            let size = Int64(log.end.lines)
            let checkpoint = try checkpoint(size: size)
            let note = SignedNote.sign(checkpoint.text, key: verifierKey, signer: signer)
            let hasher = chain.hasher
            var state = SubjectState()
            var events: [ExportedEvent] = []
            for (seq, location) in try store.findLineLocations(subject: Hex.decode(ref.value)!) where Int64(seq) < size {
                let line = try store.readLine(at: location)
                let record = try decode(line, number: seq + 1)
                guard record.event.seq == UInt64(seq), record.event.payload.subject == ref else {
                    throw LedgerError.integrity(IntegrityFailure(line: seq + 1, seq: UInt64(seq), problem: "the line index points at another event (rebuild it by deleting lines.idx)"))
                }
                do throws(ReplayViolation) {
                    try state.apply(record.event, catalog: catalog)
                } catch {
                    throw LedgerError.integrity(IntegrityFailure(line: seq + 1, seq: error.seq, problem: error.problem))
                }
                let proof = try MerkleTree.inclusionProof(record: Int64(seq), size: size, hasher: hasher, read: readHashes)
                events.append(ExportedEvent(seq: Int64(seq), line: String(decoding: line, as: UTF8.self), proof: proof))
            }
            let genesisLine = try store.readLine(at: try store.readLineLocations(0..<1)[0])
            let genesisProof = try MerkleTree.inclusionProof(record: 0, size: size, hasher: hasher, read: readHashes)
            return AuditExport(
                scope: .subject, ledger: genesis.ledgerName, verifierKey: verifierKey.text, checkpoint: note,
                catalog: CatalogCodec.encode(catalog),
                genesis: ExportedEvent(seq: 0, line: String(decoding: genesisLine, as: UTF8.self), proof: genesisProof),
                subject: (subjectID, ref.value, Hex.encode(salt)), events: events,
                state: ListingJSON.encode(ConsentListing(state: state, catalog: catalog))
            )
        }
    }

    /// The whole ledger with one signed checkpoint; the verifier rebuilds the tree.
    public func exportAll() throws -> AuditExport {
        let signer = try signingKey()
        return try withCurrentDerived { log in
            let size = Int64(log.end.lines)
            let checkpoint = try checkpoint(size: size)
            let note = SignedNote.sign(checkpoint.text, key: verifierKey, signer: signer)
            var events: [ExportedEvent] = []
            try store.scan(from: .start, to: log.end, batchSize: 4096, containing: nil) { batch in
                for i in 0..<batch.count {
                    events.append(ExportedEvent(seq: Int64(batch.number(i) - 1), line: String(decoding: batch.line(i), as: UTF8.self), proof: []))
                }
            }
            let genesisProof = try MerkleTree.inclusionProof(record: 0, size: size, hasher: chain.hasher, read: readHashes)
            let first = events.removeFirst()
            return AuditExport(
                scope: .all, ledger: genesis.ledgerName, verifierKey: verifierKey.text, checkpoint: note,
                catalog: CatalogCodec.encode(catalog),
                genesis: ExportedEvent(seq: 0, line: first.line, proof: genesisProof),
                subject: nil, events: events, state: nil
            )
        }
    }
}
