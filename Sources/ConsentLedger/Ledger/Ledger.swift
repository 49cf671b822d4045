import LedgerFormat
import LedgerStorage
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import ConsentDomain
import Synchronization

/// One command for one subject, as the ledger accepts it.
public struct LedgerCommand: Hashable, Sendable {
    public let subjectID: String
    public let request: ConsentRequest
    /// Who acts: `self` for the subject, or a clinician's or system's id.
    public let actor: String
    /// How a grant was obtained (recorded on each consent a `give` appends).
    public let evidence: GrantEvidence

    public init(subjectID: String, request: ConsentRequest, actor: String = "self", evidence: GrantEvidence = GrantEvidence()) {
        self.subjectID = subjectID
        self.request = request
        self.actor = actor
        self.evidence = evidence
    }

    /// Checks a subject id and an actor as `Ledger.execute(_:)` does, so that a batch can be
    /// checked whole before any of it is appended. Throws `ConsentError.invalidRequest(_:)`.
    public static func validate(subjectID: String, actor: String) throws {
        try Ledger.validateText(subjectID, what: "subject id", maxBytes: 256)
        try Ledger.validateText(actor, what: "actor", maxBytes: 128)
    }
}

/// What one accepted command did, and the subject's consents afterwards (rule R9: every call
/// answers with the updated consents).
public struct CommandResult: Hashable, Sendable {
    public let subjectID: String
    /// The events appended; empty when the command changed nothing.
    public let events: [LedgerEvent]
    public let notes: [String]
    public let listing: ConsentListing
}

/// The outcome of `Ledger.execute(_:)`.
public struct ExecutionReport: Hashable, Sendable {
    public let results: [CommandResult]
    /// A torn tail that a crash had left and this write removed (its bytes are kept aside).
    public let recovered: TornTail?
    /// Set when the events are durably in the log but the derived data or the head could not
    /// be written after them; the next read or write repairs both. The command succeeded.
    public var warning: String? = nil
}

/// One subject's events and state, read from the log.
public struct SubjectReport: Hashable, Sendable {
    public let subjectID: String
    public let subject: SubjectRef?
    public let state: SubjectState
    /// The subject's events up to the requested time, in log order.
    public let events: [LedgerEvent]
    public let listing: ConsentListing
    /// A torn tail left by a crash, ignored by this read; the next write removes it.
    public let torn: TornTail?
}

/// A clock, so the domain needs none and tests can fix time.
public typealias LedgerClock = @Sendable () -> Timestamp

/// A source of random bytes (subject salts); injectable so test vectors are reproducible.
public typealias RandomSource = @Sendable (Int) -> [UInt8]

/// libsodium's `randombytes_buf`.
public let systemRandom: RandomSource = { Sodium().randomBytes($0) }

