import ConsentDomain
import Foundation
import Synchronization
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage

#if canImport(Glibc)
import Glibc
#endif

/// Descriptors kept open between a store's transactions (``OpenFileCache``): used only while
/// their path still names the file they were opened on, and lock files never shared by two
/// transactions at once.
@Suite struct OpenFileCacheTests {
    static func folder(_ label: String) -> String {
        let path = LedgerPropertyTests.folder("open-files-\(label)")
        mkdir(path, 0o755)
        return path
    }

    @Test func aFileIsOpenedOnceWhileItsPathNamesIt() throws {
        let path = Self.folder("kept")
        defer { removeFolder(path) }
        writeBytes(Array("one\n".utf8), to: path + "/data")
        let cache = OpenFileCache()
        let first = try cache.file(path + "/data", writable: false)
        // Changed in place (an append): the same file, the same descriptor, the new bytes.
        writeBytes(Array("one\ntwo\n".utf8), to: path + "/data")
        let second = try cache.file(path + "/data", writable: false)
        #expect(first === second)
        #expect(try second.readAll() == Array("one\ntwo\n".utf8))
        // Read and write descriptors are kept apart: a read-only one never serves a write.
        let writable = try cache.file(path + "/data", writable: true)
        #expect(writable !== first)
        try writable.write(Array("ONE".utf8), at: 0)
        #expect(try first.readAll() == Array("ONE\ntwo\n".utf8))
    }

    @Test func aFileReplacedByRenameIsOpenedAfresh() throws {
        let path = Self.folder("renamed")
        defer { removeFolder(path) }
        writeBytes(Array("old\n".utf8), to: path + "/data")
        let cache = OpenFileCache()
        let old = try cache.file(path + "/data", writable: false)
        writeBytes(Array("new file\n".utf8), to: path + "/data.next")
        #expect(rename(path + "/data.next", path + "/data") == 0)
        let new = try cache.file(path + "/data", writable: false)
        #expect(new !== old)
        #expect(try new.readAll() == Array("new file\n".utf8))
        // The kept descriptor still reads the file it was opened on, which nobody names now.
        #expect(try old.readAll() == Array("old\n".utf8))
    }

    @Test func aLinkOrAMissingFileInThePathsPlaceIsRefusedAsWhenOpenedAfresh() throws {
        let path = Self.folder("replaced")
        defer { removeFolder(path) }
        writeBytes(Array("ledger bytes\n".utf8), to: path + "/data")
        writeBytes(Array("elsewhere\n".utf8), to: path + "/other")
        let cache = OpenFileCache()
        _ = try cache.file(path + "/data", writable: true)
        #expect(unlink(path + "/data") == 0)
        #expect(symlink(path + "/other", path + "/data") == 0)
        #expect {
            _ = try cache.file(path + "/data", writable: true)
        } throws: { error in
            guard case ConsentError.storage(let message) = error else { return false }
            return message.contains("\(path)/data") && message.contains("not a regular file")
        }
        #expect(unlink(path + "/data") == 0)
        #expect {
            _ = try cache.file(path + "/data", writable: false)
        } throws: { error in
            if case ConsentError.notFound = error { return true }
            return false
        }
        // Created when asked to, as a fresh open would.
        #expect(try cache.file(path + "/data", writable: true, create: true).readAll() == [])
    }

    /// Lock files are lent, never shared: a write on one thread excludes a read of the same
    /// store on another, after both kinds of transaction have run and left lock files idle.
    @Test func twoTransactionsOfOneStoreNeverShareALock() throws {
        let path = LedgerPropertyTests.folder("open-files-lock")
        defer { removeFolder(path) }
        let created = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/lock", keyProtection: .insecurePlaintext)
        try created.execute(Array(seedScenario))
        let store = FileLedgerStore(directory: path, lockTimeout: .milliseconds(50))
        for _ in 0..<3 {
            _ = try store.read { try $0.logState() }
            _ = try store.write { try $0.logState() }
        }
        final class Outcome: Sendable {
            let result = Mutex<Result<Int, any Error>?>(nil)
        }
        let outcome = Outcome()
        try store.write { _ in
            let reader = Thread {
                let read = Result { try store.read { try $0.logState().size } }
                outcome.result.withLock { $0 = read }
            }
            reader.start()
            while outcome.result.withLock({ $0 == nil }) { usleep(1000) }
        }
        let result = try #require(outcome.result.withLock { $0 })
        guard case .failure(ConsentError.storage(let message)) = result else {
            Issue.record("the read went ahead under the write's lock: \(result)")
            return
        }
        #expect(message.contains("is locked by"))
        // And the lock files go back: the next transactions take them.
        #expect(try store.read { try $0.logState().size } > 0)
    }

    /// A long-running process keeps `subjects.jsonl` open. Another process erases a subject
    /// (the file is rewritten and renamed into place) and then records a new one in the new
    /// file: the first process finds the new subject, so it never reads the replaced file.
    @Test func aLongRunningLedgerReadsTheSubjectFileAnotherProcessReplaced() throws {
        let path = LedgerPropertyTests.folder("open-files-subjects")
        defer { removeFolder(path) }
        let service = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/subjects", keyProtection: .insecurePlaintext)
        for id in ["alice", "bob", "dora"] {
            try service.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"])))
            #expect(try service.subjectRef(for: id) != nil)
        }
        let other = try Ledger.open(store: FileLedgerStore(directory: path), keys: FileKeyStore(path: path + "/secret.key"))
        _ = try other.erase("bob", actor: "dpo")
        try other.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
        let carol = try #require(try other.subjectRef(for: "carol"))
        #expect(try service.subjectRef(for: "carol") == carol)
        // It writes for her as the subject the other process created, not as a new one.
        try service.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "medication-management", consents: ["required"])))
        #expect(try service.subjectRef(for: "carol") == carol)
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events > 0)
    }
}
