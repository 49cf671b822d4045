import TransparencyLog
import ConsentDomain

/// A subject's key for personal data inside its events: SHA-256("consentledger-evidence-key-v1\n"
/// ‖ salt ‖ UTF-8(id)) over the subject's record. It is derived from the record, not stored, so
/// the record is the one secret per subject: destroying it (an erasure) destroys the key, and
/// whoever holds the record (the ledger, the subject's own export) can open what it seals.
public struct SubjectKey: Sendable {
    let bytes: [UInt8]

    static let context = Array("consentledger-evidence-key-v1\n".utf8)

    /// The key of the subject whose record holds `id` and `salt`.
    public init(id: SubjectID, salt: [UInt8], hasher: any SHA256Hasher) {
        bytes = hasher.sha256(Self.context + salt + id.utf8).bytes
    }
}

/// Why a sealed evidence reference cannot be opened: it does not open under the subject's key,
/// or it opens to something no command could have recorded.
public struct EvidenceSealError: Error, Hashable, Sendable, CustomStringConvertible {
    public let problem: String
    public var description: String { problem }
}

/// A grant's evidence reference sealed under its subject's key (`Spec/erasure.md`, Sealed
/// evidence): the 24-byte nonce followed by the XSalsa20-Poly1305 box (`crypto_secretbox_easy`:
/// the 16-byte tag, then the ciphertext of the reference's UTF-8 bytes). The log holds only this
/// form (member `sealedEvidence`); the signature, hash chain and Merkle tree cover it, so an
/// erasure that destroys the key leaves every proof intact.
public enum EvidenceSeal {
    static let nonceContext = Array("consentledger-evidence-nonce-v1\n".utf8)
    /// Nonce and tag.
    public static let overhead = 24 + 16
    /// The shortest and longest sealed form: a reference of 1 to `GrantEvidence.maxReferenceBytes` bytes.
    public static let minBytes = overhead + 1
    public static let maxBytes = overhead + GrantEvidence.maxReferenceBytes

    /// `reference` sealed for the event of `seq`. The nonce is the first 24 bytes of
    /// SHA-256("consentledger-evidence-nonce-v1\n" ‖ key ‖ seq as 8 bytes big-endian ‖ reference):
    /// deterministic, so a ledger and its test vectors are reproducible, and never the same for
    /// two different references under one key (the reference is hashed into it), so a command
    /// that is rewritten after a crash cannot reuse a nonce with other bytes.
    public static func seal(_ reference: String, seq: UInt64, key: SubjectKey, hasher: any SHA256Hasher) -> [UInt8] {
        let plain = Array(reference.utf8)
        let seqBytes = (0..<8).map { UInt8(truncatingIfNeeded: seq >> (56 - 8 * UInt64($0))) }
        let nonce = Array(hasher.sha256(nonceContext + key.bytes + seqBytes + plain).bytes.prefix(24))
        let box = plain.withUnsafeBytes { p in key.bytes.withUnsafeBytes { k in SecretBox.seal(p, nonce: nonce, key: k) } }
        return nonce + box
    }

    /// The reference inside `sealed`, checked as a command checks a reference.
    public static func open(_ sealed: [UInt8], key: SubjectKey) throws(EvidenceSealError) -> String {
        guard sealed.count >= minBytes, sealed.count <= maxBytes else {
            throw EvidenceSealError(problem: "the sealed evidence reference is \(sealed.count) bytes, not \(minBytes) to \(maxBytes)")
        }
        var plain = [UInt8](repeating: 0, count: sealed.count - overhead)
        let opened = plain.withUnsafeMutableBytes { m in
            key.bytes.withUnsafeBytes { k in SecretBox.open(Array(sealed[24...]), nonce: Array(sealed[..<24]), key: k, into: m) }
        }
        guard opened else {
            throw EvidenceSealError(problem: "the sealed evidence reference does not open under the subject's key")
        }
        guard let reference = String(validating: plain, as: UTF8.self) else {
            throw EvidenceSealError(problem: "the sealed evidence reference opens to bytes that are not UTF-8")
        }
        if let problem = GrantEvidence(reference: reference).problem {
            throw EvidenceSealError(problem: "the sealed evidence reference opens to one no command records: \(problem)")
        }
        return reference
    }

    /// The event as the log holds it: a reference in clear moved into its sealed form.
    public static func sealing(_ event: LedgerEvent, key: SubjectKey, hasher: any SHA256Hasher) -> LedgerEvent {
        event.mappingEvidence { evidence in
            guard let reference = evidence.reference else { return evidence }
            var sealed = evidence
            sealed.sealedReference = seal(reference, seq: event.seq, key: key, hasher: hasher)
            sealed.reference = nil
            return sealed
        }
    }

    /// `evidence` with its sealed reference opened (and kept), or as it is when nothing is sealed.
    public static func opening(_ evidence: GrantEvidence, key: SubjectKey) throws(EvidenceSealError) -> GrantEvidence {
        guard evidence.reference == nil, let sealed = evidence.sealedReference else { return evidence }
        var opened = evidence
        opened.reference = try open(sealed, key: key)
        return opened
    }

    /// The event with its sealed reference opened.
    public static func opening(_ event: LedgerEvent, key: SubjectKey) throws(EvidenceSealError) -> LedgerEvent {
        try event.mappingEvidence { (e) throws(EvidenceSealError) in try opening(e, key: key) }
    }
}
