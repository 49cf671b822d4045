import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports
#if PostgreSQL
import ConsentLedgerPostgres
#endif

#if canImport(Glibc)
import Glibc
#endif

// MARK: - checkpoint, key show

struct CheckpointCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint",
        abstract: "Print the ledger's current signed checkpoint (C2SP tlog-checkpoint as a signed note).",
        discussion: """
            The checkpoint names the ledger (origin), the number of events (tree size) and the root \
            hash of the RFC 6962 Merkle tree over the log's lines, and has one extension line, \
            'chain HASH', the hash of the newest event. It is the ledger's signed head, signed when \
            the newest events were written, so printing it needs no key (only a log whose newest \
            events no head covers yet has one signed now). Keep it: with \
            'consentctl prove-consistency --from FILE' the ledger proves later that it only grew.

            With --witness-url, the checkpoint goes to each witness (C2SP tlog-witness) with a \
            consistency proof from the size that witness last cosigned; the cosignatures that \
            verify with the witnesses' keys are added to the checkpoint and recorded with it, so \
            exports and proofs carry them from then on. A witness that does not answer exits 69 \
            after the others are done (what they cosigned is kept); one whose answer shows a \
            different history (a fork or a split view) exits 2.

            Example:
              consentctl checkpoint --witness-url https://witness.example.org/w1 --witness w1.vkey
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions
    @OptionGroup(title: "Witnesses") var witnesses: WitnessSubmissionOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let ledger = try root.openLedger()
            guard !witnesses.urls.isEmpty else {
                let (checkpoint, note) = try ledger.signedCheckpoint()
                return printCheckpoint(checkpoint, note: note)
            }
            let result = try ledger.witnessCheckpoint(by: try witnesses.endpoints(), transport: CurlWitnessTransport(timeoutMilliseconds: witnesses.timeout * 1000))
            for refusal in result.refusals {
                printError("witness \(refusal.witness) did not cosign: \(refusal.problem)")
            }
            if let evidence = result.refusals.first(where: \.isEvidence) {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "witness \(evidence.witness): \(evidence.problem)"))
            }
            if let refusal = result.refusals.first {
                throw ConsentError.unavailable("\(result.refusals.count) of \(witnesses.urls.count) witnesses did not cosign (first: \(refusal.witness): \(refusal.problem)); the cosignatures of the others are recorded")
            }
            printCheckpoint(result.checkpoint, note: result.note, cosignedBy: result.cosignedBy)
        }
    }

    func printCheckpoint(_ checkpoint: Checkpoint, note: String, cosignedBy: [String]? = nil) {
        if output.isJSON {
            var members = checkpointJSON(checkpoint).objectValue!
            members["note"] = .string(note)
            if let cosignedBy { members["cosignedBy"] = .array(cosignedBy.map { .string($0) }) }
            printJSON(.object(members))
        } else {
            print(note, terminator: "")
        }
    }
}

struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "The ledger's keys.",
        subcommands: [KeyShow.self, KeyRotate.self, KeyRevoke.self, KeyPassphrase.self, KeyMoveOut.self],
        defaultSubcommand: KeyShow.self
    )
}

struct KeyShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print the verifier key that auditors pin.",
        discussion: """
            The verifier key is the one spelling of a ledger's public key everywhere: \
            NAME+HASH+BASE64, the C2SP signed-note form (the ledger's name, the key's 8-hex-digit \
            hash, and base64 of the type byte 0x01 and the Ed25519 public key). Give it to \
            auditors; 'verify-export', 'verify-state' and 'verify-consistency' take it with --key, \
            as text or as a file holding it, and trust nothing else. No secret key is read.

            It prints the key in force: the one that signs checkpoints now. After a 'key rotate' \
            that is the newest key; --all lists every key the ledger has used, oldest first, \
            with the seq of the rotation that introduced it. Auditors may pin the first key or \
            the current one: both verify the whole history.

            Example:
              consentctl key show > ledger.vkey
              consentctl verify-export alice.json --key ledger.vkey
            """
    )

    @Flag(help: "List every key the ledger has used, oldest first, with the rotation that introduced it.")
    var all = false

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let ledger = try root.openLedger()
            let history = try ledger.keyHistory()
            let periods = try history.periods.map { period in (period, try ledger.noteKey(period.key)) }
            let (current, currentKey) = periods[periods.count - 1]
            if output.isJSON {
                var members: [String: JSONValue] = ["verifierKey": .string(currentKey.text), "name": .string(currentKey.name), "keyID": .string(current.keyID)]
                if all {
                    members["keys"] = .array(periods.map { period, key in
                        var entry: [String: JSONValue] = ["verifierKey": .string(key.text), "keyID": .string(period.keyID), "from": .int(Int64(period.from))]
                        if let rotation = period.rotation { entry["rotation"] = .int(Int64(rotation)) }
                        return .object(entry)
                    })
                }
                printJSON(.object(members))
            } else if all {
                for (period, key) in periods {
                    let introduced = period.rotation.map { "rotation at seq \($0)" } ?? "genesis"
                    print("\(key.text)  (\(introduced); signs seq \(period.from) on\(period.keyID == current.keyID ? ", in force" : ""))")
                }
            } else {
                print(currentKey.text)
            }
        }
    }
}

struct KeyRotate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate",
        abstract: "Hand the ledger over to a new signing key.",
        discussion: """
            Makes a new Ed25519 key and appends a key.rotated event that names it. The event is \
            signed by the key in force, and carries the new key's own signature over the ledger, \
            the event's place in the chain and both keys: whoever holds only the old key cannot \
            name a successor. From the next event on, events, heads, checkpoints and subject \
            records are signed by the new key; everything signed before stays valid.

            The new key file takes the old one's place (--key-file, or the ledger folder's \
            secret.key), sealed under the same passphrase with the same hardness, or left \
            unencrypted if the old one was; the old key's bytes are overwritten. The new key is \
            stored before the event is committed, so a crash loses nothing: the next write \
            finishes the swap. To change the passphrase too, run 'key passphrase' afterwards.

            Auditors who pinned the first key or the current one verify the whole history: \
            'verify' follows the rotations in the log, and bundles and state proofs carry them. \
            Give auditors the new key ('consentctl key show'). A witness that cosigns this \
            ledger's checkpoints needs the new key too (consent-witness serve --log).

            Example:
              consentctl key rotate --actor security-officer
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "Who acts: the security officer's or system's id.")
    var actor: String = "consentctl"

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let store = try root.ledgerStore()
            guard let keys = root.keyStore(for: store) else {
                throw ConsentError.notFound(.signingKey, "\(store.names.location) keeps no signing key: give --key-file FILE (or set $CONSENTCTL_KEY_FILE)")
            }
            // The passphrase is read once: it unlocks the old key and seals the new one.
            let protection: KeyProtection
            switch try SigningKeyFile.read(try keys.loadKeyFile(), location: keys.keyLocation) {
            case .plaintext:
                protection = .insecurePlaintext
            case .encrypted(let sealed):
                let secret = try root.passphrase.read(prompt: "Passphrase for the signing key \(keys.keyLocation): ", missing: "the signing key \(keys.keyLocation) is encrypted and no passphrase was given")
                protection = .passphrase(secret, hardness: sealed.hardness)
            }
            let ledger = root.configured(try Ledger.open(store: store, keys: keys, passphrase: protection.passphraseSource))
            let receipt = try ledger.rotateKey(protection: protection, actor: actor)
            if case .insecurePlaintext = protection {
                printError("warning: the new secret key is stored unencrypted in \(keys.keyLocation), as the old one was: use this ledger for tests and demos only")
            }
            if let warning = ledger.takeWarning() { printError("warning: \(warning)") }
            if output.isJSON {
                printJSON(.object([
                    "ok": .bool(true), "seq": .int(Int64(receipt.seq)), "retired": .string(receipt.retired.text),
                    "verifierKey": .string(receipt.current.text), "key": .string(keys.keyLocation),
                ]))
            } else {
                print("Rotated the signing key: key.rotated event at seq \(receipt.seq).")
                print("Retired:   \(receipt.retired.text)")
                print("In force:  \(receipt.current.text)")
                print("Give auditors the new verifier key (consentctl key show); either key verifies the whole history.")
            }
        }
    }
}

