import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports

// MARK: - init

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a new ledger: a key pair, the catalogue and the genesis event.",
        discussion: """
            Refuses a folder that already holds a ledger or other files. Without --catalog the \
            seed's catalogue is used (Medication Management and Timeline; see 'consentctl catalog').

            The secret key is sealed under a passphrase (Argon2id, then XSalsa20-Poly1305) in a \
            file of mode 0600. The passphrase (at least 8 bytes) comes from --passphrase-file, \
            --passphrase-fd or $CONSENTCTL_PASSPHRASE, or is asked for twice on the terminal. \
            Every command that signs needs it again; reads, verification and 'key show' never do. \
            'consentctl key passphrase' changes it.

            Examples:
              consentctl init --name clinic.example/consents
              consentctl --passphrase-file /run/secrets/consents init --kdf moderate
              consentctl init --insecure-plaintext-key     # tests and demos only
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: ArgumentHelp("A catalogue JSON file (format: Samples/catalog.json).", valueName: "FILE"))
    var catalog: String?

    @Option(help: ArgumentHelp("The ledger's name, used as the checkpoint origin. Default: consentledger.local/<random>.", valueName: "NAME"))
    var name: String?

    @Option(help: "Who creates the ledger.")
    var actor: String = "consentctl"

    @OptionGroup(title: "The signing key") var newKey: NewKeyOptions

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let catalogValue: Catalog
            if let catalog {
                let bytes: [UInt8]
                do {
                    bytes = try LocalFile.read(catalog)
                } catch {
                    throw ConsentError.invalidRequest("cannot read catalogue: \(error)")
                }
                do throws(CatalogError) {
                    catalogValue = try CatalogCodec.decode(bytes)
                } catch {
                    throw ConsentError.invalidCatalog(CatalogError(entry: "\(catalog): \(error.entry)", problem: error.problem))
                }
            } else {
                catalogValue = SeedCatalog.catalog
            }
            let ledgerName = name ?? "consentledger.local/" + Hex.encode(Sodium().randomBytes(6))
            let store = try root.ledgerStore()
            guard let keys = root.keyStore(for: store) else {
                throw ConsentError.invalidRequest("\(store.names.location) keeps no signing key: give the new ledger's key file with --key-file FILE (or $CONSENTCTL_KEY_FILE); init creates it")
            }
            let protection = try newKey.protection(root.passphrase)
            let ledger = try Ledger.create(store: store, keys: keys, catalog: catalogValue, name: ledgerName, keyProtection: protection, actor: actor)
            if newKey.insecurePlaintextKey {
                printError("warning: the secret key is stored unencrypted in \(keys.keyLocation) (--insecure-plaintext-key): use this ledger for tests and demos only")
            }
            if output.isJSON {
                printJSON(.object([
                    "ok": .bool(true), "ledger": .string(ledgerName), "location": .string(store.names.location),
                    "keyProtection": .string(newKey.insecurePlaintextKey ? "insecure-plaintext" : "passphrase"), "keyFile": .string(keys.keyLocation),
                    "features": .array(catalogValue.features.map { .string($0.key) }), "verifierKey": .string(try ledger.verifierKey.text),
                ]))
                return
            }
            print("Created ledger '\(ledgerName)' at \(store.names.location)")
            print("  features:   \(catalogValue.features.map(\.key).joined(separator: ", "))")
            print("  signing key: \(keys.keyLocation), " + newKey.summary)
            print("  verifier key: \(try ledger.verifierKey.text)")
            print("Give the verifier key to auditors ('consentctl key show' prints it again).")
        }
    }
}

// MARK: - give / revoke

struct Give: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "give",
        abstract: "Give one or more consents of a feature.",
        discussion: """
            To activate an inactive feature, give its required consent, with any optional ones in \
            the same command (rules R2 and R5). Once a feature is active, a withheld optional consent \
            can be given on its own (R6). Giving a consent that is already given appends nothing and \
            succeeds. All events of one command are appended atomically.

            A consent given on paper, by phone or to a clinician can carry how it was obtained: \
            --effective-at for when the subject agreed (the event keeps the time it was recorded \
            too), --channel, --notice-language and --evidence. They are evidence shown in history, \
            reports and exports; the rules and every --at query use the recorded time.

            Examples:
              consentctl give --subject alice --feature timeline \\
                --consent required --consent optional-a
              consentctl give --subject bob --feature timeline --consent required \\
                --effective-at 22.11.2026 --channel paper --evidence scan-0042
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "The subject (patient) id.")
    var subject: String

    @Option(help: "A feature key (medication-management) or numeric code (1).")
    var feature: String

    @Option(name: .customLong("consent"), help: "A consent code of that feature; repeat for several.")
    var consents: [String]

    @Option(help: "Who acts: 'self' for the subject, or a clinician's or system's id.")
    var actor: String = "self"

    @OptionGroup(title: "How the consent was obtained") var evidence: EvidenceOptions

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    func validate() throws {
        if consents.isEmpty { throw ValidationError("give needs at least one --consent") }
        _ = try evidence.grantEvidence()
    }

    func run() throws {
        try runCommand(root: root, LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents), actor: actor, evidence: try evidence.grantEvidence()), json: json)
    }
}

