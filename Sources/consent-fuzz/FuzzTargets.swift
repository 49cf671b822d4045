import ConsentLedger
#if canImport(Glibc)
import Glibc
#endif

/// The readers of untrusted bytes, each a fuzz target: an input must end in a result or a
/// `ConsentError` (or the reader's own error type), never a crash, a hang or unbounded memory.
/// `make fuzz` runs each under libFuzzer with AddressSanitizer; `make test` runs a bounded number
/// of inputs of each. The seed corpora are under `Tests/Fuzz/<target>/`.
enum FuzzTarget: String, CaseIterable {
    /// A line of `ledger.jsonl`: an event, or a signed head line.
    case eventLine = "event-line"
    /// A catalogue file (`init --catalog`, `catalog publish`).
    case catalog
    /// An export bundle and a consistency proof, read and verified with the vectors' key.
    case bundle
    /// A state proof, read and verified with the vectors' key.
    case stateProof = "state-proof"
    /// Signed notes, checkpoints, signed heads and verifier keys.
    case note
    /// A file of commands for `consentctl apply`.
    case apply
    /// A derived file of a ledger folder (`lines.idx`, `tree.hashes`, `subjects.map`,
    /// `subjects.jsonl`, `checkpoints.jsonl`, chosen by the first byte), under a copy of the
    /// vectors' tiny ledger that is then opened, read and verified.
    case derived

    /// The verifier key the vectors are signed with (`Spec/vectors`).
    static let vectorsKey = try! NoteVerifierKey(text: "consentledger.example/vectors+9d8e80ef+AQOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4")

    func run(_ bytes: [UInt8]) {
        switch self {
        case .eventLine:
            _ = try? EventCodec.decode(line: bytes)
            if bytes.withUnsafeBufferPointer(SignedHead.isLogLine) { _ = try? SignedHead(logLine: bytes) }
        case .catalog:
            _ = try? CatalogCodec.decode(bytes)
        case .bundle:
            _ = try? ExportVerifier.verify(bytes, pinnedKey: Self.vectorsKey)
            if let proof = try? ConsistencyProof(bytes: bytes) { _ = try? ExportVerifier.verifyConsistency(proof, pinnedKey: Self.vectorsKey) }
        case .stateProof:
            _ = try? StateProofVerifier.verify(bytes, pinnedKey: Self.vectorsKey)
        case .note:
            let text = String(decoding: bytes, as: UTF8.self)
            _ = try? SignedNote.split(text)
            _ = try? SignedNote.open(text, key: Self.vectorsKey)
            _ = try? Checkpoint(text: text)
            _ = try? SignedHead(note: text)
            _ = try? NoteVerifierKey(text: text)
            _ = try? CosignerKey(text: text)
        case .apply:
            _ = try? CommandFile.parse(bytes, catalog: SeedCatalog.catalog, file: "fuzz")
        case .derived:
            DerivedFiles.shared.run(bytes)
        }
    }
}

/// The folder `DerivedFiles` made, for the process's exit to remove.
nonisolated(unsafe) var fuzzedFolder: String?

/// A copy of the vectors' tiny ledger whose derived files take the fuzz input in turn.
/// libFuzzer runs one input at a time, on one thread.
final class DerivedFiles: @unchecked Sendable {
    static let shared = DerivedFiles()
    static let names = ["lines.idx", "tree.hashes", "subjects.map", "subjects.jsonl", "checkpoints.jsonl"]

    let folder: String
    let originals: [String: [UInt8]]

    init() {
        let source = getenv("CONSENT_FUZZ_LEDGER").map { String(cString: $0) } ?? "Spec/vectors/tiny-ledger"
        // mkdtemp's template: six capitals it replaces.
        var template = Array(("/tmp/consent-fuzz-" + String(repeating: "X", count: 6)).utf8CString)
        folder = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        guard system("cp -a '\(source)/.' '\(folder)/' && chmod 600 '\(folder)/secret.key'") == 0 else {
            fatalError("cannot copy the ledger \(source): set CONSENT_FUZZ_LEDGER to Spec/vectors/tiny-ledger")
        }
        // One write makes the derived files that the vectors' folder leaves out, and one
        // checkpoint is recorded: with a fixed clock (after the vector's last event: a write
        // refuses a ledger whose time is ahead of its clock) and salt, the same bytes every time, so
        // that the seed corpus (`--seed-derived`) holds files of this very ledger.
        do {
            let ledger = try Ledger.open(store: FileLedgerStore(directory: folder), clock: { Timestamp(canonical: "2026-01-15T12:00:00.000Z")! }, random: { [UInt8](repeating: 0x5A, count: $0) })
            try ledger.execute(LedgerCommand(subjectID: "fuzz", request: .give(feature: "timeline", consents: ["required"])))
            _ = try ledger.signedCheckpoint()
        } catch {
            fatalError("cannot write the fuzzed ledger \(folder): \(error)")
        }
        // Removed when the process ends (libFuzzer ends it with exit()).
        fuzzedFolder = folder
        atexit { if let folder = fuzzedFolder { _ = system("rm -rf '\(folder)'") } }
        var originals: [String: [UInt8]] = [:]
        for name in Self.names { originals[name] = (try? LocalFile.read(folder + "/" + name)) }
        self.originals = originals
    }

    /// Writes the seed corpus of the `derived` target: each file, after its selector byte.
    func writeSeeds(to directory: String) {
        for (i, name) in Self.names.enumerated() {
            write([UInt8(i)] + (originals[name] ?? []), to: directory + "/\(i)-\(name)")
        }
    }

    func run(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let name = Self.names[Int(first) % Self.names.count]
        let path = folder + "/" + name
        write(Array(bytes.dropFirst()), to: path)
        defer {
            if let original = originals[name] { write(original, to: path) } else { unlink(path) }
        }
        guard let ledger = try? Ledger.open(store: FileLedgerStore(directory: folder)) else { return }
        _ = try? ledger.report(for: "alice")
        _ = try? ledger.proveState(for: "bob")
        _ = try? ledger.inclusionProof(seq: 1, size: 2)
        _ = try? ledger.issuedCheckpoints()
        _ = try? ledger.verify()
    }

    func write(_ bytes: [UInt8], to path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return }
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}
