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
            let counts = try store.derivedCounts()
            // Derived data behind the log (a crash, an older version) is rebuilt by the next
            // write or export; when it is all there, it is checked in the same pass.
            let derivedComplete = counts.lines >= log.end.lines && counts.treeHashes >= MerkleTree.storedHashCount(Int64(log.end.lines))
            let (replay, previous, headSeen) = try checkLines(to: log.end, head: log.recordedHead, derived: derivedComplete)
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
        _ = try checkLines(to: end, head: nil, derived: false)
    }

    /// Checks every line up to `end`: encoding, key id, signature and hash on all cores; sequence,
    /// links, rules and the recorded head in order.
    private func checkLines(to end: LogCursor, head: ChainHead?, derived: Bool) throws -> (LedgerReplay, Digest, Bool) {
        var checker = LogChecker(store: store, hasher: chain.hasher, signatures: (verifier, publicKey, keyID))
        checker.checkDerived = derived
        let result = try checker.run(from: .start, to: end, head: head, progress: LogChecker.Progress(replay: LedgerReplay(catalog: catalog), previous: .zero))
        return (result.replay, result.previous, result.headSeen)
    }
}
