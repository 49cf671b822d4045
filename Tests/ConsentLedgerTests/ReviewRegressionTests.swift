import ConsentDomain
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Regression tests for the defects found in review; each names the defect.
@Suite struct ReviewRegressionTests {
    /// A batch cached the salt of a new subject whose command appended nothing; the subject's
    /// next events went to a pseudonym whose salt was never saved, and vanished on restart.
    @Test func aNewSubjectsUnsavedSaltIsNotCachedByABatch() throws {
        let path = LedgerPropertyTests.folder("salt-cache")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "salt", keyProtection: .insecurePlaintext)
        try ledger.execute([
            LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])),
            LedgerCommand(subjectID: "bob", request: .revoke(feature: "timeline", consent: "required")),
        ])
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.report(for: "bob").listing.activeFeatures.map(\.feature.key) == ["timeline"])
        #expect(try reopened.report(for: "carol").listing.activeFeatures.map(\.feature.key) == ["timeline"])
    }

    /// A rolled-back ledger (signed events removed) was reported as a usage error.
    /// A stream's lines are read before they are authenticated together. A changed line whose
    /// `streamPrev` sends the walk to another stream's event must be the line named, not the
    /// genuine event it led to (which once drew "not the stream's event it should be").
    @Test func aChangedStreamLinkNamesTheChangedLineNotTheEventItLedTo() throws {
        let path = LedgerPropertyTests.folder("stream-link")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "link", keyProtection: .insecurePlaintext)
        let give = ConsentRequest.give(feature: "timeline", consents: ["required"]), revoke = ConsentRequest.revoke(feature: "timeline", consent: "required")
        for request in [give, revoke, give] {
            try ledger.execute(LedgerCommand(subjectID: "alice", request: request))
            try ledger.execute(LedgerCommand(subjectID: "bob", request: request))
        }
        let alice = try ledger.report(for: "alice").events.map(\.seq)
        let bob = try ledger.report(for: "bob").events.map(\.seq)
        #expect(alice.count == 3 && bob.count == 3)
        // Alice's newest event now names Bob's first event as its stream's previous one.
        let changed = alice[2], genuine = alice[1], elsewhere = bob[0]
        #expect(String(genuine).count == String(elsewhere).count)
        let logPath = path + "/ledger.jsonl"
        var lines = try String(contentsOfFile: logPath, encoding: .utf8).components(separatedBy: "\n")
        let at = try #require(lines.firstIndex { $0.contains("\"seq\":\(changed),") && $0.hasPrefix("{\"body\"") })
        #expect(lines[at].contains("\"streamPrev\":\(genuine),"))
        lines[at] = lines[at].replacingOccurrences(of: "\"streamPrev\":\(genuine),", with: "\"streamPrev\":\(elsewhere),")
        try lines.joined(separator: "\n").write(toFile: logPath, atomically: false, encoding: .utf8)
        do {
            _ = try Ledger.open(store: FileLedgerStore(directory: path)).report(for: "alice")
            Issue.record("a changed line was read as the log's")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.line == Int(changed) + 1, "\(failure)")
        }
    }

    @Test func proveConsistencyFromACheckpointLargerThanTheLedgerIsAnIntegrityFailure() throws {
        let (ledger, path) = try AuditExportTests.ledger("rollback")
        defer { removeFolder(path) }
        let log = lines(of: readLog(path))
        let (_, note) = try ledger.signedCheckpoint()
        // Cut the log back, with its head lines, to a commit boundary of at most 8 events, and
        // delete the derived data.
        let boundary = try #require(log.lastIndex { isHeadLine($0) && (try? SignedHead(logLine: Array($0.dropLast())))!.checkpoint.size <= 8 })
        writeBytes(Array(log[...boundary].joined()), to: path + "/ledger.jsonl")
        removeFolder(path + "/lines.idx", path + "/tree.hashes", path + "/subjects.map")
        let cut = try Ledger.open(store: FileLedgerStore(directory: path))
        do {
            _ = try cut.proveConsistency(from: note)
            Issue.record("a rollback must be refused")
        } catch ConsentError.integrity(let failure) {
            #expect(failure.problem.contains("signed events were removed"))
        }
    }

    /// A corrupted offset in the line index trapped (off_t overflow) instead of failing.
    @Test func aCorruptedLineIndexOffsetIsAnErrorNotACrash() throws {
        let (ledger, path) = try AuditExportTests.ledger("bad-index")
        defer { removeFolder(path) }
        var index = readBytes(path + "/lines.idx")
        // Entry of seq 1 (alice's first event): top byte of its offset.
        index[32 + 7] = 0xFF
        writeBytes(index, to: path + "/lines.idx")
        #expect(throws: ConsentError.self) { try ledger.exportSubject("alice") }
    }

    /// A checkpoint size near 2^63 sent the proof checker into an endless loop.
    @Test func checkpointSizesBeyondTwoToTheSixtySecondAreRefused() {
        let root = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
        #expect(throws: NoteError.self) { try Checkpoint(text: "o\n\(Int64(1) << 62 + 1)\n\(root)\n") }
        #expect(!MerkleTree.checkInclusion([], record: 0, leaf: .zero, size: 1 << 62, root: .zero, hasher: OpenSSLSHA256()))
    }

    /// An export bundle could leave out a catalogue version (and rewrite its state to match) and
    /// still verify: the subject map's proof for the ledger's own stream now names the newest
    /// publication (as the signed export statement does for ledgers without streams).
    @Test func leavingOutACatalogueVersionIsCaughtEvenWithAMatchingState() throws {
        let (ledger, path) = try PolicyVersionTests.ledger("statement")
        defer { removeFolder(path) }
        try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0")]))
        let bundle = try ledger.exportSubject("alice")
        var object = bundle.json.objectValue!
        object["catalogVersions"] = .array([])
        // The state as it was under the genesis catalogue: what a forger would write.
        var state = SubjectState()
        for line in try ledger.report(for: "alice").events { try state.apply(line, catalog: SeedCatalog.catalog) }
        object["state"] = .object(["features": ListingJSON.encode(ConsentListing(state: state, catalog: SeedCatalog.catalog))])
        do {
            _ = try ExportVerifier.verify(CanonicalJSON.serialize(.object(object)), pinnedKey: try ledger.verifierKey)
            Issue.record("a left-out catalogue version must be caught")
        } catch {
            #expect((error as? ExportVerificationError)?.problem.contains("the ledger's own stream is seq") == true, "\(error)")
        }
    }
}

