import ConsentDomain
import ConsentLedger
import Foundation
import Hummingbird
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The request context: who the bearer token says is asking.
public struct ServiceContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var principal: Principal?

    public init(source: Source) {
        coreContext = .init(source: source)
    }

    /// Request bodies are small JSON objects.
    public var maxUploadSize: Int { 16_384 }
}

/// A JSON error with its status: what is wrong, never a stack trace.
struct ServiceError: Error {
    let status: HTTPResponse.Status
    let kind: String
    let message: String
    /// For a server-side failure: the id under which its details are in the log.
    var id: String? = nil
}

/// A response body: the value as JSON, members sorted, and a newline.
func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let body = try? encoder.encode(value) else {
        return bytes(Array(#"{"error":"the response could not be encoded","kind":"internal"}"#.utf8) + [0x0A], status: .internalServerError)
    }
    return bytes(Array(body) + [0x0A], status: status)
}

/// A listing document as the response body: its canonical JSON bytes (RFC 8785, as the CLI's
/// `--json` prints it) and a newline. Listings are written by the ledger's own serializer, not
/// through `JSONEncoder`: encoding their values one by one through `Encodable` was a quarter of the
/// service's CPU time answering `status`.
func json(_ document: JSONDocument, status: HTTPResponse.Status = .ok) -> Response {
    bytes(document.canonicalBytes + [0x0A], status: status)
}

/// Every feature's listing, and a newline.
func json(_ body: FeaturesBody, status: HTTPResponse.Status = .ok) -> Response {
    bytes(body.canonicalBytes + [0x0A], status: status)
}

func bytes(_ body: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
    Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
}

struct ErrorBody: Encodable {
    let error: String
    let kind: String
    let id: String?
}

func errorResponse(_ e: ServiceError) -> Response {
    json(ErrorBody(error: e.message, kind: e.kind, id: e.id), status: e.status)
}

/// A server-side failure as the client sees it: the kind and an id, never the details (they
/// name files, tables and hosts), which go to the log under that id.
func serverFailure(_ e: ServiceError, logger: Logger) -> ServiceError {
    guard e.status.code >= 500 else { return e }
    let id = Sodium().randomBytes(8).map { String(String(UInt16($0) | 0x100, radix: 16).dropFirst()) }.joined()
    logger.error("request failed", metadata: ["error-id": .string(id), "kind": .string(e.kind), "detail": .string(e.message)])
    return ServiceError(status: e.status, kind: e.kind, message: "the service could not answer (error \(id)); its log has the details", id: id)
}

/// The bodies of the API's responses (`Spec/openapi.yaml`).
struct CheckpointBody: Encodable {
    let origin: String
    let size: Int64
    let root: String
    let note: String
}

/// Who the request's token names: `GET /v1/principal`.
struct PrincipalBody: Encodable {
    let role: String
    let id: String
}

/// Every feature's listing. Not `Encodable`: its bytes are written here, each listing by the
/// ledger's canonical serializer, as a single listing is.
struct FeaturesBody {
    let features: [JSONDocument]

    init(_ lines: [FeatureLine]) { features = lines.map(ListingJSON.document) }

    /// `{"features":[…]}`, canonical JSON (RFC 8785): its one member, and each listing's.
    var canonicalBytes: [UInt8] {
        var out = Array(#"{"features":["#.utf8)
        for (i, document) in features.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out += document.canonicalBytes
        }
        out += Array("]}".utf8)
        return out
    }
}

struct HistoryBody: Encodable {
    struct Event: Encodable {
        let seq: Int64
        let at: String
        let type: String
        let featureCode: Int64
        let consent: String
        let actor: String
        let cause: Int64?
        let renews: Int64?
        let version: String?
    }

    let events: [Event]
}

/// The bodies of the API's requests. Neither names an actor: the actor is the token's.
struct ActivateRequest: Decodable {
    let consents: [String]
    let actor: String?
}

struct RevokeRequest: Decodable {
    let consent: String
    let actor: String?
}

struct EraseRequest: Decodable {
    let reason: String?
    let actor: String?
}

/// An erasure's receipt: the pseudonym and the seq of the `subject.erased` event.
struct ErasureBody: Encodable {
    let pseudonym: String
    let seq: Int64
    let at: String
    let events: Int64
    let appended: Bool

    init(_ receipt: ErasureReceipt) {
        (pseudonym, seq, at, events, appended) = (receipt.pseudonym, Int64(receipt.seq), receipt.at.rfc3339, Int64(receipt.events), receipt.appended)
    }
}

/// Maps the library's typed errors to HTTP: input problems are 4xx, never 500.
func serviceError(_ error: any Error) -> ServiceError {
    if let e = error as? ServiceError { return e }
    guard let e = error as? ConsentError else { return ServiceError(status: .internalServerError, kind: "internal", message: "\(error)") }
    switch e {
    case .ruleViolation(let rule, let m): return ServiceError(status: .conflict, kind: "rule-violation", message: "rule \(rule): \(m)")
    case .notFound(.ledger, _), .notFound(.signingKey, _), .notFound(.file, _):
        return ServiceError(status: .serviceUnavailable, kind: "storage", message: "the ledger is not available")
    case .notFound(_, let m): return ServiceError(status: .notFound, kind: "not-found", message: m)
    case .invalidRequest(let m): return ServiceError(status: .badRequest, kind: "invalid-request", message: m)
    case .invalidCatalog(let c): return ServiceError(status: .badRequest, kind: "invalid-request", message: "invalid catalogue: \(c)")
    // A serialization failure or another writer first: the client may retry.
    case .conflict(let m), .alreadyExists(let m): return ServiceError(status: .conflict, kind: "conflict", message: m)
    case .integrity(let f): return ServiceError(status: .internalServerError, kind: "integrity", message: f.description)
    case .storage(let m): return ServiceError(status: .serviceUnavailable, kind: "storage", message: m)
    // The service unlocks its key at start; a locked key here is the operator's to fix.
    case .keyLocked: return ServiceError(status: .serviceUnavailable, kind: "storage", message: "the ledger's signing key is locked")
    case .unavailable(let m): return ServiceError(status: .serviceUnavailable, kind: "unavailable", message: m)
    // The ledger's time is ahead of this server's clock: the operator decides which is wrong.
    case .clockAhead(let c): return ServiceError(status: .serviceUnavailable, kind: "clock-ahead", message: "\(c)")
    }
}

/// Checks the bearer token and puts its principal into the context; 401 without a valid one.
struct BearerAuthentication: RouterMiddleware {
    typealias Context = ServiceContext
    let tokens: AccessTokens
    let clock: @Sendable () -> Int64

    func handle(_ request: Request, context: ServiceContext, next: (Request, ServiceContext) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            return errorResponse(ServiceError(status: .unauthorized, kind: "unauthorized", message: "missing bearer token"))
        }
        let principal: Principal
        do throws(AccessTokens.Failure) {
            principal = try await tokens.check(String(header.dropFirst("Bearer ".count)), now: clock())
        } catch {
            let why = switch error {
            case .expired: "the token has expired"
            case .badSignature: "the token's signature does not verify"
            case .malformed: "the token is not a JWT with the claims iss, aud, sub, iat, exp, jti and role"
            case .wrongIssuer: "the token's issuer (iss) is not \(tokens.policy.issuer)"
            case .wrongAudience: "the token's audience (aud) does not include \(tokens.policy.audience)"
            case .tooLong: "the token lives longer than \(tokens.policy.maximumLifetime) seconds (exp - iat)"
            case .notYetIssued: "the token's issue time (iat) is in the future"
            }
            return errorResponse(ServiceError(status: .unauthorized, kind: "unauthorized", message: why))
        }
        var context = context
        context.principal = principal
        return try await next(request, context)
    }
}

