import TransparencyLog
import ConsentDomain

/// One event in an audit export: its log line and its inclusion proof against the export's
/// checkpoint.
public struct ExportedEvent: Hashable, Sendable {
    public let seq: Int64
    /// The log line without its newline: the Merkle tree's entry.
    public let line: String
    /// RFC 6962 audit path, leaf end first.
    public let proof: [Digest]

    public init(seq: Int64, line: String, proof: [Digest]) {
        self.seq = seq
        self.line = line
        self.proof = proof
    }
}

/// A self-contained, offline-verifiable export (`Spec/export-format.md`): one subject's events
/// with inclusion proofs, or the whole ledger, under one signed checkpoint.
public struct AuditExport: Hashable, Sendable {
    public enum Scope: String, Sendable { case subject, all }

    public static let format = "consentledger-export-v1"

    public let scope: Scope
    public let ledger: String
    public let verifierKey: String
    /// The signed checkpoint note.
    public let checkpoint: String
    /// The catalogue, as JSON; its canonical bytes hash to the genesis event's `catalog`.
    package let catalog: JSONValue
    public let genesis: ExportedEvent
    /// For a subject export: the subject's id, pseudonym and salt, so the holder can check the
    /// pseudonym is theirs.
    public let subject: (id: String, ref: String, salt: String)?
    /// Subject scope: the subject's events. All scope: every event from seq 1 (without proofs:
    /// the verifier rebuilds the whole tree).
    public let events: [ExportedEvent]
    /// Subject scope: the projected state at the checkpoint (``ListingJSON``).
    package let state: JSONValue?
    /// Subject scope: every `catalog.published` event under the checkpoint, with its proof, so
    /// the subject's events replay under the catalogue in force at each.
    public let catalogEvents: [ExportedEvent]
    /// Subject scope, a ledger without streams (format 1), or a log no signed head covers: a
    /// note signed by the ledger's key that lists the sequence numbers of the subject's events
    /// and of the catalogue versions under the checkpoint, so a verifier can tell that none was
    /// left out (see ``ExportStatement``). Signing it needs the key.
    public let statement: String?
    /// Subject scope, format 2 under the signed head: the same completeness from signed data
    /// alone, as in a state proof (`Spec/state-proof.md`): the checkpoint's last event, which
    /// signs the subject map's root, and the map's proofs for the subject and for the ledger's
    /// own stream. Needs no key.
    public let streamProof: StreamProof?
    /// The ledger's `key.rotated` events below the checkpoint, with their inclusion proofs, when
    /// its key was rotated: the chain from the genesis key to the key that signs the checkpoint,
    /// so an auditor may pin either (`Spec/export-format.md`, Keys). Empty otherwise.
    public let keys: [ExportedEvent]

    /// The subject-map proofs of a subject bundle.
    public struct StreamProof: Hashable, Sendable {
        public let last: ExportedEvent
        public let subjectMap: SubjectMapProof
        public let ledgerMap: SubjectMapProof

        public init(last: ExportedEvent, subjectMap: SubjectMapProof, ledgerMap: SubjectMapProof) {
            self.last = last
            self.subjectMap = subjectMap
            self.ledgerMap = ledgerMap
        }
    }

    public static func == (a: AuditExport, b: AuditExport) -> Bool { a.json == b.json }
    public func hash(into hasher: inout Hasher) { hasher.combine(json) }

    package var json: JSONValue {
        func event(_ e: ExportedEvent) -> JSONValue {
            var m: [String: JSONValue] = ["seq": .int(e.seq), "line": .string(e.line)]
            if scope == .subject || e.seq == 0 { m["proof"] = .array(e.proof.map { .string(Base64.encode($0.bytes)) }) }
            return .object(m)
        }
        var members: [String: JSONValue] = [
            "format": .string(Self.format),
            "scope": .string(scope.rawValue),
            "ledger": .string(ledger),
            "verifierKey": .string(verifierKey),
            "checkpoint": .string(checkpoint),
            "catalog": catalog,
            "genesis": event(genesis),
            "events": .array(events.map(event)),
        ]
        if let subject { members["subject"] = .object(["id": .string(subject.id), "ref": .string(subject.ref), "salt": .string(subject.salt)]) }
        if let state { members["state"] = .object(["features": state]) }
        if scope == .subject { members["catalogVersions"] = .array(catalogEvents.map(event)) }
        if let statement { members["statement"] = .string(statement) }
        if !keys.isEmpty { members["keys"] = .array(keys.map(StateProof.eventJSON)) }
        if let streamProof {
            members["last"] = StateProof.eventJSON(streamProof.last)
            members["subjectMap"] = StateProof.mapProofJSON(streamProof.subjectMap)
            members["ledgerMap"] = StateProof.mapProofJSON(streamProof.ledgerMap)
        }
        return .object(members)
    }

    /// The bundle file: canonical JSON and a newline.
    public var bytes: [UInt8] { CanonicalJSON.serialize(json) + [0x0A] }

