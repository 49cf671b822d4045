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
    public func seal(_ events: [LedgerEvent], after prev: Digest, signer: any EventSigner) -> (records: [EventRecord], head: Digest) {
        let keyID = keyID(of: signer.publicKey)
        var bodies: [(LedgerEvent, Digest, [UInt8])] = []
        bodies.reserveCapacity(events.count)
        var link = prev
        for event in events {
            let body = EventCodec.body(of: event, prev: link, keyID: keyID)
            bodies.append((event, link, body))
            link = hash(ofBody: body)
        }
        let sealed = bodies
        let records = parallelMap(sealed.count) { i in
            let (event, prev, body) = sealed[i]
            let message = EventCodec.signedMessage(body: body)
            let signature = message.withUnsafeBytes { signer.sign($0) }
            return EventRecord(event: event, prev: prev, keyID: keyID, body: body, signature: signature)
        }
        return (records, link)
    }
}