struct Revoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Withdraw one or more consents of a feature.",
        discussion: """
            Withdrawing a required consent also withdraws the feature's given optional consents, \
            each as its own event that names the cause (rule R4); the feature becomes inactive, and \
            the way back is to give the required consent again (R5). Withdrawing a withheld consent \
            appends nothing and succeeds.

            Several --consent options withdraw all of them in one atomic command, each as its own \
            event: the named optional consents first, as the subject's own withdrawals, then the \
            required one, whose cascade covers the optional consents still given.

            Examples:
              consentctl revoke --subject alice --feature timeline --consent required
              consentctl revoke --subject alice --feature timeline \\
                --consent optional-a --consent optional-b
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "The subject (patient) id.")
    var subject: String

    @Option(help: "A feature key (medication-management) or numeric code (1).")
    var feature: String

    @Option(name: .customLong("consent"), help: "A consent code to withdraw; repeat for several.")
    var consents: [String]

    @Option(help: "Who acts: 'self' for the subject, or a clinician's or system's id.")
    var actor: String = "self"

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    @OptionGroup var presence: SubjectPresence

    func validate() throws {
        if consents.isEmpty { throw ValidationError("revoke needs at least one --consent") }
    }

    func run() throws {
        // A subject with no events has nothing to withdraw: nothing is appended, and the
        // warning names the ids it may be a typo of.
        var unknown = false
        try reporting(json: json) {
            let ledger = try root.openLedger()
            unknown = try !presence.check(ledger, subject)
            guard unknown else { return }
            let note = unknownSubjectNote(ledger, subject) + " Nothing to withdraw; nothing was appended."
            printError("warning: " + note)
            if json {
                // The same shape as any other answer: every feature off (R1), nothing appended.
                let listing = try ledger.report(for: subject, asOf: nil).listing
                printJSON(.object([
                    "ok": .bool(true), "subject": .string(subject), "known": .bool(false), "appended": .array([]),
                    "notes": .array([.string(note)]), "features": .array(listing.features.map(ListingJSON.feature)),
                ]))
            }
        }
        if unknown { return }
        try runCommand(root: root, LedgerCommand(subjectID: subject, request: .revoke(feature: feature, consents: consents), actor: actor), json: json)
    }
}

private func runCommand(root: ConsentCtl, _ command: LedgerCommand, json: Bool) throws {
    try reporting(json: json) {
        let ledger = try root.openLedger()
        let (result, recovered) = try ledger.execute(command)
        warnAboutTornTail(recovered, removed: true, store: StoreSelection.folder(root.storeSpec))
        if let warning = ledger.takeWarning() { printError("warning: " + warning) }
        let catalog = ledger.catalog
        if json {
            printJSON(.object([
                "ok": .bool(true),
                "subject": .string(result.subjectID),
                "known": .bool(true),
                "appended": .array(result.events.compactMap(HistoryEntry.init).map { historyJSON($0, catalog) }),
                "notes": .array(result.notes.map(JSONValue.string)),
                "features": .array(result.listing.features.map(ListingJSON.feature)),
            ]))
            return
        }
        for note in result.notes { print(note) }
        if let first = result.events.first, let last = result.events.last {
            let range = first.seq == last.seq ? "seq \(first.seq)" : "seq \(first.seq)–\(last.seq)"
            print("Appended \(result.events.count) event\(result.events.count == 1 ? "" : "s") for \(result.subjectID) (\(range)):")
            var table = Table()
            for entry in result.events.compactMap(HistoryEntry.init) {
                table.add(["  " + entry.kind.rawValue, featureKey(entry.feature, catalog) + "/" + entry.consent, entry.cause.map { "caused by seq \($0)" } ?? entry.renews.map { "renews seq \($0), now v\(entry.version ?? "")" } ?? ""])
            }
            table.print()
        }
        let touched = featureCode(command.request, catalog)
        for line in result.listing.features where line.feature.code == touched {
            print("\(line.feature.name) is \(line.isActive ? "active" : "inactive") for \(result.subjectID).")
            printConsents(line)
        }
    }
}

private func featureCode(_ request: ConsentRequest, _ catalog: Catalog) -> Int? {
    switch request {
    case .give(let f, _), .revoke(let f, _): return catalog.feature(named: f)?.code
    }
}

func featureKey(_ code: Int, _ catalog: Catalog) -> String {
    catalog.feature(code: code)?.key ?? String(code)
}

// MARK: - status

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a subject's consents, grouped by feature, required first.",
        discussion: """
            With --at, shows the state as of that time, replayed from the events up to it. \
            Times are shown dd.MM.yyyy HH:mm (UTC), the app's date format with the time; --json gives full RFC 3339 times.
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "The subject (patient) id.")
    var subject: String

    @Option(help: ArgumentHelp("Show the state as of this time (RFC 3339, or a date meaning the end of that day, UTC).", valueName: "TIME"))
    var at: String?

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    @OptionGroup var presence: SubjectPresence

    func run() throws {
        let asOf = try at.map { try parseAsOf($0, option: "--at") }
        try reporting(json: json) {
            let ledger = try root.openLedger()
            let report = try ledger.report(for: subject, asOf: asOf)
            // A subject whose report has events is known; only an empty one needs the lookup.
            let known = try report.events.isEmpty ? presence.check(ledger, subject) : true
            warnAboutTornTail(report.torn, removed: false, store: StoreSelection.folder(root.storeSpec))
            if json {
                var members: [String: JSONValue] = [
                    "subject": .string(subject),
                    "asOf": asOf.map { .string($0.rfc3339) } ?? .null,
                    "known": .bool(known),
                    "empty": .bool(report.listing.isEmpty),
                    "features": .array(report.listing.features.map(ListingJSON.feature)),
                ]
                if !known { members["note"] = .string(unknownSubjectNote(ledger, subject)) }
                printJSON(.object(members))
                return
            }
            let when = asOf.map { " as of \($0.rfc3339)" } ?? ""
            if !known {
                // Rules R1 and R8: a subject with no events has every feature off; say so, and
                // name the ids this may be a typo of.
                print(unknownSubjectNote(ledger, subject) + " Every feature is off for it.")
                return
            }
            if report.listing.isEmpty {
                // Rule R8: say plainly that nothing is given.
                if report.events.isEmpty {
                    print("\(subject) has not given any consent\(when). Every feature is off.")
                } else {
                    print("\(subject) has no consent given\(when): every consent given earlier was withdrawn. Every feature is off.")
                }
                print("To give one: consentctl give --subject \(subject) --feature <feature> --consent required")
                return
            }
            print("Consents of \(subject)\(when)\(displayZone == .utc ? "" : " (times in \(displayZone.name))"):")
            for line in report.listing.features {
                print("")
                print("\(line.feature.name) (\(line.feature.key), code \(line.feature.code)): \(line.isActive ? "active" : "inactive")")
                printConsents(line)
            }
        }
    }
}

