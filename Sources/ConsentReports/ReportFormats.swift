import ConsentLedger
import ConsentDomain

/// The audit report as JSON, CSV, aligned text and one self-contained HTML page.
extension LedgerReport {
    static func seconds(_ ms: Int64?) -> JSONValue { ms.map { .int($0 / 1000) } ?? .null }

    /// The report as JSON (the members `report --format json` prints).
    public var jsonDocument: JSONDocument { JSONDocument(json) }

    /// Subjects in id order (the report itself orders them by pseudonym).
    var outdatedByID: [AuditReport.Outdated] { report.outdated.sorted { (subjectID($0.subject), $0.feature) < (subjectID($1.subject), $1.feature) } }
    var intervalsByID: [AuditReport.Interval] {
        report.intervals.sorted { (subjectID($0.subject), $0.feature, $0.from) < (subjectID($1.subject), $1.feature, $1.from) }
    }
    var subjectsByID: [SubjectRef] { report.subjects.sorted { subjectID($0) < subjectID($1) } }

    /// A policy change for people: "timeline/required 1.0→2.0".
    func changeText(_ c: AuditReport.PolicyChange) -> String { "\(featureKey(c.feature))/\(c.consent) \(c.from ?? "new")→\(c.to)" }

    package var json: JSONValue {
        let r = report
        var scope: [String: JSONValue] = [:]
        if let s = r.scope.subject { scope["subject"] = .string(subjectID(s)) }
        if let f = r.scope.feature { scope["feature"] = .string(featureKey(f)) }
        if let t = r.scope.from { scope["from"] = .string(t.rfc3339) }
        if let t = r.scope.to { scope["to"] = .string(t.rfc3339) }
        if let t = r.scope.asOf { scope["at"] = .string(t.rfc3339) }
        if let a = r.scope.actor { scope["actor"] = .string(a) }
        return .object([
            "ledger": .string(ledgerName),
            "checkpoint": .object(["origin": .string(checkpoint.origin), "size": .int(checkpoint.size), "root": .string(Base64.encode(checkpoint.root.bytes))]),
            "scope": .object(scope),
            "features": .array(r.catalog.features.map { f in
                .object(["key": .string(f.key), "code": .int(Int64(f.code)), "name": .string(f.name), "consents": .array(f.consents.map { c in
                    .object(["code": .string(c.code), "name": .string(c.name), "required": .bool(c.isRequired), "version": .string(c.version)])
                })])
            }),
            "events": .array(r.entries.map { e in
                var m: [String: JSONValue] = ["seq": .int(Int64(e.seq)), "at": .string(e.at.rfc3339), "type": .string(e.kind.rawValue), "actor": .string(e.actor)]
                if let s = e.subject { m["subject"] = .string(subjectID(s)) }
                if let f = e.feature { m["feature"] = .string(featureKey(f)) }
                if let c = e.consent { m["consent"] = .string(c) }
                if let v = e.version { m["version"] = .string(v) }
                if let c = e.cause { m[e.kind == .reconsent ? "renews" : "cause"] = .int(Int64(c)) }
                m.merge(ListingJSON.evidenceMembers(e.evidence)) { $1 }
                if e.kind == .policy {
                    m["catalogue"] = .string(e.catalogueVersion ?? "")
                    m["changes"] = .array(e.changes.map { c in
                        .object(["feature": .string(featureKey(c.feature)), "consent": .string(c.consent), "from": c.from.map { .string($0) } ?? .null, "to": .string(c.to)])
                    })
                }
                return .object(m)
            }),
            "counts": .array(r.counts.map {
                .object(["feature": .string(featureKey($0.feature)), "consent": .string($0.consent), "given": .int(Int64($0.given)), "re-consent": .int(Int64($0.reconsent)), "withdrawn": .int(Int64($0.withdrawn)), "cascade-withdrawn": .int(Int64($0.cascadeWithdrawn))])
            }),
            "outdated": .array(outdatedByID.map {
                .object(["subject": .string(subjectID($0.subject)), "feature": .string(featureKey($0.feature)), "consent": .string($0.consent), "givenVersion": .string($0.givenVersion), "currentVersion": .string($0.currentVersion)])
            }),
            "activeIntervals": .array(intervalsByID.map {
                .object(["subject": .string(subjectID($0.subject)), "feature": .string(featureKey($0.feature)), "from": .string($0.from.rfc3339), "until": $0.until.map { .string($0.rfc3339) } ?? .null])
            }),
            "withdrawal": .array(r.withdrawals.map {
                .object([
                    "feature": .string(featureKey($0.feature)), "medianGrantToWithdrawalSeconds": Self.seconds($0.medianGrantToRevocationMs),
                    // The share by cascade is cascadeWithdrawals / withdrawals: two exact counts
                    // rather than a rounded fraction.
                    "withdrawals": .int(Int64($0.revocations)), "cascadeWithdrawals": .int(Int64($0.cascades)),
                ])
            }),
        ])
    }

