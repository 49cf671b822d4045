import ConsentDomain

/// What `verify` found in a sound ledger.
public struct VerificationReport: Hashable, Sendable {
    public let events: Int
    public let subjects: Int
    /// The newest event and its chain hash.
    public let head: ChainHead
    public let ledgerName: String
    public let publicKey: PublicKey
    /// A torn tail left by a crash (not part of the ledger; the next write removes it).
    public let torn: TornTail?
}

extension Ledger {
    /// Checks the whole ledger: every line's encoding, signature, hash link and sequence number,
    /// the rules on replay, and that the recorded head lies on the chain. Signatures and hashes
    /// are checked on all cores; the links and the replay in order. Throws
    /// ``LedgerError/integrity(_:)`` naming the first bad entry.
    public func verify() throws -> VerificationReport {
        try store.withLock(exclusive: false) {
            let log: LogState
            do {
                log = try store.logState()
            } catch LedgerError.integrity(let tailFailure) {
                // The tail is damaged; an earlier line may be too. Report the first bad entry.
                try scanForFirstFailure(to: try store.completeLinesExtent())
                throw LedgerError.integrity(tailFailure)
            }
            let (replay, previous, headSeen) = try checkLines(to: log.end, head: log.recordedHead)
            let head = log.recordedHead
            guard headSeen, let lastSeq = replay.lastSeq else {
                throw LedgerError.integrity(IntegrityFailure(line: replay.eventCount + 1, seq: replay.lastSeq.map { $0 + 1 }, problem: "the log ends at seq \(replay.lastSeq.map(String.init) ?? "none") but seq \(head.seq) was acknowledged: acknowledged events are missing (truncated log)"))
            }
            if let open = replay.incompleteCommand {
                throw LedgerError.integrity(IntegrityFailure(line: Int(open.first) + 1, seq: open.first, problem: "the command starting here is incomplete"))
            }
            guard replay.genesis == genesis else {
                throw LedgerError.integrity(IntegrityFailure(line: 1, seq: 0, problem: "the genesis event differs from the one the ledger was opened with"))
            }
            return VerificationReport(events: replay.eventCount, subjects: replay.subjects.count, head: ChainHead(seq: lastSeq, hash: previous), ledgerName: genesis.ledgerName, publicKey: publicKey, torn: log.torn)
        }
    }

    /// Scans to `end` only to find the first bad line; throws it if there is one.
    private func scanForFirstFailure(to end: LogCursor) throws {
        _ = try checkLines(to: end, head: nil)
    }

    /// Checks every line up to `end`: encoding, key id, signature and hash in parallel; sequence,
    /// links, rules and the recorded head in order.
    private func checkLines(to end: LogCursor, head: ChainHead?) throws -> (LedgerReplay, Digest, Bool) {
        var replay = LedgerReplay(catalog: catalog)
        var previous = Digest.zero
        var headSeen = false
            let publicKey = self.publicKey
            let keyID = self.keyID
            let chain = self.chain
            let verifier = self.verifier
            try store.scan(from: .start, to: end, batchSize: 8192, containing: nil) { batch in
                // Independent per-line work, in parallel: decode, hash, check the signature.
                let checked = parallelMap(batch.count, minimumForParallel: 64) { i -> Result<(EventRecord, Digest), IntegrityFailure> in
                    let number = batch.number(i)
                    let record: EventRecord
                    do throws(EventDecodingError) {
                        record = try batch.withLine(i) { (line) throws(EventDecodingError) in try EventCodec.decode(line: line) }
                    } catch {
                        return .failure(IntegrityFailure(line: number, seq: nil, problem: error.problem))
                    }
                    let seq = record.event.seq
                    guard record.keyID == keyID else {
                        return .failure(IntegrityFailure(line: number, seq: seq, problem: "signed with key id \(record.keyID), not the ledger's key \(keyID)"))
                    }
                    let valid = EventCodec.signedMessage(body: record.body).withUnsafeBytes { verifier.isValid(record.signature, of: $0, by: publicKey) }
                    guard valid else {
                        return .failure(IntegrityFailure(line: number, seq: seq, problem: "signature does not verify with the ledger's public key"))
                    }
                    return .success((record, chain.hash(ofBody: record.body)))
                }
                // Links and rules, in order.
                for (i, result) in checked.enumerated() {
                    let number = batch.number(i)
                    let (record, hash): (EventRecord, Digest)
                    switch result {
                    case .failure(let failure): throw LedgerError.integrity(failure)
                    case .success(let pair): (record, hash) = pair
                    }
                    let seq = record.event.seq
                    guard Int(seq) + 1 == number else {
                        throw LedgerError.integrity(IntegrityFailure(line: number, seq: seq, problem: "line \(number) holds seq \(seq); expected seq \(number - 1) (lines removed, inserted or reordered)"))
                    }
                    guard record.prev == previous else {
                        throw LedgerError.integrity(IntegrityFailure(line: number, seq: seq, problem: "prev \(record.prev.hex) does not match the previous event's hash \(previous.hex)"))
                    }
                    do throws(ReplayViolation) {
                        try replay.apply(record.event)
                    } catch {
                        throw LedgerError.integrity(IntegrityFailure(line: number, seq: error.seq, problem: error.problem))
                    }
                    if let head, seq == head.seq {
                        guard hash == head.hash else {
                            throw LedgerError.integrity(IntegrityFailure(line: number, seq: seq, problem: "hash differs from the recorded head \(head.hash.hex)"))
                        }
                        headSeen = true
                    }
                    previous = hash
                }
            }
        return (replay, previous, headSeen)
    }
}
