// consent-service: the ledger behind a JSON API.
//
//   consent-service serve [--store DIR|postgres://…] [--port 8080] [--token-key FILE]
//                         [--key-file FILE] [--passphrase-file FILE] [--insecure-plaintext-key]
//   consent-service token (--subject ID | --auditor NAME) [--ttl SECONDS] [--token-key FILE]
//
// Storage comes from configuration: --store (or --ledger DIR), else $CONSENT_SERVICE_STORE,
// else the folder ./consent-ledger. A postgres:// URL puts the ledger in a PostgreSQL schema
// (see consentctl --help); several instances may serve one schema and still keep one chain.
// A missing ledger is created with the seed catalogue. The ledger's signing key is unlocked once,
// at start, with the passphrase from --passphrase-file or $CONSENT_SERVICE_PASSPHRASE; a new
// ledger's key is sealed under it, or stored unencrypted with --insecure-plaintext-key (tests
// and demos only). A PostgreSQL store keeps no key: --key-file names the ledger's key file. The
// token key (an Ed25519 seed, hex) is
// created with mode 0600 if missing.
import ConsentLedger
import ConsentLedgerPostgres
import ConsentServiceCore
import Hummingbird

#if canImport(Glibc)
import Glibc
#endif

let args = Array(CommandLine.arguments.dropFirst())
func option(_ name: String) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    return args[i + 1]
}
func fail(_ message: String) -> Never {
    var m = "consent-service: " + message + "\n"
    m.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    exit(64)
}

let keyPath = option("--token-key") ?? "consent-service.key"
func tokenKey() -> SodiumSigner {
    if let bytes = try? LocalFile.read(keyPath), let seed = hexDecode(String(decoding: bytes.filter { $0 != 0x0A }, as: UTF8.self)), let signer = SodiumSigner(seed: seed) {
        return signer
    }
    let signer = SodiumSigner.generate()
    let file = SigningKeyFile.plaintext(signer)
    do { try LocalFile.write(file.withUnsafeBytes { Array($0) }, to: keyPath) } catch { fail("cannot write \(keyPath): \(error)") }
    return signer
}

switch args.first {
case "token":
    let ttl = Int64(option("--ttl") ?? "3600") ?? 3600
    let principal: Principal
    if let s = option("--subject") { principal = .subject(s) } else if let a = option("--auditor") { principal = .auditor(a) } else { fail("token needs --subject ID or --auditor NAME") }
    print(AccessTokens(signer: tokenKey()).issue(for: principal, expires: Int64(time(nil)) + ttl))
case "serve":
    let configured = option("--store") ?? option("--ledger") ?? getenv("CONSENT_SERVICE_STORE").flatMap { String(validatingCString: $0) }
    let storeSpec = configured.flatMap { $0.isEmpty ? nil : $0 } ?? "consent-ledger"
    guard let port = Int(option("--port") ?? "8080"), (1...65535).contains(port) else { fail("--port must be a number from 1 to 65535") }
    let store: any LedgerStore
    do {
        if PostgresLedgerAddress.isURL(storeSpec) {
            // The database keeps no signing key: the service loads it from its key file.
            guard let keyFile = option("--key-file") else { fail("a PostgreSQL store needs --key-file FILE: the ledger's signing key file (the database keeps none)") }
            let postgres = try PostgresLedgerStore(url: storeSpec, keyStore: FileKeyStore(path: keyFile))
            if postgres.address.isUnverified {
                var warning = "consent-service: warning: sslmode=require-unverified: the server's certificate is not checked\n"
                warning.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
            }
            store = postgres
        } else {
            store = FileLedgerStore(directory: storeSpec)
        }
    } catch {
        fail("\(error)")
    }
    let passphrase: SecretBytes?
    if let file = option("--passphrase-file") {
        do {
            var bytes = try LocalFile.read(file)
            defer { zeroize(&bytes) }
            if bytes.last == 0x0A { bytes.removeLast() }
            passphrase = SecretBytes(copying: bytes)
        } catch {
            fail("cannot read the passphrase file \(file): \(error)")
        }
    } else {
        passphrase = getenv("CONSENT_SERVICE_PASSPHRASE").map { SecretBytes(copying: Array(String(cString: $0).utf8)) }
    }
    let unlock: PassphraseSource? = passphrase.map { p in { @Sendable in p } }
    let consents: ConsentManager
    do {
        consents = try await ConsentManager.open(store: store, passphrase: unlock)
    } catch .notFound(.ledger, _) {
        let protection: KeyProtection
        if let passphrase { protection = .passphrase(passphrase) } else if args.contains("--insecure-plaintext-key") { protection = .insecurePlaintext } else {
            fail("no ledger at \(store.names.location): to create one, give its key's passphrase (--passphrase-file FILE or $CONSENT_SERVICE_PASSPHRASE), or --insecure-plaintext-key for tests and demos")
        }
        do {
            consents = try await ConsentManager.create(store: store, name: "consent-service.local/ledger", keyProtection: protection)
        } catch {
            // Another instance may have created it a moment ago: open that one.
            do { consents = try await ConsentManager.open(store: store, passphrase: unlock) } catch { fail("\(error)") }
        }
    } catch {
        fail("\(error)")
    }
    print("consent-service: ledger at \(store.names.location), listening on 127.0.0.1:\(port)")
    try consents.ledger.loadAll()
    try await makeApplication(consents: consents, tokens: AccessTokens(signer: tokenKey()), port: port).runService()
default:
    fail("usage: consent-service serve [--store DIR|postgres://USER@HOST:PORT/DB?schema=NAME] [--port N] [--token-key FILE] [--key-file FILE] [--passphrase-file FILE] [--insecure-plaintext-key] | token (--subject ID | --auditor NAME) [--ttl S] [--token-key FILE]")
}

/// Lowercase hex of a token key file, decoded; nil for anything else.
func hexDecode(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    for i in stride(from: 0, to: digits.count, by: 2) {
        guard let byte = UInt8(String(decoding: digits[i...i + 1], as: UTF8.self), radix: 16) else { return nil }
        out.append(byte)
    }
    return out
}
