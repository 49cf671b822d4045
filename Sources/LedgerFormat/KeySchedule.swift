import ConsentDomain
import TransparencyLog

/// The message a new key signs when a `key.rotated` event introduces it (`Spec/ledger-format.md`,
/// key.rotated):
///
/// ```
/// "consentledger-key-handover-v1\n" ‖ LEDGER ‖ "\n" ‖ hex(PREV) ‖ "\n" ‖ hex(OLD) ‖ "\n" ‖ hex(NEW) ‖ "\n"
/// ```
///
/// LEDGER is the ledger's name, PREV the rotation event's `prev` (the hash of the event before
/// it), OLD the key in force and NEW the new key. The new key's signature binds it to this
/// ledger, this point of its history and this predecessor: whoever holds only the old key cannot
/// name a successor, and a handover cannot be replayed into another history.
public enum KeyHandover {
    public static let context: [UInt8] = Array("consentledger-key-handover-v1\n".utf8)

    public static func message(ledger: String, prev: Digest, from old: PublicKey, to new: PublicKey) -> [UInt8] {
        var out = context
        out += Array(ledger.utf8) + [0x0A]
        out += Array(prev.hex.utf8) + [0x0A]
        out += Array(old.hex.utf8) + [0x0A]
        out += Array(new.hex.utf8) + [0x0A]
        return out
    }
}

/// Which key signs what: the genesis key, then each key a `key.rotated` event introduced.
///
/// A key is **in force** for the event at seq N when it is the newest key introduced before N
/// (the genesis key for every event up to the first rotation, the rotation event itself
/// included, since the key it retires signs it). A checkpoint of the first N records is signed
/// by the key in force for seq N: the key that signs whatever comes next, so the head a rotation
/// commits is already the new key's.
public struct KeySchedule: Hashable, Sendable {
    /// One key and the events it signs.
    public struct Period: Hashable, Sendable {
        /// The first seq the key signs: 0 for the genesis key, the rotation's seq + 1 otherwise.
        public let from: UInt64
        public let key: PublicKey
        /// hex(SHA-256(key)[0:8]), the events' `kid`.
        public let keyID: String

        /// The seq of the `key.rotated` event that introduced the key (nil for the genesis key).
        public var rotation: UInt64? { from == 0 ? nil : from - 1 }
    }

    /// Oldest first; never empty.
    public private(set) var periods: [Period]

    /// A retired key marked compromised (`key.revoked`): the events it signed from `since` up to
    /// its rotation must be the attested ones.
    public struct Revocation: Hashable, Sendable {
        /// The seq of the `key.revoked` event.
        public let seq: UInt64
        public let keyID: String
        /// The first seq the key may have signed for someone else.
        public let since: UInt64
        /// The last seq the key signed: the rotation that retired it.
        public let until: UInt64
        /// The hashes of the honest events of seq `since` … `until`, in order.
        public let attested: [Digest]
    }

    /// Oldest first.
    public private(set) var revocations: [Revocation] = []
    public init(genesis key: PublicKey, hasher: any SHA256Hasher) {
        periods = [Period(from: 0, key: key, keyID: Self.keyID(of: key, hasher: hasher))]
    }

    public static func keyID(of key: PublicKey, hasher: any SHA256Hasher) -> String {
        Hex.encode(hasher.sha256(key.bytes).bytes.prefix(8))
    }

    /// The genesis key.
    public var original: Period { periods[0] }
    /// The newest key.
    public var current: Period { periods[periods.count - 1] }

    /// The key in force for the event at `seq`.
    public func forEvent(_ seq: UInt64) -> Period {
        periods.last { $0.from <= seq } ?? periods[0]
    }

    /// The key that signs a checkpoint of the first `size` records.
    public func forCheckpoint(size: Int64) -> Period {
        forEvent(UInt64(max(size, 0)))
    }

    /// The period of a key, if the ledger has used it.
    public func period(of key: PublicKey) -> Period? {
        periods.first { $0.key == key }
    }

    public func period(keyID: String) -> Period? {
        periods.first { $0.keyID == keyID }
    }

    /// Why an event of `seq` whose `kid` is `keyID` is not signed by the key in force, or nil.
    public func keyProblem(keyID: String, seq: UInt64) -> String? {
        let inForce = forEvent(seq)
        guard keyID != inForce.keyID else { return nil }
        let retired = period(keyID: keyID).map { $0.from < inForce.from } == true ? " (a key this ledger has rotated away from)" : ""
        return "signed with key id \(keyID)\(retired), not the ledger's key in force for this event, \(inForce.keyID)"
    }

