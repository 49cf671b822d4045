import TransparencyLog
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
    /// The format version (`v`): 1, or 2 with the stream members.
    public let version: Int64
    /// Format 2: the event's place in its stream (``StreamLink``).
    public let stream: StreamLink

    public init(event: LedgerEvent, prev: Digest, keyID: String, body: [UInt8], signature: Signature, version: Int64 = EventCodec.formatVersion, stream: StreamLink = StreamLink()) {
        self.event = event
        self.prev = prev
        self.keyID = keyID
        self.body = body
        self.signature = signature
        self.version = version
        self.stream = stream
    }

    /// The line without its newline: the Merkle tree's entry for this event.
    public var lineWithoutNewline: [UInt8] { line(newline: false) }

    /// The line as stored, newline included: `{"body":BODY,"sig":"HEX"}\n`, itself canonical JSON.
    public var line: [UInt8] { line(newline: true) }

    private func line(newline: Bool) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(body.count + 150)
        out.append(contentsOf: EventCodec.linePrefix)
        out.append(contentsOf: body)
        out.append(contentsOf: EventCodec.signaturePrefix)
        signature.bytes.withUnsafeBytes { Hex.append($0, to: &out) }
        out.append(contentsOf: EventCodec.lineSuffix)
        if newline { out.append(UInt8(ascii: "\n")) }
        return out
    }
}

/// Where a format-2 event sits in its stream. Every event belongs to one stream: a subject's
/// events to the subject's (keyed by its pseudonym), the genesis event and published catalogues
/// to the ledger's (keyed by 16 zero bytes). See `Spec/ledger-format.md`, "Streams".
public struct StreamLink: Hashable, Sendable {
    /// The sequence number of the stream's previous event; nil for a stream's first event. (The
    /// event itself is authenticated by the Merkle tree: an inclusion proof at that position.)
    public var previous: UInt64?
    /// On the last event of every commit (a command's last event; never elsewhere): the root of
    /// the subject map (``SubjectMap``) after it.
    public var root: Digest?

    public init(previous: UInt64? = nil, root: Digest? = nil) {
        self.previous = previous
        self.root = root
    }
}

/// A line that is not a well-formed event; `problem` says why.
public struct EventDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public let problem: String
    public var description: String { problem }
}

