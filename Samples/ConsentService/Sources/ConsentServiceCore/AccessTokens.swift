import ConsentDomain
import ConsentLedger
import Foundation

/// Who a request acts for.
public enum Principal: Hashable, Sendable {
    /// A patient: may read and change only their own consents.
    case subject(String)
    /// An auditor: may read everything and change nothing.
    case auditor(String)
}

/// Bearer tokens signed by the service with its own Ed25519 key (not the ledger's):
/// `v1.<base64url(payload)>.<base64url(signature)>`, where the payload is the JSON
/// `{"exp":<unix seconds>,"role":"subject"|"auditor","sub":<id>}` (members sorted) and the
/// signature covers `"consent-service-token-v1\n" ‖ payload`.
public struct AccessTokens: Sendable {
    public let signer: SodiumSigner
    private let verifier = Sodium()
    static let context = Array("consent-service-token-v1\n".utf8)

    public init(signer: SodiumSigner) {
        self.signer = signer
    }

    struct Payload: Codable {
        let exp: Int64
        let role: String
        let sub: String
    }

    public enum Failure: Error, Equatable {
        case malformed, badSignature, expired
    }

    /// A token for `principal`, valid until `expires` (unix seconds).
    public func issue(for principal: Principal, expires: Int64) -> String {
        let (role, sub): (String, String) = switch principal {
        case .subject(let id): ("subject", id)
        case .auditor(let id): ("auditor", id)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let payload = Array((try? encoder.encode(Payload(exp: expires, role: role, sub: sub))) ?? Data())
        let signature = (Self.context + payload).withUnsafeBytes { signer.sign($0) }
        return "v1." + Self.base64url(payload) + "." + Self.base64url(signature.bytes)
    }

    /// The principal of a valid, unexpired token.
    public func check(_ token: String, now: Int64) throws(Failure) -> Principal {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "v1", let payload = Self.unbase64url(String(parts[1])),
            let sigBytes = Self.unbase64url(String(parts[2])), let signature = Signature(bytes: sigBytes)
        else { throw .malformed }
        guard (Self.context + payload).withUnsafeBytes({ verifier.isValid(signature, of: $0, by: signer.publicKey) }) else { throw .badSignature }
        guard let claims = try? JSONDecoder().decode(Payload.self, from: Data(payload)) else { throw .malformed }
        guard claims.exp > now else { throw .expired }
        switch claims.role {
        case "subject": return .subject(claims.sub)
        case "auditor": return .auditor(claims.sub)
        default: throw .malformed
        }
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        String(Base64.encode(bytes).map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }.filter { $0 != "=" })
    }

    static func unbase64url(_ text: String) -> [UInt8]? {
        guard !text.contains("+"), !text.contains("/"), !text.contains("=") else { return nil }
        var s = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while s.count % 4 != 0 { s += "=" }
        return Base64.decode(s)
    }
}
