import ArgumentParser
import ConsentLedger

struct Erase: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "erase",
        abstract: "Erase a subject (GDPR Art. 17): destroy the link from the person to their events.",
        discussion: """
            Appends a signed subject.erased event, then destroys the subject's record (the id and \\
            the salt of its pseudonym), overwriting its bytes; on PostgreSQL the row is deleted \\
            and the table rewritten (VACUUM FULL) so no dead row version keeps it. Nothing in the \\
            log is rewritten: every signature, the hash chain, the Merkle tree, every checkpoint \\
            and every proof or export issued before still verify. Afterwards the ledger knows no \\
            such subject: status and history answer as for an id with no events, and reports \\
            keep the counts and show the pseudonym as erased.

            It prints a receipt for the requester's records: the pseudonym and the seq of the \\
            erasure event. --reason is signed into the log and outlives the erasure, so it must \\
            not name the person (a request number, "GDPR Art. 17"). Exports written before \\
            the erasure still hold the id: they are outside the ledger's reach \\
            (docs/gdpr.md). Erasing a subject whose erasure was cut short finishes it.

            Example:
              consentctl erase --subject alice --reason "request 2026-118" --actor dpo
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "The subject (patient) id to erase.")
    var subject: String

    @Option(help: ArgumentHelp("Why (at most 200 bytes, no personal data: it stays in the log).", valueName: "TEXT"))
    var reason: String?

    @Option(help: "Who acts: the data-protection officer's or system's id, or 'self'.")
    var actor: String = "self"

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let receipt = try root.openLedger().erase(subject, actor: actor, reason: reason)
            if output.isJSON {
                printJSON(.object([
                    "ok": .bool(true), "pseudonym": .string(receipt.pseudonym), "seq": .int(Int64(receipt.seq)),
                    "at": .string(receipt.at.rfc3339), "events": .int(Int64(receipt.events)), "appended": .bool(receipt.appended),
                ]))
            } else {
                print(receipt.appended ? "Erased the subject: their record is destroyed." : "The subject was already erased at seq \(receipt.seq); the destruction of their record is now finished.")
                print("Erasure receipt: pseudonym \(receipt.pseudonym), erasure event seq \(receipt.seq) at \(receipt.at.rfc3339), \(receipt.events) event\(receipt.events == 1 ? "" : "s") kept under the pseudonym.")
            }
        }
    }
}
