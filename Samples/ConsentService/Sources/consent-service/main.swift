// consent-service: the ledger behind a JSON API.
//
//   consent-service serve [--store DIR|postgres://…] [--port 8080] [--token-key FILE]
//                         [--key-file FILE] [--passphrase-file FILE] [--insecure-plaintext-key]
//                         [--issuer ISS] [--audience AUD] [--max-token-lifetime SECONDS] [--jwks FILE|URL]
//                         [--lock-timeout SECONDS] [--clock-skew SECONDS]
//   consent-service token (--subject ID | --auditor NAME) [--ttl SECONDS] [--token-key FILE]
//                         [--issuer ISS] [--audience AUD] [--max-token-lifetime SECONDS]
//
// Storage comes from configuration: --store (or --ledger DIR), else $CONSENT_SERVICE_STORE,
// else the folder ./consent-ledger. A postgres:// URL puts the ledger in a PostgreSQL schema
// (see consentctl --help); several instances may serve one schema and still keep one chain.
// A missing ledger is created with the seed catalogue. The ledger's signing key is unlocked once,
// at start, with the passphrase from --passphrase-file or $CONSENT_SERVICE_PASSPHRASE; a new
// ledger's key is sealed under it, or stored unencrypted with --insecure-plaintext-key (tests
// and demos only). A PostgreSQL store keeps no key: --key-file names the ledger's key file.
//
// Bearer tokens are JWTs signed with EdDSA (Ed25519), checked for issuer, audience, expiry and
// a maximum lifetime (default 12 hours). The service's own token key (a key file in the plaintext
// form of Spec/key-file.md, mode 0600) signs the tokens of `consent-service token`; it is created
// when missing and never replaced: an unreadable or malformed one stops the service. --jwks FILE or
// --jwks URL (https; fetched once at start)
// adds the keys of the hospital's identity provider.
import ConsentLedger
import ConsentLedgerPostgres
import ConsentServiceCore
import Hummingbird
import Logging
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

/// The service's token key: read as it is, created only when there is none, never replaced.
func tokenKey() -> SodiumSigner {
    let keys = FileKeyStore(path: keyPath)
    do {
        return try keys.unlockSigner(passphrase: nil)
    } catch ConsentError.notFound(.signingKey, _) {
        let signer = SodiumSigner.generate()
        do { try keys.save(signer, protection: .insecurePlaintext) } catch { fail("cannot write the token key \(keyPath): \(error)") }
        return signer
    } catch {
        fail("cannot use the token key \(keyPath): \(error)")
    }
}

/// An integer option within `range`, or a usage error that says so.
func integer(_ name: String, default value: Int64, in range: ClosedRange<Int64>) -> Int64 {
    guard let text = option(name) else { return value }
    guard let n = Int64(text), range.contains(n) else { fail("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'") }
    return n
}

let policy = AccessTokens.Policy(
    issuer: option("--issuer") ?? "consent-service", audience: option("--audience") ?? "consent-service",
    maximumLifetime: integer("--max-token-lifetime", default: 12 * 3600, in: 60...(30 * 86400)))

/// The identity provider's keys: a JWKS file, or a URL fetched once at start (https, or http to
/// this machine only: keys fetched in the clear from elsewhere could be anyone's).
func readJWKS(_ source: String) async -> String {
    guard source.hasPrefix("https://") || source.hasPrefix("http://") else {
        do { return String(decoding: try LocalFile.read(source, limit: 1 << 20), as: UTF8.self) } catch { fail("cannot read the JWKS file \(source): \(error)") }
    }
    guard let url = URL(string: source), let host = url.host else { fail("--jwks \(source) is not a URL") }
    if url.scheme == "http", !["127.0.0.1", "localhost", "::1"].contains(host) {
        fail("--jwks \(source): an identity provider's keys are fetched over https (http only from this machine)")
    }
    var request = URLRequest(url: url, timeoutInterval: 10)
    request.setValue("application/json", forHTTPHeaderField: "Accept")
    do {
        let (data, response) = try await URLSession.shared.data(for: request)
        guard let status = (response as? HTTPURLResponse)?.statusCode, status == 200 else {
            fail("--jwks \(source) answered \((response as? HTTPURLResponse)?.statusCode ?? 0), not 200")
        }
        guard data.count <= 1 << 20 else { fail("--jwks \(source) sent more than 1 MiB") }
        return String(decoding: data, as: UTF8.self)
    } catch {
        fail("cannot fetch the JWKS \(source): \(error)")
    }
}

