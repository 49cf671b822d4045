import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain
import Dispatch
import Synchronization

/// Replays the log through the chain and the rules: the engine under `Ledger.loadAll()` (hash
/// links and rules) and `Ledger.verify()` (also every key id and signature).
///
/// Work per line that does not depend on other lines (decoding, hashing, signatures) runs on all
/// cores; what must run in order (sequence numbers, links, rules) runs for one batch while the
/// next is decoded, on one of the decoding threads (``parallelResults(_:minimumForParallel:alongside:_:)``):
/// a serial queue of its own made a third thread on two cores, and the ordered stage, which
/// every batch waits for, got two thirds of a core.
struct LogChecker {
    let tx: any LedgerReadTransaction
    /// The storage's names, for messages.
    let names: StorageNames
    let hasher: any SHA256Hasher
    /// Check key ids and signatures (verify), or only links and rules (replay). The keys are
    /// those of ``Progress/keys``, learned from the log's rotations as it is read.
    let signatures: (any SignatureVerifier)?
    /// Also check the derived data (per-subject index and stored tree hashes) against the entries.
    var checkDerived = false
    /// Check the line index only (the stored tree hashes are behind the log).
    var checkIndexOnly = false
    /// Tree sizes whose RFC 6962 root to compute from the lines themselves (the sizes of
    /// recorded checkpoints, which `verify` checks against the log).
    var rootsWanted: Set<Int64> = []
    /// Entries per batch, at most; a batch also ends where the storage's read does (the file
    /// storage reads about 2,000 events at a time). Each batch ends with the threads joining,
    /// and the thread that applied the batch before joins the decoding late, so a batch cut
    /// short is a core idle: at 4,096 entries, which split each 4 MB read of the time into two
    /// batches and a remainder, a replay of a million events kept 1.6 of two cores busy.
    var batchSize = 16_384

    /// What the parallel stage learns of one line.
    struct CheckedLine: Sendable {
        let number: Int
        let event: LedgerEvent
        let prev: Digest
        let hash: Digest
        /// Merkle leaf hash, when the tree is hashed.
        let leaf: Digest?
        /// The stream key the storage's index holds for this entry, when the index is checked.
        let indexedKey: [UInt8]?
        let version: Int64
        let stream: StreamLink
        let keyID: String
        /// Whether the signature verifies with the key its `kid` names, when the parallel stage
        /// knew that key; whether that key is the one in force is decided in order.
        let signatureValid: Bool?
        /// The body and signature of an event whose key the parallel stage did not know yet
        /// (one introduced by a rotation still being applied): checked in order.
        let deferred: Deferred?
        /// A published catalogue's hash matches its document (true for other events).
        let catalogHashValid: Bool
    }

    /// A signature left for the ordered stage (boxed: most lines have none, and a checked line is
    /// moved between the stages).
    final class Deferred: Sendable {
        let body: [UInt8]
        let signature: Signature
        init(body: [UInt8], signature: Signature) {
            self.body = body
            self.signature = signature
        }
    }

    enum LineOutcome: Sendable {
        case checked(CheckedLine)
        case failed(IntegrityFailure)
    }

    /// The state the ordered stage builds.
    struct Progress: Sendable {
        var replay: LedgerReplay
        var previous: Digest
        /// Set when the event at `head.seq` was seen and its hash matched.
        var headSeen = false
        /// The Merkle tree's complete subtrees so far (derived-data check).
        var frontier: [Digest] = []
        var treeIndex: Int64 = 0
        /// Tree roots computed from the lines, at the sizes in ``LogChecker/rootsWanted``.
        var roots: [Int64: Digest] = [:]
        /// Set to check every event's format version and stream links (verify, from the start).
        var streams: StreamCheck?
        /// The keys so far, when signatures are checked: which key must have signed each event.
        var keys: KeySchedule?
        /// When set (verify), every sealed evidence reference seen, for opening with the
        /// subject records once the lines are checked.
        var sealed: [SealedReference]?
    }

