import ConsentDomain
import Testing

/// Evidence on a grant (effective time, channel, notice language, reference): recorded on the
/// events, checked by the rules and by replay, and never an input to the rules themselves.
@Suite struct GrantEvidenceTests {
    let minute: Int64 = 60_000

    @Test func aGrantKeepsItsEvidenceAndItsRecordedTime() throws {
        var ledger = DomainLedger()
        let agreed = Timestamp(millisecondsSinceEpoch: ledger.now.millisecondsSinceEpoch + 30_000)
        let evidence = GrantEvidence(effectiveAt: agreed, channel: .paper, noticeLanguage: "de", reference: "scan-0042")
        let outcome = try ledger.run("alice", .give(feature: tl, consents: ["required", "optional-a"]), evidence: evidence)
        #expect(outcome.events.count == 2)
        for event in outcome.events {
            guard case .consentGiven(let g) = event.payload else { Issue.record("not a grant"); continue }
            #expect(g.evidence == evidence)
            #expect(event.at == ledger.now)
        }
        guard case .given(let grant)? = ledger.state("alice").status(feature: 2, consent: "optional-a") else { Issue.record("not given"); return }
        #expect(grant.validFrom == ledger.now && grant.agreedAt == agreed)
    }

    @Test func anEffectiveTimeInTheFutureIsRefused() throws {
        var ledger = DomainLedger()
        let later = Timestamp(millisecondsSinceEpoch: ledger.now.millisecondsSinceEpoch + 10 * minute)
        #expect(throws: CommandRejection.self) {
            try ledger.run("alice", .give(feature: tl, consents: ["required"]), evidence: GrantEvidence(effectiveAt: later))
        }
        #expect(ledger.state("alice").lastSeq == nil)
    }

    /// A backdated grant cannot slip in before something already recorded about the feature, so
    /// it can never appear to precede a withdrawal or cascade that the log puts before it.
    @Test func anEffectiveTimeBeforeTheSubjectsPreviousEventAboutTheFeatureIsRefused() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required", "optional-a")
        let granted = ledger.now
        try ledger.revoke("alice", tl, "required")
        let withdrawn = ledger.now
        let beforeWithdrawal = Timestamp(millisecondsSinceEpoch: withdrawn.millisecondsSinceEpoch - 1)
        #expect(beforeWithdrawal > granted)
        #expect(throws: CommandRejection.self) {
            try ledger.run("alice", .give(feature: tl, consents: ["required"]), evidence: GrantEvidence(effectiveAt: beforeWithdrawal))
        }
        // The withdrawal's own time is allowed, and so is any time for another feature.
        try ledger.run("alice", .give(feature: tl, consents: ["required"]), evidence: GrantEvidence(effectiveAt: withdrawn))
        try ledger.run("alice", .give(feature: mm, consents: ["required"]), evidence: GrantEvidence(effectiveAt: Timestamp(millisecondsSinceEpoch: 0)))
    }

    @Test func evidenceOnAWithdrawalIsRefused() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required")
        #expect(throws: CommandRejection.self) {
            try ledger.run("alice", .revoke(feature: tl, consent: "required"), evidence: GrantEvidence(channel: .phone))
        }
        #expect(ledger.given("alice", tl) == ["required"])
    }

    @Test(arguments: [
        ("de", true), ("en-GB", true), ("zh-Hant-TW", true), ("sr-Latn", true), ("de-CH-1996", true),
        ("", false), ("d", false), ("de_DE", false), ("en-", false), ("-en", false), ("e1", false), ("toolongprimary", false), ("en-toolongsub", false), ("dé", false),
    ])
    func noticeLanguageIsABCP47Tag(tag: String, valid: Bool) {
        #expect(GrantEvidence.isLanguageTag(tag) == valid)
        #expect((GrantEvidence(noticeLanguage: tag).problem == nil) == valid)
    }

    @Test(arguments: [
        ("scan-0042", true), ("", false), (" scan", false), ("scan ", false), ("line\nbreak", false), ("esc\u{1B}[31m", false), ("c1\u{85}", false),
        (String(repeating: "x", count: GrantEvidence.maxReferenceBytes), true), (String(repeating: "x", count: GrantEvidence.maxReferenceBytes + 1), false),
    ])
    func evidenceReferencesAreCheckedText(reference: String, valid: Bool) {
        #expect((GrantEvidence(reference: reference).problem == nil) == valid)
    }

    /// Replay checks what the rules check, so a log written by other software cannot carry an
    /// effective time after the recording or before the subject's previous event.
    @Test func replayRefusesAnEffectiveTimeAfterTheRecordedTime() throws {
        var ledger = DomainLedger()
        let at = Timestamp(millisecondsSinceEpoch: ledger.now.millisecondsSinceEpoch + minute)
        let forged = LedgerEvent(
            seq: 1, at: at, actor: "self", command: CommandSpan(first: 1, size: 1),
            payload: .consentGiven(ConsentGiven(subject: SubjectRef("alice"), feature: 2, consent: "required", version: "1.0", evidence: GrantEvidence(effectiveAt: Timestamp(millisecondsSinceEpoch: at.millisecondsSinceEpoch + 1)))))
        #expect(throws: ReplayViolation.self) { try ledger.replay.apply(forged) }
    }

    @Test func replayRefusesAnEffectiveTimeBeforeTheSubjectsPreviousEventAboutTheFeature() throws {
        var ledger = DomainLedger()
        try ledger.give("alice", tl, "required")
        try ledger.revoke("alice", tl, "required")
        let withdrawn = ledger.now
        let seq = ledger.replay.lastSeq! + 1
        let forged = LedgerEvent(
            seq: seq, at: Timestamp(millisecondsSinceEpoch: withdrawn.millisecondsSinceEpoch + minute), actor: "self", command: CommandSpan(first: seq, size: 1),
            payload: .consentGiven(ConsentGiven(subject: SubjectRef("alice"), feature: 2, consent: "required", version: "1.0", evidence: GrantEvidence(effectiveAt: Timestamp(millisecondsSinceEpoch: withdrawn.millisecondsSinceEpoch - 1)))))
        #expect(throws: ReplayViolation.self) { try ledger.replay.apply(forged) }
    }
}

/// Regression: a space hidden in a larger character (a combining mark after it, or a prepended
/// character before it) was not seen as a leading or trailing space, so such a reference was
/// written although the format refuses it.
@Suite struct EvidenceSpaceRegressionTests {
    @Test(arguments: [" \u{301}abc", "abc\u{600} "])
    func aSpaceInsideALargerCharacterIsStillASpace(reference: String) {
        #expect(GrantEvidence(reference: reference).problem == "the evidence reference has leading or trailing spaces")
    }
}
