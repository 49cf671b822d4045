import ConsentDomain

/// One line of the log: an event, the chain fields that wrap it, its canonical body bytes and the
/// signature over them. See `Spec/ledger-format.md`.
public struct EventRecord: Hashable, Sendable {
    public let event: LedgerEvent
    /// SHA-256 of the previous event's body (all zeros for the genesis event).
    public let prev: Digest
    /// Id of the key that signed the event.
    public let keyID: String
    /// The body's RFC 8785 canonical JSON: what is hashed into the chain and what is signed.
    public let body: [UInt8]
    public let signature: Signature

    public init(event: LedgerEvent, prev: Digest, keyID: String, body: [UInt8], signature: Signature) {
        self.event = event
        self.prev = prev
        self.keyID = keyID
        self.body = body
        self.signature = signature
    }

    /// The line as stored, newline included: `{"body":BODY,"sig":"HEX"}\n`, itself canonical JSON.
    public var line: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(body.count + 150)
        out.append(contentsOf: EventCodec.linePrefix)
        out.append(contentsOf: body)
        out.append(contentsOf: EventCodec.signaturePrefix)
        out.append(contentsOf: signature.hex.utf8)
        out.append(contentsOf: EventCodec.lineSuffix)
        return out
    }
}

/// A line that is not a well-formed event; `problem` says why.
public struct EventDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public let problem: String
    public var description: String { problem }
}

