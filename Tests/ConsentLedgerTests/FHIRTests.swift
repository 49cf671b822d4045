import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat

/// The FHIR R5 mapping (Spec/fhir-mapping.md): a Patient per subject that every Consent
/// references, R5's permit/deny semantics for provisions, typed extensions, both Bundle types.
@Suite struct FHIRTests {
    static func resources(_ bundle: JSONDocument) throws -> [[String: Any]] {
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bundle.canonicalBytes)) as? [String: Any])
        return (json["entry"] as? [[String: Any]] ?? []).compactMap { $0["resource"] as? [String: Any] }
    }

    static func consent(_ resources: [[String: Any]], feature: String) -> [String: Any]? {
        resources.first { r in
            ((r["category"] as? [[String: Any]])?.first?["coding"] as? [[String: Any]])?.first?["code"] as? String == feature
        }
    }

    static func provisionCodes(_ consent: [String: Any]?) -> [String] {
        (consent?["provision"] as? [[String: Any]] ?? []).compactMap { (($0["code"] as? [[String: Any]])?.first?["coding"] as? [[String: Any]])?.first?["code"] as? String }
    }

    /// An active feature permits by default; each optional consent not given is a deny exception.
    /// An inactive feature denies, with no exception (nothing under it is permitted).
    @Test func provisionsFollowR5PermitDenySemantics() throws {
        let (ledger, path) = try ReportTests.scenario("fhir-provisions")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required", "optional-b"])))
        let carol = try Self.resources(try ledger.fhirBundle(for: "carol"))
        let timeline = Self.consent(carol, feature: "timeline")
        #expect(timeline?["status"] as? String == "active" && timeline?["decision"] as? String == "permit")
        #expect(Self.provisionCodes(timeline) == ["timeline/optional-a"], "the one optional consent not given is the exception")
        let medication = Self.consent(carol, feature: "medication-management")
        #expect(medication?["status"] as? String == "inactive" && medication?["decision"] as? String == "deny")
        #expect(medication?["provision"] == nil, "a deny with nothing permitted has no exceptions")
        // bob's Timeline required consent is outdated (given under 1.0, now 2.0): the feature is
        // inactive, so the decision is deny with no exception.
        let bob = try Self.resources(try ledger.fhirBundle(for: "bob"))
        let bobTimeline = Self.consent(bob, feature: "timeline")
        #expect(bobTimeline?["decision"] as? String == "deny" && bobTimeline?["provision"] == nil)
    }

    @Test func everyConsentReferencesItsPatientAndCarriesTypedExtensions() throws {
        let (ledger, path) = try ReportTests.scenario("fhir-patient")
        defer { removeFolder(path) }
        let bundle = try ledger.fhirBundle(for: "alice")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bundle.canonicalBytes)) as? [String: Any])
        let entries = try #require(json["entry"] as? [[String: Any]])
        let patient = try #require(entries.first)
        #expect((patient["resource"] as? [String: Any])?["resourceType"] as? String == "Patient")
        let patientURL = try #require(patient["fullUrl"] as? String)
        for entry in entries.dropFirst() {
            let consent = try #require(entry["resource"] as? [String: Any])
            let subject = consent["subject"] as? [String: Any]
            #expect(subject?["reference"] as? String == patientURL)
            #expect((subject?["identifier"] as? [String: Any])?["value"] as? String == "alice")
            let id = try #require(consent["id"] as? String)
            #expect(id.count <= 64 && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") })
            let extensions = consent["extension"] as? [[String: Any]] ?? []
            #expect(extensions.allSatisfy { $0["valueString"] == nil }, "no untyped valueString extensions at the top")
            let states = extensions.filter { ($0["url"] as? String)?.hasSuffix("/consent-state") == true }
            #expect(states.count == 3)
            for state in states {
                let parts = Dictionary(uniqueKeysWithValues: (state["extension"] as? [[String: Any]] ?? []).map { ($0["url"] as! String, $0) })
                let value = parts["state"]?["valueCode"] as? String
                #expect(["given", "outdated", "withheld"].contains(value))
                #expect((value == "withheld") == (parts["reason"] != nil), "a withheld consent says why, and only then")
            }
            let checkpoint = extensions.first { ($0["url"] as? String)?.hasSuffix("/ledger-checkpoint") == true }
            let size = (checkpoint?["extension"] as? [[String: Any]])?.first { $0["url"] as? String == "size" }?["valueInteger64"] as? String
            #expect(size.flatMap { Int64($0) } == Int64(try ledger.verify().events), "integer64 is a JSON string in R5")
        }
        #expect(try ledger.fhirBundle(for: "alice").canonicalBytes == bundle.canonicalBytes, "deterministic")
    }

    @Test func aTransactionOfEverySubjectHasARequestPerEntry() throws {
        let (ledger, path) = try ReportTests.scenario("fhir-all")
        defer { removeFolder(path) }
        let bundle = try ledger.fhirBundleOfAllSubjects(type: .transaction)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bundle.canonicalBytes)) as? [String: Any])
        #expect(json["type"] as? String == "transaction")
        let entries = try #require(json["entry"] as? [[String: Any]])
        let patients = entries.filter { ($0["resource"] as? [String: Any])?["resourceType"] as? String == "Patient" }
        #expect(patients.compactMap { (($0["resource"] as? [String: Any])?["identifier"] as? [[String: Any]])?.first?["value"] as? String } == ["alice", "bob"], "subjects by id")
        #expect(entries.count == 2 * 3)
        for entry in entries {
            let request = try #require(entry["request"] as? [String: Any])
            let isPatient = (entry["resource"] as? [String: Any])?["resourceType"] as? String == "Patient"
            #expect(request["method"] as? String == (isPatient ? "POST" : "PUT"))
            if isPatient { #expect((request["ifNoneExist"] as? String)?.hasPrefix("identifier=") == true) }
        }
        #expect(Set(entries.compactMap { $0["fullUrl"] as? String }).count == entries.count, "fullUrl unique (bdl-7)")
    }

    /// FHIR search gives `\\`, `|`, `,` and `$` a meaning in a token, so a subject id holding one
    /// is escaped with a backslash before percent-encoding; unescaped, `a|b` would search for
    /// value `b` in system `…subject|a`.
    @Test(arguments: [
        ("alice", "alice"),
        ("a|b", "a%5C%7Cb"),
        ("a,b", "a%5C%2Cb"),
        ("a$b", "a%5C%24b"),
        ("a\\b", "a%5C%5Cb"),
        ("José", "Jos%C3%A9"),
    ])
    func aConditionalSearchEscapesTheSubjectIdAsOneToken(id: String, encoded: String) {
        #expect(FHIRConsent.tokenSearch("urn:x", id) == "urn%3Ax%7C" + encoded)
    }

    /// FHIR forbids empty arrays (ele-1), so a ledger without subjects exports no `entry`.
    @Test(arguments: [FHIRConsent.BundleType.collection, .transaction])
    func aLedgerWithoutSubjectsExportsABundleWithoutEntries(type: FHIRConsent.BundleType) throws {
        let path = LedgerPropertyTests.folder("fhir-empty-\(type.rawValue)")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "fhir-empty", keyProtection: .insecurePlaintext, clock: SteppingClock(step: 1000).clock)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(ledger.fhirBundleOfAllSubjects(type: type).canonicalBytes)) as? [String: Any])
        #expect(json["resourceType"] as? String == "Bundle")
        #expect(json["entry"] == nil)
    }

    @Test func evidenceOfAGrantIsItsDateAndASourceReference() throws {
        let (ledger, path) = try ReportTests.scenario("fhir-evidence")
        defer { removeFolder(path) }
        let agreed = Timestamp(rfc3339: "2026-01-15T00:00:00Z")!
        try ledger.execute(LedgerCommand(subjectID: "dora", request: .give(feature: "timeline", consents: ["required"]), evidence: GrantEvidence(effectiveAt: agreed, channel: .paper, reference: "scan-7")))
        let timeline = Self.consent(try Self.resources(try ledger.fhirBundle(for: "dora")), feature: "timeline")
        #expect(timeline?["date"] as? String == "2026-01-15")
        #expect((timeline?["period"] as? [String: Any])?["start"] as? String == agreed.rfc3339)
        let references = timeline?["sourceReference"] as? [[String: Any]] ?? []
        #expect(references.contains { ($0["identifier"] as? [String: Any])?["value"] as? String == "scan-7" })
    }
}

