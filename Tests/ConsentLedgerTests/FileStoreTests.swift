import ConsentDomain
import Dispatch
import Foundation
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// The file store: crash recovery, bad input leaving bytes untouched, keys, locking.
@Suite struct FileStoreTests {
    static let files = ["ledger.jsonl", "head", "catalog.json", "public.key", "secret.key", "subjects.jsonl"]

    func makeLedger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        return (ledger, path)
    }

    func snapshot(_ path: String) -> [String: [UInt8]] {
        Dictionary(uniqueKeysWithValues: Self.files.map { ($0, readBytes(path + "/" + $0)) })
    }

    /// Appends where the file's content ends, as a writer does: the log's reserved zero bytes
    /// are taken out first.
    func append(_ bytes: [UInt8], to path: String) {
        writeBytes(withoutReserve(readBytes(path)) + bytes, to: path)
    }

    /// A long-running writer reuses its parse of the log's last head line only while the line's
    /// bytes are the same: a head line changed in place (same length, one signature byte
    /// altered) after a write is parsed and checked again, and refused.
    @Test func aLongRunningWriterChecksAHeadLineChangedInPlace() throws {
        let (ledger, path) = try makeLedger("head-in-place")
        defer { removeFolder(path) }
        let give = LedgerCommand(subjectID: "dora", request: .give(feature: "timeline", consents: ["required"]))
        try ledger.execute(give)
        _ = try ledger.report(for: "dora")
        var log = readLog(path)
        let lines = log.split(separator: 0x0A, omittingEmptySubsequences: false)
        let headLine = try #require(lines.last { $0.starts(with: Array(#"{"head""#.utf8)) })
        // A base64 character of the signature, near the line's end, replaced by another.
        let at = headLine.endIndex - 12
        log[at] = log[at] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        writeBytes(log, to: path + "/ledger.jsonl")
        #expect(throws: ConsentError.self) { try ledger.report(for: "dora") }
        #expect(throws: ConsentError.self) { try ledger.execute(give) }
    }

    @Test func partialLineFromACrashIsIgnoredByReadsAndRemovedByTheNextWrite() throws {
        let (ledger, path) = try makeLedger("torn")
        defer { removeFolder(path) }
        let before = readLog(path)
        let garbage = Array(#"{"body":{"actor":"self","at":"2026-"#.utf8)
        append(garbage, to: path + "/ledger.jsonl")
        let report = try ledger.verify()
        #expect(report.events == 8)
        #expect(report.torn == TornTail(offset: UInt64(before.count), byteCount: garbage.count, completeLines: 0))
        #expect(try ledger.report(for: "alice").torn != nil)
        #expect(readLog(path) == before + garbage, "reads change nothing")
        let (_, recovered) = try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(recovered?.byteCount == garbage.count)
        #expect(readBytes("\(path)/recovered/torn-at-\(before.count).bin") == garbage, "torn bytes kept aside")
        let after = try ledger.verify()
        #expect(after.events == 9 && after.torn == nil)
    }

    @Test func incompleteTrailingCommandIsDroppedAndReported() throws {
        let (ledger, path) = try makeLedger("cmd")
        defer { removeFolder(path) }
        let before = readLog(path)
        // A two-event command (revoke Timeline's required consent, cascading optional-a) of which
        // only the first line reached the disk before a crash.
        let alice = try #require(try ledger.subjectRef(for: "alice"))
        let last = try ledger.store.logState().last
        let span = CommandSpan(first: 8, size: 3)
        let at = last.event.at
        let events = [
            LedgerEvent(seq: 8, at: at, actor: "self", command: span, payload: .consentRevoked(ConsentRevoked(subject: alice, feature: 2, consent: "required", reason: .withdrawn))),
            LedgerEvent(seq: 9, at: at, actor: "self", command: span, payload: .consentRevoked(ConsentRevoked(subject: alice, feature: 2, consent: "optional-a", reason: .cascade(cause: 8)))),
        ]
        let signer = try ledger.keys!.unlockSigner(passphrase: nil)
        let (records, _) = try ledger.chain.seal(events, after: ledger.chain.hash(ofBody: last.body), signer: signer, streams: ledger.streamStateForSealing(events))
        let tornBytes = records[0].line + records[1].line
        append(tornBytes, to: path + "/ledger.jsonl")
        let report = try ledger.verify()
        #expect(report.events == 8, "the incomplete command is not part of the ledger")
        #expect(report.torn == TornTail(offset: UInt64(before.count), byteCount: tornBytes.count, completeLines: 2))
        #expect(try ledger.report(for: "alice").listing.activeFeatures.map(\.feature.key) == ["timeline"])
        let (result, recovered) = try ledger.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "optional-b")))
        #expect(recovered?.completeLines == 2)
        #expect(result.events.first?.seq == 8, "the dropped events' sequence numbers are reused")
        #expect(try ledger.verify().events == 9)
    }

    /// In the older layout the `head` file, apart from the log, names the newest acknowledged
    /// event: a log cut below it is damage, not a torn tail. (With the heads in the log, a cut
    /// of whole commits is caught against a recorded checkpoint: `aTornTailCutNeverDropsSignedEvents`.)
    @Test func aTornTailThatWouldCostAnAcknowledgedEventIsAnIntegrityFailure() throws {
        let (_, path) = try makeLedger("acked")
        defer { removeFolder(path) }
        useHeadFileLayout(path)
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        let log = readLog(path)
        writeBytes(Array(log.dropLast(20)), to: path + "/ledger.jsonl")
        #expect(throws: ConsentError.self) { try ledger.verify() }
        do {
            _ = try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
            Issue.record("append after a lost acknowledged event must fail")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.problem.contains("acknowledged events are missing"))
        }
        #expect(readLog(path) == Array(log.dropLast(20)), "nothing was repaired or appended")
    }

    @Test func badRequestsChangeNoByte() throws {
        let (ledger, path) = try makeLedger("bad")
        defer { removeFolder(path) }
        let before = snapshot(path)
        let bad: [LedgerCommand] = [
            LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["optional-a"])),
            LedgerCommand(subjectID: "carol", request: .give(feature: "diary", consents: ["required"])),
            LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["optional-z"])),
            LedgerCommand(subjectID: "", request: .give(feature: "timeline", consents: ["required"])),
            LedgerCommand(subjectID: "bad\nid", request: .give(feature: "timeline", consents: ["required"])),
            LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"]), actor: ""),
        ]
        for command in bad {
            #expect(throws: ConsentError.self) { try ledger.execute(command) }
        }
        // A batch with one refused command appends none of them.
        #expect(throws: ConsentError.self) {
            try ledger.execute([LedgerCommand(subjectID: "dave", request: .give(feature: "timeline", consents: ["required"])), bad[0]])
        }
        // No-ops succeed and append nothing either.
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "erin", request: .revoke(feature: "timeline", consent: "required")))
        #expect(snapshot(path) == before)
    }

    @Test func aWrongKeyIsRefused() throws {
        let (ledger, path) = try makeLedger("key")
        defer { removeFolder(path) }
        let other = SodiumSigner.generate()
        let before = snapshot(path)
        // Another secret key: writing fails, nothing changes.
        writeBytes(Array((other.withSeed { Hex.encode(Array($0)) } + "\n").utf8), to: path + "/secret.key")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(throws: ConsentError.self) {
            try reopened.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        }
        #expect(readBytes(path + "/ledger.jsonl") == before["ledger.jsonl"])
        // Another public key: opening fails.
        writeBytes(Array((other.publicKey.hex + "\n").utf8), to: path + "/public.key")
        #expect(throws: ConsentError.self) { try Ledger.open(store: FileLedgerStore(directory: path)) }
        _ = ledger
    }

    @Test func aChangedCatalogueOrHeadIsCaught() throws {
        let (_, path) = try makeLedger("pins")
        defer { removeFolder(path) }
        let catalog = readBytes(path + "/catalog.json")
        writeBytes(Array(String(decoding: catalog, as: UTF8.self).replacingOccurrences(of: "\"1.0\"", with: "\"1.1\"").utf8), to: path + "/catalog.json")
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("a changed catalogue must fail")
            return
        }
        #expect(failure.problem.contains("catalogue"))
        writeBytes(catalog, to: path + "/catalog.json")
        let log = readLog(path)
        rewriteNewestHead(path) { note in
            var changed = Array(note.utf8)
            changed[changed.count - 2] = changed[changed.count - 2] == 0x30 ? 0x31 : 0x30
            return String(decoding: changed, as: UTF8.self)
        }
        #expect(readLog(path) != log)
        #expect(TamperTests.isCaught(verifyFolder(path)))
        writeBytes(log, to: path + "/ledger.jsonl")
        #expect(verifyFolder(path) == .ok(events: 8))
    }

    @Test func initRefusesAnExistingLedgerAndKeepsTheSecretKeyPrivate() throws {
        let (_, path) = try makeLedger("init")
        defer { removeFolder(path) }
        let before = snapshot(path)
        #expect(throws: ConsentError.alreadyExists("a ledger already exists at \(path)")) {
            try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "again", keyProtection: .insecurePlaintext)
        }
        #expect(snapshot(path) == before)
        var st = stat()
        stat(path + "/secret.key", &st)
        #expect(st.st_mode & 0o777 == 0o600)
        #expect(PosixFile.kind(of: path + "/recovered") == .missing)
    }

    @Test func concurrentWritersKeepOneLinearChain() throws {
        let path = LedgerPropertyTests.folder("concurrent")
        defer { removeFolder(path) }
        _ = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "c", keyProtection: .insecurePlaintext)
        let writers = 4, commands = 15
        let failures = Counter()
        DispatchQueue.concurrentPerform(iterations: writers) { w in
            // Separate ledgers, separate open files: the flock(2) lock is what serialises them.
            guard let ledger = try? Ledger.open(store: FileLedgerStore(directory: path)) else { failures.add(); return }
            for i in 0..<commands {
                let request: ConsentRequest = i % 2 == 0 ? .give(feature: "timeline", consents: ["required", "optional-a"]) : .revoke(feature: "timeline", consent: "required")
                if (try? ledger.execute(LedgerCommand(subjectID: "w\(w)", request: request))) == nil { failures.add() }
            }
        }
        #expect(failures.value == 0)
        // Each subject: 8 gives of 2 events, 7 revokes of 2 events (required + cascaded optional-a).
        #expect(verifyFolder(path) == .ok(events: 1 + writers * (8 * 2 + 7 * 2)))
    }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// Regression: salts were found by `String` equality (canonical equivalence) but references
