import TransparencyLog
import ConsentDomain

/// A subject id as given, compared byte for byte. Swift's `String` equality treats canonically
/// equivalent spellings ("é" and "e" + U+0301) as equal, but the pseudonym is a hash of the bytes,
/// so the salt must be found by the same bytes that are hashed.
public struct SubjectID: Hashable, Sendable, Comparable {
    public let utf8: [UInt8]

    public init(_ text: String) { utf8 = Array(text.utf8) }

    public var text: String { String(decoding: utf8, as: UTF8.self) }

    public static func < (a: SubjectID, b: SubjectID) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
}

/// A subject's record: the random salt that pseudonymises its id and, in a format-2 ledger, the
/// ledger key's signature over the id and salt (``Pseudonym/recordMessage(id:salt:)``), so that
/// a salt swapped between two records, or a record altered or made up, is refused by the reads
/// that use it.
public struct SubjectRecord: Hashable, Sendable {
    public let salt: [UInt8]
    public let signature: Signature?

    public init(salt: [UInt8], signature: Signature?) {
        self.salt = salt
        self.signature = signature
    }
}

/// The hash of the newest acknowledged event and its sequence number.
public struct ChainHead: Hashable, Sendable, CustomStringConvertible {
    public let seq: UInt64
    public let hash: Digest

    public init(seq: UInt64, hash: Digest) {
        self.seq = seq
        self.hash = hash
    }

    public var description: String { "\(seq) \(hash.hex)" }
}

