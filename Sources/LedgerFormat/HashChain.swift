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
        let sealer = ChainSealer(chain: self, after: prev, signer: signer, streams: streams)
        streams = nil
        for event in events { try sealer.append(event) }
        let sealed = try sealer.finish()
        streams = sealed.streams
        return (sealed.entries.map(\.record), sealed.head)
    }

    /// Seals format-2 events (see ``seal(_:after:signer:streams:)``).
    public func seal(_ events: [LedgerEvent], after prev: Digest, signer: any EventSigner, streams: StreamState) throws -> (records: [EventRecord], head: Digest) {
        var state: StreamState? = streams
        return try seal(events, after: prev, signer: signer, streams: &state)
    }
}

/// Seals the events of one commit as they are decided: each ``append(_:)`` links the event
/// after the one before, and chunks of built bodies are signed on other threads meanwhile
/// (`OverlappedMap`), so that a writer deciding a thousand commands has the first ones signed
/// by the time it decides the last. ``finish()`` signs what is left and returns the entries.
/// The thread that signs an event also writes its line and the line's Merkle leaf hash
/// (``SealedEntry``): work of each event alone, which the writer's own thread, on which the
/// whole commit waits, would otherwise do after the signing.
///
/// The body of the newest event is built only when the next one comes, or at ``finish()``: the
/// last event of a commit carries the subject map's root (format 2), and only then is it known
/// to be the last. A sealer dropped before it finishes (a refused batch, an error) waits for
/// the signatures already started and destroys them.
public final class ChainSealer {
    private let chain: HashChain
    private let keyID: String
    private let version: Int64
    private var streams: StreamState?
    private var link: Digest
    /// The newest event, whose body waits for the next event or the end of the commit.
    private var held: LedgerEvent?
    private let signing: OverlappedMap<(LedgerEvent, Digest, [UInt8], StreamLink, [UInt8]), SealedEntry>
    private var finished = false
    /// How many events were appended.
    public private(set) var count = 0

    /// A sealer of events after the one whose body hashes to `prev`, signed by `signer`. With
    /// `streams`, format 2 (as `HashChain.seal(_:after:signer:streams:)` seals them); it is consumed: a
    /// second reference would make sealing copy the newest event of every stream met so far.
    public init(chain: HashChain, after prev: Digest, signer: any EventSigner, streams: consuming StreamState?) {
        self.chain = chain
        let keyID = chain.keyID(of: signer.publicKey)
        let version: Int64 = streams == nil ? 1 : 2
        self.keyID = keyID
        self.version = version
        self.streams = streams
        link = prev
        let hasher = chain.hasher
        signing = OverlappedMap { input in
            let (event, prev, body, stream, streamKey) = input
            let message = EventCodec.signedMessage(body: body)
            let signature = message.withUnsafeBytes { signer.sign($0) }
            let record = EventRecord(event: event, prev: prev, keyID: keyID, body: body, signature: signature, version: version, stream: stream)
            let line = record.lineWithoutNewline
            return SealedEntry(record: record, line: line, leafHash: MerkleTree.leafHash(line, hasher: hasher), streamKey: streamKey)
        }
    }

    /// The streams as they were given, while no event has been appended: for a write that
    /// appends nothing after all, which puts them back. Nil once one has (the streams are then
    /// the sealer's, advanced past events that will not be appended). The sealer takes no
    /// events afterwards.
    public func takeUnusedStreams() -> StreamState? {
        guard count == 0, !finished else { return nil }
        finished = true
        defer { streams = nil }
        return streams
    }

    /// The next event of the commit. Throws when its stream cannot be linked (the subject map
    /// cannot be read); the sealer is then of no further use.
    public func append(_ event: LedgerEvent) throws {
        precondition(!finished, "a sealer takes no events after it finished")
        if let held { try build(held, endsCommit: false) }
        held = event
        count += 1
    }

    /// Seals the last event, signs what no other thread has, and returns the entries in order,
    /// the chain's new head hash and the streams advanced past the events.
    public func finish() throws -> (entries: [SealedEntry], head: Digest, streams: StreamState?) {
        precondition(!finished, "a sealer finishes once")
        if let held { try build(held, endsCommit: true) }
        held = nil
        finished = true
        let entries = signing.finish()
        defer { streams = nil }
        return (entries, link, streams)
    }

    private func build(_ event: LedgerEvent, endsCommit: Bool) throws {
        var stream = StreamLink()
        let key = StreamKey.of(event.payload)
        if streams != nil { stream = try streams!.link(event, key: key, endsCommit: endsCommit) }
        let body = EventCodec.body(of: event, prev: link, keyID: keyID, version: version, stream: stream)
        signing.append((event, link, body, stream, key))
        link = chain.hash(ofBody: body)
        if streams != nil { streams!.newest[key] = event.seq }
    }

    deinit {
        if !finished { signing.abandon() }
    }
}

/// One sealed event as a commit appends it.
public struct SealedEntry: Sendable {
    public let record: EventRecord
    /// The log's entry: the record's line without its newline.
    public let line: [UInt8]
    /// The line's Merkle leaf hash (RFC 6962: SHA-256 of 0x00 and the line).
    public let leafHash: Digest
    /// The event's stream (``StreamKey``), by which the storage indexes the entry.
    public let streamKey: [UInt8]
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
