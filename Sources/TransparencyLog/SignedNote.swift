/// C2SP `tlog-checkpoint`: the signed statement of a log's size and root hash.
///
/// ```
/// <origin>\n
/// <tree size, decimal>\n
/// <root hash, standard base64>\n
/// ```
public struct Checkpoint: Hashable, Sendable {
    /// The log's name: the ledger's name.
    public let origin: String
    public let size: Int64
    public let root: Digest

    public init(origin: String, size: Int64, root: Digest) {
        self.origin = origin
        self.size = size
        self.root = root
    }

    /// The note text that is signed.
    public var text: String { "\(origin)\n\(size)\n\(Base64.encode(root.bytes))\n" }

    /// Parses a checkpoint's note text. Extension lines after the root hash are allowed and
    /// ignored, as C2SP `tlog-checkpoint` says.
    public init(text: String) throws(NoteError) {
        guard text.hasSuffix("\n") else { throw NoteError("checkpoint does not end with a newline") }
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 3 else { throw NoteError("checkpoint has fewer than three lines") }
        guard !lines[0].isEmpty else { throw NoteError("checkpoint origin is empty") }
        guard let size = Int64(lines[1]), size >= 0, size <= Int64(1) << 62, String(size) == lines[1] else {
            throw NoteError("checkpoint size '\(lines[1])' is not a decimal number without leading zeros")
        }
        guard let rootBytes = Base64.decode(String(lines[2])), let root = Digest(bytes: rootBytes) else {
            throw NoteError("checkpoint root hash is not the base64 of 32 bytes")
        }
        if lines.dropFirst(3).contains(where: \.isEmpty) { throw NoteError("checkpoint has an empty extension line") }
        self.init(origin: String(lines[0]), size: size, root: root)
    }
}

/// A note verifier key in the `note` text form, `<name>+<key hash hex>+<base64(0x01 ‖ key)>`
/// (C2SP `signed-note`, Ed25519 keys).
public struct NoteVerifierKey: Hashable, Sendable, CustomStringConvertible {
    public let name: String
    /// The first four bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key), as a big-endian integer.
    public let keyHash: UInt32
    public let publicKey: PublicKey

    public init(name: String, publicKey: PublicKey, hasher: any SHA256Hasher = OpenSSLSHA256()) throws(NoteError) {
        try Self.checkName(name)
        self.name = name
        self.publicKey = publicKey
        keyHash = Self.keyHash(name: name, publicKey: publicKey, hasher: hasher)
    }

    static func keyHash(name: String, publicKey: PublicKey, hasher: any SHA256Hasher) -> UInt32 {
        VerifierKeyText.keyHash(name: name, algorithm: 0x01, publicKey: publicKey, hasher: hasher)
    }

    package static func checkName(_ name: String) throws(NoteError) {
        guard !name.isEmpty, !name.unicodeScalars.contains(where: { $0 == "+" || $0.properties.isWhitespace || $0.value < 0x20 || $0.value == 0x7F }) else {
            throw NoteError("key name '\(name)' must be non-empty, without spaces, control characters or '+'")
        }
    }

    /// Parses `<name>+<hash>+<key>` and checks the hash against the name and key.
    public init(text: String, hasher: any SHA256Hasher = OpenSSLSHA256()) throws(NoteError) {
        let (name, hash, key) = try VerifierKeyText.parse(text, algorithm: 0x01, kind: "an Ed25519 key")
        try self.init(name: name, publicKey: key, hasher: hasher)
        guard keyHash == hash else { throw NoteError("verifier key hash \(VerifierKeyText.hex(hash)) does not match its name and key") }
    }

    public var text: String { VerifierKeyText.text(name: name, hash: keyHash, algorithm: 0x01, key: publicKey) }

    public var description: String { text }
}

/// C2SP `signed-note`: a text, a blank line, and signature lines `— <name> <base64(hash ‖ sig)>`.
public enum SignedNote {
    static let dash = "\u{2014} "

    /// Signs `text` (which must end with a newline) and returns the whole note.
    public static func sign(_ text: String, key: NoteVerifierKey, signer: any EventSigner) -> String {
        let signature = Array(text.utf8).withUnsafeBytes { signer.sign($0) }
        let hash = withUnsafeBytes(of: key.keyHash.bigEndian) { Array($0) }
        return text + "\n" + dash + key.name + " " + Base64.encode(hash + signature.bytes) + "\n"
    }

