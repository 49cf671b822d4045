import ConsentDomain
import Testing

/// Replay re-checks the rules: a log holding what the rules forbid does not replay.
@Suite struct ReplayCheckTests {
    let subject = SubjectRef("s")

    func event(_ seq: UInt64, _ payload: EventPayload, command: CommandSpan? = nil, at: Int64 = 1_768_467_700_000) -> LedgerEvent {
        LedgerEvent(seq: seq, at: Timestamp(millisecondsSinceEpoch: at), actor: "x", command: command ?? CommandSpan(first: seq, size: 1), payload: payload)
    }

    func given(_ consent: String, feature: Int = 1) -> EventPayload {
        .consentGiven(ConsentGiven(subject: subject, feature: feature, consent: consent, version: "1.0"))
    }

    func revoked(_ consent: String, _ reason: RevocationReason = .withdrawn) -> EventPayload {
        .consentRevoked(ConsentRevoked(subject: subject, feature: 1, consent: consent, reason: reason))
    }

    func replay(_ events: [LedgerEvent]) -> ReplayViolation? {
        var r = DomainLedger().replay
        do {
            for e in events { try r.apply(e) }
            return nil
        } catch {
            return error
        }
    }

    @Test func optionalGivenWithoutRequiredIsRefused() {
        #expect(replay([event(1, given("optional-a"))])?.problem.contains("rule R2") == true)
    }

    @Test func givenTwiceIsRefused() {
        #expect(replay([event(1, given("required")), event(2, given("required"))])?.seq == 2)
    }

    @Test func revokingWithheldIsRefused() {
        #expect(replay([event(1, revoked("required"))])?.problem.contains("withheld") == true)
    }

    @Test func r4MissingCascadeIsRefused() {
        let span = CommandSpan(first: 3, size: 1)
        let v = replay([event(1, given("required")), event(2, given("optional-a")), event(3, revoked("required"), command: span)])
        #expect(v?.problem.contains("cascade missing") == true)
    }

    @Test func r4CascadeMustNameARequiredRevocationInTheSameCommand() {
        let v = replay([event(1, given("required")), event(2, given("optional-a")), event(3, revoked("optional-a", .cascade(cause: 1)))])
        #expect(v?.problem.contains("cause") == true)
    }

    @Test func sequenceGapsAndTimeTravelAreRefused() {
        #expect(replay([event(2, given("required"))])?.problem.contains("expected") == true)
        #expect(replay([event(1, given("required"), at: 500)])?.problem.contains("earlier") == true)
    }

    @Test func commandSpansMustBeComplete() {
        let span = CommandSpan(first: 1, size: 2)
        let v = replay([event(1, given("required"), command: span), event(2, given("required", feature: 2))])
        #expect(v?.problem.contains("incomplete") == true)
        var r = DomainLedger().replay
        try? r.apply(event(1, given("required"), command: span))
        #expect(r.incompleteCommand == span)
    }

    @Test func aValidCascadeReplays() {
        let span = CommandSpan(first: 3, size: 2)
        #expect(replay([event(1, given("required")), event(2, given("optional-a")), event(3, revoked("required"), command: span), event(4, revoked("optional-a", .cascade(cause: 3)), command: span)]) == nil)
    }
}

@Suite struct CatalogValidationTests {
    func consent(_ code: String, _ required: Bool, link: String = "https://example.org/x") -> ConsentDefinition {
        ConsentDefinition(code: code, names: [LocalizedName(language: "en", text: code)], isRequired: required, link: link, version: "1")
    }

    func feature(_ code: Int, _ key: String, _ consents: [ConsentDefinition]) -> Feature {
        Feature(code: code, key: key, names: [LocalizedName(language: "en", text: key)], consents: consents)
    }