func printConsents(_ line: FeatureLine) {
    var table = Table()
    for c in line.consents {
        let state = c.isOutdated ? "outdated" : (c.isGiven ? "given" : "withheld")
        let detail: String
        switch c.status {
        case .given(let grant) where c.isOutdated: detail = "v\(grant.version) since \(grant.validFrom.shown); current v\(c.definition.version)"
        case .given(let grant):
            let effective = grant.evidence.effectiveAt.map { " (agreed \($0.shown))" } ?? ""
            detail = "since " + grant.validFrom.shown + effective
        case .withdrawn(let w): detail = (w.cause == nil ? "withdrawn " : "cascade-withdrawn ") + w.at.shown
        case nil: detail = "never given"
        }
        table.add(["  " + c.definition.code, c.definition.isRequired ? "required" : "optional", state, detail, c.definition.name])
    }
    table.print()
}

// MARK: - history

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Show a subject's events in order, with cascaded withdrawals linked to their cause."
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "The subject (patient) id.")
    var subject: String

    @Option(name: [.customLong("at"), .customLong("until")], help: ArgumentHelp("Only events up to this time, as the ledger recorded them (RFC 3339, or a date meaning the end of that day, UTC). --until is the older name.", valueName: "TIME"))
    var at: String?

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    @OptionGroup var presence: SubjectPresence

    func run() throws {
        let limit = try at.map { try parseAsOf($0, option: "--at") }
        try reporting(json: json) {
            let ledger = try root.openLedger()
            let report = try ledger.report(for: subject, asOf: limit)
            // A subject whose report has events is known; only an empty one needs the lookup.
            let known = try report.events.isEmpty ? presence.check(ledger, subject) : true
            warnAboutTornTail(report.torn, removed: false, store: StoreSelection.folder(root.storeSpec))
            let entries = report.events.compactMap(HistoryEntry.init)
            if json {
                var members: [String: JSONValue] = ["subject": .string(subject), "known": .bool(known), "events": .array(entries.map { historyJSON($0, ledger.catalog) })]
                if !known { members["note"] = .string(unknownSubjectNote(ledger, subject)) }
                printJSON(.object(members))
                return
            }
            if !known {
                print(unknownSubjectNote(ledger, subject))
                return
            }
            guard !entries.isEmpty else {
                print("No events for \(subject): no consent was ever given or withdrawn.")
                return
            }
            var table = Table()
            table.add(["SEQ", "AT (\(displayZone.name))", "TYPE", "FEATURE", "CONSENT", "ACTOR", "NOTE"])
            for e in entries {
                let note = (e.cause.map { ["cascade from seq \($0)"] } ?? e.renews.map { ["renews seq \($0) (v\(e.version ?? ""))"] } ?? []) + evidenceNotes(e.evidence)
                table.add([String(e.seq), e.at.shown, historyType(e), featureKey(e.feature, ledger.catalog), e.consent, e.actor, note.joined(separator: "; ")])
            }
            table.print()
        }
    }
}

