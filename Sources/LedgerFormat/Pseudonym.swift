import TransparencyLog
import ConsentDomain

/// The one place that turns a subject id into its pseudonym (the `subject` reference events
/// carry): the first 16 bytes of SHA-256("consentledger-subject-v1\n" ‖ salt ‖ UTF-8(id)), in hex.
///
/// The salt has exactly ``saltLength`` bytes. A salt of any other length is refused: with a
/// variable length, bytes could move between the salt and the id without changing the hash, so
/// one pseudonym would fit several ids ("patient-1042" and "42").
public enum Pseudonym {
    public static let saltLength = 16
    static let context = Array("consentledger-subject-v1\n".utf8)
    /// Prepended to a subject record before it is signed, so the signature can be taken for no
    /// other message of the same key.
    static let recordContext = Array("consentledger-subject-record-v1\n".utf8)

    /// What a subject record's signature covers: the context and the canonical JSON
    /// `{"id":ID,"salt":HEX}`.
    public static func recordMessage(id: SubjectID, salt: [UInt8]) -> [UInt8] {
        recordContext + CanonicalJSON.serialize(.object(["id": .string(id.text), "salt": .string(Hex.encode(salt))]))
    }

    /// The pseudonym of `id` under `salt`; nil when the salt is not ``saltLength`` bytes.
    public static func ref(id: [UInt8], salt: [UInt8], hasher: any SHA256Hasher) -> SubjectRef? {
        guard salt.count == saltLength else { return nil }
        // The message on the stack and the reference from the digest's words: a writer makes
        // one for every command, and the concatenations, the hex and its reading back were
        // most of the cost.
        let digest = withUnsafeTemporaryAllocation(byteCount: context.count + salt.count + id.count, alignment: 1) { message in
            var at = message.baseAddress!
            func append(_ part: [UInt8]) {
                part.withUnsafeBytes { if let base = $0.baseAddress { at.copyMemory(from: base, byteCount: $0.count) } }
                at += part.count
            }
            append(context)
            append(salt)
            append(id)
            return hasher.sha256(UnsafeRawBufferPointer(message))
        }
        return withUnsafeTemporaryAllocation(byteCount: 32, alignment: 8) { bytes in
            digest.copyBytes(to: bytes.baseAddress!)
            return SubjectRef(pseudonymBytes: UnsafeRawBufferPointer(rebasing: bytes[0..<16]))
        }
    }
}
