/// A witness's public key (C2SP `tlog-cosignature`, Ed25519, signature type 0x04), in the
/// verifier-key text form `<name>+<key id, 8 hex digits>+<base64(0x04 ‖ key)>`.
///
/// The key id is the first four bytes of SHA-256(name ‖ "\n" ‖ 0x04 ‖ public key): it differs
/// from the id the same key would have as a note signer (0x01), so a cosignature can never pass
/// for a log's own signature, nor the reverse.
public struct CosignerKey: Hashable, Sendable, CustomStringConvertible {
    public static let algorithm: UInt8 = 0x04
    public let name: String
    public let keyID: UInt32
    public let publicKey: PublicKey

    public init(name: String, publicKey: PublicKey, hasher: any SHA256Hasher = OpenSSLSHA256()) throws(NoteError) {
        try NoteVerifierKey.checkName(name)
        self.name = name
        self.publicKey = publicKey
        keyID = VerifierKeyText.keyHash(name: name, algorithm: Self.algorithm, publicKey: publicKey, hasher: hasher)
    }

    /// Parses `<name>+<key id>+<base64(0x04 ‖ key)>` and checks the id against the name and key.
    public init(text: String, hasher: any SHA256Hasher = OpenSSLSHA256()) throws(NoteError) {
        let (name, id, key) = try VerifierKeyText.parse(text, algorithm: Self.algorithm, kind: "a witness's Ed25519 cosignature key")
        try self.init(name: name, publicKey: key, hasher: hasher)
        guard keyID == id else { throw NoteError("witness key id \(VerifierKeyText.hex(id)) does not match its name and key") }
    }

    public var text: String { VerifierKeyText.text(name: name, hash: keyID, algorithm: Self.algorithm, key: publicKey) }
    public var description: String { text }
}

/// A cosignature (C2SP `tlog-cosignature`, `cosignature/v1`): a witness's timestamped Ed25519
/// signature of a checkpoint, saying that as of `timestamp` this is the largest tree of the log
/// it has seen to be consistent with everything it saw before.
///
/// It is a note signature line `— <name> base64(key id ‖ timestamp ‖ signature)`, the timestamp
/// a big-endian u64 of POSIX seconds, the signature over
///
/// ```
/// cosignature/v1\n
/// time <timestamp, decimal>\n
/// <the checkpoint's note text, extension lines included>
/// ```
public struct Cosignature: Hashable, Sendable {
    public let timestamp: UInt64
    public let signature: Signature

    public init(timestamp: UInt64, signature: Signature) {
        self.timestamp = timestamp
        self.signature = signature
    }

    /// The bytes a witness signs for `checkpointText` (a note's text, ending in a newline).
    public static func message(checkpointText: String, timestamp: UInt64) -> [UInt8] {
        Array("cosignature/v1\ntime \(timestamp)\n".utf8) + Array(checkpointText.utf8)
    }

    /// Cosigns `checkpointText` and returns the signature line, ending in a newline.
    public static func sign(checkpointText: String, timestamp: UInt64, key: CosignerKey, signer: any EventSigner) throws(NoteError) -> String {
        guard timestamp <= UInt64(Int64.max) else { throw NoteError("a cosignature's timestamp must not exceed 2^63 - 1") }
        let signature = message(checkpointText: checkpointText, timestamp: timestamp).withUnsafeBytes { signer.sign($0) }
        return Cosignature(timestamp: timestamp, signature: signature).line(key: key).text
    }

    func line(key: CosignerKey) -> SignedNote.SignatureLine {
        SignedNote.SignatureLine(name: key.name, keyHash: key.keyID, bytes: withUnsafeBytes(of: timestamp.bigEndian) { Array($0) } + signature.bytes)
    }

    /// Reads the bytes after the key id of a signature line: 8 bytes of timestamp, 64 of signature.
    public init(lineBytes bytes: [UInt8]) throws(NoteError) {
        guard bytes.count == 72, let signature = Signature(bytes: Array(bytes[8...])) else {
            throw NoteError("a cosignature line holds \(bytes.count + 4) bytes, not 4 of key id, 8 of timestamp and 64 of signature")
        }
        let timestamp = bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard timestamp <= UInt64(Int64.max) else { throw NoteError("a cosignature's timestamp exceeds 2^63 - 1") }
        self.init(timestamp: timestamp, signature: signature)
    }

    /// The cosigners among `keys` whose cosignatures in `note` verify, with their timestamps.
    /// Lines of other keys are ignored, as the spec says; a line that names one of `keys` but
    /// does not verify is an error, since it can only be a forgery or damage.
    public static func verifiedCosigners(of note: String, keys: [CosignerKey], verifier: any SignatureVerifier = Sodium()) throws(NoteError) -> [CosignerKey: UInt64] {
        let (text, lines) = try SignedNote.split(note)
        var found: [CosignerKey: UInt64] = [:]
        for line in lines {
            guard let key = keys.first(where: { $0.name == line.name && $0.keyID == line.keyHash }) else { continue }
            let cosignature = try Cosignature(lineBytes: line.bytes)
            let message = Self.message(checkpointText: text, timestamp: cosignature.timestamp)
            guard message.withUnsafeBytes({ verifier.isValid(cosignature.signature, of: $0, by: key.publicKey) }) else {
                throw NoteError("the cosignature by witness \(key.name) does not verify")
            }
            found[key] = max(found[key] ?? 0, cosignature.timestamp)
        }
        return found
    }
}

/// What an auditor asks of a checkpoint: valid cosignatures from at least `quorum` of `witnesses`.
public struct WitnessPolicy: Hashable, Sendable {
    public let witnesses: [CosignerKey]
    public let quorum: Int

    /// `quorum` must be between 1 and the number of distinct witnesses.
    public init(witnesses: [CosignerKey], quorum: Int) throws(NoteError) {
        let distinct = Set(witnesses)
        guard distinct.count == witnesses.count else { throw NoteError("a witness key is given twice") }
        guard quorum >= 1, quorum <= witnesses.count else {
            throw NoteError("the quorum \(quorum) must be between 1 and the number of witness keys (\(witnesses.count))")
        }
        self.witnesses = witnesses
        self.quorum = quorum
    }

    /// Checks that `note` carries at least `quorum` valid cosignatures from distinct witnesses.
    public func check(_ note: String, verifier: any SignatureVerifier = Sodium()) throws(NoteError) {
        let cosigned = try Cosignature.verifiedCosigners(of: note, keys: witnesses, verifier: verifier)
        guard cosigned.count >= quorum else {
            let names = cosigned.keys.map(\.name).sorted()
            throw NoteError("the checkpoint carries valid cosignatures from \(cosigned.count) of the \(quorum) witnesses required\(names.isEmpty ? "" : " (" + names.joined(separator: ", ") + ")")")
        }
    }
}
