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

/// An Ed25519 key pair held in memory, derived from a 32-byte seed.
public struct SodiumSigner: EventSigner {
    public let publicKey: PublicKey
    /// libsodium's 64-byte secret key (seed followed by the public key).
    private let secretKey: [UInt8]
    public let seed: [UInt8]

    public init?(seed: [UInt8]) {
        guard seed.count == 32 else { return nil }
        _ = Sodium()
        var pk = [UInt8](repeating: 0, count: 32)
        var sk = [UInt8](repeating: 0, count: 64)
        guard crypto_sign_seed_keypair(&pk, &sk, seed) == 0 else { return nil }
        publicKey = PublicKey(bytes: pk)!
        secretKey = sk
        self.seed = seed
    }

    public static func generate() -> SodiumSigner {
        SodiumSigner(seed: Sodium().randomBytes(32))!
    }

    public func sign(_ message: UnsafeRawBufferPointer) -> Signature {
        var sig = [UInt8](repeating: 0, count: 64)
        secretKey.withUnsafeBufferPointer { sk in
            _ = crypto_sign_detached(&sig, nil, message.bindMemory(to: UInt8.self).baseAddress, UInt64(message.count), sk.baseAddress!)
        }
        return Signature(bytes: sig)!
    }
}
