import ConsentLedger
import Foundation
import JWTKit
import Synchronization

/// Who a request acts for.
public enum Principal: Hashable, Sendable {
    /// A patient: may read and change only their own consents. Compared byte for byte, as the
    /// ledger compares subject ids: a token for one spelling of "José" never reaches another.
    case subject(SubjectID)
    /// An auditor: may read everything and change nothing.
    case auditor(String)
}

/// The claims of an access token: a JWT (RFC 7519) signed with EdDSA over Ed25519 (RFC 8037).
/// `sub` is the principal and `role` says which kind; `iss`, `aud` and `exp` are checked
/// against the service's policy, and `exp - iat` against its maximum lifetime.
struct AccessClaims: JWTPayload {
    var iss: IssuerClaim
    var aud: AudienceClaim
    var sub: SubjectClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim
    var jti: IDClaim
    var role: String

    // The checks need the policy and the clock, so ``AccessTokens/check(_:now:)`` makes them.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Bearer tokens: JWTs signed with EdDSA, verified with jwt-kit. The service signs tokens with
/// its own Ed25519 key (`consent-service token`, for demos) and may also accept the keys of the
/// hospital's identity provider from a JWKS document. A verified token is cached until its
/// `exp`, so a client that reuses its token pays for one signature check.
public final class AccessTokens: Sendable {
    /// What a token must say to be accepted.
    public struct Policy: Sendable {
        public var issuer: String
        public var audience: String
        /// The longest a token may live (`exp - iat`), in seconds.
        public var maximumLifetime: Int64

        public init(issuer: String = "consent-service", audience: String = "consent-service", maximumLifetime: Int64 = 12 * 3600) {
            self.issuer = issuer
            self.audience = audience
            self.maximumLifetime = maximumLifetime
        }
    }

    public enum Failure: Error, Equatable {
        case malformed, badSignature, expired, wrongIssuer, wrongAudience, tooLong, notYetIssued
    }

    /// The `kid` of the service's own key.
    public static let ownKeyID = "consent-service"

    public let policy: Policy
    /// The `kid` this instance signs with.
    public let keyID: String
    let keys: JWTKeyCollection
    private let cache = Mutex<[String: (principal: Principal, expires: Int64)]>([:])
    static let cacheLimit = 10_000
    /// Clocks of the issuer and the service may differ this much.
    static let skew: Int64 = 60

    /// Tokens signed by `signer` (the service's own key, named `keyID`) and, if given, by the
    /// keys of `jwks` (a JWKS document: an identity provider's Ed25519 keys, `kty` `OKP`).
    public init(signer: SodiumSigner, keyID: String = AccessTokens.ownKeyID, policy: Policy = Policy(), jwks: String? = nil) async throws {
        self.policy = policy
        self.keyID = keyID
        var seed = signer.withSeed { Array($0) }
        defer { zeroize(&seed) }
        keys = JWTKeyCollection()
        await keys.add(eddsa: try EdDSA.PrivateKey(d: Self.base64url(seed), curve: .ed25519), kid: JWKIdentifier(string: keyID))
        if let jwks { try await keys.add(jwksJSON: jwks) }
    }

    /// A token for `principal`, issued at `now` and valid for `lifetime` seconds.
    public func issue(for principal: Principal, lifetime: Int64, now: Int64) async throws -> String {
        guard (1...policy.maximumLifetime).contains(lifetime) else {
            throw Failure.tooLong
        }
        let (role, sub): (String, String) = switch principal {
        case .subject(let id): ("subject", id.text)
        case .auditor(let name): ("auditor", name)
        }
        let claims = AccessClaims(
            iss: IssuerClaim(value: policy.issuer), aud: AudienceClaim(value: [policy.audience]), sub: SubjectClaim(value: sub),
            iat: IssuedAtClaim(value: Date(timeIntervalSince1970: TimeInterval(now))),
            exp: ExpirationClaim(value: Date(timeIntervalSince1970: TimeInterval(now + lifetime))),
            jti: IDClaim(value: UUID().uuidString.lowercased()), role: role)
        return try await keys.sign(claims, kid: JWKIdentifier(string: keyID))
    }

    /// The principal of a valid token at `now` (unix seconds).
    public func check(_ token: String, now: Int64) async throws(Failure) -> Principal {
        if let hit = cache.withLock({ $0[token] }) {
            guard hit.expires > now else { throw .expired }
            return hit.principal
        }
        let claims: AccessClaims
        do {
            claims = try await keys.verify(token, as: AccessClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            throw .malformed
        }
        guard claims.iss.value == policy.issuer else { throw .wrongIssuer }
        guard claims.aud.value.contains(policy.audience) else { throw .wrongAudience }
        let issued = Int64(claims.iat.value.timeIntervalSince1970), expires = Int64(claims.exp.value.timeIntervalSince1970)
        guard expires > now else { throw .expired }
        guard issued <= now + Self.skew else { throw .notYetIssued }
        guard expires - issued <= policy.maximumLifetime else { throw .tooLong }
        let principal: Principal
        switch claims.role {
        case "subject" where !claims.sub.value.isEmpty: principal = .subject(SubjectID(claims.sub.value))
        case "auditor" where !claims.sub.value.isEmpty: principal = .auditor(claims.sub.value)
        default: throw .malformed
        }
        cache.withLock { cache in
            if cache.count >= Self.cacheLimit { cache = cache.filter { $0.value.expires > now } }
            if cache.count >= Self.cacheLimit { cache.removeAll() }
            cache[token] = (principal, expires)
        }
        return principal
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        String(Base64.encode(bytes).map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }.filter { $0 != "=" })
    }
}
