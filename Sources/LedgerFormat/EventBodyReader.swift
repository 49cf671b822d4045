import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ConsentDomain

/// Reads an event body in one pass over its bytes, checking that it is canonical JSON with only
/// the members of format version 1 or 2, without building a generic JSON tree. Replay and verify
/// read every event, so this is the hot path of both.
package struct EventBodyReader {
    /// Every member name of format versions 1 and 2, in canonical (sorted) order; a member's bit is
    /// 1 << its index here.
    static let names: [[UInt8]] = ["actor", "at", "attested", "catalog", "cause", "channel", "cmd", "cmdSize", "compromisedSince", "consent", "correctedFrom", "document", "effectiveAt", "evidence", "feature", "handover", "kid", "ledger", "noticeLanguage", "notices", "prev", "publicKey", "reason", "renews", "sealedEvidence", "seq", "streamPrev", "streamRoot", "subject", "type", "v", "version"].map { Array($0.utf8) }

    enum Name: Int {
        case actor, at, attested, catalog, cause, channel, cmd, cmdSize, compromisedSince, consent, correctedFrom, document, effectiveAt, evidence, feature, handover, kid, ledger, noticeLanguage, notices, prev, publicKey, reason, renews, sealedEvidence, seq, streamPrev, streamRoot, subject, type, v, version
        var bit: UInt64 { 1 << UInt64(rawValue) }
        var text: String { String(decoding: EventBodyReader.names[rawValue], as: UTF8.self) }
    }

    static func bits(_ names: [Name]) -> UInt64 { names.reduce(0) { $0 | $1.bit } }
    /// The optional members of a grant: its evidence (``GrantEvidence``).
    static let evidenceBits = bits([.effectiveAt, .channel, .noticeLanguage, .evidence, .sealedEvidence])
    static let commonBits = bits([.v, .seq, .at, .actor, .cmd, .cmdSize, .prev, .kid, .type])
    /// The stream members of format version 2.
    static let streamBits = Name.streamPrev.bit | Name.streamRoot.bit
    /// The event types, recognised from the body's bytes without making a string of them (a
    /// string per event, and comparing it with each type, showed in replay's profile).
    enum EventType: Int, CaseIterable {
        case consentGiven, consentRevoked, subjectErased, ledgerCreated, catalogPublished, keyRotated, keyRevoked, clockCorrected

        private static let texts: [StaticString] = ["consent.given", "consent.revoked", "subject.erased", "ledger.created", "catalog.published", "key.rotated", "key.revoked", "clock.corrected"]

        init?(bytes: UnsafeBufferPointer<UInt8>) {
            for type in Self.allCases {
                let text = Self.texts[type.rawValue]
                if text.utf8CodeUnitCount == bytes.count, memcmp(text.utf8Start, bytes.baseAddress!, bytes.count) == 0 {
                    self = type
                    return
                }
            }
            return nil
        }

        var text: String { Self.texts[rawValue].description }

        /// The members this type has besides the common ones.
        var members: UInt64 {
            switch self {
            case .consentGiven: Name.subject.bit | Name.feature.bit | Name.consent.bit | Name.version.bit
            case .consentRevoked: Name.subject.bit | Name.feature.bit | Name.consent.bit | Name.reason.bit
            case .subjectErased: Name.subject.bit
            case .ledgerCreated: Name.ledger.bit | Name.catalog.bit | Name.publicKey.bit
            case .catalogPublished: Name.catalog.bit | Name.document.bit | Name.notices.bit
            case .keyRotated: Name.publicKey.bit | Name.handover.bit
            case .keyRevoked: Name.publicKey.bit | Name.compromisedSince.bit | Name.attested.bit
            case .clockCorrected: Name.correctedFrom.bit
            }
        }
    }

    // What was read (plain fields, not arrays: a reader is made for every event).
    var present: UInt64 = 0
    var v: Int64 = -1, seq: Int64 = -1, cmd: Int64 = -1, cmdSize: Int64 = -1, feature: Int64 = -1, cause: Int64 = -1, renews: Int64 = -1, streamPrev: Int64 = -1, compromisedSince: Int64 = -1
    var document: JSONValue?, notices: JSONValue?, attested: JSONValue?
    var actor: String?, catalog: String?, consent: String?, handover: String?, kid: String?, ledger: String?
    var publicKey: String?, reason: String?, subject: String?, version: String?
    /// The type when it is a known one; `typeText` when it is not.
    var type: EventType?, typeText: String?
    /// A key id the caller expects (the last one it met): when the body's `kid` is the same, it
    /// is that string, not a new one (a key id is too long to be kept inline in a string).
    var keyIDHint: KeyIDHint?

    /// A key id a reader expects, with its bytes at hand for comparing.
    package struct KeyIDHint: Sendable {
        package let text: String
        let bytes: [UInt8]
        /// Whether the key id's bytes could stand in a plain string (no quote, backslash or
        /// control byte), so that a body's string of the same bytes is this key id.
        let isPlain: Bool

        package init(_ text: String) {
            self.text = text
            bytes = Array(text.utf8)
            isPlain = bytes.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }
        }

        func matches(_ other: UnsafeBufferPointer<UInt8>) -> Bool {
            guard bytes.count == other.count else { return false }
            guard let theirs = other.baseAddress else { return bytes.isEmpty }
            return bytes.withUnsafeBufferPointer { memcmp($0.baseAddress!, theirs, other.count) == 0 }
        }
    }
    /// The subject, when it is a pseudonym (32 lowercase hex digits), read without a string.
    var pseudonym: SubjectRef?
    var channel: String?, evidence: String?, noticeLanguage: String?, sealedEvidence: String?
    var at: Timestamp?, effectiveAt: Timestamp?, correctedFrom: Timestamp?
    var prev: Digest?, streamRoot: Digest?

    /// What one body holds besides the domain event.
    package struct Read {
        package let event: LedgerEvent
        package let prev: Digest
        package let keyID: String
        package let version: Int64
        package let stream: StreamLink
    }

    /// Reads one body. `keyIDHint`, the key id the caller expects, saves making a new string of
    /// the key id when the body's is the same.
    package static func read(_ body: UnsafeBufferPointer<UInt8>, keyIDHint: KeyIDHint? = nil) throws(EventDecodingError) -> Read {
        var reader = EventBodyReader()
        reader.keyIDHint = keyIDHint
        do {
            try reader.scan(body)
        } catch let error as JSONParseError {
            throw EventDecodingError(problem: "body is not canonical JSON: byte \(error.offset + EventCodec.linePrefix.count + 1): \(error.message)")
        } catch let error as EventDecodingError {
            throw error
        } catch {
            throw EventDecodingError(problem: "\(error)")
        }
        return try reader.event()
    }

    /// A member name's bytes as two little-endian words (zero past its end), for comparing a
    /// name with all of them at once.
    struct NameWords {
        let name: Name
        let length: Int
        let low: UInt64
        let high: UInt64
    }

    /// Every name's words, in ``Name`` order: a table made once for the process's life, read
    /// through a pointer (an array read on every member went through its checks each time).
    /// Written once, before first use, and only read after: safe to share.
    nonisolated(unsafe) static let nameWords: UnsafePointer<NameWords> = {
        let table = UnsafeMutablePointer<NameWords>.allocate(capacity: names.count)
        for (i, name) in names.enumerated() {
            var (low, high): (UInt64, UInt64) = (0, 0)
            for (k, byte) in name.enumerated() {
                if k < 8 { low |= UInt64(byte) << (8 * UInt64(k)) } else { high |= UInt64(byte) << (8 * UInt64(k - 8)) }
            }
            (table + i).initialize(to: NameWords(name: Name(rawValue: i)!, length: name.count, low: low, high: high))
            precondition(names.count == Name.version.rawValue + 1, "a name for every case")
        }
        return UnsafePointer(table)
    }()

    /// The member name whose string starts at `start` (at its opening quote) and the offset of
    /// its closing quote; nil when there is no string there or it is not a name of the format.
    /// The name is read as two eight-byte words, its closing quote found in them (the longest
    /// name has 16 bytes), and compared with the names' words: first those after `previous`
    /// (members come in canonical order, so the next is usually a few names on), then the others
    /// (a repeated or out-of-order name, which the caller reports). A quote that is escaped, or
    /// any other content a name cannot have, makes no known name. Compared a byte at a time
    /// (`memcmp` after a guess from the length and first letter), names were 8% of a replay.
    static func knownName(at start: Int, in bytes: UnsafeBufferPointer<UInt8>, after previous: Name?, table: UnsafePointer<NameWords> = nameWords) -> (Name, end: Int)? {
        guard start < bytes.count, bytes[start] == 0x22 else { return nil }
        let first = start + 1
        var end: Int?
        var (low, high): (UInt64, UInt64) = (0, 0)
        if first + 16 < bytes.count, let base = UnsafeRawPointer(bytes.baseAddress) {
            // The lowest byte marked is the first quote (a false mark can only follow a true one).
            func quotes(_ word: UInt64) -> UInt64 {
                let x = word ^ 0x2222_2222_2222_2222
                return (x &- 0x0101_0101_0101_0101) & ~x & 0x8080_8080_8080_8080
            }
            low = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: first, as: UInt64.self))
            high = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: first + 8, as: UInt64.self))
            let lowQuotes = quotes(low)
            if lowQuotes != 0 {
                end = first + lowQuotes.trailingZeroBitCount / 8
            } else {
                let highQuotes = quotes(high)
                if highQuotes != 0 {
                    end = first + 8 + highQuotes.trailingZeroBitCount / 8
                } else if bytes[first + 16] == 0x22 {
                    end = first + 16
                }
            }
        } else {
            var i = first
            while i < bytes.count, i <= first + 16 {
                if bytes[i] == 0x22 {
                    end = i
                    break
                }
                if i - first < 8 { low |= UInt64(bytes[i]) << (8 * UInt64(i - first)) } else if i - first < 16 { high |= UInt64(bytes[i]) << (8 * UInt64(i - first - 8)) }
                i += 1
            }
        }
        guard let end else { return nil }
        let length = end - first
        guard length >= 1 else { return nil }
        // Only the name's own bytes: the rest of the words is what follows it.
        low &= length >= 8 ? ~0 : (1 << (8 * UInt64(length))) - 1
        high &= length <= 8 ? 0 : (length >= 16 ? ~0 : (1 << (8 * UInt64(length - 8))) - 1)
        let count = Name.version.rawValue + 1
        let next = previous.map { $0.rawValue + 1 } ?? 0
        func matches(_ i: Int) -> Bool {
            let words = table[i]
            return words.length == length && words.low == low && words.high == high
        }
        for i in next..<count where matches(i) { return (table[i].name, end) }
        for i in 0..<next where matches(i) { return (table[i].name, end) }
        return nil
    }

    private mutating func scan(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        // Read once for the body, not for each of its members (a global's every read checks
        // that it is made).
        let nameTable = Self.nameWords
        var p = CanonicalJSON.Parser(bytes: bytes, canonical: true)
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "{") else { throw p.error("expected a JSON object") }
        p.index = 1
        var previous: Name?
        guard bytes[1] != UInt8(ascii: "}") else { throw EventDecodingError(problem: "body is an empty object") }
        while true {
            let nameOffset = p.index
            let name: Name
            if let (known, end) = Self.knownName(at: p.index, in: bytes, after: previous, table: nameTable) {
                name = known
                p.index = end + 1
            } else {
                guard let range = p.plainASCIIString() else {
                    guard p.index < bytes.count, bytes[p.index] == 0x22 else { throw p.error("expected a member name") }
                    let other = try p.parseString()
                    throw EventDecodingError(problem: "member '\(other)' is not part of the ledger format")
                }
                throw EventDecodingError(problem: "member '\(String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self))' is not part of the ledger format")
            }
            // Known names are ASCII, so byte order is RFC 8785's UTF-16 order.
            if let previous, previous.rawValue >= name.rawValue {
                throw p.error(previous == name ? "duplicate member name '\(name.text)'" : "member '\(name.text)' is out of canonical (RFC 8785) order", at: nameOffset)
            }
            previous = name
            present |= name.bit
            guard p.index < bytes.count, bytes[p.index] == UInt8(ascii: ":") else { throw p.error("expected ':'") }
            p.index += 1
            guard p.index < bytes.count else { throw p.error("unexpected end of input") }
            member: switch name {
            case .document, .notices, .attested:
                let value = try p.parseValue(depth: 1)
                switch name {
                case .document: document = value
                case .notices: notices = value
                default: attested = value
                }
            case .v, .seq, .cmd, .cmdSize, .feature, .cause, .renews, .streamPrev, .compromisedSince:
                let c = bytes[p.index]
                guard c == UInt8(ascii: "-") || (c >= 0x30 && c <= 0x39) else {
                    throw EventDecodingError(problem: "member '\(name.text)' must be an integer")
                }
                let value = try p.parseInteger()
                switch name {
                case .v: v = value
                case .seq: seq = value
                case .cmd: cmd = value
                case .cmdSize: cmdSize = value
                case .feature: feature = value
                case .renews: renews = value
                case .streamPrev: streamPrev = value
                case .compromisedSince: compromisedSince = value
                default: cause = value
                }
            case .at, .effectiveAt, .correctedFrom:
                // A canonical time is 24 bytes of digits and separators.
                guard let t = p.takeQuoted(length: 24, { Timestamp(canonicalUTF8: $0) }) else {
                    throw EventDecodingError(problem: "member '\(name.text)' is not a canonical UTC time like 2026-01-31T08:00:00.000Z")
                }
                switch name {
                case .at: at = t
                case .effectiveAt: effectiveAt = t
                default: correctedFrom = t
                }
            case .prev, .streamRoot:
                guard let d = p.takeQuoted(length: 64, { Digest(hexBytes: $0) }) else {
                    throw EventDecodingError(problem: "member '\(name.text)' is not 64 lowercase hex digits")
                }
                if name == .prev { prev = d } else { streamRoot = d }
            default:
                guard bytes[p.index] == 0x22 else { throw EventDecodingError(problem: "member '\(name.text)' must be a string") }
                let start = p.index
                switch name {
                case .subject:
                    if let ref = p.takeQuoted(length: 32, { SubjectRef(pseudonymHex: $0) }) {
                        pseudonym = ref
                        break member
                    }
                case .type:
                    if let r = p.plainASCIIString(), let known = EventType(bytes: UnsafeBufferPointer(rebasing: bytes[r])) {
                        type = known
                        break member
                    }
                case .kid:
                    if let hint = keyIDHint, hint.isPlain, p.takeQuoted(length: hint.bytes.count, { hint.matches($0) ? true : nil }) != nil {
                        kid = hint.text
                        break member
                    }
                default:
                    break
                }
                // Anything else is read as a string (an unknown type, or a subject that is not a
                // pseudonym, is refused in order, after the body is read).
                p.index = start
                let value = try p.parseString()
                switch name {
                case .actor: actor = value
                case .catalog: catalog = value
                case .consent: consent = value
                case .kid: kid = value
                case .handover: handover = value
                case .ledger: ledger = value
                case .publicKey: publicKey = value
                case .reason: reason = value
                case .subject: subject = value
                case .type: typeText = value
                case .channel: channel = value
                case .evidence: evidence = value
                case .noticeLanguage: noticeLanguage = value
                case .sealedEvidence: sealedEvidence = value
                default: version = value
                }
            }
            guard p.index < bytes.count else { throw p.error("unexpected end of input in an object") }
            if bytes[p.index] == UInt8(ascii: ",") {
                p.index += 1
                continue
            }
            guard bytes[p.index] == UInt8(ascii: "}") else { throw p.error("expected ',' or '}'") }
            p.index += 1
            break
        }
        guard p.index == bytes.count else { throw p.error("unexpected bytes after the JSON value") }
    }

    private func string(_ value: String?, _ name: Name) throws(EventDecodingError) -> String {
        guard let value else { throw EventDecodingError(problem: "member '\(name.text)' is missing") }
        return value
    }

    private func integer(_ value: Int64, _ name: Name) throws(EventDecodingError) -> Int64 {
        guard value >= 0 else { throw EventDecodingError(problem: "member '\(name.text)' is missing or negative") }
        return value
    }

    private func event() throws(EventDecodingError) -> Read {
        guard v == 1 || v == 2 else {
            throw EventDecodingError(problem: "member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)")
        }
        let type: EventType
        if let known = self.type {
            type = known
        } else {
            let text = try string(typeText, .type)
            guard let known = Array(text.utf8).withUnsafeBufferPointer(EventType.init(bytes:)) else {
                throw EventDecodingError(problem: "unknown event type '\(text)'")
            }
            type = known
        }
        var allowed = type.members | Self.commonBits
        if v == 2 { allowed |= Self.streamBits }
        if type == .consentRevoked, reason == "cascade" { allowed |= Name.cause.bit }
        if type == .consentGiven { allowed |= Name.renews.bit | Self.evidenceBits }
        if type == .subjectErased || type == .clockCorrected { allowed |= Name.reason.bit }
        if present & ~allowed != 0, let extra = (0..<Self.names.count).first(where: { present & ~allowed & (1 << UInt64($0)) != 0 }) {
            throw EventDecodingError(problem: "member '\(Name(rawValue: extra)!.text)' does not belong to a '\(type.text)' event")
        }
        let optional: UInt64 = (type == .consentGiven ? Name.renews.bit | Self.evidenceBits : 0) | (type == .subjectErased || type == .clockCorrected ? Name.reason.bit : 0) | Self.streamBits
        if allowed & ~optional & ~present != 0, let missing = (0..<Self.names.count).first(where: { allowed & ~optional & ~present & (1 << UInt64($0)) != 0 }) {
            throw EventDecodingError(problem: "member '\(Name(rawValue: missing)!.text)' is missing from a '\(type.text)' event")
        }
        let seq = UInt64(try integer(self.seq, .seq))
        let cmd = UInt64(try integer(self.cmd, .cmd))
        let cmdSize = try integer(cmdSize, .cmdSize)
        guard cmdSize >= 1, cmd <= seq, seq - cmd < UInt64(cmdSize) else {
            throw EventDecodingError(problem: "command span cmd=\(cmd) cmdSize=\(cmdSize) does not contain seq \(seq)")
        }
        let payload: EventPayload
        switch type {
        case .ledgerCreated:
            payload = .ledgerCreated(LedgerCreated(ledgerName: try string(ledger, .ledger), catalogHash: try string(catalog, .catalog), publicKey: try string(publicKey, .publicKey)))
        case .catalogPublished:
            payload = .catalogPublished(try published())
        case .consentGiven:
            // In the order Spec/ledger-format.md names the checks: subject, feature, renews, evidence.
            let subject = try subjectRef(), featureCode = Int(try integer(feature, .feature))
            if present & Name.renews.bit != 0, renews < 0 { throw EventDecodingError(problem: "member 'renews' is missing or negative") }
            payload = .consentGiven(ConsentGiven(subject: subject, feature: featureCode, consent: try string(consent, .consent), version: try string(version, .version), renews: renews >= 0 ? UInt64(renews) : nil, evidence: try grantEvidence()))
        case .subjectErased:
            let subject = try subjectRef()
            var why: String?
            if present & Name.reason.bit != 0 {
                let text = try string(reason, .reason)
                if let problem = SubjectErased.problem(reason: text) { throw EventDecodingError(problem: "member 'reason': \(problem)") }
                why = text
            }
            payload = .subjectErased(SubjectErased(subject: subject, reason: why))
        case .keyRotated:
            guard v >= 2 else { throw EventDecodingError(problem: "a 'key.rotated' event belongs only to format version 2") }
            let key = try string(publicKey, .publicKey), handover = try string(self.handover, .handover)
            guard key.utf8.count == 64, key.utf8.allSatisfy({ Hex.nibble($0) != nil }) else {
                throw EventDecodingError(problem: "member 'publicKey' is not 64 lowercase hex digits")
            }
            guard handover.utf8.count == 128, handover.utf8.allSatisfy({ Hex.nibble($0) != nil }) else {
                throw EventDecodingError(problem: "member 'handover' is not 128 lowercase hex digits")
            }
            payload = .keyRotated(KeyRotated(publicKey: key, handover: handover))
        case .clockCorrected:
            guard v >= 2 else { throw EventDecodingError(problem: "a 'clock.corrected' event belongs only to format version 2") }
            var why: String?
            if present & Name.reason.bit != 0 {
                let text = try string(reason, .reason)
                if let problem = SubjectErased.problem(reason: text) { throw EventDecodingError(problem: "member 'reason': \(problem)") }
                why = text
            }
            payload = .clockCorrected(ClockCorrected(correctedFrom: correctedFrom!, reason: why))
        case .keyRevoked:
            guard v >= 2 else { throw EventDecodingError(problem: "a 'key.revoked' event belongs only to format version 2") }
            let key = try string(publicKey, .publicKey)
            guard key.utf8.count == 64, key.utf8.allSatisfy({ Hex.nibble($0) != nil }) else {
                throw EventDecodingError(problem: "member 'publicKey' is not 64 lowercase hex digits")
            }
            let since = UInt64(try integer(compromisedSince, .compromisedSince))
            guard let items = attested?.arrayValue, !items.isEmpty else {
                throw EventDecodingError(problem: "member 'attested' must be a non-empty array of event hashes")
            }
            var hashes: [String] = []
            hashes.reserveCapacity(items.count)
            for item in items {
                guard let hash = item.stringValue, hash.utf8.count == 64, hash.utf8.allSatisfy({ Hex.nibble($0) != nil }) else {
                    throw EventDecodingError(problem: "member 'attested' holds something that is not 64 lowercase hex digits")
                }
                hashes.append(hash)
            }
            payload = .keyRevoked(KeyRevoked(publicKey: key, compromisedSince: since, attested: hashes))
        case .consentRevoked:
            let why: RevocationReason
            switch try string(reason, .reason) {
            case "withdrawn": why = .withdrawn
            case "cascade": why = .cascade(cause: UInt64(try integer(cause, .cause)))
            case let other: throw EventDecodingError(problem: "unknown revocation reason '\(other)'")
            }
            payload = .consentRevoked(ConsentRevoked(subject: try subjectRef(), feature: Int(try integer(feature, .feature)), consent: try string(consent, .consent), reason: why))
        }
        let event = LedgerEvent(seq: seq, at: at!, actor: try string(actor, .actor), command: CommandSpan(first: cmd, size: Int(cmdSize)), payload: payload)
        // The stream's previous event is an earlier one, and the subject map's root is only ever
        // on a command's last event (the last of a commit).
        var stream = StreamLink()
        if present & Name.streamPrev.bit != 0 {
            guard streamPrev >= 0, UInt64(streamPrev) < seq else {
                throw EventDecodingError(problem: "member 'streamPrev' must be an earlier sequence number than \(seq)")
            }
            stream.previous = UInt64(streamPrev)
        }
        stream.root = streamRoot
        if streamRoot != nil, seq != event.command.last {
            throw EventDecodingError(problem: "member 'streamRoot' belongs only on the last event of a command")
        }
        return Read(event: event, prev: prev!, keyID: try string(kid, .kid), version: v, stream: stream)
    }

    /// A grant's evidence members, each checked as a command checks it.
    private func grantEvidence() throws(EventDecodingError) -> GrantEvidence {
        guard present & Self.evidenceBits != 0 else { return GrantEvidence() }
        var evidence = GrantEvidence(effectiveAt: effectiveAt, noticeLanguage: noticeLanguage, reference: self.evidence)
        if let channel {
            guard let known = GrantEvidence.Channel(rawValue: channel) else {
                throw EventDecodingError(problem: "member 'channel' must be one of \(GrantEvidence.Channel.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            evidence.channel = known
        }
        if let problem = evidence.problem { throw EventDecodingError(problem: problem) }
        if let sealedEvidence {
            guard self.evidence == nil else {
                throw EventDecodingError(problem: "a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both")
            }
            let count = sealedEvidence.utf8.count
            guard count % 2 == 0, (2 * EvidenceSeal.minBytes...2 * EvidenceSeal.maxBytes).contains(count), let bytes = Hex.decode(sealedEvidence) else {
                throw EventDecodingError(problem: "member 'sealedEvidence' must be \(2 * EvidenceSeal.minBytes) to \(2 * EvidenceSeal.maxBytes) lowercase hex digits (a nonce, a tag and a sealed reference of 1 to \(GrantEvidence.maxReferenceBytes) bytes)")
            }
            evidence.sealedReference = bytes
        }
        return evidence
    }

    /// A published catalogue version: the catalogue itself (validated as any catalogue), its
    /// hash, and one notice per consent. That the hash is the catalogue's is checked where a
    /// hasher is at hand (replay and verify).
    private func published() throws(EventDecodingError) -> CatalogPublished {
        guard let document, document.objectValue != nil else { throw EventDecodingError(problem: "member 'document' must be a catalogue object") }
        let catalog: Catalog
        do {
            catalog = try CatalogCodec.decode(CanonicalJSON.serialize(document))
        } catch {
            throw EventDecodingError(problem: "member 'document' is not a valid catalogue: \(error)")
        }
        // One catalogue version has one body: the document must be exactly the catalogue's own
        // encoding (required consents first), which is what its hash is taken over.
        guard CatalogCodec.encode(catalog) == document else {
            throw EventDecodingError(problem: "member 'document' is not in the catalogue's canonical form (required consents first)")
        }
        guard let items = notices?.arrayValue else { throw EventDecodingError(problem: "member 'notices' must be an array") }
        var list: [PolicyNotice] = []
        for item in items {
            guard let m = item.objectValue, m.count == 4, let f = m["feature"]?.intValue, let c = m["consent"]?.stringValue,
                let v = m["version"]?.stringValue, let h = m["sha256"]?.stringValue, Digest(hex: h) != nil
            else { throw EventDecodingError(problem: "a notice must be {consent, feature, sha256 (64 hex digits), version}") }
            list.append(PolicyNotice(feature: Int(f), consent: c, version: v, sha256: h))
        }
        return CatalogPublished(catalog: catalog, catalogHash: try string(catalog_, .catalog), notices: list)
    }

    private var catalog_: String? { catalog }

    /// Subject references are 32 lowercase hex digits (16 bytes); nothing else is accepted, so
    /// two references are the same subject exactly when their bytes are equal.
    private func subjectRef() throws(EventDecodingError) -> SubjectRef {
        if let pseudonym { return pseudonym }
        let s = try string(subject, .subject)
        guard s.utf8.count == 32, s.utf8.withContiguousStorageIfAvailable(Hex.isLowercaseHex) ?? false else {
            throw EventDecodingError(problem: "member 'subject' is not 32 lowercase hex digits")
        }
        return SubjectRef(s)
    }
}