    static func percent(_ share: Double) -> String {
        let tenths = Int((share * 1000).rounded())
        return "\(tenths / 10).\(tenths % 10)%"
    }

    static func duration(_ ms: Int64?) -> String {
        guard let ms else { return "-" }
        let s = ms / 1000
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) min" }
        if s < 172_800 { return "\(s / 3600) h" }
        return "\(s / 86400) d"
    }

    // MARK: - CSV (RFC 4180)

    public static let csvHeader = ["section", "seq", "at", "until", "type", "subject", "feature", "consent", "actor", "version", "cause", "effectiveAt", "channel", "noticeLanguage", "evidence", "given", "re-consent", "withdrawn", "cascade-withdrawn", "value"]

    /// One table, one header; the `section` column says which part of the report a row is.
    public var csv: String {
        let r = report
        var rows: [[String]] = [Self.csvHeader]
        func row(_ section: String, _ values: [String: String]) {
            rows.append(Self.csvHeader.map { $0 == "section" ? section : values[$0] ?? "" })
        }
        row("checkpoint", ["value": "\(checkpoint.origin) \(checkpoint.size) \(Base64.encode(checkpoint.root.bytes))"])
        for e in r.entries {
            row("event", [
                "seq": String(e.seq), "at": e.at.rfc3339, "type": e.kind.rawValue, "subject": subjectID(e.subject), "feature": featureKey(e.feature), "consent": e.consent ?? "",
                "actor": e.actor, "version": e.version ?? "", "cause": e.cause.map(String.init) ?? "",
                "effectiveAt": e.evidence.effectiveAt?.rfc3339 ?? "", "channel": e.evidence.channel?.rawValue ?? "", "noticeLanguage": e.evidence.noticeLanguage ?? "", "evidence": e.evidence.reference ?? (e.evidence.isReferenceSealed ? "(sealed)" : ""),
                "value": e.changes.map(changeText).joined(separator: " "),
            ])
        }
        for c in r.counts {
            row("count", ["feature": featureKey(c.feature), "consent": c.consent, "given": String(c.given), "re-consent": String(c.reconsent), "withdrawn": String(c.withdrawn), "cascade-withdrawn": String(c.cascadeWithdrawn)])
        }
        for o in outdatedByID {
            row("outdated", ["subject": subjectID(o.subject), "feature": featureKey(o.feature), "consent": o.consent, "version": o.givenVersion, "value": o.currentVersion])
        }
        for i in intervalsByID {
            row("active", ["subject": subjectID(i.subject), "feature": featureKey(i.feature), "at": i.from.rfc3339, "until": i.until?.rfc3339 ?? ""])
        }
        for w in r.withdrawals {
            row("withdrawal", ["feature": featureKey(w.feature), "withdrawn": String(w.revocations), "cascade-withdrawn": String(w.cascades), "value": w.medianGrantToRevocationMs.map { String($0 / 1000) } ?? ""])
        }
        return rows.map { $0.map(Self.csvField).joined(separator: ",") }.joined(separator: "\r\n") + "\r\n"
    }

    /// One CSV cell (RFC 4180), neutralised against formula injection as OWASP advises: a cell
    /// that starts with `=`, `+`, `-`, `@`, a tab or a carriage return (an actor, a subject id)
    /// gets a leading `'`, so a spreadsheet shows it as text instead of running it.
    static func csvField(_ s: String) -> String {
        var cell = s
        if let first = s.unicodeScalars.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) { cell = "'" + s }
        guard cell.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return cell }
        return "\"" + cell.replacingAll("\"", with: "\"\"") + "\""
    }

    // MARK: - Text

    /// The widest line of the text report: tables shorten their free-text columns (subject,
    /// actor, note) with "…" to fit.
    public static let textWidth = 100

    /// The report's scope for people: "subject alice, from 01.01.2026 00:00", or "everything".
    func scopeDescription(in zone: ZoneRules) -> String {
        let s = report.scope
        var parts: [String] = []
        if let ref = s.subject { parts.append("subject \(subjectID(ref))") }
        if let f = s.feature { parts.append("feature \(featureKey(f))") }
        if let t = s.from { parts.append("from \(t.dayMonthYearTime(in: zone))") }
        if let t = s.to { parts.append("to \(t.dayMonthYearTime(in: zone))") }
        if let t = s.asOf { parts.append("as recorded at \(t.dayMonthYearTime(in: zone))") }
        if let a = s.actor { parts.append("actor \(a)") }
        return parts.isEmpty ? "everything" : parts.joined(separator: ", ")
    }

    /// Aligned tables for the terminal, at most ``textWidth`` columns wide, times in UTC.
    public var text: String { text(in: .utc) }

    /// Aligned tables for the terminal, at most ``textWidth`` columns wide, times in `zone`.
    public func text(in zone: ZoneRules) -> String {
        let r = report
        var out = "Audit report of \(Terminal.escaped(ledgerName))\n"
        out += "Checkpoint size \(checkpoint.size), root \(Base64.encode(checkpoint.root.bytes))\n"
        out += "Scope: " + Terminal.escaped(scopeDescription(in: zone)) + " (times in \(zone.name))\n"
        out += "\nEvents (\(r.entries.count))\n"
        out += TextTable(header: ["SEQ", "AT", "TYPE", "SUBJECT", "CONSENT", "ACTOR", "NOTE"], rows: r.entries.map { e in
            var note: [String] = []
            // The version is news on a re-consent; every grant's is in the JSON and CSV forms.
            if let v = e.version, e.kind == .reconsent { note.append("v\(v)") }
            if let c = e.cause { note.append(e.kind == .reconsent ? "renews \(c)" : "cause \(c)") }
            note += e.changes.map(changeText)
            if let t = e.evidence.effectiveAt { note.append("agreed \(t.dayMonthYearTime(in: zone))") }
            if let c = e.evidence.channel { note.append(c.rawValue) }
            // The reference itself is in the JSON, CSV and HTML forms; an erased subject's stays sealed.
            if e.evidence.isReferenceSealed { note.append("evidence sealed") }
            let consent = e.feature.map { "\(featureKey($0))/\(e.consent ?? "")" } ?? ""
            return [String(e.seq), e.at.dayMonthYearTime(in: zone), e.kind.rawValue, subjectID(e.subject), consent, e.actor, note.joined(separator: ", ")]
        }, shrinkable: [3, 5, 6]).rendered
        out += "\nCounts per consent\n"
        out += TextTable(header: ["CONSENT", "GIVEN", "RE-CONSENT", "WITHDRAWN", "CASCADE-WITHDRAWN"], rows: r.counts.map {
            ["\(featureKey($0.feature))/\($0.consent)", String($0.given), String($0.reconsent), String($0.withdrawn), String($0.cascadeWithdrawn)]
        }).rendered
        out += "\nWithdrawal (GDPR Art. 7(3): as easy as giving)\n"
        out += TextTable(header: ["FEATURE", "MEDIAN GRANT→WITHDRAWAL", "WITHDRAWALS", "BY CASCADE"], rows: r.withdrawals.map {
            [featureKey($0.feature), Self.duration($0.medianGrantToRevocationMs), String($0.revocations), $0.cascadeShare.map(Self.percent) ?? "-"]
        }).rendered
        out += "\nSubjects with outdated consents (\(Set(r.outdated.map(\.subject)).count))\n"
        out += TextTable(header: ["SUBJECT", "CONSENT", "GIVEN VERSION", "CURRENT VERSION"], rows: outdatedByID.map {
            [subjectID($0.subject), "\(featureKey($0.feature))/\($0.consent)", $0.givenVersion, $0.currentVersion]
        }, shrinkable: [0]).rendered
        out += "\nFeature activity\n"
        out += TextTable(header: ["SUBJECT", "FEATURE", "ACTIVE FROM", "UNTIL"], rows: intervalsByID.map {
            [subjectID($0.subject), featureKey($0.feature), $0.from.dayMonthYearTime(in: zone), $0.until?.dayMonthYearTime(in: zone) ?? "(still active)"]
        }, shrinkable: [0]).rendered
        return out
    }
}