    package init(scope: Scope, ledger: String, verifierKey: String, checkpoint: String, catalog: JSONValue, genesis: ExportedEvent, subject: (id: String, ref: String, salt: String)?, events: [ExportedEvent], state: JSONValue?, catalogEvents: [ExportedEvent] = [], statement: String? = nil, streamProof: StreamProof? = nil, keys: [ExportedEvent] = []) {
        self.keys = keys
        self.catalogEvents = catalogEvents
        self.statement = statement
        self.streamProof = streamProof
        self.scope = scope
        self.ledger = ledger
        self.verifierKey = verifierKey
        self.checkpoint = checkpoint
        self.catalog = catalog
        self.genesis = genesis
        self.subject = subject
        self.events = events
        self.state = state
    }

    /// Reads a bundle; a malformed one is an error that says what is missing.
    public init(bytes: [UInt8]) throws(ExportVerificationError) {
        self = try bytes.withUnsafeBufferPointer { (buffer) throws(ExportVerificationError) -> AuditExport in
            try Self.read(buffer, keepingEvents: { _ in true }).bundle
        }
    }

    /// Reads a bundle from `buffer`. Its `events` are read one by one and kept only when
    /// `keepingEvents` says so for the bundle's scope; otherwise the bundle's ``events`` is empty
    /// and `offsets` says where each entry starts (``event(in:at:)`` reads one). A whole-ledger
    /// bundle is thus verified in memory that does not grow with it (``ExportVerifier``).
    package static func read(_ buffer: UnsafeBufferPointer<UInt8>, keepingEvents: (Scope) -> Bool, passed: (Int) -> Void = { _ in }) throws(ExportVerificationError) -> (bundle: AuditExport, offsets: [Int]) {
        let members: [String: JSONValue], offsets: [Int]?
        // Each entry's shape is checked as it goes by (Verifying a bundle, step 0): the first
        // entry that is not one is reported where a reader of the whole bundle reports it.
        var malformed: ExportVerificationError?
        do {
            (members, offsets) = try CanonicalJSON.parseObject(buffer, lazy: "events", canonical: false, passed: passed, each: { value in
                guard malformed == nil else { return }
                do throws(ExportVerificationError) { _ = try event(value) } catch { malformed = error }
            })
        } catch {
            throw ExportVerificationError(seq: nil, "the bundle is not JSON: \(error)")
        }
        let value = JSONValue.object(members)
        func string(_ key: String) throws(ExportVerificationError) -> String {
            guard let s = value[key]?.stringValue else { throw ExportVerificationError(seq: nil, "the bundle has no string '\(key)'") }
            return s
        }
        guard try string("format") == Self.format else { throw ExportVerificationError(seq: nil, "unknown bundle format (expected \(Self.format))") }
        guard let scope = Scope(rawValue: try string("scope")) else { throw ExportVerificationError(seq: nil, "unknown scope") }
        guard let catalog = value["catalog"], catalog.objectValue != nil else { throw ExportVerificationError(seq: nil, "the bundle has no catalogue") }
        if let malformed { throw malformed }
        var events: [ExportedEvent] = []
        if keepingEvents(scope), let offsets {
            events.reserveCapacity(offsets.count)
            for offset in offsets { events.append(try event(in: buffer, at: offset)) }
        }
        var catalogEvents: [ExportedEvent] = []
        for e in value["catalogVersions"]?.arrayValue ?? [] { catalogEvents.append(try event(e)) }
        var subject: (id: String, ref: String, salt: String)?
        if let s = value["subject"] {
            guard let id = s["id"]?.stringValue, let ref = s["ref"]?.stringValue, let salt = s["salt"]?.stringValue else {
                throw ExportVerificationError(seq: nil, "'subject' needs id, ref and salt")
            }
            subject = (id, ref, salt)
        }
        // In the order of Spec/export-format.md, Verifying a bundle, step 0.
        let ledger = try string("ledger"), verifierKey = try string("verifierKey"), checkpoint = try string("checkpoint")
        let genesis = try event(value["genesis"])
        var keys: [ExportedEvent] = []
        if let members = value["keys"] {
            guard let items = members.arrayValue else { throw ExportVerificationError(seq: nil, "'keys' is not an array") }
            for e in items { keys.append(try event(e)) }
        }
        var streamProof: StreamProof?
        if value["subjectMap"] != nil || value["ledgerMap"] != nil || value["last"] != nil {
            guard value["statement"] == nil else {
                throw ExportVerificationError(seq: nil, "a subject bundle proves its completeness by a signed statement or by subject-map proofs, not both")
            }
            streamProof = StreamProof(last: try StateProof.readEvent(value["last"], "'last'"), subjectMap: try StateProof.readMapProof(value, "subjectMap"),
                                      ledgerMap: try StateProof.readMapProof(value, "ledgerMap"))
        }
        let bundle = AuditExport(scope: scope, ledger: ledger, verifierKey: verifierKey, checkpoint: checkpoint, catalog: catalog, genesis: genesis, subject: subject, events: events, state: value["state"]?["features"], catalogEvents: catalogEvents, statement: value["statement"]?.stringValue, streamProof: streamProof, keys: keys)
        return (bundle, offsets ?? [])
    }

