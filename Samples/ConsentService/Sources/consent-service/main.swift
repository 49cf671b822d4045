// consent-service: the ledger behind a JSON API.
//
//   consent-service serve [--ledger DIR] [--port 8080] [--token-key FILE]
//   consent-service token (--subject ID | --auditor NAME) [--ttl SECONDS] [--token-key FILE]
//
// The ledger folder is created with the seed catalogue if it does not exist. The token key
// (an Ed25519 seed, hex) is created with mode 0600 if missing.
import ConsentLedger
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
    if let bytes = try? LocalFile.read(keyPath), let seed = Hex.decode(String(decoding: bytes.filter { $0 != 0x0A }, as: UTF8.self)), let signer = SodiumSigner(seed: seed) {
        return signer
    }
    let signer = SodiumSigner.generate()
    do { try LocalFile.write(Array((Hex.encode(signer.seed) + "\n").utf8), to: keyPath) } catch { fail("cannot write \(keyPath): \(error)") }
    return signer
}

switch args.first {
case "token":
    let ttl = Int64(option("--ttl") ?? "3600") ?? 3600
    let principal: Principal
    if let s = option("--subject") { principal = .subject(s) } else if let a = option("--auditor") { principal = .auditor(a) } else { fail("token needs --subject ID or --auditor NAME") }
    print(AccessTokens(signer: tokenKey()).issue(for: principal, expires: Int64(time(nil)) + ttl))
case "serve":
    let folder = option("--ledger") ?? "consent-ledger"
    let port = Int(option("--port") ?? "8080") ?? 8080
    let consents: ConsentManager
    do {
        consents = try await ConsentManager.open(directory: folder)
    } catch .notFound {
        do { consents = try await ConsentManager.create(directory: folder, name: "consent-service.local/ledger") } catch { fail("\(error)") }
    } catch {
        fail("\(error)")
    }
    try consents.ledger.loadAll()
    try await makeApplication(consents: consents, tokens: AccessTokens(signer: tokenKey()), port: port).runService()
default:
    fail("usage: consent-service serve [--ledger DIR] [--port N] [--token-key FILE] | token (--subject ID | --auditor NAME) [--ttl S] [--token-key FILE]")
}