    /// Checks a note's signature by `key` and returns its text. Signatures by other keys are
    /// ignored; the note must carry one by `key`.
    public static func open(_ note: String, key: NoteVerifierKey, verifier: any SignatureVerifier = Sodium()) throws(NoteError) -> String {
        let (text, signatures) = try split(note)
        var found = false
        for signature in signatures where signature.name == key.name && signature.keyHash == key.keyHash {
            guard signature.bytes.count == 64, let signature = Signature(bytes: signature.bytes),
                Array(text.utf8).withUnsafeBytes({ verifier.isValid(signature, of: $0, by: key.publicKey) })
            else { throw NoteError("the signature by \(key.name) does not verify") }
            found = true
        }
        guard found else { throw NoteError("the note has no signature by key \(key.text.split(separator: "+").prefix(2).joined(separator: "+"))") }
        return text
    }

    /// One signature line of a note: the key's name, its 4-byte key hash and the bytes after it.
    public struct SignatureLine: Hashable, Sendable {
        public let name: String
        public let keyHash: UInt32
        public let bytes: [UInt8]

        /// The line, with its final newline.
        public var text: String { SignedNote.dash + name + " " + Base64.encode(withUnsafeBytes(of: keyHash.bigEndian) { Array($0) } + bytes) + "\n" }
    }

    /// Splits a note into its text (ending in a newline) and its signature lines, checking the
    /// form only: no signature is verified.
    public static func split(_ note: String) throws(NoteError) -> (text: String, signatures: [SignatureLine]) {
        guard note.utf8.count <= maximumNoteBytes else { throw NoteError("note is too large") }
        guard let split = note.lastRange(of: "\n\n") else {
            throw NoteError("note has no blank line before its signatures")
        }
        let text = String(note[..<split.lowerBound]) + "\n"
        let block = note[split.upperBound...]
        guard block.hasSuffix("\n") else { throw NoteError("note's signature block does not end with a newline") }
        guard !text.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\n") || $0.value == 0x7F }) else {
            throw NoteError("note text contains control characters")
        }
        let lines = block.dropLast().split(separator: "\n", omittingEmptySubsequences: false)
        // As Go's note package: a note of more lines would cost a verifier its time for nothing
        // (a ledger's own line and its witnesses' are a handful).
        guard lines.count <= maximumSignatureLines else { throw NoteError("note has more than \(maximumSignatureLines) signature lines") }
        var signatures: [SignatureLine] = []
        for line in lines {
            guard line.hasPrefix(dash) else { throw NoteError("signature line does not start with '— '") }
            let rest = line.dropFirst(dash.count).split(separator: " ", omittingEmptySubsequences: false)
            guard rest.count == 2, let raw = Base64.decode(String(rest[1])), raw.count > 4 else {
                throw NoteError("malformed signature line")
            }
            let hash = raw.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            signatures.append(SignatureLine(name: String(rest[0]), keyHash: hash, bytes: Array(raw[4...])))
        }
        return (text, signatures)
    }

    /// Notes are small: a checkpoint and its signatures. Longer input is refused before parsing.
    public static let maximumNoteBytes = 1 << 20
    /// At most this many signature lines (`export-format.md`, Signed notes).
    public static let maximumSignatureLines = 100
}