/// hashed from bytes, so "José" typed precomposed and decomposed shared one salt and got two
/// references. Ids are now compared byte for byte: two spellings, two subjects, each consistent.
@Suite struct SubjectIdentityTests {
    /// A write for a subject the process has not seen reads that subject's record alone, as a
    /// read does, not every record: another subject's damaged record does not stop it (verify
    /// still names the damage), and the write's cost does not grow with the other records.
    @Test func aWriteForANewSubjectReadsNoOtherRecord() throws {
        let path = LedgerPropertyTests.folder("one-record")
        defer { removeFolder(path) }
        try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "one-record", keyProtection: .insecurePlaintext).execute(Array(seedScenario))
        // The first record's salt damaged in a line still shaped like a record: it no longer decodes.
        var lines = String(decoding: readBytes(path + "/subjects.jsonl"), as: UTF8.self).split(separator: "\n").map(String.init)
        let saltStart = try #require(lines[0].range(of: #""salt":""#)).upperBound
        lines[0].replaceSubrange(saltStart..<lines[0].index(saltStart, offsetBy: 32), with: String(repeating: "g", count: 32))
        #expect(FileLedgerStore.decodeSubjectLine(Array(lines[0].utf8)) == nil, "the first record no longer decodes")
        let damaged = lines
        writeBytes(Array((damaged.joined(separator: "\n") + "\n").utf8), to: path + "/subjects.jsonl")
        let fresh = try Ledger.open(store: FileLedgerStore(directory: path))
        try fresh.execute(LedgerCommand(subjectID: "dora", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try fresh.report(for: "dora").events.count == 1)
        #expect(throws: ConsentError.self) { try Ledger.open(store: FileLedgerStore(directory: path)).verify() }
    }

