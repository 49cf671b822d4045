import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// What an erasure leaves the requester: the pseudonym the subject's events carry and the seq of
/// the `subject.erased` event, for their records. Neither is personal data once the record is gone.
public struct ErasureReceipt: Hashable, Sendable {
    /// The subject's pseudonym in the log.
    public let pseudonym: String
    /// The seq of the `subject.erased` event.
    public let seq: UInt64
    public let at: Timestamp
    /// How many of the subject's events the log keeps, the erasure included.
    public let events: Int
    /// False when the subject was already erased and only the destruction of the record was
    /// finished now (an earlier erasure was interrupted).
    public let appended: Bool
}

extension Ledger {
    /// Erases a subject (GDPR Art. 17) by crypto-shredding: appends a signed `subject.erased`
    /// event on the one commit path, then destroys the subject's record (id and salt), the only
    /// link from the person to the pseudonym in the log. Nothing in the log is rewritten, so
    /// every signature, the hash chain, the Merkle tree and every checkpoint and proof issued
    /// before still verify. Afterwards the id is unknown to the ledger: `status` answers as for
    /// a subject with no events, and a new command for the same id starts a new pseudonym.
    ///
    /// Erasing a subject whose `subject.erased` event is already in the log (an erasure cut
    /// short after its event) only finishes destroying the record.
    public func erase(_ subjectID: String, actor: String, reason: String? = nil) throws -> ErasureReceipt {
        try LedgerCommand.validate(subjectID: subjectID, actor: actor)
        if let reason, let problem = SubjectErased.problem(reason: reason) { throw ConsentError.invalidRequest("the erasure's reason cannot be recorded: \(problem)") }
        let id = SubjectID(subjectID)
        let signer = try signingKey()
        return try writing { tx, view, afterCommit in
            guard let record = try tx.subjectRecord(id) else {
                throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)' (never recorded, or already erased): nothing was changed")
            }
            try checkRecord(id, record, keys: view.keys)
            let ref = subjectRef(id: subjectID, salt: record.salt)
            let versions = try catalogVersions(view)
            var state = try currentStates(of: [ref], view, versions: versions)[ref] ?? SubjectState()
            let forget = { [self] in memory.withLock { m in m.salts?[id] = nil; m.records?[id] = nil } }
            let eventCount = try streamEntries(StreamKey.of(subject: ref), view).count
            if let erasedAt = state.erasedAt {
                // The event is there; the record outlived it (a crash between the two).
                _ = try tx.commit(LedgerCommit(firstSeq: view.log.size, entries: [], derived: view.pendingDerived(newKeys: [], newHashes: []), subjects: [], head: nil, erasedSubjects: [id]))
                afterCommit.append(forget)
                let erasure = try view.tx.entry(Int(erasedAt))
                let at = try EventCodec.decode(line: erasure).event.at
                return ErasureReceipt(pseudonym: ref.value, seq: erasedAt, at: at, events: eventCount, appended: false)
            }
            let log = view.log
            let at = try commandTime(after: log.last.event)
            let seq = log.last.event.seq + 1
            let event = LedgerEvent(seq: seq, at: at, actor: actor, command: CommandSpan(first: seq, size: 1), payload: .subjectErased(SubjectErased(subject: ref, reason: reason)))
            do {
                try state.apply(event, catalog: versions.last!.catalog)
            } catch {
                throw ConsentError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "internal check failed: the erasure breaks a rule on replay: \(error)"))
            }
            let streams = try streamState(for: [StreamKey.of(subject: ref)], view)
            let committed = try commit([event], view, tx, signer: signer, streams: streams, subjects: [], erasing: [id])
            afterCommit.append { [self] in
                if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
                forget()
                memory.withLock { $0.streams = committed.streams }
                advanceMemory(from: log.size, to: committed.size, events: [event], head: committed.head)
            }
            if let warning = committed.warning { lastWarning.withLock { $0 = warning } }
            return ErasureReceipt(pseudonym: ref.value, seq: seq, at: at, events: eventCount + 1, appended: true)
        }
    }
}
