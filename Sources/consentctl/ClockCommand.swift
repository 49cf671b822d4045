import ArgumentParser
import ConsentDomain
import ConsentLedger
import LedgerFormat

struct ClockCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clock",
        abstract: "The ledger's time against this machine's clock, and its corrections.",
        discussion: """
            Every event records when it was written, and times never go backwards. A write takes \
            this machine's clock, or the newest event's time when that is later, but only while \
            the ledger's time is at most --clock-skew (default 300 s) ahead of this clock. So one \
            machine whose clock was wrong (an event stamped 2999) cannot carry its time forward: \
            writes refuse, with exit code 4, until the operator decides which clock is wrong.

            If this machine's clock is behind, set it right. If the ledger's clock went wrong, \
            `clock correct` writes one signed clock.corrected event that records the wrong time \
            and sets the ledger's time back to this clock; `verify` lists every correction.
            """,
        subcommands: [ClockShow.self, ClockCorrect.self],
        defaultSubcommand: ClockShow.self
    )
}

struct ClockShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show the ledger's time, this machine's clock, and the ledger's clock corrections.",
        discussion: """
            Reads only. Exit code 0 when writes can go on, 4 when the ledger's time is ahead of \
            this clock by more than --clock-skew.

            Example:
              consentctl clock show
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let status = try root.openLedger().clockStatus()
            if output.isJSON {
                printJSON(.object([
                    "ok": .bool(true), "ledgerTime": .string(status.ledgerTime.rfc3339), "seq": .int(Int64(status.seq)),
                    "clock": .string(status.clock.rfc3339), "aheadMilliseconds": .int(status.aheadMilliseconds),
                    "allowedSkewMilliseconds": .int(status.allowedSkewMilliseconds),
                    "writesRefused": .bool(status.refusesWrites),
                    "corrections": .array(status.corrections.corrections.map(correctionJSON)),
                ]))
            } else {
                print("Ledger time: \(status.ledgerTime.rfc3339) (seq \(status.seq))")
                print("This clock:  \(status.clock.rfc3339)")
                let ahead = status.aheadMilliseconds
                print(ahead > 0 ? "The ledger's time is \(ClockAhead.span(ahead)) ahead of this clock\(status.refusesWrites ? ", more than the \(ClockAhead.span(status.allowedSkewMilliseconds)) a write allows: writes refuse (see `consentctl clock --help`)." : ", within the allowed skew.")" : "The ledger's time is not ahead of this clock.")
                if status.corrections.isEmpty {
                    print("The ledger's clock was never corrected.")
                } else {
                    for c in status.corrections.corrections { print(correctionLine(c)) }
                }
            }
            if status.refusesWrites { throw ExitCode(Exit.clockAhead) }
        }
    }
}

struct ClockCorrect: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "correct",
        abstract: "Record that the ledger's clock went wrong, and set its time back to this clock.",
        discussion: """
            Appends one signed clock.corrected event, about no subject, with this machine's \
            clock as its time and the newest event's time as the time it corrects. It is the \
            one event whose time may go backwards (Spec/ledger-format.md, Clock corrections). \
            Events before it keep their recorded times, and as-of questions (status --at, \
            prove-state --at, report --at) count each as happening no later than the \
            correction, so a wrong time neither hides later events nor misplaces earlier ones.

            Check this machine's clock first (timedatectl, chronyc tracking): a correction made \
            from a clock that is behind records a wrong time of its own; --dry-run shows the \
            correction and the events it would re-date, and writes nothing. When the ledger's \
            time is not ahead of this clock by more than --clock-skew, nothing is written (exit 0).

            Example:
              consentctl clock correct --dry-run
              consentctl clock correct --reason "NTP server served 2999 on 2026-11-20" --actor ops
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: ArgumentHelp("Why (at most 200 bytes, no personal data: it stays in the log).", valueName: "TEXT"))
    var reason: String?

    @Option(help: "Who acts: the operator's or system's id.")
    var actor: String = "consentctl"

    @Flag(name: .customLong("dry-run"), help: "Show the correction and the events it would re-date; write nothing.")
    var dryRun = false

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let ledger = try root.openLedger()
            let receipt = try ledger.correctClock(reason: reason, actor: actor, dryRun: dryRun)
            if let warning = ledger.takeWarning() { printError("warning: \(warning)") }
            guard let receipt, case .clockCorrected(let correction) = receipt.event.payload else {
                let status = try ledger.clockStatus()
                if output.isJSON {
                    printJSON(.object(["ok": .bool(true), "appended": .bool(false), "ledgerTime": .string(status.ledgerTime.rfc3339), "clock": .string(status.clock.rfc3339)]))
                } else {
                    print("Nothing to correct: the ledger's time, \(status.ledgerTime.rfc3339), is not ahead of this clock, \(status.clock.rfc3339), by more than the allowed skew. Nothing was written.")
                }
                return
            }
            let redated = receipt.redated
            if output.isJSON {
                printJSON(.object(["ok": .bool(true), "appended": .bool(receipt.written), "dryRun": .bool(!receipt.written), "seq": .int(Int64(receipt.event.seq)), "at": .string(receipt.event.at.rfc3339),
                                   "correctedFrom": .string(correction.correctedFrom.rfc3339),
                                   "redated": .object(["first": .int(Int64(redated.lowerBound)), "last": .int(Int64(redated.upperBound)), "count": .int(Int64(redated.count))])]))
            } else {
                let events = "\(redated.count) event\(redated.count == 1 ? "" : "s") (seq \(redated.lowerBound)\(redated.count > 1 ? "–\(redated.upperBound)" : ""))"
                if receipt.written {
                    print("Corrected the ledger's clock at seq \(receipt.event.seq): its time goes back from \(correction.correctedFrom.rfc3339) to \(receipt.event.at.rfc3339).")
                    print("\(events) stamped after \(receipt.event.at.rfc3339) now count as of that time in as-of questions.")
                } else {
                    print("Dry run: a correction at seq \(receipt.event.seq) would set the ledger's time back from \(correction.correctedFrom.rfc3339) to \(receipt.event.at.rfc3339), this clock.")
                    print("It would re-date \(events), stamped after that time. Nothing was written.")
                }
            }
        }
    }
}

func correctionJSON(_ c: ClockCorrections.Correction) -> JSONValue {
    var members: [String: JSONValue] = ["seq": .int(Int64(c.seq)), "at": .string(c.at.rfc3339), "correctedFrom": .string(c.correctedFrom.rfc3339)]
    if let reason = c.reason { members["reason"] = .string(reason) }
    return .object(members)
}

func correctionLine(_ c: ClockCorrections.Correction) -> String {
    "Clock corrected at seq \(c.seq): from \(c.correctedFrom.rfc3339) back to \(c.at.rfc3339)\(c.reason.map { " (\($0))" } ?? "")."
}
