import ConsentDomain
import Testing

/// `revoke` with several consents: one atomic command, each consent its own event, the named
/// optional consents first as the subject's own withdrawals, then the required one with its
/// cascade over the optional consents still given.
@Suite struct RevokeSeveralTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let given: [String]
        let revoked: [String]
        /// (consent, "withdrawn" or "cascade") in event order.
        let expected: [(String, String)]
        var testDescription: String { "given \(given), revoke \(revoked)" }
    }

    static let cases: [Case] = [
        Case(given: ["required", "optional-a", "optional-b"], revoked: ["required", "optional-a"],
             expected: [("optional-a", "withdrawn"), ("required", "withdrawn"), ("optional-b", "cascade")]),
        Case(given: ["required", "optional-a", "optional-b"], revoked: ["optional-b", "optional-a"],
             expected: [("optional-a", "withdrawn"), ("optional-b", "withdrawn")]),
        Case(given: ["required", "optional-a", "optional-b"], revoked: ["optional-a", "optional-b", "required"],
             expected: [("optional-a", "withdrawn"), ("optional-b", "withdrawn"), ("required", "withdrawn")]),
        Case(given: ["required", "optional-a"], revoked: ["required", "optional-b"],
             expected: [("required", "withdrawn"), ("optional-a", "cascade")]),
        Case(given: ["required"], revoked: ["optional-a", "optional-a"], expected: []),
        Case(given: ["required", "optional-a"], revoked: ["optional-a", "optional-a"], expected: [("optional-a", "withdrawn")]),
    ]

    @Test(arguments: cases)
    func revokeSeveralConsentsIsOneCommandInRuleOrder(_ c: Case) throws {
        var ledger = DomainLedger()
        try ledger.run("alice", .give(feature: tl, consents: c.given))
        let outcome = try ledger.run("alice", .revoke(feature: tl, consents: c.revoked))
        let got = outcome.events.map { event -> (String, String) in
            guard case .consentRevoked(let r) = event.payload else { return ("?", "?") }
            if case .cascade(let cause) = r.reason {
                #expect(outcome.events.contains { $0.seq == cause }, "the cause is in the same command")
                return (r.consent, "cascade")
            }
            return (r.consent, "withdrawn")
        }
        #expect(got.map(\.0) == c.expected.map(\.0))
        #expect(got.map(\.1) == c.expected.map(\.1))
        #expect(Set(outcome.events.map(\.command)).count <= 1, "one command, one span")
        if let span = outcome.events.first?.command { #expect(span.size == outcome.events.count) }
        // Every named consent is withdrawn afterwards, and R4 holds.
        for code in c.revoked { #expect(!ledger.given("alice", tl).contains(code)) }
        if c.revoked.contains("required") { #expect(ledger.given("alice", tl).isEmpty) }
    }

    @Test func revokeSeveralRefusesAnUnknownConsentAndAppendsNothing() {
        var ledger = DomainLedger()
        try? ledger.give("alice", tl, "required", "optional-a")
        let before = ledger.events.count
        #expect(throws: CommandRejection.self) { try ledger.run("alice", .revoke(feature: tl, consents: ["optional-a", "optional-z"])) }
        #expect(throws: CommandRejection.self) { try ledger.run("alice", .revoke(feature: tl, consents: [])) }
        #expect(ledger.events.count == before)
    }
}