    /// The entry of `events` that starts at `offset` of `buffer` (``read(_:keepingEvents:)``).
    package static func event(in buffer: UnsafeBufferPointer<UInt8>, at offset: Int) throws(ExportVerificationError) -> ExportedEvent {
        do {
            return try event(CanonicalJSON.parseElement(buffer, at: offset, canonical: false))
        } catch let error as ExportVerificationError {
            throw error
        } catch {
            throw ExportVerificationError(seq: nil, "the bundle is not JSON: \(error)")
        }
    }

    /// An entry: `seq`, `line` and, where the scope has them, the proof's hashes.
    static func event(_ v: JSONValue?) throws(ExportVerificationError) -> ExportedEvent {
        guard let v, let seq = v["seq"]?.intValue, let line = v["line"]?.stringValue else {
            throw ExportVerificationError(seq: nil, "an event entry lacks 'seq' or 'line'")
        }
        var proof: [Digest] = []
        for p in v["proof"]?.arrayValue ?? [] {
            guard let text = p.stringValue, let raw = Base64.decode(text), let d = Digest(bytes: raw) else {
                throw ExportVerificationError(seq: UInt64(max(0, seq)), "a proof hash is not the base64 of 32 bytes")
            }
            proof.append(d)
        }
        return ExportedEvent(seq: seq, line: line, proof: proof)
    }
}

/// The statement a subject export carries, signed by the ledger's key as a note:
///
/// ```
/// consentledger-export-v1
/// <origin>
/// <tree size>
/// subject <32 hex digits>
/// catalog[ <seq>]*
/// events[ <seq>]*
/// ```
///
/// It lists every event of the subject and every published catalogue version under the
/// checkpoint, so dropping one from the bundle is caught even when the bundled state is
/// rewritten to match.
public struct ExportStatement: Hashable, Sendable {
    public static let magic = "consentledger-export-v1"

    public let origin: String
    public let size: Int64
    public let subject: String
    /// The length of the salt the pseudonym `subject` was made with: signed, so that a bundle
    /// cannot move bytes between the salt and the id and claim the pseudonym for another id.
    public let saltLength: Int
    public let catalogVersions: [Int64]
    public let events: [Int64]

    public init(origin: String, size: Int64, subject: String, saltLength: Int = Pseudonym.saltLength, catalogVersions: [Int64], events: [Int64]) {
        self.origin = origin
        self.size = size
        self.subject = subject
        self.saltLength = saltLength
        self.catalogVersions = catalogVersions
        self.events = events
    }

    public var text: String {
        let catalog = (["catalog"] + catalogVersions.map(String.init)).joined(separator: " ")
        let events = (["events"] + self.events.map(String.init)).joined(separator: " ")
        return "\(Self.magic)\n\(origin)\n\(size)\nsubject \(subject) salt-length \(saltLength)\n\(catalog)\n\(events)\n"
    }

    public init(text: String) throws(NoteError) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count == 7, lines[6].isEmpty, lines[0] == Self.magic, let size = Int64(lines[2]), String(size) == lines[2],
            lines[4].split(separator: " ").first == "catalog", lines[5].split(separator: " ").first == "events"
        else { throw NoteError("not an export statement") }
        let subjectLine = lines[3].split(separator: " ", omittingEmptySubsequences: false)
        guard subjectLine.count == 4, subjectLine[0] == "subject", subjectLine[2] == "salt-length",
            let saltLength = Int(subjectLine[3]), saltLength > 0, saltLength <= 1024, String(saltLength) == subjectLine[3]
        else { throw NoteError("export statement: the subject line is not 'subject REF salt-length N'") }
        func seqs(_ line: Substring) throws(NoteError) -> [Int64] {
            var out: [Int64] = []
            for part in line.split(separator: " ").dropFirst() {
                guard let n = Int64(part), n >= 0, String(n) == part else { throw NoteError("export statement: '\(part)' is not a sequence number") }
                out.append(n)
            }
            return out
        }
        self.init(origin: String(lines[1]), size: size, subject: String(subjectLine[1]), saltLength: saltLength, catalogVersions: try seqs(lines[4]), events: try seqs(lines[5]))
    }
}

/// Why an export does not verify; `seq` names the event when one is at fault.
public struct ExportVerificationError: Error, Hashable, Sendable, CustomStringConvertible {
    public let seq: UInt64?
    public let problem: String

    public init(seq: UInt64?, _ problem: String) {
        self.seq = seq
        self.problem = problem
    }

    public var description: String { seq.map { "seq \($0): \(problem)" } ?? problem }
}

/// What a verified export holds.
public struct ExportVerificationReport: Hashable, Sendable {
    public let scope: AuditExport.Scope
    public let checkpoint: Checkpoint
    public let events: Int
    public let subjectID: String?
}