    /// A grant's evidence reference as the log holds it, sealed under its subject's key.
    struct SealedReference: Sendable {
        let seq: UInt64
        let subject: SubjectRef
        let evidence: GrantEvidence
    }

    /// The streams as the log builds them: each stream's newest event and the subject map.
    struct StreamCheck: Sendable {
        /// The ledger's format version (the genesis event's); every event must be of it.
        let version: Int64
        var newest: [[UInt8]: UInt64] = [:]
        var map: SubjectMap
        /// Whether the newest event checked carries the subject map's root: the last event of the
        /// log must (every commit ends with one).
        var lastHasRoot = false

        init(version: Int64, hasher: any SHA256Hasher) {
            self.version = version
            self.map = SubjectMap(hasher: hasher)
        }

        /// Checks one event's version and stream members against the events before it.
        mutating func check(_ line: CheckedLine) throws(ConsentError) {
            let event = line.event
            func fail(_ problem: String) -> ConsentError { .integrity(IntegrityFailure(line: line.number, seq: event.seq, problem: problem)) }
            guard line.version == version else { throw fail("the event is of format version \(line.version), but the ledger's genesis event is of version \(version)") }
            guard version >= 2 else { return }
            let key = StreamKey.of(event.payload)
            let expected = newest[key]
            guard line.stream.previous == expected else {
                throw fail("the event names \(line.stream.previous.map { "seq \($0)" } ?? "no event") as its stream's previous event, but that is \(expected.map { "seq \($0)" } ?? "none"): an event of this stream was left out or added")
            }
            if event.seq == event.command.last {
                do {
                    try map.set(key, seq: event.seq)
                } catch {
                    throw fail("\(error)")
                }
            }
            if let root = line.stream.root {
                let built = map.computeRoot()
                guard root == built else {
                    throw fail("the event signs subject-map root \(root.hex), but the events so far give \(built.hex)")
                }
            }
            newest[key] = event.seq
            lastHasRoot = line.stream.root != nil
        }
    }

    /// The ordered stage's state; touched only on the `ordered` queue, then read after it drained.
    private final class ProgressBox: @unchecked Sendable {
        var progress: Progress
        init(_ progress: Progress) { self.progress = progress }
    }

