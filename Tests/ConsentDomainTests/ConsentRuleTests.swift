import ConsentDomain
import Testing

/// One test per rule of `docs/consent-rules.md`, named after it.
@Suite struct ConsentRuleTests {
    @Test func r1StartNewSubjectHasNoConsentsAndEveryFeatureIsOff() {
        let ledger = DomainLedger()
        let listing = ledger.listing("alice")
        #expect(listing.isEmpty)
        #expect(listing.activeFeatures.isEmpty)
        #expect(listing.features.allSatisfy { $0.consents.allSatisfy { $0.status == nil } })
    }

    @Test func r2ActivationGateRequiresTheRequiredConsent() throws {
        var ledger = DomainLedger()
        #expect(throws: CommandRejection.self) { try ledger.give("alice", mm, "optional-a") }
        #expect(ledger.events.count == 1, "a refused command appends nothing")
        try ledger.give("alice", mm, "required", "optional-b")
        #expect(ledger.isActive("alice", mm))
        #expect(ledger.given("alice", mm) == ["required", "optional-b"])
    }

    @Test func r2OptionalConsentsAreChosenOnTheActivationScreen() throws {
        var ledger = DomainLedger()
        let outcome = try ledger.run("alice", .give(feature: tl, consents: ["optional-b", "required", "optional-a"]))
        // Required first, so a replay sees the feature active before its optional consents.
        #expect(outcome.events.map { consentCode($0) } == ["required", "optional-a", "optional-b"])
        #expect(Set(outcome.events.map(\.command)).count == 1, "one command, one span")
    }