/// The JSON API of the patient app's consent screens (rule R9), over a ``ConsentManager``.
public struct ConsentRoutes: Sendable {
    let consents: ConsentManager

    public init(consents: ConsentManager) {
        self.consents = consents
    }

    /// Subjects may touch only their own consents (the ids compared byte for byte); auditors
    /// may read everyone's and write nothing.
    static func authorize(_ context: ServiceContext, subject: String, write: Bool) throws(ServiceError) {
        switch context.principal {
        case .subject(let id)? where id == SubjectID(subject): return
        case .auditor? where !write: return
        case .auditor?: throw ServiceError(status: .forbidden, kind: "forbidden", message: "auditor tokens are read-only")
        case .subject?: throw ServiceError(status: .forbidden, kind: "forbidden", message: "a subject token gives access to that subject's consents only")
        case nil: throw ServiceError(status: .unauthorized, kind: "unauthorized", message: "missing bearer token")
        }
    }

    static func time(_ request: Request, _ name: String) throws(ServiceError) -> Timestamp? {
        guard let text = request.uri.queryParameters.get(name) else { return nil }
        guard let t = Timestamp(rfc3339: text) else {
            throw ServiceError(status: .badRequest, kind: "invalid-request", message: "query parameter '\(name)' is not an RFC 3339 time or date")
        }
        return t
    }