/// Translates between events and the bytes of the ledger format, versions 1 and 2.
public enum EventCodec {
    /// The version new ledgers are written in. Version 1 (no stream members) is still read.
    public static let formatVersion: Int64 = 2
    static let linePrefix = Array(#"{"body":"#.utf8)
    static let signaturePrefix = Array(#","sig":""#.utf8)
    /// The two markers as words in memory order, for comparing each with one load.
    private static let prefixWords: (line: UInt64, signature: UInt64) = {
        precondition(linePrefix.count == 8 && signaturePrefix.count == 8, "both markers are eight bytes")
        return (linePrefix.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }, signaturePrefix.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
    }()
    static let lineSuffix = Array("\"}".utf8)
    /// Prepended to the body before signing, so an event signature can never be mistaken for a
    /// signature over anything else the same key signs.
    public static let signingContext = Array("consentledger-event-v1\n".utf8)

    /// The canonical body of an event, written member by member in RFC 8785 order (the names are
    /// ASCII, so byte order is UTF-16 order). A test checks it against the generic serialiser.
    public static func body(of event: LedgerEvent, prev: Digest, keyID: String, version: Int64 = formatVersion, stream: StreamLink = StreamLink()) -> [UInt8] {
        precondition(version == 2 || (version == 1 && stream == StreamLink()), "format 1 has no stream members")
        var out: [UInt8] = []
        out.reserveCapacity(360)
        var first = true
        func name(_ key: StaticString) {
            out.append(first ? UInt8(ascii: "{") : UInt8(ascii: ","))
            first = false
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
            out.append(UInt8(ascii: "\""))
            out.append(UInt8(ascii: ":"))
        }
        func string(_ key: StaticString, _ value: String) {
            name(key)
            CanonicalJSON.writeString(value, into: &out)
        }
        func integer(_ key: StaticString, _ value: some BinaryInteger) {
            name(key)
            if let exact = Int64(exactly: value) { CanonicalJSON.writeInteger(exact, into: &out) } else { out.append(contentsOf: String(value).utf8) }
        }
        // Hex needs no escaping: written straight into the body.
        func digest(_ key: StaticString, _ value: Digest) {
            name(key)
            out.append(UInt8(ascii: "\""))
            value.appendHex(to: &out)
            out.append(UInt8(ascii: "\""))
        }
        func json(_ key: StaticString, _ value: JSONValue) {
            name(key)
            CanonicalJSON.serialize(value, into: &out)
        }
        string("actor", event.actor)
        string("at", event.at.rfc3339)
        let evidence = if case .consentGiven(let e) = event.payload { e.evidence } else { GrantEvidence() }
        if let channel = evidence.channel { string("channel", channel.rawValue) }
        switch event.payload {
        case .catalogPublished(let e):
            string("catalog", e.catalogHash)
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            json("document", CatalogCodec.encode(e.catalog))
            string("kid", keyID)
            json("notices", noticesJSON(e.notices))
            digest("prev", prev)
        case .ledgerCreated(let e):
            string("catalog", e.catalogHash)
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("kid", keyID)
            string("ledger", e.ledgerName)
            digest("prev", prev)
            string("publicKey", e.publicKey)
        case .consentGiven(let e):
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("consent", e.consent)
            if let effective = evidence.effectiveAt { string("effectiveAt", effective.rfc3339) }
            // The log holds a reference sealed; in clear only in a ledger written before sealing.
            if evidence.sealedReference == nil, let reference = evidence.reference { string("evidence", reference) }
            integer("feature", e.feature)
            string("kid", keyID)
            if let language = evidence.noticeLanguage { string("noticeLanguage", language) }
            digest("prev", prev)
            if let renews = e.renews { integer("renews", renews) }
            if let sealed = evidence.sealedReference {
                name("sealedEvidence")
                out.append(UInt8(ascii: "\""))
                sealed.withUnsafeBytes { Hex.append($0, to: &out) }
                out.append(UInt8(ascii: "\""))
            }
        case .consentRevoked(let e):
            if case .cascade(let cause) = e.reason { integer("cause", cause) }
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("consent", e.consent)
            integer("feature", e.feature)
            string("kid", keyID)
            digest("prev", prev)
            if case .cascade = e.reason { string("reason", "cascade") } else { string("reason", "withdrawn") }
        case .subjectErased(let e):
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("kid", keyID)
            digest("prev", prev)
            if let reason = e.reason { string("reason", reason) }
        case .keyRevoked(let e):
            json("attested", .array(e.attested.map { .string($0) }))
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            integer("compromisedSince", e.compromisedSince)
            string("kid", keyID)
            digest("prev", prev)
            string("publicKey", e.publicKey)
        case .clockCorrected(let e):
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("correctedFrom", e.correctedFrom.rfc3339)
            string("kid", keyID)
            digest("prev", prev)
            if let reason = e.reason { string("reason", reason) }
        case .keyRotated(let e):
            integer("cmd", event.command.first)
            integer("cmdSize", event.command.size)
            string("handover", e.handover)
            string("kid", keyID)
            digest("prev", prev)
            string("publicKey", e.publicKey)
        }
        integer("seq", event.seq)
        if let previous = stream.previous { integer("streamPrev", previous) }
        if let root = stream.root { digest("streamRoot", root) }
        if let subject = event.payload.subject { string("subject", subject.value) }
        string("type", event.payload.typeName)
        integer("v", version)
        if case .consentGiven(let e) = event.payload { string("version", e.version) }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func noticesJSON(_ notices: [PolicyNotice]) -> JSONValue {
        .array(notices.map {
            .object(["feature": .int(Int64($0.feature)), "consent": .string($0.consent), "version": .string($0.version), "sha256": .string($0.sha256)])
        })
    }

    /// The same body through the generic serialiser: the reference the direct writer is tested
    /// against.
    static func bodyViaGenericSerialiser(of event: LedgerEvent, prev: Digest, keyID: String, version: Int64 = formatVersion, stream: StreamLink = StreamLink()) -> [UInt8] {
        var members: [String: JSONValue] = [
            "v": .int(version),
            "seq": .int(Int64(event.seq)),
            "at": .string(event.at.rfc3339),
            "actor": .string(event.actor),
            "cmd": .int(Int64(event.command.first)),
            "cmdSize": .int(Int64(event.command.size)),
            "prev": .string(prev.hex),
            "kid": .string(keyID),
            "type": .string(event.payload.typeName),
        ]
        if let previous = stream.previous { members["streamPrev"] = .int(Int64(previous)) }
        if let root = stream.root { members["streamRoot"] = .string(root.hex) }
        switch event.payload {
        case .ledgerCreated(let e):
            members["ledger"] = .string(e.ledgerName)
            members["catalog"] = .string(e.catalogHash)
            members["publicKey"] = .string(e.publicKey)
        case .catalogPublished(let e):
            members["catalog"] = .string(e.catalogHash)
            members["document"] = CatalogCodec.encode(e.catalog)
            members["notices"] = noticesJSON(e.notices)
        case .consentGiven(let e):
            members["subject"] = .string(e.subject.value)
            members["feature"] = .int(Int64(e.feature))
            members["consent"] = .string(e.consent)
            members["version"] = .string(e.version)
            if let renews = e.renews { members["renews"] = .int(Int64(renews)) }
            if let effective = e.evidence.effectiveAt { members["effectiveAt"] = .string(effective.rfc3339) }
            if let channel = e.evidence.channel { members["channel"] = .string(channel.rawValue) }
            if let language = e.evidence.noticeLanguage { members["noticeLanguage"] = .string(language) }
            if let sealed = e.evidence.sealedReference {
                members["sealedEvidence"] = .string(Hex.encode(sealed))
            } else if let reference = e.evidence.reference {
                members["evidence"] = .string(reference)
            }
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
        case .subjectErased(let e):
            members["subject"] = .string(e.subject.value)
            if let reason = e.reason { members["reason"] = .string(reason) }
        case .keyRotated(let e):
            members["publicKey"] = .string(e.publicKey)
            members["handover"] = .string(e.handover)
        case .keyRevoked(let e):
            members["publicKey"] = .string(e.publicKey)
            members["compromisedSince"] = .int(Int64(e.compromisedSince))
            members["attested"] = .array(e.attested.map { .string($0) })
        case .clockCorrected(let e):
            members["correctedFrom"] = .string(e.correctedFrom.rfc3339)
            if let reason = e.reason { members["reason"] = .string(reason) }
        }
        return CanonicalJSON.serialize(.object(members))
    }

    /// The message an event's signature covers: the signing context followed by the body.
    public static func signedMessage(body: [UInt8]) -> [UInt8] {
        signingContext + body
    }

    /// Splits a line (without its newline) into body bytes and signature, checking the envelope.
    /// With `decodeSignature: false` the signature is only checked to be hex (replay does not
    /// verify signatures) and a placeholder is returned.
    public static func splitLine(_ line: UnsafeBufferPointer<UInt8>, decodeSignature: Bool = true) throws(EventDecodingError) -> (body: UnsafeBufferPointer<UInt8>, signature: Signature) {
        let minimum = linePrefix.count + 2 + signaturePrefix.count + 128 + 2
        guard line.count >= minimum else {
            throw EventDecodingError(problem: "line is too short to be an event (\(line.count) bytes)")
        }
        // Both markers are eight bytes, compared as words (a byte at a time through the generic
        // `starts(with:)` and `elementsEqual`, they were 250 instructions of every line).
        let raw = UnsafeRawBufferPointer(line)
        guard raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self) == prefixWords.line else {
            throw EventDecodingError(problem: #"line does not start with {"body":"#)
        }
        let sigStart = line.count - 2 - 128
        let prefixStart = sigStart - signaturePrefix.count
        guard line[line.count - 2] == 0x22, line[line.count - 1] == 0x7D,
            raw.loadUnaligned(fromByteOffset: prefixStart, as: UInt64.self) == prefixWords.signature
        else {
            throw EventDecodingError(problem: #"line does not end with ,"sig":"<128 hex digits>"}"#)
        }
        let sigHex = line[sigStart..<(line.count - 2)]
        let signature: Signature?
        if decodeSignature {
            signature = Hex.decode(buffer: UnsafeBufferPointer(rebasing: sigHex)).flatMap { Signature(bytes: $0) }
        } else {
            signature = Hex.isLowercaseHex(UnsafeBufferPointer(rebasing: sigHex)) ? Signature.placeholder : nil
        }
        guard let signature else {
            throw EventDecodingError(problem: "signature is not 128 lowercase hex digits")
        }
        return (UnsafeBufferPointer(rebasing: line[linePrefix.count..<prefixStart]), signature)
    }

    /// Decodes one line (without its newline). The body must be canonical JSON with exactly the
    /// members its type defines.
    public static func decode(line: UnsafeBufferPointer<UInt8>) throws(EventDecodingError) -> EventRecord {
        let (bodyBytes, signature) = try splitLine(line)
        let read = try EventBodyReader.read(bodyBytes)
        return EventRecord(event: read.event, prev: read.prev, keyID: read.keyID, body: Array(bodyBytes), signature: signature, version: read.version, stream: read.stream)
    }

    public static func decode(line: [UInt8]) throws(EventDecodingError) -> EventRecord {
        try line.withUnsafeBufferPointer { (b) throws(EventDecodingError) -> EventRecord in try decode(line: b) }
    }
}