struct KeyRevoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Mark a retired key compromised from an event on, re-attesting the honest events it signed.",
        discussion: """
            For a key that leaked: first 'key rotate' (so that a key the thief does not hold is \
            in force), then 'key revoke --compromised-since SEQ', SEQ the first event the old key \
            may have signed for someone else. It appends a key.revoked event, signed by the key \
            in force, that names the old key and lists the hashes of the events that key signed \
            from SEQ up to its rotation, as the log holds them now: the honest ones. From then \
            on 'verify' refuses any event signed by the revoked key in that window that is not \
            listed, and bundles carry the revocation like a rotation.

            Subject records carry no seq, so the revoked key's signature vouches for no record \
            any more: before the event, every record it signed is signed again by the key in \
            force when its pseudonym has events, and removed otherwise (a salt a failed command \
            left, or a record made up with the leaked key).

            A key is revoked once. The window is every event from SEQ to the rotation, so pick \
            SEQ no later than the first moment the key may have leaked; each event in it costs \
            67 bytes in the revocation.

            Example:
              consentctl key rotate --actor security-officer
              consentctl key revoke --compromised-since 1200 --actor security-officer
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: ArgumentHelp("The seq of the first event the revoked key may have signed for someone else; the key that signed it is the one revoked.", valueName: "SEQ"))
    var compromisedSince: UInt64

    @Option(help: "Who acts: the security officer's or system's id.")
    var actor: String = "consentctl"

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let receipt = try root.openLedger().revokeKey(compromisedSince: compromisedSince, actor: actor)
            if output.isJSON {
                printJSON(.object([
                    "ok": .bool(true), "seq": .int(Int64(receipt.seq)), "revoked": .string(receipt.revoked.text),
                    "compromisedSince": .int(Int64(receipt.compromisedSince)), "attested": .int(Int64(receipt.attested)),
                    "resignedRecords": .int(Int64(receipt.resignedRecords)), "removedRecords": .int(Int64(receipt.removedRecords)),
                ]))
            } else {
                print("Revoked key \(receipt.revoked.text): key.revoked event at seq \(receipt.seq).")
                print("Compromised from seq \(receipt.compromisedSince); the \(receipt.attested) event\(receipt.attested == 1 ? "" : "s") it signed from there to its rotation are re-attested by the key in force.")
                print("Subject records it had signed: \(receipt.resignedRecords) signed again by the key in force (their pseudonyms have events), \(receipt.removedRecords) removed (nothing vouches for them).")
            }
        }
    }
}

struct KeyPassphrase: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "passphrase",
        abstract: "Seal the signing key under a new passphrase, or encrypt a plaintext key.",
        discussion: """
            Unlocks the key with its passphrase (none for a plaintext key; from --passphrase-file, \
            --passphrase-fd, $CONSENTCTL_PASSPHRASE or the terminal), then writes the same key \
            sealed under the new passphrase, in place of the old file and atomically. The new \
            passphrase comes from --new-passphrase-file, $CONSENTCTL_NEW_PASSPHRASE or, asked \
            twice, the terminal. The key, and so every signature and the verifier key, stay the \
            same. Older copies of the key file still open with the old passphrase: delete them.

            Examples:
              consentctl key passphrase                   # asks for both on the terminal
              consentctl --passphrase-file old.txt key passphrase --new-passphrase-file new.txt
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: ArgumentHelp("Read the new passphrase from FILE (its one trailing line end is dropped).", valueName: "FILE"))
    var newPassphraseFile: String?

    @Option(help: "How hard the new passphrase is made to guess: interactive (the default) or moderate.")
    var kdf: KeyHardness = .interactive

    @OptionGroup var output: OutputOptions

    static let newPassphraseVariable = "CONSENTCTL_NEW_PASSPHRASE"

    func run() throws {
        try reporting(json: output.isJSON) {
            let ledger = try root.openLedger()
            guard let keys = ledger.keys, let wasEncrypted = try keys.isEncrypted() else {
                throw ConsentError.notFound(.signingKey, "no signing key at \(ledger.keys?.keyLocation ?? ledger.store.names.location)")
            }
            // Unlock first, so that a wrong current passphrase is known before a new one is asked.
            try ledger.unlock()
            let newPassphrase: SecretBytes
            if let newPassphraseFile {
                newPassphrase = try PassphraseOptions.readAll(path: newPassphraseFile)
            } else if let value = environment(Self.newPassphraseVariable) {
                newPassphrase = SecretBytes(copying: Array(value.utf8))
            } else {
                newPassphrase = try PassphraseOptions.prompt("New passphrase: ", missing: "no new passphrase: give --new-passphrase-file FILE, set $\(Self.newPassphraseVariable), or run in a terminal to be asked")
                let again = try PassphraseOptions.prompt("Again, to confirm: ", missing: "no terminal to confirm the passphrase")
                guard again.constantTimeEquals(newPassphrase) else { throw ConsentError.invalidRequest("the two passphrases differ; the key is unchanged") }
            }
            try ledger.reprotectKey(.passphrase(newPassphrase, hardness: kdf.hardness))
            if output.isJSON {
                printJSON(.object(["ok": .bool(true), "key": .string(keys.keyLocation), "wasEncrypted": .bool(wasEncrypted), "opslimit": .int(Int64(kdf.hardness.opslimit)), "memlimit": .int(Int64(kdf.hardness.memlimit))]))
            } else {
                print("The signing key \(keys.keyLocation) is sealed under the new passphrase (\(kdf.hardness)).")
            }
        }
    }
}

