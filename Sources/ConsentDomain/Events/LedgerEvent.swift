/// An opaque, pseudonymous reference to a subject (a patient).
///
/// Subject ids are personal data, so the log never holds them: it holds a reference derived from
/// the id and a per-subject random salt kept outside the log. Forgetting the salt erases the link
/// between the person and their events without touching the hash chain.
///
/// A ledger's references are pseudonyms of 32 lowercase hex digits; one is held as its 16 bytes
/// (no allocation, and hashed and compared as two words: replay and verify look one up for every
/// event). Any other text (tests name subjects "alice") is held as it is. Either way two
/// references are equal exactly when their ``value``s are.
public struct SubjectRef: Hashable, Comparable, Sendable, CustomStringConvertible {
    private enum Storage: Hashable, Sendable {
        /// The 16 bytes of 32 lowercase hex digits, big-endian in two words.
        case pseudonym(UInt64, UInt64)
        case text(String)
    }
    private let storage: Storage

    public init(_ value: String) {
        var text = value
        storage = text.withUTF8 { Self.pseudonym(hex: $0) } ?? .text(value)
    }

    /// A pseudonym read from its 32 lowercase hex digits without making a string; nil for
    /// anything else.
    public init?(pseudonymHex bytes: UnsafeBufferPointer<UInt8>) {
        guard let storage = Self.pseudonym(hex: bytes) else { return nil }
        self.storage = storage
    }

    /// The pseudonym whose 16 bytes are `bytes` (the inverse of ``pseudonymBytes``): made from
    /// a digest without spelling it in hex and reading the hex back.
    public init(pseudonymBytes bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == 16, "a pseudonym has 16 bytes")
        storage = .pseudonym(UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                             UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
    }

    private static func pseudonym(hex: UnsafeBufferPointer<UInt8>) -> Storage? {
        guard hex.count == 32 else { return nil }
        // A table, not a branch per digit: replay reads a subject for nearly every event.
        let table = hexDigitValues
        var words: (UInt64, UInt64) = (0, 0)
        var invalid: UInt8 = 0
        for i in 0..<16 {
            let digit = table[Int(hex[i])]
            invalid |= digit
            words.0 = words.0 << 4 | UInt64(digit & 0x0F)
        }
        for i in 16..<32 {
            let digit = table[Int(hex[i])]
            invalid |= digit
            words.1 = words.1 << 4 | UInt64(digit & 0x0F)
        }
        return invalid & 0xF0 == 0 ? .pseudonym(words.0, words.1) : nil
    }

    /// Each byte's value as a lowercase hex digit (0–15), or 0xFF for any other byte. Written
    /// once, before first use, and only read after: safe to share.
    private nonisolated(unsafe) static let hexDigitValues: UnsafePointer<UInt8> = {
        let table = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
        table.initialize(repeating: 0xFF, count: 256)
        for (i, digit) in "0123456789abcdef".utf8.enumerated() { table[Int(digit)] = UInt8(i) }
        return UnsafePointer(table)
    }()

    /// The reference as the log writes it.
    public var value: String {
        switch storage {
        case .text(let text): return text
        case .pseudonym(let high, let low):
            // The digits at a fixed address: an array of them, made on every call, cost more
            // than the spelling (a writer spells a subject in every event's body).
            let digits = ("0123456789abcdef" as StaticString).utf8Start
            return String(unsafeUninitializedCapacity: 32) { out in
                for i in 0..<16 {
                    out[i] = digits[Int(truncatingIfNeeded: high >> UInt64(60 - 4 * i)) & 0xF]
                    out[16 + i] = digits[Int(truncatingIfNeeded: low >> UInt64(60 - 4 * i)) & 0xF]
                }
                return 32
            }
        }
    }

    /// The pseudonym's 16 bytes (a subject's stream key), or nil for a reference that is not one.
    public var pseudonymBytes: [UInt8]? {
        guard case .pseudonym(let high, let low) = storage else { return nil }
        return [UInt8](unsafeUninitializedCapacity: 16) { out, count in
            let bytes = UnsafeMutableRawBufferPointer(out)
            bytes.storeBytes(of: high.bigEndian, toByteOffset: 0, as: UInt64.self)
            bytes.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
            count = 16
        }
    }

    public var description: String { value }

    public static func < (lhs: SubjectRef, rhs: SubjectRef) -> Bool {
        // Two pseudonyms compare as their words: the same order as their hex digits.
        if case .pseudonym(let a0, let a1) = lhs.storage, case .pseudonym(let b0, let b1) = rhs.storage { return (a0, a1) < (b0, b1) }
        return lhs.value < rhs.value
    }
}

/// Which events were written together by one command. A command's events are atomic: after a
/// crash either all of them are in the log or none is.
public struct CommandSpan: Hashable, Sendable {
    /// Sequence number of the command's first event.
    public let first: UInt64
    /// How many events the command wrote.
    public let size: Int

