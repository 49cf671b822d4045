import TransparencyLog

/// How a new ledger's signing key is kept at rest.
public enum KeyProtection: Sendable {
    /// Sealed under a passphrase (Argon2id and XSalsa20-Poly1305; `Spec/key-file.md`).
    case passphrase(SecretBytes, hardness: PassphraseHardness = .interactive)
    /// The seed in plain hex, readable by anyone who can read the file: for tests and demos only.
    case insecurePlaintext

    /// What unlocks a key stored this way.
    public var passphraseSource: PassphraseSource? {
        switch self {
        case .passphrase(let passphrase, _): return { passphrase }
        case .insecurePlaintext: return nil
        }
    }
}

/// Where a passphrase comes from when an encrypted key must be unlocked: asked for only when a
/// command signs, so reads never ask.
public typealias PassphraseSource = @Sendable () throws -> SecretBytes

/// The signing key file (`Spec/key-file.md`): one line of canonical JSON holding the Ed25519
/// seed sealed under a passphrase, or, for tests and demos, the seed in 64 lowercase hex digits.
public enum SigningKeyFile {
    public static let type = "consentledger-signing-key"
    public static let version: Int64 = 1
    public static let algorithm = "argon2id13"
    /// A key file is a few hundred bytes; anything longer is not one.
    public static let maximumSize = 4096
    /// The shortest passphrase accepted for a new key.
    public static let minimumPassphraseBytes = 8

    /// A key file's contents, before any passphrase.
    public enum Contents {
        case encrypted(EncryptedKey)
        case plaintext(SodiumSigner)
    }

    /// A sealed seed: the header says how to derive the box key and which public key the seed
    /// must give.
    public struct EncryptedKey: Sendable {
        public let publicKey: PublicKey
        public let hardness: PassphraseHardness
        public let salt: [UInt8]
        public let nonce: [UInt8]
        public let box: [UInt8]