struct KeyMoveOut: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move-out",
        abstract: "Move a PostgreSQL ledger's secret key out of the database into a key file.",
        discussion: """
            Ledgers made before keys left the database keep the Ed25519 seed in the table \
            SCHEMA.signing_key, where every writer reads it over the network. This writes it to \
            the key file that --key-file names (a new file, mode 0600), sealed under a new \
            passphrase (--passphrase-file, --passphrase-fd, $CONSENTCTL_PASSPHRASE or the \
            terminal, asked twice), checks that the file opens to the ledger's public key, and \
            only then drops the table. From then on writers give --key-file FILE (or set \
            $CONSENTCTL_KEY_FILE).

            Example:
              consentctl --store postgres://… --key-file /etc/consentledger/clinic.key key move-out
            """
    )

    @ParentCommand var root: ConsentCtl

    @OptionGroup(title: "The new key file") var newKey: NewKeyOptions

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            #if PostgreSQL
            guard let store = try root.ledgerStore() as? PostgresLedgerStore else {
                throw ConsentError.invalidRequest("key move-out is for PostgreSQL ledgers: a folder's key is already a file of its own")
            }
            guard let keys = root.keyStore(for: store) else {
                throw ConsentError.invalidRequest("give --key-file FILE (or $CONSENTCTL_KEY_FILE): the new key file the secret key moves to")
            }
            let ledger = try Ledger.open(store: store)
            guard let seed = try store.retiredSeed() else {
                throw ConsentError.notFound(.signingKey, "\(store.address) keeps no secret key in table \(store.address.schema).signing_key: nothing to move")
            }
            guard let signer = SodiumSigner(seed: seed), signer.publicKey == ledger.publicKey else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "table \(store.address.schema).signing_key of \(store.address) does not hold the seed of the ledger's public key; it was left as it is"))
            }
            let protection = try newKey.protection(root.passphrase)
            try keys.save(signer, protection: protection)
            // The table goes only once the new file is known to open to the ledger's key.
            guard try keys.unlockSigner(passphrase: protection.passphraseSource).publicKey == ledger.publicKey else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "\(keys.keyLocation) does not open to the ledger's key; table \(store.address.schema).signing_key was left as it is"))
            }
            try store.dropRetiredKey()
            if output.isJSON {
                printJSON(.object(["ok": .bool(true), "key": .string(keys.keyLocation), "from": .string("\(store.address.schema).signing_key")]))
            } else {
                print("Moved the secret key from table \(store.address.schema).signing_key to \(keys.keyLocation) and dropped the table.")
                print("Writers now give --key-file \(keys.keyLocation) (or set CONSENTCTL_KEY_FILE).")
            }
            #else
            throw ConsentError.invalidRequest("this consentctl was built without PostgreSQL support; build it with 'swift build --traits PostgreSQL' (or 'make build-postgres')")
            #endif
        }
    }
}

