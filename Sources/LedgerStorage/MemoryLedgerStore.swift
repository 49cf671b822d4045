import LedgerFormat
import TransparencyLog
import ConsentDomain
import Synchronization

/// A ledger kept in memory: for tests, and as the smallest example of a storage. Nothing
/// survives the process. Readers see a snapshot; one writer at a time changes it, and a write
/// whose body throws leaves no trace.
public final class MemoryLedgerStore: LedgerStore {
    /// Everything a ledger holds, as values: a transaction works on a copy.
    struct Contents: Sendable {
        var catalog: [UInt8] = []
        var publicKey: PublicKey?
        var entries: [[UInt8]] = []
        var head: SignedHead?
        var streamKeys: [[UInt8]] = []
        var treeHashes: [Digest] = []
        var subjectMap: [[UInt8]] = []
        var subjects: [SubjectID: SubjectRecord] = [:]
        var checkpoints: [Int64: String] = [:]
    }

    private let contents = Mutex<Contents?>(nil)
    /// Held by the one writer for the whole of its transaction.
    private let writer = Mutex<Void>(())
    private let keys = MemoryKeyStore()
    public let name: String

    public init(name: String = "memory") { self.name = name }

    public var names: StorageNames {
        StorageNames(location: "memory ledger '\(name)'", derivedRepair: "rebuild it: create the ledger again from its events", checkpoints: "its checkpoints", subjects: "its subject records")
    }

    public var keyStore: (any KeyStore)? { keys }

    public func create(_ setup: LedgerSetup) throws {
        try contents.withLock { contents in
            guard contents == nil else { throw ConsentError.alreadyExists("a ledger already exists in \(names.location)") }
            var new = Contents(catalog: setup.catalog, publicKey: setup.publicKey, entries: [setup.genesis.lineWithoutNewline], head: setup.head)
            try MemoryLedgerTransaction.apply(setup.derived, to: &new)
            contents = new
        }
    }

    private func snapshot() throws -> Contents {
        guard let current = contents.withLock({ $0 }) else {
            throw ConsentError.notFound(.ledger, "no ledger in \(names.location)")
        }
        return current
    }

    public func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T {
        try body(MemoryLedgerTransaction(contents: try snapshot(), names: names))
    }

    public func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        try writer.withLock { _ in
            let transaction = MemoryLedgerTransaction(contents: try snapshot(), names: names)
            let result = try body(transaction)
            let committed = transaction.contents
            contents.withLock { $0 = committed }
            return result
        }
    }

    /// Changes the stored contents as an attacker without the key could: for tests of what
    /// reads and writes do with tampered derived data.
    func tamper(_ change: (inout Contents) -> Void) {
        contents.withLock { c in
            if c != nil { change(&c!) }
        }
    }
}

/// A transaction on a copy of a memory ledger's contents.
final class MemoryLedgerTransaction: LedgerWriteTransaction {
    var contents: MemoryLedgerStore.Contents
    let names: StorageNames

    init(contents: MemoryLedgerStore.Contents, names: StorageNames) {
        self.contents = contents
        self.names = names
    }

    private func integrity(_ problem: String, seq: Int? = nil, kind: IntegrityKind = .log) -> ConsentError {
        .integrity(IntegrityFailure(kind, line: seq.map { $0 + 1 }, seq: seq.map { UInt64($0) }, problem: "\(names.location): \(problem)"))
    }

    func metadata() throws -> (catalog: [UInt8], publicKey: PublicKey) { (contents.catalog, contents.publicKey!) }

    func logState() throws -> LogState {
        guard let line = contents.entries.last, let head = contents.head else { throw integrity("the log is empty") }
        let last: EventRecord
        do {
            last = try EventCodec.decode(line: line)
        } catch {
            throw integrity("malformed event: \(error.problem)", seq: contents.entries.count - 1)
        }
        guard last.event.seq >= head.seq else { throw integrity("the log ends at seq \(last.event.seq) but seq \(head.seq) was acknowledged: acknowledged events are missing", kind: .head) }
        return LogState(size: contents.entries.count, last: last, head: .signed(head), torn: nil)
    }

    func entries(_ range: Range<Int>, batchSize: Int, indexedKeys: Bool, _ visit: (EntryBatch) throws -> Void) throws {
        let upper = min(range.upperBound, contents.entries.count)
        var first = max(0, range.lowerBound)
        while first < upper {
            let last = min(upper, first + max(1, batchSize))
            var buffer: [UInt8] = []
            var spans: [Range<Int>] = []
            for entry in contents.entries[first..<last] {
                spans.append(buffer.count..<(buffer.count + entry.count))
                buffer += entry
            }
            var keys: [[UInt8]]?
            if indexedKeys {
                guard last <= contents.streamKeys.count else { throw integrity("the per-subject index is shorter than the log (\(names.derivedRepair))", seq: contents.streamKeys.count, kind: .derivedData) }
                keys = Array(contents.streamKeys[first..<last])
            }
            try visit(EntryBatch(buffer: buffer, spans: spans, firstSeq: first, indexedKeys: keys))
            first = last
        }
        if range.lowerBound < range.upperBound, first < range.upperBound, range.upperBound <= contents.entries.count {
            throw integrity("the log has no entry \(first)", seq: first)
        }
    }