        /// The signer, if `passphrase` opens the box and the seed gives the recorded public key.
        public func unlock(passphrase: SecretBytes, location: String) throws(ConsentError) -> SodiumSigner {
            guard let key = PassphraseBox.deriveKey(passphrase: passphrase, salt: salt, hardness: hardness) else {
                throw .storage("cannot derive the key of \(location) (\(hardness)): out of memory")
            }
            guard let seed = PassphraseBox.open(box, nonce: nonce, key: key) else {
                throw .keyLocked("wrong passphrase for the signing key \(location) (or the file was changed)")
            }
            guard let signer = SodiumSigner(seed: seed), signer.publicKey == publicKey else {
                throw .integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "\(location) opens, but its seed does not give the public key it names"))
            }
            return signer
        }
    }

    /// The key file for `signer` as `protection` says.
    /// The public key a key file holds, read without a passphrase (an encrypted file names it).
    public static func publicKey(of file: SecretBytes, location: String) throws(ConsentError) -> PublicKey {
        switch try read(file, location: location) {
        case .plaintext(let signer): return signer.publicKey
        case .encrypted(let sealed): return sealed.publicKey
        }
    }

    public static func file(for signer: SodiumSigner, protection: KeyProtection, random: (Int) -> [UInt8]) throws(ConsentError) -> SecretBytes {
        switch protection {
        case .insecurePlaintext:
            return plaintext(signer)
        case .passphrase(let passphrase, let hardness):
            return SecretBytes(copying: try encrypted(signer, passphrase: passphrase, hardness: hardness, random: random))
        }
    }

    /// The file for `signer`'s key sealed under `passphrase`. `random` gives the salt and nonce.
    public static func encrypted(_ signer: SodiumSigner, passphrase: SecretBytes, hardness: PassphraseHardness, random: (Int) -> [UInt8]) throws(ConsentError) -> [UInt8] {
        guard passphrase.count >= minimumPassphraseBytes else {
            throw .invalidRequest("the passphrase is too short: a new key's passphrase has at least \(minimumPassphraseBytes) bytes")
        }
        guard hardness.isAllowed else { throw .invalidRequest("passphrase hardness out of range: \(hardness)") }
        let salt = random(PassphraseBox.saltBytes)
        let nonce = random(PassphraseBox.nonceBytes)
        guard let key = PassphraseBox.deriveKey(passphrase: passphrase, salt: salt, hardness: hardness) else {
            throw .storage("cannot derive a key (\(hardness)): out of memory")
        }
        let seed = SecretBytes(count: 32)
        seed.withUnsafeMutableBytes { out in signer.withSeed { out.copyMemory(from: $0) } }
        let box = PassphraseBox.seal(seed, nonce: nonce, key: key)
        return encode(EncryptedKey(publicKey: signer.publicKey, hardness: hardness, salt: salt, nonce: nonce, box: box))
    }

    static func encode(_ key: EncryptedKey) -> [UInt8] {
        var out = CanonicalJSON.serialize(.object([
            "type": .string(type),
            "version": .int(version),
            "publicKey": .string(key.publicKey.hex),
            "kdf": .object([
                "algorithm": .string(algorithm),
                "opslimit": .int(Int64(key.hardness.opslimit)),
                "memlimit": .int(Int64(key.hardness.memlimit)),
                "salt": .string(Base64.encode(key.salt)),
            ]),
            "nonce": .string(Base64.encode(key.nonce)),
            "box": .string(Base64.encode(key.box)),
        ]))
        out.append(0x0A)
        return out
    }

    /// The insecure file for `signer`: its seed in 64 lowercase hex digits and a newline, in
    /// secret memory.
    public static func plaintext(_ signer: SodiumSigner) -> SecretBytes {
        let digits = Array("0123456789abcdef".utf8)
        let text = SecretBytes(count: 65)
        text.withUnsafeMutableBytes { out in
            signer.withSeed { seed in
                for (i, byte) in seed.enumerated() {
                    out[2 * i] = digits[Int(byte >> 4)]
                    out[2 * i + 1] = digits[Int(byte & 0x0F)]
                }
            }
            out[64] = 0x0A
        }
        return text
    }

    /// Reads a key file's bytes. An encrypted file is checked member by member; a plaintext one
    /// is decoded straight into secret memory.
    public static func read(_ file: SecretBytes, location: String) throws(ConsentError) -> Contents {
        func bad(_ problem: String) -> ConsentError {
            .integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "\(location) is not a signing key file: \(problem)"))
        }
        guard file.count <= maximumSize else { throw bad("it has \(file.count) bytes, more than a key file's \(maximumSize)") }
        let first = file.withUnsafeBytes { $0.first }
        if first == UInt8(ascii: "{") {
            return .encrypted(try readEncrypted(file.withUnsafeBytes { Array($0) }, bad: bad))
        }
        // The plaintext form: 64 lowercase hex digits, then optional line ends and spaces.
        let seed = SecretBytes(count: 32)
        let valid = file.withUnsafeBytes { raw -> Bool in
            var end = raw.count
            while end > 0, raw[end - 1] == 0x0A || raw[end - 1] == 0x0D || raw[end - 1] == 0x20 { end -= 1 }
            guard end == 64 else { return false }
            return seed.withUnsafeMutableBytes { out in
                for i in 0..<32 {
                    guard let high = Hex.nibble(raw[2 * i]), let low = Hex.nibble(raw[2 * i + 1]) else { return false }
                    out[i] = high << 4 | low
                }
                return true
            }
        }
        guard valid, let signer = SodiumSigner(seed: seed) else {
            throw bad("neither an encrypted key (a JSON object) nor a 64-digit lowercase hex Ed25519 seed")
        }
        return .plaintext(signer)
    }

    static func readEncrypted(_ bytes: [UInt8], bad: (String) -> ConsentError) throws(ConsentError) -> EncryptedKey {
        var body = bytes[...]
        if body.last == 0x0A { body = body.dropLast() }
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(Array(body), canonical: true)
        } catch {
            throw bad("\(error)")
        }
        guard let object = value.objectValue else { throw bad("not a JSON object") }
        let expected: Set<String> = ["type", "version", "publicKey", "kdf", "nonce", "box"]
        if let extra = Set(object.keys).subtracting(expected).sorted().first { throw bad("unknown member '\(extra)'") }
        guard object["type"]?.stringValue == type else { throw bad("member 'type' is not \"\(type)\"") }
        guard let version = object["version"]?.intValue else { throw bad("member 'version' is missing") }
        guard version == Self.version else { throw bad("version \(version) is not supported (this consentctl reads version \(Self.version))") }
        guard let publicKey = object["publicKey"]?.stringValue.flatMap({ PublicKey(hex: $0) }) else { throw bad("member 'publicKey' is not 64 lowercase hex digits") }
        guard let kdf = object["kdf"]?.objectValue else { throw bad("member 'kdf' is not an object") }
        if let extra = Set(kdf.keys).subtracting(["algorithm", "opslimit", "memlimit", "salt"]).sorted().first { throw bad("unknown member 'kdf.\(extra)'") }
        guard kdf["algorithm"]?.stringValue == algorithm else { throw bad("member 'kdf.algorithm' is not \"\(algorithm)\"") }
        guard let ops = kdf["opslimit"]?.intValue, let mem = kdf["memlimit"]?.intValue, ops > 0, mem > 0 else {
            throw bad("members 'kdf.opslimit' and 'kdf.memlimit' must be positive integers")
        }
        let hardness = PassphraseHardness(opslimit: UInt64(ops), memlimit: UInt64(mem))
        guard hardness.isAllowed else {
            throw bad("its Argon2id limits (\(ops) passes, \(mem) bytes) are outside \(PassphraseHardness.minimum.opslimit)–\(PassphraseHardness.maximum.opslimit) passes and \(PassphraseHardness.minimum.memlimit)–\(PassphraseHardness.maximum.memlimit) bytes")
        }
        guard let salt = kdf["salt"]?.stringValue.flatMap(Base64.decode), salt.count == PassphraseBox.saltBytes else {
            throw bad("member 'kdf.salt' is not \(PassphraseBox.saltBytes) bytes of base64")
        }
        guard let nonce = object["nonce"]?.stringValue.flatMap(Base64.decode), nonce.count == PassphraseBox.nonceBytes else {
            throw bad("member 'nonce' is not \(PassphraseBox.nonceBytes) bytes of base64")
        }
        guard let box = object["box"]?.stringValue.flatMap(Base64.decode), box.count == PassphraseBox.macBytes + 32 else {
            throw bad("member 'box' is not \(PassphraseBox.macBytes + 32) bytes of base64")
        }
        return EncryptedKey(publicKey: publicKey, hardness: hardness, salt: salt, nonce: nonce, box: box)
    }
}
