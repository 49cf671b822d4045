/// A SHA-256 digest, held inline (no allocation: replay makes two per event).
public struct Digest: Hashable, Sendable, CustomStringConvertible {
    private var words: (UInt64, UInt64, UInt64, UInt64)

    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 32 else { return nil }
        words = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
    }

    /// The common case, not generic: a call from another module need not go through the
    /// unspecialised generic initialiser (tree hashes are read one by one on every proof).
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        words = (0, 0, 0, 0)
        bytes.withUnsafeBytes { source in withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: source) } }
    }

    /// Reads 32 bytes from `pointer`.
    package init(copying pointer: UnsafeRawPointer) {
        words = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: 32)) }
    }

    public init?(hex: String) {
        var text = hex
        guard let d = text.withUTF8({ Digest(hexBytes: $0) }) else { return nil }
        self = d
    }

    /// Decodes 64 lowercase hex digits.
    public init?(hexBytes: UnsafeBufferPointer<UInt8>) {
        words = (0, 0, 0, 0)
        guard withUnsafeMutableBytes(of: &words, { Hex.decode(hexBytes, into: $0) }) else { return nil }
    }

    /// All zeros: the `prev` of the genesis event.
    public static let zero = Digest(bytes: [UInt8](repeating: 0, count: 32))!

    public var bytes: [UInt8] { withUnsafeBytes(of: words) { Array($0) } }

    /// Appends the 64 lowercase hex digits to `out`.
    package func appendHex(to out: inout [UInt8]) {
        withUnsafeBytes(of: words) { Hex.append($0, to: &out) }
    }

    /// Writes the 32 bytes at `pointer`, without allocating.
    package func copyBytes(to pointer: UnsafeMutableRawPointer) {
        withUnsafeBytes(of: words) { pointer.copyMemory(from: $0.baseAddress!, byteCount: 32) }
    }

    public static func == (a: Digest, b: Digest) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }

    public var hex: String { withUnsafeBytes(of: words) { Hex.encode($0) } }
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

    /// Stands in where a signature was only checked for shape (see `EventCodec.splitLine`).
    package static let placeholder = Signature(bytes: [UInt8](repeating: 0, count: 64))!
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
