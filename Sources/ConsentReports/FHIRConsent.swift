import ConsentLedger
import ConsentDomain

/// Subjects' consents as a FHIR R5 Bundle: per subject a `Patient` and one `Consent` per feature,
/// with R5's permit/deny semantics (the feature's decision, deny exceptions for the optional
/// consents not given), each tied to the ledger events and the signed checkpoint that prove it.
/// The mapping is in `Spec/fhir-mapping.md`; the extensions' StructureDefinitions in `Spec/fhir/`.
public enum FHIRConsent {
    public static let extensionBase = "https://consentledger.example/fhir/StructureDefinition/"
    public static let consentSystem = "https://consentledger.example/fhir/CodeSystem/consent"
    public static let subjectSystem = "https://consentledger.example/fhir/NamingSystem/subject"
    public static let eventSystem = "https://consentledger.example/fhir/NamingSystem/ledger-event"
    public static let recordSystem = "https://consentledger.example/fhir/NamingSystem/consent-record"
    public static let evidenceSystem = "https://consentledger.example/fhir/NamingSystem/consent-evidence"

    /// A `collection` to read, or a `transaction` to load into a server (conditional create of
    /// the Patient, conditional update of each Consent).
    public enum BundleType: String, CaseIterable, Sendable {
        case collection, transaction
    }

    /// One subject's part of a Bundle: their id, pseudonymous reference and replayed report.
    package struct Subject {
        let id: String
        let report: SubjectReport
    }

    /// A deterministic urn:uuid from a hash of the parts (so the same ledger state gives the
    /// same Bundle): an RFC 9562 version 8 (custom) UUID with the variant bits set.
    static func uuid(_ hasher: any SHA256Hasher, _ parts: [String]) -> String {
        var bytes: [UInt8] = []
        for p in parts { bytes += Array(p.utf8) + [0] }  // NUL-separated: no two part lists collide
        let c = Array(Hex.encode(hasher.sha256(bytes).bytes.prefix(16)))
        let v = String(c[0..<8]) + "-" + String(c[8..<12]) + "-8" + String(c[13..<16]) + "-a" + String(c[17..<20]) + "-" + String(c[20..<32])
        return "urn:uuid:" + v
    }

    static func date(_ t: Timestamp) -> String { String(t.rfc3339.prefix(10)) }

    /// Percent-encodes a search parameter value (RFC 3986 unreserved characters stay).
    static func queryValue(_ s: String) -> String {
        var out = ""
        for byte in s.utf8 {
            let c = Character(Unicode.Scalar(byte))
            if byte < 0x80, c.isLetter || c.isNumber || "-._~".contains(c) { out.append(c) } else { out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(2) }
        }
        return out
    }

    /// A token search `system|value` for a conditional request. FHIR search gives `\`, `|`, `,`
    /// and `$` a meaning, so the value escapes each with a backslash before percent-encoding;
    /// otherwise a subject id holding `|` would search for another system's token.
    static func tokenSearch(_ system: String, _ value: String) -> String {
        var escaped = ""
        for c in value {
            if c == "\\" || c == "|" || c == "," || c == "$" { escaped.append("\\") }
            escaped.append(c)
        }
        return queryValue(system + "|" + escaped)
    }

    static func sub(_ url: String, _ key: String, _ value: JSONValue) -> JSONValue {
        .object(["url": .string(url), key: value])
    }

    static func coding(_ system: String, _ code: String, _ display: String) -> JSONValue {
        .object(["coding": .array([.object(["system": .string(system), "code": .string(code), "display": .string(display)])])])
    }

    /// The Bundle for one or more subjects, against a checkpoint whose root comes from the
    /// signed head.
    package static func bundle(subjects: [Subject], checkpoint: Checkpoint, ledgerName: String, type: BundleType, id: String, hasher: any SHA256Hasher) -> JSONValue {
        var entries: [JSONValue] = []
        var newest: Timestamp?
        for subject in subjects {
            entries += subjectEntries(subject, checkpoint: checkpoint, ledgerName: ledgerName, type: type, hasher: hasher)
            if let last = subject.report.events.last?.at, newest.map({ last > $0 }) ?? true { newest = last }
        }
        var bundle: [String: JSONValue] = [
            "resourceType": .string("Bundle"),
            "id": .string(id),
            "type": .string(type.rawValue),
            "timestamp": .string((newest ?? Timestamp(millisecondsSinceEpoch: 0)).rfc3339),
        ]
        // FHIR forbids empty arrays: a ledger without subjects exports a Bundle with no entry.
        if !entries.isEmpty { bundle["entry"] = .array(entries) }
        return .object(bundle)
    }

