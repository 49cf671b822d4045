import ConsentLedger
#if canImport(Glibc)
import Glibc
#endif

/// The files the offline checks read. Handing one the wrong kind of file is a usage error
/// (exit 64) that names what the file is; exit 2 is kept for a file of the right kind that
/// fails verification, which an auditor reads as "tampered".
enum EvidenceFile {
    case exportBundle, stateProof, consistencyProof

    var format: String {
        switch self {
        case .exportBundle: AuditExport.format
        case .stateProof: StateProof.format
        case .consistencyProof: "consentledger-consistency-v1"
        }
    }

    var name: String {
        switch self {
        case .exportBundle: "an export bundle"
        case .stateProof: "a state proof"
        case .consistencyProof: "a consistency proof"
        }
    }

    var writtenBy: String {
        switch self {
        case .exportBundle: "consentctl export"
        case .stateProof: "consentctl prove-state"
        case .consistencyProof: "consentctl prove-consistency"
        }
    }

    /// Refuses `bytes` read from `path` when they are recognisably not this kind of file. A file
    /// that may be this kind, damaged (it names this format, or is JSON cut short), is left to
    /// the verifier.
    func check(_ bytes: UnsafeBufferPointer<UInt8>, path: String) throws {
        func refuse(_ what: String) -> ConsentError {
            .invalidRequest("\(path) is \(what), not \(name) (which '\(writtenBy)' writes)")
        }
        let value: JSONValue
        do {
            // The top-level members only: a bundle's events are checked and dropped.
            value = .object(try CanonicalJSON.parseObject(bytes, lazy: "events", canonical: false).members)
        } catch {
            let text = bytes.drop { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
            if Self.contains(bytes, Array("\"format\":\"\(format)\"".utf8)) { return }
            if text.starts(with: Array(#"{"body":"#.utf8)) || text.starts(with: Array(#"{"head":"#.utf8)) { throw refuse("a ledger's log (ledger.jsonl)") }
            if text.first == UInt8(ascii: "<") { throw refuse("an HTML or XML document") }
            // Cut short: possibly this kind, damaged.
            if text.first == UInt8(ascii: "{"), error.message.contains("end of input") || error.message.contains("unterminated") { return }
            if text.isEmpty { throw refuse("empty") }
            throw refuse("not JSON (\(error))")
        }
        if value["format"]?.stringValue == format { return }
        if let other = Self.allCases.first(where: { value["format"]?.stringValue == $0.format }) { throw refuse(other.name) }
        if let format = value["format"]?.stringValue { throw refuse("JSON of format '\(format)'") }
        if let resource = value["resourceType"]?.stringValue { throw refuse(resource == "Bundle" ? "a FHIR Bundle" : "a FHIR \(resource)") }
        if value["features"] != nil { throw refuse("a catalogue") }
        if value["subjects"] != nil || value["totals"] != nil { throw refuse("an audit report (JSON)") }
        throw refuse("JSON without a 'format' member")
    }

    static let allCases: [EvidenceFile] = [.exportBundle, .stateProof, .consistencyProof]

    static func contains(_ haystack: UnsafeBufferPointer<UInt8>, _ needle: [UInt8]) -> Bool {
        guard let first = needle.first, haystack.count >= needle.count else { return needle.isEmpty }
        let h = UnsafeRawBufferPointer(haystack)
        return needle.withUnsafeBytes { n in
            var start = 0
            let last = h.count - n.count
            while start <= last, let hit = memchr(h.baseAddress! + start, Int32(first), last - start + 1) {
                let at = h.baseAddress!.distance(to: UnsafeRawPointer(hit))
                if memcmp(h.baseAddress! + at, n.baseAddress!, n.count) == 0 { return true }
                start = at + 1
            }
            return false
        }
    }
}
