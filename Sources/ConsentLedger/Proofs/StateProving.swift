import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain

/// Proofs of a subject's state (`Spec/state-proof.md`), made from the signed head alone.
extension Ledger {
    /// A proof of a subject's state now (or as of `at`) against the ledger's signed head. Needs
    /// no secret key: the head was signed by the last write.
    public func proveState(for subjectID: String, at: Timestamp? = nil) throws -> StateProof {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        guard let salt = try salt(of: subjectID) else {
            throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'")
        }
        guard version >= 2 else {
            throw ConsentError.invalidRequest("this ledger is of format version 1, whose events do not link their subject's events: its states cannot be proved (see Spec/ledger-format.md)")
        }
        let ref = subjectRef(id: subjectID, salt: salt)
        return try reading { view in
            let log = view.log
            guard let head = log.signedHead, head.checkpoint.size == Int64(log.size), head.chainHead.seq == log.last.event.seq else {
                throw ConsentError.invalidRequest("the newest events are not yet covered by a signed head (a write was interrupted); the next write, or `consentctl checkpoint`, signs one")
            }
            try checkSignedHead(log, keys: view.keys)
            let checkpoint = head.checkpoint
            let stored = try currentMap(view)
            func proved(_ entry: StreamEntry) throws -> ExportedEvent {
                ExportedEvent(seq: Int64(entry.seq), line: String(decoding: entry.line, as: UTF8.self), proof: try checkedInclusionProof(record: Int64(entry.seq), line: entry.line, checkpoint: checkpoint, view))
            }
            let subjectKey = StreamKey.of(subject: ref)
            let subjectEntries = try streamEntries(subjectKey, view)
            let ledgerEntries = try streamEntries(SubjectMap.ledgerStream, view)
            let subjectMapProof: SubjectMapProof, ledgerMapProof: SubjectMapProof
            do {
                subjectMapProof = try stored.map.lookup(subjectKey).proof
                ledgerMapProof = try stored.map.lookup(SubjectMap.ledgerStream).proof
            } catch {
                throw mapFailure("\(error)")
            }
            let timeline = try ledgerTimeline(ledgerEntries)
            let versions = timeline.versions
            var state = SubjectState()
            for entry in subjectEntries {
                // As of a time: in effective times (``ClockCorrections``).
                if let at, timeline.clock.effectiveTime(of: entry.record.event) > at { break }
                do throws(ReplayViolation) {
                    try state.apply(entry.record.event, catalog: Self.catalog(in: versions, before: entry.record.event.seq))
                } catch {
                    throw ConsentError.integrity(IntegrityFailure(line: entry.seq + 1, seq: error.seq, problem: error.problem))
                }
            }
            // The state shows the evidence in clear: the proof holds the record that opens it.
            try openEvidence(&state, key: self.subjectKey(subjectID, salt: salt))
            let lastLine = log.last.lineWithoutNewline
            return StateProof(
                ledger: genesis.ledgerName, verifierKey: try checkpointKey(view).text, checkpoint: try witnessedNote(head, view),
                catalog: CatalogCodec.encode(catalog),
                genesis: try proved(ledgerEntries[0]),
                last: ExportedEvent(seq: Int64(log.last.event.seq), line: String(decoding: lastLine, as: UTF8.self), proof: try checkedInclusionProof(record: Int64(log.last.event.seq), line: lastLine, checkpoint: checkpoint, view)),
                subject: (subjectID, ref.value, Hex.encode(salt)), at: at,
                events: try subjectEntries.map(proved), catalogEvents: try ledgerEntries.dropFirst().map(proved),
                subjectMapProof: subjectMapProof, ledgerMapProof: ledgerMapProof,
                state: ListingJSON.encode(ConsentListing(state: state, catalog: Self.catalog(in: versions, at: at, clock: timeline.clock))),
                keys: try rotationEntries(view, checkpoint: checkpoint))
        }
    }
}