    /// A command that looks a subject up twice (`prove-state` and `export` check that it has
    /// events, then read it) scans subjects.jsonl and keeps nothing: keeping decodes every
    /// record, which took 121 ms at 5M events. A third lookup (a process that goes on) keeps.
    @Test func aStateProofAfterACheckKeepsNoRecords() throws {
        let path = LedgerPropertyTests.folder("one-lookup")
        defer { removeFolder(path) }
        try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "one-lookup", keyProtection: .insecurePlaintext).execute(Array(seedScenario))
        // Without the index (subjects.idx), as a ledger written before it was.
        unlink(path + "/subjects.idx")
        let store = FileLedgerStore(directory: path)
        let reader = try Ledger.open(store: store)
        #expect(try reader.hasEvents(subjectID: "alice"))
        _ = try reader.proveState(for: "alice")
        #expect(!store.subjectCache.isKeeping)
        _ = try reader.exportSubject("alice")
        #expect(store.subjectCache.isKeeping)
        // With it, lookups it answers read one line each, and the process keeps nothing.
        try Ledger.open(store: FileLedgerStore(directory: path)).execute(LedgerCommand(subjectID: "index-maker", request: .give(feature: "timeline", consents: ["required"])))
        let indexed = FileLedgerStore(directory: path)
        let another = try Ledger.open(store: indexed)
        #expect(try another.hasEvents(subjectID: "alice"))
        _ = try another.proveState(for: "alice")
        _ = try another.exportSubject("alice")
        #expect(!indexed.subjectCache.isKeeping && indexed.subjectCache.scans == 0)
    }

    /// A long-running writer for subjects that have records finds each through the index and
    /// never reads every record (which stalled the write that did it: 120 ms at 50,000
    /// subjects); one whose lookups found no record 32 times reads them all once and keeps them.
    @Test func aWriterReadsEveryRecordOnlyAfterManyLookupsFoundNone() throws {
        let path = LedgerPropertyTests.folder("record-misses")
        defer { removeFolder(path) }
        let ids = (0..<40).map { "known-\($0)" }
        let maker = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "record-misses", keyProtection: .insecurePlaintext)
        for id in ids { try maker.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        let store = FileLedgerStore(directory: path)
        let writer = try Ledger.open(store: store)
        for id in ids { try writer.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["optional-a"]))) }
        #expect(writer.memory.withLock { $0.records == nil && $0.recordMisses == 0 })
        #expect(store.subjectCache.scans == 0 && !store.subjectCache.isKeeping)
        for k in 0..<33 { try writer.execute(LedgerCommand(subjectID: "new-\(k)", request: .give(feature: "timeline", consents: ["required"]))) }
        #expect(writer.memory.withLock { $0.records != nil && $0.recordMisses == Ledger.recordsLookedUpAlone })
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().subjects == 73)
    }

    /// A long-running writer keeps what it read of subjects.jsonl and reads only what was
    /// appended since; a file rewritten by another process (an erasure) is read afresh, so an
    /// erased record never comes back, and a record appended twice is still refused.
    @Test func aLongRunningWriterReadsOnlyWhatWasAppendedAndNeverAnErasedRecord() throws {
        let path = LedgerPropertyTests.folder("subject-cache")
        defer { removeFolder(path) }
        let writer = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "subject-cache", keyProtection: .insecurePlaintext)
        for id in ["a1", "a2", "a3"] { try writer.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        // Another process adds a subject; the writer finds its record (appended after its reads).
        let other = try Ledger.open(store: FileLedgerStore(directory: path))
        try other.execute(LedgerCommand(subjectID: "zed", request: .give(feature: "timeline", consents: ["required"])))
        try writer.execute(LedgerCommand(subjectID: "zed", request: .give(feature: "timeline", consents: ["optional-a"])))
        #expect(try writer.report(for: "zed").events.count == 2, "one pseudonym for zed in both processes")
        // The other process erases a1 (subjects.jsonl rewritten): the writer starts a new pseudonym.
        let erased = try other.erase("a1", actor: "dpo")
        // It grows past the size the writer read, so only the inode tells the files apart.
        for id in ["b1-with-a-longer-id", "b2-with-a-longer-id"] { try other.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        try writer.execute(LedgerCommand(subjectID: "a1", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try writer.subjectRef(for: "a1")?.value != erased.pseudonym)
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().subjects == 7)
        // A record appended twice is refused, by the writer as by a fresh process.
        let line = String(decoding: FileLedgerStore.encodeSubjectLines([(SubjectID("yan"), SubjectRecord(salt: [UInt8](repeating: 9, count: 16), signature: nil))]), as: UTF8.self)
        writeBytes(withoutReserve(readBytes(path + "/subjects.jsonl")) + Array((line + line).utf8), to: path + "/subjects.jsonl")
        for ledger in [writer, try Ledger.open(store: FileLedgerStore(directory: path))] {
            #expect {
                try ledger.execute(LedgerCommand(subjectID: "yan", request: .give(feature: "timeline", consents: ["required"])))
            } throws: { error in
                guard case ConsentError.integrity(let failure) = error else { return false }
                return failure.problem.contains("repeats subject id 'yan'")
            }
        }
    }

    @Test func canonicallyEquivalentSpellingsAreDistinctSubjects() throws {
        let path = LedgerPropertyTests.folder("nfc")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "nfc", keyProtection: .insecurePlaintext)
        let composed = "Jos\u{E9}", decomposed = "Jose\u{301}"
        #expect(composed == decomposed, "Swift calls them equal")
        try ledger.execute(LedgerCommand(subjectID: composed, request: .give(feature: "timeline", consents: ["required"])))
        #expect(try ledger.report(for: decomposed).listing.isEmpty, "the other spelling is another subject")
        try ledger.execute(LedgerCommand(subjectID: decomposed, request: .give(feature: "medication-management", consents: ["required"])))
        let salts = try FileLedgerStore(directory: path).readSubjectRecords().mapValues(\.salt)
        #expect(salts.count == 2)
        for id in [composed, decomposed] {
            let ref = try #require(try ledger.subjectRef(for: id))
            #expect(ref == ledger.subjectRef(id: id, salt: salts[SubjectID(id)]!))
            #expect(try ledger.report(for: id).events.count == 1)
        }
        #expect(try ledger.verify().subjects == 2)
    }
}