    /// Checks entries `from` up to `end`, continuing `progress`. Throws the first failure in log
    /// order. With `end` past the log's complete commits, checks whatever complete entries
    /// follow them (to name the first bad entry of a damaged tail).
    func run(from: Int, to end: Int, head: ChainHead?, progress start: Progress) throws -> Progress {
        let box = ProgressBox(start)
        let failure = Mutex<ConsentError?>(nil)
        // The ordered stage of the batch decoded last: run while the next is decoded, or alone
        // after the last.
        var pending: (@Sendable () -> Void)?
        let outcomeSlots = ResultSlotsPool<LineOutcome>()
        let signatures = self.signatures
        let hasher = self.hasher
        let checkDerived = self.checkDerived || self.checkIndexOnly
        let checkIndexOnly = self.checkIndexOnly
        let rootsWanted = self.rootsWanted
        let hashLeaves = checkDerived || !rootsWanted.isEmpty
        let tx = self.tx
        let names = self.names
        // The keys the parallel stage checks signatures with: those the ordered stage has learned.
        let knownKeys = Mutex<[String: PublicKey]>(Dictionary(uniqueKeysWithValues: (start.keys?.periods ?? []).map { ($0.keyID, $0.key) }))
        // The key id of the last batch's first line: a line with the same one reuses its string.
        var keyIDHint: EventBodyReader.KeyIDHint?
        do {
            // Lines `part` of a batch: checked on all cores while the part before is applied
            // in order.
            func checkPart(_ batch: EntryBatch, _ part: Range<Int>) throws {
                if let failed = failure.withLock({ $0 }) { throw failed }
                let checking = signatures.map { SignatureContext(verifier: $0, known: knownKeys.withLock { $0 }) }
                let hint = keyIDHint
                let outcomes = parallelResults(part.count, minimumForParallel: Self.smallestPart, alongside: pending, pool: outcomeSlots) { k in
                    let i = part.lowerBound + k
                    return batch.withEntry(i) { line in
                        Self.check(line, number: batch.seq(i) + 1, hasher: hasher, signatures: checking, hashLeaf: hashLeaves, indexedKey: batch.indexedKeys?[i], keyIDHint: hint)
                    }
                }
                pending = nil
                if let failed = failure.withLock({ $0 }) { throw failed }
                if case .checked(let first) = outcomes.first, first.keyID != keyIDHint?.text { keyIDHint = EventBodyReader.KeyIDHint(first.keyID) }
                // The stored hashes of a part's entries are those between the stored counts of
                // the tree before and after it.
                let storedHashes = checkDerived && !checkIndexOnly
                    ? try tx.treeHashes(Array(MerkleTree.storedHashCount(Int64(batch.seq(part.lowerBound)))..<MerkleTree.storedHashCount(Int64(batch.seq(part.upperBound)))))
                    : []
                pending = {
                    // Nothing is applied after a failure: the first in the log is the one reported.
                    guard failure.withLock({ $0 == nil }) else { return }
                    let keysBefore = box.progress.keys?.periods.count
                    // The tree hashes the derived data should store for this batch's entries.
                    var expected: [Digest] = []
                    // Each outcome is moved out, not copied: a checked line is a few hundred bytes.
                    while let outcome = outcomes.next() {
                        do throws(ConsentError) {
                            let line: CheckedLine
                            switch consume outcome {
                            case .failed(let failed): throw .integrity(failed)
                            case .checked(let checked): line = checked
                            }
                            try Self.apply(line, to: &box.progress, head: head, hasher: hasher, verifier: signatures)
                            if hashLeaves { Self.extendTree(line, hasher: hasher, rootsWanted: rootsWanted, expected: &expected, progress: &box.progress) }
                        } catch {
                            failure.withLock { $0 = error }
                            return
                        }
                    }
                    if let keys = box.progress.keys, keys.periods.count != keysBefore {
                        knownKeys.withLock { known in for period in keys.periods { known[period.keyID] = period.key } }
                    }
                    if checkDerived && !checkIndexOnly {
                        do throws(ConsentError) {
                            try Self.checkTree(expected: expected, stored: storedHashes, names: names, progress: &box.progress)
                        } catch {
                            failure.withLock { $0 = error }
                        }
                    }
                }
            }
            try tx.entries(from..<end, batchSize: batchSize, indexedKeys: checkDerived) { batch in
                var start = 0
                while start < batch.count {
                    let size = Self.partSize(available: batch.count - start, isLastBatch: batch.seq(batch.count) >= end)
                    try checkPart(batch, start..<start + size)
                    start += size
                }
            }
        } catch {
            pending?()
            // A failure found in order comes first in the log; report it before a later one.
            if let failed = failure.withLock({ $0 }) { throw failed }
            throw error
        }
        pending?()
        if let failed = failure.withLock({ $0 }) { throw failed }
        return box.progress
    }

    /// Fewer lines than this are checked on the calling thread alone.
    static let smallestPart = 256

    /// How many of a batch's `available` lines to check next: all of them, except in the log's
    /// last batch, which is checked in parts that halve down to ``smallestPart``. The ordered
    /// stage of the last part runs after all the decoding, on one core while the other has
    /// nothing to do: a whole batch's (about 2,000 lines) took a millisecond, 4% of a replay of
    /// 21,000 events. A part can be half the one before and still not keep the decoding core
    /// waiting, as decoding a line takes more than twice as long as applying it.
    static func partSize(available: Int, isLastBatch: Bool) -> Int {
        guard isLastBatch, available >= 2 * smallestPart else { return available }
        return available / 2
    }

    /// What the parallel stage checks signatures with: a class, since every line is handed
    /// it (as an optional tuple of an existential and a dictionary, it was copied and destroyed
    /// for each line through the runtime's generic witnesses, 600 instructions a line).
    final class SignatureContext: Sendable {
        let verifier: any SignatureVerifier
        /// The keys the ordered stage had learned when the part was started.
        let known: [String: PublicKey]