    /// The request's JSON body as `T`: malformed JSON is `invalid-json`, JSON of another shape
    /// `invalid-request` naming `shape`.
    static func body<T: Decodable>(_ type: T.Type, _ request: Request, _ context: ServiceContext, shape: String) async throws(ServiceError) -> T {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: context.maxUploadSize)
        } catch {
            throw ServiceError(status: .contentTooLarge, kind: "too-large", message: "the request body is larger than \(context.maxUploadSize) bytes")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            throw ServiceError(status: .badRequest, kind: "invalid-json", message: "malformed JSON: \(context.debugDescription)")
        } catch {
            throw ServiceError(status: .badRequest, kind: "invalid-request", message: "the body must be \(shape)")
        }
    }

    /// Who acts: the token's principal. A subject acts for itself ("self"), as the ledger
    /// records a patient's own choices; a body that names an actor is refused.
    static func actor(_ context: ServiceContext, named: String?) throws(ServiceError) -> String {
        guard named == nil else {
            throw ServiceError(status: .badRequest, kind: "invalid-request", message: "the body may not name an actor: who acts is the token's principal")
        }
        return "self"
    }

    func handle(_ context: ServiceContext, _ work: () async throws -> Response) async -> Response {
        do {
            return try await work()
        } catch {
            return errorResponse(serverFailure(serviceError(error), logger: context.logger))
        }
    }

    public func add(to router: Router<ServiceContext>) {
        let consents = self.consents
        let api = router.group("v1")
        api.get("checkpoint") { _, context in
            await handle(context) {
                let (checkpoint, note) = try await consents.checkpoint()
                return json(CheckpointBody(origin: checkpoint.origin, size: checkpoint.size, root: Base64.encode(checkpoint.root.bytes), note: note))
            }
        }
        // Who the token names, and nothing else: a client checks its token with it, and the
        // load test measures the service's own cost per request with it (no ledger work).
        api.get("principal") { _, context in
            await handle(context) {
                switch context.principal {
                case .subject(let id)?: return json(PrincipalBody(role: "subject", id: id.text))
                case .auditor(let name)?: return json(PrincipalBody(role: "auditor", id: name))
                case nil: throw ServiceError(status: .unauthorized, kind: "unauthorized", message: "missing bearer token")
                }
            }
        }
        api.get("subjects/:subject/features/:feature") { _, context in
            await handle(context) {
                let subject = try context.parameters.require("subject"), feature = try context.parameters.require("feature")
                try Self.authorize(context, subject: subject, write: false)
                return json(ListingJSON.document(try await consents.consents(of: feature, for: subject)))
            }
        }
        api.get("subjects/:subject/active") { _, context in
            await handle(context) {
                let subject = try context.parameters.require("subject")
                try Self.authorize(context, subject: subject, write: false)
                return json(FeaturesBody(try await consents.activeConsents(for: subject)))
            }
        }
        api.get("subjects/:subject/status") { request, context in
            await handle(context) {
                let subject = try context.parameters.require("subject")
                try Self.authorize(context, subject: subject, write: false)
                return json(FeaturesBody(try await consents.state(of: subject, at: try Self.time(request, "at"))))
            }
        }
        api.get("subjects/:subject/history") { request, context in
            await handle(context) {
                let subject = try context.parameters.require("subject")
                try Self.authorize(context, subject: subject, write: false)
                let entries = try await consents.history(of: subject, until: try Self.time(request, "until"))
                return json(HistoryBody(events: entries.map { e in
                    HistoryBody.Event(seq: Int64(e.seq), at: e.at.rfc3339, type: e.kind.rawValue, featureCode: Int64(e.feature), consent: e.consent, actor: e.actor,
                                      cause: e.cause.map { Int64($0) }, renews: e.renews.map { Int64($0) }, version: e.version)
                }))
            }
        }
        api.post("subjects/:subject/features/:feature/activate") { request, context in
            await handle(context) {
                let subject = try context.parameters.require("subject"), feature = try context.parameters.require("feature")
                try Self.authorize(context, subject: subject, write: true)
                let shape = "an object whose 'consents' is a non-empty array of consent codes"
                let body = try await Self.body(ActivateRequest.self, request, context, shape: shape)
                guard !body.consents.isEmpty else { throw ServiceError(status: .badRequest, kind: "invalid-request", message: "the body must be \(shape)") }
                return json(FeaturesBody(try await consents.activate(body.consents, of: feature, for: subject, actor: try Self.actor(context, named: body.actor))))
            }
        }
        api.post("subjects/:subject/features/:feature/revoke") { request, context in
            await handle(context) {
                let subject = try context.parameters.require("subject"), feature = try context.parameters.require("feature")
                try Self.authorize(context, subject: subject, write: true)
                let body = try await Self.body(RevokeRequest.self, request, context, shape: "an object whose 'consent' is a consent code")
                return json(FeaturesBody(try await consents.revoke(body.consent, of: feature, for: subject, actor: try Self.actor(context, named: body.actor))))
            }
        }
        // The subject's own request to be forgotten (GDPR Art. 17): an auditor cannot make it.
        api.post("subjects/:subject/erase") { request, context in
            await handle(context) {
                let subject = try context.parameters.require("subject")
                try Self.authorize(context, subject: subject, write: true)
                let body = try await Self.body(EraseRequest.self, request, context, shape: "an object, with an optional 'reason' (no personal data: it stays in the log)")
                return json(ErasureBody(try await consents.erase(subject, actor: try Self.actor(context, named: body.actor), reason: body.reason)))
            }
        }
        api.get("subjects/:subject/export") { _, context in
            await handle(context) {
                let subject = try context.parameters.require("subject")
                try Self.authorize(context, subject: subject, write: false)
                return bytes(try await consents.export(subject: subject).bytes)
            }
        }
    }

    /// Each path of the API and its one method (`Spec/openapi.yaml`).
    static let methods: [(String, HTTPRequest.Method)] = [
        ("checkpoint", .get), ("principal", .get), ("subjects/:subject/features/:feature", .get),
        ("subjects/:subject/active", .get), ("subjects/:subject/status", .get), ("subjects/:subject/history", .get),
        ("subjects/:subject/features/:feature/activate", .post), ("subjects/:subject/features/:feature/revoke", .post),
        ("subjects/:subject/erase", .post), ("subjects/:subject/export", .get),
    ]
}

