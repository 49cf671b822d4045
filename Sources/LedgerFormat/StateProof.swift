import TransparencyLog
import ConsentDomain

/// A proof of one subject's consent state that anyone holding the ledger's verifier key can
/// check offline (`Spec/state-proof.md`): the subject's events and the catalogue versions, each
/// with its inclusion proof against the ledger's signed head, and the subject-map proofs that
/// they are *all* of them. A processor that receives data "because patient P consented" keeps
/// one as evidence.
public struct StateProof: Hashable, Sendable {
    public static let format = "consentledger-state-v1"

    public let ledger: String
    public let verifierKey: String
    /// The signed head the proof is against: a C2SP checkpoint note (with a `chain` extension
    /// line) signed by the ledger's key.
    public let checkpoint: String
    /// The catalogue pinned by the genesis event, as JSON.
    package let catalog: JSONValue
    public let genesis: ExportedEvent
    /// The event at the checkpoint's last position: it signs the subject map's root.
    public let last: ExportedEvent
    public let subject: (id: String, ref: String, salt: String)
    /// The time the state is for; nil for the state at the checkpoint.
    public let at: Timestamp?
    /// Every event of the subject under the checkpoint, oldest first.
    public let events: [ExportedEvent]
    /// Every `catalog.published` event under the checkpoint, oldest first.
    public let catalogEvents: [ExportedEvent]
    /// The subject map's proof for the subject's pseudonym, and for the ledger's own stream.
    public let subjectMapProof: SubjectMapProof
    public let ledgerMapProof: SubjectMapProof
    /// The state (``ListingJSON``) at `at`, or at the checkpoint.
    package let state: JSONValue
    /// The ledger's `key.rotated` events below the checkpoint, with their proofs, when its key
    /// was rotated (``AuditExport/keys``).
    public let keys: [ExportedEvent]

    public static func == (a: StateProof, b: StateProof) -> Bool { a.json == b.json }
    public func hash(into hasher: inout Hasher) { hasher.combine(json) }

    package init(ledger: String, verifierKey: String, checkpoint: String, catalog: JSONValue, genesis: ExportedEvent, last: ExportedEvent, subject: (id: String, ref: String, salt: String), at: Timestamp?, events: [ExportedEvent], catalogEvents: [ExportedEvent], subjectMapProof: SubjectMapProof, ledgerMapProof: SubjectMapProof, state: JSONValue, keys: [ExportedEvent] = []) {
        self.keys = keys
        self.ledger = ledger
        self.verifierKey = verifierKey
        self.checkpoint = checkpoint
        self.catalog = catalog
        self.genesis = genesis
        self.last = last
        self.subject = subject
        self.at = at
        self.events = events
        self.catalogEvents = catalogEvents
        self.subjectMapProof = subjectMapProof
        self.ledgerMapProof = ledgerMapProof
        self.state = state
    }

    static func eventJSON(_ e: ExportedEvent) -> JSONValue {
        .object(["seq": .int(e.seq), "line": .string(e.line), "proof": .array(e.proof.map { .string(Base64.encode($0.bytes)) })])
    }

    static func mapProofJSON(_ p: SubjectMapProof) -> JSONValue {
        var members: [String: JSONValue] = ["siblings": .array(p.siblings.map { .string(Base64.encode($0.bytes)) })]
        switch p.end {
        case .empty: members["end"] = .string("empty")
        case .leaf(let key, let seq): members["end"] = .object(["key": .string(Hex.encode(key)), "seq": .int(Int64(seq))])
        }
        return .object(members)
    }

