/// A consent a feature asks for (the app's `CMConsent` without its per-subject state).
///
/// Its members are held in one shared object, as are a ``Feature``'s: replay looks up a feature
/// and a consent for every event, and copying them member by member was a tenth of the ordered
/// stage of a replay (a retain and a release per string and array).
public struct ConsentDefinition: Hashable, Sendable {
    /// Unique within its feature, for example `required` or `optional-a`.
    public var code: String { fields.code }
    /// Display names by language tag (`en`, `de`), in catalogue order.
    public var names: [LocalizedName] { fields.names }
    /// Required consents gate the feature (rule R2); optional ones are chosen on the same screen.
    public var isRequired: Bool { fields.isRequired }
    /// An external link that explains why the data is needed.
    public var link: String { fields.link }
    /// The policy version of the notice the subject agrees to.
    public var version: String { fields.version }

    private final class Fields: Sendable {
        let code: String, names: [LocalizedName], isRequired: Bool, link: String, version: String
        init(code: String, names: [LocalizedName], isRequired: Bool, link: String, version: String) {
            (self.code, self.names, self.isRequired, self.link, self.version) = (code, names, isRequired, link, version)
        }
    }
    private let fields: Fields

    public init(code: String, names: [LocalizedName], isRequired: Bool, link: String, version: String) {
        fields = Fields(code: code, names: names, isRequired: isRequired, link: link, version: version)
    }

    /// The English name, or the first one when there is no English name.
    public var name: String { names.first { $0.language == "en" }?.text ?? names.first?.text ?? code }

    public static func == (a: ConsentDefinition, b: ConsentDefinition) -> Bool {
        a.fields === b.fields || (a.code == b.code && a.names == b.names && a.isRequired == b.isRequired && a.link == b.link && a.version == b.version)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(names)
        hasher.combine(isRequired)
        hasher.combine(link)
        hasher.combine(version)
    }
}

/// A display name in one language.
public struct LocalizedName: Hashable, Sendable {
    public let language: String
    public let text: String

    public init(language: String, text: String) {
        self.language = language
        self.text = text
    }
}

/// An app feature that needs consent, such as Medication Management. (Its members are held in
/// one shared object: see ``ConsentDefinition``.)
public struct Feature: Hashable, Sendable {
    /// Unique numeric feature code; events refer to a feature by it.
    public var code: Int { fields.code }
    /// Unique slug, for example `medication-management`.
    public var key: String { fields.key }
    public var names: [LocalizedName] { fields.names }
    /// Required consents first, then optional ones, each group in catalogue order (rule R7).
    public var consents: [ConsentDefinition] { fields.consents }
    public var requiredConsents: [ConsentDefinition] { fields.requiredConsents }
    public var optionalConsents: [ConsentDefinition] { fields.optionalConsents }

    private final class Fields: Sendable {
        let code: Int, key: String, names: [LocalizedName]
        let consents: [ConsentDefinition], requiredConsents: [ConsentDefinition], optionalConsents: [ConsentDefinition]
        init(code: Int, key: String, names: [LocalizedName], consents: [ConsentDefinition]) {
            (self.code, self.key, self.names) = (code, key, names)
            requiredConsents = consents.filter(\.isRequired)
            optionalConsents = consents.filter { !$0.isRequired }
            self.consents = requiredConsents + optionalConsents
        }
    }
    private let fields: Fields

    public init(code: Int, key: String, names: [LocalizedName], consents: [ConsentDefinition]) {
        fields = Fields(code: code, key: key, names: names, consents: consents)
    }

    public var name: String { names.first { $0.language == "en" }?.text ?? names.first?.text ?? key }

    public func consent(code: String) -> ConsentDefinition? { fields.consents.first { $0.code == code } }

    public static func == (a: Feature, b: Feature) -> Bool {
        a.fields === b.fields || (a.code == b.code && a.key == b.key && a.names == b.names && a.consents == b.consents)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(key)
        hasher.combine(names)
        hasher.combine(consents)
    }
}

/// The features and consents a ledger knows. Constructing one validates it.
public struct Catalog: Hashable, Sendable {
    public let features: [Feature]