    @Test func duplicateFeatureCodeNamesTheEntry() {
        #expect(throws: CatalogError(entry: "features[1] (b)", problem: "feature code 1 is already used by features[0]")) {
            try Catalog(features: [feature(1, "a", [consent("r", true)]), feature(1, "b", [consent("r", true)])])
        }
    }

    @Test func duplicateConsentCodeNamesTheEntry() {
        #expect(throws: CatalogError(entry: "features[0] (a) consent 'r'", problem: "consent code 'r' appears twice in feature 'a'")) {
            try Catalog(features: [feature(1, "a", [consent("r", true), consent("r", false)])])
        }
    }

    @Test func featureWithoutRequiredConsentIsRefused() {
        #expect(throws: CatalogError.self) { try Catalog(features: [feature(1, "a", [consent("o", false)])]) }
    }

    @Test func badLinkAndEmptyCatalogAreRefused() {
        #expect(throws: CatalogError.self) { try Catalog(features: [feature(1, "a", [consent("r", true, link: "ftp://x")])]) }
        #expect(throws: CatalogError.self) { try Catalog(features: []) }
    }
}

@Suite struct TimestampTests {
    @Test func canonicalRoundTrip() {
        let t = Timestamp(rfc3339: "2026-11-21T23:59:58.5+01:00")!
        #expect(t.rfc3339 == "2026-11-21T22:59:58.500Z")
        #expect(Timestamp(canonical: t.rfc3339) == t)
        #expect(Timestamp(canonical: "2026-11-21T22:59:58.5Z") == nil, "not canonical")
    }

    @Test func dateMeansEndOfDay() {
        #expect(Timestamp(rfc3339: "2024-02-29")?.rfc3339 == "2024-02-29T23:59:59.999Z")
        #expect(Timestamp(rfc3339: "2023-02-29") == nil)
        #expect(Timestamp(rfc3339: "yesterday") == nil)
    }

    /// Times at the edges of each field, and of the years written digit by digit (0 to 9999;
    /// the years outside them are written as before).
    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (951_782_400_001, "2000-02-29T00:00:00.001Z"),
        (1_768_467_700_000, "2026-01-15T09:01:40.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
        (-62_135_596_800_001, "0000-12-31T23:59:59.999Z"),
        (253_402_300_800_000, "10000-01-01T00:00:00.000Z"),
    ])
    func aTimeIsWrittenWithEveryFieldPadded(_ ms: Int64, _ text: String) {
        #expect(Timestamp(millisecondsSinceEpoch: ms).rfc3339 == text)
    }

    @Test func calendarArithmeticAgreesOverCenturies() {
        for ms in stride(from: Int64(-2_208_988_800_000), to: 4_102_444_800_000, by: 86_400_000 * 37 + 3_723_456) {
            let t = Timestamp(millisecondsSinceEpoch: ms)
            #expect(Timestamp(canonical: t.rfc3339) == t)
        }
    }
}

/// A subject's state keeps its consents in a short list (for memory); it must still compare and
/// hash as the set of consents it holds, whatever order they were given in.
@Suite struct SubjectStateStorageTests {
    @Test func statesCompareByTheirConsentsWhateverTheOrder() throws {
        var ledger = DomainLedger()
        try ledger.give("a", tl, "required")
        try ledger.give("a", mm, "required")
        try ledger.give("b", mm, "required")
        try ledger.give("b", tl, "required")
        let a = ledger.state("a"), b = ledger.state("b")
        #expect(Set(a.consents.keys) == Set(b.consents.keys))
        #expect(Set(a.consents.keys) == [ConsentKey(feature: 1, consent: "required"), ConsentKey(feature: 2, consent: "required")])
        // Same consents, other grants (seq and time): not equal.
        #expect(a != b)
        // A second replay of the same events gives an equal state, with an equal hash.
        var replayed = LedgerReplay(catalog: seedCatalog)
        for event in ledger.events { try replayed.apply(event) }
        let again = replayed.state(of: SubjectRef("a"))
        #expect(a == again && a.hashValue == again.hashValue)
        #expect(a.status(feature: 2, consent: "required")?.isGiven == true && a.status(feature: 2, consent: "optional-a") == nil)
    }

    @Test func aGrantKeepsItsEvidenceAndAnEmptyOneStaysEmpty() {
        var grant = Grant(validFrom: Timestamp(millisecondsSinceEpoch: 0), version: "1.0", seq: 3)
        #expect(grant.evidence.isEmpty)
        let evidence = GrantEvidence(channel: .paper, noticeLanguage: "de", reference: "scan 7")
        grant.evidence = evidence
        #expect(grant.evidence == evidence)
        let copy = grant
        grant.evidence = GrantEvidence()
        #expect(grant.evidence.isEmpty && copy.evidence == evidence, "a copy keeps its own evidence")
        #expect(grant != copy && grant == Grant(validFrom: Timestamp(millisecondsSinceEpoch: 0), version: "1.0", seq: 3))
    }
}

