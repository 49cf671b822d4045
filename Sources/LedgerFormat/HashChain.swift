import TransparencyLog
import ConsentDomain

/// The hash chain: each event's `prev` is the SHA-256 of the previous event's canonical body.
///
/// The chain covers bodies, not signatures, so a batch of events can be linked in order (cheap
/// hashes) and then signed on all cores (expensive signatures), and verified the same way.
public struct HashChain: Sendable {
    public let hasher: any SHA256Hasher

    public init(hasher: any SHA256Hasher = OpenSSLSHA256()) {
        self.hasher = hasher
    }

    /// The key id written in each event's `kid`: the first 8 bytes of SHA-256(public key), in hex.
    public func keyID(of key: PublicKey) -> String {
        Hex.encode(hasher.sha256(key.bytes).bytes.prefix(8))
    }

    /// The chain hash of an event: SHA-256 of its canonical body.
    public func hash(ofBody body: [UInt8]) -> Digest {
        hasher.sha256(body)
    }

    /// Links `events` after `prev` and signs them. Bodies are built and hashed in order; the
    /// signatures are computed in parallel. Returns the records and the new head hash.
    ///
    /// With `streams` (format 2), each event also names its stream's previous event and the last
    /// event (the end of the commit) carries the subject map's root after all of them; `streams`
    /// is advanced past the events. Without it the events are of format 1.
    public func seal(_ events: [LedgerEvent], after prev: Digest, signer: any EventSigner, streams: inout StreamState?) throws -> (records: [EventRecord], head: Digest) {
        let keyID = keyID(of: signer.publicKey)
        let version: Int64 = streams == nil ? 1 : 2
        // Bodies are built in order (each links to the one before); each chunk is signed on
        // other threads as soon as it is built, so signing overlaps the building.
        let bodies = ResultSlots<(LedgerEvent, Digest, [UInt8], StreamLink)>(count: events.count)
        let signing = OverlappedMap<EventRecord>(count: events.count) { i in
            let (event, prev, body, stream) = bodies.get(i)
            let message = EventCodec.signedMessage(body: body)
            let signature = message.withUnsafeBytes { signer.sign($0) }
            return EventRecord(event: event, prev: prev, keyID: keyID, body: body, signature: signature, version: version, stream: stream)
        }
        var link = prev
        var built = 0
        do {
            for (i, event) in events.enumerated() {
                var stream = StreamLink()
                let key = streams == nil ? [] : StreamKey.of(event.payload)
                if streams != nil { stream = try streams!.link(event, key: key, endsCommit: i == events.count - 1) }
                let body = EventCodec.body(of: event, prev: link, keyID: keyID, version: version, stream: stream)
                bodies.set(i, (event, link, body, stream))
                built = i + 1
                signing.ready(built)
                link = hash(ofBody: body)
                if streams != nil { streams!.newest[key] = event.seq }
            }
        } catch {
            // Let the chunks already handed out finish before their inputs go away.
            signing.abandon()
            bodies.discard(built)
            throw error
        }
        let records = signing.finish()
        _ = bodies.take()
        return (records, link)
    }

    /// Seals format-2 events (see ``seal(_:after:signer:streams:)``).
    public func seal(_ events: [LedgerEvent], after prev: Digest, signer: any EventSigner, streams: StreamState) throws -> (records: [EventRecord], head: Digest) {
        var state: StreamState? = streams
        return try seal(events, after: prev, signer: signer, streams: &state)
    }
}

/// What sealing format-2 events needs to know of the log: the newest event of every stream the
/// events extend, and the subject map.
public struct StreamState: Sendable {
    /// The sequence number of the newest event of each stream, by stream key (``StreamKey``).
    public var newest: [[UInt8]: UInt64]
    public var map: SubjectMap

    public init(newest: [[UInt8]: UInt64], map: SubjectMap) {
        self.newest = newest
        self.map = map
    }

    /// The stream link of `event`, the next event to be sealed: its stream's newest event and, on
    /// the last event of a commit (which is the last of a command), the map's root with every
    /// event so far recorded.
    mutating func link(_ event: LedgerEvent, key: [UInt8], endsCommit: Bool) throws -> StreamLink {
        var link = StreamLink(previous: newest[key])
        if event.seq == event.command.last { try map.set(key, seq: event.seq) }
        // A commit ends with a command's last event (a sealed fragment of a command, as tests
        // make to imitate a crash, carries no root).
        if endsCommit, event.seq == event.command.last { link.root = map.computeRoot() }
        return link
    }

}

/// The stream an event belongs to: its subject's pseudonym (16 bytes), or 16 zero bytes for the
/// ledger's own events (genesis and published catalogues).
public enum StreamKey {
    public static func of(_ payload: EventPayload) -> [UInt8] {
        payload.subject.map(of(subject:)) ?? SubjectMap.ledgerStream
    }

    /// A subject's stream key: its pseudonym's 16 bytes.
    public static func of(subject: SubjectRef) -> [UInt8] {
        subject.pseudonymBytes ?? SubjectMap.ledgerStream
    }
}