@Suite struct SubjectFileTests {
    @Test func idsWithQuotesEscapesAndUnicodeRoundTrip() throws {
        let path = LedgerPropertyTests.folder("ids")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "ids", keyProtection: .insecurePlaintext)
        let ids = ["a\"b", "back\\slash", "x\u{2028}y", "名前", "\"salt\":\"00\""]
        for id in ids { try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        let salts = try FileLedgerStore(directory: path).readSubjectRecords()
        #expect(Set(salts.keys) == Set(ids.map(SubjectID.init)))
        #expect(salts.values.allSatisfy { $0.signature != nil }, "a format-2 ledger signs every record")
        for id in ids { #expect(try ledger.report(for: id).events.count == 1, "\(id)") }
        #expect(FileLedgerStore.decodeSubjectLine(Array(#"{"id":"a","salt":"0011"}"#.utf8)) == nil)
    }
}

/// A crash that left a commit's events whole on disk but not its head line (or cut inside
/// it): the complete command is durable and valid. Reads accept it (they never sign, so the head
/// stays), checkpoints and exports sign a root that includes it after checking its signatures,
/// and the next write signs a head that covers it.
@Suite struct LogAheadOfHeadTests {
    @Test(arguments: [false, true])
    func aCompleteCommandPastTheHeadIsAdopted(cutInsideTheHeadLine: Bool) throws {
        let path = LedgerPropertyTests.folder("ahead")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "ahead", keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        let index = readBytes(path + "/lines.idx"), tree = readBytes(path + "/tree.hashes")
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        // Take the last head line off (or most of it) and put back the derived data from before.
        var all = lines(of: readLog(path))
        let headLine = all.removeLast()
        let log = Array(all.joined()) + (cutInsideTheHeadLine ? Array(headLine.prefix(50)) : [])
        writeBytes(log, to: path + "/ledger.jsonl")
        writeBytes(index, to: path + "/lines.idx")
        writeBytes(tree, to: path + "/tree.hashes")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.report(for: "bob").listing.activeFeatures.map(\.feature.key) == ["timeline"])
        #expect(newestHead(path)?.checkpoint.size == 8, "the newest head is the first commit's")
        #expect(try reopened.verify().events == 10)
        #expect(readLog(path) == log, "a read signs nothing")
        let (checkpoint, _) = try reopened.signedCheckpoint()
        #expect(checkpoint.size == 10)
        #expect(checkpoint.root == (try reopened.checkpoint(size: 10)).root, "the root includes the command past the head")
        try reopened.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
        #expect(newestHead(path)?.checkpoint.size == 11, "the next write's head covers both commands")
        #expect(try reopened.verify().events == 11)
    }
}

