import ConsentDomain
import Synchronization
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// The log checker decodes a batch on all cores while the batch before it is applied in order,
/// on one of the same threads. Whatever the batches, it must give what applying the events one
/// by one gives, and report the first fault in log order.
@Suite struct LogCheckerTests {
    /// Batch sizes: one entry; a few; the smallest decoded on all cores; batches that split the
    /// faults below into neighbours; the default, one batch for the whole ledger.
    static let batchSizes = [1, 7, 256, 300, 16_384]

    /// A ledger of about 800 events: 50 subjects, each giving and withdrawing in turn (each
    /// withdrawal of the required consent cascades).
    static func ledger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        var commands: [LedgerCommand] = []
        for round in 0..<8 {
            for subject in 0..<50 {
                let request: ConsentRequest = round % 2 == 0
                    ? .give(feature: "medication-management", consents: ["required", "optional-a"])
                    : .revoke(feature: "medication-management", consent: "required")
                commands.append(LedgerCommand(subjectID: "subject-\(subject)", request: request))
            }
        }
        try ledger.execute(commands)
        return (ledger, path)
    }

    static func replay(_ ledger: Ledger, batchSize: Int) throws -> LogChecker.Progress {
        try ledger.store.read { tx in
            var checker = LogChecker(tx: tx, names: ledger.store.names, hasher: ledger.chain.hasher, signatures: nil)
            checker.batchSize = batchSize
            let start = LogChecker.Progress(replay: LedgerReplay(catalog: ledger.catalog), previous: .zero)
            return try checker.run(from: 0, to: try ledger.view(tx).log.size, head: nil, progress: start)
        }
    }

    /// The log's event lines, in order, without their newlines.
    static func eventLines(_ path: String) -> [[UInt8]] {
        lines(of: readLog(path)).filter { $0.starts(with: Array(#"{"body":"#.utf8)) }.map { Array($0.dropLast()) }
    }

    @Test(arguments: batchSizes)
    func anyBatchSizeGivesTheEventsAppliedOneByOne(batchSize: Int) throws {
        let (ledger, path) = try Self.ledger("checker-batches-\(batchSize)")
        defer { removeFolder(path) }
        var oneByOne = LedgerReplay(catalog: ledger.catalog)
        var last = Digest.zero
        for line in Self.eventLines(path) {
            let record = try EventCodec.decode(line: line)
            try oneByOne.apply(record.event)
            last = ledger.chain.hash(ofBody: record.body)
        }
        #expect(oneByOne.eventCount > 700)
        let progress = try Self.replay(ledger, batchSize: batchSize)
        #expect(progress.replay.eventCount == oneByOne.eventCount)
        #expect(progress.replay.subjects == oneByOne.subjects)
        #expect(progress.previous == last)
    }

    /// A wrong link at seq 250, found in order, and a member the format does not have at seq
    /// 350, found while decoding: with batches of 256 or 300 entries, the second is decoded
    /// while the first is applied. The first in the log is named, and the second alone when it
    /// is the only one.
    @Test(arguments: batchSizes)
    func theFirstFaultInTheLogIsNamedWhateverTheBatches(batchSize: Int) throws {
        let (ledger, path) = try Self.ledger("checker-faults-\(batchSize)")
        defer { removeFolder(path) }
        let original = readLog(path)
        /// The log with one byte changed in the event line of each seq: the first hex digit of
        /// its `prev` (a wrong link), or the last letter of the name `seq` (a member the format
        /// does not have).
        enum Change { case wrongLink, unknownMember }
        func changed(_ changes: [(seq: Int, change: Change)]) -> [UInt8] {
            var result: [[UInt8]] = []
            for var line in lines(of: original) {
                for (seq, change) in changes where line.starts(with: Array(#"{"body":"#.utf8)) && contains(line, #","seq":\#(seq),"#) {
                    switch change {
                    case .wrongLink:
                        let at = position(of: #""prev":""#, in: line)! + 8
                        line[at] = line[at] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
                    case .unknownMember:
                        line[position(of: #""seq""#, in: line)! + 3] = UInt8(ascii: "z")
                    }
                }
                result.append(line)
            }
            return Array(result.joined())
        }
        func position(of marker: String, in line: [UInt8]) -> Int? {
            let m = Array(marker.utf8)
            return (0...(line.count - m.count)).first { line[$0..<$0 + m.count].elementsEqual(m) }
        }
        func contains(_ line: [UInt8], _ marker: String) -> Bool { position(of: marker, in: line) != nil }
        func failure(_ log: [UInt8]) -> IntegrityFailure? {
            writeBytes(log, to: path + "/ledger.jsonl")
            switch Result(catching: { try Self.replay(ledger, batchSize: batchSize) }) {
            case .success: return nil
            case .failure(ConsentError.integrity(let failure)): return failure
            case .failure(let error):
                Issue.record("not an integrity error: \(error)")
                return nil
            }
        }
        let both = failure(changed([(250, .wrongLink), (350, .unknownMember)]))
        #expect(both?.line == 251, "\(String(describing: both))")
        #expect(both?.problem.contains("prev") == true, "\(String(describing: both))")
        let later = failure(changed([(350, .unknownMember)]))
        #expect(later?.line == 351, "\(String(describing: later))")
        #expect(later?.problem.contains("sez") == true, "\(String(describing: later))")
        #expect(failure(original) == nil)
    }
}