        init(verifier: any SignatureVerifier, known: [String: PublicKey]) {
            self.verifier = verifier
            self.known = known
        }
    }

    private static func check(_ line: UnsafeBufferPointer<UInt8>, number: Int, hasher: any SHA256Hasher, signatures: SignatureContext?, hashLeaf: Bool, indexedKey: [UInt8]?, keyIDHint: EventBodyReader.KeyIDHint?) -> LineOutcome {
        do throws(EventDecodingError) {
            let (body, signature) = try EventCodec.splitLine(line, decodeSignature: signatures != nil)
            let read = try EventBodyReader.read(body, keyIDHint: keyIDHint)
            let (event, prev, keyID) = (read.event, read.prev, read.keyID)
            // Only what needs no other line is decided here; the failures are reported in order,
            // in the order `verify` names them (key id, signature, catalogue hash, seq, link…).
            var deferred: Deferred?
            var signatureValid: Bool?
            if let signatures {
                if let key = signatures.known[keyID] {
                    signatureValid = isSignatureValid(signature, body: body, key: key, verifier: signatures.verifier)
                } else {
                    deferred = Deferred(body: Array(body), signature: signature)
                }
            }
            var catalogHashValid = true
            if case .catalogPublished(let published) = event.payload {
                catalogHashValid = hasher.sha256(CatalogCodec.canonicalBytes(published.catalog)).hex == published.catalogHash
            }
            var leaf: Digest?
            if hashLeaf { leaf = MerkleTree.leafHash(UnsafeRawBufferPointer(line), hasher: hasher) }
            if let indexedKey, indexedKey != StreamKey.of(event.payload) {
                return .failed(IntegrityFailure(.derivedData, line: number, seq: event.seq, problem: "the per-subject index gives this entry another stream than its event's"))
            }
            return .checked(CheckedLine(number: number, event: event, prev: prev, hash: hasher.sha256(UnsafeRawBufferPointer(body)), leaf: leaf, indexedKey: indexedKey, version: read.version, stream: read.stream, keyID: keyID, signatureValid: signatureValid, deferred: deferred, catalogHashValid: catalogHashValid))
        } catch {
            return .failed(IntegrityFailure(line: number, seq: nil, problem: error.problem))
        }
    }

