import ConsentLedger
import ConsentDomain

/// A subject's consents as a FHIR R5 Bundle of `Consent` resources: one per feature, the
/// required consent as the provision and the optional ones nested in it, each tied back to the
/// ledger event and checkpoint that prove it. The mapping is in `Spec/fhir-mapping.md`.
public enum FHIRConsent {
    public static let extensionBase = "https://consentledger.example/fhir/StructureDefinition/"
    public static let consentSystem = "https://consentledger.example/fhir/CodeSystem/consent"
    public static let subjectSystem = "https://consentledger.example/fhir/NamingSystem/subject"
    public static let eventSystem = "https://consentledger.example/fhir/NamingSystem/ledger-event"

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

    static func ext(_ name: String, string value: String) -> JSONValue {
        .object(["url": .string(extensionBase + name), "valueString": .string(value)])
    }

    static func code(_ feature: Feature, _ consent: ConsentDefinition) -> JSONValue {
        .array([.object(["coding": .array([.object(["system": .string(consentSystem), "code": .string("\(feature.key)/\(consent.code)"), "display": .string(consent.name)])])])])
    }

    /// The Bundle for one subject: their replayed state and history, the checkpoint it is proven
    /// against, and the ledger's name.
    package static func bundle(subjectID: String, report: SubjectReport, checkpoint: Checkpoint, ledgerName: String, hasher: any SHA256Hasher) -> JSONValue {
        let root = Base64.encode(checkpoint.root.bytes)
        let proof = "checkpoint \(checkpoint.origin) size \(checkpoint.size) root \(root)"
        let events = report.events
        func eventReference(_ seq: UInt64) -> JSONValue {
            .object([
                "identifier": .object(["system": .string(eventSystem), "value": .string("\(ledgerName)#\(seq)")]),
                "display": .string("ledger event seq \(seq), included in \(proof)"),
            ])
        }
        func lastEvent(_ feature: Int, _ consent: String) -> LedgerEvent? {
            events.last { e in
                switch e.payload {
                case .consentGiven(let g): return g.feature == feature && g.consent == consent
                case .consentRevoked(let r): return r.feature == feature && r.consent == consent
                default: return false
                }
            }
        }
        func provision(_ feature: Feature, _ line: ConsentLine) -> [String: JSONValue] {
            var p: [String: JSONValue] = ["code": code(feature, line.definition)]
            let state = line.isOutdated ? "outdated" : (line.isGiven ? "given" : "withheld")
            var extensions = [ext("consent-state", string: state), ext("policy-version", string: line.definition.version)]
            if let given = line.givenVersion { extensions.append(ext("given-policy-version", string: given)) }
            if let last = lastEvent(feature.code, line.definition.code) {
                extensions.append(ext("ledger-event", string: "\(ledgerName)#\(last.seq)"))
            }
            p["extension"] = .array(extensions)
            switch line.status {
            case .given(let grant): p["period"] = .object(["start": .string(grant.validFrom.rfc3339)])
            case .withdrawn(let w):
                if let start = events.last(where: { if case .consentGiven(let g) = $0.payload { return g.feature == feature.code && g.consent == line.definition.code && $0.seq < w.seq } else { return false } }) {
                    p["period"] = .object(["start": .string(start.at.rfc3339), "end": .string(w.at.rfc3339)])
                }
            case nil: break
            }
            return p
        }
        var entries: [JSONValue] = []
        for line in report.listing.features {
            let feature = line.feature
            let required = line.consents.filter(\.definition.isRequired)
            let optional = line.consents.filter { !$0.definition.isRequired }
            guard let main = required.first else { continue }
            var top = provision(feature, main)
            if !optional.isEmpty { top["provision"] = .array(optional.map { .object(provision(feature, $0)) }) }
            let seqs = line.consents.compactMap { lastEvent(feature.code, $0.definition.code)?.seq }
            let dates = line.consents.compactMap { lastEvent(feature.code, $0.definition.code)?.at }
            var consent: [String: JSONValue] = [
                "resourceType": .string("Consent"),
                // FHIR ids are at most 64 characters.
                "id": .string(String("\(feature.key)-\(report.subject?.value.prefix(12) ?? "none")".suffix(64))),
                "status": .string(line.isActive ? "active" : "inactive"),
                "category": .array([.object(["coding": .array([.object(["system": .string(consentSystem), "code": .string(feature.key), "display": .string(feature.name)])])])]),
                "subject": .object(["identifier": .object(["system": .string(subjectSystem), "value": .string(subjectID)]), "display": .string(subjectID)]),
                "decision": .string(line.isActive ? "permit" : "deny"),
                "policyBasis": .object(["url": .string(main.definition.link)]),
                "provision": .array([.object(top)]),
                "extension": .array([ext("checkpoint", string: proof), ext("policy-version", string: main.definition.version)]),
            ]
            if let latest = dates.max() { consent["date"] = .string(date(latest)) }
            if let grant = main.status, case .given(let g) = grant {
                consent["period"] = .object(["start": .string(g.validFrom.rfc3339)])
            }
            if !seqs.isEmpty { consent["sourceReference"] = .array(seqs.sorted().map(eventReference)) }
            entries.append(.object([
                "fullUrl": .string(uuid(hasher, [ledgerName, subjectID, feature.key])),
                "resource": .object(consent),
            ]))
        }
        return .object([
            "resourceType": .string("Bundle"),
            "id": .string("consents-\(report.subject?.value.prefix(12) ?? "none")"),
            "type": .string("collection"),
            "timestamp": .string((events.last?.at ?? Timestamp(millisecondsSinceEpoch: 0)).rfc3339),
            "entry": .array(entries),
        ])
    }
}

extension Ledger {
    /// The subject's consents as a FHIR R5 Bundle of Consent resources (`Spec/fhir-mapping.md`).
    public func fhirBundle(for subjectID: String) throws -> JSONDocument {
        guard try subjectRef(for: subjectID) != nil else { throw ConsentError.notFound(.subject, "the ledger has no subject '\(subjectID)'") }
        let report = try report(for: subjectID)
        let (checkpoint, _) = try signedCheckpoint()
        return JSONDocument(FHIRConsent.bundle(subjectID: subjectID, report: report, checkpoint: checkpoint, ledgerName: genesis.ledgerName, hasher: chain.hasher))
    }
}