/// A method the API does not declare for a path it has (TRACE, PUT, QUERY, …) gets 405 with
/// the method the path allows (RFC 9110), not 404, which would say the resource does not exist.
struct UndeclaredMethod: RouterMiddleware {
    typealias Context = ServiceContext

    func handle(_ request: Request, context: ServiceContext, next: (Request, ServiceContext) async throws -> Response) async throws -> Response {
        let parts = request.uri.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        guard parts.first == "v1", let allowed = Self.allowed(Array(parts.dropFirst())), request.method != allowed else {
            return try await next(request, context)
        }
        var response = errorResponse(ServiceError(status: .methodNotAllowed, kind: "invalid-request", message: "\(request.method) is not a method of \(request.uri.path); it allows \(allowed)"))
        response.headers[.allow] = allowed.rawValue
        return response
    }

    /// The method of the API's path that `parts` (after `/v1/`) name, if it is one.
    static func allowed(_ parts: [Substring]) -> HTTPRequest.Method? {
        ConsentRoutes.methods.first { template, _ in
            let pattern = template.split(separator: "/")
            return pattern.count == parts.count && zip(pattern, parts).allSatisfy { $0.hasPrefix(":") ? !$1.isEmpty : $0 == $1 }
        }?.1
    }
}

/// The whole application: routes behind bearer authentication.
/// `logger` receives the details of server-side failures (the client gets an error id).
public func makeApplication(consents: ConsentManager, tokens: AccessTokens, host: String = "127.0.0.1", port: Int = 8080, logger: Logger, clock: @escaping @Sendable () -> Int64 = { Int64(time(nil)) }) -> some ApplicationProtocol {
    let router = Router(context: ServiceContext.self)
    router.add(middleware: BearerAuthentication(tokens: tokens, clock: clock))
    router.add(middleware: UndeclaredMethod())
    ConsentRoutes(consents: consents).add(to: router)
    return Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: "consent-service"), logger: logger)
}