/// A subject reference holds a pseudonym as 16 bytes and anything else as text; it must behave
/// as its text does either way.
@Suite struct SubjectRefTests {
    static let texts = [
        "ef9544eb651f53811a42d5ef56afc9ae", "00000000000000000000000000000000", "ffffffffffffffffffffffffffffffff",
        "0f9544eb651f53811a42d5ef56afc9ae", "ef9544eb651f53811a42d5ef56afc9af",
        "EF9544EB651F53811A42D5EF56AFC9AE", "ef9544eb651f53811a42d5ef56afc9a", "ef9544eb651f53811a42d5ef56afc9aeb",
        "gf9544eb651f53811a42d5ef56afc9ae", "alice", "", "ef9544eb651f5381 1a42d5ef56afc9a",
    ]

    @Test(arguments: texts)
    func aReferenceKeepsItsTextAndIsAPseudonymOnlyAs32LowercaseHexDigits(_ text: String) {
        let ref = SubjectRef(text)
        #expect(ref.value == text && ref.description == text)
        let isPseudonym = text.utf8.count == 32 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        #expect((ref.pseudonymBytes != nil) == isPseudonym)
        if let bytes = ref.pseudonymBytes {
            #expect(bytes.map { String($0 >> 4, radix: 16) + String($0 & 0xF, radix: 16) }.joined() == text)
            #expect(bytes.withUnsafeBytes { SubjectRef(pseudonymBytes: $0) } == ref)
            #expect(bytes.withUnsafeBytes { SubjectRef(pseudonymBytes: $0) }.value == text)
        }
        let fromBytes = Array(text.utf8).withUnsafeBufferPointer { SubjectRef(pseudonymHex: $0) }
        #expect(fromBytes == (isPseudonym ? ref : nil))
    }

    @Test func referencesCompareAndOrderAsTheirTexts() {
        let refs = Self.texts.map(SubjectRef.init)
        for a in refs {
            for b in refs {
                #expect((a == b) == (a.value == b.value), "\(a) == \(b)")
                #expect((a < b) == (a.value < b.value), "\(a) < \(b)")
                if a == b { #expect(a.hashValue == b.hashValue) }
            }
        }
    }
}

/// The rules compare actors and policy versions as bytes: two strings Unicode calls equal but
/// that are different bytes are different versions (`==` would call them the same).
@Suite struct SameBytesTests {
    @Test(arguments: [
        ("1.0", "1.0", true),
        ("1.0", "1.0 ", false),
        ("", "", true),
        ("caf\u{E9}", "cafe\u{301}", false),
        ("a\u{301}\u{316}", "a\u{316}\u{301}", false),
        ("a long policy version name, past fifteen bytes", "a long policy version name, past fifteen bytes", true),
        ("a long policy version name, past fifteen bytes", "a long policy version name, past fifteen byteS", false),
    ])
    func stringsAreTheSameOnlyWhenTheirBytesAre(_ case_: (String, String, Bool)) {
        #expect(case_.0.hasSameBytes(as: case_.1) == case_.2)
        #expect(case_.1.hasSameBytes(as: case_.0) == case_.2)
        #expect(case_.0.hasSameBytes(as: case_.1) == Array(case_.0.utf8).elementsEqual(Array(case_.1.utf8)))
    }

    /// A string that is not stored as UTF-8 (made from UTF-16, as Foundation may give one) is
    /// compared by its bytes all the same.
    @Test func aStringStoredOtherwiseIsComparedByItsBytes() {
        let utf16 = String(decoding: Array("cafe\u{301} 1.0".utf16), as: UTF16.self)
        #expect(utf16.hasSameBytes(as: "cafe\u{301} 1.0"))
        #expect(!utf16.hasSameBytes(as: "caf\u{E9} 1.0"))
    }
}
