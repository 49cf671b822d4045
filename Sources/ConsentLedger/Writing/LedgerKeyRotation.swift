import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// What a key rotation did, for the operator's records: where it is in the log, and the keys
/// before and after.
public struct KeyRotationReceipt: Hashable, Sendable {
    /// The `key.rotated` event's sequence number.
    public let seq: UInt64
    /// The key it retired (which signed the event) and the key in force from now on.
    public let retired: NoteVerifierKey
    public let current: NoteVerifierKey
    /// The signed head after the rotation: the new key's first signature on the log.
    public let head: String
}

extension Ledger {
    /// Rotates the ledger to a new key kept in the ledger's key store, sealed as `protection`
    /// says: appends a `key.rotated` event signed by the key in force, with the new key's
    /// handover signature, and from then on signs with the new key.
    ///
    /// The new key file is stored (pending) before the event is committed and put in place of
    /// the old one after, overwriting the old key: a crash in between loses nothing, since the
    /// next write that finds the log naming the pending key finishes the swap.
    @discardableResult
    public func rotateKey(to newSigner: SodiumSigner = .generate(), protection: KeyProtection, actor: String = "consentctl") throws -> KeyRotationReceipt {
        guard let keys else {
            throw ConsentError.invalidRequest("this ledger signs with a signer of its own, not a key file: rotate with rotateKey(to:actor:) and keep the new key where that signer keeps keys")
        }
        let file = try SigningKeyFile.file(for: newSigner, protection: protection, random: random)
        let receipt = try rotate(to: newSigner, actor: actor) { try keys.savePendingKeyFile(file) }
        do {
            try keys.promotePendingKeyFile()
        } catch {
            // The rotation stands; the key file is swapped by the next write that needs the key.
            lastWarning.withLock { $0 = "the key rotation is committed (seq \(receipt.seq)), but putting the new key file in place of \(keys.keyLocation) failed (\(error)); the next write finishes it" }
        }
        return receipt
    }

    /// Rotates the ledger to `newSigner`, a signer of your own (an HSM or KMS key): the caller
    /// keeps the new key, and opens the ledger with it from now on.
    @discardableResult
    public func rotateKey(to newSigner: any EventSigner, actor: String = "consentctl") throws -> KeyRotationReceipt {
        try rotate(to: newSigner, actor: actor) {}
    }

    func rotate(to newSigner: any EventSigner, actor: String, beforeCommit: () throws -> Void) throws -> KeyRotationReceipt {
        let signer = try keyEventSigner(actor: actor, what: "a key rotation")
        return try writing { tx, view, afterCommit in
            let log = view.log
            let keys = view.keys
            if let used = keys.period(of: newSigner.publicKey) {
                throw ConsentError.invalidRequest("the new key \(used.keyID) is one this ledger has used before; a rotation needs a new key")
            }
            let seq = log.last.event.seq + 1
            let prev = chain.hash(ofBody: log.last.body)
            let handover = KeyHandover.message(ledger: genesis.ledgerName, prev: prev, from: signer.publicKey, to: newSigner.publicKey).withUnsafeBytes { newSigner.sign($0) }
            let rotation = KeyRotated(publicKey: newSigner.publicKey.hex, handover: handover.hex)
            // What every reader will check, checked before anything is written.
            var after = keys
            do {
                try after.admit(rotation, seq: seq, prev: prev, keyID: keys.current.keyID, ledger: genesis.ledgerName, hasher: chain.hasher, verifier: verifier)
            } catch {
                throw ConsentError.invalidRequest("the new key cannot take over: \(error)")
            }
            let event = LedgerEvent(seq: seq, at: try commandTime(after: log.last.event), actor: actor, command: CommandSpan(first: seq, size: 1), payload: .keyRotated(rotation))
            try beforeCommit()
            let committed = try commitLedgerEvent(event, view, tx, signer: signer, headSigner: newSigner, afterCommit: &afterCommit)
            afterCommit.append { [self] in memory.withLock { $0.signer = newSigner; $0.keys = (after, committed.size) } }
            return KeyRotationReceipt(seq: seq, retired: try noteKey(signer.publicKey), current: try noteKey(newSigner.publicKey), head: committed.signedHead.note)
        }
    }
}

/// What a key revocation did: the key marked compromised, from which seq, and how many of the
/// events it signed since were re-attested.
public struct KeyRevocationReceipt: Hashable, Sendable {
    /// The `key.revoked` event's sequence number.
    public let seq: UInt64
    public let revoked: NoteVerifierKey
    public let compromisedSince: UInt64
    /// The events the revoked key signed from `compromisedSince` to its rotation, re-attested.
    public let attested: Int
    /// Subject records the revoked key had signed, signed again by the key in force: those whose
    /// pseudonym has events.
    public let resignedRecords: Int
    /// Subject records the revoked key had signed whose pseudonym has no events (a salt a failed
    /// command left, or a record made up with the leaked key): removed, as nothing vouches for them.
    public let removedRecords: Int
}