/// A grant's evidence for people: "effective 22.11.2026 09:30", "paper", "notice de",
/// "evidence scan-0042".
func evidenceNotes(_ evidence: GrantEvidence) -> [String] {
    var notes: [String] = []
    if let t = evidence.effectiveAt { notes.append("effective \(t.shown)") }
    if let c = evidence.channel { notes.append(c.rawValue) }
    if let l = evidence.noticeLanguage { notes.append("notice \(l)") }
    if let r = evidence.reference { notes.append("evidence \(r)") } else if evidence.isReferenceSealed { notes.append("evidence sealed") }
    return notes
}

/// The `type` of a history entry, in the one vocabulary of every output: given, re-consent,
/// withdrawn or cascade-withdrawn.
func historyType(_ e: HistoryEntry) -> String { e.kind.rawValue }

func historyJSON(_ e: HistoryEntry, _ catalog: Catalog) -> JSONValue {
    var members: [String: JSONValue] = [
        "seq": .int(Int64(e.seq)),
        "at": .string(e.at.rfc3339),
        "type": .string(historyType(e)),
        "feature": .string(featureKey(e.feature, catalog)),
        "featureCode": .int(Int64(e.feature)),
        "consent": .string(e.consent),
        "actor": .string(e.actor),
    ]
    if let renews = e.renews { members["renews"] = .int(Int64(renews)) }
    if let cause = e.cause { members["cause"] = .int(Int64(cause)) }
    if let version = e.version { members["version"] = .string(version) }
    members.merge(ListingJSON.evidenceMembers(e.evidence)) { $1 }
    return .object(members)
}

