import ConsentDomain
import LedgerFormat
import LedgerStorage
import TransparencyLog

// MARK: - Catalogue versions

/// A catalogue version and where it took effect.
public struct CatalogVersion: Sendable {
    public let seq: UInt64
    public let at: Timestamp
    public let catalog: Catalog
    /// The `catalog.published` event, or nil for the genesis catalogue.
    public let published: CatalogPublished?
}

/// What a catalogue publication would change (``Ledger/previewPublication(_:)``).
public struct PublicationPreview: Hashable, Sendable {
    public struct Change: Hashable, Sendable {
        /// The feature's key and the consent's code.
        public let feature: String
        public let consent: String
        public let oldVersion: String
        public let newVersion: String
        public let linkChanged: Bool
        public let namesChanged: Bool
        /// Subjects whose grant of this consent is current now and would be outdated.
        public let subjectsOutdated: Int
    }

    /// The consents that change, in catalogue order; empty when the catalogue is the one in force.
    public let changes: [Change]
    /// Distinct subjects with at least one grant that would be outdated.
    public let subjectsOutdated: Int
}

/// The ledger's time against a writer's clock (``Ledger/clockStatus()``).
public struct LedgerClockStatus: Sendable {
    /// The newest event's time and seq.
    public let ledgerTime: Timestamp
    public let seq: UInt64
    /// This process's clock when asked.
    public let clock: Timestamp
    public let allowedSkew: Duration
    /// Every clock correction of the log.
    public let corrections: ClockCorrections

    /// How far the ledger's time is ahead of the clock, in milliseconds (negative: behind).
    public var aheadMilliseconds: Int64 { ledgerTime.millisecondsSinceEpoch - clock.millisecondsSinceEpoch }
    public var allowedSkewMilliseconds: Int64 { allowedSkew.milliseconds }
    /// Writes refuse: the ledger's time is ahead by more than the allowed skew.
    public var refusesWrites: Bool { aheadMilliseconds > allowedSkew.milliseconds }
}

/// A clock correction written, or one a dry run would write (``Ledger/correctClock(reason:actor:dryRun:)``).
public struct ClockCorrectionReceipt: Hashable, Sendable {
    /// The `clock.corrected` event.
    public let event: LedgerEvent
    /// False for a dry run: nothing was written.
    public let written: Bool
    /// The events it re-dates: those since the previous correction (or the genesis event)
    /// stamped later than its time, whose effective time becomes its time.
    public let redated: ClosedRange<UInt64>
}

/// What the ledger's own stream says besides keys: the catalogue versions and the clock
/// corrections.
struct LedgerTimeline: Sendable {
    var versions: [CatalogVersion]
    var clock: ClockCorrections
}

extension Ledger {
    /// Every catalogue version of the log: the genesis catalogue, then each published one, from
    /// the ledger's own stream. Call with derived data current.
    func catalogVersions(_ view: LogView) throws -> [CatalogVersion] {
        try ledgerTimeline(view).versions
    }

    /// The ledger's clock corrections, from its own stream; for as-of questions, which are
    /// asked in effective times (``ClockCorrections``).
    package func clockCorrections(_ view: LogView) throws -> ClockCorrections {
        try ledgerTimeline(view).clock
    }

    /// The catalogue versions and clock corrections of the log. Call with derived data current.
    func ledgerTimeline(_ view: LogView) throws -> LedgerTimeline {
        guard version >= 2 else { return try ledgerTimeline(try streamEntries(SubjectMap.ledgerStream, view)) }
        // Every command needs them: read again only when the ledger stream has a new event.
        // Found at this very size (or carried to it by this process's own commits of subject
        // events only, ``advanceMemory(from:to:events:head:)``), they need no lookup at all.
        let size = view.log.size
        let cached = memory.withLock { $0.ledgerTimeline }
        if let cached, cached.through == size { return cached.timeline }
        let newest: UInt64?
        do {
            newest = try currentMap(view).map.lookup(SubjectMap.ledgerStream).seq
        } catch {
            throw mapFailure("\(error)")
        }
        if let newest, let cached, cached.newest == newest {
            memory.withLock { $0.ledgerTimeline = (newest, cached.timeline, size) }
            return cached.timeline
        }
        let timeline = try ledgerTimeline(try streamEntries(SubjectMap.ledgerStream, view))
        if let newest { memory.withLock { $0.ledgerTimeline = (newest, timeline, size) } }
        return timeline
    }

    /// The catalogue versions of the ledger stream's events.
    func catalogVersions(_ ledgerStream: [StreamEntry]) throws -> [CatalogVersion] {
        try ledgerTimeline(ledgerStream).versions
    }