    public init(first: UInt64, size: Int) {
        self.first = first
        self.size = size
    }

    /// Sequence number of the command's last event.
    public var last: UInt64 { first + UInt64(size) - 1 }
}

/// The first event of every ledger: it pins the ledger's name, catalogue and public key.
public struct LedgerCreated: Hashable, Sendable {
    /// The ledger's name; later issues use it as the checkpoint origin.
    public let ledgerName: String
    /// Lowercase hex SHA-256 of the catalogue's canonical bytes.
    public let catalogHash: String
    /// Lowercase hex Ed25519 public key that signs every event.
    public let publicKey: String

    public init(ledgerName: String, catalogHash: String, publicKey: String) {
        self.ledgerName = ledgerName
        self.catalogHash = catalogHash
        self.publicKey = publicKey
    }
}

/// A subject gave one consent.
public struct ConsentGiven: Hashable, Sendable {
    public let subject: SubjectRef
    public let feature: Int
    public let consent: String
    /// The consent's policy version in force when it was given.
    public let version: String
    /// Set on a re-consent: the sequence number of the earlier grant, of an older policy
    /// version, that this one renews.
    public let renews: UInt64?
    /// How the consent was obtained, when the command recorded it.
    public let evidence: GrantEvidence

    public init(subject: SubjectRef, feature: Int, consent: String, version: String, renews: UInt64? = nil, evidence: GrantEvidence = GrantEvidence()) {
        self.subject = subject
        self.feature = feature
        self.consent = consent
        self.version = version
        self.renews = renews
        self.evidence = evidence
    }
}

/// The policy notice of one consent in a published catalogue version.
public struct PolicyNotice: Hashable, Sendable {
    public let feature: Int
    public let consent: String
    public let version: String
    /// Lowercase hex SHA-256 of the notice the consent points to (its link's text).
    public let sha256: String

    public init(feature: Int, consent: String, version: String, sha256: String) {
        self.feature = feature
        self.consent = consent
        self.version = version
        self.sha256 = sha256
    }
}

/// A new catalogue version took effect: from this event on, grants must be of its policy
/// versions, and earlier grants of a changed version are outdated.
public struct CatalogPublished: Hashable, Sendable {
    public let catalog: Catalog
    /// Lowercase hex SHA-256 of the catalogue's canonical bytes.
    public let catalogHash: String
    /// One notice per consent of the catalogue, in catalogue order.
    public let notices: [PolicyNotice]

    public init(catalog: Catalog, catalogHash: String, notices: [PolicyNotice]) {
        self.catalog = catalog
        self.catalogHash = catalogHash
        self.notices = notices
    }
}

/// Why a consent was withdrawn.
public enum RevocationReason: Hashable, Sendable {
    /// The subject (or the actor on their behalf) withdrew this consent.
    case withdrawn
    /// Rule R4: withdrawing a required consent withdrew this optional one; `cause` is the
    /// sequence number of that required consent's `ConsentRevoked` event.
    case cascade(cause: UInt64)
}

/// A subject's consent was withdrawn.
public struct ConsentRevoked: Hashable, Sendable {
    public let subject: SubjectRef
    public let feature: Int
    public let consent: String
    public let reason: RevocationReason

    public init(subject: SubjectRef, feature: Int, consent: String, reason: RevocationReason) {
        self.subject = subject
        self.feature = feature
        self.consent = consent
        self.reason = reason
    }
}

/// A subject's record (id, salt) was destroyed at their request (GDPR Art. 17): the log keeps
/// the pseudonym's history, which nothing can link to the person any more. No event of the
/// subject may follow.
public struct SubjectErased: Hashable, Sendable {
    public let subject: SubjectRef
    /// Why, as the requester's records name it (a request number, "GDPR Art. 17"): at most
    /// ``maximumReasonBytes`` bytes, no control characters. It is signed into the log and
    /// outlives the erasure, so it must not name the person.
    public let reason: String?

    public static let maximumReasonBytes = 200

    public init(subject: SubjectRef, reason: String? = nil) {
        self.subject = subject
        self.reason = reason
    }

    /// Why `reason` cannot be recorded, or nil.
    public static func problem(reason: String) -> String? {
        if reason.isEmpty { return "the reason is empty" }
        if reason.utf8.count > maximumReasonBytes { return "the reason has \(reason.utf8.count) bytes, more than \(maximumReasonBytes)" }
        if reason.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { return "the reason contains a control character" }
        return nil
    }
}

/// From the next event on, the ledger signs with a new key: events, heads, checkpoints and
/// subject records. The event itself is signed by the key it retires (the key in force, like
/// every event), and carries the new key's `handover` signature over the ledger, the position
/// and both keys, so that whoever holds only the old key cannot name a successor. What the
/// signatures mean is the format's business (`KeyHandover`); the domain sees a ledger-level
/// command of its own.
public struct KeyRotated: Hashable, Sendable {
    /// Lowercase hex of the new Ed25519 public key (64 digits).
    public let publicKey: String
    /// Lowercase hex of the new key's handover signature (128 digits).
    public let handover: String