    package var json: JSONValue {
        var members: [String: JSONValue] = [
            "format": .string(Self.format),
            "ledger": .string(ledger),
            "verifierKey": .string(verifierKey),
            "checkpoint": .string(checkpoint),
            "catalog": catalog,
            "genesis": Self.eventJSON(genesis),
            "last": Self.eventJSON(last),
            "subject": .object(["id": .string(subject.id), "ref": .string(subject.ref), "salt": .string(subject.salt)]),
            "events": .array(events.map(Self.eventJSON)),
            "catalogVersions": .array(catalogEvents.map(Self.eventJSON)),
            "subjectMap": Self.mapProofJSON(subjectMapProof),
            "ledgerMap": Self.mapProofJSON(ledgerMapProof),
            "state": .object(["features": state]),
        ]
        if let at { members["at"] = .string(at.rfc3339) }
        if !keys.isEmpty { members["keys"] = .array(keys.map(Self.eventJSON)) }
        return .object(members)
    }

    /// The proof file: canonical JSON and a newline.
    public var bytes: [UInt8] { CanonicalJSON.serialize(json) + [0x0A] }

    /// Reads a proof file; a malformed one is an error that says what is wrong.
    public init(bytes: [UInt8]) throws(ExportVerificationError) {
        func fail(_ problem: String) -> ExportVerificationError { ExportVerificationError(seq: nil, problem) }
        guard let value = try? CanonicalJSON.parse(bytes, canonical: false) else { throw fail("the file is not JSON") }
        guard value["format"]?.stringValue == Self.format else { throw fail("not a state proof (format \(Self.format))") }
        func string(_ key: String) throws(ExportVerificationError) -> String {
            guard let s = value[key]?.stringValue else { throw fail("the proof has no string '\(key)'") }
            return s
        }
        func events(_ key: String) throws(ExportVerificationError) -> [ExportedEvent] {
            guard let items = value[key]?.arrayValue else { throw fail("'\(key)' is not an array") }
            var out: [ExportedEvent] = []
            for item in items { out.append(try Self.readEvent(item, "an entry of '\(key)'")) }
            return out
        }
        guard let catalog = value["catalog"], catalog.objectValue != nil else { throw fail("the proof has no catalogue") }
        guard let s = value["subject"], let id = s["id"]?.stringValue, let ref = s["ref"]?.stringValue, let salt = s["salt"]?.stringValue else {
            throw fail("'subject' needs id, ref and salt")
        }
        var at: Timestamp?
        if let text = value["at"] {
            guard let t = text.stringValue.flatMap(Timestamp.init(canonical:)) else { throw fail("'at' is not a canonical UTC time") }
            at = t
        }
        guard let state = value["state"]?["features"] else { throw fail("the proof has no state") }
        // In the order of Spec/state-proof.md, Verifying, step 0.
        let ledger = try string("ledger"), verifierKey = try string("verifierKey"), checkpoint = try string("checkpoint")
        let genesis = try Self.readEvent(value["genesis"], "'genesis'"), last = try Self.readEvent(value["last"], "'last'")
        let subjectEvents = try events("events"), catalogEvents = try events("catalogVersions")
        let keys = value["keys"] == nil ? [] : try events("keys")
        self.init(
            ledger: ledger, verifierKey: verifierKey, checkpoint: checkpoint, catalog: catalog,
            genesis: genesis, last: last, subject: (id, ref, salt), at: at,
            events: subjectEvents, catalogEvents: catalogEvents,
            subjectMapProof: try Self.readMapProof(value, "subjectMap"), ledgerMapProof: try Self.readMapProof(value, "ledgerMap"), state: state, keys: keys)
    }

    static func readDigests(_ v: JSONValue?, _ what: String) throws(ExportVerificationError) -> [Digest] {
        guard let items = v?.arrayValue else { throw ExportVerificationError(seq: nil, "\(what) is not an array") }
        var out: [Digest] = []
        for item in items {
            guard let text = item.stringValue, let raw = Base64.decode(text), let d = Digest(bytes: raw) else {
                throw ExportVerificationError(seq: nil, "\(what) holds something that is not the base64 of 32 bytes")
            }
            out.append(d)
        }
        return out
    }

