import LedgerFormat
import TransparencyLog
import ConsentDomain

/// Derived data that a commit brings up to date: each entry's stream key (the per-subject
/// index), the Merkle tree's stored hashes and the subject map's records. Each part starts
/// where the storage's copy stops being trusted, which may be before the commit's first entry
/// (derived data that a crash left behind is made durable by the next commit), and whatever
/// the storage held from that point on is replaced.
public struct DerivedUpdate: Sendable {
    /// The sequence number of `streamKeys[0]`.
    public var indexFrom: Int
    /// The 16-byte stream key of each entry from `indexFrom` on.
    public var streamKeys: [[UInt8]]
    /// The storage index (`MerkleTree.storedHashIndex(level:n:)`) of `treeHashes[0]`.
    public var treeFrom: Int64
    public var treeHashes: [Digest]
    /// Subject-map records from record index `at`; at 0, the map is replaced whole.
    public var subjectMap: (records: SubjectMapRecords, at: Int64)?

    public init(indexFrom: Int, streamKeys: [[UInt8]], treeFrom: Int64, treeHashes: [Digest], subjectMap: (records: SubjectMapRecords, at: Int64)?) {
        self.indexFrom = indexFrom
        self.streamKeys = streamKeys
        self.treeFrom = treeFrom
        self.treeHashes = treeHashes
        self.subjectMap = subjectMap
    }
}

/// What a new ledger is made of.
public struct LedgerSetup: Sendable {
    /// The catalogue's canonical bytes (their SHA-256 is pinned in the genesis event).
    public let catalog: [UInt8]
    public let publicKey: PublicKey
    public let genesis: EventRecord
    /// The derived data of the log of one entry.
    public let derived: DerivedUpdate
    /// The signed head of the log of one entry, the genesis event.
    public let head: SignedHead

    public init(catalog: [UInt8], publicKey: PublicKey, genesis: EventRecord, derived: DerivedUpdate, head: SignedHead) {
        self.catalog = catalog
        self.publicKey = publicKey
        self.genesis = genesis
        self.derived = derived
        self.head = head
    }
}

/// One commit: new entries appended after the log's last complete commit, the derived data
/// brought up to date, new subject records and the signed head that vouches for all of it. A
/// storage makes it durable in one call, in an order of its own choosing that a crash cannot
/// turn into a lie: the head is never ahead of the entries it names.
public struct LedgerCommit: Sendable {
    /// The sequence number of `entries[0]`: the size of the log the transaction read.
    public let firstSeq: Int
    /// Each entry's bytes: a canonical JSON event line without its newline.
    public let entries: [[UInt8]]
    public let derived: DerivedUpdate
    /// Subject records first used by these entries.
    public let subjects: [(subjectID: SubjectID, record: SubjectRecord)]
    /// The head after the commit. Required when the commit has entries (a storage keeps each
    /// commit's head with its entries); nil in a commit of derived data alone keeps the
    /// recorded one.
    public let head: SignedHead?
    /// Subject records to destroy once the entries are durable (an erasure, whose
    /// `subject.erased` event is among the entries): their bytes are overwritten, not merely
    /// unlinked, and a storage that keeps old row versions purges them.
    public let erasedSubjects: [SubjectID]
    /// Stored subject records a key revocation revises: each replaced by the same id and salt
    /// under another signature (the key in force's), or, without a record, removed. Written
    /// durably before the entries, so that a crash leaves every record as it was or as revised,
    /// never without a valid signature. A replacement whose salt differs from the stored record's
    /// changes nothing.
    public let revisedSubjects: [(subjectID: SubjectID, record: SubjectRecord?)]

    public init(firstSeq: Int, entries: [[UInt8]], derived: DerivedUpdate, subjects: [(subjectID: SubjectID, record: SubjectRecord)], head: SignedHead?, erasedSubjects: [SubjectID] = [], revisedSubjects: [(subjectID: SubjectID, record: SubjectRecord?)] = []) {
        self.firstSeq = firstSeq
        self.entries = entries
        self.derived = derived
        self.subjects = subjects
        self.head = head
        self.erasedSubjects = erasedSubjects
        self.revisedSubjects = revisedSubjects
    }
}

