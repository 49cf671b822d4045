/// What an audit report covers.
public struct ReportScope: Hashable, Sendable {
    public var subject: SubjectRef?
    public var feature: Int?
    public var from: Timestamp?
    public var to: Timestamp?
    public var actor: String?
    /// "As the ledger recorded it at this time": the log is replayed up to it, so outdated
    /// consents and activity are those of that moment. Nil: up to `to`, or the whole log.
    public var asOf: Timestamp?

    public init(subject: SubjectRef? = nil, feature: Int? = nil, from: Timestamp? = nil, to: Timestamp? = nil, actor: String? = nil, asOf: Timestamp? = nil) {
        self.subject = subject
        self.feature = feature
        self.from = from
        self.to = to
        self.actor = actor
        self.asOf = asOf
    }

    /// The last recorded time the report replays to.
    public var end: Timestamp? { asOf ?? to }

    func inWindow(_ at: Timestamp) -> Bool { (from.map { at >= $0 } ?? true) && (end.map { at <= $0 } ?? true) && (to.map { at <= $0 } ?? true) }
}

/// An audit report, built by replaying the log up to the scope's end (`to`) with
/// ``AuditReportBuilder``. Pure values: the ledger adds subject ids and the checkpoint.
public struct AuditReport: Hashable, Sendable {
    /// The event types, as every output names them (text, JSON, CSV, HTML).
    public enum EntryKind: String, Hashable, Sendable {
        case given, reconsent = "re-consent", withdrawn, cascade = "cascade-withdrawn", policy = "policy-change", erased
    }

    /// One consent's policy version changed by a publication.
    public struct PolicyChange: Hashable, Sendable {
        public let feature: Int
        public let consent: String
        /// Nil when the consent is new in this catalogue version.
        public let from: String?
        public let to: String

        public init(feature: Int, consent: String, from: String?, to: String) {
            self.feature = feature
            self.consent = consent
            self.from = from
            self.to = to
        }
    }

    /// One grant, re-consent, revocation or policy change in the window.
    public struct Entry: Hashable, Sendable {
        public let seq: UInt64
        public let at: Timestamp
        public let kind: EntryKind
        public let subject: SubjectRef?
        public let feature: Int?
        public let consent: String?
        public let actor: String
        /// The policy version given (grants and re-consents).
        public let version: String?
        /// Cascades: the revocation that caused this one. Re-consents: the grant renewed.
        public let cause: UInt64?
        /// Grants: how the consent was obtained.
        public var evidence = GrantEvidence()
        /// Policy changes: the catalogue version published and the consents whose version changed.
        public var catalogueVersion: String? = nil
        public var changes: [PolicyChange] = []
    }

    /// Counts in the window for one consent.
    public struct Counts: Hashable, Sendable {
        public let feature: Int
        public let consent: String
        public var given = 0
        public var reconsent = 0
        public var withdrawn = 0
        /// Withdrawn by rule R4's cascade.
        public var cascadeWithdrawn = 0
    }

    /// A consent given under an older policy version than the one in force at the report's end.
    public struct Outdated: Hashable, Sendable {
        public let subject: SubjectRef
        public let feature: Int
        public let consent: String
        public let givenVersion: String
        public let currentVersion: String
    }

    /// A span during which a feature was active for a subject (`until` nil: still active).
    public struct Interval: Hashable, Sendable {
        public let subject: SubjectRef
        public let feature: Int
        public let from: Timestamp
        public let until: Timestamp?
    }

    /// A span during which one consent was given (for the timeline chart).
    public struct GivenSpan: Hashable, Sendable {
        public let subject: SubjectRef
        public let feature: Int
        public let consent: String
        public let from: Timestamp
        public let until: Timestamp?
    }