    /// An event signature: over the signing context and the body, without copying the body twice.
    private static func isSignatureValid(_ signature: Signature, body: UnsafeBufferPointer<UInt8>, key: PublicKey, verifier: any SignatureVerifier) -> Bool {
        let context = EventCodec.signingContext
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: context.count + body.count) { message in
            _ = message.initialize(fromContentsOf: context)
            _ = UnsafeMutableBufferPointer(rebasing: message[context.count...]).initialize(fromContentsOf: body)
            return verifier.isValid(signature, of: UnsafeRawBufferPointer(message), by: key)
        }
    }

    /// The ordered part of checking a signature: the event's key must be the one in force for
    /// its seq (a retired key's signature is refused even when it verifies), and a signature
    /// the parallel stage could not check is checked now.
    private static func checkKey(_ line: CheckedLine, keys: KeySchedule, verifier: any SignatureVerifier) throws(ConsentError) {
        let seq = line.event.seq
        let inForce = keys.forEvent(seq)
        if let problem = keys.keyProblem(keyID: line.keyID, seq: seq) {
            throw .integrity(IntegrityFailure(line: line.number, seq: seq, problem: problem))
        }
        let valid = line.signatureValid ?? line.deferred.map { deferred in
            deferred.body.withUnsafeBufferPointer { isSignatureValid(deferred.signature, body: $0, key: inForce.key, verifier: verifier) }
        } ?? false
        guard valid else {
            throw .integrity(IntegrityFailure(.ledgerFiles, line: line.number, seq: seq, problem: "signature does not verify with the ledger's public key \(inForce.keyID)"))
        }
    }

    /// Adds a line's leaf to the frontier of complete subtrees, computing the tree's root if its
    /// size is wanted. Appends the hashes the derived data stores for this record to `expected`:
    /// its leaf and the roots of the subtrees it completes, in tlog order.
    private static func extendTree(_ line: CheckedLine, hasher: any SHA256Hasher, rootsWanted: Set<Int64>, expected: inout [Digest], progress: inout Progress) {
        var h = line.leaf!
        expected.append(h)
        var n = line.event.seq
        while n & 1 == 1 {
            h = MerkleTree.nodeHash(progress.frontier.removeLast(), h, hasher: hasher)
            expected.append(h)
            n >>= 1
        }
        progress.frontier.append(h)
        let size = Int64(line.event.seq) + 1
        if rootsWanted.contains(size) {
            // RFC 6962: the root folds the complete subtrees from the right.
            var root = progress.frontier.last!
            for left in progress.frontier.dropLast().reversed() { root = MerkleTree.nodeHash(left, root, hasher: hasher) }
            progress.roots[size] = root
        }
    }

    /// Compares a batch's Merkle tree hashes with the stored ones. (Each entry's index key was
    /// compared in the parallel stage; the storage checked the rest of its index.)
    private static func checkTree(expected: [Digest], stored: [Digest], names: StorageNames, progress: inout Progress) throws(ConsentError) {
        if let bad = zip(stored, expected).enumerated().first(where: { $0.element.0 != $0.element.1 }) ?? (stored.count == expected.count ? nil : (min(stored.count, expected.count), (Digest.zero, Digest.zero))) {
            throw ConsentError.integrity(IntegrityFailure(.derivedData, line: nil, seq: nil, problem: "tree hash \(progress.treeIndex + Int64(bad.offset)) differs from the log (\(names.derivedRepair))"))
        }
        progress.treeIndex += Int64(expected.count)
    }

    private static func apply(_ line: CheckedLine, to progress: inout Progress, head: ChainHead?, hasher: any SHA256Hasher, verifier: (any SignatureVerifier)?) throws(ConsentError) {
        let seq = line.event.seq
        if let verifier, let keys = progress.keys { try checkKey(line, keys: keys, verifier: verifier) }
        guard line.catalogHashValid else {
            throw .integrity(IntegrityFailure(line: line.number, seq: seq, problem: "the published catalogue's SHA-256 differs from its 'catalog' member"))
        }
        guard Int(seq) + 1 == line.number else {
            throw .integrity(IntegrityFailure(line: line.number, seq: seq, problem: "line \(line.number) holds seq \(seq); expected seq \(line.number - 1) (lines removed, inserted or reordered)"))
        }
        guard line.prev == progress.previous else {
            throw .integrity(IntegrityFailure(line: line.number, seq: seq, problem: "prev \(line.prev.hex) does not match the previous event's hash \(progress.previous.hex)"))
        }
        do throws(ReplayViolation) {
            try progress.replay.apply(line.event)
        } catch {
            throw .integrity(IntegrityFailure(line: line.number, seq: error.seq, problem: error.problem))
        }
        if progress.sealed != nil, case .consentGiven(let given) = line.event.payload, given.evidence.sealedReference != nil {
            progress.sealed!.append(SealedReference(seq: seq, subject: given.subject, evidence: given.evidence))
        }
        if let verifier, progress.keys != nil, let ledger = progress.replay.genesis?.ledgerName {
            do {
                switch line.event.payload {
                case .keyRotated(let rotation):
                    try progress.keys!.admit(rotation, seq: seq, prev: line.prev, keyID: line.keyID, ledger: ledger, hasher: hasher, verifier: verifier)
                case .keyRevoked(let revocation):
                    try progress.keys!.admit(revocation, seq: seq, keyID: line.keyID)
                default:
                    break
                }
            } catch {
                throw .integrity(IntegrityFailure(.ledgerFiles, line: line.number, seq: seq, problem: error.description))
            }
        }
        try progress.streams?.check(line)
        if let head, seq == head.seq {
            guard line.hash == head.hash else {
                throw .integrity(IntegrityFailure(.head, line: line.number, seq: seq, problem: "hash differs from the recorded head \(head.hash.hex)"))
            }
            progress.headSeen = true
        }
        progress.previous = line.hash
    }
}
