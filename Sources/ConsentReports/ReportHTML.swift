import ConsentLedger
import ConsentDomain

/// The audit report as one self-contained HTML page a data-protection officer reads at a glance:
/// a legend first, then one chart with a single time axis shared by every subject (bars while a
/// feature is active, labelled with the policy version agreed to; a marker per event; a dashed
/// line per policy change), a summary card per subject, and the tables, the event table sortable
/// and filterable in the page. The chart is drawn here as inline SVG, so it needs no script; the
/// small inline script only sorts and filters. A Content-Security-Policy forbids every fetch.
extension LedgerReport {
    /// Rows (subject × feature) drawn in the chart; the tables list everything.
    public static let chartedRows = 80

    /// The event types' markers: shape and colour (colour-blind-safe, and never colour alone).
    static let markerStyles: [(type: String, label: String, color: String)] = [
        ("given", "given", "#1b7837"), ("re-consent", "re-consent (a new notice version)", "#2166ac"),
        ("withdrawn", "withdrawn by the subject", "#b2182b"), ("cascade-withdrawn", "cascade-withdrawn (linked to its cause)", "#e08214"),
        ("policy-change", "policy change (new notice version)", "#762a83"),
    ]

    static func marker(_ type: String, x: Double, y: Double) -> String {
        let color = markerStyles.first { $0.type == type }?.color ?? "#333"
        let (cx, cy) = (fmt(x), fmt(y))
        switch type {
        case "given": return "<circle cx=\"\(cx)\" cy=\"\(cy)\" r=\"5\" fill=\"\(color)\"/>"
        case "re-consent": return "<path d=\"M\(fmt(x)) \(fmt(y - 6))L\(fmt(x + 6)) \(cy)L\(cx) \(fmt(y + 6))L\(fmt(x - 6)) \(cy)Z\" fill=\"\(color)\"/>"
        case "withdrawn": return "<path d=\"M\(fmt(x - 5)) \(fmt(y - 5))L\(fmt(x + 5)) \(fmt(y + 5))M\(fmt(x + 5)) \(fmt(y - 5))L\(fmt(x - 5)) \(fmt(y + 5))\" stroke=\"\(color)\" stroke-width=\"3\"/>"
        case "cascade-withdrawn": return "<path d=\"M\(cx) \(fmt(y + 6))L\(fmt(x + 6)) \(fmt(y - 5))L\(fmt(x - 6)) \(fmt(y - 5))Z\" fill=\"\(color)\"/>"
        default: return "<rect x=\"\(fmt(x - 2))\" y=\"\(fmt(y - 7))\" width=\"4\" height=\"14\" fill=\"\(color)\"/>"
        }
    }

    /// A coordinate with one decimal at most, as SVG reads it.
    static func fmt(_ v: Double) -> String {
        let tenths = Int((v * 10).rounded())
        let sign = tenths < 0 ? "-" : ""
        return tenths % 10 == 0 ? String(tenths / 10) : sign + String(abs(tenths) / 10) + "." + String(abs(tenths) % 10)
    }

    public var html: String { html(in: .utc) }

