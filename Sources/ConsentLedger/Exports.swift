// One import for an embedding backend: the ledger with the layers it is built on (the log
// primitives, the formats and the storages), as `import ConsentLedger`.
@_exported import ConsentDomain
@_exported import LedgerFormat
@_exported import LedgerStorage
@_exported import TransparencyLog
