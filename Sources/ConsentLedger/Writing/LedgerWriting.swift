import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// The writes: consent commands and catalogue publications, each a commit on the one commit
/// path (``commit(_:_:_:signer:streams:subjects:)``), under the storage's write transaction.
extension Ledger {
    /// Accepts commands, appends their events atomically and durably, and answers with each
    /// subject's updated consents. The commands are checked in order against the state the
    /// earlier ones leave; if any is refused, nothing is appended.
    ///
    /// Writers of one process that call this at the same time share commits (group commit):
    /// while one commit is being made durable, the commands that arrive wait, and the next
    /// commit takes all of them, each call's commands checked and appended atomically on their
    /// own, so that one sync serves every waiting call. A call returns only once its events
    /// are durable; a call the rules refuse appends nothing and does not affect the others. The
    /// report's `recovered` and `warning` describe the commit the call shared.
    @discardableResult
    public func execute(_ commands: [LedgerCommand]) throws -> ExecutionReport {
        for command in commands {
            try LedgerCommand.validate(subjectID: command.subjectID, actor: command.actor)
        }
        return try groupCommit.submit(commands) { batches in
            do {
                return try executeGroup(batches, stopAtRefusal: false).map { $0.mapError { $0 as any Error } }
            } catch where batches.count > 1 && !Self.isStorageFailure(error) {
                // An error that is not a refusal of one batch is thrown for the whole group: a
                // subject record that fails its check, say. Each call is then run alone, so that
                // an error reaches only the call it belongs to. Not a storage failure: it belongs
                // to the whole commit, which it may have left made or not (a lost connection, a
                // failed sync), and running the calls again could append them twice.
                return batches.map { batch in Result { try executeGroup([batch], stopAtRefusal: false)[0].get() } }
            }
        }
    }

    /// Runs `commands` as if each were executed on its own, in order, and stops at the first
    /// one the rules refuse, but commits them in groups of up to `groupSize` commands, so that
    /// one sync serves a whole group: a bulk import at the rate of the disk rather than of its
    /// syncs. Each command is atomic: a crash keeps or loses it whole. `acknowledge` is called
    /// with each command's index and result once its group is durable, before the next group
    /// is written (a commit's warning comes with its last command). A refused command throws
    /// (after the commands before it were committed and acknowledged); nothing after it is
    /// appended.
    public func executeInOrder(_ commands: [LedgerCommand], groupSize: Int = 256, acknowledge: (Int, CommandResult, _ warning: String?) throws -> Void) throws {
        for command in commands {
            try LedgerCommand.validate(subjectID: command.subjectID, actor: command.actor)
        }
        var next = 0
        while next < commands.count {
            let group = commands[next..<min(commands.count, next + max(1, groupSize))].map { [$0] }
            var outcomes: [Result<ExecutionReport, ConsentError>]
            do {
                outcomes = try groupCommit.exclusively { try executeGroup(group, stopAtRefusal: true) }
            } catch where group.count > 1 && !Self.isStorageFailure(error) {
                // An error that is not a refusal (a subject record that fails its check, say)
                // stops the whole group: the group's first command is run alone, so that the
                // commands before the one at fault are committed and acknowledged, and the error
                // is that command's.
                outcomes = try groupCommit.exclusively { try executeGroup([group[0]], stopAtRefusal: true) }
            }
            for (i, outcome) in outcomes.enumerated() {
                let report = try outcome.get()
                // One commit's warning is given once, with its last command.
                try acknowledge(next, report.results[0], i == outcomes.count - 1 ? report.warning : nil)
                next += 1
            }
        }
    }

