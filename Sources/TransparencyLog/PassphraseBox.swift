import CSodium

/// How hard a passphrase is made to guess: the Argon2id cost that `crypto_pwhash` spends on it.
/// Every unlock pays it once, so a long-running writer unlocks once and keeps the key.
public struct PassphraseHardness: Sendable, Hashable, CustomStringConvertible {
    /// Argon2id passes over memory.
    public let opslimit: UInt64
    /// Argon2id memory, in bytes.
    public let memlimit: UInt64

    public init(opslimit: UInt64, memlimit: UInt64) {
        self.opslimit = opslimit
        self.memlimit = memlimit
    }

    /// libsodium's INTERACTIVE limits (2 passes, 64 MiB): the default.
    public static var interactive: PassphraseHardness {
        PassphraseHardness(opslimit: UInt64(crypto_pwhash_opslimit_interactive()), memlimit: UInt64(crypto_pwhash_memlimit_interactive()))
    }

    /// libsodium's MODERATE limits (3 passes, 256 MiB).
    public static var moderate: PassphraseHardness {
        PassphraseHardness(opslimit: UInt64(crypto_pwhash_opslimit_moderate()), memlimit: UInt64(crypto_pwhash_memlimit_moderate()))
    }

    /// The most a key file may ask for (libsodium's SENSITIVE limits: 4 passes, 1 GiB). A file
    /// asking for more is refused before any work, so that an edited file cannot make an unlock
    /// take minutes or all the memory there is.
    public static var maximum: PassphraseHardness {
        PassphraseHardness(opslimit: UInt64(crypto_pwhash_opslimit_sensitive()), memlimit: UInt64(crypto_pwhash_memlimit_sensitive()))
    }

    /// libsodium's floor for Argon2id.
    public static var minimum: PassphraseHardness {
        PassphraseHardness(opslimit: UInt64(crypto_pwhash_opslimit_min()), memlimit: UInt64(crypto_pwhash_memlimit_min()))
    }

    /// Whether libsodium accepts these limits and they are within ``maximum``.
    public var isAllowed: Bool {
        opslimit >= Self.minimum.opslimit && memlimit >= Self.minimum.memlimit
            && opslimit <= Self.maximum.opslimit && memlimit <= Self.maximum.memlimit
    }

    public var description: String { "Argon2id, \(opslimit) passes over \(memlimit / 1_048_576) MiB" }
}

/// A secret sealed under a passphrase: Argon2id (`crypto_pwhash`, algorithm `argon2id13`) derives
/// a 32-byte key from the passphrase and a random salt, and XSalsa20-Poly1305
/// (`crypto_secretbox_easy`) seals the secret under it with a random nonce. The format of the
/// file around it is in `Spec/key-file.md`.
public enum PassphraseBox {
    public static var saltBytes: Int { Int(crypto_pwhash_saltbytes()) }
    public static var nonceBytes: Int { SecretBox.nonceBytes }
    public static var macBytes: Int { SecretBox.macBytes }

    /// The box key for `passphrase`; nil when Argon2id cannot run (out of memory, or limits
    /// libsodium refuses).
    public static func deriveKey(passphrase: SecretBytes, salt: [UInt8], hardness: PassphraseHardness) -> SecretBytes? {
        _ = Sodium()
        guard salt.count == saltBytes, hardness.isAllowed else { return nil }
        let key = SecretBytes(count: Int(crypto_secretbox_keybytes()))
        let ok = key.withUnsafeMutableBytes { k in
            passphrase.withUnsafeBytes { p in
                crypto_pwhash(
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(k.count),
                    p.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(p.count),
                    salt, hardness.opslimit, Int(hardness.memlimit), crypto_pwhash_alg_argon2id13()) == 0
            }
        }
        return ok ? key : nil
    }

    /// `secret` sealed under `key`: the 16-byte Poly1305 tag followed by the ciphertext.
    public static func seal(_ secret: SecretBytes, nonce: [UInt8], key: SecretBytes) -> [UInt8] {
        secret.withUnsafeBytes { m in key.withUnsafeBytes { k in SecretBox.seal(m, nonce: nonce, key: k) } }
    }

    /// The secret in `box`, opened straight into secret memory; nil when the tag does not match
    /// (a wrong passphrase, or a box or header that was changed).
    public static func open(_ box: [UInt8], nonce: [UInt8], key: SecretBytes) -> SecretBytes? {
        guard box.count >= macBytes else { return nil }
        let secret = SecretBytes(count: box.count - macBytes)
        let ok = secret.withUnsafeMutableBytes { m in key.withUnsafeBytes { k in SecretBox.open(box, nonce: nonce, key: k, into: m) } }
        return ok ? secret : nil
    }
}

/// XSalsa20-Poly1305 (`crypto_secretbox_easy`), the one place that seals and opens a box: a
/// key file's secret (``PassphraseBox``) and a grant's evidence reference sealed under its
/// subject's key. A box is the 16-byte Poly1305 tag followed by the ciphertext.
public enum SecretBox {
    public static var keyBytes: Int { Int(crypto_secretbox_keybytes()) }
    public static var nonceBytes: Int { Int(crypto_secretbox_noncebytes()) }
    public static var macBytes: Int { Int(crypto_secretbox_macbytes()) }

    /// `message` sealed under the 32-byte `key` with the 24-byte `nonce`.
    public static func seal(_ message: UnsafeRawBufferPointer, nonce: [UInt8], key: UnsafeRawBufferPointer) -> [UInt8] {
        precondition(nonce.count == nonceBytes && key.count == keyBytes)
        _ = Sodium()
        var box = [UInt8](repeating: 0, count: macBytes + message.count)
        var empty: UInt8 = 0
        let m = message.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? withUnsafePointer(to: &empty) { $0 }
        _ = crypto_secretbox_easy(&box, m, UInt64(message.count), nonce, key.baseAddress!.assumingMemoryBound(to: UInt8.self))
        return box
    }

    /// Opens `box` into `message` (exactly `box.count - macBytes` bytes); false, with `message`
    /// zeroed, when the nonce or key has the wrong length or the tag does not match.
    public static func open(_ box: [UInt8], nonce: [UInt8], key: UnsafeRawBufferPointer, into message: UnsafeMutableRawBufferPointer) -> Bool {
        guard nonce.count == nonceBytes, key.count == keyBytes, box.count >= macBytes, message.count == box.count - macBytes else { return false }
        _ = Sodium()
        var scratch: UInt8 = 0
        let out = message.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? withUnsafeMutablePointer(to: &scratch) { $0 }
        let ok = crypto_secretbox_open_easy(out, box, UInt64(box.count), nonce, key.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 0
        if !ok, let base = message.baseAddress { sodium_memzero(base, message.count) }
        return ok
    }
}

extension SecretBytes {
    /// A copy of `bytes` in secret memory. The caller zeroes its own copy.
    public convenience init(copying bytes: some Collection<UInt8>) {
        self.init(count: bytes.count)
        withUnsafeMutableBytes { out in
            for (i, byte) in bytes.enumerated() { out[i] = byte }
        }
    }

    /// Whether two secrets hold the same bytes, in time that does not depend on where they differ.
    public func constantTimeEquals(_ other: SecretBytes) -> Bool {
        guard count == other.count else { return false }
        return withUnsafeBytes { a in other.withUnsafeBytes { b in sodium_memcmp(a.baseAddress!, b.baseAddress!, count) == 0 } }
    }
}