func accessTokens(jwks: String? = nil) async -> AccessTokens {
    do { return try await AccessTokens(signer: tokenKey(), policy: policy, jwks: jwks) } catch { fail("cannot set up token checking: \(error)") }
}

switch args.first {
case "token":
    let ttl = integer("--ttl", default: min(3600, policy.maximumLifetime), in: 1...policy.maximumLifetime)
    let principal: Principal
    if let s = option("--subject") { principal = .subject(SubjectID(s)) } else if let a = option("--auditor") { principal = .auditor(a) } else { fail("token needs --subject ID or --auditor NAME") }
    do { print(try await accessTokens().issue(for: principal, lifetime: ttl, now: Int64(time(nil)))) } catch { fail("cannot issue the token: \(error)") }
case "serve":
    let configured = option("--store") ?? option("--ledger") ?? getenv("CONSENT_SERVICE_STORE").flatMap { String(validatingCString: $0) }
    let storeSpec = configured.flatMap { $0.isEmpty ? nil : $0 } ?? "consent-ledger"
    let port = Int(integer("--port", default: 8080, in: 1...65535))
    var jwks: String?
    if let source = option("--jwks") {
        jwks = await readJWKS(source)
    }
    // A request waits this long for the ledger's lock while another process (`verify`, a
    // migration, an `apply`) holds it, then fails with 503: longer than the command line's
    // default, since a service outlives such runs.
    let lockTimeout = Duration.seconds(integer("--lock-timeout", default: 60, in: 0...86_400))
    let store: any LedgerStore
    do {
        if PostgresLedgerAddress.isURL(storeSpec) {
            // The database keeps no signing key: the service loads it from its key file.
            guard let keyFile = option("--key-file") else { fail("a PostgreSQL store needs --key-file FILE: the ledger's signing key file (the database keeps none)") }
            let postgres = try PostgresLedgerStore(url: storeSpec, keyStore: FileKeyStore(path: keyFile), lockTimeout: lockTimeout)
            if postgres.address.isUnverified {
                var warning = "consent-service: warning: sslmode=require-unverified: the server's certificate is not checked\n"
                warning.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
            }
            store = postgres
        } else {
            store = FileLedgerStore(directory: storeSpec, lockTimeout: lockTimeout)
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
    // How far the ledger's time may be ahead of this server's clock before writes answer 503
    // (kind clock-ahead) instead of carrying a wrong time forward.
    consents.ledger.maximumClockSkew = .seconds(integer("--clock-skew", default: 300, in: 0...31_536_000))
    print("consent-service: ledger at \(store.names.location), listening on 127.0.0.1:\(port)")
    try consents.ledger.loadAll()
    var logger = Logger(label: "consent-service")
    logger.logLevel = .info
    try await makeApplication(consents: consents, tokens: await accessTokens(jwks: jwks), port: port, logger: logger).runService()
default:
    fail("usage: consent-service serve [--store DIR|postgres://USER@HOST:PORT/DB?schema=NAME] [--port N] [--token-key FILE] [--key-file FILE] [--passphrase-file FILE] [--insecure-plaintext-key] [--issuer ISS] [--audience AUD] [--max-token-lifetime S] [--jwks FILE|URL] [--lock-timeout S] [--clock-skew S] | token (--subject ID | --auditor NAME) [--ttl S] [--token-key FILE] [--issuer ISS] [--audience AUD] [--max-token-lifetime S]")
}
