import ConsentLedger
@testable import ConsentServiceCore
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// The HTTP service in-process (Hummingbird's router test framework): the app's flow, access
/// control, and input validation, each error a JSON 4xx that changes nothing.
@Suite struct ConsentServiceTests {
    static let now: Int64 = 1_800_000_000

    struct Fixture {
        let folder: String
        let consents: ConsentManager
        let tokens: AccessTokens
        let alice: String, bob: String, auditor: String, expired: String, forged: String
        /// Signed with the service's key, but naming another issuer, another audience, or living
        /// longer than the service allows.
        let otherIssuer: String, otherAudience: String, tooLong: String

        init() async throws {
            folder = NSTemporaryDirectory() + "consent-service-" + UUID().uuidString
            consents = try await ConsentManager.create(directory: folder, name: "service.test/ledger", keyProtection: .insecurePlaintext)
            let key = SodiumSigner.generate(), now = ConsentServiceTests.now
            tokens = try await AccessTokens(signer: key)
            alice = try await tokens.issue(for: .subject(SubjectID("alice")), lifetime: 600, now: now)
            bob = try await tokens.issue(for: .subject(SubjectID("bob")), lifetime: 600, now: now)
            auditor = try await tokens.issue(for: .auditor("dpo"), lifetime: 600, now: now)
            expired = try await tokens.issue(for: .subject(SubjectID("alice")), lifetime: 600, now: now - 601)
            forged = try await AccessTokens(signer: SodiumSigner.generate()).issue(for: .subject(SubjectID("alice")), lifetime: 600, now: now)
            otherIssuer = try await AccessTokens(signer: key, policy: .init(issuer: "elsewhere")).issue(for: .subject(SubjectID("alice")), lifetime: 600, now: now)
            otherAudience = try await AccessTokens(signer: key, policy: .init(audience: "another-service")).issue(for: .subject(SubjectID("alice")), lifetime: 600, now: now)
            tooLong = try await AccessTokens(signer: key, policy: .init(maximumLifetime: 100 * 86400)).issue(for: .subject(SubjectID("alice")), lifetime: 30 * 86400, now: now)
        }

        var app: some ApplicationProtocol { makeApplication(consents: consents, tokens: tokens, logger: Logger(label: "test"), clock: { ConsentServiceTests.now }) }

        func logBytes() -> Data? { FileManager.default.contents(atPath: folder + "/ledger.jsonl") }
    }

    static func headers(_ token: String?) -> HTTPFields {
        var h: HTTPFields = [.contentType: "application/json"]
        if let token { h[.authorization] = "Bearer " + token }
        return h
    }