    /// Validates and builds a catalogue; the error names the offending entry.
    public init(features: [Feature]) throws(CatalogError) {
        if features.isEmpty { throw CatalogError(entry: "features", problem: "the catalogue has no features") }
        var codes: [Int: Int] = [:]
        var keys: [String: Int] = [:]
        for (i, feature) in features.enumerated() {
            let entry = "features[\(i)] (\(feature.key.isEmpty ? String(feature.code) : feature.key))"
            if let earlier = codes[feature.code] {
                throw CatalogError(entry: entry, problem: "feature code \(feature.code) is already used by features[\(earlier)]")
            }
            if let earlier = keys[feature.key] {
                throw CatalogError(entry: entry, problem: "feature key '\(feature.key)' is already used by features[\(earlier)]")
            }
            codes[feature.code] = i
            keys[feature.key] = i
            if feature.code < 0 { throw CatalogError(entry: entry, problem: "feature code must not be negative") }
            if !Self.isSlug(feature.key) {
                throw CatalogError(entry: entry, problem: "feature key '\(feature.key)' must be lowercase letters, digits and '-', starting with a letter")
            }
            if feature.names.isEmpty { throw CatalogError(entry: entry, problem: "the feature has no name") }
            if feature.consents.isEmpty { throw CatalogError(entry: entry, problem: "the feature has no consents") }
            if feature.requiredConsents.isEmpty {
                throw CatalogError(entry: entry, problem: "the feature has no required consent; every feature needs at least one")
            }
            var consentCodes: Set<String> = []
            for consent in feature.consents {
                let centry = "\(entry) consent '\(consent.code)'"
                if !consentCodes.insert(consent.code).inserted {
                    throw CatalogError(entry: centry, problem: "consent code '\(consent.code)' appears twice in feature '\(feature.key)'")
                }
                if !Self.isSlug(consent.code) {
                    throw CatalogError(entry: centry, problem: "consent code must be lowercase letters, digits and '-', starting with a letter")
                }
                if consent.names.isEmpty { throw CatalogError(entry: centry, problem: "the consent has no name") }
                if !(consent.link.utf8.starts(with: "https://".utf8) || consent.link.utf8.starts(with: "http://".utf8)) || consent.link.utf8.count < 10 {
                    throw CatalogError(entry: centry, problem: "link '\(consent.link)' is not an http(s) URL")
                }
                if consent.version.isEmpty { throw CatalogError(entry: centry, problem: "the consent has no policy version") }
            }
        }
        self.features = features
    }

    /// Finds a feature by its key (`timeline`) or its numeric code (`2`).
    public func feature(named nameOrCode: String) -> Feature? {
        if let code = Int(nameOrCode) { return feature(code: code) }
        return features.first { $0.key == nameOrCode }
    }

    public func feature(code: Int) -> Feature? { features.first { $0.code == code } }

    /// Why `self` cannot replace `current` as a published version, or nil if it can. A new
    /// version keeps the features, their codes and keys, and each feature's consents with their
    /// codes and required flags; it changes policy versions, links or names, and must change
    /// something.
    public func problemAsUpdate(of current: Catalog) -> String? {
        if self == current { return "it is identical to the catalogue in force" }
        guard features.map(\.code) == current.features.map(\.code), features.map(\.key) == current.features.map(\.key) else {
            return "its features differ from the catalogue in force (a new version may change versions, links and names only)"
        }
        for (new, old) in zip(features, current.features) {
            guard new.consents.map(\.code) == old.consents.map(\.code), new.consents.map(\.isRequired) == old.consents.map(\.isRequired) else {
                return "the consents of '\(new.key)' differ from the catalogue in force (a new version may change versions, links and names only)"
            }
        }
        return nil
    }

    /// Why a policy version cannot be published, or nil: a version is 1 to 32 characters from
    /// letters, digits, `.`, `-`, `_` and `+`, beginning and ending with a letter or digit (`1.0`,
    /// `2026-06`, `v2`, `1.0+de`). So `"2.0 "` is not `"2.0"` made new by accident.
    public static func versionProblem(_ version: String) -> String? {
        let bytes = Array(version.utf8)
        func alphanumeric(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) }
        guard (1...32).contains(bytes.count) else { return "policy version '\(version)' must be 1 to 32 characters" }
        guard alphanumeric(bytes.first!), alphanumeric(bytes.last!), bytes.allSatisfy({ alphanumeric($0) || $0 == 0x2E || $0 == 0x2D || $0 == 0x5F || $0 == 0x2B }) else {
            return "policy version '\(version)' must be letters, digits, '.', '-', '_' and '+', beginning and ending with a letter or digit (such as 1.0 or 2026-06)"
        }
        return nil
    }

    /// Why this catalogue cannot be the first of a new ledger or a new published version, or nil:
    /// every policy version has the shape ``versionProblem(_:)`` describes. (Catalogues already in
    /// a ledger are read as they were written.)
    public func problemAsNewVersion() -> String? {
        for feature in features {
            for consent in feature.consents {
                if let problem = Self.versionProblem(consent.version) { return "\(feature.key)/\(consent.code): \(problem)" }
            }
        }
        return nil
    }

    static func isSlug(_ s: String) -> Bool {
        guard let first = s.utf8.first, first >= 0x61, first <= 0x7A, s.utf8.count <= 64 else { return false }
        return s.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }
}

/// A catalogue that cannot be used, and which entry is at fault.
public struct CatalogError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Where the problem is, for example `features[1] (timeline) consent 'optional-a'`.
    public let entry: String
    public let problem: String

    public init(entry: String, problem: String) {
        self.entry = entry
        self.problem = problem
    }

    public var description: String { "\(entry): \(problem)" }
}
