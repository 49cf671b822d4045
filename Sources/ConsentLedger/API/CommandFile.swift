import ConsentDomain
import LedgerFormat

/// A file of commands for `consentctl apply` (and any bulk import): one JSON object per line,
/// such as `{"subject":"alice","feature":"timeline","give":["required","optional-a"]}` or
/// `{"subject":"bob","feature":"timeline","revoke":"optional-b","actor":"dr.house"}`, with the
/// optional evidence members of a grant (`effectiveAt`, `channel`, `noticeLanguage`,
/// `evidence`).
public enum CommandFile {
    /// Parses and checks every line, as the ledger would check each command, so that a bad line
    /// late in a file stops a run before its first command is appended. Blank lines are
    /// skipped; a line may end in CR LF. Errors name the file and line.
    public static func parse(_ bytes: [UInt8], catalog: Catalog, file: String) throws -> [(line: Int, command: LedgerCommand)] {
        var commands: [(line: Int, command: LedgerCommand)] = []
        for (index, raw) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            func bad(_ problem: String) -> ConsentError { .invalidRequest("\(file) line \(number): \(problem); nothing was appended") }
            let line = raw.last == 0x0D ? raw.dropLast() : raw
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            let value: JSONValue
            do {
                value = try CanonicalJSON.parse(Array(line), canonical: false)
            } catch {
                throw bad("not JSON: \(error)")
            }
            guard case .object(let members) = value else { throw bad("not a JSON object") }
            let known = ["subject", "feature", "give", "revoke", "actor", "effectiveAt", "channel", "noticeLanguage", "evidence"]
            if let unknown = members.keys.sorted().first(where: { !known.contains($0) }) {
                throw bad("unknown member \"\(unknown)\" (known: \(known.joined(separator: ", ")))")
            }
            guard case .string(let subject)? = members["subject"] else { throw bad("\"subject\" must be a string") }
            guard case .string(let featureName)? = members["feature"] else { throw bad("\"feature\" must be a string") }
            guard let feature = catalog.feature(named: featureName) else {
                throw bad("unknown feature '\(featureName)' (known: \(catalog.features.map(\.key).joined(separator: ", ")))")
            }
            var actor = "self"
            if let given = members["actor"] {
                guard case .string(let a) = given else { throw bad("\"actor\" must be a string") }
                actor = a
            }
            // The whole command is checked here, as the ledger would check it, so that a bad line
            // late in the file stops the run before the first command is appended.
            do {
                try LedgerCommand.validate(subjectID: subject, actor: actor)
            } catch let error as ConsentError {
                throw bad(error.description)
            }
            func checkConsent(_ code: String) throws {
                guard feature.consent(code: code) != nil else {
                    throw bad("feature '\(feature.key)' has no consent '\(code)' (it has: \(feature.consents.map(\.code).joined(separator: ", ")))")
                }
            }
            func codes(_ items: [JSONValue], _ member: String) throws -> [String] {
                var codes: [String] = []
                for item in items {
                    guard case .string(let code) = item else { throw bad("\"\(member)\" must list consent codes") }
                    try checkConsent(code)
                    codes.append(code)
                }
                guard !codes.isEmpty else { throw bad("\"\(member)\" names no consent") }
                return codes
            }
            let request: ConsentRequest
            switch (members["give"], members["revoke"]) {
            case (.array(let items)?, nil):
                request = .give(feature: featureName, consents: try codes(items, "give"))
            case (nil, .string(let code)?):
                request = .revoke(feature: featureName, consents: try codes([.string(code)], "revoke"))
            case (nil, .array(let items)?):
                request = .revoke(feature: featureName, consents: try codes(items, "revoke"))
            default:
                throw bad("give exactly one of \"give\": [consent codes] or \"revoke\": a consent code or [consent codes]")
            }
            var evidence = GrantEvidence()
            func text(_ member: String) throws -> String? {
                guard let value = members[member] else { return nil }
                guard case .string(let s) = value else { throw bad("\"\(member)\" must be a string") }
                return s
            }
            if let time = try text("effectiveAt") {
                guard let t = Timestamp(rfc3339: time) ?? Timestamp(dayMonthYear: time) else { throw bad("\"effectiveAt\" '\(time)' is not a time like 2026-11-21T10:00:00Z") }
                evidence.effectiveAt = t
            }
            if let channel = try text("channel") {
                guard let c = GrantEvidence.Channel(rawValue: channel) else {
                    throw bad("\"channel\" must be one of \(GrantEvidence.Channel.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                evidence.channel = c
            }
            evidence.noticeLanguage = try text("noticeLanguage")
            evidence.reference = try text("evidence")
            if !evidence.isEmpty, case .revoke = request { throw bad("effectiveAt, channel, noticeLanguage and evidence belong to a give, not a revoke") }
            if let problem = evidence.problem { throw bad(problem) }
            commands.append((number, LedgerCommand(subjectID: subject, request: request, actor: actor, evidence: evidence)))
        }
        guard !commands.isEmpty else { throw ConsentError.invalidRequest("\(file) holds no commands") }
        return commands
    }
}
