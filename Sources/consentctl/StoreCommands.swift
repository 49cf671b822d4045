import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - migrate

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Copy the ledger into another store: a folder into PostgreSQL, or back.",
        discussion: """
            Copies every line byte for byte (so the same signatures, hash chain and \
            Merkle root), the catalogue, the key pair, the subject salts and the issued \
            checkpoints. Nothing is re-signed. The source is verified first and its \
            log only read; the copy is then verified, and its head, tree root and \
            checkpoints are compared with the source's. The target must hold no ledger. If the \
            copy is interrupted, delete the target (the folder, or the schema with \
            DROP SCHEMA NAME CASCADE) and run it again.

            Examples:
              consentctl --ledger ./consent-ledger migrate \\
                  --to postgres://consentledger@127.0.0.1:5432/consent
              consentctl --store postgres://consentledger@127.0.0.1:5432/consent \\
                  migrate --to ./ledger-copy
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: ArgumentHelp("The store to copy into: a new folder or a postgres:// URL.", valueName: "STORE"))
    var to: String

    @OptionGroup var output: OutputOptions
    var json: Bool { output.isJSON }

    func run() throws {
        try reporting(json: json) {
            let source = try root.ledgerStore()
            let target = try StoreSelection.store(to, lockTimeout: root.lockWait)
            guard source.names.location != target.names.location else {
                throw ConsentError.invalidRequest("the source and the target are the same store (\(source.names.location))")
            }
            let keys = root.keyStore(for: source)
            let report = try LedgerCopy.copy(from: source, to: target, keys: keys, passphrase: root.passphrase.source(for: keys?.keyLocation ?? source.names.location))
            // The key file the copy's writers use: the target's own, or (PostgreSQL keeps none)
            // the one it was copied with.
            let keyFile = target.keyStore?.keyLocation ?? keys?.keyLocation ?? ""
            if json {
                printJSON(.object([
                    "ok": .bool(true), "from": .string(source.names.location), "to": .string(target.names.location), "keyFile": .string(keyFile),
                    "events": .int(Int64(report.events)), "subjects": .int(Int64(report.subjects)), "checkpoints": .int(Int64(report.checkpoints)),
                    "headSeq": .int(Int64(report.head.seq)), "headHash": .string(report.head.hash.hex), "root": .string(report.root.hex),
                ]))
            } else {
                print("Copied \(report.events) events, \(report.subjects) subjects and \(report.checkpoints) checkpoint(s)")
                print("  from \(source.names.location)")
                print("  to   \(target.names.location)")
                print("  head: seq \(report.head.seq) \(report.head.hash.hex)")
                print("  tree root: \(report.root.hex) (verified equal in both)")
                if target.keyStore == nil {
                    print("  signing key: not copied (the database keeps none); writers of the copy give --key-file \(keyFile)")
                } else {
                    print("  signing key: \(keyFile)")
                }
            }
        }
    }
}

// MARK: - apply

struct Apply: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply",
        abstract: "Give and revoke consents from a file of commands, one JSON object per line.",
        discussion: """
            Each line of FILE ('-' for standard input) is one command, for example
              {"subject":"alice","feature":"timeline","give":["required","optional-a"]}
              {"subject":"alice","feature":"timeline","revoke":"required","actor":"dr-house"}
              {"subject":"bob","feature":"timeline","revoke":["optional-a","optional-b"]}
              {"subject":"carol","feature":"timeline","give":["required"],"effectiveAt":"2026-11-20T09:30:00Z","channel":"paper","noticeLanguage":"de","evidence":"scan-0042"}
            ("actor" defaults to "self"; blank lines are skipped; a give can carry \
            effectiveAt, channel, noticeLanguage and evidence, as give's options).

            Every line is checked first (JSON, members, subject and actor, feature and \
            consent names): a \
            bad line stops the run before anything is appended, with exit 64 and its \
            line number. Then the commands are appended in order, each atomic on its own \
            (a crash keeps or loses a command whole), in groups of up to 256 that share \
            one sync, and each is acknowledged once its group is durable, with one line on \
            standard output:
              {"events":[12,13],"line":1,"ok":true}
            A command the rules refuse ends the run with exit 1; the commands before it \
            stay appended, as their acknowledgements say, and none after it is appended. With --atomic all commands \
            are checked together and appended in one write and one sync: all or none.
            """
    )

    @ParentCommand var root: ConsentCtl

    @Argument(help: ArgumentHelp("The commands file, or - for standard input.", valueName: "FILE"))
    var file: String

    @Flag(help: "Append all commands in one atomic write, or none of them.")
    var atomic = false

    func validate() throws {
        // Both would read standard input to its end: the passphrase would swallow the commands.
        if file == "-", root.passphraseFD == 0 {
            throw ValidationError("apply - reads the commands from standard input, so the passphrase cannot come from descriptor 0 too; give --passphrase-fd 3 (3< FILE) or --passphrase-file")
        }
    }

    func run() throws {
        let source = file == "-" ? "standard input" : file
        // The command being appended, so that a failure names its line; nil while reading and
        // checking, whose errors name their line themselves.
        var failing: Int? = nil
        try reporting(json: true, context: { failing.map { (["line": .int(Int64($0))], "\(source) line \($0): ") } }) {
            let bytes: [UInt8]
            do {
                bytes = file == "-" ? readStandardInput() : try LocalFile.read(file, limit: 256 << 20)
            } catch {
                throw ConsentError.invalidRequest("cannot read \(file): \(error)")
            }
            let ledger = try root.openLedger()
            let commands = try CommandFile.parse(bytes, catalog: ledger.catalog, file: source)
            if atomic {
                let report = try ledger.execute(commands.map(\.command))
                for (entry, result) in zip(commands, report.results) { acknowledge(entry.line, result) }
                if let warning = report.warning { printError("warning: " + warning) }
                return
            }
            // Commands are committed in groups that share one sync. A long run (more than 8
            // groups) keeps the replay in memory: each group then reads only what other writers
            // appended since the previous one, not its subjects' whole histories. A shorter run
            // reads just its subjects' histories, which costs less than replaying a large ledger.
            let groupSize = 256
            if commands.count > 8 * groupSize { _ = try ledger.loadAll() }
            failing = commands.first?.line
            try ledger.executeInOrder(commands.map(\.command), groupSize: groupSize) { index, result, warning in
                acknowledge(commands[index].line, result)
                if let warning { printError("warning: " + warning) }
                // A failure from here on is the next command's: the first not appended.
                failing = index + 1 < commands.count ? commands[index + 1].line : nil
            }
        }
    }

    /// Prints and flushes at once: an acknowledgement is a promise that the command is durable,
    /// and a reader of a pipe must get it even if this process is killed a moment later.
    private func acknowledge(_ line: Int, _ result: CommandResult) {
        printJSON(.object(["line": .int(Int64(line)), "ok": .bool(true), "events": .array(result.events.map { .int(Int64($0.seq)) })]))
        fflush(nil)
    }

}

private func readStandardInput() -> [UInt8] {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        bytes += buffer[0..<n]
    }
    return bytes
}
