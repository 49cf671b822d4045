import ConsentDomain
import TransparencyLog
/// The signed head: the checkpoint a commit ends with. A C2SP `tlog-checkpoint` of the whole
/// log with one extension line, `chain HASH`, the hex hash of the newest event's body (the hash
/// chain's head), signed by the ledger's key as a C2SP `signed-note`:
///
/// ```
/// <origin>\n
/// <tree size, decimal>\n
/// <root hash, standard base64>\n
/// chain <64 lowercase hex digits>\n
/// \n
/// — <origin> <base64(key hash ‖ signature)>\n
/// ```
///
/// It is what every reader trusts about the log's extent and tree: the frontier of stored tree
/// hashes is checked against its root before anything is signed from it.
public struct SignedHead: Hashable, Sendable {
    public let checkpoint: Checkpoint
    /// SHA-256 of the newest event's body.
    public let chainHash: Digest
    /// The signed note, exactly as stored.
    public let note: String

    /// The sequence number of the newest event it covers.
    public var seq: UInt64 { UInt64(checkpoint.size - 1) }
    public var chainHead: ChainHead { ChainHead(seq: seq, hash: chainHash) }

    static func text(_ checkpoint: Checkpoint, chainHash: Digest) -> String {
        checkpoint.text + "chain " + chainHash.hex + "\n"
    }

    /// Signs the head of a log of `checkpoint.size` records whose newest event hashes to `chainHash`.
    public static func sign(_ checkpoint: Checkpoint, chainHash: Digest, key: NoteVerifierKey, signer: any EventSigner) -> SignedHead {
        let note = SignedNote.sign(text(checkpoint, chainHash: chainHash), key: key, signer: signer)
        return SignedHead(checkpoint: checkpoint, chainHash: chainHash, note: note)
    }

    private init(checkpoint: Checkpoint, chainHash: Digest, note: String) {
        self.checkpoint = checkpoint
        self.chainHash = chainHash
        self.note = note
    }

    /// Reads a stored head without checking its signature (stores parse; the ledger verifies).
    public init(note: String) throws(NoteError) {
        guard let split = note.lastRange(of: "\n\n") else { throw NoteError("the head has no signature block") }
        let text = String(note[..<split.lowerBound]) + "\n"
        let checkpoint = try Checkpoint(text: text)
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false)
        guard checkpoint.size >= 1, lines.count == 4, lines[3].hasPrefix("chain "), let hash = Digest(hex: String(lines[3].dropFirst(6))),
            Self.text(checkpoint, chainHash: hash) == text
        else { throw NoteError("the head is not a checkpoint of at least one record with one extension line 'chain HASH'") }
        self.init(checkpoint: checkpoint, chainHash: hash, note: note)
    }

    /// The head as a line of the log file (without its 0x0A): the canonical JSON
    /// `{"head":NOTE}`. A folder ledger appends one after each commit's entries, in the same
    /// synced write, so that a commit and the head that vouches for it reach the disk together.
    public var logLine: [UInt8] { CanonicalJSON.serialize(.object(["head": .string(note)])) }

    /// Whether a log line has the form of a head line (its first three bytes are `{"h`) rather
    /// than an event's (`{"b`): the byte after `{"` tells them apart.
    @inlinable
    public static func isLogLine(_ line: UnsafeBufferPointer<UInt8>) -> Bool {
        line.count >= 3 && line[0] == 0x7B && line[1] == 0x22 && line[2] == 0x68
    }

    /// Reads a head line of the log (without its 0x0A): canonical JSON `{"head":NOTE}`, NOTE a
    /// signed head. Does not check the signature.
    public init(logLine: [UInt8]) throws(NoteError) {
        let value: JSONValue
        do {
            value = try CanonicalJSON.parse(logLine, canonical: true)
        } catch {
            throw NoteError("the head line is not canonical JSON: \(error)")
        }
        guard case .object(let members) = value, members.count == 1, case .string(let note)? = members["head"] else {
            throw NoteError("the head line is not {\"head\":NOTE}")
        }
        try self.init(note: note)
    }

    /// Checks the signature with the ledger's key.
    public func verify(key: NoteVerifierKey, verifier: any SignatureVerifier) throws(NoteError) {
        let opened = try SignedNote.open(note, key: key, verifier: verifier)
        guard opened == Self.text(checkpoint, chainHash: chainHash) else { throw NoteError("the head's signed text differs from what it says") }
    }
}