    /// GDPR Art. 7(3): withdrawing should be as easy as giving.
    public struct WithdrawalStats: Hashable, Sendable {
        public let feature: Int
        /// Median milliseconds from a grant to its revocation, over revocations in the window.
        public let medianGrantToRevocationMs: Int64?
        public let revocations: Int
        public let cascades: Int
        public var cascadeShare: Double? { revocations == 0 ? nil : Double(cascades) / Double(revocations) }
    }

    public let scope: ReportScope
    public let entries: [Entry]
    public let counts: [Counts]
    public let outdated: [Outdated]
    public let intervals: [Interval]
    public let givenSpans: [GivenSpan]
    public let withdrawals: [WithdrawalStats]
    /// The subjects in scope that have any event up to the end (with an actor in scope: any
    /// event by that actor in the window), sorted by reference.
    public let subjects: [SubjectRef]
    /// The catalogue in force at the report's end.
    public let catalog: Catalog
    /// The subjects in scope erased by the report's end, with the seq of their erasure: their
    /// events are counted as before, and nothing links them to a person any more.
    public var erased: [SubjectRef: UInt64] = [:]
    /// The ledger's clock corrections. Intervals and spans are in effective times; an entry's
    /// `at` is its recorded time, and ``effectiveTime(of:)`` places it on the same axis.
    public var clock = ClockCorrections()

    /// When an entry happened, on the axis of the intervals: its recorded time, or the time of a
    /// later clock correction when that is earlier (``ClockCorrections``).
    public func effectiveTime(of entry: Entry) -> Timestamp {
        clock.effectiveTime(seq: entry.seq, at: entry.at)
    }
}

/// Builds an ``AuditReport`` from the events of the log in order, up to the scope's end.
public struct AuditReportBuilder: Sendable {
    public let scope: ReportScope
    private var replay: LedgerReplay
    private var entries: [AuditReport.Entry] = []
    private var counts: [ConsentKey: AuditReport.Counts] = [:]
    private var activeSince: [SubjectRef: [Int: Timestamp]] = [:]
    private var intervals: [AuditReport.Interval] = []
    private var givenSince: [SubjectRef: [ConsentKey: Timestamp]] = [:]
    private var spans: [AuditReport.GivenSpan] = []
    private var durations: [Int: [Int64]] = [:]
    private var revocations: [Int: (all: Int, cascades: Int)] = [:]
    /// With an actor in scope: the subjects that actor acted on in the window.
    private var actorSubjects: Set<SubjectRef> = []
    private var erased: [SubjectRef: UInt64] = [:]

    /// The ledger's clock corrections: the window and the end are in effective times
    /// (``ClockCorrections``), so a corrected clock error neither hides later events nor moves
    /// earlier ones out of the window.
    public let clock: ClockCorrections

    public init(catalog: Catalog, scope: ReportScope, clock: ClockCorrections = ClockCorrections()) {
        self.scope = scope
        self.clock = clock
        replay = LedgerReplay(catalog: catalog)
    }

    private func inScope(_ subject: SubjectRef?, _ feature: Int?) -> Bool {
        (scope.subject == nil || subject == nil || subject == scope.subject) && (scope.feature == nil || feature == nil || feature == scope.feature)
    }