/// The text form of a verifier key, `<name>+<key hash, 8 hex digits>+<base64(algorithm ‖ key)>`
/// (C2SP `signed-note`), for each signature type this package uses: 0x01 for the ledger's
/// Ed25519 notes, 0x04 for Ed25519 cosignatures (C2SP `tlog-cosignature`).
enum VerifierKeyText {
    static func keyHash(name: String, algorithm: UInt8, publicKey: PublicKey, hasher: any SHA256Hasher) -> UInt32 {
        let digest = hasher.sha256(Array(name.utf8) + [0x0A, algorithm] + publicKey.bytes).bytes
        return digest.prefix(4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    static func hex(_ hash: UInt32) -> String {
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }

    static func text(name: String, hash: UInt32, algorithm: UInt8, key: PublicKey) -> String {
        "\(name)+\(hex(hash))+\(Base64.encode([algorithm] + key.bytes))"
    }

    /// Splits `<name>+<hash>+<key>` at the first two '+' (base64 may hold more), as Go's note does.
    static func parse(_ text: String, algorithm: UInt8, kind: String) throws(NoteError) -> (name: String, hash: UInt32, key: PublicKey) {
        let first = text.split(separator: "+", maxSplits: 1, omittingEmptySubsequences: false)
        let rest = first.count == 2 ? first[1].split(separator: "+", maxSplits: 1, omittingEmptySubsequences: false) : []
        let parts = first.count == 2 && rest.count == 2 ? [first[0], rest[0], rest[1]] : []
        guard parts.count == 3, parts[1].utf8.count == 8, let hash = UInt32(parts[1], radix: 16),
            parts[1].utf8.allSatisfy({ Hex.nibble($0) != nil })
        else { throw NoteError("verifier key is not <name>+<8 hex digits>+<base64 key>") }
        guard let keyBytes = Base64.decode(String(parts[2])), keyBytes.count == 33, keyBytes[0] == algorithm,
            let key = PublicKey(bytes: Array(keyBytes[1...]))
        else { throw NoteError("verifier key is not \(kind) (algorithm byte 0x\(String(format2: algorithm)) and 32 bytes)") }
        return (String(parts[0]), hash, key)
    }
}

extension String {
    /// Two lowercase hex digits, without Foundation.
    init(format2 byte: UInt8) {
        let digits = Array("0123456789abcdef".utf8)
        self = String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]], as: UTF8.self)
    }
}

extension StringProtocol {
    /// The range of the last occurrence of `needle`, without Foundation.
    package func lastRange(of needle: String) -> Range<Index>? {
        let n = Array(needle.utf8)
        let u = Array(utf8)
        guard u.count >= n.count else { return nil }
        var i = u.count - n.count
        while i >= 0 {
            if Array(u[i..<(i + n.count)]) == n {
                let lower = utf8.index(utf8.startIndex, offsetBy: i)
                let upper = utf8.index(lower, offsetBy: n.count)
                return lower..<upper
            }
            i -= 1
        }
        return nil
    }
}

/// A note, checkpoint or verifier key that cannot be used.
public struct NoteError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Standard base64 (RFC 4648 section 4) with padding; decoding accepts only the canonical form.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let values: [Int8] = {
        var v = [Int8](repeating: -1, count: 256)
        for (i, c) in alphabet.enumerated() { v[Int(c)] = Int8(i) }
        return v
    }()

    public static func encode(_ bytes: [UInt8]) -> String {
        // Written into the string's own storage: a proof has hundreds of hashes, and building
        // each group of four through a temporary array cost more than the encoding.
        String(unsafeUninitializedCapacity: (bytes.count + 2) / 3 * 4) { out in
            var i = 0, o = 0
            func put(_ n: UInt32, _ count: Int) {
                for k in 0..<4 {
                    out[o + k] = k < count ? alphabet[Int(n >> (18 - 6 * UInt32(k)) & 63)] : 0x3D
                }
                o += 4
            }
            while i + 3 <= bytes.count {
                put(UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]), 4)
                i += 3
            }
            switch bytes.count - i {
            case 1: put(UInt32(bytes[i]) << 16, 2)
            case 2: put(UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8, 3)
            default: break
            }
            return o
        }
    }

    /// Decodes canonical padded base64; nil for anything else (so each value has one spelling).
    public static func decode(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 4 * 3)
        var i = 0
        while i < u.count {
            let pad = (u[i + 3] == 0x3D ? 1 : 0) + (u[i + 2] == 0x3D ? 1 : 0)
            guard pad == 0 || i + 4 == u.count, !(u[i + 2] == 0x3D && u[i + 3] != 0x3D) else { return nil }
            var n: UInt32 = 0
            for j in 0..<(4 - pad) {
                let v = values[Int(u[i + j])]
                guard v >= 0 else { return nil }
                n |= UInt32(v) << (18 - 6 * j)
            }
            out.append(UInt8(n >> 16 & 0xFF))
            if pad < 2 { out.append(UInt8(n >> 8 & 0xFF)) }
            if pad < 1 { out.append(UInt8(n & 0xFF)) }
            // Canonical: the bits below the last full byte must be zero.
            if pad == 2, n & 0xFFFF != 0 { return nil }
            if pad == 1, n & 0xFF != 0 { return nil }
            i += 4
        }
        return out
    }
}
