// swift-tools-version: 6.1
import PackageDescription

// Layers, inner to outer (dependencies point inward only):
//   ConsentDomain    pure values: catalogue, events, rules, projections. No I/O, clock or crypto.
//   TransparencyLog  log primitives: hashes and keys (libsodium, OpenSSL's SHA-256), the RFC 6962
//                    Merkle tree and its proofs, C2SP signed notes and checkpoints.
//   LedgerFormat     the bytes: canonical JSON, the event codec, the hash chain, the subject map,
//                    the signed head, export bundles and state proofs with their offline verifiers,
//                    and the error every layer above reports (ConsentError).
//   LedgerStorage    storage in log terms (LedgerStore: transactions, entries by seq, one commit),
//                    the file and memory storages, the key store.
//   ConsentLedger    the ledger: one commit path, reads, proofs, verification, ConsentManager.
//   ConsentReports   audit reports (text, CSV, HTML) and FHIR R5 Consent resources.
//   LogWitness       a C2SP tlog-witness: cosigns checkpoints it checked for consistency (no HTTP;
//                    the server is consent-witness in Samples/ConsentService).
//   consentctl       the command-line tool.
//   ConsentLedgerPostgres  the PostgreSQL storage (postgres-nio), only with the PostgreSQL trait.
// By default nothing here builds NIO: `swift build` compiles ConsentLedgerPostgres as an empty
// module and consentctl without `--store postgres://`. `swift build --traits PostgreSQL` adds both.
// The HTTP service lives in its own package (Samples/ConsentService).
// The layers are separate modules, and verify and replay cross their boundaries once per event
// (decoding, hashing, checking): without cross-module optimisation those calls go through
// unspecialised generics, and verify ran 60% slower than in one module (measured: README,
// Benchmarks). This makes the optimiser see across the modules of this package.
let crossModule: [SwiftSetting] = [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))]

let package = Package(
    name: "ConsentLedger",
    products: [
        .library(name: "ConsentDomain", targets: ["ConsentDomain"]),
        .library(name: "ConsentLedger", targets: ["ConsentLedger"]),
        .library(name: "ConsentReports", targets: ["ConsentReports"]),
        .library(name: "ConsentLedgerPostgres", targets: ["ConsentLedgerPostgres"]),
        .library(name: "LogWitness", targets: ["LogWitness"]),
        .executable(name: "consentctl", targets: ["consentctl"]),
        .executable(name: "consent-bench", targets: ["consent-bench"]),
        .executable(name: "consent-torture", targets: ["consent-torture"]),
    ],
    traits: [
        .trait(name: "PostgreSQL", description: "The PostgreSQL store (postgres-nio) and consentctl --store postgres://"),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        // `make docs`: the DocC plugin (swift package generate-documentation). A plugin only: it
        // adds nothing to the library or the tool.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]
        ),
        // OpenSSL's SHA-256 uses the CPU's SHA extensions: measured 4-5x libsodium's on this
        // machine (see README, Benchmarks). libsodium does all signing and verifying.
        .systemLibrary(
            name: "CLibCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // A Linux system call Swift's Glibc module does not declare: `statx`, to ask a file's
        // identity without its times (LedgerStorage's `PosixFile.Identity`).
        .systemLibrary(name: "CLinux"),
        // The bench's baseline only: a plain SQLite table doing a durable command's work.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(name: "ConsentDomain"),
        .target(name: "TransparencyLog", dependencies: ["CSodium", "CLibCrypto"], swiftSettings: crossModule),
        .target(name: "LedgerFormat", dependencies: ["ConsentDomain", "TransparencyLog"], swiftSettings: crossModule),
        .target(name: "LedgerStorage", dependencies: ["LedgerFormat", "CLinux"], swiftSettings: crossModule),
        .target(name: "ConsentLedger", dependencies: ["ConsentDomain", "TransparencyLog", "LedgerFormat", "LedgerStorage"], swiftSettings: crossModule),
        .target(name: "ConsentReports", dependencies: ["ConsentLedger"], swiftSettings: crossModule),
        .target(name: "LogWitness", dependencies: ["TransparencyLog", "LedgerFormat", "LedgerStorage"]),
        .target(name: "ConsentLedgerPostgres", dependencies: [
            "LedgerStorage",
            .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
        ]),
        .executableTarget(
            name: "consentctl",
            dependencies: [
                "ConsentLedger",
                "ConsentReports",
                "ConsentLedgerPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "consent-bench", dependencies: ["ConsentLedger", "ConsentLedgerPostgres", "CSodium", "CLibCrypto", "CSQLite"]),
        .executableTarget(name: "consent-torture", dependencies: ["ConsentLedger"]),
        // Fuzz targets for the readers of untrusted bytes: `make fuzz` builds this with
        // --sanitize=fuzzer and -DFUZZING (libFuzzer's main); a plain build replays files.
        .executableTarget(name: "consent-fuzz", dependencies: ["ConsentLedger"]),
        // The README's embedding example, compiled so it cannot rot.
        .executableTarget(name: "embedding-sample", dependencies: ["ConsentLedger"], path: "Samples/Embedding"),
        .testTarget(
            name: "ConsentDomainTests",
            dependencies: [
                "ConsentDomain",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(
            name: "ConsentLedgerTests",
            dependencies: [
                "ConsentLedger",
                "ConsentReports",
                "LedgerFormat",
                "LedgerStorage",
                "LogWitness",
                "TransparencyLog",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(name: "ConsentctlTests", dependencies: ["ConsentLedger", "ConsentReports", "ConsentLedgerPostgres"]),
        // Runs against a real server: make test starts one (scripts/with-test-postgres.sh) and passes
        // its URL in CONSENTLEDGER_TEST_POSTGRES_URL. Empty without the PostgreSQL trait.
        .testTarget(name: "ConsentLedgerPostgresTests", dependencies: [
            "ConsentLedger",
            "ConsentReports",
            "LedgerFormat",
            "LedgerStorage",
            "TransparencyLog",
            "ConsentLedgerPostgres",
            .product(name: "PropertyBased", package: "swift-property-based"),
            .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