    /// The response's JSON object (empty when it is not one: the expectations then fail).
    static func object(_ response: TestResponse) -> [String: Any] {
        ((try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [String: Any]) ?? [:]
    }

    @Test func theAppsFlowOverHTTP() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        try await f.app.test(.router) { client in
            try await client.execute(uri: "/v1/subjects/alice/features/medication-management/activate", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"consents":["required","optional-a"]}"#)) { response in
                #expect(response.status == .ok)
                let features = try #require(Self.object(response)["features"] as? [[String: Any]])
                #expect(features.map { $0["active"] as? Bool } == [true, false])
            }
            try await client.execute(uri: "/v1/subjects/alice/active", method: .get, headers: Self.headers(f.alice)) { response in
                #expect((Self.object(response)["features"] as? [[String: Any]])?.count == 1)
            }
            try await client.execute(uri: "/v1/subjects/alice/features/1/revoke", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"consent":"required"}"#)) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/v1/subjects/alice/history", method: .get, headers: Self.headers(f.alice)) { response in
                let events = try #require(Self.object(response)["events"] as? [[String: Any]])
                #expect(events.map { $0["type"] as? String } == ["given", "given", "withdrawn", "cascade-withdrawn"])
                #expect(events[3]["cause"] as? Int == 3)
            }
            try await client.execute(uri: "/v1/subjects/alice/status?at=2000-01-01", method: .get, headers: Self.headers(f.auditor)) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/v1/checkpoint", method: .get, headers: Self.headers(f.auditor)) { response in
                #expect(Self.object(response)["size"] as? Int == 5)
            }
            try await client.execute(uri: "/v1/subjects/alice/export", method: .get, headers: Self.headers(f.alice)) { response in
                #expect(response.status == .ok)
                let bytes = Array(buffer: response.body)
                let key = try f.consents.verifierKey()
                #expect((try? ExportVerifier.verify(bytes, pinnedKey: key))?.events == 4)
            }
        }
    }

    /// A subject asks to be forgotten: only their own token may, once; afterwards the service
    /// knows no such subject, and the ledger still verifies.
    @Test func aSubjectErasesThemselves() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        try await f.app.test(.router) { client in
            try await client.execute(uri: "/v1/subjects/alice/features/timeline/activate", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"consents":["required"]}"#)) { #expect($0.status == .ok) }
            try await client.execute(uri: "/v1/subjects/alice/erase", method: .post, headers: Self.headers(f.auditor), body: ByteBuffer(string: "{}")) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/v1/subjects/alice/erase", method: .post, headers: Self.headers(f.bob), body: ByteBuffer(string: "{}")) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/v1/subjects/alice/erase", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"reason":"request 9","actor":"dpo"}"#)) { #expect($0.status == .badRequest) }
            try await client.execute(uri: "/v1/subjects/alice/erase", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"reason":"request 9"}"#)) { response in
                #expect(response.status == .ok)
                let receipt = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any]
                #expect(receipt?["appended"] as? Bool == true && (receipt?["pseudonym"] as? String)?.count == 32)
            }
            try await client.execute(uri: "/v1/subjects/alice/erase", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: "{}")) { #expect($0.status == .notFound) }
        }
        #expect(try f.consents.ledger.verify().events == 3)
    }

    @Test func wrongExpiredOrMissingTokensAndForeignSubjectsChangeNothing() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        let before = f.logBytes()
        let activate = "/v1/subjects/alice/features/timeline/activate"
        let body = #"{"consents":["required"]}"#
        try await f.app.test(.router) { client in
            for (token, status) in [(nil, HTTPResponse.Status.unauthorized), (f.expired, .unauthorized), (f.forged, .unauthorized), ("v1.garbage", .unauthorized), ("a.b.c", .unauthorized),
                                    (f.otherIssuer, .unauthorized), (f.otherAudience, .unauthorized), (f.tooLong, .unauthorized), (f.bob, .forbidden), (f.auditor, .forbidden)] {
                try await client.execute(uri: activate, method: .post, headers: Self.headers(token), body: ByteBuffer(string: body)) { response in
                    #expect(response.status == status, "\(String(describing: token?.prefix(12)))")
                    #expect(Self.object(response)["error"] is String)
                }
            }
            try await client.execute(uri: "/v1/subjects/alice/history", method: .get, headers: Self.headers(f.bob)) { response in
                #expect(response.status == .forbidden)
            }
        }
        #expect(f.logBytes() == before)
    }

    @Test func badInputIsAJSON4xxThatChangesNothing() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        let before = f.logBytes()
        let cases: [(String, String, HTTPResponse.Status, String)] = [
            ("/v1/subjects/alice/features/timeline/activate", #"{"consents": ["required""#, .badRequest, "invalid-json"),
            ("/v1/subjects/alice/features/timeline/activate", #"["required"]"#, .badRequest, "invalid-request"),
            ("/v1/subjects/alice/features/timeline/activate", #"{"consents": []}"#, .badRequest, "invalid-request"),
            ("/v1/subjects/alice/features/diary/activate", #"{"consents": ["required"]}"#, .notFound, "not-found"),
            ("/v1/subjects/alice/features/timeline/activate", #"{"consents": ["optional-z"]}"#, .notFound, "not-found"),
            ("/v1/subjects/alice/features/timeline/activate", #"{"consents": ["optional-a"]}"#, .conflict, "rule-violation"),
            ("/v1/subjects/alice/features/timeline/activate", "{\"consents\": [\"" + String(repeating: "x", count: 20_000) + "\"]}", .contentTooLarge, "too-large"),
            ("/v1/subjects/alice/features/timeline/revoke", #"{"consent": 5}"#, .badRequest, "invalid-request"),
        ]
        try await f.app.test(.router) { client in
            for (uri, body, status, kind) in cases {
                try await client.execute(uri: uri, method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: body)) { response in
                    #expect(response.status == status, "\(uri) \(body.prefix(40))")
                    #expect(Self.object(response)["kind"] as? String == kind, "\(uri) \(body.prefix(40))")
                }
            }
            try await client.execute(uri: "/v1/subjects/alice/status?at=yesterday", method: .get, headers: Self.headers(f.alice)) { response in
                #expect(response.status == .badRequest)
            }
        }
        #expect(f.logBytes() == before)
    }

    /// Each library error maps to one HTTP status by its case, never by its message: a
    /// PostgreSQL serialization conflict is 409 (try again), not 503.
    @Test(arguments: [
        (ConsentError.conflict("another writer changed the ledger first [SQLSTATE 40001]"), 409, "conflict"),
        (ConsentError.ruleViolation(rule: "R2", message: "activate the feature first"), 409, "rule-violation"),
        (ConsentError.notFound(.subject, "the ledger has no subject 'x'"), 404, "not-found"),
        (ConsentError.notFound(.feature, "unknown feature 'x'"), 404, "not-found"),
        (ConsentError.notFound(.ledger, "no ledger at /var/lib/x"), 503, "storage"),
        (ConsentError.invalidRequest("subject id must not be empty"), 400, "invalid-request"),
        (ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "x")), 500, "integrity"),
        (ConsentError.storage("disk full"), 503, "storage"),
    ])
    func errorsMapToStatusesByCase(_ error: ConsentError, _ status: Int, _ kind: String) {
        let mapped = serviceError(error)
        #expect(mapped.status.code == status && mapped.kind == kind)
    }

    /// Who acts is the token's principal: a body that names an actor is refused, and the
    /// ledger records the patient's own choice as "self".
    @Test func theActorComesFromTheTokenNeverTheBody() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        try await f.app.test(.router) { client in
            try await client.execute(uri: "/v1/subjects/alice/features/timeline/activate", method: .post, headers: Self.headers(f.alice),
                                     body: ByteBuffer(string: #"{"consents":["required"],"actor":"dr.house"}"#)) { response in
                #expect(response.status == .badRequest && (Self.object(response)["error"] as? String)?.contains("may not name an actor") == true)
            }
            try await client.execute(uri: "/v1/subjects/alice/features/timeline/activate", method: .post, headers: Self.headers(f.alice), body: ByteBuffer(string: #"{"consents":["required"]}"#)) { response in
                #expect(response.status == .ok)
            }
        }
        #expect(try await f.consents.history(of: "alice").map(\.actor) == ["self"])
    }

    /// A token for the NFC spelling of a subject id does not reach the NFD spelling: ids
    /// compare by bytes, as in the ledger.
    @Test func subjectIdsCompareByBytes() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        let nfc = "Jos\u{E9}", nfd = "Jose\u{301}"
        #expect(nfc == nfd, "Swift's String equality calls them equal")
        let token = try await f.tokens.issue(for: .subject(SubjectID(nfc)), lifetime: 600, now: Self.now)
        try await f.app.test(.router) { client in
            let path = "/v1/subjects/" + nfd.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed)! + "/active"
            try await client.execute(uri: path, method: .get, headers: Self.headers(token)) { response in
                #expect(response.status == .forbidden)
            }
        }
    }

    /// A verified token is kept until its `exp`, and not a second longer.
    @Test func aCachedTokenStillExpires() async throws {
        let f = try await Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        #expect(try await f.tokens.check(f.alice, now: Self.now) == .subject(SubjectID("alice")))
        #expect(try await f.tokens.check(f.alice, now: Self.now + 1) == .subject(SubjectID("alice")))
        await #expect(throws: AccessTokens.Failure.expired) { try await f.tokens.check(f.alice, now: Self.now + 600) }
        await #expect(throws: AccessTokens.Failure.tooLong) { try await f.tokens.issue(for: .auditor("dpo"), lifetime: 13 * 3600, now: Self.now) }
    }

    /// A server-side failure answers with an error id and nothing of its details (which name
    /// files, tables and hosts); the details go to the log under that id.
    @Test func aServerFailureShowsAnIdAndNoDetails() {
        let failure = serverFailure(serviceError(ConsentError.storage("cannot read /var/lib/consents/ledger.jsonl: I/O error")), logger: Logger(label: "test"))
        #expect(failure.status.code == 503 && failure.id?.count == 16)
        #expect(!failure.message.contains("/var/lib") && failure.message.contains(failure.id ?? "?"))
        let client = serverFailure(serviceError(ConsentError.invalidRequest("subject id must not be empty")), logger: Logger(label: "test"))
        #expect(client.id == nil && client.message == "subject id must not be empty", "a 4xx keeps its message")
    }

    /// Tokens from the hospital's identity provider: its key is in a JWKS document, and its
    /// tokens are accepted with the same checks; a key it does not list is not.
    @Test func tokensFromAnIdentityProviderInTheJWKSAreAccepted() async throws {
        let idp = SodiumSigner.generate()
        let x = AccessTokens.base64url(idp.publicKey.bytes)
        let jwks = #"{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","kid":"idp-1","x":"\#(x)"}]}"#
        let service = try await AccessTokens(signer: SodiumSigner.generate(), jwks: jwks)
        let fromIdP = try await AccessTokens(signer: idp, keyID: "idp-1").issue(for: .subject(SubjectID("alice")), lifetime: 600, now: Self.now)
        #expect(try await service.check(fromIdP, now: Self.now) == .subject(SubjectID("alice")))
        let unlisted = try await AccessTokens(signer: SodiumSigner.generate(), keyID: "idp-1").issue(for: .subject(SubjectID("alice")), lifetime: 600, now: Self.now)
        await #expect(throws: AccessTokens.Failure.self) { try await service.check(unlisted, now: Self.now) }
    }
}
