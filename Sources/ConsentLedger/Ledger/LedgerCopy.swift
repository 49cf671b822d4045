import ConsentDomain

/// What ``LedgerCopy/copy(from:to:)`` copied, and the checks it made on the copy.
public struct LedgerCopyReport: Hashable, Sendable {
    /// Events copied, the genesis event included.
    public let events: Int
    /// Subjects with events.
    public let subjects: Int
    /// Issued checkpoints copied.
    public let checkpoints: Int
    /// The newest event and its chain hash: the same in both stores.
    public let head: ChainHead
    /// The Merkle tree root over all events: the same in both stores.
    public let root: Digest
}

/// Copies a ledger from one store to another, byte for byte: the same lines (so the same
/// signatures and hash chain), catalogue, key, subject salts and issued checkpoints. Nothing is
/// re-signed. `consentctl migrate` uses it to move a ledger between a folder and PostgreSQL.
public enum LedgerCopy {
    /// Verifies the source, copies it into `target` (which must hold no ledger yet; it is
    /// created with the source's head, so an interrupted copy is a truncated ledger), rebuilds
    /// the target's derived data, then verifies the copy and compares its head, tree root and
    /// checkpoints with the source's. A copy that was interrupted leaves a target to delete
    /// before trying again. The source's log is only read (like any command, opening it may
    /// first rebuild its derived files if a crash left them behind).
    public static func copy(from source: any LedgerStore, to target: any LedgerStore, batchLines: Int = 4096) throws -> LedgerCopyReport {
        let original = try Ledger.open(store: source)
        let sourceReport = try original.verify()
        let (end, setup, checkpoints, salts) = try source.withLock(exclusive: false) {
            let log = try source.logState()
            guard log.last.event.seq == sourceReport.head.seq else {
                throw LedgerError.invalidRequest("the source ledger changed while it was being copied; try again")
            }
            let genesis = try EventCodec.decode(line: try source.readFirstLine())
            // The copy carries the source's signed head as it is; only a source whose head is
            // of the older unsigned form, or behind its log, gets a head signed for it now.
            let head = try log.signedHead.flatMap { $0.seq == log.last.event.seq ? $0 : nil } ?? original.signHead(for: log)
            let setup = LedgerSetup(
                catalog: try source.readCatalog(), publicKey: try source.readPublicKey(), secretSeed: try source.readSecretSeed(),
                genesis: genesis, head: head)
            return (log.end, setup, try source.readCheckpoints(), try source.readSubjectRecords())
        }
        try target.create(setup)
        let genesisEnd = LogCursor(offset: UInt64(setup.genesis.line.count), lines: 1)
        try target.withLock(exclusive: true) {
            try target.saveSubjectRecords(salts.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            var cursor = genesisEnd
            // The source is read under its shared lock, so the lines are those of a complete
            // ledger; a writer there waits until the copy has read them.
            try source.withLock(exclusive: false) {
                try source.scan(from: genesisEnd, to: end, batchSize: batchLines, containing: nil) { batch in
                    var bytes: [UInt8] = []
                    for i in 0..<batch.count {
                        bytes += batch.line(i)
                        bytes.append(0x0A)
                    }
                    cursor = try target.append(bytes, lineCount: batch.count, at: cursor)
                }
            }
        }
        let copy = try Ledger.open(store: target)
        try target.withLock(exclusive: true) { try copy.updateDerived(try target.logState()) }
        try target.withLock(exclusive: true) {
            for checkpoint in checkpoints { try target.recordCheckpoint(checkpoint) }
        }
        let copyReport = try copy.verify()
        guard copyReport.head == sourceReport.head, copyReport.events == sourceReport.events else {
            throw LedgerError.storage("the copy's head \(copyReport.head) differs from the source's \(sourceReport.head)")
        }
        let size = Int64(sourceReport.events)
        let sourceRoot = try original.withCurrentDerived { _ in try original.checkpoint(size: size).root }
        let copyRoot = try copy.withCurrentDerived { _ in try copy.checkpoint(size: size).root }
        guard sourceRoot == copyRoot else {
            throw LedgerError.storage("the copy's Merkle root \(copyRoot.hex) differs from the source's \(sourceRoot.hex)")
        }
        guard try copy.issuedCheckpoints() == checkpoints else {
            throw LedgerError.storage("the copy's recorded checkpoints differ from the source's")
        }
        return LedgerCopyReport(events: copyReport.events, subjects: copyReport.subjects, checkpoints: checkpoints.count, head: copyReport.head, root: copyRoot)
    }
}
