import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@main
struct ConsentCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consentctl",
        abstract: "Record patients' consents in a signed, hash-chained, append-only ledger.",
        discussion: """
            Every grant and withdrawal is an Ed25519-signed event appended to a hash-chained log. \
            The current state is always what replaying the log gives.

            A typical session:
              consentctl init
              consentctl give --subject alice --feature timeline --consent required
              consentctl give --subject alice --feature timeline --consent optional-a
              consentctl revoke --subject alice --feature timeline --consent required
              consentctl status --subject alice
              consentctl history --subject alice
              consentctl verify
              consentctl export --subject alice --out alice.json
              consentctl verify-export alice.json --key "$(consentctl key show)"

            The ledger is in the folder --ledger DIR, or wherever --store STORE says:
            a folder, or a PostgreSQL URL (one ledger per schema), such as
              postgres://consentledger@127.0.0.1:5432/consent?schema=clinic_a
            Without either: $CONSENTCTL_STORE, $CONSENTCTL_LEDGER, ./consent-ledger. \
            Every command works the same on both stores; 'consentctl migrate' copies \
            a ledger between them.

            EXIT CODES
              0   success (including a request that changes nothing, such as giving a given consent)
              1   rule violation: a consent rule forbids the request; nothing was appended
              2   integrity failure: the ledger is damaged, tampered with or signed by another key
              3   storage error: reading, writing, syncing or locking failed
              64  usage error: bad flags, unknown feature or consent, malformed subject id or time,
                  or a file of the wrong kind handed to a verifier
              65  invalid catalogue file (init --catalog, catalog publish)
              66  no ledger at the given folder or PostgreSQL schema, or no signing key for a
                  command that signs
              69  a witness did not answer or did not cosign (checkpoint --witness-url); what the
                  others cosigned is recorded
              73  a ledger (or other files) already exists where init would create one
              75  conflict: another writer changed the PostgreSQL ledger first, or rotated the
                  key this process had unlocked; nothing was changed, try again
              77  the signing key is encrypted and no passphrase was given, or a wrong one;
                  nothing was changed

            THE SIGNING KEY
            The secret key is sealed under a passphrase (Argon2id and XSalsa20-Poly1305, \
            Spec/key-file.md). Only commands that sign ask for it: init, give, revoke, apply, \
            catalog publish, migrate and key passphrase; reads, exports and proofs hand out the \
            signed head and never do. It comes from --passphrase-file FILE, --passphrase-fd N or \
            $CONSENTCTL_PASSPHRASE, in that order, or else from a prompt on the terminal; never \
            from an argument.
            """,
        version: "0.1.0",
        subcommands: [Init.self, CatalogCommand.self, Give.self, Revoke.self, Erase.self, ClockCommand.self, Status.self, History.self, SubjectsCommand.self, Completion.self, Report.self, Verify.self, CheckpointCommand.self, KeyCommand.self, WitnessCommand.self, Export.self, VerifyExport.self, ProveConsistency.self, VerifyConsistency.self, ProveState.self, VerifyState.self, Apply.self, Migrate.self]
    )

    /// Options that take several values; every other option may be given once. Argument
    /// parsing keeps the last of repeated values, which would drop a patient's choice in
    /// silence (`--subject a --subject b`), so a repeat is refused before parsing.
    static let repeatableOptions: Set<String> = ["--consent", "--witness", "--witness-url"]

    static func main() {
        // Swift turns bytes that are not UTF-8 into U+FFFD: a subject id would be stored as
        // another id than the one given. Refused, naming the argument.
        for i in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[i], String(validatingCString: raw) == nil else { continue }
            exit(withError: ValidationError("argument \(i) (\(Terminal.escaped(String(decoding: UnsafeRawBufferPointer(start: raw, count: strlen(raw)), as: UTF8.self)))) is not UTF-8: ids, names and times are UTF-8 text"))
        }
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let repeated = repeatedOption(in: arguments) {
            exit(withError: ValidationError("\(repeated) is given more than once; it takes one value (only --consent may be repeated)"))
        }
        if let unknown = unknownCommand(in: arguments) {
            exit(withError: ValidationError(unknown))
        }
        main(arguments)
    }

    /// The first word when it names no command: "unknown command 'stauts'; did you mean
    /// 'status'?". (Left to itself the parser would complain about the options that follow.)
    static func unknownCommand(in arguments: [String]) -> String? {
        var rest = arguments[...]
        while let first = rest.first, first.hasPrefix("-") {
            rest = rest.dropFirst(["--ledger", "--store", "--key-file", "--passphrase-file", "--passphrase-fd", "--lock-timeout", "--clock-skew"].contains(first) ? 2 : 1)
        }
        guard let word = rest.first else { return nil }
        let names = configuration.subcommands.map { $0._commandName } + ["help"]
        if names.contains(word) { return nil }
        let near = names.compactMap { name in Ledger.editDistance(Array(word.unicodeScalars), Array(name.unicodeScalars), atMost: 2).map { (name, $0) } }
            .sorted { $0.1 < $1.1 }.map(\.0)
        let hint = near.isEmpty ? "see 'consentctl --help' for the commands" : "did you mean " + near.prefix(2).map { "'\($0)'" }.joined(separator: " or ") + "?"
        return "unknown command '\(word)'; \(hint)"
    }

    /// The first option, other than the repeatable ones, that appears twice before `--`.
    static func repeatedOption(in arguments: [String]) -> String? {
        var seen: Set<String> = []
        for argument in arguments {
            if argument == "--" { break }
            guard argument.hasPrefix("--") else { continue }
            let name = String(argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)[0])
            if repeatableOptions.contains(name) { continue }
            if !seen.insert(name).inserted { return name }
        }
        return nil
    }

    @Option(name: .long, help: ArgumentHelp("The ledger folder.", valueName: "DIR"))
    var ledger: String?

    @Option(name: .long, help: ArgumentHelp(
        "Where the ledger lives: a folder, or postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&sslmode=MODE] (PostgreSQL needs a consentctl built with the PostgreSQL trait).",
        valueName: "STORE"))
    var store: String?

    @Option(name: .customLong("key-file"), help: ArgumentHelp(
        "The signing key file (default: secret.key in the ledger folder; a PostgreSQL ledger keeps no key, so its writers need this or $CONSENTCTL_KEY_FILE).",
        valueName: "FILE"))
    var keyFile: String?

    @Option(name: .customLong("passphrase-file"), help: ArgumentHelp(
        "Read the signing key's passphrase from FILE, a file or a pipe such as <(pass show clinic) (its one trailing line end is dropped). Only commands that sign read it.",
        valueName: "FILE"))
    var passphraseFile: String?

    @Option(name: .customLong("passphrase-fd"), help: ArgumentHelp(
        "Read the signing key's passphrase from the open file descriptor N, to its end.",
        valueName: "N"))
    var passphraseFD: Int32?

    @Option(name: .customLong("lock-timeout"), help: ArgumentHelp(
        "How long to wait, in seconds, while another command holds the ledger's lock (a folder's: default 10; a PostgreSQL ledger's advisory lock: default 60, as a commit of many commands holds it longer; 0 waits not at all). Then the command fails with exit code 3, naming the process or session that holds the lock, and changes nothing.",
        valueName: "SECONDS"))
    var lockTimeout: Double?

    @Option(name: .customLong("clock-skew"), help: ArgumentHelp(
        "How far, in seconds, the ledger's time (its newest event's) may be ahead of this machine's clock for a write to go on (default 300). Further ahead, a write fails with exit code 4 and changes nothing: either this clock is behind, or the ledger's clock went wrong and `consentctl clock correct` records the correction.",
        valueName: "SECONDS"))
    var clockSkew: Double?

    func validate() throws {
        if let clockSkew, !(clockSkew >= 0 && clockSkew <= 31_536_000) {
            throw ValidationError("--clock-skew must be a number of seconds from 0 to 31536000 (a year), not \(clockSkew)")
        }
        if let lockTimeout, !(lockTimeout >= 0 && lockTimeout <= 86_400) {
            throw ValidationError("--lock-timeout must be a number of seconds from 0 to 86400, not \(lockTimeout)")
        }
        if ledger != nil && store != nil { throw ValidationError("give --ledger DIR or --store STORE, not both") }
        if passphraseFile != nil && passphraseFD != nil { throw ValidationError("give --passphrase-file or --passphrase-fd, not both") }
        if let passphraseFD, passphraseFD < 0 { throw ValidationError("--passphrase-fd must be a file descriptor (0 or more)") }
    }

    /// Where the signing key's passphrase comes from.
    var passphrase: PassphraseOptions { PassphraseOptions(file: passphraseFile, fd: passphraseFD) }

    /// Where the ledger lives: --store or --ledger, then $CONSENTCTL_STORE or $CONSENTCTL_LEDGER,
    /// then ./consent-ledger.
    var storeSpec: String {
        for value in [store, ledger, environment("CONSENTCTL_STORE"), environment("CONSENTCTL_LEDGER")] {
            if let value, !value.isEmpty { return value }
        }
        return "consent-ledger"
    }

    /// The ledger folder, when the ledger is in one (outputs must not be written into it).
    var ledgerDirectory: String? { StoreSelection.isURL(storeSpec) ? nil : StoreSelection.folder(storeSpec) }

    func ledgerStore() throws -> any LedgerStore { try StoreSelection.store(storeSpec, lockTimeout: lockWait) }

    /// How long the ledger's lock is waited for (--lock-timeout); nil for the store's default.
    var lockWait: Duration? {
        lockTimeout.map { .milliseconds(Int64(($0 * 1000).rounded())) }
    }

    /// Where the signing key is: --key-file or $CONSENTCTL_KEY_FILE, else the store's own place
    /// (a folder's secret.key; none for PostgreSQL).
    func keyStore(for store: any LedgerStore) -> (any KeyStore)? {
        for value in [keyFile, environment("CONSENTCTL_KEY_FILE")] {
            if let value, !value.isEmpty { return FileKeyStore(path: absolute(value)) }
        }
        return store.keyStore
    }

    /// Opens the ledger; an encrypted key's passphrase is asked for only if a write needs it.
    func openLedger() throws -> Ledger {
        try openLedger(store: try ledgerStore())
    }

    func openLedger(store: any LedgerStore) throws -> Ledger {
        let keys = keyStore(for: store)
        StoreSelection.warnAboutRetiredKey(in: store)
        return configured(try Ledger.open(store: store, keys: keys, passphrase: passphrase.source(for: keys?.keyLocation ?? store.names.location)))
    }

    /// The ledger with the root options that tune it (--clock-skew).
    func configured(_ ledger: Ledger) -> Ledger {
        if let clockSkew { ledger.maximumClockSkew = .milliseconds(Int64((clockSkew * 1000).rounded())) }
        return ledger
    }
}