extension LedgerCommit {
    /// Every storage refuses, before writing anything, a commit of entries without a head or
    /// with a head of another size than the log after it.
    public func checkHead(following size: Int, at location: String) throws {
        if let head {
            guard head.checkpoint.size == Int64(size + entries.count) else {
                throw ConsentError.storage("\(location): a head of \(head.checkpoint.size) entries for a commit that brings the log to \(size + entries.count); nothing was written")
            }
        } else if !entries.isEmpty {
            throw ConsentError.storage("\(location): a commit of entries without the signed head that vouches for them; nothing was written")
        }
    }
}

/// Entries of the log, read together: one buffer and where each entry lies in it, so that a
/// million entries do not cost a million allocations.
public struct EntryBatch: Sendable {
    /// The bytes the entries lie in.
    public let buffer: [UInt8]
    /// Each entry's start and end in `buffer`.
    public let spans: [Range<Int>]
    /// The sequence number of the first entry.
    public let firstSeq: Int
    /// Each entry's stream key as the storage's per-subject index holds it, when the reader
    /// asked for it (to check the index against the entries); nil otherwise.
    public let indexedKeys: [[UInt8]]?

    public init(buffer: [UInt8], spans: [Range<Int>], firstSeq: Int, indexedKeys: [[UInt8]]? = nil) {
        self.buffer = buffer
        self.spans = spans
        self.firstSeq = firstSeq
        self.indexedKeys = indexedKeys
    }

    public var count: Int { spans.count }

    /// The sequence number of the `i`-th entry.
    public func seq(_ i: Int) -> Int { firstSeq + i }