    /// Adds the next event of the log. Events after the scope's end are ignored.
    public mutating func add(_ event: LedgerEvent) throws(ReplayViolation) {
        // Windows, spans, intervals and durations are in effective times; entries show the
        // recorded, signed time.
        let effective = clock.effectiveTime(of: event)
        if let end = scope.end, effective > end { return }
        let before = replay.catalog
        try replay.apply(event)
        let inWindow = scope.inWindow(effective)
        let actorMatches = scope.actor.map { $0.utf8.elementsEqual(event.actor.utf8) } ?? true
        switch event.payload {
        case .ledgerCreated, .keyRotated, .keyRevoked, .clockCorrected:
            break
        case .catalogPublished(let published):
            if inWindow && actorMatches {
                // The consents whose policy version changed.
                let changes = published.notices.filter { n in
                    (scope.feature == nil || n.feature == scope.feature)
                        && before.feature(code: n.feature)?.consent(code: n.consent)?.version != n.version
                }.map { n in
                    AuditReport.PolicyChange(feature: n.feature, consent: n.consent, from: before.feature(code: n.feature)?.consent(code: n.consent)?.version, to: n.version)
                }
                entries.append(.init(seq: event.seq, at: event.at, kind: .policy, subject: nil, feature: nil, consent: nil, actor: event.actor, version: nil, cause: nil, catalogueVersion: published.catalogHash, changes: changes))
            }
            // An outdated required consent ends the feature's activity for every subject.
            for subject in activeSince.keys.sorted() { updateActivity(subject, at: effective) }
        case .consentGiven(let e):
            let key = ConsentKey(feature: e.feature, consent: e.consent)
            if givenSince[e.subject]?[key] == nil { givenSince[e.subject, default: [:]][key] = effective }
            if inScope(e.subject, e.feature) && inWindow && actorMatches {
                let kind: AuditReport.EntryKind = e.renews == nil ? .given : .reconsent
                entries.append(.init(seq: event.seq, at: event.at, kind: kind, subject: e.subject, feature: e.feature, consent: e.consent, actor: event.actor, version: e.version, cause: e.renews, evidence: e.evidence))
                if scope.actor != nil { actorSubjects.insert(e.subject) }
                var c = counts[key] ?? AuditReport.Counts(feature: e.feature, consent: e.consent)
                if kind == .given { c.given += 1 } else { c.reconsent += 1 }
                counts[key] = c
            }
        case .subjectErased(let e):
            // Erasure ends whatever the subject had going: activity and given spans close here.
            for (feature, since) in activeSince[e.subject] ?? [:] { intervals.append(.init(subject: e.subject, feature: feature, from: since, until: effective)) }
            activeSince[e.subject] = nil
            for (key, since) in givenSince[e.subject] ?? [:] { spans.append(.init(subject: e.subject, feature: key.feature, consent: key.consent, from: since, until: effective)) }
            givenSince[e.subject] = nil
            erased[e.subject] = event.seq
            if inScope(e.subject, nil) && inWindow && actorMatches {
                entries.append(.init(seq: event.seq, at: event.at, kind: .erased, subject: e.subject, feature: nil, consent: nil, actor: event.actor, version: nil, cause: nil))
                if scope.actor != nil { actorSubjects.insert(e.subject) }
            }
        case .consentRevoked(let e):
            let key = ConsentKey(feature: e.feature, consent: e.consent)
            let since = givenSince[e.subject]?[key]
            givenSince[e.subject]?[key] = nil
            if let since { spans.append(.init(subject: e.subject, feature: e.feature, consent: e.consent, from: since, until: effective)) }
            if inScope(e.subject, e.feature) && inWindow && actorMatches {
                var cause: UInt64?
                var kind = AuditReport.EntryKind.withdrawn
                if case .cascade(let c) = e.reason { (cause, kind) = (c, .cascade) }
                entries.append(.init(seq: event.seq, at: event.at, kind: kind, subject: e.subject, feature: e.feature, consent: e.consent, actor: event.actor, version: nil, cause: cause))
                var c = counts[key] ?? AuditReport.Counts(feature: e.feature, consent: e.consent)
                if kind == .cascade { c.cascadeWithdrawn += 1 } else { c.withdrawn += 1 }
                if scope.actor != nil { actorSubjects.insert(e.subject) }
                counts[key] = c
                if let since { durations[e.feature, default: []].append(effective.millisecondsSinceEpoch - since.millisecondsSinceEpoch) }
                var r = revocations[e.feature] ?? (0, 0)
                r.all += 1
                if kind == .cascade { r.cascades += 1 }
                revocations[e.feature] = r
            }
        }
        if let subject = event.payload.subject, event.seq == event.command.last, erased[subject] == nil { updateActivity(subject, at: effective) }
    }

