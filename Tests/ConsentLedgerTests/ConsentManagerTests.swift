import ConsentDomain
import Foundation
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// The async library API: R9's calls, typed errors, concurrent use.
@Suite struct ConsentManagerTests {
    @Test func theAppsCallsAnswerWithTheUpdatedConsents() async throws {
        let path = LedgerPropertyTests.folder("api")
        defer { removeFolder(path) }
        let consents = try await ConsentManager.create(directory: path, name: "api", keyProtection: .insecurePlaintext)
        let afterGive = try await consents.activate(["required", "optional-a"], of: "timeline", for: "p1")
        #expect(afterGive.filter(\.isActive).map(\.feature.key) == ["timeline"])
        #expect(try await consents.consents(of: "2", for: "p1").consents.filter(\.isGiven).map(\.definition.code) == ["required", "optional-a"])
        #expect(try await consents.activeConsents(for: "p1").map(\.feature.key) == ["timeline"])
        let afterRevoke = try await consents.revoke("required", of: "timeline", for: "p1")
        #expect(afterRevoke.allSatisfy { !$0.isActive })
        let history = try await consents.history(of: "p1")
        #expect(history.map(\.kind) == [.given, .given, .withdrawn, .cascade])
        let past = try await consents.state(of: "p1", at: history[0].at)
        #expect(past.first { $0.feature.key == "timeline" }?.isActive == true)
        let (checkpoint, _) = try await consents.checkpoint()
        #expect(checkpoint.size == 5)
        let bundle = try await consents.export(subject: "p1")
        #expect(try ExportVerifier.verify(bundle.bytes, pinnedKey: try consents.verifierKey()).events == 4)
    }

    @Test func errorsAreTyped() async throws {
        let path = LedgerPropertyTests.folder("api-errors")
        defer { removeFolder(path) }
        let consents = try await ConsentManager.create(directory: path, name: "api-errors", keyProtection: .insecurePlaintext)
        await #expect(throws: ConsentError.self) { try await consents.activate(["optional-a"], of: "timeline", for: "p1") }
        do {
            _ = try await consents.activate(["optional-a"], of: "timeline", for: "p1")
        } catch {
            guard case .ruleViolation = error else { Issue.record("expected a rule violation, got \(error)"); return }
        }
        do {
            _ = try await consents.activate(["required"], of: "diary", for: "p1")
        } catch {
            guard case .notFound = error else { Issue.record("expected not found, got \(error)"); return }
        }
        do {
            _ = try await consents.activate(["required"], of: "timeline", for: "")
        } catch {
            guard case .invalidRequest = error else { Issue.record("expected invalid request, got \(error)"); return }
        }
        do {
            _ = try await ConsentManager.open(directory: path + "-missing")
        } catch {
            guard case .notFound = error else { Issue.record("expected not found, got \(error)"); return }
        }
    }

    @Test func manyTasksAtOnceKeepOneChain() async throws {
        let path = LedgerPropertyTests.folder("api-tasks")
        defer { removeFolder(path) }
        let consents = try await ConsentManager.create(directory: path, name: "api-tasks", keyProtection: .insecurePlaintext)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<16 {
                group.addTask { _ = try await consents.activate(["required", "optional-b"], of: "medication-management", for: "p\(i)") }
            }
            try await group.waitForAll()
        }
        #expect(try consents.ledger.verify().events == 1 + 16 * 2)
    }
}

/// The in-memory fast path for current consents must equal replaying the log.
@Suite struct WarmReadTests {
    @Test func currentListingFromMemoryEqualsTheReplayedReport() throws {
        let (ledger, path) = try PolicyVersionTests.ledger("warm")
        defer { removeFolder(path) }
        try ledger.loadAll()
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required", "optional-b"])))
        try ledger.publish(PolicyVersionTests.catalog(bumping: [("timeline", "required", "2.0")]))
        // Another writer (a second Ledger on the same folder) moves the log on.
        let other = try Ledger.open(store: FileLedgerStore(directory: path))
        try other.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        for subject in ["alice", "bob", "nobody"] {
            #expect(try ledger.currentListing(for: subject) == ledger.report(for: subject).listing, "\(subject)")
        }
    }

    /// A read of current consents runs on the caller's thread only while it cannot wait: with a
    /// writer holding the folder's lock, the ledger reads nothing there and answers nil, and the
    /// manager's read waits on a worker for the writer instead, then answers with what it wrote.
    @Test func aReadThatWouldWaitForAWriterIsNotMadeOnTheCallersThread() async throws {
        let path = LedgerPropertyTests.folder("api-no-wait")
        defer { removeFolder(path) }
        let consents = try await ConsentManager.create(directory: path, name: "api-no-wait", keyProtection: .insecurePlaintext)
        _ = try await consents.activate(["required"], of: "timeline", for: "p1")
        let ledger = consents.ledger
        #expect(try ledger.currentListingWithoutWaiting(for: "p1") == ledger.currentListing(for: "p1"))
        #expect(try MemoryLedgerStore().readingWithoutWaiting { 1 } == nil, "a storage that cannot say runs nothing")
        let writer = LockHolderState()
        let holding = Thread {
            _ = try? FileLedgerStore(directory: path).write { _ in
                writer.state.withLock { $0 = 1 }
                while writer.state.withLock({ $0 }) == 1 { usleep(1000) }
            }
            writer.state.withLock { $0 = 3 }
        }
        holding.start()
        while writer.state.withLock({ $0 }) == 0 { usleep(1000) }
        try #require(writer.state.withLock { $0 } == 1, "the writer could not take the lock")
        var ran = false
        #expect(try FileLedgerStore(directory: path).readingWithoutWaiting { ran = true } == nil)
        #expect(!ran)
        #expect(try ledger.currentListingWithoutWaiting(for: "p1") == nil)
        // The manager's read waits for the writer, on a worker.
        async let waited = consents.state(of: "p1")
        try await Task.sleep(for: .milliseconds(50))
        #expect(writer.state.withLock { $0 } == 1, "the writer still holds the lock while the read waits")
        writer.state.withLock { $0 = 2 }
        let features = try await waited
        #expect(features.filter(\.isActive).map(\.feature.key) == ["timeline"])
        while writer.state.withLock({ $0 }) != 3 { usleep(1000) }
        #expect(try ledger.currentListingWithoutWaiting(for: "p1") != nil)
    }
}

/// Where a thread that holds a ledger's lock in a test is: 0 not yet holding, 1 holding, 2 told
/// to let go, 3 gone.
final class LockHolderState: Sendable {
    let state = Mutex<Int>(0)
}