    /// The catalogue versions and clock corrections of the ledger stream's events.
    func ledgerTimeline(_ ledgerStream: [StreamEntry]) throws -> LedgerTimeline {
        var timeline = LedgerTimeline(versions: [CatalogVersion(seq: 0, at: genesisTime, catalog: catalog, published: nil)], clock: ClockCorrections())
        var previousAt = genesisTime
        for entry in ledgerStream where entry.seq > 0 {
            let event = entry.record.event
            defer { previousAt = event.at }
            switch event.payload {
            case .keyRotated, .keyRevoked: continue
            case .clockCorrected(let correction):
                // The full replay checks it against the previous event of the log; a reader of
                // the stream alone can still refuse one that moves no time back.
                guard event.at < correction.correctedFrom else {
                    throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a clock correction moves the ledger's time back, but \(event.at) is not earlier than the time it corrects, \(correction.correctedFrom)"))
                }
                guard previousAt <= correction.correctedFrom, timeline.clock.corrections.last.map({ $0.seq < event.seq }) ?? true else {
                    throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a clock correction corrects \(correction.correctedFrom), earlier than the ledger's own event before it at \(previousAt)"))
                }
                timeline.clock.append(.init(seq: event.seq, at: event.at, correctedFrom: correction.correctedFrom, reason: correction.reason))
                continue
            default: break
            }
            guard case .catalogPublished(let published) = event.payload else {
                throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: entry.seq + 1, seq: UInt64(entry.seq), problem: "a ledger event after the genesis event is not a published catalogue"))
            }
            if version < 2 { try checkSignature(entry.record, line: entry.seq + 1, keys: genesisSchedule) }
            try checkCatalogHash(published, seq: UInt64(entry.seq))
            timeline.versions.append(CatalogVersion(seq: event.seq, at: event.at, catalog: published.catalog, published: published))
        }
        return timeline
    }

    /// A published catalogue's `catalog` member must be the SHA-256 of its canonical bytes.
    func checkCatalogHash(_ published: CatalogPublished, seq: UInt64) throws {
        guard chain.hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash else {
            throw ConsentError.integrity(IntegrityFailure(line: Int(seq) + 1, seq: seq, problem: "the published catalogue's SHA-256 differs from its 'catalog' member"))
        }
    }

    /// The catalogue in force for an event at `seq`: the newest version published before it.
    static func catalog(in versions: [CatalogVersion], before seq: UInt64) -> Catalog {
        versions.last { $0.seq < seq }?.catalog ?? versions[0].catalog
    }

    /// The catalogue in force at a time (the newest one when `at` is nil): the newest version
    /// whose effective time is not later.
    static func catalog(in versions: [CatalogVersion], at: Timestamp?, clock: ClockCorrections) -> Catalog {
        guard let at else { return versions.last!.catalog }
        return versions.last { clock.effectiveTime(seq: $0.seq, at: $0.at) <= at }?.catalog ?? versions[0].catalog
    }

    /// Refuses a catalogue that cannot follow `current` (other features or consents, a version
    /// of the wrong shape).
    static func checkPublishable(_ newCatalog: Catalog, over current: Catalog) throws {
        if let problem = newCatalog.problemAsUpdate(of: current) ?? newCatalog.problemAsNewVersion() {
            throw ConsentError.invalidRequest("cannot publish this catalogue: \(problem)")
        }
    }

    /// What publishing `newCatalog` would change, without publishing it: each consent whose
    /// policy version, link or names change, and how many subjects' current grants of it would
    /// become outdated. Throws as ``publish(_:actor:)`` would.
    public func previewPublication(_ newCatalog: Catalog) throws -> PublicationPreview {
        let current = try catalogHistory().last!.catalog
        if newCatalog == current { return PublicationPreview(changes: [], subjectsOutdated: 0) }
        try Self.checkPublishable(newCatalog, over: current)
        let replay = try loadAll()
        var changes: [PublicationPreview.Change] = []
        var outdated: Set<SubjectRef> = []
        for (new, old) in zip(newCatalog.features, current.features) {
            for (c, o) in zip(new.consents, old.consents) where c != o {
                let affected = c.version == o.version ? [] : replay.subjects.filter { _, state in
                    if case .given(let grant) = state.status(feature: new.code, consent: c.code) { return grant.version == o.version }
                    return false
                }.map(\.key)
                outdated.formUnion(affected)
                changes.append(PublicationPreview.Change(feature: new.key, consent: c.code, oldVersion: o.version, newVersion: c.version,
                                                          linkChanged: c.link != o.link, namesChanged: c.names != o.names, subjectsOutdated: affected.count))
            }
        }
        return PublicationPreview(changes: changes, subjectsOutdated: outdated.count)
    }

    /// The ledger's time against this process's clock, and its clock corrections.
    public func clockStatus() throws -> LedgerClockStatus {
        try reading { view in
            let last = view.log.last.event
            return LedgerClockStatus(ledgerTime: last.at, seq: last.seq, clock: clock(), allowedSkew: maximumClockSkew, corrections: try clockCorrections(view))
        }
    }

    /// The catalogue versions of the ledger, oldest first.
    public func catalogHistory() throws -> [CatalogVersion] {
        try reading { view in try catalogVersions(view) }
    }
}
