import ConsentLedger
import ConsentDomain

/// One subject's consents as a page the patient can read: what they consented to, when, under
/// which notice version, and how to check it. One self-contained HTML file in the patient's
/// language, with no script and nothing fetched, so it opens anywhere and prints cleanly.
///
/// It is a view of the same state as `status` and the verifiable export, against the checkpoint of
/// the signed head; the verifiable export is what proves it.
public enum PatientPage {
    /// The languages the page's own words exist in. Feature and consent names come from the
    /// catalogue in whatever languages it has.
    public enum Language: String, CaseIterable, Sendable {
        case en, de
    }

    /// The language a page is in by default: the catalogue's first language, if the page has
    /// words for it, else English.
    public static func defaultLanguage(for catalog: Catalog) -> Language {
        catalog.features.first?.names.first.flatMap { Language(rawValue: String($0.language.prefix(2))) } ?? .en
    }

    struct Words {
        let title, intro, feature, active, inactive, consent, required, optional, state, since, notice, history, date, event: String
        let given, outdated, neverGiven, withdrawn, cascadeWithdrawn, reConsent, policyChange: String
        let agreedEarlier, channel, verifyTitle, verifyText, checkpoint, key, generated, noEvents, language: String
        let version: (String) -> String
        let outdatedText: (String, String) -> String
    }

    static func words(_ language: Language) -> Words {
        switch language {
        case .en:
            return Words(
                title: "Your consents", intro: "This page lists every consent you gave or withdrew for the app's features, as the consent ledger recorded it.",
                feature: "Feature", active: "active", inactive: "not active", consent: "Consent", required: "required", optional: "optional", state: "State",
                since: "since", notice: "Notice", history: "What happened, in order", date: "Date", event: "Event",
                given: "given", outdated: "given under an older notice", neverGiven: "never given", withdrawn: "withdrawn", cascadeWithdrawn: "withdrawn with the required consent",
                reConsent: "given again under a new notice", policyChange: "notice changed",
                agreedEarlier: "you agreed on", channel: "given via", verifyTitle: "How to check this",
                verifyText: "Every entry is signed by the ledger. Ask for your verifiable export (a JSON file) and check it with the ledger's public key, for example with",
                checkpoint: "State at checkpoint", key: "Public key", generated: "Ledger", noEvents: "Nothing was ever recorded for you: every feature is off.", language: "en",
                version: { "version \($0)" }, outdatedText: { "you agreed to version \($0); the notice is now version \($1)" })
        case .de:
            return Words(
                title: "Ihre Einwilligungen", intro: "Diese Seite zeigt jede Einwilligung, die Sie für Funktionen der App gegeben oder widerrufen haben, so wie das Einwilligungsregister sie aufgezeichnet hat.",
                feature: "Funktion", active: "aktiv", inactive: "nicht aktiv", consent: "Einwilligung", required: "erforderlich", optional: "optional", state: "Stand",
                since: "seit", notice: "Hinweis", history: "Was geschah, der Reihe nach", date: "Datum", event: "Ereignis",
                given: "erteilt", outdated: "unter einem älteren Hinweis erteilt", neverGiven: "nie erteilt", withdrawn: "widerrufen", cascadeWithdrawn: "mit der erforderlichen Einwilligung widerrufen",
                reConsent: "unter einem neuen Hinweis erneut erteilt", policyChange: "Hinweis geändert",
                agreedEarlier: "Sie haben zugestimmt am", channel: "erteilt über", verifyTitle: "So prüfen Sie das",
                verifyText: "Jeder Eintrag ist vom Register signiert. Fordern Sie Ihren prüfbaren Export (eine JSON-Datei) an und prüfen Sie ihn mit dem öffentlichen Schlüssel des Registers, zum Beispiel mit",
                checkpoint: "Stand am Prüfpunkt", key: "Öffentlicher Schlüssel", generated: "Register", noEvents: "Für Sie wurde nie etwas aufgezeichnet: alle Funktionen sind aus.", language: "de",
                version: { "Version \($0)" }, outdatedText: { "Sie haben Version \($0) zugestimmt; der Hinweis ist jetzt Version \($1)" })
        }
    }

