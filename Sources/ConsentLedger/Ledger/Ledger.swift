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

    public init(subjectID: String, request: ConsentRequest, actor: String = "self") {
        self.subjectID = subjectID
        self.request = request
        self.actor = actor
    }

    /// Checks a subject id and an actor as ``Ledger/execute(_:)`` does, so that a batch can be
    /// checked whole before any of it is appended. Throws ``ConsentError/invalidRequest(_:)``.
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

/// The outcome of ``Ledger/execute(_:)``.
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
    /// Where the signing key is; only writes load it.
    public let keys: any KeyStore
    public let catalog: Catalog
    public let catalogBytes: [UInt8]
    public let genesis: LedgerCreated
    /// When the ledger was created (the genesis event's time).
    public let genesisTime: Timestamp
    /// The ledger format version of its events (the genesis event's `v`): 2 for ledgers created
    /// now, 1 for older ones, whose events carry no stream links.
    public let version: Int64
    public let publicKey: PublicKey
    public let keyID: String
    public let chain: HashChain
    public let verifier: any SignatureVerifier
    let clock: LedgerClock
    let random: RandomSource
    private let memory: Mutex<Memory>
    let lastWarning = Mutex<String?>(nil)
    private let lastRecordedCheckpoint = Mutex<Int64?>(nil)

    private struct Memory: Sendable {
        /// The last signed head this process checked or signed, with the frontier at its size:
        /// a writer that finds the same head again skips checking its signature and reading the
        /// frontier back (both were computed here, from signed data).
        var trustedHead: (note: String, frontier: MerkleFrontier)?
        /// Salts of records this process checked (or wrote).
        var salts: [SubjectID: [UInt8]]?
        /// Every subject record as last read from the store, not yet checked: a write checks a
        /// record when it first uses it, without reading the whole file each time.
        var records: [SubjectID: SubjectRecord]?
        var signer: SodiumSigner?
        /// A full replay with the log size it reached, when loaded.
        var replay: LedgerReplay?
        var size: Int?
        var head: ChainHead?
        /// The streams as this process last committed them (the subject map with its node
        /// cache, and the newest event of each stream it wrote), with the index of the map's
        /// next record: reused while the stored map is still the one committed here.
        var streams: (state: StreamState, nextIndex: Int64)?
    }

    private init(store: any LedgerStore, keys: any KeyStore, catalog: Catalog, catalogBytes: [UInt8], genesis: LedgerCreated, genesisTime: Timestamp, version: Int64, publicKey: PublicKey, chain: HashChain, verifier: any SignatureVerifier, clock: @escaping LedgerClock, random: @escaping RandomSource, signer: SodiumSigner?) {
        self.store = store
        self.keys = keys
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
    /// after the ledger exists, so a key is never written over another ledger's.
    public static func create(
        store: any LedgerStore,
        keys: (any KeyStore)? = nil,
        catalog: Catalog,
        name: String,
        actor: String = "consentctl",
        signer: SodiumSigner = .generate(),
        clock: @escaping LedgerClock = systemClock,
        random: @escaping RandomSource = systemRandom
    ) throws -> Ledger {
        try validateText(name, what: "ledger name", maxBytes: 256)
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
        try store.create(LedgerSetup(catalog: catalogBytes, publicKey: signer.publicKey, genesis: records[0], derived: derived, head: signedHead))
        let keys = keys ?? store.keyStore
        try keys.saveSeed(signer.seed)
        return Ledger(store: store, keys: keys, catalog: catalog, catalogBytes: catalogBytes, genesis: created, genesisTime: event.at, version: records[0].version, publicKey: signer.publicKey, chain: chain, verifier: Sodium(), clock: clock, random: random, signer: signer)
    }

    /// Opens a ledger. Checks that the genesis event is signed by the stored public key and pins
    /// the stored catalogue; anything else is an integrity failure.
    public static func open(store: any LedgerStore, keys: (any KeyStore)? = nil, clock: @escaping LedgerClock = systemClock, random: @escaping RandomSource = systemRandom) throws -> Ledger {
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
        return Ledger(store: store, keys: keys ?? store.keyStore, catalog: catalog, catalogBytes: catalogBytes, genesis: created, genesisTime: record.event.at, version: record.version, publicKey: publicKey, chain: chain, verifier: verifier, clock: clock, random: random, signer: nil)
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

    /// The pseudonym of a subject id under a salt of ``Pseudonym/saltLength`` bytes.
    public func subjectRef(id: String, salt: [UInt8]) -> SubjectRef {
        guard let ref = Pseudonym.ref(id: Array(id.utf8), salt: salt, hasher: chain.hasher) else {
            preconditionFailure("salts are \(Pseudonym.saltLength) bytes; stores refuse any other length")
        }
        return ref
    }

    /// The known subject's reference, or nil for a subject the ledger has never seen.
    public func subjectRef(for subjectID: String) throws -> SubjectRef? {
        try salt(of: subjectID).map { subjectRef(id: subjectID, salt: $0) }
    }

    /// One subject's salt: remembered, or read alone from the store (not every record) and
    /// checked (``checkRecord(_:_:)``).
    func salt(of subjectID: String) throws -> [UInt8]? {
        let id = SubjectID(subjectID)
        if let cached = memory.withLock({ $0.salts?[id] }) { return cached }
        guard let record = try store.read({ tx in try tx.subjectRecord(id) }) else { return nil }
        try checkRecord(id, record)
        return record.salt
    }

    /// A subject record may be used only if its salt has ``Pseudonym/saltLength`` bytes and, in
    /// a format-2 ledger, the ledger's key signed it: with a salt swapped between two records, or
    /// a record altered or made up, a read would find none of the patient's events and answer
    /// "no consents", and a write would file the patient's choices under another pseudonym.
    func checkRecord(_ id: SubjectID, _ record: SubjectRecord) throws {
        let place = "\(store.names.subjects) of \(store.names.location)"
        guard record.salt.count == Pseudonym.saltLength else {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject record of \(id.text.debugDescription) in \(place) has a salt of \(record.salt.count) bytes, not \(Pseudonym.saltLength)"))
        }
        guard version >= 2 else { return }
        let valid = record.signature.map { signature in
            Pseudonym.recordMessage(id: id, salt: record.salt).withUnsafeBytes { verifier.isValid(signature, of: $0, by: publicKey) }
        } ?? false
        guard valid else {
            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject record of \(id.text.debugDescription) in \(place) does not carry the ledger key's signature over its id and salt: it was altered, swapped or made up"))
        }
    }

    /// Every subject record of the store, each checked (``checkRecord(_:_:)``), on all cores; the
    /// failure reported is that of the first failing id in byte order.
    package func subjectSalts(_ tx: any LedgerReadTransaction) throws -> [SubjectID: [UInt8]] {
        let records = try tx.subjectRecords().sorted { $0.key < $1.key }
        let failures = parallelMap(records.count) { [self] i -> ConsentError? in
            do {
                try checkRecord(records[i].key, records[i].value)
                return nil
            } catch let error as ConsentError {
                return error
            } catch {
                return .storage("\(error)")
            }
        }
        if let failure = failures.compactMap({ $0 }).first { throw failure }
        return Dictionary(uniqueKeysWithValues: records.map { ($0.key, $0.value.salt) })
    }

    // MARK: - Writing

    /// Accepts commands, appends their events atomically and durably, and answers with each
    /// subject's updated consents. The commands are checked in order against the state the
    /// earlier ones leave; if any is refused, nothing is appended. All events go to the store in
    /// one write and one sync.
    @discardableResult
    public func execute(_ commands: [LedgerCommand]) throws -> ExecutionReport {
        for command in commands {
            try LedgerCommand.validate(subjectID: command.subjectID, actor: command.actor)
        }
        let signer = try signingKey()
        return try writing { tx, view, afterCommit in
            let log = view.log
            // Subject references; a new subject gets a salt that is saved only if it gets events.
            // Remembered salts were checked; a record read now is checked before it is used.
            var salts = memory.withLock { $0.salts } ?? [:]
            var records = memory.withLock { $0.records }
            let unchecked = Set(commands.map { SubjectID($0.subjectID) }).filter { salts[$0] == nil }
            if !unchecked.isEmpty {
                // The file is read again only for an id the last reading did not have (a new
                // subject, or one another writer added).
                if records == nil || unchecked.contains(where: { records?[$0] == nil }) { records = try tx.subjectRecords() }
                for id in unchecked {
                    guard let record = records?[id] else { continue }
                    try checkRecord(id, record)
                    salts[id] = record.salt
                }
            }
            var newSalts: [SubjectID: [UInt8]] = [:]
            var refs: [SubjectID: SubjectRef] = [:]
            for command in commands where refs[SubjectID(command.subjectID)] == nil {
                let id = SubjectID(command.subjectID)
                if salts[id] == nil {
                    let salt = random(Pseudonym.saltLength)
                    salts[id] = salt
                    newSalts[id] = salt
                }
                refs[id] = subjectRef(id: command.subjectID, salt: salts[id]!)
            }
            let versions = try catalogVersions(view)
            let catalog = versions.last!.catalog
            var states = try currentStates(of: Set(refs.values), view, versions: versions)
            let streams = try streamState(for: Set(refs.values.map { StreamKey.of(subject: $0) }), view)
            let at = max(clock(), log.last.event.at)
            var nextSeq = log.last.event.seq + 1
            var results: [CommandResult] = []
            var events: [LedgerEvent] = []
            for command in commands {
                let ref = refs[SubjectID(command.subjectID)]!
                var state = states[ref] ?? SubjectState()
                let outcome: CommandOutcome
                do throws(CommandRejection) {
                    outcome = try ConsentRules.decide(command.request, subject: ref, state: state, catalog: catalog, actor: command.actor, at: at, nextSeq: nextSeq)
                } catch {
                    throw ConsentError(error)
                }
                for event in outcome.events {
                    do {
                        try state.apply(event, catalog: catalog)
                    } catch {
                        throw ConsentError.integrity(IntegrityFailure(line: nil, seq: nil, problem: "internal check failed: the events decided break a rule on replay: \(error)"))
                    }
                }
                states[ref] = state
                nextSeq += UInt64(outcome.events.count)
                events += outcome.events
                results.append(CommandResult(subjectID: command.subjectID, events: outcome.events, notes: outcome.notes, listing: ConsentListing(state: state, catalog: catalog)))
            }
            guard !events.isEmpty else { return ExecutionReport(results: results, recovered: nil) }
            let withEvents = Set(results.filter { !$0.events.isEmpty }.map { SubjectID($0.subjectID) })
            // A format-2 ledger signs each record (on all cores), so reads can tell it from an
            // altered one.
            let saved = newSalts.filter { withEvents.contains($0.key) }.sorted { $0.key < $1.key }
            let signed = version >= 2
            let newRecords = parallelMap(saved.count) { i -> (subjectID: SubjectID, record: SubjectRecord) in
                let (id, salt) = saved[i]
                let signature = signed ? Pseudonym.recordMessage(id: id, salt: salt).withUnsafeBytes { signer.sign($0) } : nil
                return (id, SubjectRecord(salt: salt, signature: signature))
            }
            if records != nil { for new in newRecords { records![new.subjectID] = new.record } }
            let committed = try commit(events, view, tx, signer: signer, streams: streams, subjects: newRecords)
            let (size, head, warning) = (committed.size, committed.head, committed.warning)
            // Cache only salts that are on disk: a new subject whose command appended nothing
            // gets a fresh salt next time, saved with its first events.
            // Remembered only once the store has committed (see ``writing(_:)``).
            let persisted = salts.filter { newSalts[$0.key] == nil || withEvents.contains($0.key) }
            afterCommit.append { [self] in
                if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
                memory.withLock { $0.salts = persisted; $0.records = records; $0.streams = committed.streams }
                advanceMemory(from: log.size, to: size, events: events, head: head)
            }
            return ExecutionReport(results: results, recovered: log.torn, warning: warning)
        }
    }

    /// Convenience for one command.
    @discardableResult
    public func execute(_ command: LedgerCommand) throws -> (result: CommandResult, recovered: TornTail?) {
        let report = try execute([command])
        if let warning = report.warning { lastWarning.withLock { $0 = warning } }
        return (report.results[0], report.recovered)
    }

    /// The warning of the last single command whose events were committed but whose derived
    /// data or head could not be written (see ``ExecutionReport/warning``); read and cleared.
    public func takeWarning() -> String? {
        lastWarning.withLock { w in
            defer { w = nil }
            return w
        }
    }

    /// Runs a write in the storage's write transaction, with the view of the log in it. The body
    /// does not touch what the ledger remembers about the log (replay, size, salts): it lists
    /// those updates in `afterCommit`, and they are applied only once the storage has
    /// committed, so that no other writer of this process ever sees state a PostgreSQL
    /// transaction rolled back. When the write fails, everything remembered is dropped and read
    /// again next time.
    func writing<T>(_ body: (any LedgerWriteTransaction, LogView, _ afterCommit: inout [() -> Void]) throws -> T) throws -> T {
        var afterCommit: [() -> Void] = []
        let result: T
        do {
            result = try store.write { tx in try body(tx, try view(tx), &afterCommit) }
        } catch {
            memory.withLock { m in
                m.trustedHead = nil
                m.salts = nil
                m.records = nil
                m.replay = nil
                m.size = nil
                m.head = nil
                m.streams = nil
            }
            throw error
        }
        for update in afterCommit { update() }
        return result
    }

    /// Records an issued checkpoint in the store, once per tree size. A checkpoint that cannot
    /// be recorded (a read-only copy of a ledger) is still valid: the failure is a warning.
    func recordIssued(_ checkpoint: IssuedCheckpoint) {
        guard lastRecordedCheckpoint.withLock({ $0 }) != checkpoint.size else { return }
        do {
            try store.write { tx in try tx.recordCheckpoint(checkpoint) }
            lastRecordedCheckpoint.withLock { $0 = checkpoint.size }
        } catch {
            lastWarning.withLock { $0 = "the checkpoint of size \(checkpoint.size) is valid, but recording it in the store failed: \(error)" }
        }
    }

    func memory(streams: (state: StreamState, nextIndex: Int64)?) {
        memory.withLock { $0.streams = streams }
    }

    /// The streams this process last committed, if the stored map is still theirs.
    func rememberedStreams(nextIndex: Int64, root: Digest) -> StreamState? {
        memory.withLock { m in
            guard let streams = m.streams, streams.nextIndex == nextIndex, streams.state.map.rootHash == root else { return nil }
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
    func advanceMemory(from: Int, to size: Int, events: [LedgerEvent], head: ChainHead) {
        memory.withLock { memory in
            if memory.replay != nil, memory.size == from {
                for event in events { try? memory.replay!.apply(event) }
                memory.size = size
                memory.head = head
            }
        }
    }

    func signingKey() throws -> SodiumSigner {
        if let signer = memory.withLock({ $0.signer }) { return signer }
        let seed = try keys.loadSeed()
        guard let signer = SodiumSigner(seed: seed), signer.publicKey == publicKey else {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the secret key does not belong to the ledger's public key"))
        }
        memory.withLock { $0.signer = signer }
        return signer
    }

    /// The recorded head must be on the log: the log may run ahead of it (a crash between the
    /// log's sync and the head's), never behind.
    func checkHead(_ log: LogState) throws {
        let head = log.recordedHead
        try checkSignedHead(log)
        if log.last.event.seq < head.seq {
            throw ConsentError.integrity(IntegrityFailure(.head, line: Int(log.last.event.seq) + 2, seq: log.last.event.seq + 1, problem: "the log ends at seq \(log.last.event.seq) but seq \(head.seq) was acknowledged: acknowledged events are missing (truncated log)"))
        }
        if log.last.event.seq == head.seq, chain.hash(ofBody: log.last.body) != head.hash {
            throw ConsentError.integrity(IntegrityFailure(.head, line: Int(head.seq) + 1, seq: head.seq, problem: "the newest event's hash differs from the recorded head \(head.hash.hex)"))
        }
    }

    /// A signed head must carry the ledger's signature and name the ledger.
    func checkSignedHead(_ log: LogState) throws {
        if let signed = log.signedHead, memory.withLock({ $0.trustedHead?.note }) != signed.note {
            do {
                try signed.verify(key: try verifierKey, verifier: verifier)
            } catch {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed head of \(store.names.location) does not verify with the ledger's key: \(error)"))
            }
            guard signed.checkpoint.origin == genesis.ledgerName else {
                throw ConsentError.integrity(IntegrityFailure(.head, line: nil, seq: nil, problem: "the signed head of \(store.names.location) is for '\(signed.checkpoint.origin)', not '\(genesis.ledgerName)'"))
            }
        }
    }

    /// States of some subjects at the end of the log: from the in-memory replay when it is
    /// current (catching up if the log moved on), otherwise by replaying those subjects' events.
    private func currentStates(of subjects: Set<SubjectRef>, _ view: LogView, versions: [CatalogVersion]) throws -> [SubjectRef: SubjectState] {
        let log = view.log
        let warm = memory.withLock { m -> (LedgerReplay, Int, Digest)? in
            guard let replay = m.replay, let size = m.size, let head = m.head else { return nil }
            return (replay, size, head.hash)
        }
        if var (replay, size, hash) = warm, size <= log.size {
            if size != log.size {
                hash = try replayLines(view.tx, from: size, to: log.size, into: &replay, after: hash)
                size = log.size
                let (r, c, h) = (replay, size, ChainHead(seq: log.last.event.seq, hash: hash))
                memory.withLock { $0.replay = r; $0.size = c; $0.head = h }
            }
            return Dictionary(uniqueKeysWithValues: subjects.map { ($0, replay.state(of: $0)) })
        }
        var states: [SubjectRef: SubjectState] = [:]
        for subject in subjects {
            states[subject] = try subjectEvents(subject, view, until: nil, versions: versions).state
        }
        return states
    }

    // MARK: - Reading

    /// One subject's consents and history, optionally as of a past time. Unknown subjects have
    /// no consents (rule R1). The subject's event signatures are checked; the whole chain is
    /// `verify`'s job.
    public func report(for subjectID: String, asOf: Timestamp? = nil) throws -> SubjectReport {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        return try reading { view in
            let log = view.log
            let versions = try catalogVersions(view)
            let catalog = Self.catalog(in: versions, at: asOf)
            guard let ref = try subjectRef(for: subjectID) else {
                let empty = SubjectState()
                return SubjectReport(subjectID: subjectID, subject: nil, state: empty, events: [], listing: ConsentListing(state: empty, catalog: catalog), torn: log.torn)
            }
            let (state, events) = try subjectEvents(ref, view, until: asOf, versions: versions)
            return SubjectReport(subjectID: subjectID, subject: ref, state: state, events: events, listing: ConsentListing(state: state, catalog: catalog), torn: log.torn)
        }
    }

    /// A subject's events (``streamEntries(_:log:)``), replayed under the catalogue in force
    /// before each.
    private func subjectEvents(_ subject: SubjectRef, _ view: LogView, until: Timestamp?, versions: [CatalogVersion]) throws -> (state: SubjectState, events: [LedgerEvent]) {
        var state = SubjectState()
        var events: [LedgerEvent] = []
        guard Hex.decode(subject.value)?.count == 16 else { return (state, events) }
        for entry in try streamEntries(StreamKey.of(subject: subject), view) {
            let record = entry.record
            if let until, record.event.at > until { break }
            if version < 2 { try checkSignature(record, line: entry.seq + 1) }
            do throws(ReplayViolation) {
                try state.apply(record.event, catalog: Self.catalog(in: versions, before: record.event.seq))
            } catch {
                throw ConsentError.integrity(IntegrityFailure(line: entry.seq + 1, seq: error.seq, problem: error.problem))
            }
            events.append(record.event)
        }
        return (state, events)
    }

    package func decode(_ line: [UInt8], number: Int) throws -> EventRecord {
        do {
            return try EventCodec.decode(line: line)
        } catch {
            throw ConsentError.integrity(IntegrityFailure(line: number, seq: nil, problem: error.problem))
        }
    }

    func checkSignature(_ record: EventRecord, line: Int) throws {
        guard record.keyID == keyID else {
            throw ConsentError.integrity(IntegrityFailure(line: line, seq: record.event.seq, problem: "signed with key id \(record.keyID), not the ledger's key \(keyID)"))
        }
        let valid = EventCodec.signedMessage(body: record.body).withUnsafeBytes { verifier.isValid(record.signature, of: $0, by: publicKey) }
        guard valid else {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: line, seq: record.event.seq, problem: "signature does not verify with the ledger's public key"))
        }
    }

    /// Replays every event into memory and keeps the result, so later commands and reads need
    /// not scan the log. Returns the replay.
    @discardableResult
    public func loadAll() throws -> LedgerReplay {
        try store.read { tx in
            let log = try tx.logState()
            try checkHead(log)
            var replay = LedgerReplay(catalog: catalog)
            let hash = try replayLines(tx, from: 0, to: log.size, into: &replay, after: .zero)
            let (result, head) = (replay, ChainHead(seq: log.last.event.seq, hash: hash))
            memory.withLock { $0.replay = result; $0.size = log.size; $0.head = head }
            return result
        }
    }

    /// The in-memory replay and the log size it reached, if ``loadAll()`` made one.
    func warmReplay() -> (LedgerReplay, Int)? {
        memory.withLock { m in
            guard let replay = m.replay, let size = m.size else { return nil }
            return (replay, size)
        }
    }

    /// Drops the in-memory replay; later calls read the log again.
    public func unload() {
        memory.withLock { $0.replay = nil; $0.size = nil; $0.head = nil }
    }

    /// Replays lines into `replay`, checking each event's hash link (the chain, not the
    /// signatures: that is `verify`'s work). Returns the hash of the last event replayed.
    func replayLines(_ tx: any LedgerReadTransaction, from: Int, to end: Int, into replay: inout LedgerReplay, after start: Digest) throws -> Digest {
        let checker = LogChecker(tx: tx, names: store.names, hasher: chain.hasher, signatures: nil)
        let result = try checker.run(from: from, to: end, head: nil, progress: LogChecker.Progress(replay: replay, previous: start))
        replay = result.replay
        return result.previous
    }
}

