import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports

/// The formats of `report --format`.
enum ReportFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json, csv, html
}

struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "An audit report: events, counts, outdated consents, feature activity, withdrawal times.",
        discussion: """
            Every grant, revocation (by the subject, or cascaded with its cause), re-consent and \
            policy change in the window; counts per feature and consent; subjects with outdated \
            consents; for each subject in scope, the intervals during which each feature was active; \
            and, per feature, the median time from grant to revocation and the share of revocations \
            that came by cascade (GDPR Art. 7(3): withdrawing must be as easy as giving). The report \
            names the checkpoint (tree size and root) it was computed at.

            Formats (--format): text (default, at most 100 columns), json, csv (RFC 4180, one \
            table; the 'section' column names the part of the report; cells that a spreadsheet would \
            run as formulas are neutralised) and html (one self-contained page with a shared time \
            axis for every subject, markers and a legend; it fetches nothing and opens offline). \
            --out FILE writes it to a file; without it, or with -, it goes to standard output.

            --from and --to choose the window of events; --at replays the ledger as it was recorded \
            at that time, so outdated consents and feature activity are those of that moment (the \
            window's end defaults to it). --actor narrows every section to what that actor did and \
            the subjects it acted on. Subjects are listed by id.

            Examples:
              consentctl report --feature timeline --from 2026-01-01 --to 2026-06-30
              consentctl report --format html --out report.html
              consentctl report --at 2026-03-31 --format json
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "Only this subject.")
    var subject: String?

    @Option(help: "Only this feature (key or code).")
    var feature: String?

    @Option(help: ArgumentHelp("Start of the window: a time or a date (its start).", valueName: "TIME"))
    var from: String?

    @Option(help: ArgumentHelp("End of the window: a time or a date (its end).", valueName: "TIME"))
    var to: String?

    @Option(help: ArgumentHelp("The ledger as recorded at TIME: a time or a date (its end).", valueName: "TIME"))
    var at: String?

    @Option(help: "Only what this actor did, and the subjects it acted on.")
    var actor: String?

    @Option(help: ArgumentHelp("text, json, csv or html.", valueName: "FORMAT"))
    var format: ReportFormat?

    @Option(help: ArgumentHelp("Where to write the report; - for standard output (the default).", valueName: "FILE"))
    var out: String?

    @Flag(help: ArgumentHelp("Same as --format json.", visibility: .hidden))
    var json = false

    @Flag(help: ArgumentHelp("Same as --format csv.", visibility: .hidden))
    var csv = false

    @Option(help: ArgumentHelp("Same as --format html --out FILE.", valueName: "FILE", visibility: .hidden))
    var html: String?

    @OptionGroup var zone: ZoneOption

    /// The format asked for, by --format or by one of the older flags.
    var chosenFormat: ReportFormat { format ?? (json ? .json : csv ? .csv : html != nil ? .html : .text) }

    func validate() throws {
        let asked = [format != nil, json, csv, html != nil].filter { $0 }.count
        if asked > 1, !(format == .json && json) && !(format == .csv && csv) && !(format == .html && html != nil) {
            throw ValidationError("choose one format: --format \(ReportFormat.allCases.map(\.rawValue).joined(separator: "|")) (--json, --csv and --html FILE are its older spellings)")
        }
        if html != nil && out != nil { throw ValidationError("give the file once: --format html --out FILE") }
    }

    func run() throws {
        let fromTime = try from.map { text -> Timestamp in
            // A bare date as a start means the start of that day.
            if text.count == 10, let end = Timestamp(rfc3339: text) { return Timestamp(millisecondsSinceEpoch: end.millisecondsSinceEpoch - 86_399_999) }
            return try parseTime(text, option: "--from")
        }
        let toTime = try to.map { try parseTime($0, option: "--to") }
        let atTime = try at.map { try parseTime($0, option: "--at") }
        if let fromTime, let end = toTime ?? atTime, fromTime >= end {
            let option = toTime != nil ? "--to \(to!)" : "--at \(at!)"
            throw ValidationError("--from \(from!) is not before \(option): the window is \(fromTime == end ? "empty" : "inverted")")
        }
        if let toTime, let atTime, toTime > atTime {
            throw ValidationError("--to \(to!) is after --at \(at!): the ledger as recorded at --at has no events after it")
        }
        let format = chosenFormat
        let destination = html ?? out ?? "-"
        try reporting(json: format == .json) {
            if destination != "-" { try checkOutputPath(destination, ledger: root.ledgerDirectory) }
            let ledger = try root.openLedger()
            var scope = ReportScope(from: fromTime, to: toTime, actor: actor, asOf: atTime)
            if let subject {
                guard let ref = try ledger.subjectRef(for: subject) else { throw ConsentError.notFound(.subject, "the ledger has no subject '\(subject)'") }
                scope.subject = ref
            }
            if let feature {
                guard let f = ledger.catalog.feature(named: feature) else {
                    throw ConsentError.invalidRequest("unknown feature '\(feature)'; the catalogue has: \(ledger.catalog.features.map { "\($0.key) (\($0.code))" }.joined(separator: ", "))")
                }
                scope.feature = f.code
            }
            let report = try ledger.auditReport(scope)
            let bytes: [UInt8]
            switch format {
            case .json: bytes = report.jsonDocument.canonicalBytes + [0x0A]
            case .csv: bytes = Array(report.csv.utf8)
            case .html: bytes = Array(report.html(in: displayZone).utf8)
            case .text: bytes = Array(report.text(in: displayZone).utf8)
            }
            let to = try writeOutput(bytes, to: destination)
            // Named by --out (even as -): say what was written, on standard error for -.
            if html != nil || out != nil {
                let (events, subjects) = (report.report.entries.count, report.report.subjects.count)
                reportWritten("Wrote the \(format.rawValue) report (\(events) event\(events == 1 ? "" : "s"), \(subjects) subject\(subjects == 1 ? "" : "s"), checkpoint size \(report.checkpoint.size)) to \(to)", to: to)
            }
        }
    }
}