/// The patient's page: their language, what they consented to, nothing fetched, no markup from data.
@Suite struct PatientPageTests {
    @Test(arguments: [(PatientPage.Language?.none, "Ihre Einwilligungen", "lang=\"de\""), (.some(.en), "Your consents", "lang=\"en\""), (.some(.de), "Ihre Einwilligungen", "lang=\"de\"")])
    func thePageIsInThePatientsLanguage(language: PatientPage.Language?, title: String, tag: String) throws {
        let (ledger, path) = try ReportTests.scenario("patient-page")
        defer { removeFolder(path) }
        let page = try ledger.patientPage(for: "bob", language: language)
        #expect(page.contains(title) && page.contains(tag))
        #expect(page.contains("Content-Security-Policy") && !page.contains("<script") && !page.contains("<img"))
        #expect(page.contains(try ledger.verifierKey.text), "it says which key checks it")
    }

    @Test func subjectIdsAreTextNotMarkup() throws {
        let (ledger, path) = try ReportTests.scenario("patient-page-escape")
        defer { removeFolder(path) }
        try ledger.execute(LedgerCommand(subjectID: "<b onmouseover=x>", request: .give(feature: "timeline", consents: ["required"])))
        let page = try ledger.patientPage(for: "<b onmouseover=x>", language: .en)
        #expect(!page.contains("<b onmouseover") && page.contains("&lt;b onmouseover=x&gt;"))
    }
}