// MARK: - export, verify-export

/// What `export --format` writes.
enum ExportFormat: String, ExpressibleByArgument, CaseIterable {
    case bundle, fhir, html
}

extension FHIRConsent.BundleType: ExpressibleByArgument {}
extension PatientPage.Language: ExpressibleByArgument {}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a subject's or the whole ledger's consents: verifiable, FHIR, or a page for the patient.",
        discussion: """
            --format bundle (default) writes the self-contained, offline-verifiable export. With \
            --subject S: that subject's events, each with an inclusion proof against one signed \
            checkpoint, the genesis event with its proof, the catalogue, the verifier key and the \
            subject's state; other subjects appear only as hashes on the audit paths. With --all: \
            every event with the checkpoint.

            --format fhir writes a FHIR R5 Bundle: per subject a Patient and one Consent per \
            feature (Spec/fhir-mapping.md), for --subject S or --all. --fhir-bundle transaction \
            makes it a transaction a FHIR server loads (conditional create and update).

            --format html writes one self-contained page for the patient (--subject S): what they \
            consented to, when, under which notice version, and how to check it, in --lang en or \
            de (default: the catalogue's first language).

            Examples:
              consentctl export --subject alice --out alice.json
              consentctl verify-export alice.json --key "$(consentctl key show)"
              consentctl export --all --format fhir --fhir-bundle transaction --out all.fhir.json
              consentctl export --subject alice --format html --lang de --out alice.html
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "Export this subject.")
    var subject: String?

    @Flag(help: "Export every subject (bundle and fhir).")
    var all = false

    @Option(help: ArgumentHelp("Where to write it; - for standard output.", valueName: "FILE"))
    var out: String

    @Option(help: ArgumentHelp("bundle (the verifiable export), fhir (FHIR R5) or html (a page for the patient).", valueName: "FORMAT"))
    var format: ExportFormat = .bundle

    @Option(help: ArgumentHelp("With --format fhir: a collection to read, or a transaction to load into a FHIR server.", valueName: "TYPE"))
    var fhirBundle: FHIRConsent.BundleType = .collection

    @Option(help: ArgumentHelp("With --format html: the page's language (default: the catalogue's first language).", valueName: "LANG"))
    var lang: PatientPage.Language?

    @Flag(help: "Print what was written as JSON (ok, out, format, scope, counts).")
    var json = false

    @OptionGroup var zone: ZoneOption

    func validate() throws {
        if (subject == nil) == !all { throw ValidationError("give exactly one of --subject S and --all") }
        if format == .html && subject == nil { throw ValidationError("--format html is a page for one patient: give --subject S") }
        if format != .fhir && CommandLine.arguments.contains(where: { $0 == "--fhir-bundle" || $0.hasPrefix("--fhir-bundle=") }) {
            throw ValidationError("--fhir-bundle goes with --format fhir")
        }
        if format != .html && lang != nil { throw ValidationError("--lang goes with --format html") }
    }

    func run() throws {
        try reporting(json: json) {
            try checkOutputPath(out, ledger: root.ledgerDirectory)
            let ledger = try root.openLedger()
            if let subject { try requireEvents(ledger, subject, for: "an export") }
            switch format {
            case .fhir:
                let bundle = try subject.map { try ledger.fhirBundle(for: $0, type: fhirBundle) } ?? ledger.fhirBundleOfAllSubjects(type: fhirBundle)
                let to = try writeOutput(bundle.canonicalBytes + [0x0A], to: out)
                let count = bundle.value["entry"]?.arrayValue?.count ?? 0
                let whom = subject.map { "for \($0)" } ?? "for every subject"
                reportWritten("Wrote a FHIR R5 \(fhirBundle.rawValue) Bundle of \(count) resources (Patient and Consents) \(whom) to \(to)", to: to, json: json,
                              details: ["format": .string("fhir"), "scope": .string(subject == nil ? "all" : "subject"), "bundleType": .string(fhirBundle.rawValue), "resources": .int(Int64(count))])
            case .html:
                let page = try ledger.patientPage(for: subject!, language: lang, zone: displayZone)
                let to = try writeOutput(Array(page.utf8), to: out)
                let language = (lang ?? PatientPage.defaultLanguage(for: ledger.catalog)).rawValue
                reportWritten("Wrote \(subject!)'s consents as a page in '\(language)' to \(to)", to: to, json: json,
                              details: ["format": .string("html"), "scope": .string("subject"), "lang": .string(language)])
            case .bundle:
                let bundle = try subject.map { try ledger.exportSubject($0) } ?? ledger.exportAll()
                let to = try writeOutput(bundle.bytes, to: out)
                let scope = bundle.scope == .all ? "the whole ledger, \(bundle.events.count + 1) events" : "subject \(subject!), \(bundle.events.count) events and the genesis event"
                reportWritten("Wrote \(scope), with proofs against the ledger's signed checkpoint, to \(to)", to: to, json: json,
                              details: ["format": .string("bundle"), "scope": .string(bundle.scope.rawValue), "events": .int(Int64(bundle.events.count))])
            }
        }
    }
}

/// The options of the offline checks: the key to trust, and the output form.
struct PinnedKey: ParsableArguments {
    @Option(help: ArgumentHelp("The verifier key to trust (name+hash+key, or a file holding it).", valueName: "KEY"))
    var key: String

    @Option(name: .customLong("witness"), help: ArgumentHelp(
        "A witness's key (name+id+key with type 0x04, as 'consentctl witness show' prints it, or a file holding it). Repeat it for each witness; with --quorum, the checkpoint must carry that many of their cosignatures.",
        valueName: "KEY"))
    var witnesses: [String] = []

    @Option(help: ArgumentHelp("How many of the --witness keys must have cosigned the checkpoint (default: all of them).", valueName: "K"))
    var quorum: Int?

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    func verifierKey() throws -> NoteVerifierKey { try readVerifierKey(key) }

    /// What the witness check established, for the human output.
    var witnessSummary: String? {
        guard !witnesses.isEmpty else { return nil }
        let k = quorum ?? witnesses.count
        return "The checkpoint carries valid cosignatures from at least \(k) of the \(witnesses.count) witness\(witnesses.count == 1 ? "" : "es") given."
    }

    /// The witnesses the checkpoint must be cosigned by, if any are given.
    func witnessPolicy() throws -> WitnessPolicy? {
        guard !witnesses.isEmpty else {
            if quorum != nil { throw ConsentError.invalidRequest("--quorum needs the witnesses' keys: give --witness KEY for each") }
            return nil
        }
        let keys = try witnesses.map { try readCosignerKey($0, option: "--witness") }
        do {
            return try WitnessPolicy(witnesses: keys, quorum: quorum ?? keys.count)
        } catch {
            throw ConsentError.invalidRequest("--quorum: \(error)")
        }
    }

    /// Reads `file` (at most `limit` bytes) and checks it against the pinned key (and the
    /// witness policy) with `verify`; a file that does not verify is an integrity failure (exit
    /// 2) that names the reason.
    /// Verifies `file` of `kind` with `verify`, given the file's bytes in place (``InputFile``:
    /// a regular file of at most `limit` bytes mapped, a pipe read into memory up to
    /// `streamLimit`). A file that fails is then looked at again: one of another kind is a
    /// usage error that names what it is (``EvidenceFile/check(_:path:)``), one of this kind an
    /// integrity failure.
    func check<Report>(_ file: String, _ kind: EvidenceFile, limit: Int, streamLimit: Int? = nil, _ verify: (UnsafeBufferPointer<UInt8>, InputFile, NoteVerifierKey, WitnessPolicy?) throws(ExportVerificationError) -> Report) throws -> Report {
        let pinned = try verifierKey()
        let policy = try witnessPolicy()
        let input = try InputFile(path: file, limit: limit, streamLimit: streamLimit ?? limit)
        return try input.withBytes { (bytes) throws -> Report in
            do throws(ExportVerificationError) {
                return try verify(bytes, input, pinned, policy)
            } catch {
                try kind.check(bytes, path: file)
                throw ConsentError.integrity(IntegrityFailure(line: nil, seq: error.seq, problem: error.problem))
            }
        }
    }
}

/// A checkpoint in JSON output: origin, size, base64 root.
func checkpointJSON(_ checkpoint: Checkpoint) -> JSONValue {
    .object(["origin": .string(checkpoint.origin), "size": .int(checkpoint.size), "root": .string(Base64.encode(checkpoint.root.bytes))])
}

/// A verifier key given as text (NAME+HASH+BASE64), or as a file that holds it. An argument with
/// a '+' is read as the key; any other as a file. The error says which was tried, and why it
/// failed.
func readVerifierKey(_ argument: String) throws -> NoteVerifierKey {
    try readKeyText(argument, option: "--key", form: "a verifier key NAME+HASH+BASE64, as 'consentctl key show' prints it") { text throws(NoteError) in
        try NoteVerifierKey(text: text)
    }
}

/// A witness's cosignature key, given as text (NAME+ID+BASE64 of type 0x04) or as a file.
func readCosignerKey(_ argument: String, option: String) throws -> CosignerKey {
    try readKeyText(argument, option: option, form: "a witness key NAME+ID+BASE64, as 'consentctl witness show' prints it") { text throws(NoteError) in
        try CosignerKey(text: text)
    }
}

private func readKeyText<Key>(_ argument: String, option: String, form: String, _ parseKey: (String) throws(NoteError) -> Key) throws -> Key {
    func parse(_ text: String, from source: String) throws -> Key {
        var text = text
        while let last = text.last, last == "\n" || last == "\r" || last == " " { text.removeLast() }
        if text.utf8.count == 64, text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) {
            throw ConsentError.invalidRequest("\(option): \(source) is a raw public key in hex; give \(form)")
        }
        do {
            return try parseKey(text)
        } catch {
            throw ConsentError.invalidRequest("\(option): \(source) is not \(form): \(error)")
        }
    }
    if argument.contains("+") { return try parse(argument, from: "the text given") }
    let bytes: [UInt8]
    do {
        bytes = try LocalFile.read(argument, limit: 4096)
    } catch {
        if argument.utf8.count == 64 { return try parse(argument, from: "the text given") }
        throw ConsentError.invalidRequest("\(option): '\(argument)' is neither \(form) (it has no '+') nor a file that can be read: \(error)")
    }
    return try parse(String(decoding: bytes, as: UTF8.self), from: "file '\(argument)'")
}

struct VerifyExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-export",
        abstract: "Check an export bundle offline against a pinned verifier key.",
        discussion: """
            Checks the checkpoint's signature with the pinned key (never the key inside the bundle \
            alone), every event's signature and inclusion proof, and that the bundled state equals \
            a replay of the bundled events. Any failure exits 2 and names the event and the reason. \
            No ledger is needed.
            """
    )

    @Argument(help: ArgumentHelp("The bundle.", valueName: "FILE"))
    var file: String

    /// A bundle file is mapped, not read into memory: 64 GiB is far beyond any ledger's
    /// bundle today (150,000 events make 200 MB) and bounds the mapping.
    static let fileLimit = 64 << 30
    /// A bundle piped in (`<(command)`) is read into memory: at most 1 GiB.
    static let streamLimit = 1 << 30

    @OptionGroup var options: PinnedKey

    func run() throws {
        try reporting(json: options.json) {
            // A whole-ledger bundle is read in place and verified a batch of events at a time,
            // in memory that does not grow with it: the limit is the mapping's, not memory's.
            let report = try options.check(file, .exportBundle, limit: VerifyExport.fileLimit, streamLimit: VerifyExport.streamLimit) { (bytes, input, pinned, witnesses) throws(ExportVerificationError) in
                try ExportVerifier.verify(bytes, pinnedKey: pinned, witnesses: witnesses, release: { input.release(below: $0) })
            }
            if options.json {
                var members: [String: JSONValue] = [
                    "ok": .bool(true), "scope": .string(report.scope.rawValue), "events": .int(Int64(report.events)),
                    "checkpoint": checkpointJSON(report.checkpoint),
                ]
                if let s = report.subjectID { members["subject"] = .string(s) }
                printJSON(.object(members))
            } else {
                print("OK: \(report.events) events of \(report.subjectID.map { "subject \($0)" } ?? "the whole ledger") verified against checkpoint \(report.checkpoint.origin) size \(report.checkpoint.size), root \(Base64.encode(report.checkpoint.root.bytes))")
                if let summary = options.witnessSummary { print(summary) }
            }
        }
    }
}

// MARK: - consistency

struct ProveConsistency: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prove-consistency",
        abstract: "Prove that the ledger only grew since an older checkpoint.",
        discussion: """
            Writes a consistency proof (RFC 6962) from the old checkpoint to the current one (the \
            ledger's signed head: no key is needed). Fails, exit 2, if the old checkpoint is not a \
            prefix of this ledger.

            Example:
              consentctl checkpoint > october.checkpoint
              ... a month later ...
              consentctl prove-consistency --from october.checkpoint --out proof.json
              consentctl verify-consistency proof.json --key "$(consentctl key show)"
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    @Option(help: ArgumentHelp("The older signed checkpoint.", valueName: "OLD_CHECKPOINT_FILE"))
    var from: String

    @Option(help: ArgumentHelp("Where to write the proof; - (the default) for standard output.", valueName: "FILE"))
    var out: String?

    func run() throws {
        try reporting(json: output.isJSON) {
            if let out { try checkOutputPath(out, ledger: root.ledgerDirectory) }
            let old = String(decoding: try LocalFile.read(from), as: UTF8.self)
            let proof = try root.openLedger().proveConsistency(from: old)
            let bytes = CanonicalJSON.serialize(proof.json) + [0x0A]
            if let out {
                let to = try writeOutput(bytes, to: out)
                reportWritten("Wrote a consistency proof of \(proof.proof.count) hashes to \(to)", to: to, json: output.isJSON, details: ["hashes": .int(Int64(proof.proof.count))])
            } else {
                Swift.print(String(decoding: bytes.dropLast(), as: UTF8.self))
            }
        }
    }
}

