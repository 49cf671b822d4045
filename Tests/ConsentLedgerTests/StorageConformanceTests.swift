@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog
import Testing

/// The storage conformance checks (``StorageConformance``) against the memory and file
/// storages; the PostgreSQL target runs them against PostgreSQL.
@Suite struct StorageConformanceTests {
    @Test(arguments: StorageConformance.allCases)
    func memoryStorage(_ check: StorageConformance) throws {
        try check.run { MemoryLedgerStore(name: check.rawValue) }
    }

    @Test(arguments: StorageConformance.allCases)
    func fileStorage(_ check: StorageConformance) throws {
        let folder = TemporaryFolder("conformance")
        defer { folder.remove() }
        try check.run { FileLedgerStore(directory: folder.path + "/ledger") }
    }
}
