import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// Which key signs what. A ledger starts with the key its genesis event pins; each `key.rotated`
/// event of its ledger stream hands over to a new one (``KeySchedule``). Readers learn the
/// rotations from the log itself, each checked against the key before it, so the only key a
/// reader trusts without a signature is the genesis key that `public.key` (or the `ledger` row)
/// and the genesis event agree on.
extension Ledger {
    /// The checkpoint key for `key` (one of ``keyHistory()``): the ledger's name and that key, in the
    /// C2SP signed-note form.
    public func noteKey(_ key: PublicKey) throws -> NoteVerifierKey {
        do {
            return try NoteVerifierKey(name: genesis.ledgerName, publicKey: key, hasher: chain.hasher)
        } catch {
            throw ConsentError.invalidRequest("this ledger's name cannot name a checkpoint key: \(error)")
        }
    }

    /// The schedule of the genesis key alone (format 1, which has no rotations).
    var genesisSchedule: KeySchedule { KeySchedule(genesis: publicKey, hasher: chain.hasher) }

    /// The key schedule of the log's first `size` records, from the rotations of the ledger
    /// stream: the newest ledger event from `map` (the subject map of the whole log, not yet
    /// checked against the root the last event signs), then each earlier one by `streamPrev`,
    /// down to what this process learned before. Each rotation found is checked against the key
    /// before it (its line's signature, then ``KeySchedule/admit(_:seq:prev:keyID:ledger:hasher:verifier:)``).
    ///
    /// A map that hides a rotation hides every later one (each names its predecessor), so the
    /// newest key is then missing and the signed head, signed by it, fails to verify: an
    /// integrity failure, never a wrong key.
    func keySchedule(_ tx: any LedgerReadTransaction, map: SubjectMap?, size: Int) throws -> KeySchedule {
        guard version >= 2, let map else { return genesisSchedule }
        let cached = memory.withLock { $0.keys }
        if let cached, cached.through >= size { return cached.schedule }
        var schedule = cached?.schedule ?? genesisSchedule
        let learned = cached?.through ?? 1
        var rotations: [EventRecord] = []
        var next: UInt64?
        do {
            next = try map.lookup(SubjectMap.ledgerStream).seq
        } catch {
            throw mapFailure("\(error)")
        }
        while let seq = next, seq >= UInt64(learned) {
            guard seq < UInt64(size) else { throw mapFailure("it names seq \(seq) as the ledger stream's newest event, past the log's end", seq: seq) }
            let record = try decode(try tx.entry(Int(seq)), number: Int(seq) + 1)
            guard record.event.seq == seq, record.event.payload.subject == nil else {
                throw mapFailure("the ledger stream leads to seq \(seq), which is not a ledger event", seq: seq)
            }
            switch record.event.payload {
            case .keyRotated, .keyRevoked: rotations.append(record)
            default: break
            }
            next = record.stream.previous
        }
        for record in rotations.reversed() {
            try admitKeyEvent(record, into: &schedule)
        }
        memory.withLock { $0.keys = (schedule, size) }
        return schedule
    }

    /// Takes a `key.rotated` or `key.revoked` event into `schedule`: its line signed by the key in
    /// force, a rotation's handover by the new key, a revocation of a retired key.
    func admitKeyEvent(_ record: EventRecord, into schedule: inout KeySchedule) throws {
        let seq = record.event.seq
        try checkSignature(record, line: Int(seq) + 1, keys: schedule)
        do {
            switch record.event.payload {
            case .keyRotated(let rotation):
                try schedule.admit(rotation, seq: seq, prev: record.prev, keyID: record.keyID, ledger: genesis.ledgerName, hasher: chain.hasher, verifier: verifier)
            case .keyRevoked(let revocation):
                try schedule.admit(revocation, seq: seq, keyID: record.keyID)
            default:
                break
            }
        } catch {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: Int(seq) + 1, seq: seq, problem: error.description))
        }
    }

    /// An event's signature: by the key in force for its seq, named by its `kid`.
    func checkSignature(_ record: EventRecord, line: Int, keys: KeySchedule) throws {
        let inForce = keys.forEvent(record.event.seq)
        if let problem = keys.keyProblem(keyID: record.keyID, seq: record.event.seq) {
            throw ConsentError.integrity(IntegrityFailure(line: line, seq: record.event.seq, problem: problem))
        }
        let valid = EventCodec.signedMessage(body: record.body).withUnsafeBytes { verifier.isValid(record.signature, of: $0, by: inForce.key) }
        guard valid else {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: line, seq: record.event.seq, problem: "signature does not verify with the ledger's public key \(inForce.keyID)"))
        }
    }

    /// The checkpoint key of the whole log of `view`: the key in force after its last event.
    func checkpointKey(_ view: LogView) throws -> NoteVerifierKey {
        try noteKey(view.keys.forCheckpoint(size: Int64(view.size)).key)
    }

    /// Signs a note about the whole log of `view` (a checkpoint, a statement) with `signer`,
    /// which must hold the key in force.
    func signNote(_ text: String, signer: any EventSigner, _ view: LogView) throws -> String {
        let key = try checkpointKey(view)
        guard signer.publicKey == key.publicKey else {
            memory.withLock { $0.signer = nil }
            throw ConsentError.conflict("the ledger's key was rotated after this process unlocked the key it retired; nothing was signed: try again")
        }
        return SignedNote.sign(text, key: key, signer: signer)
    }

    /// The `key.rotated` entries below `checkpoint`'s size, each with its inclusion proof: what
    /// bundles and proofs carry so that an auditor may pin the genesis key or the current one.
    func rotationEntries(_ view: LogView, checkpoint: Checkpoint) throws -> [ExportedEvent] {
        try view.keys.periods.compactMap(\.rotation).filter { Int64($0) < checkpoint.size }.map { seq in
            let line = try view.tx.entry(Int(seq))
            let proof = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint, view)
            return ExportedEvent(seq: Int64(seq), line: String(decoding: line, as: UTF8.self), proof: proof)
        }
    }

    /// Every key of the ledger, oldest first, with the events each signs, as the log says.
    public func keyHistory() throws -> KeySchedule {
        try reading { view in view.keys }
    }

    /// The verifier key that signs the ledger's checkpoints now: the newest key. Auditors pin it
    /// or the genesis key (``verifierKey``); bundles carry the rotations between the two.
    public func currentVerifierKey() throws -> NoteVerifierKey {
        try noteKey(try keyHistory().current.key)
    }
}