/// A batch of commands is one commit, ended by the event that carries the subject map's root.
/// A crash that left some of its commands complete on disk, but not the last, used to leave a
/// log ending without a root, which no read, write or verify accepted.
@Suite struct CommitRecoveryTests {
    @Test func completeCommandsOfAnUnfinishedCommitAreATornTail() throws {
        let path = LedgerPropertyTests.folder("torn-commit")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "torn-commit", keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        let before = readLog(path)
        let last = try ledger.store.logState().last
        // Three one-event commands for two new subjects, sealed as one commit; only the first two
        // reach the disk.
        let at = last.event.at
        var events: [LedgerEvent] = []
        for (i, subject) in ["0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "0123456789abcdef0123456789abcdef"].enumerated() {
            let seq = last.event.seq + 1 + UInt64(i)
            let consent = i == 2 ? "optional-a" : "required"
            events.append(LedgerEvent(seq: seq, at: at, actor: "self", command: CommandSpan(first: seq, size: 1), payload: .consentGiven(ConsentGiven(subject: SubjectRef(subject), feature: 2, consent: consent, version: "1.0"))))
        }
        let signer = try ledger.keys!.unlockSigner(passphrase: nil)
        let (records, _) = try ledger.chain.seal(events, after: ledger.chain.hash(ofBody: last.body), signer: signer, streams: ledger.streamStateForSealing(events))
        #expect(records[0].stream.root == nil && records[1].stream.root == nil && records[2].stream.root != nil)
        let cut = records[0].line + records[1].line
        writeBytes(before + cut, to: path + "/ledger.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let report = try reopened.verify()
        #expect(report.events == 8, "the unfinished commit is not part of the ledger")
        #expect(report.torn == TornTail(offset: UInt64(before.count), byteCount: cut.count, completeLines: 2))
        #expect(try reopened.report(for: "alice").listing.activeFeatures.map(\.feature.key) == ["timeline"])
        let (result, recovered) = try reopened.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(recovered?.completeLines == 2)
        #expect(result.events.first?.seq == 8, "the dropped events' sequence numbers are reused")
        #expect(try reopened.verify().events == 9)
    }
}

/// A file scanned a chunk at a time gives exactly its complete lines, in order, whatever the
/// chunk size: lines cut by a chunk's end, lines longer than a chunk, and a last line without
/// its newline (never acknowledged, so left out).
@Suite struct ChunkedLineReaderTests {
    static let files: [(String, [UInt8])] = [
        ("empty", []),
        ("one line", Array("abc\n".utf8)),
        ("partial last line", Array("abc\ndef\ngh".utf8)),
        ("only a partial line", Array("no newline".utf8)),
        ("empty lines", Array("\n\n\na\n\n".utf8)),
        ("a line longer than any chunk", Array((String(repeating: "x", count: 1000) + "\nshort\n" + String(repeating: "y", count: 70)).utf8)),
        ("many lines", Array((0..<500).map { "line \($0) " + String(repeating: "z", count: $0 % 37) + "\n" }.joined().utf8)),
    ]