    static func name(_ names: [LocalizedName], _ language: Language, fallback: String) -> String {
        names.first { $0.language == language.rawValue }?.text ?? names.first { $0.language.hasPrefix(language.rawValue + "-") }?.text
            ?? names.first { $0.language == "en" }?.text ?? names.first?.text ?? fallback
    }

    static func channelName(_ channel: GrantEvidence.Channel, _ language: Language) -> String {
        switch (language, channel) {
        case (.de, .app): return "App"
        case (.de, .portal): return "Portal"
        case (.de, .paper): return "Papier"
        case (.de, .phone): return "Telefon"
        case (.de, .clinician): return "Ärztin/Arzt"
        default: return channel.rawValue
        }
    }

    /// The page for one subject's report.
    package static func html(subjectID: String, report: SubjectReport, catalog: Catalog, checkpoint: Checkpoint, ledgerName: String, verifierKey: String, language: Language, zone: ZoneRules = .utc) -> String {
        let w = words(language)
        var body = "<h1>\(w.title.htmlEscaped): \(subjectID.htmlEscaped)</h1>\n<p>\(w.intro.htmlEscaped)</p>\n"
        if report.events.isEmpty { body += "<p class=\"empty\">\(w.noEvents.htmlEscaped)</p>\n" }
        for line in report.listing.features {
            let featureName = name(line.feature.names, language, fallback: line.feature.key)
            body += "<section class=\"feature\"><h2>\(featureName.htmlEscaped) <span class=\"badge \(line.isActive ? "on" : "off")\">\((line.isActive ? w.active : w.inactive).htmlEscaped)</span></h2>\n"
            body += "<table><thead><tr><th>\(w.consent.htmlEscaped)</th><th>\(w.state.htmlEscaped)</th><th>\(w.notice.htmlEscaped)</th></tr></thead><tbody>\n"
            for c in line.consents {
                let consentName = name(c.definition.names, language, fallback: c.definition.code)
                let kind = c.definition.isRequired ? w.required : w.optional
                var state: String
                switch c.status {
                case .given(let grant):
                    state = (c.isOutdated ? w.outdated : w.given) + " " + w.since + " " + grant.validFrom.dayMonthYearTime(in: zone)
                    if c.isOutdated { state += " (" + w.outdatedText(grant.version, c.definition.version) + ")" }
                    if let t = grant.evidence.effectiveAt { state += "; " + w.agreedEarlier + " " + t.dayMonthYearTime(in: zone) }
                    if let ch = grant.evidence.channel { state += "; " + w.channel + " " + channelName(ch, language) }
                case .withdrawn(let wd):
                    state = (wd.cause == nil ? w.withdrawn : w.cascadeWithdrawn) + " " + wd.at.dayMonthYearTime(in: zone)
                case nil:
                    state = w.neverGiven
                }
                let notice = "<a href=\"\(c.definition.link.htmlEscaped)\">\(w.version(c.status.flatMap { if case .given(let g) = $0 { g.version } else { nil } } ?? c.definition.version).htmlEscaped)</a>"
                let css = c.isGiven ? (c.isOutdated ? "outdated" : "given") : "withheld"
                body += "<tr class=\"\(css)\"><td>\(consentName.htmlEscaped) <small>(\(kind.htmlEscaped))</small></td><td>\(state.htmlEscaped)</td><td>\(notice)</td></tr>\n"
            }
            body += "</tbody></table></section>\n"
        }
        if !report.events.isEmpty {
            body += "<h2>\(w.history.htmlEscaped)</h2>\n<table class=\"history\"><thead><tr><th>\(w.date.htmlEscaped) (\(zone.name.htmlEscaped))</th><th>\(w.event.htmlEscaped)</th><th>\(w.consent.htmlEscaped)</th></tr></thead><tbody>\n"
            for e in report.events.compactMap(HistoryEntry.init) {
                let what: String
                switch e.kind {
                case .given: what = w.given
                case .reconsent: what = w.reConsent
                case .withdrawn: what = w.withdrawn
                case .cascade: what = w.cascadeWithdrawn
                }
                let feature = catalog.feature(code: e.feature)
                let consentName = feature.flatMap { f in f.consent(code: e.consent).map { name($0.names, language, fallback: e.consent) } } ?? e.consent
                let featureName = feature.map { name($0.names, language, fallback: $0.key) } ?? String(e.feature)
                // Catalogue names often carry their feature's name already.
                var detail = consentName.hasPrefix(featureName) ? consentName : featureName + ": " + consentName
                if let v = e.version { detail += " (" + w.version(v) + ")" }
                body += "<tr><td>\(e.at.dayMonthYearTime(in: zone))</td><td>\(what.htmlEscaped)</td><td>\(detail.htmlEscaped)</td></tr>\n"
            }
            body += "</tbody></table>\n"
        }
        body += "<h2>\(w.verifyTitle.htmlEscaped)</h2>\n<p>\(w.verifyText.htmlEscaped)</p>\n"
        body += "<pre>consentctl verify-export export.json --key '\(verifierKey.htmlEscaped)'</pre>\n"
        body += "<p class=\"proof\">\(w.generated.htmlEscaped): <b>\(ledgerName.htmlEscaped)</b>. \(w.checkpoint.htmlEscaped): \(checkpoint.size), <code>\(Base64.encode(checkpoint.root.bytes))</code>. \(w.key.htmlEscaped): <code>\(verifierKey.htmlEscaped)</code></p>\n"
        return """
            <!DOCTYPE html>
            <html lang="\(w.language)">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
            <title>\(w.title.htmlEscaped): \(subjectID.htmlEscaped)</title>
            <style>
            body { font: 16px/1.5 system-ui, sans-serif; max-width: 52em; margin: 2em auto; padding: 0 1em; color: #1a1a1a; }
            h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
            table { border-collapse: collapse; width: 100%; margin: 0.5em 0; }
            th, td { border-bottom: 1px solid #ddd; padding: 6px 8px; text-align: left; vertical-align: top; }
            th { background: #f3f3f3; }
            table.history td:first-child, td:nth-child(3) a { white-space: nowrap; }
            tr.given td:nth-child(2) { color: #1b5e20; } tr.outdated td:nth-child(2) { color: #8a5a00; } tr.withheld td:nth-child(2) { color: #555; }
            .badge { font-size: 0.7em; padding: 2px 8px; border-radius: 8px; vertical-align: middle; }
            .badge.on { background: #e3f2e5; color: #1b5e20; } .badge.off { background: #eee; color: #555; }
            pre, code { font-size: 0.8em; overflow-wrap: anywhere; white-space: pre-wrap; }
            @media print { a { color: inherit; } }
            </style>
            </head>
            <body>
            \(body)</body>
            </html>

            """
    }
}

extension Ledger {
    /// One subject's consents as a self-contained page in the patient's language (``PatientPage``),
    /// against the checkpoint of the signed head.
    public func patientPage(for subjectID: String, language: PatientPage.Language? = nil, zone: ZoneRules = .utc) throws -> String {
        guard try subjectRef(for: subjectID) != nil else { throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'") }
        let report = try report(for: subjectID)
        let checkpoint = try headCheckpoint()
        return PatientPage.html(subjectID: subjectID, report: report, catalog: catalog, checkpoint: checkpoint, ledgerName: genesis.ledgerName,
                                verifierKey: try verifierKey.text, language: language ?? PatientPage.defaultLanguage(for: catalog), zone: zone)
    }
}