    /// Runs `body` on the `i`-th entry's bytes.
    @inlinable
    public func withEntry<T, E: Error>(_ i: Int, _ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
        let span = spans[i]
        let result: Result<T, E> = buffer.withUnsafeBufferPointer { all in
            do throws(E) {
                return .success(try body(UnsafeBufferPointer(rebasing: all[span])))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// A copy of the `i`-th entry's bytes.
    public func entry(_ i: Int) -> [UInt8] { Array(buffer[spans[i]]) }
}

/// Bytes at the end of a log file that a crash left behind: a partial line, or the complete
/// lines of a command or commit whose other events never reached the disk. They were never
/// acknowledged. (Only a storage that appends to a file has them.)
public struct TornTail: Hashable, Sendable, CustomStringConvertible {
    public let offset: UInt64
    public let byteCount: Int
    /// Complete lines in the torn region (events of the incomplete command).
    public let completeLines: Int

    public init(offset: UInt64, byteCount: Int, completeLines: Int) {
        self.offset = offset
        self.byteCount = byteCount
        self.completeLines = completeLines
    }

    public var description: String {
        "\(byteCount) bytes at offset \(offset) (\(completeLines) complete line(s) of an unfinished command or commit"
            + (completeLines == 0 ? ", a partial line)" : " and any partial line)")
    }
}

/// The log as a transaction sees it: how many entries its complete commits hold, the newest
/// one, the recorded head, and anything torn after it.
public struct LogState: Sendable {
    /// Entries in complete commits: the next entry's sequence number.
    public let size: Int
    public let last: EventRecord
    /// The head recorded after the last acknowledged commit.
    public let recordedHead: ChainHead
    /// The signed head it was read from; nil for a head of the older, unsigned `SEQ HASH` form,
    /// which the next write replaces with a signed one.
    public let signedHead: SignedHead?
    public let torn: TornTail?

    public init(size: Int, last: EventRecord, head: RecordedHead, torn: TornTail?) {
        self.size = size
        self.last = last
        self.recordedHead = head.chainHead
        self.signedHead = head.signed
        self.torn = torn
    }
}

/// A head as a storage reads it: signed, or of the older unsigned form.
public enum RecordedHead: Sendable {
    case signed(SignedHead)
    case unsigned(ChainHead)

    public var chainHead: ChainHead {
        switch self {
        case .signed(let head): head.chainHead
        case .unsigned(let head): head
        }
    }

    public var signed: SignedHead? {
        if case .signed(let head) = self { head } else { nil }
    }

    /// Parses a stored head: a signed note, or `SEQ HASH` (the older form). Nil if neither.
    public static func parse(_ text: String) -> RecordedHead? {
        if let head = try? SignedHead(note: text) { return .signed(head) }
        var trimmed = Substring(text)
        while let last = trimmed.last, last == "\n" || last == "\r" || last == " " { trimmed.removeLast() }
        let parts = trimmed.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2, let seq = UInt64(parts[0]), String(seq) == parts[0], let hash = Digest(hex: String(parts[1])) else { return nil }
        return .unsigned(ChainHead(seq: seq, hash: hash))
    }
}

/// A signed checkpoint the ledger issued: the tree size it covers and the C2SP signed note.
public struct IssuedCheckpoint: Hashable, Sendable {
    public let size: Int64
    public let note: String
    /// Whether it replaces a recorded checkpoint of the same size: the ledger sets it only for
    /// the same checkpoint with witnesses' cosignatures added.
    public let replaces: Bool

    public init(size: Int64, note: String, replaces: Bool = false) {
        self.size = size
        self.note = note
        self.replaces = replaces
    }
}

/// How many entries of each kind of derived data a storage holds (not yet checked).
public struct DerivedCounts: Hashable, Sendable {
    /// Entries of the per-subject index.
    public let indexed: Int
    public let treeHashes: Int64
    public let subjectMapRecords: Int64

    public init(indexed: Int, treeHashes: Int64, subjectMapRecords: Int64) {
        self.indexed = indexed
        self.treeHashes = treeHashes
        self.subjectMapRecords = subjectMapRecords
    }
}

/// What a storage calls the places it keeps things, for messages: an integrity error names
/// the file or table that is wrong and how to repair it, in that storage's own terms.
public struct StorageNames: Sendable {
    /// Where the ledger lives (a folder, a URL without its password).
    public let location: String
    /// How to rebuild the derived data from the log.
    public let derivedRepair: String
    /// Where issued checkpoints are recorded.
    public let checkpoints: String
    /// Where subject records are kept.
    public let subjects: String

    public init(location: String, derivedRepair: String, checkpoints: String, subjects: String) {
        self.location = location
        self.derivedRepair = derivedRepair
        self.checkpoints = checkpoints
        self.subjects = subjects
    }
}

/// Where a ledger's log and the data derived from it are kept: the log's entries by sequence
/// number, the signed head, the derived data (per-subject index, Merkle tree hashes, subject
/// map), subject records and issued checkpoints. A storage translates between these and its
/// own medium and keeps them durable; it knows nothing of consent rules, signatures or hashes,
/// and holds no ledger state of its own.
///
/// Work happens in transactions, passed to the body as values (modelled on GRDB's
/// `read { db in }` / `write { db in }` and Go's `sumdb/storage`): a read transaction sees one
/// consistent state of the ledger; a write transaction is the only writer while it runs and
/// changes the ledger only through ``LedgerWriteTransaction/commit(_:)``. Byte offsets, torn
/// tails, fsync order and recovery are the storage's own business.
///
/// Every method may throw `ConsentError`.
public protocol LedgerStore: Sendable {
    /// Names for messages.
    var names: StorageNames { get }

    /// Where this ledger's signing key is kept unless the caller names another ``KeyStore``;
    /// nil for a store that keeps no key (PostgreSQL: a secret in a table is read over the
    /// network by every writer), whose writers bring a key file or a key store of their own.
    var keyStore: (any KeyStore)? { get }

    /// Creates a ledger holding the genesis entry. Fails with `ConsentError.alreadyExists(_:)`
    /// when there is one; a crash part-way leaves no ledger at all.
    func create(_ setup: LedgerSetup) throws

    /// Runs `body` in a read transaction.
    func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T

    /// Runs `body` now if the read transactions it opens will not wait, and returns nil without
    /// running it otherwise. A folder says yes while it holds a shared lock it took without
    /// waiting (no writer holds the ledger's lock, so none can take it until `body` is done).
    /// A storage whose reads wait on a server never does (the default). This lets a caller on a
    /// thread that must not block (an `async` one) read there, and hand only the reads that
    /// would wait to threads of their own. `body` must only read.
    func readingWithoutWaiting<T>(_ body: () throws -> T) throws -> T?

    /// Runs `body` in the write transaction, waiting for any other writer to finish. What `body`
    /// commits is durable when this returns. A body that throws before committing leaves the
    /// ledger as it was (the ledger commits last, so a commit is never followed by a throw; a
    /// PostgreSQL transaction would roll it back, a file's commit is durable when it returns).
    func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T

    /// Whether ``writeOptimistically(_:)`` can refuse a write that ``write(_:)`` would run: a
    /// storage whose every statement is a round trip to a server.
    var writesOptimistically: Bool { get }

    /// Runs `body` like ``write(_:)``, but may start from what this process knew of the ledger
    /// after its own last commit instead of asking the storage, and check only when it commits,
    /// under the storage's lock, that no other writer changed the ledger since. When one did,
    /// the commit writes nothing and throws `ConsentError.conflict`, or a read that found the
    /// ledger changed under it throws `ConsentError.integrity`; the caller then runs the write
    /// again with ``write(_:)``, which decides. A refusal by the rules is thrown as usual.
    func writeOptimistically<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T
}

extension LedgerStore {
    /// A storage whose write transaction costs no round trips (a folder, memory) just writes.
    public var writesOptimistically: Bool { false }

    /// Never sure: `body` is not run, and the caller reads on a thread that may wait.
    public func readingWithoutWaiting<T>(_ body: () throws -> T) throws -> T? { nil }

    public func writeOptimistically<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        try write(body)
    }
}

/// A consistent view of one ledger, valid only inside `LedgerStore.read(_:)` or
/// `LedgerStore.write(_:)`.
public protocol LedgerReadTransaction {
    /// The catalogue's canonical bytes and the ledger's public key, as created.
    func metadata() throws -> (catalog: [UInt8], publicKey: PublicKey)

    /// The log's complete commits, newest entry and head. A log shorter than the recorded head
    /// is an integrity failure.
    func logState() throws -> LogState

    /// Entries `range` in order, in batches of at most `batchSize`. A range that ends past the
    /// log's complete commits reads whatever complete entries follow them (`verify`, naming the
    /// first bad entry of a damaged tail), up to `range.upperBound`. With `indexedKeys`, each
    /// batch carries the per-subject index's keys for its entries, after the storage checked
    /// whatever else its index holds.
    func entries(_ range: Range<Int>, batchSize: Int, indexedKeys: Bool, _ visit: (EntryBatch) throws -> Void) throws

    /// The bytes of entry `seq` (by default, a batch of one from ``entries(_:batchSize:indexedKeys:_:)``).
    func entry(_ seq: Int) throws -> [UInt8]

    func derivedCounts() throws -> DerivedCounts

    /// Merkle tree hashes by storage index.
    func treeHashes(_ indexes: [Int64]) throws -> [Digest]

    /// One subject-map record, `SubjectMapRecord.size` bytes.
    func subjectMapRecord(_ index: Int64) throws -> [UInt8]

    /// The sequence numbers the per-subject index lists for stream `key`, below `limit`.
    func indexedEntries(of key: [UInt8], below limit: Int) throws -> [Int]

    /// One subject's record, or nil for an id the storage does not know.
    func subjectRecord(_ id: SubjectID) throws -> SubjectRecord?

    /// Every subject record.
    func subjectRecords() throws -> [SubjectID: SubjectRecord]

    /// Every recorded checkpoint, by tree size.
    func checkpoints() throws -> [IssuedCheckpoint]

    /// The recorded checkpoint of the largest size (as it was recorded last: with the
    /// cosignatures of a replacement), nil if none: cheap where the storage can find it without
    /// reading them all. A new checkpoint is recorded unless this one has its size.
    func newestCheckpoint() throws -> IssuedCheckpoint?

    /// Every signed head the storage keeps, oldest first, the newest being the recorded head.
    /// A folder keeps one per commit, in its log; other storages keep only the newest. Each is
    /// checked to stand where its size says (after that many entries), not that it verifies.
    func heads(_ visit: (SignedHead) throws -> Void) throws
}

/// The one writer's transaction.
public protocol LedgerWriteTransaction: LedgerReadTransaction {
    /// Makes a commit durable. Throws, with nothing of it acknowledged, when its entries cannot be
    /// made durable; returns a warning when the entries are durable but the derived data or the
    /// head after them could not be written (the next commit brings them up to date).
    func commit(_ commit: LedgerCommit) throws -> String?

    /// Records a checkpoint the ledger signed, unless one of the same size is recorded; if
    /// `checkpoint.replaces`, it takes that one's place.
    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws

    /// Whether the storage replaces a grown subject map with a compact copy itself, off the
    /// commit path; otherwise a commit brings the copy (``DerivedUpdate/subjectMap`` at 0)
    /// when the map wants one.
    var compactsSubjectMapInBackground: Bool { get }
}

extension LedgerWriteTransaction {
    public var compactsSubjectMapInBackground: Bool { false }
}

extension LedgerReadTransaction {
    public func entry(_ seq: Int) throws -> [UInt8] { try entryFromBatch(seq) }

    /// The bytes of entry `seq`, read as a batch of one.
    public func entryFromBatch(_ seq: Int) throws -> [UInt8] {
        var found: [UInt8]?
        try entries(seq..<(seq + 1), batchSize: 1, indexedKeys: false) { found = $0.entry(0) }
        guard let found else {
            throw ConsentError.integrity(IntegrityFailure(line: seq + 1, seq: UInt64(seq), problem: "the log has no entry \(seq)"))
        }
        return found
    }
}

/// Where a ledger's signing key file is kept: apart from the log, so that reads, exports of
/// evidence and proofs never need it, and a signer kept elsewhere can take its place. A key
/// store keeps bytes; what they mean (`Spec/key-file.md`) is `SigningKeyFile`'s business.
public protocol KeyStore: Sendable {
    /// Where the key is, for messages.
    var keyLocation: String { get }
    /// The stored key file, in secret memory (a plaintext key file is the seed itself).
    func loadKeyFile() throws -> SecretBytes
    /// Stores the key file of a new ledger. Fails if a key is already stored.
    func saveKeyFile(_ file: SecretBytes) throws
    /// Puts a new key file for the same key in place of the stored one, atomically (a changed
    /// passphrase). Fails if no key is stored.
    func replaceKeyFile(_ file: SecretBytes) throws

    // A key rotation stores the new key before the event that names it is committed, and puts
    // it in place of the old one after: a crash in between leaves the new key pending, and the
    // next writer that finds the log naming it promotes it. The new key is never lost.

    /// Stores the key file of a key that a rotation is about to introduce, durably, in place of
    /// any earlier pending one.
    func savePendingKeyFile(_ file: SecretBytes) throws
    /// The pending key file, if a rotation left one.
    func loadPendingKeyFile() throws -> SecretBytes?
    /// Puts the pending key file in place of the key file, destroying the old key's file.
    func promotePendingKeyFile() throws
}

extension KeyStore {
    /// Stores `signer`'s key as `protection` says.
    public func save(_ signer: SodiumSigner, protection: KeyProtection, random: (Int) -> [UInt8] = { Sodium().randomBytes($0) }) throws {
        try saveKeyFile(try SigningKeyFile.file(for: signer, protection: protection, random: random))
    }

    /// Whether the stored key is sealed under a passphrase (`nil` when there is no key).
    public func isEncrypted() throws -> Bool? {
        let file: SecretBytes
        do { file = try loadKeyFile() } catch ConsentError.notFound(.signingKey, _) { return nil }
        if case .encrypted = try SigningKeyFile.read(file, location: keyLocation) { return true }
        return false
    }

    /// A key file as a signer: a plaintext key as it is, an encrypted one opened with the
    /// passphrase that `passphrase` gives.
    public func unlockSigner(_ file: SecretBytes, passphrase: PassphraseSource?) throws -> SodiumSigner {
        switch try SigningKeyFile.read(file, location: keyLocation) {
        case .plaintext(let signer):
            return signer
        case .encrypted(let sealed):
            guard let passphrase else {
                throw ConsentError.keyLocked("the signing key \(keyLocation) is encrypted and no passphrase was given")
            }
            return try sealed.unlock(passphrase: try passphrase(), location: keyLocation)
        }
    }

    /// The stored key as a signer: a plaintext key as it is, an encrypted one opened with the
    /// passphrase that `passphrase` gives (asked for only here, when a key must sign).
    public func unlockSigner(passphrase: PassphraseSource?) throws -> SodiumSigner {
        try unlockSigner(try loadKeyFile(), passphrase: passphrase)
    }
}
