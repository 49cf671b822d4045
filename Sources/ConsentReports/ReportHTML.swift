import ConsentLedger
import ConsentDomain

/// The audit report as one self-contained HTML page: inline CSS and inline SVG timelines, no
/// script or style from anywhere else, so it opens offline and fetches nothing.
extension LedgerReport {
    /// Timelines are drawn for at most this many subjects; the tables list all of them.
    public static let chartedSubjects = 25

    public var html: String {
        let r = report
        let root = Base64.encode(checkpoint.root.bytes)
        var body = ""
        body += "<h1>Consent audit report</h1>\n"
        body += "<p class=\"checkpoint\">Ledger <b>\(ledgerName.htmlEscaped)</b>, computed at checkpoint <b>size \(checkpoint.size)</b>, root <code>\(root)</code>. "
        body += "Verify it against a signed checkpoint of the same size with <code>consentctl checkpoint</code> and <code>consentctl verify-export</code>.</p>\n"
        body += "<pre class=\"scope\">\(text.split(separator: "\n").prefix(2).joined(separator: "\n").htmlEscaped)</pre>\n"
        body += "<h2>Timelines</h2>\n"
        let charted = Array(r.subjects.prefix(Self.chartedSubjects))
        if charted.isEmpty { body += "<p>No subject in scope.</p>\n" }
        for subject in charted { body += timeline(subject) }
        if r.subjects.count > charted.count {
            body += "<p>\(r.subjects.count - charted.count) more subjects are in the tables below; narrow the scope with --subject to chart one.</p>\n"
        }
        body += section("Withdrawal (GDPR Art. 7(3): as easy as giving)", ["Feature", "Median grant → revocation", "Revocations", "By cascade"], r.withdrawals.map {
            [featureKey($0.feature), Self.duration($0.medianGrantToRevocationMs), String($0.revocations), $0.cascadeShare.map(Self.percent) ?? "-"]
        })
        body += section("Counts per consent", ["Feature", "Consent", "Given", "Re-consent", "Withdrawn", "Cascade"], r.counts.map {
            [featureKey($0.feature), $0.consent, String($0.given), String($0.reconsent), String($0.withdrawn), String($0.cascadeWithdrawn)]
        })
        body += section("Subjects with outdated consents", ["Subject", "Feature", "Consent", "Given version", "Current version"], r.outdated.map {
            [subjectID($0.subject), featureKey($0.feature), $0.consent, $0.givenVersion, $0.currentVersion]
        })
        body += section("Feature activity", ["Subject", "Feature", "Active from", "Until"], r.intervals.map {
            [subjectID($0.subject), featureKey($0.feature), $0.from.rfc3339, $0.until?.rfc3339 ?? "still active"]
        })
        body += section("Events", ["Seq", "At (UTC)", "Type", "Subject", "Feature", "Consent", "Actor", "Version", "Cause"], r.entries.map {
            [String($0.seq), $0.at.rfc3339, $0.kind.rawValue, subjectID($0.subject), featureKey($0.feature), $0.consent ?? "", $0.actor, ($0.version ?? $0.changes.map(changeText).joined(separator: " ")), $0.cause.map { String($0) } ?? ""]
        })
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <title>Consent audit report: \(ledgerName.htmlEscaped)</title>
            <script>window.reportErrors = []; window.addEventListener("error", function (e) { window.reportErrors.push(String(e.message)); });</script>
            <style>
            body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
            table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
            th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
            th { background: #f0f0f0; }
            code { font-size: 12px; }
            svg.timeline { display: block; margin: 0.5em 0 1.5em; background: #fafafa; border: 1px solid #ddd; }
            svg text { font: 11px system-ui, sans-serif; fill: #333; }
            .legend span { display: inline-block; padding: 0 8px; margin-right: 8px; color: #fff; }
            </style>
            </head>
            <body>
            \(body)
            <p class="legend"><span style="background:#2e7d32">feature active</span><span style="background:#1565c0">required consent given</span><span style="background:#64b5f6">optional consent given</span></p>
            <script>
            (function () {
              var charts = document.querySelectorAll("svg.timeline");
              var bars = document.querySelectorAll("svg.timeline rect.bar");
              document.body.setAttribute("data-charts", String(charts.length));
              document.body.setAttribute("data-bars", String(bars.length));
              document.body.setAttribute("data-errors", window.reportErrors.join(" | "));
              document.body.setAttribute("data-rendered", "ok");
            })();
            </script>
            </body>
            </html>

            """
    }

    private func section(_ title: String, _ header: [String], _ rows: [[String]]) -> String {
        var out = "<h2>\(title.htmlEscaped)</h2>\n"
        guard !rows.isEmpty else { return out + "<p>None.</p>\n" }
        out += "<table>\n<tr>" + header.map { "<th>\($0.htmlEscaped)</th>" }.joined() + "</tr>\n"
        for row in rows { out += "<tr>" + row.map { "<td>\($0.htmlEscaped)</td>" }.joined() + "</tr>\n" }
        return out + "</table>\n"
    }

    /// One subject's timeline: a row per feature (when it was active) and per consent (when it
    /// was given), over the span of the report.
    private func timeline(_ subject: SubjectRef) -> String {
        let r = report
        let spans = r.givenSpans.filter { $0.subject == subject }
        let intervals = r.intervals.filter { $0.subject == subject }
        let times = spans.map(\.from.millisecondsSinceEpoch) + intervals.map(\.from.millisecondsSinceEpoch) + spans.compactMap { $0.until?.millisecondsSinceEpoch } + intervals.compactMap { $0.until?.millisecondsSinceEpoch }
        let start = r.scope.from?.millisecondsSinceEpoch ?? times.min() ?? 0
        var end = r.scope.to?.millisecondsSinceEpoch ?? (r.entries.last.map { $0.at.millisecondsSinceEpoch } ?? times.max() ?? start)
        end = max(end, times.max() ?? end, start + 1)
        let label = 230.0, width = 900.0, row = 20.0
        let features = r.catalog.features.filter { r.scope.feature == nil || $0.code == r.scope.feature }
        let rows = features.reduce(0) { $0 + 1 + $1.consents.count }
        let height = Double(rows) * row + 30
        func x(_ ms: Int64) -> Double { label + (width - label - 10) * Double(min(max(ms, start), end) - start) / Double(end - start) }
        func bar(_ y: Double, _ from: Timestamp, _ until: Timestamp?, _ color: String, _ title: String) -> String {
            let x0 = x(from.millisecondsSinceEpoch), x1 = x(until?.millisecondsSinceEpoch ?? end)
            return "<rect class=\"bar\" x=\"\(Int(x0))\" y=\"\(Int(y + 3))\" width=\"\(max(2, Int(x1 - x0)))\" height=\"\(Int(row - 6))\" fill=\"\(color)\"><title>\(title.htmlEscaped)</title></rect>"
        }
        var svg = "<h3>\(subjectID(subject).htmlEscaped)</h3>\n<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\" aria-label=\"consent timeline of \(subjectID(subject).htmlEscaped)\">"
        var y = 0.0
        for feature in features {
            svg += "<text x=\"4\" y=\"\(Int(y + 14))\" font-weight=\"bold\">\(feature.name.htmlEscaped) active</text>"
            for i in intervals where i.feature == feature.code {
                svg += bar(y, i.from, i.until, "#2e7d32", "\(feature.key) active from \(i.from.rfc3339)" + (i.until.map { " until \($0.rfc3339)" } ?? ""))
            }
            y += row
            for consent in feature.consents {
                svg += "<text x=\"14\" y=\"\(Int(y + 14))\">\(consent.code.htmlEscaped)\(consent.isRequired ? " (required)" : "")</text>"
                for s in spans where s.feature == feature.code && s.consent == consent.code {
                    svg += bar(y, s.from, s.until, consent.isRequired ? "#1565c0" : "#64b5f6", "\(feature.key)/\(consent.code) given \(s.from.rfc3339)" + (s.until.map { " until \($0.rfc3339)" } ?? ""))
                }
                y += row
            }
        }
        svg += "<text x=\"\(Int(label))\" y=\"\(Int(height - 8))\">\(Timestamp(millisecondsSinceEpoch: start).rfc3339)</text>"
        svg += "<text x=\"\(Int(width - 10))\" y=\"\(Int(height - 8))\" text-anchor=\"end\">\(Timestamp(millisecondsSinceEpoch: end).rfc3339)</text>"
        return svg + "</svg>\n"
    }
}
