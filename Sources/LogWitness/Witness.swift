import LedgerFormat
import LedgerStorage
import Synchronization
import TransparencyLog

/// A transparency-log witness (C2SP `tlog-witness`): it cosigns a log's checkpoint only if it is
/// consistent with the latest checkpoint of that log it cosigned before, and remembers it. Any
/// HTTP server can carry it: `addCheckpoint(_:)` takes the request body and gives the status,
/// content type and body to answer with.
public final class Witness: Sendable {
    public let key: CosignerKey
    private let signer: any EventSigner
    private let logs: [String: [NoteVerifierKey]]
    private let state: WitnessStateStore
    private let clock: @Sendable () -> UInt64
    private let hasher: any SHA256Hasher
    private let verifier: any SignatureVerifier
    /// The check and the record are one step (the spec's race between two submissions); the
    /// folder's lock makes it one across processes, this one across threads.
    private let serial = Mutex(())

    /// - Parameters:
    ///   - logs: the verifier keys of the logs it witnesses; a log is known by its key's name,
    ///     which is its checkpoints' origin.
    ///   - clock: POSIX seconds, for the cosignatures' timestamps.
    public init(key: CosignerKey, signer: any EventSigner, logs: [NoteVerifierKey], state: WitnessStateStore,
                clock: @escaping @Sendable () -> UInt64, hasher: any SHA256Hasher = OpenSSLSHA256(), verifier: any SignatureVerifier = Sodium()) throws(ConsentError) {
        guard signer.publicKey == key.publicKey else {
            throw .invalidRequest("the witness key file's key is not the key of the witness \(key.name)")
        }
        guard !logs.isEmpty else { throw .invalidRequest("a witness needs at least one log to witness") }
        self.key = key
        self.signer = signer
        self.logs = Dictionary(grouping: logs, by: \.name)
        self.state = state
        self.clock = clock
        self.hasher = hasher
        self.verifier = verifier
    }

    /// The answer to `POST <prefix>/add-checkpoint` with `body`.
    public func addCheckpoint(_ body: [UInt8]) -> WitnessResponse {
        do {
            return try serial.withLock { _ in
                try state.exclusively {
                    let verdict = try WitnessVerdict.decide(body, logs: logs, latest: latest, hasher: hasher, verifier: verifier)
                    guard case .cosign(let checkpoint, let text) = verdict else { return WitnessResponse(verdict) }
                    let line = try Cosignature.sign(checkpointText: text, timestamp: clock(), key: key, signer: signer)
                    // The note as the log signed it, with this witness's cosignature: what the
                    // next request is checked against, and evidence of what was cosigned.
                    let request = try AddCheckpointRequest(body: body)
                    try state.record(request.note + line, origin: checkpoint.origin)
                    return WitnessResponse(status: 200, contentType: "text/plain; charset=utf-8", body: Array(line.utf8), problem: nil)
                }
            }
        } catch {
            return WitnessResponse(status: 500, contentType: "text/plain; charset=utf-8", body: Array("the witness could not record the checkpoint\n".utf8), problem: "\(error)")
        }
    }

    /// The checkpoint last cosigned for `origin`, from the state folder, accepted only if it
    /// carries this witness's own valid cosignature: an edited state file must not make the
    /// witness cosign a fork.
    private func latest(origin: String) throws -> Checkpoint? {
        guard let note = try state.latest(origin: origin) else { return nil }
        do {
            guard try Cosignature.verifiedCosigners(of: note, keys: [key], verifier: verifier)[key] != nil else {
                throw NoteError("it does not carry this witness's cosignature")
            }
            let checkpoint = try Checkpoint(text: SignedNote.split(note).text)
            guard checkpoint.origin == origin else { throw NoteError("it is a checkpoint of '\(checkpoint.origin)'") }
            return checkpoint
        } catch {
            throw ConsentError.integrity(IntegrityFailure(.ledgerFiles, line: nil, seq: nil, problem: "the witness state of '\(origin)' in \(state.directory) cannot be trusted: \(error)"))
        }
    }
}

extension WitnessResponse {
    init(_ verdict: WitnessVerdict) {
        switch verdict {
        case .conflict(let size, _):
            self.init(status: 409, contentType: "text/x.tlog.size", body: Array("\(size)\n".utf8), problem: nil)
        case .badRequest(let why), .forbidden(let why), .unknownLog(let why), .unprocessable(let why):
            self.init(status: verdict.status, contentType: "text/plain; charset=utf-8", body: Array((why + "\n").utf8), problem: nil)
        case .cosign:
            preconditionFailure("a cosign verdict is answered after signing")
        }
    }
}
