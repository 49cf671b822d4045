// Embedding ConsentLedger in a backend: the app's consent logic (rule R9) in about 20 lines.
// Run: swift run embedding-sample [DIR]
import ConsentLedger
import Glibc

let folder = CommandLine.arguments.dropFirst().first ?? "/tmp/consent-embedding-\(systemClock().millisecondsSinceEpoch)"
// The signing key is sealed under a passphrase (Argon2id); a backend reads it from its secret
// store. The sample takes $CONSENTS_PASSPHRASE, and a demo phrase without it.
let phrase = getenv("CONSENTS_PASSPHRASE").map { String(cString: $0) } ?? "a passphrase for the demo"
let passphrase = SecretBytes(copying: Array(phrase.utf8))
let consents = try await ConsentManager.create(directory: folder, name: "clinic.example/consents", keyProtection: .passphrase(passphrase))

// The patient activates Timeline with its required consent and optional consent A (R2).
var features = try await consents.activate(["required", "optional-a"], of: "timeline", for: "patient-42")
print("active:", features.filter(\.isActive).map(\.feature.key))

// Withdrawing the required consent takes optional consent A with it (R4).
features = try await consents.revoke("required", of: "timeline", for: "patient-42")
print("active after revoking:", features.filter(\.isActive).map(\.feature.key))

// The history keeps both, the cascade linked to its cause.
for entry in try await consents.history(of: "patient-42") {
    print(entry.seq, entry.kind, entry.consent, entry.cause.map { "caused by \($0)" } ?? "")
}

// A signed checkpoint and an export an auditor can verify offline with the pinned key.
let (checkpoint, _) = try await consents.checkpoint()
let bundle = try await consents.export(subject: "patient-42")
let report = try ExportVerifier.verify(bundle.bytes, pinnedKey: try consents.verifierKey())
print("checkpoint size \(checkpoint.size); export of \(report.events) events verifies")
