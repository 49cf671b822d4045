import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

/// Reading one subject: its events through the subject map, replayed; and the whole log replayed
/// into memory for a long-running process.
extension Ledger {
    /// States of some subjects at the end of the log: from the in-memory replay when it is
    /// current (catching up if the log moved on), otherwise by replaying those subjects' events.
    func currentStates(of subjects: Set<SubjectRef>, _ view: LogView, versions: [CatalogVersion]) throws -> [SubjectRef: SubjectState] {
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

    /// The ids of the subjects with events, in byte order, those starting with `prefix` only:
    /// each from a subject record checked as every read checks it (its salt's length and, in
    /// format 2, the ledger key's signature over id and salt), and kept only when the subject
    /// map (format 2; the line index in format 1) holds events under its pseudonym. Only the
    /// records that match are checked.
    public func subjectIDs(prefix: String = "") throws -> [String] {
        try subjectIDs { $0.text.utf8.starts(with: prefix.utf8) }
    }

    /// Whether the ledger holds events for the subject: its record checked, its pseudonym looked
    /// up in the subject map (O(log n)).
    public func hasEvents(subjectID: String) throws -> Bool {
        guard let ref = try subjectRef(for: subjectID) else { return false }
        return try reading { view in try hasEvents(StreamKey.of(subject: ref), view) }
    }

    /// Whether stream `key` has events: the subject map's lookup (format 2), the line index
    /// (format 1).
    func hasEvents(_ key: [UInt8], _ view: LogView) throws -> Bool {
        guard version >= 2 else { return try !view.tx.indexedEntries(of: key, below: view.size).isEmpty }
        do {
            return try currentMap(view).map.lookup(key).seq != nil
        } catch {
            throw mapFailure("\(error)")
        }
    }

    /// Subject ids close to `subjectID` (a typo): the known ids within two edits of it, or that
    /// differ from it only in letter case, nearest first, at most `limit`.
    public func subjectsNear(_ subjectID: String, limit: Int = 3) throws -> [String] {
        let wanted = Array(subjectID.unicodeScalars)
        var distance: [String: Int] = [:]
        let ids = try subjectIDs { id in
            guard id.text != subjectID else { return false }
            if id.text.lowercased() == subjectID.lowercased() {
                distance[id.text] = 0
                return true
            }
            guard let d = Self.editDistance(wanted, Array(id.text.unicodeScalars), atMost: 2) else { return false }
            distance[id.text] = d
            return true
        }
        return ids.sorted { distance[$0]! != distance[$1]! ? distance[$0]! < distance[$1]! : $0.utf8.lexicographicallyPrecedes($1.utf8) }.prefix(limit).map { $0 }
    }

    /// The ids, among the subject records `matching` selects, whose records check and whose
    /// pseudonyms have events, in byte order.
    func subjectIDs(matching: (SubjectID) -> Bool) throws -> [String] {
        try reading { view in
            let records = try view.tx.subjectRecords().filter { matching($0.key) }.sorted { $0.key < $1.key }
            var ids: [String] = []
            for (id, record) in records {
                try checkRecord(id, record, keys: view.keys)
                if try hasEvents(StreamKey.of(subject: subjectRef(id: id.text, salt: record.salt)), view) { ids.append(id.text) }
            }
            return ids
        }
    }

    /// The Levenshtein distance of two strings when it is at most `bound`, else nil.
    package static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar], atMost bound: Int) -> Int? {
        guard abs(a.count - b.count) <= bound else { return nil }
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            if current.min()! > bound { return nil }
            previous = current
        }
        let distance = a.isEmpty ? b.count : (b.isEmpty ? a.count : previous[b.count])
        return distance <= bound ? distance : nil
    }

    /// One subject's consents and history, optionally as of a past time. Unknown subjects have
    /// no consents (rule R1). The subject's event signatures are checked; the whole chain is
    /// `verify`'s job.
    public func report(for subjectID: String, asOf: Timestamp? = nil) throws -> SubjectReport {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        return try reading { view in
            let log = view.log
            let timeline = try ledgerTimeline(view)
            let versions = timeline.versions
            let catalog = Self.catalog(in: versions, at: asOf, clock: timeline.clock)
            guard let salt = try salt(of: subjectID, in: view.tx) else {
                let empty = SubjectState()
                return SubjectReport(subjectID: subjectID, subject: nil, state: empty, events: [], listing: ConsentListing(state: empty, catalog: catalog), torn: log.torn)
            }
            let ref = subjectRef(id: subjectID, salt: salt)
            let (state, events) = try subjectEvents(ref, view, until: asOf, clock: timeline.clock, versions: versions, key: subjectKey(subjectID, salt: salt))
            return SubjectReport(subjectID: subjectID, subject: ref, state: state, events: events, listing: ConsentListing(state: state, catalog: catalog), torn: log.torn)
        }
    }

    /// A subject's events (``streamEntries(_:log:)``), replayed under the catalogue in force
    /// before each, up to `until` in effective times (``ClockCorrections``); with the subject's
    /// `key`, their sealed evidence opened.
    func subjectEvents(_ subject: SubjectRef, _ view: LogView, until: Timestamp?, clock: ClockCorrections = ClockCorrections(), versions: [CatalogVersion], key: SubjectKey? = nil) throws -> (state: SubjectState, events: [LedgerEvent]) {
        var state = SubjectState()
        var events: [LedgerEvent] = []
        guard subject.pseudonymBytes != nil else { return (state, events) }
        for entry in try streamEntries(StreamKey.of(subject: subject), view) {
            let record = entry.record
            if let until, clock.effectiveTime(of: record.event) > until { break }
            if version < 2 { try checkSignature(record, line: entry.seq + 1, keys: genesisSchedule) }
            let event = try key.map { key throws(ConsentError) in
                try record.event.mappingEvidence { (e) throws(ConsentError) in try openEvidence(e, seq: record.event.seq, key: key) }
            } ?? record.event
            do throws(ReplayViolation) {
                try state.apply(event, catalog: Self.catalog(in: versions, before: record.event.seq))
            } catch {
                throw ConsentError.integrity(IntegrityFailure(line: entry.seq + 1, seq: error.seq, problem: error.problem))
            }
            events.append(event)
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

    /// Replays every event into memory and keeps the result, so later commands and reads need
    /// not scan the log. Returns the replay.
    @discardableResult
    public func loadAll() throws -> LedgerReplay {
        try store.read { tx in
            let log = try view(tx).log
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

// MARK: - Fast reads from the in-memory replay

extension Ledger {
    /// ``currentListing(for:)``, if the storage can start its reads without waiting
    /// (`LedgerStore.readingWithoutWaiting(_:)`: no writer holds a folder's lock); nil, having
    /// read nothing, when they would wait. Nil also for a format-1 ledger: finding one subject's
    /// events there scans the whole line index, too long for a caller that must not block.
    public func currentListingWithoutWaiting(for subjectID: String) throws -> ConsentListing? {
        guard version >= 2 else { return nil }
        return try store.readingWithoutWaiting { try currentListing(for: subjectID) }
    }

    /// A subject's current consents. When ``loadAll()`` keeps a replay in memory and the log has
    /// not moved on, the answer comes from it (no log reads, no signature checks: the replay was
    /// built from checked lines); otherwise from ``report(for:asOf:)``.
    public func currentListing(for subjectID: String) throws -> ConsentListing {
        try Self.validateText(subjectID, what: "subject id", maxBytes: 256)
        // Without a replay in memory there is nothing to answer from here: no transaction for it.
        if warmReplay() != nil, let listing = try store.read({ tx throws -> ConsentListing? in
            let log = try tx.logState()
            guard let (replay, size) = warmReplay(), size == log.size else { return nil }
            guard let salt = try salt(of: subjectID, in: tx) else { return ConsentListing(state: SubjectState(), catalog: replay.catalog) }
            var state = replay.state(of: subjectRef(id: subjectID, salt: salt))
            try openEvidence(&state, key: subjectKey(subjectID, salt: salt))
            return ConsentListing(state: state, catalog: replay.catalog)
        }) {
            return listing
        }
        return try report(for: subjectID).listing
    }
}