extension Ledger {
    /// What a key event (rotation, revocation) needs before its write: a valid actor, a ledger
    /// with a ledger stream, and the key in force unlocked.
    private func keyEventSigner(actor: String, what: String) throws -> any EventSigner {
        try Self.validateText(actor, what: "actor", maxBytes: 128)
        guard version >= 2 else {
            throw ConsentError.invalidRequest("this ledger is of format version 1, which has no ledger stream to record \(what) in")
        }
        return try signingKey()
    }

    /// The subject records a revocation of `revoked` revises. A record carries no sequence
    /// number, so nothing tells a record the honest ledger wrote with the key from one a thief
    /// made with it after the leak, and reads must stop trusting the key's signature on records
    /// at all. The subject map vouches for a record whose pseudonym has events (a made-up record
    /// hashes to a pseudonym with none, and the thief's own events are refused unless
    /// re-attested): signed again by the key in force. Any other is removed: a salt a failed
    /// command left serves nothing, and the id gets a fresh one with its next command.
    func recordsToRevise(revoking revoked: PublicKey, _ view: LogView, signer: any EventSigner) throws -> [(subjectID: SubjectID, record: SubjectRecord?)] {
        let records = try view.tx.subjectRecords().sorted { $0.key < $1.key }
        let byRevoked = parallelMap(records.count) { [self] i -> Bool in
            guard let signature = records[i].value.signature else { return false }
            return Pseudonym.recordMessage(id: records[i].key, salt: records[i].value.salt).withUnsafeBytes { verifier.isValid(signature, of: $0, by: revoked) }
        }
        let candidates = records.indices.filter { byRevoked[$0] }.map { records[$0] }
        let vouched = try candidates.map { id, record in try hasEvents(StreamKey.of(subject: subjectRef(id: id.text, salt: record.salt)), view) }
        return parallelMap(candidates.count) { i -> (subjectID: SubjectID, record: SubjectRecord?) in
            let (id, record) = candidates[i]
            guard vouched[i] else { return (id, nil) }
            let signature = Pseudonym.recordMessage(id: id, salt: record.salt).withUnsafeBytes { signer.sign($0) }
            return (id, SubjectRecord(salt: record.salt, signature: signature))
        }
    }

    /// Marks the key that signed event `since` compromised from that event on, with a
    /// `key.revoked` event signed by the key in force. The key must have been rotated away from
    /// (`rotateKey`) first. The event re-attests, by their hashes, the events that key signed from
    /// `since` up to its rotation, as the log holds them now: from then on `verify` refuses any
    /// event signed by the revoked key in that window that is not among them.
    @discardableResult
    public func revokeKey(compromisedSince since: UInt64, actor: String = "consentctl") throws -> KeyRevocationReceipt {
        let signer = try keyEventSigner(actor: actor, what: "a key revocation")
        return try writing { tx, view, afterCommit in
            let log = view.log
            let keys = view.keys
            guard since < UInt64(view.size) else {
                throw ConsentError.invalidRequest("--compromised-since \(since) is past the log's end: its newest event is seq \(view.size - 1)")
            }
            let revoked = keys.forEvent(since)
            guard let next = keys.periods.first(where: { $0.from > revoked.from }) else {
                throw ConsentError.invalidRequest("seq \(since) was signed by key \(revoked.keyID), the key in force: rotate first (consentctl key rotate), then revoke the old key")
            }
            let until = next.from - 1
            var attested: [String] = []
            let hasher = chain.hasher
            try view.tx.entries(Int(since)..<Int(until) + 1, batchSize: 4096, indexedKeys: false) { batch in
                for i in 0..<batch.count {
                    attested.append(try batch.withEntry(i) { line throws -> String in
                        hasher.sha256(UnsafeRawBufferPointer(try EventCodec.splitLine(line, decodeSignature: false).body)).hex
                    })
                }
            }
            let seq = log.last.event.seq + 1
            let revocation = KeyRevoked(publicKey: revoked.key.hex, compromisedSince: since, attested: attested)
            var after = keys
            do {
                try after.admit(revocation, seq: seq, keyID: keys.current.keyID)
            } catch {
                throw ConsentError.invalidRequest("cannot revoke: \(error)")
            }
            let event = LedgerEvent(seq: seq, at: try commandTime(after: log.last.event), actor: actor, command: CommandSpan(first: seq, size: 1), payload: .keyRevoked(revocation))
            let revised = try recordsToRevise(revoking: revoked.key, view, signer: signer)
            let committed = try commitLedgerEvent(event, view, tx, signer: signer, revising: revised, afterCommit: &afterCommit)
            afterCommit.append { [self] in
                memory.withLock { m in
                    m.keys = (after, committed.size)
                    m.salts = nil
                    m.records = nil
                }
            }
            return KeyRevocationReceipt(seq: seq, revoked: try noteKey(revoked.key), compromisedSince: since, attested: attested.count,
                                        resignedRecords: revised.filter { $0.record != nil }.count, removedRecords: revised.filter { $0.record == nil }.count)
        }
    }
}
