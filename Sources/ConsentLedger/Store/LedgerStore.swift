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

/// What a new ledger is made of.
public struct LedgerSetup: Sendable {
    /// The catalogue's canonical bytes (their SHA-256 is pinned in the genesis event).
    public let catalog: [UInt8]
    public let publicKey: PublicKey
    /// The 32-byte Ed25519 seed; stored only by stores that hold the signing key.
    public let secretSeed: [UInt8]
    public let genesis: EventRecord
    /// The signed head of the log of one record, the genesis event.
    public let head: SignedHead

    public init(catalog: [UInt8], publicKey: PublicKey, secretSeed: [UInt8], genesis: EventRecord, head: SignedHead) {
        self.catalog = catalog
        self.publicKey = publicKey
        self.secretSeed = secretSeed
        self.genesis = genesis
        self.head = head
    }
}

/// A position in the log: the byte offset after a complete command and the number of lines
/// before it. Only the store that produced it interprets it.
public struct LogCursor: Hashable, Sendable {
    public let offset: UInt64
    public let lines: Int

    public init(offset: UInt64, lines: Int) {
        self.offset = offset
        self.lines = lines
    }

    public static let start = LogCursor(offset: 0, lines: 0)
}

/// Where the line of one event lies in the log, and whose event it is.
public struct LineLocation: Hashable, Sendable {
    public let offset: UInt64
    /// Length without the newline.
    public let length: UInt32
    /// The subject reference's 16 bytes; zeros for ledger-level events.
    public let subject: [UInt8]

    public init(offset: UInt64, length: UInt32, subject: [UInt8]) {
        self.offset = offset
        self.length = length
        self.subject = subject
    }

    public static let noSubject = [UInt8](repeating: 0, count: 16)
}

/// Complete lines of the log, read together: one buffer and where each line lies in it, so a
/// million lines do not cost a million allocations.
public struct LineBatch: Sendable {
    /// The bytes the lines lie in (shared between batches cut from one read).
    public let buffer: [UInt8]
    /// The log offset of `buffer[0]`.
    public let fileOffset: UInt64
    /// Each line's start and end in `buffer` (newline excluded) and its 1-based line number.
    public let lines: [(start: Int, end: Int, number: Int)]

    public init(buffer: [UInt8], fileOffset: UInt64, lines: [(start: Int, end: Int, number: Int)]) {
        self.buffer = buffer
        self.fileOffset = fileOffset
        self.lines = lines
    }

    /// Where the `i`-th line lies in the log.
    public func location(_ i: Int, subject: [UInt8]) -> LineLocation {
        LineLocation(offset: fileOffset + UInt64(lines[i].start), length: UInt32(lines[i].end - lines[i].start), subject: subject)
    }

    public var count: Int { lines.count }

    /// 1-based line number of the `i`-th line.
    public func number(_ i: Int) -> Int { lines[i].number }

