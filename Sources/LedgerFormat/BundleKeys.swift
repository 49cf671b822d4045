import ConsentDomain
import TransparencyLog

/// The keys a bundle, a state proof or a consistency proof is checked with (`Spec/export-format.md`,
/// Keys): the pinned key alone when the file carries no key rotations; otherwise the genesis key
/// and each key that the file's `keys` entries (the ledger's `key.rotated` events below the
/// checkpoint, with their inclusion proofs) introduce. The pinned key must be one of them (the
/// original key or the current one, as the auditor pinned it), and the checkpoint is the key's
/// in force at its size.
package struct BundleKeys {
    /// The schedule the entries name, before their signatures are checked (``verifyChain``).
    package private(set) var schedule: KeySchedule
    /// The key that signs the checkpoint (and a subject bundle's statement).
    package let checkpointKey: NoteVerifierKey
    /// The `keys` entries, oldest first.
    package let rotations: [ExportedEvent]

    /// Step 1: the schedule the file claims, and the checkpoint key, from the pinned key, the
    /// genesis entry and `keys`; `verifierKey` must be the checkpoint key's text. Nothing is
    /// trusted yet but the pinned key: ``verifyChain`` checks every rotation once the checkpoint
    /// is open.
    package static func resolve(pinned: NoteVerifierKey, genesisLine: String?, rotations: [ExportedEvent], checkpointNote: String, verifierKey: String?, what: String, hasher: any SHA256Hasher) throws(ExportVerificationError) -> BundleKeys {
        guard !rotations.isEmpty else {
            if let verifierKey, !verifierKey.utf8.elementsEqual(pinned.text.utf8) {
                throw ExportVerificationError(seq: nil, "the \(what)'s verifier key \(verifierKey) differs from the pinned key \(pinned.text)")
            }
            return BundleKeys(schedule: KeySchedule(genesis: pinned.publicKey, hasher: hasher), checkpointKey: pinned, rotations: [])
        }
        guard let line = genesisLine, let genesis = try? EventCodec.decode(line: Array(line.utf8)),
            case .ledgerCreated(let created) = genesis.event.payload, let genesisKey = PublicKey(hex: created.publicKey)
        else {
            throw ExportVerificationError(seq: 0, "the genesis entry does not name the genesis key that the 'keys' rotations start from")
        }
        var schedule = KeySchedule(genesis: genesisKey, hasher: hasher)
        for entry in rotations {
            let seq = UInt64(max(0, entry.seq))
            guard let record = try? EventCodec.decode(line: Array(entry.line.utf8)), case .keyRotated(let rotation) = record.event.payload,
                Int64(record.event.seq) == entry.seq, entry.seq >= Int64(schedule.current.from), let key = PublicKey(hex: rotation.publicKey)
            else {
                throw ExportVerificationError(seq: seq, "an entry of 'keys' is not a key rotation, or is out of order")
            }
            schedule.append(key, from: seq + 1, hasher: hasher)
        }
        guard schedule.period(of: pinned.publicKey) != nil else {
            throw ExportVerificationError(seq: nil, "the pinned key \(pinned.text) is neither the ledger's genesis key nor a key that the \(what)'s key rotations introduce")
        }
        // The size the checkpoint claims picks its key; opening it with that key vouches for the size.
        let claimed = (try? SignedNote.split(checkpointNote)).flatMap { try? Checkpoint(text: $0.text) }?.size ?? Int64.max
        if let late = rotations.first(where: { $0.seq >= claimed }) {
            throw ExportVerificationError(seq: UInt64(max(0, late.seq)), "a key rotation of 'keys' is not below the checkpoint's size \(claimed)")
        }
        let checkpointKey: NoteVerifierKey
        do {
            checkpointKey = try NoteVerifierKey(name: pinned.name, publicKey: schedule.forCheckpoint(size: claimed).key, hasher: hasher)
        } catch {
            throw ExportVerificationError(seq: nil, "the pinned key's name cannot name a checkpoint key: \(error)")
        }
        if let verifierKey, !verifierKey.utf8.elementsEqual(checkpointKey.text.utf8) {
            throw ExportVerificationError(seq: nil, "the \(what)'s verifier key \(verifierKey) is not the key that signs its checkpoint, \(checkpointKey.text)")
        }
        return BundleKeys(schedule: schedule, checkpointKey: checkpointKey, rotations: rotations)
    }

    /// Step 2a, once the checkpoint is open: each rotation, in order, is an entry signed by the
    /// key in force for it and proved in the checkpoint's tree, and a rotation the ledger format
    /// admits (a key never used before, the new key's handover signature).
    package func verifyChain(checkpoint: Checkpoint, hasher: any SHA256Hasher, verifier: any SignatureVerifier) throws(ExportVerificationError) {
        guard !rotations.isEmpty else { return }
        var verified = KeySchedule(genesis: schedule.original.key, hasher: hasher)
        for entry in rotations {
            let record = try ExportVerifier.check(entry, checkpoint: checkpoint, keys: verified, rotated: true, hasher: hasher, verifier: verifier, proofRequired: true)
            guard case .keyRotated(let rotation) = record.event.payload else { continue }
            do {
                try verified.admit(rotation, seq: record.event.seq, prev: record.prev, keyID: record.keyID, ledger: checkpoint.origin, hasher: hasher, verifier: verifier)
            } catch {
                throw ExportVerificationError(seq: record.event.seq, error.description)
            }
        }
    }

    /// The revocations among a ledger stream's checked events, taken into the schedule: each
    /// signed by the key in force, of a retired key, as `ledger-format.md` (Key rotation) says.
    package func withRevocations(_ records: [EventRecord]) throws(ExportVerificationError) -> KeySchedule {
        var keys = schedule
        for record in records {
            guard case .keyRevoked(let revocation) = record.event.payload else { continue }
            do {
                try keys.admit(revocation, seq: record.event.seq, keyID: record.keyID)
            } catch {
                throw ExportVerificationError(seq: record.event.seq, error.description)
            }
        }
        return keys
    }

    /// An event a revoked key signed in its compromised window must be one its revocation
    /// attests (by the SHA-256 of its body).
    package static func checkAttested(_ record: EventRecord, keys: KeySchedule, hasher: any SHA256Hasher) throws(ExportVerificationError) {
        let seq = record.event.seq
        for revocation in keys.revocations where revocation.keyID == record.keyID && seq >= revocation.since && seq <= revocation.until {
            guard revocation.attested[Int(seq - revocation.since)] == hasher.sha256(record.body) else {
                throw ExportVerificationError(seq: seq, "the event was signed by key \(revocation.keyID) after it was compromised (seq \(revocation.since) on), and its revocation at seq \(revocation.seq) does not re-attest it")
            }
        }
    }

    /// The checkpoint key of another size under the same schedule (a consistency proof's older
    /// checkpoint).
    package func checkpointKey(size: Int64, hasher: any SHA256Hasher) throws(ExportVerificationError) -> NoteVerifierKey {
        do {
            return try NoteVerifierKey(name: checkpointKey.name, publicKey: schedule.forCheckpoint(size: size).key, hasher: hasher)
        } catch {
            throw ExportVerificationError(seq: nil, "the pinned key's name cannot name a checkpoint key: \(error)")
        }
    }

    /// The rotations among a ledger stream's events (a subject bundle's or state proof's
    /// `catalogVersions`, an all bundle's events) must be exactly `keys`: the same seqs and lines.
    package func checkSame(asRotationsIn entries: [ExportedEvent], records: [EventRecord]) throws(ExportVerificationError) {
        let found = zip(entries, records).filter { if case .keyRotated = $0.1.event.payload { return true }; return false }.map(\.0)
        guard found.map(\.seq) == rotations.map(\.seq), zip(found, rotations).allSatisfy({ $0.line.utf8.elementsEqual($1.line.utf8) }) else {
            throw ExportVerificationError(seq: nil, "the key rotations among the ledger's events (seq \(found.map(\.seq))) are not the ones 'keys' holds (seq \(rotations.map(\.seq)))")
        }
    }
}

extension KeySchedule {
    /// A key from `from` on, unchecked (a bundle's claim, checked by ``BundleKeys/verifyChain``).
    mutating func append(_ key: PublicKey, from: UInt64, hasher: any SHA256Hasher) {
        appendUnchecked(Period(from: from, key: key, keyID: Self.keyID(of: key, hasher: hasher)))
    }
}