/// `init` into an existing empty folder removed and recreated it (losing its owner and mode,
/// and failing without write access to the parent). It now fills the folder in place.
@Suite struct InitIntoExistingFolderTests {
    @Test func anEmptyFolderIsFilledInPlaceAndKeepsItsMode() throws {
        let path = LedgerPropertyTests.folder("existing")
        defer { removeFolder(path) }
        #expect(mkdir(path, 0o750) == 0)
        var before = stat()
        stat(path, &before)
        _ = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "existing", keyProtection: .insecurePlaintext)
        var after = stat()
        stat(path, &after)
        #expect(before.st_ino == after.st_ino, "the same folder, not a new one")
        #expect(after.st_mode & 0o777 == 0o750)
        #expect(verifyFolder(path) == .ok(events: 1))
        // Files a crashed init moved in (no log) do not block a new one.
        let other = LedgerPropertyTests.folder("leftover")
        defer { removeFolder(other) }
        #expect(mkdir(other, 0o700) == 0)
        writeBytes([], to: other + "/catalog.json")
        _ = try Ledger.create(store: FileLedgerStore(directory: other), catalog: SeedCatalog.catalog, name: "leftover", keyProtection: .insecurePlaintext)
        #expect(verifyFolder(other) == .ok(events: 1))
        // A staging folder left inside is not init's to delete: it is named, and kept.
        let staged = LedgerPropertyTests.folder("staged")
        defer { removeFolder(staged) }
        #expect(mkdir(staged, 0o700) == 0)
        #expect(mkdir(staged + "/.init-1", 0o700) == 0)
        #expect(throws: ConsentError.alreadyExists("\(staged)/.init-1 is left from an init that did not finish; remove it, then run init again")) {
            try Ledger.create(store: FileLedgerStore(directory: staged), catalog: SeedCatalog.catalog, name: "staged", keyProtection: .insecurePlaintext)
        }
        #expect(PosixFile.kind(of: staged + "/.init-1") == .directory)
    }
}
