import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

// MARK: - Audit exports

extension Ledger {
    /// One subject's export: their events with inclusion proofs, the genesis event with its
    /// proof, the catalogue, the signed head as the checkpoint, the replayed state, and what
    /// proves that the events are all of the subject's: in a format 2 ledger under its signed
    /// head, the subject map's proofs (so no key is needed); otherwise a statement of the events
    /// it holds, signed now (which needs the key). Other subjects appear only as hashes on the
    /// audit paths.
    public func exportSubject(_ subjectID: String) throws -> AuditExport {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        // Format 2 under the signed head: the subject map proves the bundle complete, as in a
        // state proof, and no key is needed.
        if version >= 2, try reading({ view in try coveringSignedHead(view) }) != nil {
            let proof = try proveState(for: subjectID)
            return AuditExport(
                scope: .subject, ledger: proof.ledger, verifierKey: proof.verifierKey, checkpoint: proof.checkpoint, catalog: proof.catalog,
                genesis: proof.genesis, subject: proof.subject, events: proof.events, state: proof.state, catalogEvents: proof.catalogEvents,
                streamProof: AuditExport.StreamProof(last: proof.last, subjectMap: proof.subjectMapProof, ledgerMap: proof.ledgerMapProof), keys: proof.keys)
        }
        return try exportSubjectWithStatement(subjectID)
    }

    /// A subject's export made complete by a statement signed now: for ledgers without streams,
    /// or whose newest events no signed head covers yet. Needs the key.
    func exportSubjectWithStatement(_ subjectID: String) throws -> AuditExport {
        let signer = try signingKey()
        guard let salt = try salt(of: subjectID) else {
            throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'")
        }
        let ref = subjectRef(id: subjectID, salt: salt)
        return try reading { view in
            let size = Int64(view.size)
            // The signed head when it covers the log; a checkpoint signed now otherwise.
            let head = try coveringSignedHead(view)
            let checkpoint = try head?.checkpoint ?? currentCheckpoint(view)
            let note = try head.map { try witnessedNote($0, view) } ?? signNote(checkpoint.text, signer: signer, view)
            let ledgerStream = try streamEntries(SubjectMap.ledgerStream, view)
            let versions = try catalogVersions(ledgerStream)
            var catalogEvents: [ExportedEvent] = []
            for entry in ledgerStream.dropFirst() {
                let proof = try checkedInclusionProof(record: Int64(entry.seq), line: entry.line, checkpoint: checkpoint, view)
                catalogEvents.append(ExportedEvent(seq: Int64(entry.seq), line: String(decoding: entry.line, as: UTF8.self), proof: proof))
            }
            var state = SubjectState()
            var events: [ExportedEvent] = []
            for entry in try streamEntries(StreamKey.of(subject: ref), view) {
                let (seq, line, record) = (entry.seq, entry.line, entry.record)
                if version < 2 { try checkSignature(record, line: seq + 1, keys: genesisSchedule) }
                do throws(ReplayViolation) {
                    try state.apply(record.event, catalog: Self.catalog(in: versions, before: UInt64(seq)))
                } catch {
                    throw ConsentError.integrity(IntegrityFailure(line: seq + 1, seq: error.seq, problem: error.problem))
                }
                let proof = try checkedInclusionProof(record: Int64(seq), line: line, checkpoint: checkpoint, view)
                events.append(ExportedEvent(seq: Int64(seq), line: String(decoding: line, as: UTF8.self), proof: proof))
            }
            try openEvidence(&state, key: subjectKey(subjectID, salt: salt))
            let genesisLine = try view.tx.entry(0)
            let genesisProof = try checkedInclusionProof(record: 0, line: genesisLine, checkpoint: checkpoint, view)
            let statement = ExportStatement(origin: genesis.ledgerName, size: size, subject: ref.value, catalogVersions: catalogEvents.map(\.seq), events: events.map(\.seq))
            return AuditExport(
                scope: .subject, ledger: genesis.ledgerName, verifierKey: try checkpointKey(view).text, checkpoint: note,
                catalog: CatalogCodec.encode(catalog),
                genesis: ExportedEvent(seq: 0, line: String(decoding: genesisLine, as: UTF8.self), proof: genesisProof),
                subject: (subjectID, ref.value, Hex.encode(salt)), events: events,
                state: ListingJSON.encode(ConsentListing(state: state, catalog: versions.last!.catalog)),
                catalogEvents: catalogEvents,
                statement: try signNote(statement.text, signer: signer, view),
                keys: try rotationEntries(view, checkpoint: checkpoint)
            )
        }
    }

    /// The whole ledger with its signed head as the checkpoint; the verifier rebuilds the tree.
    /// No key is needed unless no head covers the newest events yet.
    public func exportAll() throws -> AuditExport {
        if let export = try reading({ view -> AuditExport? in
            guard let head = try coveringSignedHead(view) else { return nil }
            return try exportAll(view, checkpoint: head.checkpoint, note: witnessedNote(head, view))
        }) {
            return export
        }
        let signer = try signingKey()
        return try reading { view in
            let checkpoint = try currentCheckpoint(view)
            return try exportAll(view, checkpoint: checkpoint, note: signNote(checkpoint.text, signer: signer, view))
        }
    }

    private func exportAll(_ view: LogView, checkpoint: Checkpoint, note: String) throws -> AuditExport {
        var events: [ExportedEvent] = []
        try view.tx.entries(0..<view.size, batchSize: 4096, indexedKeys: false) { batch in
            for i in 0..<batch.count {
                events.append(ExportedEvent(seq: Int64(batch.seq(i)), line: String(decoding: batch.entry(i), as: UTF8.self), proof: []))
            }
        }
        let first = events.removeFirst()
        let genesisProof = try checkedInclusionProof(record: 0, line: Array(first.line.utf8), checkpoint: checkpoint, view)
        return AuditExport(
            scope: .all, ledger: genesis.ledgerName, verifierKey: try checkpointKey(view).text, checkpoint: note,
            catalog: CatalogCodec.encode(catalog),
            genesis: ExportedEvent(seq: 0, line: first.line, proof: genesisProof),
            subject: nil, events: events, state: nil, keys: try rotationEntries(view, checkpoint: checkpoint)
        )
    }
}