    @Test(arguments: files.map(\.0), [1, 2, 7, 64, 256 << 10])
    func chunksGiveTheCompleteLinesInOrder(_ name: String, _ chunkSize: Int) throws {
        let bytes = Self.files.first { $0.0 == name }!.1
        let path = LedgerPropertyTests.folder("chunked-lines") + ".txt"
        defer { unlink(path) }
        try PosixFile.writeNew(bytes, to: path)
        var seen: [UInt8] = []
        var calls = 0
        try PosixFile(path: path, flags: O_RDONLY).forEachLines(chunkSize: chunkSize) { chunk in
            calls += 1
            #expect(chunk.last == 0x0A)
            seen += chunk
        }
        let complete = bytes.lastIndex(of: 0x0A).map { Array(bytes[...$0]) } ?? []
        #expect(seen == complete)
        #expect((calls == 0) == complete.isEmpty)
    }
}

/// The file storage reads the log a chunk at a time, one buffer for the whole read, moving the
/// partial line a chunk ends with to the front for the next. With chunks smaller than a line,
/// of a few lines, and of a few lines and a half, replay and verify read the same log.
@Suite(.serialized) struct LogChunkTests {
    @Test(arguments: [97, 1_000, 4_096])
    func replayAndVerifyReadTheSameLogWhateverTheChunk(_ chunk: Int) throws {
        let path = LedgerPropertyTests.folder("chunks-\(chunk)")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "chunks", keyProtection: .insecurePlaintext)
        for round in 0..<12 {
            for subject in ["p1", "p2", "p3"] {
                let request: ConsentRequest = round % 2 == 0 ? .give(feature: "timeline", consents: ["required", "optional-a"]) : .revoke(feature: "timeline", consent: "required")
                try ledger.execute(LedgerCommand(subjectID: subject, request: request))
            }
        }
        let whole = try Ledger.open(store: FileLedgerStore(directory: path)).loadAll()
        let saved = FileLedgerStore.logReadChunk.exchange(chunk, ordering: .relaxed)
        defer { FileLedgerStore.logReadChunk.store(saved, ordering: .relaxed) }
        let chunked = try Ledger.open(store: FileLedgerStore(directory: path)).loadAll()
        #expect(chunked.eventCount == whole.eventCount && chunked.eventCount == 1 + 12 * 3 * 2)
        #expect(chunked.subjects == whole.subjects)
        let report = try Ledger.open(store: FileLedgerStore(directory: path)).verify()
        #expect(report.events == whole.eventCount)
    }