// MARK: - verify

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check every hash link, signature, sequence number and rule by replaying the whole log.",
        discussion: """
            On success prints the number of events and subjects, the head hash and the key in \
            force, exit 0. On failure names the first bad entry (sequence number and line) and \
            why, exit 2. Key rotations are followed: each event must be signed by the key in \
            force for it, and each rotation by the key before it and the new key.

            Clock corrections (consentctl clock correct) are listed. A ledger whose newest \
            event is stamped further ahead of this machine's clock than --clock-skew allows \
            verifies, with a warning on stderr: its clock went wrong (or this one is behind), \
            and writes refuse until it is corrected.
            """
    )

    @ParentCommand var root: ConsentCtl

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    func run() throws {
        try reporting(json: json) {
            let ledger = try root.openLedger()
            let report = try ledger.verify()
            warnAboutTornTail(report.torn, removed: false, store: StoreSelection.folder(root.storeSpec))
            if let ahead = report.clockAhead { printError("warning: the ledger's clock went wrong: \(ahead)") }
            let inForce = try ledger.noteKey(report.keys.current.key)
            let rotations = report.keys.periods.compactMap(\.rotation)
            if json {
                printJSON(.object([
                    "ok": .bool(true), "ledger": .string(report.ledgerName), "events": .int(Int64(report.events)),
                    "subjects": .int(Int64(report.subjects)), "verifierKey": .string(inForce.text),
                    "rotations": .array(rotations.map { .int(Int64($0)) }),
                    "revocations": .array(report.keys.revocations.map { .object(["seq": .int(Int64($0.seq)), "keyID": .string($0.keyID), "compromisedSince": .int(Int64($0.since)), "attested": .int(Int64($0.attested.count))]) }),
                    "head": .object(["seq": .int(Int64(report.head.seq)), "hash": .string(report.head.hash.hex)]),
                    "clockCorrections": .array(report.clockCorrections.corrections.map(correctionJSON)),
                    "clockAhead": report.clockAhead.map { .object(["ledgerTime": .string($0.ledgerTime.rfc3339), "seq": .int(Int64($0.seq)), "clock": .string($0.clock.rfc3339)]) } ?? .null,
                ]))
                return
            }
            print("OK: ledger '\(report.ledgerName)' verified")
            var table = Table()
            table.add(["  events", String(report.events)])
            table.add(["  subjects", String(report.subjects)])
            table.add(["  head", "seq \(report.head.seq), \(report.head.hash.hex)"])
            table.add(["  verifier key", inForce.text])
            if !rotations.isEmpty {
                table.add(["  key rotations", "\(rotations.count), at seq \(rotations.map(String.init).joined(separator: ", ")); genesis key \(try ledger.verifierKey.text)"])
            }
            for revocation in report.keys.revocations {
                table.add(["  key revoked", "\(revocation.keyID) at seq \(revocation.seq): compromised from seq \(revocation.since), \(revocation.attested.count) event(s) to seq \(revocation.until) re-attested"])
            }
            for correction in report.clockCorrections.corrections {
                table.add(["  clock corrected", "at seq \(correction.seq): from \(correction.correctedFrom.rfc3339) back to \(correction.at.rfc3339)\(correction.reason.map { " (\($0))" } ?? "")"])
            }
            table.print()
        }
    }
}

// MARK: - Tables

struct Table {
    private var rows: [[String]] = []

    /// Cells are escaped for the terminal (``Terminal/escaped(_:)``) before they are measured.
    mutating func add(_ row: [String]) { rows.append(row.map(Terminal.escaped)) }

    func print() {
        let columns = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in rows {
            for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) }
        }
        for row in rows {
            var line = ""
            for (i, cell) in row.enumerated() {
                line += cell
                if i < row.count - 1 { line += String(repeating: " ", count: widths[i] - cell.count + 2) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            Swift.print(line)
        }
    }
}
