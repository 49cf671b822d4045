import ConsentLedger
import ConsentReports
#if PostgreSQL
import ConsentLedgerPostgres
#endif

/// Turns `--store` / `--ledger` into a store: a folder (the embedded default) or PostgreSQL.
enum StoreSelection {
    static func isURL(_ spec: String) -> Bool { spec.contains("://") }

    static func folder(_ spec: String) -> String {
        absolute(spec.hasPrefix("file:") ? String(spec.dropFirst(5)) : spec)
    }

    static func store(_ spec: String) throws -> any LedgerStore {
        if spec.hasPrefix("postgres://") || spec.hasPrefix("postgresql://") {
            #if PostgreSQL
            return try PostgresLedgerStore(url: spec)
            #else
            throw ConsentError.invalidRequest(
                "this consentctl was built without PostgreSQL support; build it with 'swift build --traits PostgreSQL' (or 'make build-postgres')")
            #endif
        }
        if isURL(spec) {
            throw ConsentError.invalidRequest("'\(spec)' is neither a folder nor a postgres:// URL")
        }
        return FileLedgerStore(directory: folder(spec))
    }
}
