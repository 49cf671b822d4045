import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// Checkpoints, inclusion and consistency proofs: every root from signed data, every proof checked
/// against it before it is handed out.
extension Ledger {
    // MARK: - Keys and checkpoints

    /// The verifier key of the genesis key: the ledger's name and its first public key in the
    /// C2SP signed-note text form. It signs the ledger's checkpoints until the first key
    /// rotation (``currentVerifierKey()`` is the key that signs them now).
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

    /// The checkpoint of the whole log as the signed head commits to it: for naming the state a
    /// view shows (FHIR, reports) without signing anything.
    package func headCheckpoint() throws -> Checkpoint {
        try reading { view in try currentCheckpoint(view) }
    }

    /// An inclusion proof from the stored tree hashes, checked against the trusted root before
    /// it is handed out: a corrupted `tree.hashes` gives an integrity error, not a bad proof.
    func checkedInclusionProof(record: Int64, line: [UInt8], checkpoint: Checkpoint, _ view: LogView) throws -> [Digest] {
        let hasher = chain.hasher
        let leaf = MerkleTree.leafHash(line, hasher: hasher)
        let checked = try withAuthenticatedTreeHashes(view) { read in
            let proof = try MerkleTree.inclusionProof(record: record, size: checkpoint.size, hasher: hasher, read: read)
            return MerkleTree.checkInclusion(proof, record: record, leaf: leaf, size: checkpoint.size, root: checkpoint.root, hasher: hasher) ? proof : nil
        }
        guard let proof = checked else {
            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: Int(record) + 1, seq: UInt64(record), problem: "the stored tree hashes give an inclusion proof that does not lead to the signed root (\(store.names.derivedRepair))"))
        }
        return proof
    }

    /// The newest signed head when it covers the whole log, its signature checked: the
    /// checkpoint that checkpoints, exports and proofs hand out. It was signed when its commit
    /// was made, so handing it out needs no key.
    func coveringSignedHead(_ view: LogView) throws -> SignedHead? {
        let log = view.log
        guard let head = log.signedHead, head.checkpoint.size == Int64(log.size), head.chainHead.seq == log.last.event.seq,
            head.chainHead.hash == chain.hash(ofBody: log.last.body)
        else { return nil }
        try checkSignedHead(log, keys: view.keys)
        return head
    }

    /// The current signed checkpoint: a C2SP `tlog-checkpoint` signed as a `signed-note`. It is
    /// the ledger's signed head (a checkpoint with the extension line `chain HASH`), so no key is
    /// needed; only a log whose newest events no head covers yet (an older layout, or a write
    /// interrupted between its events and its head) has one signed now.
    public func signedCheckpoint() throws -> (checkpoint: Checkpoint, note: String) {
        let issued: (checkpoint: Checkpoint, note: String)
        if let head = try reading({ view in try coveringSignedHead(view).map { ($0, try witnessedNote($0, view)) } }) {
            issued = (head.0.checkpoint, head.1)
        } else {
            let signer = try signingKey()
            issued = try reading { view in
                let checkpoint = try currentCheckpoint(view)
                return (checkpoint, try signNote(checkpoint.text, signer: signer, view))
            }
        }
        try recordIssued(IssuedCheckpoint(size: issued.checkpoint.size, note: issued.note))
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
    /// Fails if the old checkpoint is not signed by this ledger's key in force at its size, or
    /// is not a prefix of this log (a fork).
    public func proveConsistency(from oldNote: String) throws -> ConsistencyProof {
        // The size the note claims picks the key; the signature then vouches for the size.
        let claimed = (try? SignedNote.split(oldNote)).flatMap { try? Checkpoint(text: $0.text) }
        let key = try noteKey(try keyHistory().forCheckpoint(size: claimed?.size ?? 0).key)
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
            // With key rotations below the newer checkpoint, the chain that says which key signed each.
            let keys = try rotationEntries(view, checkpoint: new)
            let genesisLine = try view.tx.entry(0)
            let genesis = keys.isEmpty ? nil : ExportedEvent(seq: 0, line: String(decoding: genesisLine, as: UTF8.self), proof: try checkedInclusionProof(record: 0, line: genesisLine, checkpoint: new, view))
            return ConsistencyProof(oldNote: oldNote, newNote: newNote, proof: proof, genesis: genesis, keys: keys)
        }
    }
}
