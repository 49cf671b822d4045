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

    static func store(_ spec: String, lockTimeout: Duration? = nil) throws -> any LedgerStore {
        if spec.hasPrefix("postgres://") || spec.hasPrefix("postgresql://") {
            #if PostgreSQL
            let store = try PostgresLedgerStore(url: spec, lockTimeout: lockTimeout ?? PostgresLedgerStore.defaultLockTimeout)
            if store.address.isUnverified {
                printError("warning: sslmode=require-unverified: the server's certificate is not checked, so anyone on the path to \(store.address.host) can read and change the ledger's traffic")
            }
            return store
            #else
            throw ConsentError.invalidRequest(
                "this consentctl was built without PostgreSQL support; build it with 'swift build --traits PostgreSQL' (or 'make build-postgres')")
            #endif
        }
        if isURL(spec) {
            throw ConsentError.invalidRequest("'\(spec)' is neither a folder nor a postgres:// URL")
        }
        return FileLedgerStore(directory: folder(spec), lockTimeout: lockTimeout ?? FileLedgerStore.defaultLockTimeout)
    }

    /// A PostgreSQL ledger made before keys left the database may still keep its seed in a
    /// table: say so on every command until it is moved out.
    static func warnAboutRetiredKey(in store: any LedgerStore) {
        #if PostgreSQL
        guard let postgres = store as? PostgresLedgerStore, (try? postgres.retiredSeed()) != nil else { return }
        printError("warning: \(postgres.address) still keeps the secret signing key in table \(postgres.address.schema).signing_key, where every writer reads it over the network; move it into a key file: consentctl --store URL --key-file FILE key move-out")
        #endif
    }
}
