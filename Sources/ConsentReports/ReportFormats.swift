import ConsentLedger
import ConsentDomain

/// The audit report as JSON, CSV, aligned text and one self-contained HTML page.
extension LedgerReport {
    static func seconds(_ ms: Int64?) -> JSONValue { ms.map { .int($0 / 1000) } ?? .null }

    private var entryType: (AuditReport.Entry) -> String { { $0.kind.rawValue } }

    /// The report as JSON (the members `report --json` prints).
    public var jsonDocument: JSONDocument { JSONDocument(json) }

    package var json: JSONValue {
        let r = report
        var scope: [String: JSONValue] = [:]
        if let s = r.scope.subject { scope["subject"] = .string(subjectID(s)) }
        if let f = r.scope.feature { scope["feature"] = .string(featureKey(f)) }
        if let t = r.scope.from { scope["from"] = .string(t.rfc3339) }
        if let t = r.scope.to { scope["to"] = .string(t.rfc3339) }
        if let a = r.scope.actor { scope["actor"] = .string(a) }
        return .object([
            "ledger": .string(ledgerName),
            "checkpoint": .object(["origin": .string(checkpoint.origin), "size": .int(checkpoint.size), "root": .string(Base64.encode(checkpoint.root.bytes))]),
            "scope": .object(scope),
            "entries": .array(r.entries.map { e in
                var m: [String: JSONValue] = ["seq": .int(Int64(e.seq)), "at": .string(e.at.rfc3339), "type": .string(e.kind.rawValue), "actor": .string(e.actor)]
                if let s = e.subject { m["subject"] = .string(subjectID(s)) }
                if let f = e.feature { m["feature"] = .string(featureKey(f)) }
                if let c = e.consent { m["consent"] = .string(c) }
                if let v = e.version { m["version"] = .string(v) }
                if let c = e.cause { m[e.kind == .reconsent ? "renews" : "cause"] = .int(Int64(c)) }
                return .object(m)
            }),
            "counts": .array(r.counts.map {
                .object(["feature": .string(featureKey($0.feature)), "consent": .string($0.consent), "given": .int(Int64($0.given)), "reconsent": .int(Int64($0.reconsent)), "withdrawn": .int(Int64($0.withdrawn)), "cascade": .int(Int64($0.cascade))])
            }),
            "outdated": .array(r.outdated.map {
                .object(["subject": .string(subjectID($0.subject)), "feature": .string(featureKey($0.feature)), "consent": .string($0.consent), "givenVersion": .string($0.givenVersion), "currentVersion": .string($0.currentVersion)])
            }),
            "activeIntervals": .array(r.intervals.map {
                .object(["subject": .string(subjectID($0.subject)), "feature": .string(featureKey($0.feature)), "from": .string($0.from.rfc3339), "until": $0.until.map { .string($0.rfc3339) } ?? .null])
            }),
            "withdrawal": .array(r.withdrawals.map {
                .object(["feature": .string(featureKey($0.feature)), "medianGrantToRevocationSeconds": Self.seconds($0.medianGrantToRevocationMs), "revocations": .int(Int64($0.revocations)), "cascades": .int(Int64($0.cascades)), "cascadeShare": .string($0.cascadeShare.map { Self.percent($0) } ?? "")])
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

    public static let csvHeader = ["section", "seq", "at", "until", "type", "subject", "feature", "consent", "actor", "version", "cause", "given", "reconsent", "withdrawn", "cascade", "value"]

    /// One table, one header; the `section` column says which part of the report a row is.
    public var csv: String {
        let r = report
        var rows: [[String]] = [Self.csvHeader]
        func row(_ section: String, _ values: [String: String]) {
            rows.append(Self.csvHeader.map { $0 == "section" ? section : values[$0] ?? "" })
        }
        row("checkpoint", ["value": "\(checkpoint.origin) \(checkpoint.size) \(Base64.encode(checkpoint.root.bytes))"])
        for e in r.entries {
            row("entry", ["seq": String(e.seq), "at": e.at.rfc3339, "type": e.kind.rawValue, "subject": subjectID(e.subject), "feature": featureKey(e.feature), "consent": e.consent ?? "", "actor": e.actor, "version": e.version ?? "", "cause": e.cause.map(String.init) ?? ""])
        }
        for c in r.counts {
            row("count", ["feature": featureKey(c.feature), "consent": c.consent, "given": String(c.given), "reconsent": String(c.reconsent), "withdrawn": String(c.withdrawn), "cascade": String(c.cascade)])
        }
        for o in r.outdated {
            row("outdated", ["subject": subjectID(o.subject), "feature": featureKey(o.feature), "consent": o.consent, "version": o.givenVersion, "value": o.currentVersion])
        }
        for i in r.intervals {
            row("active", ["subject": subjectID(i.subject), "feature": featureKey(i.feature), "at": i.from.rfc3339, "until": i.until?.rfc3339 ?? ""])
        }
        for w in r.withdrawals {
            row("withdrawal", ["feature": featureKey(w.feature), "withdrawn": String(w.revocations), "cascade": String(w.cascades), "value": w.medianGrantToRevocationMs.map { String($0 / 1000) } ?? ""])
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

    /// Aligned tables for the terminal.
    public var text: String {
        let r = report
        var out = "Audit report of \(ledgerName) at checkpoint size \(checkpoint.size), root \(Base64.encode(checkpoint.root.bytes))\n"
        var scope: [String] = []
        if let s = r.scope.subject { scope.append("subject \(subjectID(s))") }
        if let f = r.scope.feature { scope.append("feature \(featureKey(f))") }
        if let t = r.scope.from { scope.append("from \(t.rfc3339)") }
        if let t = r.scope.to { scope.append("to \(t.rfc3339)") }
        if let a = r.scope.actor { scope.append("actor \(a)") }
        out += "Scope: " + (scope.isEmpty ? "everything" : scope.joined(separator: ", ")) + "\n"
        out += "\nEvents (\(r.entries.count))\n"
        out += TextTable(header: ["SEQ", "AT (UTC)", "TYPE", "SUBJECT", "FEATURE", "CONSENT", "ACTOR", "VERSION", "CAUSE"], rows: r.entries.map {
            [String($0.seq), $0.at.rfc3339, $0.kind.rawValue, subjectID($0.subject), featureKey($0.feature), $0.consent ?? "", $0.actor, $0.version ?? "", $0.cause.map { String($0) } ?? ""]
        }).rendered
        out += "\nCounts per consent\n"
        out += TextTable(header: ["FEATURE", "CONSENT", "GIVEN", "RE-CONSENT", "WITHDRAWN", "CASCADE"], rows: r.counts.map {
            [featureKey($0.feature), $0.consent, String($0.given), String($0.reconsent), String($0.withdrawn), String($0.cascade)]
        }).rendered
        out += "\nWithdrawal (GDPR Art. 7(3): as easy as giving)\n"
        out += TextTable(header: ["FEATURE", "MEDIAN GRANT→REVOCATION", "REVOCATIONS", "BY CASCADE"], rows: r.withdrawals.map {
            [featureKey($0.feature), Self.duration($0.medianGrantToRevocationMs), String($0.revocations), $0.cascadeShare.map(Self.percent) ?? "-"]
        }).rendered
        out += "\nSubjects with outdated consents (\(Set(r.outdated.map(\.subject)).count))\n"
        out += TextTable(header: ["SUBJECT", "FEATURE", "CONSENT", "GIVEN VERSION", "CURRENT VERSION"], rows: r.outdated.map {
            [subjectID($0.subject), featureKey($0.feature), $0.consent, $0.givenVersion, $0.currentVersion]
        }).rendered
        out += "\nFeature activity\n"
        out += TextTable(header: ["SUBJECT", "FEATURE", "ACTIVE FROM", "UNTIL"], rows: r.intervals.map {
            [subjectID($0.subject), featureKey($0.feature), $0.from.rfc3339, $0.until?.rfc3339 ?? "(still active)"]
        }).rendered
        return out
    }
}

/// Left-aligned columns separated by two spaces; "(none)" for an empty table.
struct TextTable {
    let header: [String]
    let rows: [[String]]

    var rendered: String {
        guard !rows.isEmpty else { return "  (none)\n" }
        var widths = header.map(\.count)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return ([header] + rows).map { row in
            var line = "  "
            for (i, cell) in row.enumerated() {
                line += cell
                if i < row.count - 1 { line += String(repeating: " ", count: widths[i] - cell.count + 2) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            return line
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