/// Checks an export offline, with nothing but the ledger's verifier key pinned by the auditor.
public enum ExportVerifier {
    ///
    /// With `witnesses`, the checkpoint must also carry valid cosignatures from a quorum of them
    /// (C2SP `tlog-cosignature`): proof that the ledger showed witnesses this same history.
    public static func verify(_ bytes: [UInt8], pinnedKey: NoteVerifierKey, witnesses: WitnessPolicy? = nil, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium()) throws(ExportVerificationError) -> ExportVerificationReport {
        try bytes.withUnsafeBufferPointer { (buffer) throws(ExportVerificationError) -> ExportVerificationReport in
            try verify(buffer, pinnedKey: pinnedKey, witnesses: witnesses, hasher: hasher, verifier: verifier, release: { _ in })
        }
    }

    /// Verifies the bundle in `buffer` (a mapped file, say). A whole-ledger bundle's events are
    /// read and checked a batch at a time and never held together: memory does not grow with
    /// the bundle. After each batch `release` is called with the offset below which `buffer` is
    /// not read again (until the re-check of a revoked key's window, which reads its entries
    /// again), so that a mapped file's pages can be given back.
    public static func verify(_ buffer: UnsafeBufferPointer<UInt8>, pinnedKey: NoteVerifierKey, witnesses: WitnessPolicy? = nil, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium(), release: (Int) -> Void) throws(ExportVerificationError) -> ExportVerificationReport {
        try verify(buffer, pinnedKey: pinnedKey, witnesses: witnesses, hasher: hasher, verifier: verifier, release: release, batchSize: 4096)
    }

    /// As above, reading and checking `batchSize` entries at a time (tests use small batches).
    package static func verify(_ buffer: UnsafeBufferPointer<UInt8>, pinnedKey: NoteVerifierKey, witnesses: WitnessPolicy? = nil, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium(), release: (Int) -> Void, batchSize: Int) throws(ExportVerificationError) -> ExportVerificationReport {
        let (bundle, offsets) = try AuditExport.read(buffer, keepingEvents: { $0 != .all }, passed: release)
        // 1. Only the pinned key is trusted: the key that signs the checkpoint is the pinned key,
        // or one that the bundle's key rotations lead to from it or back to it.
        let keys = try BundleKeys.resolve(pinned: pinnedKey, genesisLine: bundle.genesis.line, rotations: bundle.keys, checkpointNote: bundle.checkpoint, verifierKey: bundle.verifierKey, what: "bundle", hasher: hasher)
        let checkpoint: Checkpoint
        do {
            checkpoint = try Checkpoint(text: SignedNote.open(bundle.checkpoint, key: keys.checkpointKey, verifier: verifier))
            try witnesses?.check(bundle.checkpoint, verifier: verifier)
        } catch {
            throw ExportVerificationError(seq: nil, "checkpoint: \(error)")
        }
        guard checkpoint.origin.utf8.elementsEqual(pinnedKey.name.utf8) else {
            throw ExportVerificationError(seq: nil, "the checkpoint's origin '\(checkpoint.origin)' is not the pinned key's ledger '\(pinnedKey.name)'")
        }
        guard bundle.ledger.utf8.elementsEqual(pinnedKey.name.utf8) else {
            throw ExportVerificationError(seq: nil, "the bundle says it is from ledger '\(bundle.ledger)', not the pinned key's ledger '\(pinnedKey.name)'")
        }
        try keys.verifyChain(checkpoint: checkpoint, hasher: hasher, verifier: verifier)
        let schedule = keys.schedule
        // 2. The genesis event pins the key and the catalogue.
        let catalogBytes = CanonicalJSON.serialize(bundle.catalog)
        let catalog: Catalog
        do {
            catalog = try CatalogCodec.decode(catalogBytes)
        } catch {
            throw ExportVerificationError(seq: 0, "catalogue: \(error)")
        }
        guard CatalogCodec.encode(catalog) == bundle.catalog else {
            throw ExportVerificationError(seq: 0, "the bundled catalogue is not in its canonical form (required consents first)")
        }
        let genesisRecord = try check(bundle.genesis, checkpoint: checkpoint, keys: schedule, rotated: !keys.rotations.isEmpty, hasher: hasher, verifier: verifier, proofRequired: true)
        guard case .ledgerCreated(let created) = genesisRecord.event.payload, genesisRecord.event.seq == 0 else {
            throw ExportVerificationError(seq: 0, "the genesis entry is not the ledger's first event")
        }
        guard created.publicKey == schedule.original.key.hex, created.ledgerName == pinnedKey.name else {
            throw ExportVerificationError(seq: 0, "the genesis event pins another key or ledger name")
        }
        guard hasher.sha256(catalogBytes).hex == created.catalogHash else {
            throw ExportVerificationError(seq: 0, "the bundled catalogue's SHA-256 differs from the genesis event's")
        }
        switch bundle.scope {
        case .subject where bundle.streamProof != nil:
            return try verifySubjectByStreams(bundle, pinnedKey: pinnedKey, hasher: hasher, verifier: verifier)
        case .subject:
            return try verifySubject(bundle, checkpoint: checkpoint, catalog: catalog, pinnedKey: pinnedKey, keys: keys, hasher: hasher, verifier: verifier)
        case .all:
            return try verifyAll(bundle, count: offsets.count, read: { (i) throws(ExportVerificationError) -> ExportedEvent in try AuditExport.event(in: buffer, at: offsets[i]) },
                                 release: { i in release(i < offsets.count ? offsets[i] : buffer.count) }, batchSize: batchSize,
                                 genesis: genesisRecord, checkpoint: checkpoint, catalog: catalog, keys: keys, hasher: hasher, verifier: verifier)
        }
    }