    /// Runs `body` on the `i`-th line's bytes.
    public func withLine<T, E: Error>(_ i: Int, _ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
        let (start, end, _) = lines[i]
        let result: Result<T, E> = buffer.withUnsafeBufferPointer { all in
            do throws(E) {
                return .success(try body(UnsafeBufferPointer(rebasing: all[start..<end])))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// A copy of the `i`-th line's bytes.
    public func line(_ i: Int) -> [UInt8] { Array(buffer[lines[i].start..<lines[i].end]) }
}

/// Bytes at the end of the log that a crash left behind: a partial line, or the complete lines of
/// a command (or, in format 2, of a commit: a batch of commands) whose other events never
/// reached the disk. They were never acknowledged.
public struct TornTail: Hashable, Sendable, CustomStringConvertible {
    public let offset: UInt64
    public let byteCount: Int
    /// Complete lines in the torn region (events of the incomplete command).
    public let completeLines: Int

    public var description: String {
        "\(byteCount) bytes at offset \(offset) (\(completeLines) complete line(s) of an unfinished command or commit"
            + (completeLines == 0 ? ", a partial line)" : " and any partial line)")
    }
}

/// The log as it stands when opened: where its last complete command ends, its newest event and
/// anything torn after it.
public struct LogState: Sendable {
    public let end: LogCursor
    public let last: EventRecord
    /// The head recorded after the last acknowledged append.
    public let recordedHead: ChainHead
    /// The signed head it was read from; nil for a head of the older, unsigned `SEQ HASH` form,
    /// which the next write replaces with a signed one.
    public let signedHead: SignedHead?
    public let torn: TornTail?

    public init(end: LogCursor, last: EventRecord, head: RecordedHead, torn: TornTail?) {
        self.end = end
        self.last = last
        self.recordedHead = head.chainHead
        self.signedHead = head.signed
        self.torn = torn
    }
}

/// A head as a store reads it: signed, or of the older unsigned form.
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

    public init(size: Int64, note: String) {
        self.size = size
        self.note = note
    }
}

/// Where events are kept. A store translates between bytes and events and keeps them durable;
/// it holds no ledger state of its own and knows nothing of consent rules.
///
/// Every method may throw ``LedgerError``.
public protocol LedgerStore: Sendable {
    /// A human-readable name of where the ledger lives, for messages.
    var location: String { get }

    /// How to rebuild this store's derived data (line index, tree hashes) from the log, in this
    /// store's own terms, for integrity messages.
    var derivedRepair: String { get }

    /// Where this store records issued checkpoints (a file or table name), for messages.
    var checkpointsPlace: String { get }

    /// Where this store keeps subject records (a file or table name), for messages.
    var subjectsPlace: String { get }

    /// Creates a ledger. Fails with ``LedgerError/alreadyExists(_:)`` when there is one; a crash
    /// part-way leaves no ledger at all.
    func create(_ setup: LedgerSetup) throws

    func readCatalog() throws -> [UInt8]
    func readPublicKey() throws -> PublicKey
    /// The signing seed, for writers.
    func readSecretSeed() throws -> [UInt8]

    /// Runs `body` while holding the ledger's lock: shared for readers, exclusive for the one writer.
    func withLock<T>(exclusive: Bool, _ body: () throws -> T) throws -> T

    /// The log's first line (the genesis event), without its newline.
    func readFirstLine() throws -> [UInt8]

    /// Inspects the end of the log: the last complete command, the newest event, and any torn tail.
    /// A log shorter than the recorded head is an integrity failure.
    func logState() throws -> LogState

    /// The end of the last complete line, whatever command it belongs to. `verify` scans up to
    /// it when the tail is damaged, to name the first bad entry rather than the last.
    func completeLinesExtent() throws -> LogCursor

    /// Reads complete lines from `cursor` up to `end`, in batches of at most `batchSize`. With
    /// `containing`, only lines holding that byte string are delivered (a cheap pre-filter).
    func scan(from cursor: LogCursor, to end: LogCursor, batchSize: Int, containing: [UInt8]?, _ visit: (LineBatch) throws -> Void) throws

    /// Appends lines at `expected` (which must be the end of the last complete command), removing
    /// any torn tail first, and returns once the bytes are durable. Call with the exclusive lock
    /// held; then write the derived data, then ``writeHead(_:)``.
    func append(_ lines: [UInt8], lineCount: Int, at expected: LogCursor) throws -> LogCursor

    /// Forces the log's bytes to disk: before anything (derived data, a head, a signed
    /// checkpoint) vouches for lines that a crashed writer may have left unsynced.
    func syncLog() throws

    /// Durably records the newest acknowledged event. Everything before it, the derived data
    /// included, must already be durable.
    func writeHead(_ head: SignedHead) throws

    // MARK: Derived data: rebuildable from the log, checked by `verify`

    /// How many line locations and Merkle tree hashes are stored.
    func derivedCounts() throws -> (lines: Int, treeHashes: Int64)
    /// Line locations for sequence numbers `range`.
    func readLineLocations(_ range: Range<Int>) throws -> [LineLocation]
    /// Every line location whose subject is `subject` (16 bytes), with its sequence number.
    func findLineLocations(subject: [UInt8]) throws -> [(seq: Int, location: LineLocation)]
    /// Merkle tree hashes by storage index (``MerkleTree/storedHashIndex(level:n:)``).
    func readTreeHashes(_ indexes: [Int64]) throws -> [Digest]
    /// Writes line locations from sequence number `lineStart`, tree hashes from storage index
    /// `treeStart` and, when given, subject-map records from record index `subjectMap.at`,
    /// cutting off anything stored after each, and syncs them.
    func writeDerived(locations: [LineLocation], at lineStart: Int, treeHashes: [Digest], at treeStart: Int64, subjectMap: (records: SubjectMapRecords, at: Int64)?) throws
    /// How many complete subject-map records (``SubjectMapRecord``) are stored.
    func subjectMapCount() throws -> Int64
    /// One subject-map record by index, ``SubjectMapRecord/size`` bytes.
    func readSubjectMap(_ index: Int64) throws -> [UInt8]
    /// The bytes of one line, without its newline.
    func readLine(at location: LineLocation) throws -> [UInt8]

    /// Every known subject id with its record.
    func readSubjectRecords() throws -> [SubjectID: SubjectRecord]
    /// One subject's record, or nil for an id the store does not know (a read of one subject
    /// need not read them all).
    func readSubjectRecord(_ id: SubjectID) throws -> SubjectRecord?
    /// Durably records new subjects, in one write and one sync. Call with the exclusive lock
    /// held, before appending the subjects' first events.
    func saveSubjectRecords(_ records: [(subjectID: SubjectID, record: SubjectRecord)]) throws

    // MARK: Issued checkpoints

    /// Records a checkpoint the ledger signed, unless one of the same size is already recorded
    /// (signatures are deterministic, so it is the same note). Call with the exclusive lock held.
    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws
    /// Every recorded checkpoint, by tree size.
    func readCheckpoints() throws -> [IssuedCheckpoint]
}
