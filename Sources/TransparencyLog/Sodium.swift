import CSodium

/// libsodium: SHA-256, Ed25519 signing and verification.
public struct Sodium: SHA256Hasher, SignatureVerifier {
    /// `sodium_init` is idempotent and thread-safe; calling it from every initialiser keeps
    /// callers from having to remember it.
    public init() {
        _ = Sodium.initialized
    }

    private static let initialized: Bool = {
        guard sodium_init() >= 0 else { fatalError("libsodium failed to initialise") }
        return true
    }()

    public func sha256(_ bytes: UnsafeRawBufferPointer) -> Digest {
        var out: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &out) { o in
            crypto_hash_sha256(o.baseAddress!.assumingMemoryBound(to: UInt8.self), bytes.bindMemory(to: UInt8.self).baseAddress, UInt64(bytes.count))
            return Digest(copying: o.baseAddress!)
        }
    }

    public func isValid(_ signature: Signature, of message: UnsafeRawBufferPointer, by key: PublicKey) -> Bool {
        signature.bytes.withUnsafeBufferPointer { s in
            key.bytes.withUnsafeBufferPointer { k in
                crypto_sign_verify_detached(s.baseAddress!, message.bindMemory(to: UInt8.self).baseAddress, UInt64(message.count), k.baseAddress!) == 0
            }
        }
    }

    /// A fresh random 32-byte seed for a new key.
    public func randomBytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }
}

/// Secret bytes kept out of Swift's own memory: in `sodium_malloc`ed memory (guard pages around
/// it, locked against swapping where the system allows), zeroed by `sodium_free` when the last
/// reference goes. Swift arrays may be copied and never zeroed, so a secret lives here instead.
public final class SecretBytes: @unchecked Sendable {
    // Written only in `init`; read through `withUnsafeBytes`, which never hands out the pointer
    // beyond the closure. So sharing across threads is safe.
    private let pointer: UnsafeMutableRawPointer
    public let count: Int

    /// `count` zero bytes, for the caller to fill through `withUnsafeMutableBytes` once.
    public init(count: Int) {
        _ = Sodium()
        guard let pointer = sodium_malloc(max(count, 1)) else { fatalError("sodium_malloc(\(count)) failed: out of memory") }
        sodium_memzero(pointer, max(count, 1))
        self.pointer = pointer
        self.count = count
    }

    public func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    public func withUnsafeMutableBytes<T>(_ body: (UnsafeMutableRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeMutableRawBufferPointer(start: pointer, count: count))
    }

    deinit { sodium_free(pointer) }
}

/// Overwrites a buffer that held a secret (`sodium_memzero`, which the compiler cannot drop).
public func zeroize(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { sodium_memzero(base, $0.count) } }
}

/// An Ed25519 key pair held in memory, derived from a 32-byte seed. The secret half lives in
/// ``SecretBytes`` and is zeroed when the signer is released.
public struct SodiumSigner: EventSigner {
    public let publicKey: PublicKey
    /// libsodium's 64-byte secret key (seed followed by the public key).
    private let secretKey: SecretBytes

    public init?(seed: [UInt8]) {
        guard let signer = seed.withUnsafeBytes({ SodiumSigner(seedBytes: $0) }) else { return nil }
        self = signer
    }

    /// A signer from a seed already in secret memory (an unlocked key file), with no Swift copy.
    public init?(seed: SecretBytes) {
        guard let signer = seed.withUnsafeBytes({ SodiumSigner(seedBytes: $0) }) else { return nil }
        self = signer
    }

    private init?(seedBytes seed: UnsafeRawBufferPointer) {
        guard seed.count == 32 else { return nil }
        let secret = SecretBytes(count: 64)
        var pk = [UInt8](repeating: 0, count: 32)
        let ok = secret.withUnsafeMutableBytes { sk in
            crypto_sign_seed_keypair(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self), seed.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 0
        }
        guard ok else { return nil }
        publicKey = PublicKey(bytes: pk)!
        secretKey = secret
    }

    public static func generate() -> SodiumSigner {
        var seed = Sodium().randomBytes(32)
        defer { zeroize(&seed) }
        return SodiumSigner(seed: seed)!
    }

    /// The 32-byte seed, for storing the key: only for the closure's duration, so the caller
    /// decides where a copy goes and zeroes it.
    public func withSeed<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try secretKey.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(32))) }
    }

    public func sign(_ message: UnsafeRawBufferPointer) -> Signature {
        var sig = [UInt8](repeating: 0, count: 64)
        secretKey.withUnsafeBytes { sk in
            _ = crypto_sign_detached(&sig, nil, message.bindMemory(to: UInt8.self).baseAddress, UInt64(message.count), sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return Signature(bytes: sig)!
    }
}