    static func subjectEntries(_ subject: Subject, checkpoint: Checkpoint, ledgerName: String, type: BundleType, hasher: any SHA256Hasher) -> [JSONValue] {
        let report = subject.report
        let ref = report.subject?.value ?? ""
        let ref12 = String(ref.prefix(12))
        let events = report.events
        let patientURL = uuid(hasher, [ledgerName, subject.id, "Patient"])
        let identifier: JSONValue = .object(["system": .string(subjectSystem), "value": .string(subject.id)])
        var patient: [String: JSONValue] = [
            "fullUrl": .string(patientURL),
            "resource": .object(["resourceType": .string("Patient"), "id": .string("subject-\(ref12)"), "identifier": .array([identifier])]),
        ]
        if type == .transaction {
            patient["request"] = .object(["method": .string("POST"), "url": .string("Patient"), "ifNoneExist": .string("identifier=\(tokenSearch(subjectSystem, subject.id))")])
        }
        var entries: [JSONValue] = [.object(patient)]
        let checkpointExtension: JSONValue = .object([
            "url": .string(extensionBase + "ledger-checkpoint"),
            "extension": .array([
                sub("origin", "valueString", .string(checkpoint.origin)),
                sub("size", "valueInteger64", .string(String(checkpoint.size))),
                sub("root", "valueBase64Binary", .string(Base64.encode(checkpoint.root.bytes))),
            ]),
        ])
        func newestEvent(_ feature: Int, _ consent: String) -> LedgerEvent? {
            events.last { e in
                switch e.payload {
                case .consentGiven(let g): return g.feature == feature && g.consent == consent
                case .consentRevoked(let r): return r.feature == feature && r.consent == consent
                default: return false
                }
            }
        }
        for line in report.listing.features {
            let feature = line.feature
            guard let main = line.consents.first(where: \.definition.isRequired) else { continue }
            var states: [JSONValue] = []
            var sources: [(UInt64, JSONValue)] = []
            var evidence: [JSONValue] = []
            for c in line.consents {
                var parts = [sub("consent", "valueCode", .string(c.definition.code))]
                let newest = newestEvent(feature.code, c.definition.code)
                switch c.status {
                case .given(let grant):
                    parts.append(sub("state", "valueCode", .string(c.isOutdated ? "outdated" : "given")))
                    parts.append(sub("policyVersion", "valueString", .string(c.definition.version)))
                    parts.append(sub("givenPolicyVersion", "valueString", .string(grant.version)))
                    if let t = newest?.at { parts.append(sub("recordedAt", "valueDateTime", .string(t.rfc3339))) }
                    if let t = grant.evidence.effectiveAt { parts.append(sub("effectiveAt", "valueDateTime", .string(t.rfc3339))) }
                    if let ch = grant.evidence.channel { parts.append(sub("channel", "valueCode", .string(ch.rawValue))) }
                    if let l = grant.evidence.noticeLanguage { parts.append(sub("noticeLanguage", "valueCode", .string(l))) }
                    if let r = grant.evidence.reference {
                        evidence.append(.object([
                            "identifier": .object(["system": .string(evidenceSystem), "value": .string(r)]),
                            "display": .string("evidence for \(feature.key)/\(c.definition.code)"),
                        ]))
                    }
                case .withdrawn(let w):
                    parts.append(sub("state", "valueCode", .string("withheld")))
                    parts.append(sub("reason", "valueCode", .string(w.cause == nil ? "withdrawn" : "cascade-withdrawn")))
                    parts.append(sub("policyVersion", "valueString", .string(c.definition.version)))
                    if let t = newest?.at { parts.append(sub("recordedAt", "valueDateTime", .string(t.rfc3339))) }
                case nil:
                    parts.append(sub("state", "valueCode", .string("withheld")))
                    parts.append(sub("reason", "valueCode", .string("never-given")))
                    parts.append(sub("policyVersion", "valueString", .string(c.definition.version)))
                }
                if let newest {
                    parts.append(sub("ledgerEvent", "valueInteger64", .string(String(newest.seq))))
                    sources.append((newest.seq, .object([
                        "identifier": .object(["system": .string(eventSystem), "value": .string("\(ledgerName)#\(newest.seq)")]),
                        "display": .string("ledger event seq \(newest.seq)"),
                    ])))
                }
                states.append(.object(["url": .string(extensionBase + "consent-state"), "extension": .array(parts)]))
            }
            let recordValue = "\(ref)/\(feature.key)"
            var consent: [String: JSONValue] = [
                "resourceType": .string("Consent"),
                "id": .string("consent-\(ref12)-\(feature.code)"),
                "identifier": .array([.object(["system": .string(recordSystem), "value": .string(recordValue)])]),
                "status": .string(line.isActive ? "active" : "inactive"),
                "category": .array([coding(consentSystem, feature.key, feature.name)]),
                "subject": .object(["reference": .string(patientURL), "identifier": identifier]),
                "decision": .string(line.isActive ? "permit" : "deny"),
                "policyBasis": .object(["url": .string(main.definition.link)]),
                "extension": .array([checkpointExtension] + states),
            ]
            // R5: the decision is the base; provisions are exceptions to it. Under an active
            // feature (permit), each optional consent not given is a deny exception. Under an
            // inactive one (deny) nothing is permitted, so there is no exception to state.
            if line.isActive {
                let exceptions = line.consents.filter { !$0.definition.isRequired && !($0.isGiven && !$0.isOutdated) }
                if !exceptions.isEmpty {
                    consent["provision"] = .array(exceptions.map { c in
                        .object(["code": .array([coding(consentSystem, "\(feature.key)/\(c.definition.code)", c.definition.name)])])
                    })
                }
            }
            if case .given(let grant)? = main.status {
                consent["date"] = .string(date(grant.agreedAt))
                consent["period"] = .object(["start": .string(grant.agreedAt.rfc3339)])
            } else if let latest = sources.compactMap({ seq, _ in events.first { $0.seq == seq }?.at }).max() {
                consent["date"] = .string(date(latest))
            }
            let references = sources.sorted { $0.0 < $1.0 }.map(\.1) + evidence
            if !references.isEmpty { consent["sourceReference"] = .array(references) }
            var entry: [String: JSONValue] = [
                "fullUrl": .string(uuid(hasher, [ledgerName, subject.id, feature.key])),
                "resource": .object(consent),
            ]
            if type == .transaction {
                entry["request"] = .object(["method": .string("PUT"), "url": .string("Consent?identifier=\(tokenSearch(recordSystem, recordValue))")])
            }
            entries.append(.object(entry))
        }
        return entries
    }
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

extension Ledger {
    /// The subject's consents as a FHIR R5 Bundle (`Spec/fhir-mapping.md`), against the checkpoint
    /// of the signed head: no signing, so it needs no secret key.
    public func fhirBundle(for subjectID: String, type: FHIRConsent.BundleType = .collection) throws -> JSONDocument {
        guard try subjectRef(for: subjectID) != nil else { throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'") }
        let report = try report(for: subjectID)
        return JSONDocument(FHIRConsent.bundle(
            subjects: [FHIRConsent.Subject(id: subjectID, report: report)], checkpoint: try headCheckpoint(), ledgerName: genesis.ledgerName,
            type: type, id: "consents-\(report.subject?.value.prefix(12) ?? "none")", hasher: chain.hasher))
    }

    /// Every subject's consents in one FHIR R5 Bundle, subjects in id order.
    public func fhirBundleOfAllSubjects(type: FHIRConsent.BundleType = .collection) throws -> JSONDocument {
        let subjects = try subjectIDs().map { FHIRConsent.Subject(id: $0, report: try report(for: $0)) }
        // Read after the reports, so the checkpoint includes every event they name.
        let checkpoint = try headCheckpoint()
        return JSONDocument(FHIRConsent.bundle(subjects: subjects, checkpoint: checkpoint, ledgerName: genesis.ledgerName, type: type, id: "consents-all", hasher: chain.hasher))
    }
}
