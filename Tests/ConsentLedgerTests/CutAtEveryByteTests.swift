import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage

/// A crash can stop a write at any byte. The log is cut at every byte offset of its last
/// commit (a command of three events and its head line), as a crash during that append leaves
/// it, with the derived files as they were before it; and each derived file is cut at every
/// byte offset, as a crash before the next sync of derived data leaves it. Each time a new
/// process opens the folder, answers as the complete commits say, verifies it, and writes on.
@Suite struct CutAtEveryByteTests {
    static let last = LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required", "optional-a", "optional-b"]))

    /// A ledger before and after its last commit: the folder's files at both points.
    static func folders(_ label: String) throws -> (path: String, before: [String: [UInt8]], after: [String: [UInt8]], truth: (before: ConsentListing, after: ConsentListing), events: (before: Int, after: Int)) {
        let path = LedgerPropertyTests.folder("cut-\(label)")
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/cut", keyProtection: .insecurePlaintext, clock: SteppingClock().clock)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "medication-management", consents: ["required", "optional-a"])))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let before = HostileFolderTests.folderBytes(path)
        let listingBefore = try ledger.report(for: "alice").listing
        let eventsBefore = try ledger.verify().events
        try ledger.execute(Self.last)
        return (path, before, HostileFolderTests.folderBytes(path), (listingBefore, try ledger.report(for: "alice").listing), (eventsBefore, try ledger.verify().events))
    }

    static func restore(_ files: [String: [UInt8]], to path: String) {
        for (name, bytes) in files { writeBytes(bytes, to: path + "/" + name) }
    }

    /// The log cut at every byte of its last commit: at the file's end (a log without a
    /// reserve, as older writers appended), and inside the reserve, the rest of the file still
    /// zeros (a write into the reserve that a crash cut short).
    @Test(arguments: [false, true])
    func theLogCutAtEveryByteOfItsLastCommitKeepsOnlyCompleteCommits(inReserve: Bool) throws {
        let (path, before, after, truth, events) = try Self.folders(inReserve ? "log-reserve" : "log")
        defer { removeFolder(path) }
        let start = withoutReserve(before["ledger.jsonl"]!).count, full = withoutReserve(after["ledger.jsonl"]!)
        let fileSize = after["ledger.jsonl"]!.count
        #expect(!inReserve || fileSize > full.count, "the writer left a reserve")
        // The commit's events end at the start of its head line: from there on it is complete
        // (a commit whose head line was cut is vouched for by its events' signatures).
        let headLine = full[start...].firstRange(of: Array(#"{"head":"#.utf8))!.lowerBound
        var cuts = 0
        for end in start...full.count {
            Self.restore(before, to: path)
            writeBytes(Array(full[..<end]) + (inReserve ? [UInt8](repeating: 0, count: fileSize - end) : []), to: path + "/ledger.jsonl")
            let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
            let complete = end >= headLine
            let report = try ledger.report(for: "alice")
            #expect(report.listing == (complete ? truth.after : truth.before), "cut at byte \(end)")
            let verified = try ledger.verify()
            #expect(verified.events == (complete ? events.after : events.before), "cut at byte \(end)")
            #expect((verified.torn != nil) == (end != start && end != headLine && end != full.count), "cut at byte \(end): torn \(String(describing: verified.torn))")
            // The next write cuts the torn bytes off and goes on from the complete commits.
            try ledger.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
            #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == (complete ? events.after : events.before) + 1)
            cuts += 1
        }
        #expect(cuts == full.count - start + 1)
    }

    /// A derived file cut short is behind, never tampered with: every read answers from the log,
    /// `verify` passes, and the next write brings the file up to date.
    @Test(arguments: ["lines.idx", "tree.hashes", "subjects.map"])
    func aDerivedFileCutAtEveryByteIsCaughtUp(_ name: String) throws {
        let (path, _, after, truth, events) = try Self.folders(name)
        defer { removeFolder(path) }
        let full = after[name]!
        // Every byte of a short file; of a longer one, every byte of its last 300 and every
        // 7th before them.
        let ends = (0...full.count).filter { $0 >= full.count - 300 || $0 % 7 == 0 }
        for end in ends {
            Self.restore(after, to: path)
            writeBytes(Array(full[..<end]), to: path + "/" + name)
            let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
            #expect(try ledger.report(for: "alice").listing == truth.after, "\(name) cut at byte \(end)")
            _ = try ledger.proveState(for: "bob")
            #expect(try ledger.verify().events == events.after, "\(name) cut at byte \(end)")
            try ledger.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
            // (The subject map may be written afresh, smaller than its append-only history;
            // `verify` below checks that it covers the log.)
            if name != "subjects.map" {
                #expect(readBytes(path + "/" + name).count >= full.count, "\(name) cut at byte \(end) was not caught up")
            }
            #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == events.after + 1)
        }
    }
}
