import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
import TransparencyLog

/// What a long-running writer carries from one of its commits to the next (the streams' newest
/// events, the key schedule, the catalogue versions, the head line it wrote) saves it reading
/// them again, and must never hide what another process wrote in between.
@Suite struct WarmWriterTests {
    static func give(_ subject: String, _ feature: String = "timeline", _ consents: [String] = ["required"]) -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents))
    }

    /// The streams a commit leaves are remembered once: the next write takes them out of memory
    /// and adds to them in place. A copy left in memory made every command copy the newest event
    /// of every stream the process had met (a cost that grew with the number of subjects).
    @Test func theNextWriteTakesTheRememberedStreamsRatherThanCopyingThem() throws {
        let (ledger, path) = try PolicyVersionTests.ledger("warm-streams")
        defer { removeFolder(path) }
        let before = try ledger.verify().events
        try ledger.execute(Self.give("gina"))
        let remembered = try #require(ledger.memory.withLock { $0.streams })
        let root = remembered.state.map.rootHash
        #expect(ledger.takeRememberedStreams(nextIndex: remembered.nextIndex, root: root) != nil)
        #expect(ledger.takeRememberedStreams(nextIndex: remembered.nextIndex, root: root) == nil)
        // Taken and not put back (as when a write fails): the next write reads the map again.
        try ledger.execute(Self.give("hank"))
        #expect(ledger.memory.withLock { $0.streams } != nil)
        #expect(try ledger.verify().events == before + 2)
    }

    /// A writer's own commits of subject events carry its key schedule forward; a rotation by
    /// another process in between is still found, and the retired key signs nothing.
    @Test func aWriterThatCommittedBeforeAnotherProcessRotatedTheKeyCannotSignWithTheRetiredOne() throws {
        let (first, _, path) = try KeyRotationTests.ledger("warm-keys")
        defer { removeFolder(path) }
        let second = try KeyRotationTests.reopen(path)
        try second.execute(Self.give("bob"))
        try second.execute(Self.give("carol"))
        let through = try #require(second.memory.withLock { $0.keys?.through })
        #expect(through == 4)
        try first.rotateKey(protection: .insecurePlaintext)
        let before = try FileLedgerStore(directory: path).snapshot()
        #expect {
            try second.execute(Self.give("dave"))
        } throws: { error in
            guard case ConsentError.conflict(let message) = error else { return false }
            return message.contains("rotated")
        }
        #expect(try FileLedgerStore(directory: path).snapshot() == before)
        try second.execute(Self.give("dave"))
        #expect(try second.verify().events == 6)
    }

    /// The catalogue versions found at one size are carried to the next only over the writer's
    /// own commits of subject events: a version another process published between two of them
    /// decides the writer's next grant.
    @Test func catalogueVersionsCarriedOverOwnCommitsStillSeeAnotherProcesssPublication() throws {
        // The other process keeps the same time: its clock and the writer's are one machine's.
        let clock = SteppingClock(step: 60_000)
        let (writer, path) = try PolicyVersionTests.ledger("warm-catalogue", clock: clock)
        defer { removeFolder(path) }
        try writer.execute(Self.give("erin"))
        try writer.execute(Self.give("fay"))
        let size = try #require(writer.memory.withLock { $0.ledgerTimeline?.through })
        #expect(size == (try writer.verify().events))
        let other = try Ledger.open(store: FileLedgerStore(directory: path), clock: clock.clock)
        try other.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0")]))
        let (result, _) = try writer.execute(Self.give("gus"))
        guard case .consentGiven(let given) = try #require(result.events.first).payload else { Issue.record("not a grant"); return }
        #expect(given.version == "2.0")
    }

    /// The head line a commit wrote is taken as the head it was made from, without parsing it
    /// back; a reader of the same bytes parses them to the same head.
    @Test func theHeadLineAWriterRemembersIsTheHeadAReaderParses() throws {
        let (ledger, path) = try PolicyVersionTests.ledger("warm-head")
        defer { removeFolder(path) }
        try ledger.execute(Self.give("ivy"))
        let written = try #require(ledger.memory.withLock { $0.trustedHead })
        let fresh = FileLedgerStore(directory: path)
        let parsed = try #require(try fresh.read { try $0.logState() }.signedHead)
        #expect(parsed.note == written.note)
        #expect(try SignedHead(logLine: parsed.logLine) == parsed)
    }

    /// A reader checks a signed head's signature once, and remembers the note it checked; a
    /// different note of the same size (here, another signature) is checked, and refused.
    @Test func aReaderChecksAHeadOnceAndRefusesAnotherOfTheSameSize() throws {
        let (ledger, path) = try PolicyVersionTests.ledger("checked-head")
        defer { removeFolder(path) }
        try ledger.execute(Self.give("ivy"))
        let reader = try Ledger.open(store: FileLedgerStore(directory: path))
        _ = try reader.currentListing(for: "ivy")
        let genuine = try #require(try FileLedgerStore(directory: path).read { try $0.logState() }.signedHead)
        #expect(reader.memory.withLock { $0.checkedHead?.note } == genuine.note)
        // One base64 character of the head's signature changed, the note otherwise the same.
        let logPath = path + "/ledger.jsonl"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: logPath)))
        let at = withoutReserve(bytes).count - 11  // the line ends `…Zhigk=\n"}` and a newline
        bytes[at] = bytes[at] == UInt8(ascii: "Y") ? UInt8(ascii: "X") : UInt8(ascii: "Y")
        try Data(bytes).write(to: URL(fileURLWithPath: logPath))
        let forged = try #require(try FileLedgerStore(directory: path).read { try $0.logState() }.signedHead)
        #expect(forged.note != genuine.note)
        #expect(forged.checkpoint.size == genuine.checkpoint.size)
        #expect(throws: ConsentError.self) { _ = try reader.currentListing(for: "ivy") }
    }
}