func environment(_ name: String) -> String? {
    getenv(name).flatMap { String(validatingCString: $0) }
}

/// Makes a relative path absolute, so messages name the folder unambiguously.
func absolute(_ path: String) -> String {
    if path.hasPrefix("/") { return path }
    var buffer = [CChar](repeating: 0, count: 4096)
    guard getcwd(&buffer, buffer.count) != nil else { return path }
    let cwd = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    var relative = path
    while relative.hasPrefix("./") { relative.removeFirst(2) }
    return relative.isEmpty || relative == "." ? cwd : (cwd == "/" ? "/" : cwd + "/") + relative
}

// MARK: - Errors and exit codes

enum Exit {
    static let ruleViolation: Int32 = 1
    static let integrity: Int32 = 2
    static let storage: Int32 = 3
    /// Another writer changed the ledger first (PostgreSQL); nothing was changed: try again.
    static let conflict: Int32 = 75
    static let usage: Int32 = 64
    static let invalidCatalog: Int32 = 65
    static let notFound: Int32 = 66
    static let alreadyExists: Int32 = 73
    /// The signing key is encrypted and was not unlocked (EX_NOPERM).
    static let keyLocked: Int32 = 77
    /// A witness did not answer or did not cosign (EX_UNAVAILABLE).
    static let unavailable: Int32 = 69
    /// The ledger's time is ahead of this clock by more than --clock-skew: see `clock correct`.
    static let clockAhead: Int32 = 4