    /// The next chunk is read on another thread while the ledger checks the one before: a
    /// damaged event is named whichever chunk, and which part of the last batch, it falls in,
    /// by replay (its command's events no longer share one actor, or the last differs from the
    /// head) and by verify (its signature), and the read under way when the check fails is
    /// waited for (the folder is removed right after).
    @Test(arguments: [1_000, 16_384, 1 << 20], [5, 300, 500, 699])
    func aDamagedEventIsNamedWhicheverChunkAndPartItFallsIn(chunk: Int, line: Int) throws {
        let path = LedgerPropertyTests.folder("chunks-damaged-\(chunk)-\(line)")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "chunks", keyProtection: .insecurePlaintext)
        // 700 events in one commit: the last batch (all of them, with the largest chunk) is
        // checked in parts.
        let commands = (0..<233).map { LedgerCommand(subjectID: "p\($0)", request: .give(feature: "timeline", consents: ["required", "optional-a", "optional-b"])) }
        _ = try ledger.execute(commands)
        var all = lines(of: readLog(path))
        let events = all.indices.filter { !isHeadLine(all[$0]) }
        #expect(events.count == 700)
        // A different actor: the body's hash and signature no longer match.
        let target = events[line]
        let text = String(decoding: all[target], as: UTF8.self)
        #expect(text.contains("\"actor\":\"self\""))
        all[target] = Array(text.replacingOccurrences(of: "\"actor\":\"self\"", with: "\"actor\":\"selF\"").utf8)
        writeBytes(Array(all.joined()), to: path + "/ledger.jsonl")
        let saved = FileLedgerStore.logReadChunk.exchange(chunk, ordering: .relaxed)
        defer { FileLedgerStore.logReadChunk.store(saved, ordering: .relaxed) }
        do {
            try Ledger.open(store: FileLedgerStore(directory: path)).loadAll()
            Issue.record("replay passed a damaged event")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.seq == UInt64(line), "\(failure)")
        }
        guard case .failed(.integrity(let failure)) = verifyFolder(path) else {
            Issue.record("verify passed a damaged event")
            return
        }
        #expect(failure.seq == UInt64(line) && failure.problem.contains("signature does not verify"), "\(failure)")
    }

    /// Each reader reads ahead on a queue of its own: four threads replaying and verifying one
    /// ledger at once, in chunks of 1,000 bytes (many reads ahead each), all read the whole log.
    @Test func readersAtOnceEachReadTheWholeLog() throws {
        let path = LedgerPropertyTests.folder("chunks-readers")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "chunks", keyProtection: .insecurePlaintext)
        _ = try ledger.execute((0..<100).map { LedgerCommand(subjectID: "p\($0)", request: .give(feature: "timeline", consents: ["required", "optional-a"])) })
        let saved = FileLedgerStore.logReadChunk.exchange(1_000, ordering: .relaxed)
        defer { FileLedgerStore.logReadChunk.store(saved, ordering: .relaxed) }
        let counts = Mutex<[Int]>([])
        onThreads(4) { i in
            let count: Int
            do {
                let reader = try Ledger.open(store: FileLedgerStore(directory: path))
                count = i % 2 == 0 ? try reader.loadAll().eventCount : try reader.verify().events
            } catch {
                count = -1
            }
            counts.withLock { $0.append(count) }
        }
        #expect(counts.withLock { $0 } == [201, 201, 201, 201])
    }

    /// The log's last batch is checked in parts that halve, down to a few hundred lines; other
    /// batches, and a last batch that is small already, in one part.
    @Test(arguments: [(2_100, true, [1_050, 525, 262, 263]), (700, true, [350, 350]), (511, true, [511]), (2_100, false, [2_100]), (1, true, [1])])
    func theLastBatchIsCheckedInPartsThatHalve(lines: Int, isLast: Bool, parts: [Int]) {
        var left = lines
        var sizes: [Int] = []
        while left > 0 {
            let size = LogChecker.partSize(available: left, isLastBatch: isLast)
            sizes.append(size)
            left -= size
        }
        #expect(sizes == parts)
    }

    /// A range is read in chunks of (nearly) equal size, none larger than the chunk: no short
    /// last chunk, whose few lines would make a last batch too small to keep both cores busy.
    @Test(arguments: [(1, 1 << 20), (1 << 20, 1 << 20), ((1 << 20) + 1, 1 << 20), (10_059_776, 1 << 20), (47_939_584, 1 << 20), (1_000, 97), (96, 97), (4_097, 4_096)])
    func aRangeIsReadInChunksOfEqualSize(_ bytes: Int, _ chunk: Int) {
        var left = UInt64(bytes)
        var sizes: [Int] = []
        while left > 0 {
            let size = FileLedgerStore.readSize(left: left, chunk: chunk)
            #expect(size > 0 && size <= chunk)
            sizes.append(size)
            left -= UInt64(size)
        }
        #expect(sizes.reduce(0, +) == bytes)
        #expect(sizes.count == (bytes + chunk - 1) / chunk)
        #expect(sizes.max()! - sizes.min()! <= 1, "chunks of \(sizes.min()!) to \(sizes.max()!) bytes")
    }
}
