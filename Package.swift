// swift-tools-version: 6.1
import PackageDescription

// Layers, inner to outer (dependencies point inward only):
//   ConsentDomain  pure values: catalogue, events, rules, projections. No I/O, clock or crypto.
//   ConsentLedger  canonical encoding, hash chain, crypto protocols (+ libsodium), file store, ledger.
//   consentctl     the command-line tool.
// Nothing here depends on NIO; the PostgreSQL store and the HTTP service live in their own targets.
let package = Package(
    name: "ConsentLedger",
    products: [
        .library(name: "ConsentDomain", targets: ["ConsentDomain"]),
        .library(name: "ConsentLedger", targets: ["ConsentLedger"]),
        .executable(name: "consentctl", targets: ["consentctl"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
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
        .target(name: "ConsentDomain"),
        .target(name: "ConsentLedger", dependencies: ["ConsentDomain", "CSodium", "CLibCrypto"]),
        .executableTarget(
            name: "consentctl",
            dependencies: [
                "ConsentLedger",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "consent-bench", dependencies: ["ConsentLedger", "CSodium", "CLibCrypto"]),
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
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(name: "ConsentctlTests", dependencies: ["ConsentLedger"]),
    ],
    swiftLanguageModes: [.v6]
)