    public init(publicKey: String, handover: String) {
        self.publicKey = publicKey
        self.handover = handover
    }
}

/// A key the ledger rotated away from was compromised from event `compromisedSince` on. The
/// event is signed by the key in force (never the revoked one), and re-attests, by their hashes,
/// the honest events the revoked key signed from `compromisedSince` up to and including the
/// rotation that retired it: from then on an event signed by the revoked key in that window
/// whose hash is not attested is refused. The domain sees a ledger-level command of its own.
public struct KeyRevoked: Hashable, Sendable {
    /// Lowercase hex of the revoked Ed25519 public key (64 digits).
    public let publicKey: String
    /// The seq of the first event the key may have signed for someone else.
    public let compromisedSince: UInt64
    /// Lowercase hex SHA-256 of the body of each event the key signed from `compromisedSince`
    /// on, in log order.
    public let attested: [String]

    public init(publicKey: String, compromisedSince: UInt64, attested: [String]) {
        self.publicKey = publicKey
        self.compromisedSince = compromisedSince
        self.attested = attested
    }
}

/// The ledger's clock went wrong, and this event puts it right: the events before it carry times
/// up to `correctedFrom`, later than the writer's clock by more than the ledger allows, and from
/// this event on the ledger's time is this event's own `at` again, earlier than `correctedFrom`.
/// It is the one event whose time may go backwards (Spec/ledger-format.md, rule 5b), and it
/// makes the times before it good for as-of questions (``ClockCorrections``). A command of its
/// own, about no subject.
public struct ClockCorrected: Hashable, Sendable {
    /// The ledger's time before the correction: the previous event's `at`.
    public let correctedFrom: Timestamp
    /// Why, as the operator wrote it ("NTP server served 2999"): rules as for an erasure's
    /// reason (``SubjectErased/problem(reason:)``).
    public let reason: String?

    public init(correctedFrom: Timestamp, reason: String? = nil) {
        self.correctedFrom = correctedFrom
        self.reason = reason
    }
}

/// What happened.
public enum EventPayload: Hashable, Sendable {
    case ledgerCreated(LedgerCreated)
    case catalogPublished(CatalogPublished)
    case consentGiven(ConsentGiven)
    case consentRevoked(ConsentRevoked)
    case subjectErased(SubjectErased)
    case keyRotated(KeyRotated)
    case keyRevoked(KeyRevoked)
    case clockCorrected(ClockCorrected)

    /// The subject the event is about, if any.
    public var subject: SubjectRef? {
        switch self {
        case .ledgerCreated, .catalogPublished, .keyRotated, .keyRevoked, .clockCorrected: return nil
        case .consentGiven(let e): return e.subject
        case .consentRevoked(let e): return e.subject
        case .subjectErased(let e): return e.subject
        }
    }

    /// The `type` string of the ledger format.
    public var typeName: String {
        switch self {
        case .ledgerCreated: return "ledger.created"
        case .catalogPublished: return "catalog.published"
        case .consentGiven: return "consent.given"
        case .consentRevoked: return "consent.revoked"
        case .subjectErased: return "subject.erased"
        case .keyRotated: return "key.rotated"
        case .keyRevoked: return "key.revoked"
        case .clockCorrected: return "clock.corrected"
        }
    }
}

/// One event of the log, as the domain sees it: no hashes, no signatures (those are the chain's).
public struct LedgerEvent: Hashable, Sendable {
    public let seq: UInt64
    public let at: Timestamp
    /// Who did it: the subject themselves (`self`), a clinician, a system.
    public let actor: String
    public let command: CommandSpan
    public let payload: EventPayload

    public init(seq: UInt64, at: Timestamp, actor: String, command: CommandSpan, payload: EventPayload) {
        self.seq = seq
        self.at = at
        self.actor = actor
        self.command = command
        self.payload = payload
    }
}

extension String {
    /// Whether the two strings are the same bytes: what the ledger's rules compare (an actor,
    /// a policy version), where `==`, which compares Unicode canonical equivalence, would call
    /// two different byte strings equal. Compared in their storage, not a byte at a time through
    /// the generic `elementsEqual`, which was 2% of replay's instructions.
    @inlinable
    public func hasSameBytes(as other: String) -> Bool {
        let (mine, theirs) = (utf8, other.utf8)
        guard mine.count == theirs.count else { return false }
        let compared = mine.withContiguousStorageIfAvailable { a in
            theirs.withContiguousStorageIfAvailable { b in
                // A plain loop: `elementsEqual` of two buffers went through their iterators.
                var i = 0
                while i < a.count {
                    if a[i] != b[i] { return false }
                    i += 1
                }
                return true
            }
        }
        return (compared ?? nil) ?? mine.elementsEqual(theirs)
    }
}