/// Translates between events and the bytes of the ledger format, version 1.
public enum EventCodec {
    public static let formatVersion: Int64 = 1
    static let linePrefix = Array(#"{"body":"#.utf8)
    static let signaturePrefix = Array(#","sig":""#.utf8)
    static let lineSuffix = Array("\"}\n".utf8)
    /// Prepended to the body before signing, so an event signature can never be mistaken for a
    /// signature over anything else the same key signs.
    public static let signingContext = Array("consentledger-event-v1\n".utf8)

    /// The canonical body of an event.
    public static func body(of event: LedgerEvent, prev: Digest, keyID: String) -> [UInt8] {
        var members: [String: JSONValue] = [
            "v": .int(formatVersion),
            "seq": .int(Int64(event.seq)),
            "at": .string(event.at.rfc3339),
            "actor": .string(event.actor),
            "cmd": .int(Int64(event.command.first)),
            "cmdSize": .int(Int64(event.command.size)),
            "prev": .string(prev.hex),
            "kid": .string(keyID),
            "type": .string(event.payload.typeName),
        ]
        switch event.payload {
        case .ledgerCreated(let e):
            members["ledger"] = .string(e.ledgerName)
            members["catalog"] = .string(e.catalogHash)
            members["publicKey"] = .string(e.publicKey)
        case .consentGiven(let e):
            members["subject"] = .string(e.subject.value)
            members["feature"] = .int(Int64(e.feature))
            members["consent"] = .string(e.consent)
            members["version"] = .string(e.version)
        case .consentRevoked(let e):
            members["subject"] = .string(e.subject.value)
            members["feature"] = .int(Int64(e.feature))
            members["consent"] = .string(e.consent)
            switch e.reason {
            case .withdrawn:
                members["reason"] = .string("withdrawn")
            case .cascade(let cause):
                members["reason"] = .string("cascade")
                members["cause"] = .int(Int64(cause))
            }
        }
        return CanonicalJSON.serialize(.object(members))
    }

    /// The message an event's signature covers: the signing context followed by the body.
    public static func signedMessage(body: [UInt8]) -> [UInt8] {
        signingContext + body
    }

    /// Splits a line (without its newline) into body bytes and signature, checking the envelope.
    public static func splitLine(_ line: UnsafeBufferPointer<UInt8>) throws(EventDecodingError) -> (body: UnsafeBufferPointer<UInt8>, signature: Signature) {
        let minimum = linePrefix.count + 2 + signaturePrefix.count + 128 + 2
        guard line.count >= minimum else {
            throw EventDecodingError(problem: "line is too short to be an event (\(line.count) bytes)")
        }
        guard line.starts(with: linePrefix) else {
            throw EventDecodingError(problem: #"line does not start with {"body":"#)
        }
        let sigStart = line.count - 2 - 128
        let prefixStart = sigStart - signaturePrefix.count
        guard line[line.count - 2] == 0x22, line[line.count - 1] == 0x7D,
            line[prefixStart..<sigStart].elementsEqual(signaturePrefix)
        else {
            throw EventDecodingError(problem: #"line does not end with ,"sig":"<128 hex digits>"}"#)
        }
        guard let sigBytes = Hex.decode(String(decoding: line[sigStart..<(line.count - 2)], as: UTF8.self)),
            let signature = Signature(bytes: sigBytes)
        else {
            throw EventDecodingError(problem: "signature is not 128 lowercase hex digits")
        }
        return (UnsafeBufferPointer(rebasing: line[linePrefix.count..<prefixStart]), signature)
    }

    /// Decodes one line (without its newline). The body must be canonical JSON with exactly the
    /// members its type defines.
    public static func decode(line: UnsafeBufferPointer<UInt8>) throws(EventDecodingError) -> EventRecord {
        let (bodyBytes, signature) = try splitLine(line)
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(bodyBytes, canonical: true)
        } catch {
            throw EventDecodingError(problem: "body is not canonical JSON: byte \(error.offset + linePrefix.count + 1): \(error.message)")
        }
        let (event, prev, keyID) = try decodeBody(value)
        return EventRecord(event: event, prev: prev, keyID: keyID, body: Array(bodyBytes), signature: signature)
    }

    public static func decode(line: [UInt8]) throws(EventDecodingError) -> EventRecord {
        try line.withUnsafeBufferPointer { (b) throws(EventDecodingError) -> EventRecord in try decode(line: b) }
    }

    private static let commonMembers: Set<String> = ["v", "seq", "at", "actor", "cmd", "cmdSize", "prev", "kid", "type"]
    private static let typeMembers: [String: Set<String>] = [
        "ledger.created": ["ledger", "catalog", "publicKey"],
        "consent.given": ["subject", "feature", "consent", "version"],
        "consent.revoked": ["subject", "feature", "consent", "reason"],
    ]

    static func decodeBody(_ value: JSONValue) throws(EventDecodingError) -> (LedgerEvent, Digest, String) {
        guard case .object(let m) = value else { throw EventDecodingError(problem: "body is not a JSON object") }
        func string(_ key: String) throws(EventDecodingError) -> String {
            guard let s = m[key]?.stringValue else { throw EventDecodingError(problem: "member '\(key)' is missing or not a string") }
            return s
        }
        func integer(_ key: String) throws(EventDecodingError) -> Int64 {
            guard let i = m[key]?.intValue, i >= 0 else { throw EventDecodingError(problem: "member '\(key)' is missing or not a non-negative integer") }
            return i
        }
        guard m["v"]?.intValue == formatVersion else {
            throw EventDecodingError(problem: "member 'v' must be \(formatVersion) (this reader knows format version 1)")
        }
        let type = try string("type")
        guard var allowed = typeMembers[type] else { throw EventDecodingError(problem: "unknown event type '\(type)'") }
        allowed.formUnion(commonMembers)
        if type == "consent.revoked", m["reason"]?.stringValue == "cascade" { allowed.insert("cause") }
        if let extra = m.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw EventDecodingError(problem: "member '\(extra)' does not belong to a '\(type)' event")
        }
        let seq = UInt64(try integer("seq"))
        guard let at = Timestamp(canonical: try string("at")) else {
            throw EventDecodingError(problem: "member 'at' is not a canonical UTC time like 2026-01-31T08:00:00.000Z")
        }
        let actor = try string("actor")
        let cmd = UInt64(try integer("cmd"))
        let cmdSize = try integer("cmdSize")
        guard cmdSize >= 1, cmd <= seq, seq - cmd < UInt64(cmdSize) else {
            throw EventDecodingError(problem: "command span cmd=\(cmd) cmdSize=\(cmdSize) does not contain seq \(seq)")
        }
        guard let prev = Digest(hex: try string("prev")) else {
            throw EventDecodingError(problem: "member 'prev' is not 64 lowercase hex digits")
        }
        let keyID = try string("kid")
        let payload: EventPayload
        switch type {
        case "ledger.created":
            payload = .ledgerCreated(LedgerCreated(ledgerName: try string("ledger"), catalogHash: try string("catalog"), publicKey: try string("publicKey")))
        case "consent.given":
            payload = .consentGiven(ConsentGiven(subject: SubjectRef(try string("subject")), feature: Int(try integer("feature")), consent: try string("consent"), version: try string("version")))
        default:
            let reason: RevocationReason
            switch try string("reason") {
            case "withdrawn": reason = .withdrawn
            case "cascade": reason = .cascade(cause: UInt64(try integer("cause")))
            case let other: throw EventDecodingError(problem: "unknown revocation reason '\(other)'")
            }
            payload = .consentRevoked(ConsentRevoked(subject: SubjectRef(try string("subject")), feature: Int(try integer("feature")), consent: try string("consent"), reason: reason))
        }
        let event = LedgerEvent(seq: seq, at: at, actor: actor, command: CommandSpan(first: cmd, size: Int(cmdSize)), payload: payload)
        return (event, prev, keyID)
    }
}