/// The system's UTC clock, in milliseconds.
public let systemClock: LedgerClock = {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Timestamp(millisecondsSinceEpoch: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
}

/// A consent ledger: the rules, the chain, a storage and a signing key put together.
///
/// State is always what replaying the log gives. A ledger opened for many commands keeps a
/// replay in memory (``loadAll()``) and checks before each write that the log has not moved
/// on; otherwise it replays just the subjects a command touches.
public final class Ledger: Sendable {
    public let store: any LedgerStore
    /// Where the signing key is; only writes load it. Nil when neither the caller nor the
    /// store names one: the ledger can be read and verified, not written.
    public let keys: (any KeyStore)?
    /// Gives the passphrase of an encrypted key, asked for the first time a write needs the key.
    let passphrase: PassphraseSource?
    public let catalog: Catalog
    public let catalogBytes: [UInt8]
    public let genesis: LedgerCreated
    /// When the ledger was created (the genesis event's time).
    public let genesisTime: Timestamp
    /// The ledger format version of its events (the genesis event's `v`): 2 for ledgers created
    /// now, 1 for older ones, whose events carry no stream links.
    public let version: Int64
    /// The genesis key: the key the genesis event pins, which signs everything up to the first
    /// key rotation (``keyHistory()`` gives every key).
    public let publicKey: PublicKey
    public let keyID: String
    public let chain: HashChain
    public let verifier: any SignatureVerifier
    let clock: LedgerClock
    let random: RandomSource
    let memory: Mutex<Memory>
    /// Tree hashes this process authenticated, for later proofs and reads.
    let treeHashCache = TreeHashCache()
    let lastWarning = Mutex<String?>(nil)
    /// Concurrent ``execute(_:)`` calls of this process share commits.
    let groupCommit = GroupCommit()
    let lastRecordedCheckpoint = Mutex<Int64?>(nil)
    private let clockSkewMilliseconds = Mutex<Int64>(Ledger.defaultMaximumClockSkew.milliseconds)

    /// How far the ledger's time may be ahead of this writer's clock (Spec/ledger-format.md,
    /// Clock corrections): a write whose clock is further behind the ledger's newest event
    /// refuses (`ConsentError.clockAhead`) rather than carry a wrong time forward.
    /// Default five minutes.
    public var maximumClockSkew: Duration {
        get { .milliseconds(clockSkewMilliseconds.withLock { $0 }) }
        set { clockSkewMilliseconds.withLock { $0 = max(0, newValue.milliseconds) } }
    }

    public static let defaultMaximumClockSkew: Duration = .seconds(300)

    struct Memory: Sendable {
        /// The last signed head this process checked or signed, with the frontier at its size:
        /// a writer that finds the same head again skips checking its signature and reading the
        /// frontier back (both were computed here, from signed data).
        var trustedHead: (note: String, frontier: MerkleFrontier)?
        /// The last signed head whose signature this process checked, with the key it checked it
        /// with: a reader that finds the same note, under the same key, need not check it again
        /// (a signature check is the largest part of a read that finds its pages cached).
        var checkedHead: (note: String, key: PublicKey)?
        /// Salts of records this process checked (or wrote).
        var salts: [SubjectID: [UInt8]]?
        /// Every subject record as last read from the store, not yet checked: a write checks a
        /// record when it first uses it, without reading the whole file each time.
        var records: [SubjectID: SubjectRecord]?
        /// How many of the records this process's writes looked up one by one were not found
        /// (``recordsLookedUpAlone``).
        var recordMisses = 0
        var signer: (any EventSigner)?
        /// A full replay with the log size it reached, when loaded.
        var replay: LedgerReplay?
        var size: Int?
        var head: ChainHead?
        /// The streams as this process last committed them (the subject map with its node
        /// cache, and the newest event of each stream it wrote), with the index of the map's
        /// next record: reused while the stored map is still the one committed here.
        var streams: (state: StreamState, nextIndex: Int64)?
        /// The key schedule learned from the log's first `through` records (``keySchedule(_:map:size:)``).
        var keys: (schedule: KeySchedule, through: Int)?
        /// The catalogue versions and clock corrections read from the ledger stream, with the
        /// stream's newest event
        /// (as the subject map, checked against the root the log's last event signs, names it):
        /// reused while that event is still the newest.
        /// With the ledger stream's newest event and the log size they were found at.
        var ledgerTimeline: (newest: UInt64, timeline: LedgerTimeline, through: Int)?
    }

    private init(store: any LedgerStore, keys: (any KeyStore)?, passphrase: PassphraseSource?, catalog: Catalog, catalogBytes: [UInt8], genesis: LedgerCreated, genesisTime: Timestamp, version: Int64, publicKey: PublicKey, chain: HashChain, verifier: any SignatureVerifier, clock: @escaping LedgerClock, random: @escaping RandomSource, signer: (any EventSigner)?) {
        self.store = store
        self.keys = keys
        self.passphrase = passphrase
        self.version = version
        self.catalog = catalog
        self.catalogBytes = catalogBytes
        self.genesis = genesis
        self.genesisTime = genesisTime
        self.publicKey = publicKey
        self.keyID = chain.keyID(of: publicKey)
        self.chain = chain
        self.verifier = verifier
        self.clock = clock
        self.random = random
        self.memory = Mutex(Memory(signer: signer))
    }

    // MARK: - Creating and opening

    /// Creates a ledger: a fresh key pair unless `signer` is given, the catalogue, and the genesis
    /// event that pins both. The key goes to `keys` (by default the storage's own place for it),
    /// sealed as `keyProtection` says, after the ledger exists, so a key is never written over
    /// another ledger's. The new ledger is unlocked: it keeps the signer for its writes.
    public static func create(
        store: any LedgerStore,
        keys: (any KeyStore)? = nil,
        catalog: Catalog,
        name: String,
        keyProtection: KeyProtection,
        actor: String = "consentctl",
        signer: SodiumSigner = .generate(),
        clock: @escaping LedgerClock = systemClock,
        random: @escaping RandomSource = systemRandom
    ) throws -> Ledger {
        try validateText(name, what: "ledger name", maxBytes: 256)
        if let problem = catalog.problemAsNewVersion() { throw ConsentError.invalidCatalog(CatalogError(entry: "catalogue", problem: problem)) }
        do {
            try NoteVerifierKey.checkName(name)
            if name == ExportStatement.magic { throw NoteError("'\(name)' is reserved") }
        } catch {
            throw ConsentError.invalidRequest("ledger name: \(error) (it names the checkpoint signing key)")
        }
        try validateText(actor, what: "actor", maxBytes: 128)
        let chain = HashChain()
        let catalogBytes = CatalogCodec.canonicalBytes(catalog)
        let created = LedgerCreated(ledgerName: name, catalogHash: chain.hasher.sha256(catalogBytes).hex, publicKey: signer.publicKey.hex)
        let event = LedgerEvent(seq: 0, at: clock(), actor: actor, command: CommandSpan(first: 0, size: 1), payload: .ledgerCreated(created))
        var streams: StreamState? = StreamState(newest: [:], map: SubjectMap(hasher: chain.hasher))
        let (records, head) = try chain.seal([event], after: .zero, signer: signer, streams: &streams)
        let key: NoteVerifierKey
        do {
            key = try NoteVerifierKey(name: name, publicKey: signer.publicKey, hasher: chain.hasher)
        } catch {
            throw ConsentError.invalidRequest("ledger name: \(error)")
        }
        var frontier = MerkleFrontier()
        let hashes = frontier.append(MerkleTree.leafHash(records[0].lineWithoutNewline, hasher: chain.hasher), hasher: chain.hasher)
        let signedHead = SignedHead.sign(Checkpoint(origin: name, size: 1, root: frontier.root(hasher: chain.hasher)), chainHash: head, key: key, signer: signer)
        let derived = DerivedUpdate(indexFrom: 0, streamKeys: [SubjectMap.ledgerStream], treeFrom: 0, treeHashes: hashes, subjectMap: (streams!.map.takeNewRecords(firstIndex: 0, coveringSize: 1), 0))
        guard let keys = keys ?? store.keyStore else {
            throw ConsentError.invalidRequest("\(store.names.location) keeps no signing key: give the new ledger a key store of its own (a key file)")
        }
        // The passphrase is checked before the ledger is made, so a refused one leaves nothing.
        let keyFile = try SigningKeyFile.file(for: signer, protection: keyProtection, random: random)
        try store.create(LedgerSetup(catalog: catalogBytes, publicKey: signer.publicKey, genesis: records[0], derived: derived, head: signedHead))
        try keys.saveKeyFile(keyFile)
        return Ledger(store: store, keys: keys, passphrase: nil, catalog: catalog, catalogBytes: catalogBytes, genesis: created, genesisTime: event.at, version: records[0].version, publicKey: signer.publicKey, chain: chain, verifier: Sodium(), clock: clock, random: random, signer: signer)
    }

    /// Opens a ledger. Checks that the genesis event is signed by the stored public key and pins
    /// the stored catalogue; anything else is an integrity failure. `passphrase` is asked for the
    /// key's passphrase the first time a write needs an encrypted key (``unlock()`` asks at once);
    /// reads never ask.
    public static func open(store: any LedgerStore, keys: (any KeyStore)? = nil, passphrase: PassphraseSource? = nil, clock: @escaping LedgerClock = systemClock, random: @escaping RandomSource = systemRandom) throws -> Ledger {
        try open(store: store, keys: keys ?? store.keyStore, passphrase: passphrase, signer: nil, clock: clock, random: random)
    }

    /// Opens a ledger that signs with `signer`, a signer of your own: one whose secret key never
    /// enters this process, such as an HSM or a cloud KMS behind `EventSigner` (which signs a
    /// message with Ed25519 and names its public key). No key store is read. The signer's public
    /// key must be the ledger's.
    public static func open(store: any LedgerStore, signer: any EventSigner, clock: @escaping LedgerClock = systemClock, random: @escaping RandomSource = systemRandom) throws -> Ledger {
        try open(store: store, keys: nil, passphrase: nil, signer: signer, clock: clock, random: random)
    }

    private static func open(store: any LedgerStore, keys: (any KeyStore)?, passphrase: PassphraseSource?, signer: (any EventSigner)?, clock: @escaping LedgerClock, random: @escaping RandomSource) throws -> Ledger {
        let chain = HashChain()
        let verifier = Sodium()
        let (catalogBytes, publicKey, firstLine) = try store.read { tx in
            let (catalog, key) = try tx.metadata()
            return (catalog, key, try tx.entry(0))
        }
        let record: EventRecord
        do {
            record = try EventCodec.decode(line: firstLine)
        } catch {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: 1, seq: 0, problem: "genesis event is malformed: \(error.problem)"))
        }
        func fail(_ problem: String) -> ConsentError {
            .integrity(IntegrityFailure(.ledgerFiles, line: 1, seq: 0, problem: problem))
        }
        guard case .ledgerCreated(let created) = record.event.payload, record.event.seq == 0, record.prev == .zero else {
            throw fail("the first line is not a genesis event with seq 0 and a zero prev")
        }
        guard created.publicKey == publicKey.hex, record.keyID == chain.keyID(of: publicKey) else {
            throw fail("the genesis event pins public key \(created.publicKey), but the ledger's public key is \(publicKey.hex)")
        }
        let valid = EventCodec.signedMessage(body: record.body).withUnsafeBytes { verifier.isValid(record.signature, of: $0, by: publicKey) }
        guard valid else { throw fail("the genesis event's signature does not verify with the ledger's public key") }
        guard chain.hasher.sha256(catalogBytes).hex == created.catalogHash else {
            throw fail("the stored catalogue's SHA-256 differs from the hash pinned in the genesis event")
        }
        let catalog: Catalog
        do {
            guard (try? CanonicalJSON.parse(catalogBytes, canonical: true)) != nil else {
                throw CatalogError(entry: "catalog.json", problem: "the stored catalogue is not canonical JSON")
            }
            catalog = try CatalogCodec.decode(catalogBytes)
        } catch {
            throw fail("stored catalogue: \(error)")
        }
        let ledger = Ledger(store: store, keys: keys, passphrase: passphrase, catalog: catalog, catalogBytes: catalogBytes, genesis: created, genesisTime: record.event.at, version: record.version, publicKey: publicKey, chain: chain, verifier: verifier, clock: clock, random: random, signer: signer)
        if let signer {
            let inForce = try ledger.keyHistory().current.key
            guard signer.publicKey == inForce else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the signer's public key \(signer.publicKey.hex) is not the ledger's key in force, \(inForce.hex)"))
            }
        }
        return ledger
    }

    // MARK: - Subjects

    static func validateText(_ text: String, what: String, maxBytes: Int) throws {
        guard !text.isEmpty else { throw ConsentError.invalidRequest("\(what) must not be empty") }
        guard text.utf8.count <= maxBytes else { throw ConsentError.invalidRequest("\(what) is longer than \(maxBytes) bytes") }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw ConsentError.invalidRequest("\(what) must not contain control characters")
        }
        guard text.utf8.first != 0x20, text.utf8.last != 0x20 else { throw ConsentError.invalidRequest("\(what) must not start or end with spaces") }
    }

    /// The pseudonym of a subject id under a salt of `Pseudonym.saltLength` bytes.
    public func subjectRef(id: String, salt: [UInt8]) -> SubjectRef {
        guard let ref = Pseudonym.ref(id: Array(id.utf8), salt: salt, hasher: chain.hasher) else {
            preconditionFailure("salts are \(Pseudonym.saltLength) bytes; stores refuse any other length")
        }
        return ref
    }

    /// The key that seals personal data in the events of the subject whose record holds
    /// `subjectID` and `salt` (``SubjectKey``): it goes with the record, so an erasure takes it.
    package func subjectKey(_ subjectID: String, salt: [UInt8]) -> SubjectKey {
        SubjectKey(id: SubjectID(subjectID), salt: salt, hasher: chain.hasher)
    }

    /// `evidence` of the grant at `seq` with its sealed reference opened. A reference that does
    /// not open under the key of the subject's (checked) record is an integrity failure: the
    /// ledger sealed it under that key.
    package func openEvidence(_ evidence: GrantEvidence, seq: UInt64, key: SubjectKey) throws(ConsentError) -> GrantEvidence {
        do {
            return try EvidenceSeal.opening(evidence, key: key)
        } catch {
            throw .integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "\(error.problem) (the key of the subject's record in \(store.names.subjects)): the event or the record is not what the ledger wrote"))
        }
    }

    /// Opens the sealed evidence of every consent `state` holds as given.
    package func openEvidence(_ state: inout SubjectState, key: SubjectKey) throws(ConsentError) {
        try state.mapEvidence { (evidence, seq) throws(ConsentError) in try openEvidence(evidence, seq: seq, key: key) }
    }

    /// The known subject's reference, or nil for a subject the ledger has never seen.
    public func subjectRef(for subjectID: String) throws -> SubjectRef? {
        try salt(of: subjectID).map { subjectRef(id: subjectID, salt: $0) }
    }

    /// One subject's salt: remembered, or read alone from the store (not every record) and
    /// checked (``checkRecord(_:_:)``).
    func salt(of subjectID: String, in tx: (any LedgerReadTransaction)? = nil) throws -> [UInt8]? {
        let id = SubjectID(subjectID)
        if let cached = memory.withLock({ $0.salts?[id] }) { return cached }
        // Within a caller's transaction, its view of the records; otherwise a read of its own.
        guard let record = try tx.map({ try $0.subjectRecord(id) }) ?? store.read({ tx in try tx.subjectRecord(id) }) else { return nil }
        let learned = memory.withLock { $0.keys?.schedule }
        do {
            try checkRecord(id, record, keys: try learned ?? keyHistory())
        } catch where learned != nil {
            // Signed, perhaps, by a key this process has not learned of yet: ask the log.
            try checkRecord(id, record, keys: try keyHistory())
        }
        return record.salt
    }

    /// A subject record may be used only if its salt has `Pseudonym.saltLength` bytes and, in
    /// a format-2 ledger, the ledger's key signed it: with a salt swapped between two records, or
    /// a record altered or made up, a read would find none of the patient's events and answer
    /// "no consents", and a write would file the patient's choices under another pseudonym.
    /// Any key of `keys` may have signed it: a record keeps the signature of the key in force
    /// when it was written.
    func checkRecord(_ id: SubjectID, _ record: SubjectRecord, keys: KeySchedule) throws {
        let place = "\(store.names.subjects) of \(store.names.location)"
        guard record.salt.count == Pseudonym.saltLength else {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject record of \(id.text.debugDescription) in \(place) has a salt of \(record.salt.count) bytes, not \(Pseudonym.saltLength)"))
        }
        guard version >= 2 else { return }
        let signedBy = record.signature.flatMap { signature in
            Pseudonym.recordMessage(id: id, salt: record.salt).withUnsafeBytes { message in
                keys.periods.reversed().first { verifier.isValid(signature, of: message, by: $0.key) }
            }
        }
        guard let signedBy else {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject record of \(id.text.debugDescription) in \(place) does not carry the ledger key's signature over its id and salt: it was altered, swapped or made up"))
        }
        // A revoked key's signature vouches for no record: its revocation signed again, with the
        // key in force, every record it could vouch for.
        if let revocation = keys.revocations.first(where: { $0.keyID == signedBy.keyID }) {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject record of \(id.text.debugDescription) in \(place) is signed only by key \(signedBy.keyID), which the ledger revoked at seq \(revocation.seq): the revocation signed every record it could vouch for again, so this one was written or changed with the leaked key"))
        }
    }

    /// Checks each record (``checkRecord(_:_:keys:)``), on all cores from `minimumForParallel`
    /// records on, and throws the failure of the first that fails, in the order given.
    func checkRecords(_ records: [(id: SubjectID, record: SubjectRecord)], keys: KeySchedule, minimumForParallel: Int = 64) throws {
        let failures = parallelMap(records.count, minimumForParallel: minimumForParallel) { [self] i -> ConsentError? in
            do {
                try checkRecord(records[i].id, records[i].record, keys: keys)
                return nil
            } catch let error as ConsentError {
                return error
            } catch {
                return .storage("\(error)")
            }
        }
        if let failure = failures.compactMap({ $0 }).first { throw failure }
    }

    /// Every subject record of the store, each checked (``checkRecord(_:_:)``), on all cores; the
    /// failure reported is that of the first failing id in byte order.
    package func subjectSalts(_ tx: any LedgerReadTransaction, keys: KeySchedule) throws -> [SubjectID: [UInt8]] {
        let records = try tx.subjectRecords().sorted { $0.key < $1.key }
        try checkRecords(records.map { ($0.key, $0.value) }, keys: keys)
        return Dictionary(uniqueKeysWithValues: records.map { ($0.key, $0.value.salt) })
    }

    /// Records an issued checkpoint in the store, once per tree size, before it is handed out:
    /// `verify` holds the log to every checkpoint it issued, so that one handed out and then
    /// cut from the log is found. A checkpoint that cannot be recorded (a full disk, a
    /// read-only copy) is therefore not handed out: the failure is the caller's error. One
    /// already recorded needs no write.
    func recordIssued(_ checkpoint: IssuedCheckpoint) throws {
        guard lastRecordedCheckpoint.withLock({ $0 }) != checkpoint.size else { return }
        do {
            // Already the newest record (handed out before, by any process): nothing to write,
            // and no write lock to take, so that a read-only copy hands it out again.
            let newest = try store.read { tx in try tx.newestCheckpoint() }
            if newest?.size != checkpoint.size || newest?.note != checkpoint.note {
                try store.write { tx in try tx.recordCheckpoint(checkpoint) }
            }
        } catch ConsentError.storage(let why) {
            throw ConsentError.storage("the checkpoint of size \(checkpoint.size) was not handed out: recording it in \(store.names.checkpoints) of \(store.names.location) failed (\(why))")
        }
        lastRecordedCheckpoint.withLock { $0 = checkpoint.size }
    }

    func memory(streams: (state: StreamState, nextIndex: Int64)?) {
        memory.withLock { $0.streams = streams }
    }

    /// The streams this process last committed, if the stored map is still theirs: taken out of
    /// memory (writes run one at a time), so that the write that adds to them changes them in
    /// place. Left in memory, every command would copy the newest event of every stream met so
    /// far. The commit puts them back (``memory(streams:)``); a write that fails leaves none.
    func takeRememberedStreams(nextIndex: Int64, root: Digest) -> StreamState? {
        memory.withLock { m in
            guard let streams = m.streams, streams.nextIndex == nextIndex, streams.state.map.rootHash == root else { return nil }
            m.streams = nil
            return streams.state
        }
    }

    /// The frontier at the signed head's size, if this process computed it for that very head.
    func rememberedFrontier(for head: SignedHead) -> MerkleFrontier? {
        memory.withLock { m in
            guard let trusted = m.trustedHead, trusted.note == head.note, trusted.frontier.size == head.checkpoint.size else { return nil }
            return trusted.frontier
        }
    }

    /// Remembers a head this process signed, with its frontier (call once the store committed).
    func remember(_ head: SignedHead, frontier: MerkleFrontier) {
        memory.withLock { $0.trustedHead = (head.note, frontier) }
    }

    /// Applies appended events to the in-memory replay, if there is one and it had reached `from`.
    /// The key schedule learned through `from` holds through `size` too when none of the events
    /// changes a key, and the catalogue versions when none is the ledger's own: the next write
    /// need not look for either in the subject map again.
    func advanceMemory(from: Int, to size: Int, events: [LedgerEvent], head: ChainHead) {
        let changesKeys = events.contains {
            switch $0.payload {
            case .keyRotated, .keyRevoked: true
            default: false
            }
        }
        let inLedgerStream = events.contains { $0.payload.subject == nil }
        memory.withLock { memory in
            if !changesKeys, let keys = memory.keys, keys.through >= from { memory.keys = (keys.schedule, max(keys.through, size)) }
            if !inLedgerStream, let timeline = memory.ledgerTimeline, timeline.through == from { memory.ledgerTimeline!.through = size }
            if memory.replay != nil, memory.size == from {
                for event in events { try? memory.replay!.apply(event) }
                memory.size = size
                memory.head = head
            }
        }
    }

    /// The recorded head must be on the log: the log may run ahead of it (a crash between the
    /// log's sync and the head's), never behind.
    func checkHead(_ log: LogState, keys: KeySchedule) throws {
        let head = log.recordedHead
        try checkSignedHead(log, keys: keys)
        if log.last.event.seq < head.seq {
            throw ConsentError.integrity(IntegrityFailure(.head, line: Int(log.last.event.seq) + 2, seq: log.last.event.seq + 1, problem: "the log ends at seq \(log.last.event.seq) but seq \(head.seq) was acknowledged: acknowledged events are missing (truncated log)"))
        }
        if log.last.event.seq == head.seq, chain.hash(ofBody: log.last.body) != head.hash {
            throw ConsentError.integrity(IntegrityFailure(.head, line: Int(head.seq) + 1, seq: head.seq, problem: "the newest event's hash differs from the recorded head \(head.hash.hex)"))
        }
    }

    /// A signed head must carry the signature of the key in force at its size and name the ledger.
    func checkSignedHead(_ log: LogState, keys: KeySchedule) throws {
        if let signed = log.signedHead, memory.withLock({ $0.trustedHead?.note }) != signed.note {
            let inForce = keys.forCheckpoint(size: signed.checkpoint.size)
            if memory.withLock({ $0.checkedHead.map { $0.note == signed.note && $0.key == inForce.key } ?? false }) { return }
            do {
                try signed.verify(key: try noteKey(inForce.key), verifier: verifier)
            } catch {
                // The key rotations are found through the subject map: one that hides a rotation
                // makes a genuine head fail here.
                let hint = version >= 2 ? " (if the head is genuine, the derived data hides a key rotation: \(store.names.derivedRepair))" : ""
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed head of \(store.names.location) does not verify with the ledger's key in force at size \(signed.checkpoint.size), \(inForce.keyID): \(error)\(hint)"))
            }
            guard signed.checkpoint.origin == genesis.ledgerName else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed head of \(store.names.location) is for '\(signed.checkpoint.origin)', not '\(genesis.ledgerName)'"))
            }
            memory.withLock { $0.checkedHead = (signed.note, inForce.key) }
        }
    }

}

extension Duration {
    /// Whole milliseconds, rounded down; saturating at Int64's bounds (a skew of "for ever").
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflowed) = ms.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return overflowed ? .max : sum
    }
}
