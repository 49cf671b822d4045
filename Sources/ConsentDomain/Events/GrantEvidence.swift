/// How a consent was obtained, as consent records carry it (ISO/IEC TS 27560, Kantara consent
/// receipts): when the subject agreed, through which channel, in which language the notice was
/// shown, and a reference to the document that records it.
///
/// It is evidence shown beside a grant, never an input to the rules: rules R2–R6, the cascade and
/// every as-of query use the event's recorded time (`at`) and its sequence number, so a grant
/// recorded with an earlier effective time can never reorder what the log says happened.
public struct GrantEvidence: Hashable, Sendable {
    /// Where a consent was given.
    public enum Channel: String, CaseIterable, Hashable, Sendable {
        case app, portal, paper, phone, clinician
    }

    /// When the subject agreed, if earlier than the event was recorded (a paper form signed
    /// yesterday). Never later than the recorded time.
    public var effectiveAt: Timestamp?
    public var channel: Channel?
    /// The BCP 47 language tag of the notice the subject saw (`de`, `en-GB`).
    public var noticeLanguage: String?
    /// A reference to the document or scan that records the consent, in clear: as a command
    /// gives it, or once its sealed form was opened with the subject's key. It can be personal
    /// data, so the log holds it only sealed (``sealedReference``).
    public var reference: String?
    /// The reference as the log holds it: sealed under the subject's key (nonce, tag and
    /// ciphertext; `Spec/erasure.md`), which an erasure destroys. Opaque here: sealing and
    /// opening are the ledger's work. A grant read from the log carries this and no
    /// ``reference`` until the ledger opens it; after an erasure it stays sealed for good.
    public var sealedReference: [UInt8]?

    public init(effectiveAt: Timestamp? = nil, channel: Channel? = nil, noticeLanguage: String? = nil, reference: String? = nil, sealedReference: [UInt8]? = nil) {
        self.effectiveAt = effectiveAt
        self.channel = channel
        self.noticeLanguage = noticeLanguage
        self.reference = reference
        self.sealedReference = sealedReference
    }

    /// True when nothing is recorded.
    public var isEmpty: Bool { effectiveAt == nil && channel == nil && noticeLanguage == nil && reference == nil && sealedReference == nil }

    /// True when the grant has a reference that is sealed and was not opened (its subject was
    /// erased, or the reader holds no record of it).
    public var isReferenceSealed: Bool { reference == nil && sealedReference != nil }

    /// The longest evidence reference, in UTF-8 bytes.
    public static let maxReferenceBytes = 512

    /// Why the fields cannot be recorded, or nil. The effective time is checked against the
    /// recorded time by the rules (``ConsentRules``), which know it.
    public var problem: String? {
        if let tag = noticeLanguage, !Self.isLanguageTag(tag) {
            return "notice language '\(tag)' is not a BCP 47 language tag (such as 'de' or 'en-GB')"
        }
        if let ref = reference {
            if ref.isEmpty { return "the evidence reference is empty" }
            if ref.utf8.count > Self.maxReferenceBytes { return "the evidence reference is longer than \(Self.maxReferenceBytes) bytes" }
            if ref.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || (0x80...0x9F).contains($0.value) }) {
                return "the evidence reference contains a control character"
            }
            if ref.unicodeScalars.first == " " || ref.unicodeScalars.last == " " { return "the evidence reference has leading or trailing spaces" }
        }
        return nil
    }

    /// The shape of a BCP 47 tag (RFC 5646): a 2–3 letter primary language (or 4–8 for the
    /// registered long forms), then subtags of 1–8 letters or digits, separated by `-`. The
    /// registry itself is not consulted.
    public static func isLanguageTag(_ tag: String) -> Bool {
        let parts = tag.split(separator: "-", omittingEmptySubsequences: false)
        guard let first = parts.first, (2...8).contains(first.count), first.allSatisfy({ $0.isASCII && $0.isLetter }) else { return false }
        return parts.dropFirst().allSatisfy { (1...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } }
    }
}

extension LedgerEvent {
    /// The event with its grant's evidence replaced by `transform(evidence)`; any other event as
    /// it is. The ledger seals and opens evidence references through this.
    public func mappingEvidence<E: Error>(_ transform: (GrantEvidence) throws(E) -> GrantEvidence) throws(E) -> LedgerEvent {
        guard case .consentGiven(let given) = payload, !given.evidence.isEmpty else { return self }
        let evidence = try transform(given.evidence)
        let changed = ConsentGiven(subject: given.subject, feature: given.feature, consent: given.consent, version: given.version, renews: given.renews, evidence: evidence)
        return LedgerEvent(seq: seq, at: at, actor: actor, command: command, payload: .consentGiven(changed))
    }
}