    /// Opens or closes activity intervals of a subject's features after a change.
    private mutating func updateActivity(_ subject: SubjectRef, at: Timestamp) {
        let state = replay.state(of: subject)
        for feature in replay.catalog.features {
            let active = state.isActive(feature)
            let since = activeSince[subject]?[feature.code]
            if active, since == nil {
                activeSince[subject, default: [:]][feature.code] = at
            } else if !active, let since {
                intervals.append(.init(subject: subject, feature: feature.code, from: since, until: at))
                activeSince[subject]?[feature.code] = nil
            }
        }
    }

    public func finish() -> AuditReport {
        let catalog = replay.catalog
        // An actor in scope narrows every section to the subjects that actor acted on.
        let subjects = replay.subjects.keys.filter { (scope.subject == nil || $0 == scope.subject) && (scope.actor == nil || actorSubjects.contains($0)) }.sorted()
        let inSubjects = Set(subjects)
        // Intervals still open end "now" (nil); keep those that overlap the window.
        var allIntervals = intervals
        for (subject, features) in activeSince {
            for (feature, since) in features { allIntervals.append(.init(subject: subject, feature: feature, from: since, until: nil)) }
        }
        let overlapping = allIntervals.filter { i in
            inSubjects.contains(i.subject) && (scope.feature == nil || i.feature == scope.feature)
                && (scope.end.map { i.from <= $0 } ?? true) && (scope.from.map { f in i.until.map { $0 >= f } ?? true } ?? true)
        }.sorted { ($0.subject, $0.feature, $0.from) < ($1.subject, $1.feature, $1.from) }
        var allSpans = spans
        for (subject, keys) in givenSince {
            for (key, since) in keys { allSpans.append(.init(subject: subject, feature: key.feature, consent: key.consent, from: since, until: nil)) }
        }
        let givenSpans = allSpans.filter { inSubjects.contains($0.subject) && (scope.feature == nil || $0.feature == scope.feature) }
            .sorted { ($0.subject, $0.feature, $0.consent, $0.from) < ($1.subject, $1.feature, $1.consent, $1.from) }
        var outdated: [AuditReport.Outdated] = []
        for subject in subjects where erased[subject] == nil {
            let state = replay.state(of: subject)
            for feature in catalog.features where scope.feature == nil || feature.code == scope.feature {
                for consent in feature.consents where state.isOutdated(feature, consent) {
                    if case .given(let grant)? = state.status(feature: feature.code, consent: consent.code) {
                        outdated.append(.init(subject: subject, feature: feature.code, consent: consent.code, givenVersion: grant.version, currentVersion: consent.version))
                    }
                }
            }
        }
        let order = Dictionary(uniqueKeysWithValues: catalog.features.enumerated().flatMap { fi, f in f.consents.enumerated().map { (ConsentKey(feature: f.code, consent: $0.element.code), fi * 100 + $0.offset) } })
        let countList = counts.values.sorted { (order[ConsentKey(feature: $0.feature, consent: $0.consent)] ?? 0) < (order[ConsentKey(feature: $1.feature, consent: $1.consent)] ?? 0) }
        let withdrawals = catalog.features.filter { scope.feature == nil || $0.code == scope.feature }.map { f -> AuditReport.WithdrawalStats in
            let d = (durations[f.code] ?? []).sorted()
            let median: Int64? = d.isEmpty ? nil : (d.count % 2 == 1 ? d[d.count / 2] : (d[d.count / 2 - 1] + d[d.count / 2]) / 2)
            let r = revocations[f.code] ?? (0, 0)
            return .init(feature: f.code, medianGrantToRevocationMs: median, revocations: r.all, cascades: r.cascades)
        }
        var report = AuditReport(scope: scope, entries: entries, counts: countList, outdated: outdated, intervals: overlapping, givenSpans: givenSpans, withdrawals: withdrawals, subjects: subjects, catalog: catalog)
        report.erased = erased.filter { inSubjects.contains($0.key) }
        report.clock = clock
        return report
    }
}
