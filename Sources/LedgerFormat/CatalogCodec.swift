import TransparencyLog
import ConsentDomain

/// Reads and writes the catalogue's JSON (`Samples/catalog.json`; `Spec/ledger-format.md`).
public enum CatalogCodec {
    /// Parses and validates a catalogue. Malformed JSON, a missing or mistyped member, and every
    /// rule of `Catalog.init(features:)` are reported as a `CatalogError` naming the entry.
    public static func decode(_ bytes: [UInt8]) throws(CatalogError) -> Catalog {
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(bytes, canonical: false)
        } catch {
            throw CatalogError(entry: "line \(error.line), column \(error.column)", problem: "malformed JSON: \(error.message)")
        }
        guard let root = value.objectValue else { throw CatalogError(entry: "catalogue", problem: "the top level must be a JSON object") }
        if let extra = root.keys.sorted().first(where: { $0 != "features" }) {
            throw CatalogError(entry: "catalogue", problem: "unknown member '\(extra)'")
        }
        guard let featureValues = root["features"]?.arrayValue else {
            throw CatalogError(entry: "catalogue", problem: "'features' must be an array")
        }
        var features: [Feature] = []
        for (i, fv) in featureValues.enumerated() {
            guard let f = fv.objectValue else { throw CatalogError(entry: "features[\(i)]", problem: "must be an object") }
            let label = "features[\(i)]" + (f["key"]?.stringValue.map { " (\($0))" } ?? "")
            try checkMembers(f, allowed: ["code", "key", "name", "consents"], entry: label)
            guard let code = f["code"]?.intValue, let intCode = Int(exactly: code) else {
                throw CatalogError(entry: label, problem: "'code' must be an integer")
            }
            guard let key = f["key"]?.stringValue else { throw CatalogError(entry: label, problem: "'key' must be a string") }
            let names = try decodeNames(f["name"], entry: label)
            guard let consentValues = f["consents"]?.arrayValue else {
                throw CatalogError(entry: label, problem: "'consents' must be an array")
            }
            var consents: [ConsentDefinition] = []
            for (j, cv) in consentValues.enumerated() {
                guard let c = cv.objectValue else { throw CatalogError(entry: "\(label) consents[\(j)]", problem: "must be an object") }
                let clabel = "\(label) consents[\(j)]" + (c["code"]?.stringValue.map { " ('\($0)')" } ?? "")
                try checkMembers(c, allowed: ["code", "name", "required", "link", "version"], entry: clabel)
                guard let ccode = c["code"]?.stringValue else { throw CatalogError(entry: clabel, problem: "'code' must be a string") }
                guard let required = c["required"]?.boolValue else { throw CatalogError(entry: clabel, problem: "'required' must be true or false") }
                guard let link = c["link"]?.stringValue else { throw CatalogError(entry: clabel, problem: "'link' must be a string") }
                guard let version = c["version"]?.stringValue else { throw CatalogError(entry: clabel, problem: "'version' must be a string") }
                consents.append(ConsentDefinition(code: ccode, names: try decodeNames(c["name"], entry: clabel), isRequired: required, link: link, version: version))
            }
            features.append(Feature(code: intCode, key: key, names: names, consents: consents))
        }
        return try Catalog(features: features)
    }

    /// The catalogue's canonical bytes (RFC 8785); their SHA-256 is pinned in the genesis event.
    public static func canonicalBytes(_ catalog: Catalog) -> [UInt8] {
        CanonicalJSON.serialize(encode(catalog))
    }

    package static func encode(_ catalog: Catalog) -> JSONValue {
        .object([
            "features": .array(catalog.features.map { f in
                .object([
                    "code": .int(Int64(f.code)),
                    "key": .string(f.key),
                    "name": encodeNames(f.names),
                    "consents": .array(f.consents.map { c in
                        .object([
                            "code": .string(c.code),
                            "name": encodeNames(c.names),
                            "required": .bool(c.isRequired),
                            "link": .string(c.link),
                            "version": .string(c.version),
                        ])
                    }),
                ])
            })
        ])
    }

    private static func encodeNames(_ names: [LocalizedName]) -> JSONValue {
        .object(Dictionary(uniqueKeysWithValues: names.map { ($0.language, .string($0.text)) }))
    }

    private static func decodeNames(_ value: JSONValue?, entry: String) throws(CatalogError) -> [LocalizedName] {
        guard let object = value?.objectValue, !object.isEmpty else {
            throw CatalogError(entry: entry, problem: "'name' must be an object of language tag to text, such as {\"en\": …, \"de\": …}")
        }
        var names: [LocalizedName] = []
        for language in object.keys.sorted() {
            guard let text = object[language]?.stringValue, !text.isEmpty else {
                throw CatalogError(entry: entry, problem: "name in '\(language)' must be a non-empty string")
            }
            names.append(LocalizedName(language: language, text: text))
        }
        return names
    }

    private static func checkMembers(_ object: [String: JSONValue], allowed: Set<String>, entry: String) throws(CatalogError) {
        if let extra = object.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw CatalogError(entry: entry, problem: "unknown member '\(extra)'")
        }
    }
}