    /// The page, times shown in `zone`.
    public func html(in zone: ZoneRules) -> String {
        let r = report
        let root = Base64.encode(checkpoint.root.bytes)
        func time(_ t: Timestamp) -> String { t.dayMonthYearTime(in: zone) }
        var sections: [String] = []

        // Header.
        sections.append("""
            <header><h1>Consent audit report</h1>
            <p>Ledger <b>\(ledgerName.htmlEscaped)</b> at checkpoint <b>size \(checkpoint.size)</b>, root <code>\(root)</code>. \
            Scope: \(scopeDescription(in: zone).htmlEscaped). Times in \(zone.name.htmlEscaped).</p>
            <p class="verify">Check it: <code>consentctl verify</code> on the ledger, or an export of a subject with \
            <code>consentctl verify-export FILE --key KEY</code>, KEY being the ledger's verifier key; a checkpoint of this size must show this root.</p></header>
            """)

        // Legend.
        var legend = "<section class=\"legend\" id=\"legend\"><h2>Legend</h2><ul>"
        legend += "<li><svg width=\"34\" height=\"16\" aria-hidden=\"true\"><rect x=\"2\" y=\"4\" width=\"30\" height=\"8\" rx=\"2\" fill=\"#a6dba0\"/></svg> feature active (label: the policy version agreed to)</li>"
        for style in Self.markerStyles {
            let symbol = style.type == "policy-change"
                ? "<line x1=\"17\" y1=\"0\" x2=\"17\" y2=\"16\" stroke=\"\(style.color)\" stroke-dasharray=\"3 2\" stroke-width=\"2\"/>"
                : Self.marker(style.type, x: 17, y: 8)
            legend += "<li class=\"key \(style.type)\"><svg width=\"34\" height=\"16\" aria-hidden=\"true\">\(symbol)</svg> \(style.label.htmlEscaped)</li>"
        }
        sections.append(legend + "</ul></section>")

        // The chart: one axis for everyone.
        let subjects = subjectsByID
        var rows: [(subject: SubjectRef, feature: Feature)] = []
        for s in subjects {
            for f in r.catalog.features where r.entries.contains(where: { $0.subject == s && $0.feature == f.code }) || r.intervals.contains(where: { $0.subject == s && $0.feature == f.code }) {
                rows.append((s, f))
            }
        }
        let charted = Array(rows.prefix(Self.chartedRows))
        // Entries are placed at their effective times, the intervals' axis: in a ledger whose
        // clock was corrected, an entry stamped in 2999 sits where it happened, not in 2999.
        func placed(_ e: AuditReport.Entry) -> Int64 { r.effectiveTime(of: e).millisecondsSinceEpoch }
        let times = r.entries.map(placed) + r.intervals.map(\.from.millisecondsSinceEpoch) + r.intervals.compactMap { $0.until?.millisecondsSinceEpoch }
        var start = r.scope.from?.millisecondsSinceEpoch ?? times.min() ?? 0
        var end = r.scope.end?.millisecondsSinceEpoch ?? times.max() ?? start
        if end - start < 120_000 {
            // A history within two minutes (or one instant) still gets a readable axis.
            start -= 60_000
            end += 60_000
        } else {
            let pad = (end - start) / 40
            start -= pad
            end += pad
        }
        let left = 230.0, width = 1060.0, rowHeight = 26.0, top = 34.0
        let height = top + Double(charted.count) * rowHeight + 46
        func x(_ ms: Int64) -> Double { left + (width - left - 16) * Double(min(max(ms, start), end) - start) / Double(end - start) }
        var svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-label=\"consent timelines of every subject on one time axis\">"
        // Axis and ticks.
        let axisY = height - 38
        svg += "<g class=\"axis\"><line x1=\"\(Int(left))\" y1=\"\(Self.fmt(axisY))\" x2=\"\(Int(width - 16))\" y2=\"\(Self.fmt(axisY))\" stroke=\"#444\"/>"
        let ticks = 5
        for i in 0...ticks {
            let ms = start + (end - start) * Int64(i) / Int64(ticks)
            let tx = x(ms)
            svg += "<line x1=\"\(Self.fmt(tx))\" y1=\"\(Int(top - 6))\" x2=\"\(Self.fmt(tx))\" y2=\"\(Self.fmt(axisY + 4))\" stroke=\"#ddd\"/>"
            // Seconds too when the whole axis spans less than ten minutes, so no two ticks read alike.
            let tick = Timestamp(millisecondsSinceEpoch: ms)
            let seconds = end - start < 600_000 ? ":" + String(100 + (zone.local(tick).millisecondsSinceEpoch / 1000) % 60).dropFirst() : ""
            // The date over the time: one line of both is wider than the gap between ticks.
            let label = time(tick) + seconds
            let (day, clock) = label.firstIndex(of: " ").map { (String(label[..<$0]), String(label[label.index(after: $0)...])) } ?? (label, "")
            svg += "<text x=\"\(Self.fmt(tx))\" y=\"\(Self.fmt(axisY + 15))\" text-anchor=\"\(i == 0 ? "start" : i == ticks ? "end" : "middle")\">\(day)<tspan x=\"\(Self.fmt(tx))\" dy=\"1.2em\">\(clock)</tspan></text>"
        }
        svg += "</g>"
        // Policy changes across every row.
        var policyLines = 0
        for e in r.entries where e.kind == .policy {
            let px = x(placed(e))
            let label = e.changes.map(changeText).joined(separator: ", ")
            svg += "<g class=\"policy-line\"><line x1=\"\(Self.fmt(px))\" y1=\"\(Int(top - 12))\" x2=\"\(Self.fmt(px))\" y2=\"\(Self.fmt(axisY))\" stroke=\"#762a83\" stroke-dasharray=\"5 3\" stroke-width=\"2\"/>"
            svg += "<text x=\"\(Self.fmt(px + 4))\" y=\"\(Int(top - 16))\" class=\"policy-label\">\((label.isEmpty ? "new catalogue" : label).htmlEscaped)</text><title>seq \(e.seq), \(time(e.at)): policy change \(label.htmlEscaped)</title></g>"
            policyLines += 1
        }
        var bars = 0, markers = 0, links = 0
        for (index, row) in charted.enumerated() {
            let y = top + Double(index) * rowHeight
            let mid = y + rowHeight / 2
            if index % 2 == 1 { svg += "<rect x=\"0\" y=\"\(Self.fmt(y))\" width=\"\(Int(width))\" height=\"\(Int(rowHeight))\" fill=\"#f6f6f6\"/>" }
            svg += "<text x=\"6\" y=\"\(Self.fmt(mid + 4))\" class=\"row-label\"><tspan font-weight=\"600\">\(String(subjectID(row.subject).prefix(22)).htmlEscaped)</tspan> · \(row.feature.name.htmlEscaped)</text>"
            for interval in r.intervals where interval.subject == row.subject && interval.feature == row.feature.code {
                let x0 = x(interval.from.millisecondsSinceEpoch), x1 = x(interval.until?.millisecondsSinceEpoch ?? end)
                // The version of the required consent grant that (re)activated the feature.
                let grant = r.entries.last { $0.subject == row.subject && $0.feature == row.feature.code && ($0.kind == .given || $0.kind == .reconsent) && placed($0) <= interval.from.millisecondsSinceEpoch && row.feature.consent(code: $0.consent ?? "")?.isRequired == true }
                let version = grant?.version.map { "v" + $0 } ?? ""
                svg += "<g class=\"bar\"><rect x=\"\(Self.fmt(x0))\" y=\"\(Self.fmt(y + 6))\" width=\"\(Self.fmt(max(3, x1 - x0)))\" height=\"\(Int(rowHeight - 12))\" rx=\"3\" fill=\"#a6dba0\"/>"
                if x1 - x0 > 34, !version.isEmpty { svg += "<text x=\"\(Self.fmt(x0 + 5))\" y=\"\(Self.fmt(mid + 4))\" class=\"version\">\(version.htmlEscaped)</text>" }
                svg += "<title>\(row.feature.name.htmlEscaped) active from \(time(interval.from))\(interval.until.map { " until \(time($0))" } ?? ", still active")\(version.isEmpty ? "" : " (\(version))")</title></g>"
                bars += 1
            }
            for e in r.entries where e.subject == row.subject && e.feature == row.feature.code {
                let ex = x(placed(e))
                var title = "seq \(e.seq), \(time(e.at)): \(e.kind.rawValue) \(featureKey(e.feature))/\(e.consent ?? "") by \(e.actor)"
                if r.effectiveTime(of: e) != e.at { title += " (by \(time(r.effectiveTime(of: e))), after a clock correction)" }
                if let v = e.version { title += ", v\(v)" }
                if let t = e.evidence.effectiveAt { title += ", agreed \(time(t))" }
                if let c = e.evidence.channel { title += ", \(c.rawValue)" }
                if e.kind == .cascade, let cause = e.cause {
                    title += ", caused by seq \(cause)"
                    // The cascade's link to its cause: an arc from the cause's marker, and the
                    // marker itself links to the cause's row in the event table.
                    if let causeEvent = r.entries.first(where: { $0.seq == cause }) {
                        let cx = x(placed(causeEvent))
                        svg += "<path class=\"cause-link\" d=\"M\(Self.fmt(cx)) \(Self.fmt(mid - 6))Q\(Self.fmt((cx + ex) / 2 + 8)) \(Self.fmt(y - 2)) \(Self.fmt(ex + 8)) \(Self.fmt(mid - 4))\" fill=\"none\" stroke=\"#e08214\" stroke-width=\"1.5\"/>"
                        links += 1
                    }
                }
                let offset = e.kind == .cascade ? 8.0 : 0
                svg += "<a href=\"#event-\(e.cause ?? e.seq)\"><g class=\"marker \(e.kind.rawValue)\">\(Self.marker(e.kind.rawValue, x: ex + offset, y: mid))<title>\(title.htmlEscaped)</title></g></a>"
                markers += 1
            }
        }
        svg += "</svg>"
        var chart = "<section class=\"timeline\" id=\"timeline\"><h2>Timeline</h2>"
        chart += charted.isEmpty ? "<p>No subject in scope.</p>" : "<div class=\"chart-box\">\(svg)</div>"
        if rows.count > charted.count { chart += "<p>\(rows.count - charted.count) more subject/feature rows are in the tables below; narrow the scope with --subject or --feature to chart them.</p>" }
        sections.append(chart + "</section>")

        // Summary cards.
        var cards = "<section class=\"cards\" id=\"subjects\"><h2>Subjects</h2>"
        for s in subjects {
            var lines: [String] = []
            for f in r.catalog.features {
                let events = r.entries.filter { $0.subject == s && $0.feature == f.code }
                guard !events.isEmpty else { continue }
                var parts: [String] = []
                for e in events {
                    let consent = f.consent(code: e.consent ?? "").map { $0.isRequired ? "\(f.name)" : "\(f.name) \($0.code)" } ?? (e.consent ?? "")
                    switch e.kind {
                    case .given: parts.append("gave \(consent) under v\(e.version ?? "?") on \(time(e.evidence.effectiveAt ?? e.at))")
                    case .reconsent: parts.append("consented again to \(consent) under v\(e.version ?? "?") on \(time(e.at))")
                    case .withdrawn: parts.append("withdrew \(consent) on \(time(e.at))")
                    case .cascade: parts.append("lost \(consent) by cascade on \(time(e.at))")
                    case .policy, .erased: break
                    }
                }
                let active = r.intervals.contains { $0.subject == s && $0.feature == f.code && $0.until == nil }
                let outdated = r.outdated.filter { $0.subject == s && $0.feature == f.code }.map { "\($0.consent) outdated (v\($0.givenVersion), now v\($0.currentVersion))" }
                lines.append("<li><b>\(f.name.htmlEscaped)</b> (\(active ? "active" : "inactive")\(outdated.isEmpty ? "" : "; " + outdated.joined(separator: ", ").htmlEscaped)): \(parts.joined(separator: "; ").htmlEscaped).</li>")
            }
            if let seq = r.erased[s], let erasure = r.entries.first(where: { $0.seq == seq }) {
                lines.append("<li><b>Erased</b> on \(time(erasure.at).htmlEscaped) (seq \(seq)): the subject's record is destroyed; these events can no longer be linked to a person.</li>")
            } else if r.erased[s] != nil {
                lines.append("<li><b>Erased</b>: the subject's record is destroyed; these events can no longer be linked to a person.</li>")
            }
            cards += "<article class=\"card\"><h3>\(subjectID(s).htmlEscaped)\(r.erased[s] != nil ? " (erased)" : "")</h3><ul>\(lines.joined())</ul></article>"
        }
        sections.append(cards + "</section>")

        // Tables.
        sections.append(table("Withdrawal (GDPR Art. 7(3): as easy as giving)", "withdrawal", ["Feature", "Median grant → withdrawal", "Withdrawals", "By cascade"], r.withdrawals.map {
            [featureKey($0.feature), Self.duration($0.medianGrantToRevocationMs), String($0.revocations), $0.cascadeShare.map(Self.percent) ?? "–"]
        }))
        sections.append(table("Counts per consent", "counts", ["Consent", "Given", "Re-consent", "Withdrawn", "Cascade-withdrawn"], r.counts.map {
            ["\(featureKey($0.feature))/\($0.consent)", String($0.given), String($0.reconsent), String($0.withdrawn), String($0.cascadeWithdrawn)]
        }))
        sections.append(table("Subjects with outdated consents", "outdated", ["Subject", "Consent", "Given version", "Current version"], outdatedByID.map {
            [subjectID($0.subject), "\(featureKey($0.feature))/\($0.consent)", $0.givenVersion, $0.currentVersion]
        }))
        var events = "<section id=\"events\"><h2>Events</h2><p class=\"filters\"><label>Filter <input id=\"filter\" type=\"search\" placeholder=\"subject, consent, actor…\"></label> "
        events += "<label>Type <select id=\"type-filter\"><option value=\"\">all</option>" + Self.markerStyles.map { "<option>\($0.type)</option>" }.joined() + "</select></label> <span id=\"shown\"></span></p>"
        events += "<table class=\"events\"><thead><tr>" + ["Seq", "At", "Type", "Subject", "Consent", "Actor", "Note"].enumerated().map { "<th data-column=\"\($0.offset)\" tabindex=\"0\">\($0.element)</th>" }.joined() + "</tr></thead><tbody>"
        for e in r.entries {
            var note: [String] = []
            if let v = e.version { note.append("v\(v)") }
            if let c = e.cause { note.append(e.kind == .reconsent ? "renews seq \(c)" : "caused by seq \(c)") }
            note += e.changes.map(changeText)
            if let t = e.evidence.effectiveAt { note.append("agreed \(time(t))") }
            if let c = e.evidence.channel { note.append(c.rawValue) }
            if let l = e.evidence.noticeLanguage { note.append("notice \(l)") }
            if let ref = e.evidence.reference { note.append("evidence \(ref)") } else if e.evidence.isReferenceSealed { note.append("evidence sealed") }
            let consent = e.feature.map { "\(featureKey($0))/\(e.consent ?? "")" } ?? ""
            let causeLink = e.cause.map { " <a href=\"#event-\($0)\">→ seq \($0)</a>" } ?? ""
            events += "<tr id=\"event-\(e.seq)\" data-type=\"\(e.kind.rawValue)\"><td data-sort=\"\(e.seq)\">\(e.seq)</td><td data-sort=\"\(r.effectiveTime(of: e).millisecondsSinceEpoch)\">\(time(e.at))</td><td>\(e.kind.rawValue)</td><td>\(subjectID(e.subject).htmlEscaped)</td><td>\(consent.htmlEscaped)</td><td>\(e.actor.htmlEscaped)</td><td>\(note.joined(separator: ", ").htmlEscaped)\(causeLink)</td></tr>"
        }
        events += "</tbody></table></section>"
        sections.append(events)
        sections.append(table("Feature activity", "activity", ["Subject", "Feature", "Active from", "Until"], intervalsByID.map {
            [subjectID($0.subject), featureKey($0.feature), time($0.from), $0.until.map(time) ?? "still active"]
        }))

        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Consent audit report: \(ledgerName.htmlEscaped)</title>
            <script>window.reportErrors = []; window.addEventListener("error", function (e) { window.reportErrors.push(String(e.message)); });</script>
            <style>
            body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em 2em; color: #1a1a1a; max-width: 1120px; }
            h1 { font-size: 1.6em; margin: 0 0 .3em; } h2 { font-size: 1.2em; margin: 1.4em 0 .4em; }
            code { font-size: 12px; overflow-wrap: anywhere; }
            .legend ul { list-style: none; padding: 0; margin: 0; display: flex; flex-wrap: wrap; gap: 4px 18px; }
            .legend li { display: flex; align-items: center; gap: 4px; }
            .chart-box { overflow-x: auto; border: 1px solid #ddd; }
            svg.chart text { font: 11px system-ui, sans-serif; fill: #333; }
            svg.chart text.version { font-weight: 600; fill: #1b4d1b; }
            svg.chart text.policy-label { fill: #762a83; font-weight: 600; }
            .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 10px; }
            .cards h2 { grid-column: 1 / -1; }
            .card { border: 1px solid #ddd; border-radius: 6px; padding: 6px 12px; }
            .card h3 { margin: .2em 0; font-size: 1em; } .card ul { margin: 0; padding-left: 1.1em; }
            table { border-collapse: collapse; margin: .3em 0 1em; width: 100%; }
            th, td { border-bottom: 1px solid #e3e3e3; padding: 3px 8px; text-align: left; vertical-align: top; }
            th { background: #f2f2f2; } table.events th { cursor: pointer; user-select: none; }
            table.events th[aria-sort="ascending"]::after { content: " ▲"; } table.events th[aria-sort="descending"]::after { content: " ▼"; }
            tr:target { background: #fff3c4; }
            table.events td:nth-child(2) { white-space: nowrap; }
            @media print { .filters { display: none; } .chart-box { overflow: visible; border: none; } a { color: inherit; text-decoration: none; } }
            </style>
            </head>
            <body data-charts="\(charted.count)" data-bars="\(bars)" data-markers="\(markers)" data-policy-lines="\(policyLines)" data-cause-links="\(links)" data-cards="\(subjects.count)" data-axis="shared">
            \(sections.joined(separator: "\n"))
            <script>
            (function () {
              try {
                var table = document.querySelector("table.events"), body = table.tBodies[0];
                var rows = Array.prototype.slice.call(body.rows);
                var filter = document.getElementById("filter"), type = document.getElementById("type-filter"), shown = document.getElementById("shown");
                function key(row, column) { var cell = row.cells[column]; var s = cell.getAttribute("data-sort"); return s === null ? cell.textContent.toLowerCase() : Number(s); }
                function sortBy(column, descending) {
                  rows.sort(function (a, b) { var x = key(a, column), y = key(b, column); return (x < y ? -1 : x > y ? 1 : Number(a.cells[0].textContent) - Number(b.cells[0].textContent)) * (descending ? -1 : 1); });
                  rows.forEach(function (row) { body.appendChild(row); });
                  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) { if (i === column) th.setAttribute("aria-sort", descending ? "descending" : "ascending"); else th.removeAttribute("aria-sort"); });
                }
                function apply() {
                  var words = filter.value.toLowerCase().trim(), wanted = type.value, count = 0;
                  rows.forEach(function (row) { var ok = (!wanted || row.getAttribute("data-type") === wanted) && (!words || row.textContent.toLowerCase().indexOf(words) >= 0); row.hidden = !ok; if (ok) count++; });
                  shown.textContent = count + " of " + rows.length + " events";
                  document.body.setAttribute("data-table-rows", String(count));
                  document.body.setAttribute("data-first-row", rows.filter(function (r) { return !r.hidden; }).map(function (r) { return r.cells[0].textContent; })[0] || "");
                }
                Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
                  function go() { sortBy(i, th.getAttribute("aria-sort") === "ascending"); apply(); }
                  th.addEventListener("click", go); th.addEventListener("keydown", function (e) { if (e.key === "Enter") go(); });
                });
                filter.addEventListener("input", apply); type.addEventListener("change", apply);
                // A view can be linked: #sort=COLUMN[:desc]&filter=WORDS&type=TYPE.
                var params = {}; location.hash.replace(/^#/, "").split("&").forEach(function (p) { var kv = p.split("="); if (kv.length === 2) params[kv[0]] = decodeURIComponent(kv[1]); });
                if (params.sort) { var s = params.sort.split(":"); sortBy(Number(s[0]), s[1] === "desc"); }
                if (params.filter) filter.value = params.filter;
                if (params.type) type.value = params.type;
                apply();
                var sections = Array.prototype.slice.call(document.body.children).filter(function (e) { return e.tagName === "SECTION" || e.tagName === "HEADER"; });
                document.body.setAttribute("data-legend-position", String(sections.indexOf(document.getElementById("legend"))));
                document.body.setAttribute("data-chart-position", String(sections.indexOf(document.getElementById("timeline"))));
                document.body.setAttribute("data-rendered", "ok");
              } catch (err) {
                window.reportErrors.push(String(err));
                document.body.setAttribute("data-rendered", "error");
              }
              document.body.setAttribute("data-errors", window.reportErrors.join(" | "));
            })();
            </script>
            </body>
            </html>

            """
    }

    private func table(_ title: String, _ id: String, _ header: [String], _ rows: [[String]]) -> String {
        var out = "<section id=\"\(id)\"><h2>\(title.htmlEscaped)</h2>"
        guard !rows.isEmpty else { return out + "<p>None.</p></section>" }
        out += "<table><thead><tr>" + header.map { "<th>\($0.htmlEscaped)</th>" }.joined() + "</tr></thead><tbody>"
        for row in rows { out += "<tr>" + row.map { "<td>\($0.htmlEscaped)</td>" }.joined() + "</tr>" }
        return out + "</tbody></table></section>"
    }
}
