import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// A witness the ledger submits its checkpoints to: where it listens (its submission prefix)
/// and the key its cosignatures must verify with.
public struct WitnessEndpoint: Hashable, Sendable {
    public let url: String
    public let key: CosignerKey

    public init(url: String, key: CosignerKey) {
        self.url = url
        self.key = key
    }
}

/// What submitting a checkpoint to witnesses gave.
public struct WitnessingResult: Sendable {
    /// A witness that did not cosign, and why.
    public struct Refusal: Sendable, Hashable {
        public let witness: String
        public let problem: String
        /// Whether the answer is evidence against the ledger (the witness has seen a larger or
        /// different tree: a fork, a split view or lost events) rather than an outage.
        public let isEvidence: Bool
    }

    public let checkpoint: Checkpoint
    /// The checkpoint note with every valid cosignature the ledger holds for it, as recorded.
    public let note: String
    /// The witnesses that cosigned now, by name.
    public let cosignedBy: [String]
    public let refusals: [Refusal]
}

extension Ledger {
    /// Submits the current signed checkpoint to each witness (C2SP `tlog-witness`
    /// `add-checkpoint`) with a consistency proof from the size that witness last cosigned, as
    /// the ledger's recorded checkpoints show it, or as the witness says in a 409 answer.
    /// Cosignatures that verify with the witness's key are added to the checkpoint and recorded
    /// with it; the others are dropped. Needs no signing key.
    public func witnessCheckpoint(by witnesses: [WitnessEndpoint], transport: any WitnessTransport) throws -> WitnessingResult {
        let (checkpoint, signed) = try signedCheckpoint()
        var note = signed
        var cosignedBy: [String] = []
        var refusals: [WitnessingResult.Refusal] = []
        let recorded = try issuedCheckpoints()
        for witness in witnesses {
            // The largest size this witness cosigned, among the checkpoints the ledger recorded.
            let known = recorded.reversed().first { issued in
                issued.size <= checkpoint.size && (try? Cosignature.verifiedCosigners(of: issued.note, keys: [witness.key], verifier: verifier))?.isEmpty == false
            }?.size ?? 0
            do {
                let line = try submit(note, checkpoint: checkpoint, to: witness, oldSize: known, transport: transport)
                note = try Self.note(note, replacingCosignatureOf: witness.key, with: line)
                cosignedBy.append(witness.key.name)
            } catch let refusal as WitnessingResult.Refusal {
                refusals.append(refusal)
            }
        }
        if !cosignedBy.isEmpty {
            try store.write { tx in try tx.recordCheckpoint(IssuedCheckpoint(size: checkpoint.size, note: note, replaces: true)) }
        }
        return WitnessingResult(checkpoint: checkpoint, note: note, cosignedBy: cosignedBy, refusals: refusals)
    }

    /// One witness: a request from `oldSize`; after a 409 naming another size, again from that
    /// size (a few times: another submitter may move the witness on meanwhile). Returns the
    /// witness's verified cosignature line.
    private func submit(_ note: String, checkpoint: Checkpoint, to witness: WitnessEndpoint, oldSize: Int64, transport: any WitnessTransport) throws -> String {
        let name = witness.key.name
        func refuse(_ problem: String, evidence: Bool = false) -> WitnessingResult.Refusal {
            WitnessingResult.Refusal(witness: name, problem: problem, isEvidence: evidence)
        }
        var old = oldSize
        for _ in 0..<Self.witnessAttempts {
            guard old <= checkpoint.size else {
                throw refuse("the witness has cosigned a checkpoint of \(old) records, but this ledger holds \(checkpoint.size): signed events were removed, or the witness saw another history", evidence: true)
            }
            let proof = try consistencyProof(from: old, to: checkpoint)
            let request = AddCheckpointRequest(oldSize: old, proof: proof, note: note)
            let answer: WitnessResponse
            do {
                answer = try transport.addCheckpoint(request.body, to: witness.url)
            } catch {
                throw refuse("no answer from \(witness.url): \(error)")
            }
            switch answer.status {
            case 200:
                let text = try SignedNote.split(note).text
                let lines = String(decoding: answer.body, as: UTF8.self)
                let cosigned = text + "\n" + lines
                let valid = (try? Cosignature.verifiedCosigners(of: cosigned, keys: [witness.key], verifier: verifier)) ?? [:]
                guard valid[witness.key] != nil,
                    let line = try? SignedNote.split(cosigned).signatures.first(where: { $0.name == name && $0.keyHash == witness.key.keyID })
                else { throw refuse("the witness answered 200 without a cosignature that verifies with its key \(witness.key.text)") }
                return line.text
            case 409:
                guard let size = answer.conflictSize else { throw refuse("the witness answered 409 without its size in text/x.tlog.size") }
                if size == old {
                    // A 409 naming the size sent can only mean another root at that size.
                    throw refuse("the witness cosigned another tree at size \(size) than this ledger's: a split view or a changed log", evidence: true)
                }
                old = size
            case 422:
                throw refuse("the witness finds the consistency proof from size \(old) invalid: it cosigned another tree at that size", evidence: true)
            default:
                let body = String(decoding: answer.body.prefix(300), as: UTF8.self).unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }
                throw refuse("the witness answered \(answer.status): \(String(String.UnicodeScalarView(body)))")
            }
        }
        throw refuse("the witness's size changed at each of \(Self.witnessAttempts) requests (other submitters?); try again")
    }

    static let witnessAttempts = 3

    /// A consistency proof from the tree of `old` records to `checkpoint` (which is signed),
    /// checked against the signed root before it is sent.
    private func consistencyProof(from old: Int64, to checkpoint: Checkpoint) throws -> [Digest] {
        guard old > 0, old < checkpoint.size else { return [] }
        return try reading { view in
            let oldRoot = try MerkleTree.treeHash(size: old, hasher: chain.hasher, read: view.treeHashes)
            let proof = try MerkleTree.consistencyProof(old: old, new: checkpoint.size, hasher: chain.hasher, read: view.treeHashes)
            guard MerkleTree.checkConsistency(proof, old: old, oldRoot: oldRoot, new: checkpoint.size, newRoot: checkpoint.root, hasher: chain.hasher) else {
                throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "the stored tree hashes give a consistency proof that does not lead to the signed root (\(store.names.derivedRepair))"))
            }
            return proof
        }
    }

    /// `note` with `line` as the only cosignature of `key`.
    static func note(_ note: String, replacingCosignatureOf key: CosignerKey, with line: String) throws -> String {
        let (text, signatures) = try SignedNote.split(note)
        let kept = signatures.filter { !($0.name == key.name && $0.keyHash == key.keyID) }
        return text + "\n" + kept.map(\.text).joined() + line
    }

    /// The note to hand out for `head`: the checkpoint recorded last, when it is this same
    /// checkpoint with cosignatures added, else the head as signed. Only the newest record is
    /// read, so that handing out a checkpoint stays cheap however many were recorded: a ledger
    /// is witnessed right before it hands its checkpoint out, and if another size was recorded
    /// since, the cosignatures are left out (a verifier that asks for them then refuses; none is
    /// ever wrong).
    func witnessedNote(_ head: SignedHead, _ view: LogView) throws -> String {
        guard let recorded = try view.tx.newestCheckpoint(), recorded.size == head.checkpoint.size, recorded.note != head.note,
            let (text, _) = try? SignedNote.split(recorded.note), let (headText, _) = try? SignedNote.split(head.note), text == headText
        else { return head.note }
        return recorded.note
    }
}

extension WitnessingResult.Refusal: Error {}