    func derivedCounts() throws -> DerivedCounts {
        DerivedCounts(indexed: contents.streamKeys.count, treeHashes: Int64(contents.treeHashes.count), subjectMapRecords: Int64(contents.subjectMap.count))
    }

    func treeHashes(_ indexes: [Int64]) throws -> [Digest] {
        try indexes.map { index in
            guard index >= 0, index < Int64(contents.treeHashes.count) else { throw integrity("no tree hash at index \(index) (\(names.derivedRepair))", kind: .derivedData) }
            return contents.treeHashes[Int(index)]
        }
    }

    func subjectMapRecord(_ index: Int64) throws -> [UInt8] {
        guard index >= 0, index < Int64(contents.subjectMap.count) else { throw integrity("no subject-map record \(index) (\(names.derivedRepair))", kind: .derivedData) }
        return contents.subjectMap[Int(index)]
    }

    func indexedEntries(of key: [UInt8], below limit: Int) throws -> [Int] {
        contents.streamKeys.prefix(max(0, limit)).indices.filter { contents.streamKeys[$0] == key }
    }

    func subjectRecord(_ id: SubjectID) throws -> SubjectRecord? { contents.subjects[id] }

    func subjectRecords() throws -> [SubjectID: SubjectRecord] { contents.subjects }

    func heads(_ visit: (SignedHead) throws -> Void) throws {
        if let head = contents.head { try visit(head) }
    }

    func checkpoints() throws -> [IssuedCheckpoint] {
        contents.checkpoints.sorted { $0.key < $1.key }.map { IssuedCheckpoint(size: $0.key, note: $0.value) }
    }
    func newestCheckpoint() throws -> IssuedCheckpoint? {
        contents.checkpoints.max { $0.key < $1.key }.map { IssuedCheckpoint(size: $0.key, note: $0.value) }
    }


    func commit(_ commit: LedgerCommit) throws -> String? {
        guard commit.firstSeq == contents.entries.count else {
            throw ConsentError.conflict("\(names.location): a commit at entry \(commit.firstSeq) does not follow the log's \(contents.entries.count) entries: another writer appended first; nothing was written")
        }
        try commit.checkHead(following: contents.entries.count, at: names.location)
        for (id, record) in commit.subjects { contents.subjects[id] = record }
        for (id, record) in commit.revisedSubjects where record == nil || contents.subjects[id]?.salt == record?.salt { contents.subjects[id] = record }
        contents.entries += commit.entries
        try Self.apply(commit.derived, to: &contents)
        if let head = commit.head { contents.head = head }
        for id in commit.erasedSubjects { contents.subjects[id] = nil }
        return nil
    }

    static func apply(_ derived: DerivedUpdate, to contents: inout MemoryLedgerStore.Contents) throws {
        guard derived.indexFrom <= contents.streamKeys.count, derived.indexFrom + derived.streamKeys.count <= contents.entries.count, derived.treeFrom <= Int64(contents.treeHashes.count) else {
            throw ConsentError.storage("derived data must continue what is stored")
        }
        contents.streamKeys = Array(contents.streamKeys.prefix(derived.indexFrom)) + derived.streamKeys
        contents.treeHashes = Array(contents.treeHashes.prefix(Int(derived.treeFrom))) + derived.treeHashes
        if let map = derived.subjectMap {
            guard map.at <= Int64(contents.subjectMap.count) else { throw ConsentError.storage("subject-map records must continue what is stored") }
            contents.subjectMap = Array(contents.subjectMap.prefix(Int(map.at))) + (0..<map.records.count).map { map.records[$0] }
        }
    }

    func recordCheckpoint(_ checkpoint: IssuedCheckpoint) throws {
        if contents.checkpoints[checkpoint.size] == nil || checkpoint.replaces {
            contents.checkpoints[checkpoint.size] = checkpoint.note
        }
    }
}

/// A signing key file held in memory.
final class MemoryKeyStore: KeyStore {
    private let file = Mutex<SecretBytes?>(nil)

    var keyLocation: String { "memory" }

    func loadKeyFile() throws -> SecretBytes {
        guard let file = file.withLock({ $0 }) else { throw ConsentError.notFound(.signingKey, "no signing key in memory") }
        return file
    }

    func saveKeyFile(_ new: SecretBytes) throws {
        try file.withLock { file in
            guard file == nil else { throw ConsentError.alreadyExists("a signing key is already held in memory") }
            file = new
        }
    }

    func replaceKeyFile(_ new: SecretBytes) throws {
        try file.withLock { file in
            guard file != nil else { throw ConsentError.notFound(.signingKey, "no signing key in memory") }
            file = new
        }
    }

    private let pending = Mutex<SecretBytes?>(nil)

    func savePendingKeyFile(_ new: SecretBytes) throws { pending.withLock { $0 = new } }

    func loadPendingKeyFile() throws -> SecretBytes? { pending.withLock { $0 } }

    func promotePendingKeyFile() throws {
        guard let new = pending.withLock({ p in defer { p = nil }; return p }) else {
            throw ConsentError.notFound(.signingKey, "no pending signing key in memory")
        }
        file.withLock { $0 = new }
    }
}
