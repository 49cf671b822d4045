import ArgumentParser
import ConsentDomain
import ConsentLedger
import ConsentReports

struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "An audit report: events, counts, outdated consents, feature activity, withdrawal times.",
        discussion: """
            Every grant, revocation (by the subject, or cascaded with its cause), re-consent and \
            policy change in the window; counts per feature and consent; subjects with outdated \
            consents; for each subject in scope, the intervals during which each feature was active; \
            and, per feature, the median time from grant to revocation and the share of revocations \
            that came by cascade (GDPR Art. 7(3): withdrawing must be as easy as giving). The report \
            names the checkpoint (tree size and root) it was computed at.

            Formats: aligned text (default), --json, --csv, or --html FILE (one self-contained page \
            with a timeline chart per subject; it fetches nothing and opens offline).

            Example:
              consentctl report --feature timeline --from 2026-01-01 --to 2026-06-30 \\
                --html h1.html
            """
    )

    @ParentCommand var root: ConsentCtl

    @Option(help: "Only this subject.")
    var subject: String?

    @Option(help: "Only this feature (key or code).")
    var feature: String?

    @Option(help: ArgumentHelp("Start of the window (RFC 3339 or a date).", valueName: "TIME"))
    var from: String?

    @Option(help: ArgumentHelp("End of the window; the state is replayed up to it (RFC 3339 or a date, meaning its end).", valueName: "TIME"))
    var to: String?

    @Option(help: "Only events by this actor.")
    var actor: String?

    @Flag(help: "Print JSON.")
    var json = false

    @Flag(help: "Print CSV (RFC 4180, one table; the 'section' column names the part of the report).")
    var csv = false

    @Option(help: ArgumentHelp("Write a self-contained HTML page to FILE; - for standard output.", valueName: "FILE"))
    var html: String?

    func validate() throws {
        if [json, csv, html != nil].filter({ $0 }).count > 1 { throw ValidationError("choose one of --json, --csv and --html") }
    }

    func run() throws {
        let fromTime = try from.map { text -> Timestamp in
            // A bare date as a start means the start of that day.
            if text.count == 10, let end = Timestamp(rfc3339: text) { return Timestamp(millisecondsSinceEpoch: end.millisecondsSinceEpoch - 86_399_999) }
            return try parseTime(text, option: "--from")
        }
        let toTime = try to.map { try parseTime($0, option: "--to") }
        if let fromTime, let toTime, fromTime >= toTime {
            throw ValidationError("--from \(from!) is not before --to \(to!): the window is \(fromTime == toTime ? "empty" : "inverted")")
        }
        try reporting(json: json) {
            if let html { try checkOutputPath(html, ledger: root.ledgerDirectory) }
            let ledger = try root.openLedger()
            var scope = ReportScope(from: fromTime, to: toTime, actor: actor)
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
            if json {
                printJSON(report.json)
            } else if csv {
                print(report.csv, terminator: "")
            } else if let html {
                let to = try writeOutput(Array(report.html.utf8), to: html)
                reportWritten("Wrote the report (\(report.report.entries.count) events, \(report.report.subjects.count) subjects, checkpoint size \(report.checkpoint.size)) to \(to)", to: to)
            } else {
                print(report.text, terminator: "")
            }
        }
    }
}