    /// Decides each batch of commands in order, against the state the batches accepted before
    /// it leave, and commits the events of every accepted batch in one commit. A batch the rules
    /// refuse appends nothing and its result is its error; the batches after it go on (with
    /// `stopAtRefusal`, they are not run and have no result). Any other error (the storage, the
    /// key, a subject record that fails its check) fails the whole group: this throws it, and
    /// the callers run the batches alone to find whose it is.
    func executeGroup(_ batches: [[LedgerCommand]], stopAtRefusal: Bool) throws -> [Result<ExecutionReport, ConsentError>] {
        let commands = batches.flatMap { $0 }
        let signer = try signingKey()
        return try writing(optimistic: true) { tx, view, afterCommit in
            let log = view.log
            // Subject references; a new subject gets a salt that is saved only if it gets events.
            // Remembered salts were checked; a record read now is checked before it is used.
            // Taken out of memory while this write works on them (writes run one at a time), so
            // that adding to them changes them in place: a copy would cost every subject's entry
            // on each command. Put back once the store has committed; dropped if the write fails.
            var salts: [SubjectID: [UInt8]] = memory.withLock { m -> [SubjectID: [UInt8]]? in
                defer { m.salts = nil }
                return m.salts
            } ?? [:]
            var records = memory.withLock { m -> [SubjectID: SubjectRecord]? in
                defer { m.records = nil }
                return m.records
            }
            let unchecked = Set(commands.map { SubjectID($0.subjectID) }).filter { salts[$0] == nil }
            if !unchecked.isEmpty {
                // An id the last reading did not have (a new subject, or one another writer
                // added) is looked up alone when there are few such ids: a lookup decodes no
                // other record, where reading them all decodes every record of the ledger. A
                // process whose lookups found no record many times (a long-running writer of new
                // subjects: in the file store each such lookup reads every line) reads them all
                // once and keeps them, and from then on looks up alone only the ids they lack.
                // Lookups that find their record do not count: the file store finds those
                // through its index, and reading them all would stall the write that does it
                // (120 ms at 50,000 subjects).
                let missing = unchecked.filter { records?[$0] == nil }
                let missed = memory.withLock { $0.recordMisses }
                let readAll = missing.count > Self.recordsLookedUpAlone || (records == nil && missed >= Self.recordsLookedUpAlone)
                if readAll { records = try tx.subjectRecords() }
                var found: [(id: SubjectID, record: SubjectRecord)] = []
                for id in unchecked {
                    var record = records?[id]
                    if record == nil, !readAll {
                        record = try tx.subjectRecord(id)
                        if let record { records?[id] = record } else { memory.withLock { $0.recordMisses += 1 } }
                    }
                    if let record { found.append((id, record)) }
                }
                // A signature check each, on all cores: a group of calls for subjects this
                // process has not met would otherwise wait for them one after another.
                try checkRecords(found, keys: view.keys, minimumForParallel: 2)
                for (id, record) in found { salts[id] = record.salt }
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
            // A remembered salt whose subject was erased since (by another process): the id is
            // unknown now, or has a new record; read it again rather than write for the erased one.
            let erased = refs.filter { states[$0.value]?.erasedAt != nil }.map(\.key)
            if !erased.isEmpty {
                for id in erased {
                    if let record = try tx.subjectRecord(id) {
                        guard subjectRef(id: id.text, salt: record.salt) != refs[id] else {
                            throw ConsentError.integrity(IntegrityFailure(.subjectRecord, line: nil, seq: nil, problem: "the subject \(id.text.debugDescription) was erased, but the erasure was cut short and its record remains in \(store.names.subjects): run the erasure again before writing for that id"))
                        }
                        try checkRecord(id, record, keys: view.keys)
                        salts[id] = record.salt
                        records?[id] = record
                    } else {
                        let salt = random(Pseudonym.saltLength)
                        salts[id] = salt
                        newSalts[id] = salt
                        records?[id] = nil
                    }
                    refs[id] = subjectRef(id: id.text, salt: salts[id]!)
                }
                states = try currentStates(of: Set(refs.values), view, versions: versions)
            }
            // The answers show each subject's evidence in clear; the log gets it sealed.
            var keys: [SubjectID: SubjectKey] = [:]
            for (id, ref) in refs {
                let key = subjectKey(id.text, salt: salts[id]!)
                keys[id] = key
                if var state = states[ref] {
                    try openEvidence(&state, key: key)
                    states[ref] = state
                }
            }
            let streams = try streamState(for: Set(refs.values.map { StreamKey.of(subject: $0) }), view)
            let at = try commandTime(after: log.last.event)
            var nextSeq = log.last.event.seq + 1
            var events: [LedgerEvent] = []
            // The events are sealed as they are decided, so that other cores sign the first
            // while this thread decides the rest. A batch's events go to the sealer once the
            // whole batch is accepted, since a refused batch's must not be sealed; when the
            // group is one batch, a refusal appends nothing at all, so each command's go at once.
            let mapNextIndex = streams?.nextIndex
            let sealer = sealer(view, signer: signer, streams: (consume streams)?.state)
            let sealEachCommand = batches.count == 1
            // Each batch is decided on a copy of the states its subjects had after the batches
            // accepted before it, kept only if every command of the batch is accepted.
            var outcomes: [Result<[CommandResult], ConsentError>] = []
            // The sealer's failure (the subject map's) is the whole group's, not a refusal.
            var sealFailure: (any Error)?
            deciding: for (index, batch) in batches.enumerated() {
                var batchStates: [SubjectRef: SubjectState] = [:]
                var batchSeq = nextSeq
                var batchEvents: [LedgerEvent] = []
                var results: [CommandResult] = []
                do throws(ConsentError) {
                    for command in batch {
                        let ref = refs[SubjectID(command.subjectID)]!
                        var state = batchStates[ref] ?? states[ref] ?? SubjectState()
                        let outcome: CommandOutcome
                        do throws(CommandRejection) {
                            outcome = try ConsentRules.decide(command.request, subject: ref, state: state, catalog: catalog, actor: command.actor, at: at, nextSeq: batchSeq, evidence: command.evidence)
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
                        batchStates[ref] = state
                        batchSeq += UInt64(outcome.events.count)
                        let key = keys[SubjectID(command.subjectID)]!
                        let sealed = outcome.events.map { EvidenceSeal.sealing($0, key: key, hasher: chain.hasher) }
                        if sealEachCommand {
                            do {
                                try seal(sealed, with: sealer)
                            } catch {
                                sealFailure = error
                                break deciding
                            }
                        }
                        batchEvents += sealed
                        results.append(CommandResult(subjectID: command.subjectID, events: outcome.events, notes: outcome.notes, listing: ConsentListing(state: state, catalog: catalog)))
                    }
                } catch {
                    outcomes.append(.failure(error))
                    if stopAtRefusal { break }
                    continue
                }
                // Only the batches after this one read the states: after the last (a bulk
                // execute's only batch, of a thousand subjects) the merge would be work thrown away.
                if index < batches.count - 1 { states.merge(batchStates) { $1 } }
                nextSeq = batchSeq
                if !sealEachCommand { try seal(batchEvents, with: sealer) }
                events += batchEvents
                outcomes.append(.success(results))
            }
            if let sealFailure { throw sealFailure }
            let accepted = outcomes.flatMap { (try? $0.get()) ?? [] }
            guard !events.isEmpty else {
                // Nothing to append, but what was read stays useful: the records and the
                // salts of subjects that have them (never a new subject's unsaved salt).
                // So do the streams, taken out of memory for this write: put back unchanged,
                // unless a refused batch's events went to the sealer, which changed them.
                for id in newSalts.keys { salts[id] = nil }
                let streams = sealer.takeUnusedStreams().map { (state: $0, nextIndex: mapNextIndex!) }
                afterCommit.append { [self, salts] in memory.withLock { $0.salts = salts; $0.records = records; $0.streams = streams } }
                return outcomes.map { $0.map { ExecutionReport(results: $0, recovered: nil) } }
            }
            let withEvents = Set(accepted.filter { !$0.events.isEmpty }.map { SubjectID($0.subjectID) })
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
            let committed = try commit(sealed: sealer, view, tx, signer: signer, mapNextIndex: mapNextIndex, subjects: newRecords)
            let (size, head, warning) = (committed.size, committed.head, committed.warning)
            // Cache only salts that are on disk: a new subject whose command appended nothing
            // gets a fresh salt next time, saved with its first events.
            // Remembered only once the store has committed (see ``writing(_:)``).
            // (In place: a filtered copy would cost every remembered subject on each command.)
            for id in newSalts.keys where !withEvents.contains(id) { salts[id] = nil }
            afterCommit.append { [self, salts] in
                if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
                memory.withLock { $0.salts = salts; $0.records = records; $0.streams = committed.streams }
                advanceMemory(from: log.size, to: size, events: events, head: head)
            }
            return outcomes.map { $0.map { ExecutionReport(results: $0, recovered: log.torn, warning: warning) } }
        }
    }

    /// Whether `error` is the storage's: it belongs to the whole commit, never to one call.
    static func isStorageFailure(_ error: any Error) -> Bool {
        if case ConsentError.storage = error { return true }
        return false
    }

    /// Up to this many subjects unknown to the process, a write looks their records up one by
    /// one; beyond it, or once this many lookups found no record, it reads all records at once.
    static let recordsLookedUpAlone = 32

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
    ///
    /// An `optimistic` write lets a storage start from the state of this process's last commit
    /// (``LedgerStore/writeOptimistically(_:)``): when another writer changed the ledger since,
    /// the write is run again, from scratch, in the storage's write transaction.
    func writing<T>(optimistic: Bool = false, _ body: (any LedgerWriteTransaction, LogView, _ afterCommit: inout [() -> Void]) throws -> T) throws -> T {
        var afterCommit: [() -> Void] = []
        let result: T
        do {
            if optimistic, store.writesOptimistically {
                do {
                    result = try store.writeOptimistically { tx in try body(tx, try view(tx), &afterCommit) }
                } catch ConsentError.conflict, ConsentError.integrity {
                    // Another writer moved the head since this process's last commit (or changed
                    // what a read found): nothing was written. Decide again, under the lock. What
                    // this process remembers is of an older head, and still true of it: the
                    // locked write reads only what was appended since (and throws, forgetting it
                    // all, if the ledger is really damaged).
                    afterCommit = []
                    result = try store.write { tx in try body(tx, try view(tx), &afterCommit) }
                }
            } else {
                result = try store.write { tx in try body(tx, try view(tx), &afterCommit) }
            }
        } catch {
            forgetRemembered()
            throw error
        }
        for update in afterCommit { update() }
        return result
    }

    /// Drops everything remembered about the log: it is read again next time.
    private func forgetRemembered() {
        memory.withLock { m in
            m.trustedHead = nil
            m.checkedHead = nil
            m.salts = nil
            m.records = nil
            m.replay = nil
            m.size = nil
            m.head = nil
            m.streams = nil
            m.ledgerTimeline = nil
        }
    }

    /// Publishes a new catalogue version as a signed event: from now on grants record its policy
    /// versions, and earlier grants of a changed version are outdated (a changed required
    /// consent deactivates its feature until the subject consents again). Each consent's notice
    /// hash is the SHA-256 of its link. Returns nil, appending nothing, when the catalogue is the
    /// one in force.
    @discardableResult
    public func publish(_ newCatalog: Catalog, actor: String = "consentctl") throws -> LedgerEvent? {
        try Self.validateText(actor, what: "actor", maxBytes: 128)
        let signer = try signingKey()
        return try writing { tx, view, afterCommit in
            let log = view.log
            let current = try catalogVersions(view).last!.catalog
            if newCatalog == current { return nil }
            try Self.checkPublishable(newCatalog, over: current)
            let hasher = chain.hasher
            let notices = newCatalog.features.flatMap { f in
                f.consents.map { PolicyNotice(feature: f.code, consent: $0.code, version: $0.version, sha256: hasher.sha256(Array($0.link.utf8)).hex) }
            }
            let published = CatalogPublished(catalog: newCatalog, catalogHash: hasher.sha256(CatalogCodec.canonicalBytes(newCatalog)).hex, notices: notices)
            let seq = log.last.event.seq + 1
            let event = LedgerEvent(seq: seq, at: try commandTime(after: log.last.event), actor: actor, command: CommandSpan(first: seq, size: 1), payload: .catalogPublished(published))
            _ = try commitLedgerEvent(event, view, tx, signer: signer, afterCommit: &afterCommit)
            return event
        }
    }

    /// The time of a command written now, after `last`: this writer's clock, or `last`'s time
    /// when that is later (times never go backwards, rule 2) but within the allowed skew
    /// (``maximumClockSkew``). A ledger whose time is further ahead refuses the write (`ConsentError.clockAhead`): carrying
    /// a wrong time forward would stamp every later event with it.
    func commandTime(after last: LedgerEvent) throws -> Timestamp {
        let now = clock()
        let skew = maximumClockSkew.milliseconds
        if last.at.millisecondsSinceEpoch - now.millisecondsSinceEpoch > skew {
            throw ConsentError.clockAhead(ClockAhead(ledgerTime: last.at, seq: last.seq, clock: now, allowedSkewMilliseconds: skew))
        }
        return max(now, last.at)
    }

    /// Records that the ledger's clock went wrong and sets its time back to this writer's clock:
    /// one signed `clock.corrected` event naming the time it corrects (Spec/ledger-format.md,
    /// Clock corrections). Returns nil, appending nothing, when the ledger's time is not ahead
    /// of this clock by more than ``maximumClockSkew``: writes go on without a correction then.
    /// With `dryRun`, says what it would write and re-date, and writes nothing.
    ///
    /// Check this machine's clock first: a correction made from a clock that is behind records
    /// a wrong time of its own.
    @discardableResult
    public func correctClock(reason: String? = nil, actor: String = "consentctl", dryRun: Bool = false) throws -> ClockCorrectionReceipt? {
        try Self.validateText(actor, what: "actor", maxBytes: 128)
        if let reason, let problem = SubjectErased.problem(reason: reason) { throw ConsentError.invalidRequest("the correction's reason cannot be recorded: \(problem)") }
        guard version >= 2 else {
            throw ConsentError.invalidRequest("this ledger is of format version 1, which has no clock corrections: copy it to a new ledger first (`consentctl migrate --to`)")
        }
        let signer = try dryRun ? nil : signingKey()
        return try writing { tx, view, afterCommit in
            let log = view.log
            let now = clock()
            guard log.last.event.at.millisecondsSinceEpoch - now.millisecondsSinceEpoch > maximumClockSkew.milliseconds else { return nil }
            // Rule 5b: never before what the ledger holds to be right. A clock earlier than
            // that is this machine's mistake, not the ledger's.
            let floor = try ledgerTimeline(view).clock.corrections.last
            guard now >= (floor?.at ?? genesisTime) else {
                throw ConsentError.invalidRequest("this machine's clock, \(now.rfc3339), is before \(floor.map { "the ledger's last clock correction (seq \($0.seq), \($0.at.rfc3339))" } ?? "the ledger's creation (\(genesisTime.rfc3339))"): it is this clock that is wrong; set it right. Nothing was written")
            }
            let seq = log.last.event.seq + 1
            let event = LedgerEvent(seq: seq, at: now, actor: actor, command: CommandSpan(first: seq, size: 1), payload: .clockCorrected(ClockCorrected(correctedFrom: log.last.event.at, reason: reason)))
            let redated = try firstEvent(after: now, from: (floor?.seq ?? 0) + 1, through: log.last.event.seq, view)...log.last.event.seq
            if let signer { _ = try commitLedgerEvent(event, view, tx, signer: signer, afterCommit: &afterCommit) }
            return ClockCorrectionReceipt(event: event, written: signer != nil, redated: redated)
        }
    }

    /// The first seq in `from...through` whose event is stamped later than `time`, where times do
    /// not go back (rule 2 holds since the last correction): a binary search over the log. For
    /// the operator's information only: nothing is decided by it.
    private func firstEvent(after time: Timestamp, from: UInt64, through: UInt64, _ view: LogView) throws -> UInt64 {
        var (low, high) = (from, through)
        while low < high {
            let mid = low + (high - low) / 2
            if try decode(try view.tx.entry(Int(mid)), number: Int(mid) + 1).event.at > time { high = mid } else { low = mid + 1 }
        }
        return low
    }

    /// Commits one ledger event (a catalogue publication, a key rotation or revocation): a
    /// command of its own in the ledger stream, on the one commit path. What the process
    /// remembers is updated once the storage has committed.
    func commitLedgerEvent(_ event: LedgerEvent, _ view: LogView, _ tx: any LedgerWriteTransaction, signer: any EventSigner, headSigner: (any EventSigner)? = nil, revising: [(subjectID: SubjectID, record: SubjectRecord?)] = [], afterCommit: inout [() -> Void]) throws -> Committed {
        let committed = try commit([event], view, tx, signer: signer, headSigner: headSigner, streams: try streamState(for: [SubjectMap.ledgerStream], view), subjects: [], revising: revising)
        if let warning = committed.warning { lastWarning.withLock { $0 = warning } }
        let size = view.log.size
        afterCommit.append { [self] in
            if committed.warning == nil { remember(committed.signedHead, frontier: committed.frontier) }
            memory(streams: committed.streams)
            advanceMemory(from: size, to: committed.size, events: [event], head: committed.head)
        }
        return committed
    }

    /// Unlocks the signing key now, asking for its passphrase if it is encrypted, so that later
    /// writes do not ask. A long-running process (a service) calls this once at start.
    public func unlock() throws {
        _ = try signingKey()
    }

    /// Seals the signing key again as `protection` says (a new passphrase, or a plaintext key
    /// encrypted) and puts the new file in place of the old one. The key itself is unchanged.
    public func reprotectKey(_ protection: KeyProtection) throws {
        guard let keys, let signer = try signingKey() as? SodiumSigner else {
            throw ConsentError.invalidRequest("this ledger signs with a signer of its own, not a key file: there is no key file to seal")
        }
        try keys.replaceKeyFile(try SigningKeyFile.file(for: signer, protection: protection, random: random))
    }

    /// The signer of the key in force, unlocked once. A key file that holds a key the ledger
    /// has rotated away from is refused; a rotation that committed its event but was cut short
    /// before putting the new key file in place is finished here.
    func signingKey() throws -> any EventSigner {
        if let signer = memory.withLock({ $0.signer }) { return signer }
        guard let keys else {
            throw ConsentError.notFound(.signingKey, "\(store.names.location) keeps no signing key: writers load it from a key file (consentctl --key-file FILE) or a key store of their own")
        }
        let schedule = try keyHistory()
        let inForce = schedule.current
        var file = try keys.loadKeyFile()
        let stored = try? SigningKeyFile.publicKey(of: file, location: keys.keyLocation)
        if stored != inForce.key, let pending = try keys.loadPendingKeyFile(),
            try SigningKeyFile.publicKey(of: pending, location: keys.keyLocation) == inForce.key
        {
            try keys.promotePendingKeyFile()
            file = pending
        }
        let signer = try keys.unlockSigner(file, passphrase: passphrase)
        guard signer.publicKey == inForce.key else {
            if let retired = schedule.period(of: signer.publicKey) {
                let next = schedule.periods.first { $0.from > retired.from }
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the secret key in \(keys.keyLocation) is key \(retired.keyID), which the ledger rotated away from at seq \(next?.rotation ?? 0); the key in force is \(inForce.keyID)"))
            }
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the secret key does not belong to the ledger's public key"))
        }
        memory.withLock { $0.signer = signer }
        return signer
    }
}