/// Left-aligned columns separated by two spaces; "(none)" for an empty table. When the table
/// would be wider than `maxWidth`, the `shrinkable` columns give up width, widest first, down to
/// 12 characters each, a cell cut short ending in "…"; then a last column that is shrinkable
/// wraps onto continuation lines instead. Columns of numbers, times and codes are never cut.
struct TextTable {
    let header: [String]
    let rows: [[String]]
    var shrinkable: [Int] = []
    var maxWidth = LedgerReport.textWidth

    /// Cells come from the ledger (ids, actors, catalogue keys): each is escaped for the
    /// terminal (``Terminal/escaped(_:)``), so none can forge a line or drive the terminal.
    init(header: [String], rows: [[String]], shrinkable: [Int] = [], maxWidth: Int = LedgerReport.textWidth) {
        self.header = header
        self.rows = rows.map { $0.map(Terminal.escaped) }
        self.shrinkable = shrinkable
        self.maxWidth = maxWidth
    }

    var rendered: String {
        guard !rows.isEmpty else { return "  (none)\n" }
        let last = header.count - 1
        var widths = header.map(\.count)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        func total() -> Int { 2 + widths.reduce(0, +) + 2 * (widths.count - 1) }
        let wrapsLast = shrinkable.contains(last)
        while total() > maxWidth, let widest = shrinkable.filter({ $0 != last && widths[$0] > 12 }).max(by: { widths[$0] < widths[$1] }) {
            widths[widest] -= 1
        }
        // A last column left narrower than 20 goes below its row instead, indented and wrapped.
        let room = maxWidth - (total() - widths[last])
        let below = wrapsLast && room < min(widths[last], 20)
        if below { widths[last] = maxWidth - 7 } else if wrapsLast { widths[last] = min(widths[last], room) }
        func fit(_ cell: String, _ width: Int) -> String { cell.count <= width ? cell : String(cell.prefix(width - 1)) + "…" }
        /// The last column's text in lines of at most `width`, broken at spaces where possible.
        func wrapped(_ text: String, _ width: Int) -> [String] {
            var lines: [String] = []
            var current = ""
            for word in text.split(separator: " ", omittingEmptySubsequences: false) {
                var word = String(word)
                while word.count > width {
                    if !current.isEmpty { lines.append(current); current = "" }
                    lines.append(String(word.prefix(width)))
                    word = String(word.dropFirst(width))
                }
                if current.isEmpty { current = word } else if current.count + 1 + word.count <= width { current += " " + word } else { lines.append(current); current = word }
            }
            lines.append(current)
            return lines
        }
        return ([header] + rows).enumerated().flatMap { number, row -> [String] in
            var line = "  "
            for (i, whole) in row.enumerated() where i < last {
                let cell = fit(whole, widths[i])
                line += cell + String(repeating: " ", count: widths[i] - cell.count + 2)
            }
            if below {
                while line.hasSuffix(" ") { line.removeLast() }
                let notes = number == 0 || row[last].isEmpty ? [] : wrapped(row[last], widths[last]).map { "       " + $0 }
                return [line] + notes
            }
            let indent = String(repeating: " ", count: line.count)
            let tail = wrapsLast ? wrapped(row[last], widths[last]) : [fit(row[last], widths[last])]
            return tail.enumerated().map { n, part in
                var text = (n == 0 ? line : indent) + part
                while text.hasSuffix(" ") { text.removeLast() }
                return text
            }
        }.joined(separator: "\n") + "\n"
    }
}

extension String {
    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }

    /// Escaped for HTML text and attribute values.
    var htmlEscaped: String {
        var out = ""
        for c in self {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }
}
