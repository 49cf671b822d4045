import ConsentLedger
import ConsentDomain

/// An audit report with what ties it to the ledger: the checkpoint it was computed at, and the
/// subject ids behind the pseudonyms (the report is for the ledger's operator, who holds them).
public struct LedgerReport: Sendable {
    public let report: AuditReport
    public let checkpoint: Checkpoint
    public let ledgerName: String
    public let subjectIDs: [SubjectRef: String]

    public func subjectID(_ ref: SubjectRef?) -> String {
        guard let ref else { return "" }
        return subjectIDs[ref] ?? ref.value
    }

    public func featureKey(_ code: Int?) -> String {
        guard let code else { return "" }
        return report.catalog.feature(code: code)?.key ?? String(code)
    }
}

extension Ledger {
    /// Builds the audit report for `scope` by replaying the log up to the scope's end, and names
    /// the checkpoint (tree size and root) of the log it was computed from.
    public func auditReport(_ scope: ReportScope) throws -> LedgerReport {
        try reading { view in
            let size = Int64(view.size)
            let checkpoint = try checkpoint(size: size, view)
            let clock = try clockCorrections(view)
            var builder = AuditReportBuilder(catalog: catalog, scope: scope, clock: clock)
            // The operator holds the records: each known subject's evidence is shown in clear.
            // An erased subject's record and key are gone, so its evidence stays sealed.
            var ids: [SubjectRef: String] = [:]
            var keys: [SubjectRef: SubjectKey] = [:]
            for (id, salt) in try subjectSalts(view.tx, keys: view.keys) {
                let ref = subjectRef(id: id.text, salt: salt)
                ids[ref] = id.text
                keys[ref] = subjectKey(id.text, salt: salt)
            }
            var done = false
            try view.tx.entries(0..<view.size, batchSize: 4096, indexedKeys: false) { batch in
                for i in 0..<batch.count where !done {
                    let record = try decode(batch.entry(i), number: batch.seq(i) + 1)
                    if let to = scope.to, clock.effectiveTime(of: record.event) > to {
                        done = true
                        break
                    }
                    var event = record.event
                    if let subject = event.payload.subject, let key = keys[subject] {
                        event = try event.mappingEvidence { (e) throws(ConsentError) in try openEvidence(e, seq: event.seq, key: key) }
                    }
                    do throws(ReplayViolation) {
                        try builder.add(event)
                    } catch {
                        throw ConsentError.integrity(IntegrityFailure(line: batch.seq(i) + 1, seq: error.seq, problem: error.problem))
                    }
                }
            }
            return LedgerReport(report: builder.finish(), checkpoint: checkpoint, ledgerName: genesis.ledgerName, subjectIDs: ids)
        }
    }
}