    @Test func r3ActiveFeaturesAreThoseWithAllRequiredConsentsGiven() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required")
        #expect(ledger.listing("alice").activeFeatures.map(\.feature.key) == [tl])
        try ledger.give("alice", mm, "required")
        #expect(ledger.listing("alice").activeFeatures.map(\.feature.key) == [mm, tl])
    }

    @Test func r4CascadeRevokingRequiredRevokesTheOptionalOnes() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", mm, "required", "optional-a", "optional-b")
        try ledger.give("alice", tl, "required", "optional-a")
        let outcome = try ledger.run("alice", .revoke(feature: mm, consent: "required"))
        #expect(outcome.events.count == 3)
        let cause = outcome.events[0].seq
        for cascaded in outcome.events.dropFirst() {
            guard case .consentRevoked(let r) = cascaded.payload else { Issue.record("not a revocation"); continue }
            #expect(r.reason == .cascade(cause: cause))
        }
        #expect(ledger.given("alice", mm).isEmpty)
        #expect(!ledger.isActive("alice", mm))
        #expect(ledger.given("alice", tl) == ["required", "optional-a"], "the other feature is untouched")
    }

    @Test func r4RevokingAnOptionalConsentRevokesOnlyThatOne() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required", "optional-a", "optional-b")
        let outcome = try ledger.run("alice", .revoke(feature: tl, consent: "optional-a"))
        #expect(outcome.events.count == 1)
        #expect(ledger.given("alice", tl) == ["required", "optional-b"])
        #expect(ledger.isActive("alice", tl))
    }

    @Test func r4CascadeHoldsForEveryFeature() throws {
        for feature in seedCatalog.features {
            var ledger = DomainLedger()
            try ledger.give("bob", feature.key, "required", "optional-a", "optional-b")
            try ledger.revoke("bob", feature.key, "required")
            #expect(ledger.given("bob", feature.key).isEmpty, "\(feature.key)")
        }
    }

    @Test func r5ReConsentOnlyByActivatingAgain() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", mm, "required", "optional-a")
        try ledger.revoke("alice", mm, "required")
        #expect(throws: CommandRejection.ruleViolation(rule: "R2", message: "'medication-management' is not active; its required consent 'required' must be given first or in the same command")) {
            try ledger.give("alice", mm, "optional-a")
        }
        try ledger.give("alice", mm, "required")
        #expect(ledger.isActive("alice", mm))
        // Decided (rules file, "what the seed does not say"): optional consents do not come back.
        #expect(ledger.given("alice", mm) == ["required"])
    }

    @Test func r6GiveOneWithheldConsentOfAnActiveFeature() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required")
        let outcome = try ledger.run("alice", .give(feature: tl, consents: ["optional-b"]))
        #expect(outcome.events.count == 1)
        #expect(ledger.given("alice", tl) == ["required", "optional-b"])
    }

    @Test func r7ListingIsGroupedByFeatureRequiredFirstWithDates() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required", "optional-b")
        let listing = ledger.listing("alice")
        #expect(listing.features.map(\.feature.key) == [mm, tl])
        for feature in listing.features {
            let required = feature.consents.map(\.definition.isRequired)
            #expect(required == required.sorted { $0 && !$1 }, "required first")
        }
        let timeline = listing.features[1]
        #expect(timeline.consents.map(\.isGiven) == [true, false, true])
        #expect(timeline.consents[0].validFrom == ledger.now)
        #expect(timeline.consents[1].validFrom == nil)
        #expect(ledger.now.dayMonthYear == "15.01.2026", "dd.MM.yyyy as in the app")
    }

    @Test func r8EmptyStateWhenNothingIsGiven() throws {
        var ledger = DomainLedger()
        #expect(ledger.listing("alice").isEmpty)
        try ledger.give("alice", mm, "required")
        #expect(!ledger.listing("alice").isEmpty)
        try ledger.revoke("alice", mm, "required")
        #expect(ledger.listing("alice").isEmpty, "all withdrawn: empty again")
    }

    @Test func r9LogicApiAnswersWithTheUpdatedConsents() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", mm, "required", "optional-a")
        // Consents of one feature, by code or key.
        #expect(seedCatalog.feature(named: "1") == seedCatalog.feature(named: mm))
        let mmLine = ledger.listing("alice").features.first { $0.feature.code == 1 }!
        #expect(mmLine.consents.filter(\.isGiven).map(\.definition.code) == ["required", "optional-a"])
        // Consents of the active features.
        #expect(ledger.listing("alice").activeFeatures.map(\.feature.code) == [1])
        // Activate a set of ids, revoke one id: each call's outcome carries its events.
        let revoked = try ledger.run("alice", .revoke(feature: "1", consent: "optional-a"))
        #expect(revoked.events.count == 1)
    }

    @Test func withheldKeepsNeverGivenApartFromWithdrawn() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", mm, "required", "optional-a")
        try ledger.revoke("alice", mm, "optional-a")
        let state = ledger.state("alice")
        #expect(state.status(feature: 1, consent: "optional-b") == nil, "never given")
        guard case .withdrawn(let w)? = state.status(feature: 1, consent: "optional-a") else {
            Issue.record("optional-a should be withdrawn")
            return
        }
        #expect(w.cause == nil)
    }

    @Test func givingAGivenConsentOrRevokingAWithheldOneAppendsNothing() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", mm, "required")
        let again = try ledger.run("alice", .give(feature: mm, consents: ["required"]))
        #expect(again.events.isEmpty)
        #expect(again.notes.first?.contains("already given") == true)
        let withheld = try ledger.run("alice", .revoke(feature: mm, consent: "optional-b"))
        #expect(withheld.events.isEmpty)
        #expect(withheld.notes.first?.contains("never given") == true)
    }

    @Test func unknownFeatureAndConsentAreRefusedWithTheKnownNames() {
        var ledger = DomainLedger()
        #expect(throws: CommandRejection.unknownFeature("diary", known: ["medication-management (1)", "timeline (2)"])) {
            try ledger.give("alice", "diary", "required")
        }
        #expect(throws: CommandRejection.unknownConsent("optional-c", feature: tl, known: ["required", "optional-a", "optional-b"])) {
            try ledger.give("alice", tl, "optional-c")
        }
    }

    private func consentCode(_ event: LedgerEvent) -> String {
        switch event.payload {
        case .consentGiven(let e): return e.consent
        case .consentRevoked(let e): return e.consent
        case .ledgerCreated, .catalogPublished, .subjectErased, .keyRotated, .keyRevoked, .clockCorrected: return ""
        }
    }
}
