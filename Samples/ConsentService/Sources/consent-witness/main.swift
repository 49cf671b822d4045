// consent-witness: a transparency-log witness (C2SP tlog-witness, tlog-cosignature).
//
//   consent-witness serve --key WITNESS_KEY --name NAME --log VERIFIER_KEY [--log …]
//                         --state DIR [--port 8090] [--host 127.0.0.1] [--passphrase-file FILE]
//
// It cosigns a ledger's checkpoint (POST /add-checkpoint) only when it is signed by a --log
// key and consistent with the latest checkpoint of that ledger it cosigned before, which it
// keeps in DIR, one file per ledger, replaced atomically. WITNESS_KEY is a key file as
// `consentctl witness keygen` writes it; an encrypted one is unlocked at start with the
// passphrase from --passphrase-file or $CONSENT_WITNESS_PASSPHRASE. --log takes a ledger's
// verifier key (`consentctl key show`) or a file holding it.
import ConsentLedger
import ConsentWitnessCore
import Hummingbird
import LogWitness
import Logging

#if canImport(Glibc)
import Glibc
#endif

let usage = "usage: consent-witness serve --key WITNESS_KEY --name NAME --log VERIFIER_KEY [--log …] --state DIR [--port N] [--host ADDRESS] [--passphrase-file FILE]"
let commandLine = Array(CommandLine.arguments.dropFirst())
func fail(_ message: String, code: Int32 = 64) -> Never {
    var m = "consent-witness: " + message + "\n"
    m.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    exit(code)
}
if commandLine.first == "--help" || commandLine.first == "-h" || commandLine.isEmpty {
    print(usage)
    exit(commandLine.isEmpty ? 64 : 0)
}
guard commandLine.first == "serve" else { fail(usage) }
let arguments = Array(commandLine.dropFirst())

/// The options: each at most once, except --log.
func parse(_ arguments: [String]) -> (options: [String: String], logs: [String]) {
    let single: Set<String> = ["--key", "--name", "--state", "--port", "--host", "--passphrase-file"]
    var options: [String: String] = [:]
    var logs: [String] = []
    var i = 0
    while i < arguments.count {
        let name = arguments[i]
        guard name == "--log" || single.contains(name) else { fail("unknown option '\(name)'\n\(usage)") }
        guard i + 1 < arguments.count else { fail("\(name) needs a value") }
        if name == "--log" {
            logs.append(arguments[i + 1])
        } else {
            guard options[name] == nil else { fail("\(name) is given twice") }
            options[name] = arguments[i + 1]
        }
        i += 2
    }
    return (options, logs)
}
let (options, logs) = parse(arguments)
func required(_ name: String) -> String {
    guard let value = options[name] else { fail("\(name) is required\n\(usage)") }
    return value
}
let port: Int = {
    guard let text = options["--port"] else { return 8090 }
    guard let port = Int(text), (1...65535).contains(port) else { fail("--port must be a number from 1 to 65535") }
    return port
}()
guard !logs.isEmpty else { fail("give at least one --log VERIFIER_KEY: the ledgers this witness witnesses") }

let logKeys: [NoteVerifierKey] = logs.map { text in
    let value = text.contains("+") ? text : ((try? String(decoding: LocalFile.read(text, limit: 4096), as: UTF8.self)) ?? text)
    var trimmed = Substring(value)
    while let last = trimmed.last, last == " " || last == "\n" || last == "\r" { trimmed = trimmed.dropLast() }
    do { return try NoteVerifierKey(text: String(trimmed)) } catch { fail("--log \(text): not a ledger verifier key NAME+HASH+BASE64: \(error)") }
}

let keys = FileKeyStore(path: required("--key"))
let signer: SodiumSigner
do {
    let passphraseFile = options["--passphrase-file"]
    signer = try keys.unlockSigner(passphrase: {
        if let file = passphraseFile {
            var bytes = try LocalFile.read(file, limit: 4096)
            defer { zeroize(&bytes) }
            if bytes.last == 0x0A { bytes.removeLast() }
            if bytes.last == 0x0D { bytes.removeLast() }
            return SecretBytes(copying: bytes)
        }
        guard let value = getenv("CONSENT_WITNESS_PASSPHRASE") else {
            throw ConsentError.keyLocked("the witness key \(keys.keyLocation) is encrypted: give --passphrase-file FILE or set $CONSENT_WITNESS_PASSPHRASE")
        }
        return SecretBytes(copying: Array(String(cString: value).utf8))
    })
} catch {
    fail("cannot use the witness key: \(error)", code: 77)
}
let witnessKey: CosignerKey
do { witnessKey = try CosignerKey(name: required("--name"), publicKey: signer.publicKey) } catch { fail("--name: \(error)") }

var logger = Logger(label: "consent-witness")
logger.logLevel = .info
let witness: Witness
do {
    witness = try Witness(key: witnessKey, signer: signer, logs: logKeys, state: try WitnessStateStore(directory: required("--state")),
                          clock: { UInt64(max(0, time(nil))) })
} catch {
    fail("\(error)")
}
print("consent-witness \(witnessKey.name) on \(options["--host"] ?? "127.0.0.1"):\(port), witnessing \(logKeys.map(\.name).joined(separator: ", "))")
print("witness key: \(witnessKey.text)")
try await makeWitnessApplication(witness: witness, host: options["--host"] ?? "127.0.0.1", port: port, logger: logger).runService()