    /// Checking an entry: its line decodes to the event of its seq, signed by the key in force
    /// for that seq, and (when required) proved in the checkpoint's tree.
    /// `rotated`: the file carries key rotations (its failure names the key in force, not the
    /// pinned key).
    static func check(_ e: ExportedEvent, checkpoint: Checkpoint, keys: KeySchedule, rotated: Bool, hasher: any SHA256Hasher, verifier: any SignatureVerifier, proofRequired: Bool) throws(ExportVerificationError) -> EventRecord {
        let seq = UInt64(max(0, e.seq))
        let line = Array(e.line.utf8)
        let record: EventRecord
        do {
            record = try EventCodec.decode(line: line)
        } catch {
            throw ExportVerificationError(seq: seq, "malformed event: \(error.problem)")
        }
        guard Int64(record.event.seq) == e.seq else {
            throw ExportVerificationError(seq: seq, "the entry says seq \(e.seq) but its event is seq \(record.event.seq)")
        }
        let inForce = keys.forEvent(record.event.seq)
        guard record.keyID == inForce.keyID, EventCodec.signedMessage(body: record.body).withUnsafeBytes({ verifier.isValid(record.signature, of: $0, by: inForce.key) }) else {
            throw ExportVerificationError(seq: seq, !rotated ? "the event's signature does not verify with the pinned key" : "the event's signature does not verify with the ledger's key in force for it, \(inForce.keyID)")
        }
        if proofRequired {
            guard e.seq < checkpoint.size,
                MerkleTree.checkInclusion(e.proof, record: e.seq, leaf: MerkleTree.leafHash(line, hasher: hasher), size: checkpoint.size, root: checkpoint.root, hasher: hasher)
            else {
                throw ExportVerificationError(seq: seq, "the inclusion proof does not lead to the checkpoint's root (tree size \(checkpoint.size))")
            }
        }
        return record
    }

    /// A subject bundle with subject-map proofs holds exactly what a state proof of the subject
    /// at the checkpoint holds; it is checked as one (`Spec/state-proof.md`).
    private static func verifySubjectByStreams(_ bundle: AuditExport, pinnedKey: NoteVerifierKey, hasher: any SHA256Hasher, verifier: any SignatureVerifier) throws(ExportVerificationError) -> ExportVerificationReport {
        guard let subject = bundle.subject, let state = bundle.state, let streams = bundle.streamProof else {
            throw ExportVerificationError(seq: nil, "a subject export needs 'subject' and 'state'")
        }
        let proof = StateProof(ledger: bundle.ledger, verifierKey: bundle.verifierKey, checkpoint: bundle.checkpoint, catalog: bundle.catalog, genesis: bundle.genesis,
                               last: streams.last, subject: subject, at: nil, events: bundle.events, catalogEvents: bundle.catalogEvents,
                               subjectMapProof: streams.subjectMap, ledgerMapProof: streams.ledgerMap, state: state, keys: bundle.keys)
        let report = try StateProofVerifier.verify(proof.bytes, pinnedKey: pinnedKey, hasher: hasher, verifier: verifier)
        return ExportVerificationReport(scope: .subject, checkpoint: report.checkpoint, events: bundle.events.count, subjectID: subject.id)
    }