struct VerifyConsistency: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-consistency",
        abstract: "Check a consistency proof offline against a pinned verifier key."
    )

    @Argument(help: ArgumentHelp("The proof written by prove-consistency.", valueName: "FILE"))
    var file: String

    @OptionGroup var options: PinnedKey

    func run() throws {
        try reporting(json: options.json) {
            let (old, new) = try options.check(file, .consistencyProof, limit: 1 << 24) { (bytes, _, pinned, witnesses) throws(ExportVerificationError) in
                try ExportVerifier.verifyConsistency(try ConsistencyProof(bytes: Array(bytes)), pinnedKey: pinned, witnesses: witnesses)
            }
            if options.json {
                printJSON(.object(["ok": .bool(true), "oldSize": .int(old.size), "newSize": .int(new.size)]))
            } else {
                print("OK: the ledger \(new.origin) at size \(new.size) extends its checkpoint at size \(old.size)")
                if let summary = options.witnessSummary { print(summary) }
            }
        }
    }
}

// MARK: - state proofs

struct ProveState: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prove-state",
        abstract: "Write a proof of one subject's consent state that anyone can check offline.",
        discussion: """
            The proof holds the subject's events and the catalogue versions, each with its \
            inclusion proof against the ledger's signed head, and the subject-map proofs that \
            they are all of them. It needs no secret key. A processor that receives data because \
            a patient consented keeps it as evidence, and checks it with verify-state.

            Example:
              consentctl prove-state --subject alice --out alice-state.json
              consentctl prove-state --subject alice --at 2026-11-01 --out alice-nov1.json
              consentctl verify-state alice-state.json --key "$(consentctl key show)"
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    @Option(help: "The subject whose state to prove.")
    var subject: String

    @Option(help: ArgumentHelp("Prove the state as of this time (RFC 3339, or a date meaning the end of that day, UTC).", valueName: "TIME"))
    var at: String?

    @Option(help: ArgumentHelp("Where to write the proof; - for standard output.", valueName: "FILE"))
    var out: String

    func run() throws {
        try reporting(json: output.isJSON) {
            let asOf = try at.map { try parseAsOf($0, option: "--at") }
            try checkOutputPath(out, ledger: root.ledgerDirectory)
            let ledger = try root.openLedger()
            // Proved first and checked after: checking first would read and check the
            // subject's record twice (a scan of every record in a large folder).
            let proof: StateProof
            do {
                proof = try ledger.proveState(for: subject, at: asOf)
            } catch ConsentError.notFound(.subject, _) {
                throw noEvents(ledger, subject, for: "a state proof")
            }
            guard !proof.events.isEmpty else { throw noEvents(ledger, subject, for: "a state proof") }
            let to = try writeOutput(proof.bytes, to: out)
            // The ledger stream's events after genesis: publications, and key and clock events,
            // which are no catalogue version.
            let versions = 1 + proof.catalogEvents.filter { entry in
                if case .catalogPublished = (try? EventCodec.decode(line: Array(entry.line.utf8)))?.event.payload { return true }
                return false
            }.count
            reportWritten("Wrote the state of \(subject)\(asOf.map { " as of \($0.rfc3339)" } ?? "") (\(proof.events.count) event\(proof.events.count == 1 ? "" : "s"), \(versions) catalogue version\(versions == 1 ? "" : "s")) with proofs against the signed head, to \(to)", to: to, json: output.isJSON,
                          details: ["subject": .string(subject), "events": .int(Int64(proof.events.count)), "catalogueVersions": .int(Int64(versions))])
        }
    }
}

struct VerifyState: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-state",
        abstract: "Check a state proof offline against a pinned verifier key and print the state.",
        discussion: """
            Checks the signed head with the pinned key, every event's signature and inclusion \
            proof, that the subject map's proofs lead to the root the head's last event signs, \
            and that the events are exactly the subject's (none missing, added or out of order); \
            then replays them and prints the verified state. Any failure exits 2 with the reason. \
            No ledger is needed.
            """
    )

    @Argument(help: ArgumentHelp("The proof written by prove-state.", valueName: "FILE"))
    var file: String

    @OptionGroup var options: PinnedKey

    func run() throws {
        try reporting(json: options.json) {
            let report = try options.check(file, .stateProof, limit: 1 << 28) { (bytes, _, pinned, witnesses) throws(ExportVerificationError) in try StateProofVerifier.verify(Array(bytes), pinnedKey: pinned, witnesses: witnesses) }
            if options.json {
                var members: [String: JSONValue] = [
                    "ok": .bool(true), "subject": .string(report.subjectID), "events": .int(Int64(report.events.count)),
                    "checkpoint": checkpointJSON(report.checkpoint),
                    "features": ListingJSON.encode(report.listing),
                ]
                if let at = report.at { members["at"] = .string(at.rfc3339) }
                members["recordedUntil"] = .string(report.recordedUntil.rfc3339)
                printJSON(.object(members))
            } else {
                print("OK: the state of \(report.subjectID)\(report.at.map { " as of \($0.rfc3339)" } ?? ""), from \(report.events.count) events, verified against \(report.checkpoint.origin) size \(report.checkpoint.size) (events recorded up to \(report.recordedUntil.rfc3339))")
                if let summary = options.witnessSummary { print(summary) }
                let active = report.listing.activeFeatures.map(\.feature.key)
                print(active.isEmpty ? "No feature is active." : "Active features: \(active.joined(separator: ", "))")
                for line in report.listing.features {
                    let given = line.consents.filter(\.isGiven).map { $0.isOutdated ? "\($0.definition.code) (outdated)" : $0.definition.code }
                    print("  \(line.feature.key)\(line.isActive ? " (active)" : ""): \(given.isEmpty ? "nothing given" : "given " + given.joined(separator: ", "))")
                }
            }
        }
    }
}