    /// An entry `{"seq","line","proof"}` of a proof or bundle file.
    static func readEvent(_ v: JSONValue?, _ what: String) throws(ExportVerificationError) -> ExportedEvent {
        guard let v, let seq = v["seq"]?.intValue, seq >= 0, let line = v["line"]?.stringValue else {
            throw ExportVerificationError(seq: nil, "\(what) lacks 'seq' or 'line'")
        }
        return ExportedEvent(seq: seq, line: line, proof: try readDigests(v["proof"], "\(what)'s proof"))
    }

    /// The subject-map proof in member `key` of `value`.
    static func readMapProof(_ value: JSONValue, _ key: String) throws(ExportVerificationError) -> SubjectMapProof {
        guard let v = value[key] else { throw ExportVerificationError(seq: nil, "the proof has no '\(key)'") }
        let siblings = try readDigests(v["siblings"], "'\(key).siblings'")
        if v["end"]?.stringValue == "empty" { return SubjectMapProof(siblings: siblings, end: .empty) }
        guard let keyHex = v["end"]?["key"]?.stringValue, let bytes = Hex.decode(keyHex), bytes.count == SubjectMap.keyLength,
            let seq = v["end"]?["seq"]?.intValue, seq >= 0
        else { throw ExportVerificationError(seq: nil, "'\(key).end' is neither \"empty\" nor {key: 32 hex digits, seq}") }
        return SubjectMapProof(siblings: siblings, end: .leaf(key: bytes, seq: UInt64(seq)))
    }
}

/// What a verified state proof shows.
public struct StateProofReport: Hashable, Sendable {
    public let checkpoint: Checkpoint
    public let subjectID: String
    public let at: Timestamp?
    /// The subject's events the state is replayed from (those up to `at`).
    public let events: [LedgerEvent]
    public let listing: ConsentListing
    /// The time of the checkpoint's last event: what the proof knows of is recorded up to then.
    public let recordedUntil: Timestamp
}

