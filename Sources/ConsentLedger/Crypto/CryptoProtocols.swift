/// A SHA-256 digest.
public struct Digest: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    public init?(hex: String) {
        guard let b = Hex.decode(hex), b.count == 32 else { return nil }
        bytes = b
    }

    /// All zeros: the `prev` of the genesis event.
    public static let zero = Digest(bytes: [UInt8](repeating: 0, count: 32))!

    public var hex: String { Hex.encode(bytes) }
    public var description: String { hex }
}

/// An Ed25519 public key (32 bytes).
public struct PublicKey: Hashable, Sendable {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    public init?(hex: String) {
        guard let b = Hex.decode(hex) else { return nil }
        self.init(bytes: b)
    }

    public var hex: String { Hex.encode(bytes) }
}

/// An Ed25519 signature (64 bytes).
public struct Signature: Hashable, Sendable {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 64 else { return nil }
        self.bytes = bytes
    }

    public var hex: String { Hex.encode(bytes) }
}

/// SHA-256. Behind a protocol so the chain does not care which library computes it.
public protocol SHA256Hasher: Sendable {
    func sha256(_ bytes: UnsafeRawBufferPointer) -> Digest
}

extension SHA256Hasher {
    public func sha256(_ bytes: [UInt8]) -> Digest {
        bytes.withUnsafeBytes { sha256($0) }
    }
}

/// Signs with one Ed25519 secret key. Implementations must be safe to call from many threads at
/// once: a batch is signed on all cores.
public protocol EventSigner: Sendable {
    var publicKey: PublicKey { get }
    func sign(_ message: UnsafeRawBufferPointer) -> Signature
}

/// Checks Ed25519 signatures (RFC 8032, as libsodium's `crypto_sign_verify_detached`).
public protocol SignatureVerifier: Sendable {
    func isValid(_ signature: Signature, of message: UnsafeRawBufferPointer, by key: PublicKey) -> Bool
}