    static func code(for error: ConsentError) -> Int32 {
        switch error {
        case .ruleViolation: return ruleViolation
        case .integrity: return integrity
        case .storage: return storage
        case .conflict: return conflict
        case .invalidRequest: return usage
        case .invalidCatalog: return invalidCatalog
        // A subject, feature or consent the ledger does not know is a mistake in the command.
        case .notFound(.subject, _), .notFound(.feature, _), .notFound(.consent, _): return usage
        case .notFound: return notFound
        case .alreadyExists: return alreadyExists
        case .keyLocked: return keyLocked
        case .unavailable: return unavailable
        case .clockAhead: return clockAhead
        }
    }
}

func printError(_ message: String) {
    var line = "consentctl: " + Terminal.escaped(message) + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

/// One line of human output. It shows strings that came from a ledger, a bundle, a catalogue or
/// another process (ids, actors, names, origins), so control characters in it are escaped
/// (``Terminal/escaped(_:)``): none can forge a line such as "OK: 99 events" or drive the
/// terminal. (Output that is several lines on purpose, a signed note or a completion script,
/// goes through `Swift.print`; JSON output escapes control characters itself.)
func print(_ line: String) {
    Swift.print(Terminal.escaped(line))
}

/// Runs a command body, turning a ``ConsentError`` into a message on stderr and its exit code.
/// `context` adds members to the JSON error and a prefix to the message, such as the line of a
/// commands file that failed.
func reporting(json: Bool = false, context: () -> (members: [String: JSONValue], prefix: String)? = { nil }, _ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as ConsentError {
        let where_ = context()
        if json {
            var members: [String: JSONValue] = ["ok": .bool(false), "error": .string((where_?.prefix ?? "") + error.description), "kind": .string(kind(of: error))]
            if let extra = where_?.members { members.merge(extra) { $1 } }
            if case .ruleViolation(let rule, _) = error { members["rule"] = .string(rule) }
            if case .notFound(let what, _) = error { members["missing"] = .string(what.rawValue) }
            if case .integrity(let failure) = error {
                members["integrity"] = .string(failure.kind.rawValue)
                if let line = failure.line { members["entry"] = .int(Int64(line)) }
                if let seq = failure.seq { members["seq"] = .int(Int64(seq)) }
                members["problem"] = .string(failure.problem)
            }
            printJSON(.object(members))
        }
        printError((where_?.prefix ?? "") + error.description)
        throw ExitCode(Exit.code(for: error))
    }
}

func kind(of error: ConsentError) -> String {
    switch error {
    case .ruleViolation: return "rule-violation"
    case .integrity: return "integrity"
    case .storage: return "storage"
    case .conflict: return "conflict"
    case .invalidRequest: return "usage"
    case .invalidCatalog: return "invalid-catalog"
    case .notFound: return "not-found"
    case .alreadyExists: return "already-exists"
    case .keyLocked: return "key-locked"
    case .unavailable: return "unavailable"
    case .clockAhead: return "clock-ahead"
    }
}

func printJSON(_ value: JSONValue) {
    // JSON escapes what it must itself; the terminal escapes of `print` would break it.
    Swift.print(String(decoding: CanonicalJSON.serialize(value), as: UTF8.self))
}

func warnAboutTornTail(_ torn: TornTail?, removed: Bool, store: String) {
    guard let torn else { return }
    if removed {
        printError("recovered: removed a torn tail left by a crash, \(torn); its bytes are kept in \(store)/recovered/")
    } else {
        printError("warning: ignoring a torn tail left by a crash, \(torn); the next write removes it")
    }
}

/// Which moment of its day a bare date (`2026-11-21`, `21.11.2026`) names.
enum BareDate {
    /// The end of the day: "as of 21.11.2026" includes everything recorded that day.
    case endOfDay
    /// The start of the day: "agreed on 21.11.2026" is never later than the day's events, and a
    /// paper form dated today is not a time in the future.
    case startOfDay
}

/// Parses an "as of" time (`--at`): a moment up to a day from now. A time further ahead is a
/// mistake (9999-12-31, a year typed wrong): the ledger knows consents up to now, not then.
func parseAsOf(_ text: String, option: String) throws -> Timestamp {
    let t = try parseTime(text, option: option)
    let now = systemClock()
    guard t.millisecondsSinceEpoch <= now.millisecondsSinceEpoch + 86_400_000 else {
        throw ValidationError("\(option) '\(text)' is in the future (it is \(now.rfc3339) now): the ledger knows consents up to now; leave \(option) out for the current state")
    }
    return t
}

/// Parses a time given on the command line.
func parseTime(_ text: String, option: String, bareDate: BareDate = .endOfDay) throws -> Timestamp {
    // A time with its own offset is that moment; a bare date or the dd.MM.yyyy form is read in
    // the zone people see times in (UTC unless --tz).
    let explicit = text.count > 10 && (text.hasSuffix("Z") || text.dropFirst(10).contains("+") || text.dropFirst(10).contains("-"))
    let local = explicit ? nil : (Timestamp(rfc3339: text) ?? Timestamp(dayMonthYear: text)).map { day in
        // Both parsers read a bare date as its last millisecond.
        text.count == 10 && bareDate == .startOfDay ? Timestamp(millisecondsSinceEpoch: day.millisecondsSinceEpoch - 86_399_999) : day
    }
    guard let t = (explicit ? Timestamp(rfc3339: text) : local.map(displayZone.utc(fromLocal:))) else {
        throw ValidationError("\(option) '\(text)' is not a time like 2026-11-21T10:00:00Z, 2026-11-21T11:00:00+01:00, '21.11.2026 10:00' (UTC, as output shows it) or a date 2026-11-21 or 21.11.2026 (end of that day, UTC)")
    }
    return t
}

/// Writes a command's file output: to standard output for `-`, else to the file (its folder
/// must exist: a usage error naming it otherwise). Returns where it went, for the message.
func writeOutput(_ bytes: [UInt8], to path: String) throws -> String {
    if path == "-" {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(1, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { break }
                offset += n
            }
        }
        return "standard output"
    }
    let folder = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
    var info = stat()
    guard stat(folder.isEmpty ? "/" : folder, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
        throw ConsentError.invalidRequest("cannot write \(path): folder \(folder) does not exist")
    }
    try LocalFile.write(bytes, to: path)
    return path
}

/// A command's message about the file it wrote: on standard error when the file itself went to
/// standard output, so that a pipe gets the file alone.
/// With `json`, the message is a JSON object: `ok`, `out` and `details`.
func reportWritten(_ message: String, to destination: String, json: Bool = false, details: [String: JSONValue] = [:]) {
    if destination == "standard output" {
        printError(message)
    } else if json {
        printJSON(.object(details.merging(["ok": .bool(true), "out": .string(destination)]) { $1 }))
    } else {
        print(message)
    }
}

/// Refuses an output path inside the ledger folder: a report or export written there could
/// replace the log, the head or a key.
func checkOutputPath(_ path: String, ledger: String?) throws {
    guard let ledger, path != "-" else { return }
    func resolved(_ p: String) -> String {
        guard let r = realpath(p, nil) else { return p }
        defer { free(r) }
        return String(cString: r)
    }
    let full = absolute(path)
    let parent = full.lastIndex(of: "/").map { String(full[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
    if resolved(parent) == resolved(absolute(ledger)) {
        throw ConsentError.invalidRequest("\(path) is inside the ledger folder; write exports and reports elsewhere")
    }
}
