/// The body of a C2SP `tlog-witness` `add-checkpoint` request:
///
/// ```
/// old <size the witness last cosigned, decimal>\n
/// <zero to 63 lines: a consistency proof from that size, one base64 hash per line>\n
/// \n
/// <the signed checkpoint note>
/// ```
public struct AddCheckpointRequest: Hashable, Sendable {
    /// The spec's bound on proof lines.
    public static let maximumProofHashes = 63
    /// A request is a checkpoint, its signatures and at most 63 hashes: a few kilobytes.
    public static let maximumBytes = 64 << 10

    public let oldSize: Int64
    public let proof: [Digest]
    /// The checkpoint as a signed note.
    public let note: String

    public init(oldSize: Int64, proof: [Digest], note: String) {
        self.oldSize = oldSize
        self.proof = proof
        self.note = note
    }

    public var body: [UInt8] {
        var text = "old \(oldSize)\n"
        for hash in proof { text += Base64.encode(hash.bytes) + "\n" }
        return Array((text + "\n" + note).utf8)
    }

    /// Parses a request body; every failure is the client's (400).
    public init(body: [UInt8]) throws(NoteError) {
        guard body.count <= Self.maximumBytes else { throw NoteError("the request has \(body.count) bytes, more than \(Self.maximumBytes)") }
        guard let text = String(validating: body, as: UTF8.self) else { throw NoteError("the request is not UTF-8") }
        var rest = Substring(text)
        func line() throws(NoteError) -> Substring {
            guard let end = rest.firstIndex(of: "\n") else { throw NoteError("the request ends inside its header") }
            defer { rest = rest[rest.index(after: end)...] }
            return rest[..<end]
        }
        let old = try line()
        guard old.hasPrefix("old "), let size = Int64(old.dropFirst(4)), size >= 0, String(size) == old.dropFirst(4) else {
            throw NoteError("the first line is not 'old SIZE' with a decimal size without leading zeros")
        }
        var proof: [Digest] = []
        while true {
            let next = try line()
            if next.isEmpty { break }
            guard proof.count < Self.maximumProofHashes else { throw NoteError("the consistency proof has more than \(Self.maximumProofHashes) lines") }
            guard let bytes = Base64.decode(String(next)), let hash = Digest(bytes: bytes) else {
                throw NoteError("a consistency proof line is not the base64 of 32 bytes")
            }
            proof.append(hash)
        }
        self.init(oldSize: size, proof: proof, note: String(rest))
    }
}

/// What a witness answers to `add-checkpoint` (C2SP `tlog-witness`), before any I/O.
public enum WitnessVerdict: Hashable, Sendable {
    /// 200: cosign the checkpoint and record it as the log's latest.
    case cosign(Checkpoint, text: String)
    /// 400: the request is malformed, or its old size is above the checkpoint's.
    case badRequest(String)
    /// 403: no signature by a key the witness trusts for the origin verifies.
    case forbidden(String)
    /// 404: the witness does not know the origin.
    case unknownLog(String)
    /// 409: the old size is not the witness's latest, or the same size has another root. The
    /// body is the latest size, `text/x.tlog.size`.
    case conflict(latestSize: Int64, String)
    /// 422: the consistency proof does not verify: the log may have forked.
    case unprocessable(String)

    /// The HTTP status code the spec gives this verdict.
    public var status: Int {
        switch self {
        case .cosign: return 200
        case .badRequest: return 400
        case .forbidden: return 403
        case .unknownLog: return 404
        case .conflict: return 409
        case .unprocessable: return 422
        }
    }

    /// Decides a request in the spec's order. `logs` are the keys the witness trusts, by origin;
    /// `latest` is the checkpoint it last cosigned for the request's origin (looked up by
    /// `latest(origin)`), nil if none.
    public static func decide(_ body: [UInt8], logs: [String: [NoteVerifierKey]], latest: (String) throws -> Checkpoint?,
                              hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium()) rethrows -> WitnessVerdict {
        let request: AddCheckpointRequest
        let text: String
        let checkpoint: Checkpoint
        do {
            request = try AddCheckpointRequest(body: body)
            text = try SignedNote.split(request.note).text
            checkpoint = try Checkpoint(text: text)
        } catch {
            return .badRequest("\(error)")
        }
        guard let keys = logs[checkpoint.origin] else { return .unknownLog("this witness does not witness the log '\(checkpoint.origin)'") }
        guard keys.contains(where: { (try? SignedNote.open(request.note, key: $0, verifier: verifier)) != nil }) else {
            return .forbidden("no signature on the checkpoint verifies with a key this witness trusts for '\(checkpoint.origin)'")
        }
        guard request.oldSize <= checkpoint.size else {
            return .badRequest("the old size \(request.oldSize) is above the checkpoint's size \(checkpoint.size)")
        }
        let known = try latest(checkpoint.origin)
        let knownSize = known?.size ?? 0
        guard request.oldSize == knownSize else {
            return .conflict(latestSize: knownSize, "the old size \(request.oldSize) is not the size this witness last cosigned, \(knownSize)")
        }
        if let known {
            if known.size == checkpoint.size {
                guard known.root == checkpoint.root else {
                    return .conflict(latestSize: knownSize, "this witness cosigned another root at size \(knownSize)")
                }
                guard request.proof.isEmpty else { return .unprocessable("a proof between equal sizes must be empty") }
            } else if !MerkleTree.checkConsistency(request.proof, old: known.size, oldRoot: known.root, new: checkpoint.size, newRoot: checkpoint.root, hasher: hasher) {
                return .unprocessable("the consistency proof from size \(known.size) to \(checkpoint.size) does not verify")
            }
        } else if !request.proof.isEmpty {
            return .unprocessable("a proof from size 0 must be empty")
        }
        return .cosign(checkpoint, text: text)
    }
}

/// An HTTP answer of the witness: status, content type and body. `problem` is for the server's
/// log only (a 500's cause), never sent.
public struct WitnessResponse: Sendable, Hashable {
    public let status: Int
    public let contentType: String
    public let body: [UInt8]
    public let problem: String?

    public init(status: Int, contentType: String, body: [UInt8], problem: String?) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.problem = problem
    }

    /// The size in a 409 answer's `text/x.tlog.size` body, if it is one.
    public var conflictSize: Int64? {
        guard status == 409, contentType.split(separator: ";").first?.trimmingSpaces == "text/x.tlog.size",
            let text = String(validating: body, as: UTF8.self), text.hasSuffix("\n"),
            let size = Int64(text.dropLast()), size >= 0, String(size) == text.dropLast()
        else { return nil }
        return size
    }
}

/// How a log reaches its witnesses: `POST <url>/add-checkpoint`. The command-line tool's is
/// HTTP; tests plug a witness in directly.
public protocol WitnessTransport: Sendable {
    /// Sends an `add-checkpoint` body to the witness at `url` (its submission prefix) and
    /// returns its answer; throws only when no answer came (unreachable, timed out).
    func addCheckpoint(_ body: [UInt8], to url: String) throws -> WitnessResponse
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}