    /// Why a `key.rotated` event cannot follow the schedule so far.
    public struct Refusal: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Takes in the rotation of event `seq`, whose body's `prev` is `prev` and whose `kid` is
    /// `keyID`. Checks, in this order: the event is signed by the key in force (`kid`; the
    /// signature itself is the caller's to check, with the line), the rotation follows the
    /// previous one, the new key is a valid key the ledger never used, and the handover
    /// signature verifies with the new key.
    public mutating func admit(_ rotation: KeyRotated, seq: UInt64, prev: Digest, keyID: String, ledger: String, hasher: any SHA256Hasher, verifier: any SignatureVerifier) throws(Refusal) {
        let inForce = forEvent(seq)
        guard keyID == inForce.keyID else {
            throw Refusal(description: "the key rotation is signed with key id \(keyID), not with the key in force, \(inForce.keyID)")
        }
        guard seq >= current.from else {
            throw Refusal(description: "the key rotation comes before the rotation at seq \(current.rotation ?? 0)")
        }
        guard let new = PublicKey(hex: rotation.publicKey) else {
            throw Refusal(description: "the key rotation's publicKey is not a 32-byte key")
        }
        let newID = Self.keyID(of: new, hasher: hasher)
        guard period(of: new) == nil, period(keyID: newID) == nil else {
            throw Refusal(description: "the key rotation names key \(newID), which this ledger has used before")
        }
        guard let handover = Hex.decode(rotation.handover).flatMap({ Signature(bytes: $0) }) else {
            throw Refusal(description: "the key rotation's handover is not a 64-byte signature")
        }
        let message = KeyHandover.message(ledger: ledger, prev: prev, from: inForce.key, to: new)
        guard message.withUnsafeBytes({ verifier.isValid(handover, of: $0, by: new) }) else {
            throw Refusal(description: "the key rotation's handover signature does not verify with the new key \(newID)")
        }
        periods.append(Period(from: seq + 1, key: new, keyID: newID))
    }

    /// Takes in the revocation of event `seq`, whose `kid` is `keyID`: signed by the key in force
    /// (checked like any event's), of a key of the schedule that is not in force (a key is
    /// rotated away from before it is revoked), not revoked before, compromised from a seq that
    /// key signed, and attesting exactly one hash per event from there to its rotation. Whether
    /// the hashes are those of the log's events is the verifier's to check
    /// (``Revocation/attested``).
    public mutating func admit(_ revocation: KeyRevoked, seq: UInt64, keyID: String) throws(Refusal) {
        let inForce = forEvent(seq)
        guard keyID == inForce.keyID else {
            throw Refusal(description: "the key revocation is signed with key id \(keyID), not with the key in force, \(inForce.keyID)")
        }
        guard let key = PublicKey(hex: revocation.publicKey), let index = periods.firstIndex(where: { $0.key == key }) else {
            throw Refusal(description: "the key revocation names a key this ledger never used")
        }
        let revoked = periods[index]
        guard revoked.from <= seq, index + 1 < periods.count, periods[index + 1].from <= seq else {
            throw Refusal(description: "the key revocation names key \(revoked.keyID), which is still in force: a key is rotated away from before it is revoked")
        }
        guard !revocations.contains(where: { $0.keyID == revoked.keyID }) else {
            throw Refusal(description: "the key revocation names key \(revoked.keyID), which was revoked before")
        }
        let until = periods[index + 1].from - 1
        guard revocation.compromisedSince >= revoked.from, revocation.compromisedSince <= until else {
            throw Refusal(description: "the key revocation says key \(revoked.keyID) was compromised from seq \(revocation.compromisedSince), but it signed seq \(revoked.from) to \(until)")
        }
        guard UInt64(revocation.attested.count) == until - revocation.compromisedSince + 1 else {
            throw Refusal(description: "the key revocation attests \(revocation.attested.count) events, but key \(revoked.keyID) signed \(until - revocation.compromisedSince + 1) from seq \(revocation.compromisedSince) to \(until)")
        }
        let hashes = revocation.attested.compactMap { Digest(hex: $0) }
        guard hashes.count == revocation.attested.count else {
            throw Refusal(description: "the key revocation attests something that is not a hash")
        }
        revocations.append(Revocation(seq: seq, keyID: revoked.keyID, since: revocation.compromisedSince, until: until, attested: hashes))
    }

    /// A period taken as claimed (a bundle's, before its signatures are checked).
    mutating func appendUnchecked(_ period: Period) { periods.append(period) }
}
