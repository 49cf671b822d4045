import ConsentDomain

/// The seed catalogue, built directly (the domain tests do not read JSON).
let seedCatalog: Catalog = {
    func consent(_ code: String, _ required: Bool) -> ConsentDefinition {
        ConsentDefinition(code: code, names: [LocalizedName(language: "en", text: code)], isRequired: required, link: "https://example.org/\(code)", version: "1.0")
    }
    func feature(_ code: Int, _ key: String) -> Feature {
        Feature(code: code, key: key, names: [LocalizedName(language: "en", text: key)], consents: [consent("required", true), consent("optional-a", false), consent("optional-b", false)])
    }
    return try! Catalog(features: [feature(1, "medication-management"), feature(2, "timeline")])
}()

let mm = "medication-management"
let tl = "timeline"

/// A ledger reduced to the domain: decide, then replay what was decided.
struct DomainLedger {
    var replay = LedgerReplay(catalog: seedCatalog)
    var now = Timestamp(millisecondsSinceEpoch: 1_768_467_600_000)
    var events: [LedgerEvent] = []

    init() {
        let genesis = LedgerEvent(seq: 0, at: now, actor: "test", command: CommandSpan(first: 0, size: 1), payload: .ledgerCreated(LedgerCreated(ledgerName: "t", catalogHash: "00", publicKey: "00")))
        try! replay.apply(genesis)
        events.append(genesis)
    }

    func state(_ subject: String) -> SubjectState { replay.state(of: SubjectRef(subject)) }

    func listing(_ subject: String) -> ConsentListing { ConsentListing(state: state(subject), catalog: seedCatalog) }

    @discardableResult
    mutating func run(_ subject: String, _ request: ConsentRequest, actor: String = "self", evidence: GrantEvidence = GrantEvidence()) throws(CommandRejection) -> CommandOutcome {
        now = Timestamp(millisecondsSinceEpoch: now.millisecondsSinceEpoch + 60_000)
        let outcome = try ConsentRules.decide(request, subject: SubjectRef(subject), state: state(subject), catalog: seedCatalog, actor: actor, at: now, nextSeq: replay.lastSeq! + 1, evidence: evidence)
        for event in outcome.events {
            try! replay.apply(event)
            events.append(event)
        }
        return outcome
    }

    mutating func give(_ subject: String, _ feature: String, _ consents: String...) throws(CommandRejection) {
        try run(subject, .give(feature: feature, consents: consents))
    }

    mutating func revoke(_ subject: String, _ feature: String, _ consent: String) throws(CommandRejection) {
        try run(subject, .revoke(feature: feature, consent: consent))
    }

    func given(_ subject: String, _ feature: String) -> Set<String> {
        let f = seedCatalog.feature(named: feature)!
        return Set(f.consents.map(\.code).filter { state(subject).isGiven(feature: f.code, consent: $0) })
    }

    func isActive(_ subject: String, _ feature: String) -> Bool {
        state(subject).isActive(seedCatalog.feature(named: feature)!)
    }
}
