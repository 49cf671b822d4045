import TransparencyLog
import ConsentDomain

/// The JSON form of a subject's consents: what `status --json` prints and what an audit export
/// carries as the subject's projected state (see `Spec/export-format.md`).
public enum ListingJSON {
    /// A subject's consents: one member per feature, as `status --json` prints them.
    public static func document(_ listing: ConsentListing) -> JSONDocument { JSONDocument(encode(listing)) }

    /// One feature's consents.
    public static func document(_ line: FeatureLine) -> JSONDocument { JSONDocument(feature(line)) }

    package static func encode(_ listing: ConsentListing) -> JSONValue {
        .array(listing.features.map(feature))
    }

    package static func feature(_ line: FeatureLine) -> JSONValue {
        .object([
            "code": .int(Int64(line.feature.code)),
            "key": .string(line.feature.key),
            "name": .string(line.feature.name),
            "active": .bool(line.isActive),
            "consents": .array(line.consents.map { c in
                var members: [String: JSONValue] = [
                    "code": .string(c.definition.code),
                    "name": .string(c.definition.name),
                    "required": .bool(c.definition.isRequired),
                    "state": .string(c.isOutdated ? "outdated" : (c.isGiven ? "given" : "withheld")),
                    "validFrom": c.validFrom.map { .string($0.rfc3339) } ?? .null,
                    "everGiven": .bool(c.status != nil),
                ]
                // `version` is the version the subject agreed to; `currentVersion` the one in force.
                members["currentVersion"] = .string(c.definition.version)
                // A withheld consent says why, so never-given stays apart from withdrawn.
                switch c.status {
                case .given(let grant):
                    members["version"] = .string(grant.version)
                    members.merge(evidenceMembers(grant.evidence)) { $1 }
                case .withdrawn(let w):
                    members["withdrawnAt"] = .string(w.at.rfc3339)
                    members["reason"] = .string(w.cause == nil ? "withdrawn" : "cascade-withdrawn")
                case nil:
                    members["reason"] = .string("never-given")
                }
                return .object(members)
            }),
        ])
    }

    /// A grant's evidence as JSON members (only those recorded), named as in the event.
    package static func evidenceMembers(_ evidence: GrantEvidence) -> [String: JSONValue] {
        var members: [String: JSONValue] = [:]
        if let t = evidence.effectiveAt { members["effectiveAt"] = .string(t.rfc3339) }
        if let c = evidence.channel { members["channel"] = .string(c.rawValue) }
        if let l = evidence.noticeLanguage { members["noticeLanguage"] = .string(l) }
        if let r = evidence.reference {
            members["evidence"] = .string(r)
        } else if let sealed = evidence.sealedReference {
            // Not opened: its subject was erased, and with the record went the key.
            members["sealedEvidence"] = .string(Hex.encode(sealed))
        }
        return members
    }
}
