// swift-tools-version: 6.1
import PackageDescription

// The HTTP service: a Hummingbird 2 server that embeds ConsentLedger. Its own
// package, so the root package builds without NIO. It enables the root package's PostgreSQL
// trait: the ledger is a folder by default, or a PostgreSQL schema given by URL.
let package = Package(
    name: "ConsentService",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "consent-service", targets: ["consent-service"]),
        .executable(name: "consent-witness", targets: ["consent-witness"]),
    ],
    dependencies: [
        .package(name: "ConsentLedger", path: "../..", traits: ["PostgreSQL"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.5.0"),
    ],
    targets: [
        .target(name: "ConsentServiceCore", dependencies: [
            .product(name: "ConsentLedger", package: "ConsentLedger"),
            .product(name: "ConsentLedgerPostgres", package: "ConsentLedger"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "consent-service", dependencies: ["ConsentServiceCore"]),
        // The witness server: C2SP tlog-witness over Hummingbird, around the root package's LogWitness.
        .target(name: "ConsentWitnessCore", dependencies: [
            .product(name: "LogWitness", package: "ConsentLedger"),
            .product(name: "ConsentLedger", package: "ConsentLedger"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "consent-witness", dependencies: ["ConsentWitnessCore"]),
        .testTarget(name: "ConsentServiceTests", dependencies: [
            "ConsentServiceCore",
            "ConsentWitnessCore",
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "Logging", package: "swift-log"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