/// Checks a state proof offline, with nothing but the ledger's verifier key pinned by the
/// checker. See `Spec/state-proof.md` for the steps.
public enum StateProofVerifier {
    public static func verify(_ bytes: [UInt8], pinnedKey: NoteVerifierKey, witnesses: WitnessPolicy? = nil, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium()) throws(ExportVerificationError) -> StateProofReport {
        let proof = try StateProof(bytes: bytes)
        func fail(_ seq: UInt64?, _ problem: String) -> ExportVerificationError { ExportVerificationError(seq: seq, problem) }
        // 1. Only the pinned key is trusted; the checkpoint is the ledger's signed head, signed by
        // the pinned key or one that the proof's key rotations lead to from it or back to it.
        let keys = try BundleKeys.resolve(pinned: pinnedKey, genesisLine: proof.genesis.line, rotations: proof.keys, checkpointNote: proof.checkpoint, verifierKey: proof.verifierKey, what: "proof", hasher: hasher)
        let checkpoint: Checkpoint
        let checkpointText: String
        do {
            checkpointText = try SignedNote.open(proof.checkpoint, key: keys.checkpointKey, verifier: verifier)
            checkpoint = try Checkpoint(text: checkpointText)
            try witnesses?.check(proof.checkpoint, verifier: verifier)
        } catch {
            throw fail(nil, "checkpoint: \(error)")
        }
        guard checkpoint.origin.utf8.elementsEqual(pinnedKey.name.utf8), proof.ledger.utf8.elementsEqual(pinnedKey.name.utf8) else {
            throw fail(nil, "the checkpoint or the proof is for another ledger than the pinned key's '\(pinnedKey.name)'")
        }
        try keys.verifyChain(checkpoint: checkpoint, hasher: hasher, verifier: verifier)
        let schedule = keys.schedule
        @Sendable func check(_ e: ExportedEvent) throws(ExportVerificationError) -> EventRecord {
            let record = try ExportVerifier.check(e, checkpoint: checkpoint, keys: schedule, rotated: !keys.rotations.isEmpty, hasher: hasher, verifier: verifier, proofRequired: true)
            guard record.version >= 2 else { throw ExportVerificationError(seq: record.event.seq, "the event is of format version 1, which has no stream links") }
            return record
        }
        // 2. The genesis event pins the key and the catalogue.
        let catalogBytes = CanonicalJSON.serialize(proof.catalog)
        let catalog: Catalog
        do {
            catalog = try CatalogCodec.decode(catalogBytes)
        } catch {
            throw fail(0, "catalogue: \(error)")
        }
        guard CatalogCodec.encode(catalog) == proof.catalog else { throw fail(0, "the catalogue is not in its canonical form (required consents first)") }
        let genesis = try check(proof.genesis)
        guard case .ledgerCreated(let created) = genesis.event.payload, genesis.event.seq == 0 else { throw fail(0, "the genesis entry is not the ledger's first event") }
        guard created.publicKey == schedule.original.key.hex, created.ledgerName == pinnedKey.name else { throw fail(0, "the genesis event pins another key or ledger name") }
        guard hasher.sha256(catalogBytes).hex == created.catalogHash else { throw fail(0, "the catalogue's SHA-256 differs from the genesis event's") }
        // 3. The checkpoint's last event signs the subject map's root.
        let last = try check(proof.last)
        guard Int64(last.event.seq) == checkpoint.size - 1 else {
            throw fail(last.event.seq, "the 'last' event is not the checkpoint's last (seq \(checkpoint.size - 1))")
        }
        guard let root = last.stream.root else { throw fail(last.event.seq, "the checkpoint's last event carries no subject-map root") }
        // A signed head names its last event's chain hash: it must be this one.
        let extensions = checkpointText.split(separator: "\n").dropFirst(3)
        let lastHash = hasher.sha256(last.body).hex
        if extensions.contains(where: { $0.hasPrefix("chain ") && $0.dropFirst(6) != lastHash }) {
            throw fail(last.event.seq, "the checkpoint's chain line names another event than 'last'")
        }
        // 4. The subject: the pseudonym is the id's under the salt.
        guard let salt = Hex.decode(proof.subject.salt) else { throw fail(nil, "the subject's salt is not hex") }
        guard let ref = Pseudonym.ref(id: Array(proof.subject.id.utf8), salt: salt, hasher: hasher) else {
            throw fail(nil, "the subject's salt is \(salt.count) bytes, not \(Pseudonym.saltLength)")
        }
        guard ref.value == proof.subject.ref else { throw fail(nil, "the subject's pseudonym does not match its id and salt") }
        // 5. Each stream is complete: the map gives its newest event, and each event names the
        // one before it.
        func stream(_ entries: [ExportedEvent], key: [UInt8], mapProof: SubjectMapProof, what: String) throws(ExportVerificationError) -> [EventRecord] {
            guard let newest = mapProof.value(for: key, root: root, hasher: hasher) else {
                throw fail(nil, "the subject-map proof for \(what) does not lead to the root the checkpoint's last event signs")
            }
            // Signatures and inclusion proofs on all cores; the links in order.
            let checked = parallelMap(entries.count, minimumForParallel: 16) { i -> Result<EventRecord, ExportVerificationError> in
                do throws(ExportVerificationError) { return .success(try check(entries[i])) } catch { return .failure(error) }
            }
            var records: [EventRecord] = []
            for result in checked {
                let record = try result.get()
                guard StreamKey.of(record.event.payload) == key else { throw fail(record.event.seq, "the event is not one of \(what)") }
                guard record.stream.previous == records.last?.event.seq else {
                    throw fail(record.event.seq, "the event names \(record.stream.previous.map { "seq \($0)" } ?? "no event") as the previous event of \(what), but the proof's previous one is \(records.last.map { "seq \($0.event.seq)" } ?? "none"): an event is missing, added or out of order")
                }
                records.append(record)
            }
            guard records.last?.event.seq == newest else {
                throw fail(nil, "the subject map says the newest event of \(what) is \(newest.map { "seq \($0)" } ?? "none"), but the proof's is \(records.last.map { "seq \($0.event.seq)" } ?? "none"): events are missing or added")
            }
            return records
        }
        let subjectEvents = try stream(proof.events, key: StreamKey.of(subject: ref), mapProof: proof.subjectMapProof, what: "the subject")
        let ledgerEvents = try stream([proof.genesis] + proof.catalogEvents, key: SubjectMap.ledgerStream, mapProof: proof.ledgerMapProof, what: "the ledger's own stream")
        // 6. The catalogue versions, then the subject's events replayed up to `at`.
        // The ledger stream's key rotations are exactly the proof's 'keys'; they are no catalogue.
        try keys.checkSame(asRotationsIn: proof.catalogEvents, records: Array(ledgerEvents.dropFirst()))
        var versions: [(seq: UInt64, at: Timestamp, catalog: Catalog)] = [(0, genesis.event.at, catalog)]
        // As-of questions are asked in effective times (ClockCorrections).
        var clock = ClockCorrections()
        let withRevocations = try keys.withRevocations(ledgerEvents)
        for record in subjectEvents { try BundleKeys.checkAttested(record, keys: withRevocations, hasher: hasher) }
        var previousAt = genesis.event.at
        for record in ledgerEvents.dropFirst() {
            defer { previousAt = record.event.at }
            if case .keyRotated = record.event.payload { continue }
            if case .keyRevoked = record.event.payload { continue }
            if case .clockCorrected(let correction) = record.event.payload {
                // Rule 5b as far as the ledger's stream shows it.
                guard record.event.at < correction.correctedFrom else {
                    throw fail(record.event.seq, "a clock correction moves the ledger's time back, but \(record.event.at) is not earlier than the time it corrects, \(correction.correctedFrom)")
                }
                guard previousAt <= correction.correctedFrom else {
                    throw fail(record.event.seq, "a clock correction corrects \(correction.correctedFrom), earlier than the ledger's own event before it at \(previousAt)")
                }
                clock.append(.init(seq: record.event.seq, at: record.event.at, correctedFrom: correction.correctedFrom, reason: correction.reason))
                continue
            }
            guard case .catalogPublished(let published) = record.event.payload else { throw fail(record.event.seq, "a ledger event after the genesis event is not a published catalogue") }
            guard hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash else {
                throw fail(record.event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
            }
            if let problem = published.catalog.problemAsUpdate(of: versions.last!.catalog) {
                throw fail(record.event.seq, "the published catalogue cannot replace the one in force: \(problem)")
            }
            versions.append((record.event.seq, record.event.at, published.catalog))
        }
        var state = SubjectState()
        var replayed: [LedgerEvent] = []
        // The subject's record is in the proof, so its sealed evidence opens (Spec/erasure.md).
        let subjectKey = SubjectKey(id: SubjectID(proof.subject.id), salt: salt, hasher: hasher)
        for record in subjectEvents {
            if let at = proof.at, clock.effectiveTime(of: record.event) > at { break }
            let inForce = versions.last { $0.seq < record.event.seq }?.catalog ?? catalog
            let event: LedgerEvent
            do {
                event = try EvidenceSeal.opening(record.event, key: subjectKey)
            } catch {
                throw fail(record.event.seq, "\(error.problem) (the key the proof's subject record gives)")
            }
            do throws(ReplayViolation) {
                try state.apply(event, catalog: inForce)
            } catch {
                throw fail(record.event.seq, "replay: \(error.problem)")
            }
            replayed.append(event)
        }
        guard !state.isInsideCommand else { throw fail(nil, "the events end inside a command") }
        let catalogAt = proof.at.map { t in versions.last { clock.effectiveTime(seq: $0.seq, at: $0.at) <= t }?.catalog ?? catalog } ?? versions.last!.catalog
        let listing = ConsentListing(state: state, catalog: catalogAt)
        guard ListingJSON.encode(listing) == proof.state else {
            throw fail(nil, "the proof's state differs from the replay of its events")
        }
        return StateProofReport(checkpoint: checkpoint, subjectID: proof.subject.id, at: proof.at, events: replayed, listing: listing, recordedUntil: last.event.at)
    }
}