    private static func verifySubject(_ bundle: AuditExport, checkpoint: Checkpoint, catalog: Catalog, pinnedKey: NoteVerifierKey, keys: BundleKeys, hasher: any SHA256Hasher, verifier: any SignatureVerifier) throws(ExportVerificationError) -> ExportVerificationReport {
        guard let subject = bundle.subject, let bundledState = bundle.state else {
            throw ExportVerificationError(seq: nil, "a subject export needs 'subject' and 'state'")
        }
        guard let salt = Hex.decode(subject.salt) else {
            throw ExportVerificationError(seq: nil, "the subject's salt is not hex")
        }
        guard let ref = Pseudonym.ref(id: Array(subject.id.utf8), salt: salt, hasher: hasher) else {
            throw ExportVerificationError(seq: nil, "the subject's salt is \(salt.count) bytes, not \(Pseudonym.saltLength)")
        }
        guard ref.value == subject.ref else {
            throw ExportVerificationError(seq: nil, "the subject's pseudonym does not match its id and salt")
        }
        // Order first, so a swapped pair is reported as such rather than as a broken command.
        var previous: Int64 = 0
        for e in bundle.events {
            guard e.seq > previous else { throw ExportVerificationError(seq: UInt64(max(0, e.seq)), "events are not in increasing sequence order") }
            previous = e.seq
        }
        // The catalogue versions in force: genesis, then each published version, each proven.
        // A key rotation of the ledger's stream is not a catalogue version; the rotations there
        // must be those of 'keys'.
        var versions: [(seq: Int64, catalog: Catalog)] = [(0, catalog)]
        var ledgerRecords: [EventRecord] = []
        for e in bundle.catalogEvents {
            let record = try check(e, checkpoint: checkpoint, keys: keys.schedule, rotated: !keys.rotations.isEmpty, hasher: hasher, verifier: verifier, proofRequired: true)
            ledgerRecords.append(record)
            if e.seq > versions.last!.seq {
                if case .keyRotated = record.event.payload { continue }
                if case .keyRevoked = record.event.payload { continue }
                if case .clockCorrected = record.event.payload { continue }
            }
            guard case .catalogPublished(let published) = record.event.payload, e.seq > versions.last!.seq else {
                throw ExportVerificationError(seq: record.event.seq, "a catalogue-version entry is not a published catalogue, or is out of order")
            }
            guard hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash else {
                throw ExportVerificationError(seq: record.event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
            }
            if let problem = published.catalog.problemAsUpdate(of: versions.last!.catalog) {
                throw ExportVerificationError(seq: record.event.seq, "the published catalogue cannot replace the one in force: \(problem)")
            }
            versions.append((e.seq, published.catalog))
        }
        try keys.checkSame(asRotationsIn: bundle.catalogEvents, records: ledgerRecords)
        let withRevocations = try keys.withRevocations(ledgerRecords)
        // The signed statement says which events and catalogue versions the export must hold.
        guard let note = bundle.statement else { throw ExportVerificationError(seq: nil, "a subject export needs its signed statement") }
        let statement: ExportStatement
        do {
            statement = try ExportStatement(text: SignedNote.open(note, key: keys.checkpointKey, verifier: verifier))
        } catch {
            throw ExportVerificationError(seq: nil, "export statement: \(error)")
        }
        guard statement.origin.utf8.elementsEqual(pinnedKey.name.utf8), statement.size == checkpoint.size, statement.subject.utf8.elementsEqual(subject.ref.utf8), statement.saltLength == salt.count else {
            throw ExportVerificationError(seq: nil, "the signed export statement is for another ledger, checkpoint size or subject")
        }
        guard statement.catalogVersions == bundle.catalogEvents.map(\.seq) else {
            throw ExportVerificationError(seq: nil, "the signed export statement lists catalogue versions \(statement.catalogVersions) but the bundle holds \(bundle.catalogEvents.map(\.seq)): a version was left out or added")
        }
        guard statement.events == bundle.events.map(\.seq) else {
            let missing = Set(statement.events).subtracting(bundle.events.map(\.seq)).min()
            throw ExportVerificationError(seq: missing.map { UInt64($0) }, "the signed export statement lists events the bundle does not hold exactly (\(statement.events.count) listed, \(bundle.events.count) bundled): an event was left out or added")
        }
        var state = SubjectState()
        // The bundle holds the subject's record, so its sealed evidence opens (Spec/erasure.md).
        let subjectKey = SubjectKey(id: SubjectID(subject.id), salt: salt, hasher: hasher)
        for e in bundle.events {
            let record = try check(e, checkpoint: checkpoint, keys: keys.schedule, rotated: !keys.rotations.isEmpty, hasher: hasher, verifier: verifier, proofRequired: true)
            guard let ref = record.event.payload.subject?.value, ref.utf8.elementsEqual(subject.ref.utf8) else {
                throw ExportVerificationError(seq: record.event.seq, "the event is about another subject")
            }
            try BundleKeys.checkAttested(record, keys: withRevocations, hasher: hasher)
            let inForce = versions.last { $0.seq < e.seq }?.catalog ?? catalog
            let event: LedgerEvent
            do {
                event = try EvidenceSeal.opening(record.event, key: subjectKey)
            } catch {
                throw ExportVerificationError(seq: record.event.seq, "\(error.problem) (the key the bundle's subject record gives)")
            }
            do throws(ReplayViolation) {
                try state.apply(event, catalog: inForce)
            } catch {
                throw ExportVerificationError(seq: record.event.seq, "replay: \(error.problem)")
            }
        }
        guard !state.isInsideCommand else { throw ExportVerificationError(seq: nil, "the events end inside a command: some of the subject's events are missing") }
        let replayed = ListingJSON.encode(ConsentListing(state: state, catalog: versions.last!.catalog))
        guard replayed == bundledState else {
            throw ExportVerificationError(seq: nil, "the bundled state differs from the replay of the bundled events")
        }
        return ExportVerificationReport(scope: .subject, checkpoint: checkpoint, events: bundle.events.count, subjectID: subject.id)
    }

    /// A whole-ledger bundle: its `count` entries of `events` are read one at a time by `read`;
    /// entries below the index given to `release` are not read again (but for a revoked key's
    /// window).
    /// `batchSize` entries are read and their signatures checked at once (on all cores).
    private static func verifyAll(_ bundle: AuditExport, count: Int, read: (Int) throws(ExportVerificationError) -> ExportedEvent, release: (Int) -> Void, batchSize: Int, genesis: EventRecord, checkpoint: Checkpoint, catalog: Catalog, keys: BundleKeys, hasher: any SHA256Hasher, verifier: any SignatureVerifier) throws(ExportVerificationError) -> ExportVerificationReport {
        guard Int64(count) + 1 == checkpoint.size else {
            throw ExportVerificationError(seq: nil, "the bundle holds \(count + 1) events but the checkpoint covers \(checkpoint.size)")
        }
        var replay = LedgerReplay(catalog: catalog)
        var frontier: [(size: Int64, hash: Digest)] = []
        var previous = Digest.zero
        var rotations: [(ExportedEvent, EventRecord)] = []
        var revocations: [EventRecord] = []
        let rotated = !keys.rotations.isEmpty
        // Entry i of the whole log: the genesis entry, then the bundle's events.
        func entry(_ i: Int) throws(ExportVerificationError) -> ExportedEvent { i == 0 ? bundle.genesis : try read(i - 1) }
        var start = 0
        while start <= count {
            let end = min(start + batchSize, count + 1)
            var batch: [ExportedEvent] = []
            batch.reserveCapacity(end - start)
            for i in start..<end { batch.append(try entry(i)) }
            // Decoding and signatures on all cores; the links, the replay and the tree in order.
            let lines = batch, first = start
            let checked = parallelMap(lines.count, minimumForParallel: 64) { j -> Result<EventRecord, ExportVerificationError> in
                if first + j == 0 { return .success(genesis) }
                do throws(ExportVerificationError) {
                    return .success(try check(lines[j], checkpoint: checkpoint, keys: keys.schedule, rotated: rotated, hasher: hasher, verifier: verifier, proofRequired: false))
                } catch {
                    return .failure(error)
                }
            }
            for (j, result) in checked.enumerated() {
                // In order, entry by entry, as a reader of the whole bundle checks them.
                let e = batch[j]
                guard e.seq == Int64(start + j) else { throw ExportVerificationError(seq: UInt64(max(0, e.seq)), "expected seq \(start + j): events are missing or out of order") }
                let record = try result.get()
                if case .keyRotated = record.event.payload { rotations.append((e, record)) }
                if case .keyRevoked = record.event.payload { revocations.append(record) }
                guard record.prev == previous else { throw ExportVerificationError(seq: record.event.seq, "prev does not match the previous event's hash") }
                if case .catalogPublished(let published) = record.event.payload, hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex != published.catalogHash {
                    throw ExportVerificationError(seq: record.event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
                }
                previous = hasher.sha256(record.body)
                do throws(ReplayViolation) {
                    try replay.apply(record.event)
                } catch {
                    throw ExportVerificationError(seq: record.event.seq, "replay: \(error.problem)")
                }
                // RFC 6962 root, built leaf by leaf from complete subtrees.
                var node = (size: Int64(1), hash: MerkleTree.leafHash(Array(e.line.utf8), hasher: hasher))
                while let last = frontier.last, last.size == node.size {
                    frontier.removeLast()
                    node = (last.size * 2, MerkleTree.nodeHash(last.hash, node.hash, hasher: hasher))
                }
                frontier.append(node)
            }
            start = end
            release(max(0, start - 1))
        }
        guard var root = frontier.last?.hash else { throw ExportVerificationError(seq: nil, "the bundle holds no events") }
        for part in frontier.dropLast().reversed() { root = MerkleTree.nodeHash(part.hash, root, hasher: hasher) }
        guard root == checkpoint.root else {
            throw ExportVerificationError(seq: nil, "the events' Merkle root differs from the checkpoint's")
        }
        guard replay.incompleteCommand == nil else { throw ExportVerificationError(seq: nil, "the events end inside a command") }
        try keys.checkSame(asRotationsIn: rotations.map(\.0), records: rotations.map(\.1))
        // Every event a revoked key signed in its compromised window is one it attests.
        // (A revocation follows the window it covers: the window's events are read again.)
        let withRevocations = try keys.withRevocations(revocations)
        for revocation in withRevocations.revocations {
            for seq in revocation.since...revocation.until {
                let record = try check(try entry(Int(seq)), checkpoint: checkpoint, keys: keys.schedule, rotated: rotated, hasher: hasher, verifier: verifier, proofRequired: false)
                try BundleKeys.checkAttested(record, keys: withRevocations, hasher: hasher)
            }
        }
        return ExportVerificationReport(scope: .all, checkpoint: checkpoint, events: count + 1, subjectID: nil)
    }

    /// Checks a consistency proof between two signed checkpoints, offline.
    /// With `witnesses`, the newer checkpoint must carry cosignatures from a quorum of them (the
    /// older one is the checkpoint the auditor already holds and trusts).
    public static func verifyConsistency(_ proof: ConsistencyProof, pinnedKey: NoteVerifierKey, witnesses: WitnessPolicy? = nil, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium()) throws(ExportVerificationError) -> (old: Checkpoint, new: Checkpoint) {
        // Each checkpoint is signed by the key in force at its size: with key rotations between
        // them, the file carries the chain (checked against the newer checkpoint's tree).
        let keys = try BundleKeys.resolve(pinned: pinnedKey, genesisLine: proof.genesis?.line, rotations: proof.keys, checkpointNote: proof.newNote, verifierKey: nil, what: "consistency proof", hasher: hasher)
        let claimedOld = (try? SignedNote.split(proof.oldNote)).flatMap { try? Checkpoint(text: $0.text) }?.size ?? 0
        let old: Checkpoint, new: Checkpoint
        do {
            old = try Checkpoint(text: SignedNote.open(proof.oldNote, key: try keys.checkpointKey(size: claimedOld, hasher: hasher), verifier: verifier))
            new = try Checkpoint(text: SignedNote.open(proof.newNote, key: keys.checkpointKey, verifier: verifier))
            try witnesses?.check(proof.newNote, verifier: verifier)
        } catch {
            throw ExportVerificationError(seq: nil, "checkpoint: \(error)")
        }
        guard old.origin == pinnedKey.name, new.origin == pinnedKey.name else {
            throw ExportVerificationError(seq: nil, "a checkpoint is for another ledger than the pinned key's")
        }
        if let genesis = proof.genesis, !proof.keys.isEmpty {
            let record = try check(genesis, checkpoint: new, keys: keys.schedule, rotated: !keys.rotations.isEmpty, hasher: hasher, verifier: verifier, proofRequired: true)
            guard case .ledgerCreated(let created) = record.event.payload, record.event.seq == 0, created.ledgerName == pinnedKey.name else {
                throw ExportVerificationError(seq: 0, "the genesis entry is not the ledger's first event")
            }
        }
        try keys.verifyChain(checkpoint: new, hasher: hasher, verifier: verifier)
        guard MerkleTree.checkConsistency(proof.proof, old: old.size, oldRoot: old.root, new: new.size, newRoot: new.root, hasher: hasher) else {
            throw ExportVerificationError(seq: nil, "the consistency proof from size \(old.size) to size \(new.size) does not verify: the log did not only grow")
        }
        return (old, new)
    }
}

extension ConsistencyProof {
    package var json: JSONValue {
        var members: [String: JSONValue] = [
            "format": .string("consentledger-consistency-v1"),
            "old": .string(oldNote),
            "new": .string(newNote),
            "proof": .array(proof.map { .string(Base64.encode($0.bytes)) }),
        ]
        if !keys.isEmpty, let genesis {
            members["genesis"] = StateProof.eventJSON(genesis)
            members["keys"] = .array(keys.map(StateProof.eventJSON))
        }
        return .object(members)
    }

    public init(bytes: [UInt8]) throws(ExportVerificationError) {
        guard let value = try? CanonicalJSON.parse(bytes, canonical: false), value["format"]?.stringValue == "consentledger-consistency-v1",
            let old = value["old"]?.stringValue, let new = value["new"]?.stringValue, let hashes = value["proof"]?.arrayValue
        else { throw ExportVerificationError(seq: nil, "not a consistency proof file (format consentledger-consistency-v1)") }
        var proof: [Digest] = []
        for h in hashes {
            guard let text = h.stringValue, let raw = Base64.decode(text), let d = Digest(bytes: raw) else {
                throw ExportVerificationError(seq: nil, "a proof hash is not the base64 of 32 bytes")
            }
            proof.append(d)
        }
        var genesis: ExportedEvent?
        var keys: [ExportedEvent] = []
        if let members = value["keys"] {
            guard let items = members.arrayValue else { throw ExportVerificationError(seq: nil, "'keys' is not an array") }
            for item in items { keys.append(try StateProof.readEvent(item, "an entry of 'keys'")) }
            genesis = try StateProof.readEvent(value["genesis"], "'genesis'")
        }
        self.init(oldNote: old, newNote: new, proof: proof, genesis: genesis, keys: keys)
    }
}

/// A consistency proof between two signed checkpoints of one ledger.
public struct ConsistencyProof: Hashable, Sendable {
    public let oldNote: String
    public let newNote: String
    public let proof: [Digest]
    /// When the ledger's key was rotated below the newer checkpoint: the genesis entry and the
    /// `key.rotated` entries, each with its inclusion proof in the newer checkpoint's tree, so
    /// that a verifier pinning the genesis key or the current one can tell which key signed each
    /// checkpoint.
    public let genesis: ExportedEvent?
    public let keys: [ExportedEvent]

    public init(oldNote: String, newNote: String, proof: [Digest], genesis: ExportedEvent? = nil, keys: [ExportedEvent] = []) {
        self.oldNote = oldNote
        self.newNote = newNote
        self.proof = proof
        self.genesis = genesis
        self.keys = keys
    }
}
