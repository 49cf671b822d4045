import ConsentDomain
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// A fresh folder under /tmp, removed by `remove()`.
struct TemporaryFolder {
    let path: String

    init(_ label: String = "test") {
        var template = Array("/tmp/consentledger-\(label)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
    }

    func remove() {
        _ = system("rm -rf '\(path)'")
    }
}

/// A clock that starts at `start` and moves `step` milliseconds each time it is read.
final class SteppingClock: Sendable {
    private let now: Mutex<Int64>
    let step: Int64

    init(start: String = "2026-01-15T09:00:00.000Z", step: Int64 = 1000) {
        now = Mutex(Timestamp(canonical: start)!.millisecondsSinceEpoch)
        self.step = step
    }

    /// Sets the clock (a machine whose clock jumps, or is set right).
    func set(_ time: String) {
        now.withLock { $0 = Timestamp(canonical: time)!.millisecondsSinceEpoch }
    }

    var clock: LedgerClock {
        { [self] in
            now.withLock { value in
                let t = Timestamp(millisecondsSinceEpoch: value)
                value += step
                return t
            }
        }
    }
}

/// Deterministic "random" bytes: the n-th call returns n repeated.
final class CountingRandom: Sendable {
    private let counter = Mutex<UInt8>(0)

    var source: RandomSource {
        { [self] count in
            counter.withLock { c in
                c &+= 1
                return [UInt8](repeating: c, count: count)
            }
        }
    }
}

/// The fixed test key of the vectors: seed bytes 0, 1, …, 31.
let vectorSeed: [UInt8] = Array(0..<32)

func readBytes(_ path: String) -> [UInt8] {
    (try? LocalFile.read(path, limit: 1 << 30)) ?? []
}

/// The content of the log of the ledger in `folder`: its bytes before the zero bytes a writer
/// reserves after them for its appends (`Spec/ledger-format.md`, "The log file").
func readLog(_ folder: String) -> [UInt8] {
    withoutReserve(readBytes(folder + "/ledger.jsonl"))
}

/// `bytes` without the zero bytes at their end.
func withoutReserve(_ bytes: [UInt8]) -> [UInt8] {
    Array(bytes[..<(bytes.lastIndex(where: { $0 != 0 }).map { $0 + 1 } ?? 0)])
}

func writeBytes(_ bytes: [UInt8], to path: String) {
    let f = fopen(path, "wb")!
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
    fclose(f)
}

/// Copies a ledger folder. Git keeps no file modes but the executable bit, so a ledger checked
/// in (the vectors) has a key readable by others, which signing refuses: the copy's is made private.
func copyFolder(_ from: String, to: String) {
    _ = system("rm -rf '\(to)' && cp -a '\(from)' '\(to)' && if [ -f '\(to)/secret.key' ]; then chmod 600 '\(to)/secret.key'; fi")
}

/// The lines of a file, each with its newline.
func lines(of bytes: [UInt8]) -> [[UInt8]] {
    var result: [[UInt8]] = []
    var current: [UInt8] = []
    for b in bytes {
        current.append(b)
        if b == 0x0A {
            result.append(current)
            current = []
        }
    }
    if !current.isEmpty { result.append(current) }
    return result
}

/// The path of the package's root folder, from this file's location.
let packageRoot: String = {
    var parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
    parts.removeLast(3)
    return parts.joined(separator: "/")
}()

/// The seed scenario of the rules file, as commands.
let seedScenario: [LedgerCommand] = [
    LedgerCommand(subjectID: "alice", request: .give(feature: "medication-management", consents: ["required", "optional-a"])),
    LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required", "optional-a", "optional-b"])),
    LedgerCommand(subjectID: "alice", request: .revoke(feature: "medication-management", consent: "required")),
]

/// Outcome of opening and verifying a ledger folder.
enum VerifyOutcome: Equatable {
    case ok(events: Int)
    case failed(ConsentError)
}

func verifyFolder(_ path: String) -> VerifyOutcome {
    do {
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        return .ok(events: try ledger.verify().events)
    } catch let error as ConsentError {
        return .failed(error)
    } catch {
        return .failed(.storage("\(error)"))
    }
}

func removeFolder(_ paths: String...) {
    for path in paths { _ = system("rm -rf '\(path)'") }
}

extension Ledger {
    /// The stream state a writer would seal `events` with after the log's end, for tests that
    /// hand-craft lines.
    func streamStateForSealing(_ events: [LedgerEvent]) throws -> StreamState {
        try reading { view in try streamState(for: Set(events.map { StreamKey.of($0.payload) }), view)!.state }
    }
}

/// An empty stream state: for sealing events whose links do not matter to the test.
func emptyStreams() -> StreamState { StreamState(newest: [:], map: SubjectMap(hasher: OpenSSLSHA256())) }

extension LedgerStore {
    /// The log's state, read in a transaction of its own.
    func logState() throws -> LogState { try read { try $0.logState() } }

    /// Every subject record, read in a transaction of its own.
    func readSubjectRecords() throws -> [SubjectID: SubjectRecord] { try read { try $0.subjectRecords() } }
}

/// Everything a storage holds besides the log, read through the storage: to compare two
/// storages, or one before and after a refused command.
struct StorageSnapshot: Equatable, CustomStringConvertible {
    var head: ChainHead
    var size: Int
    var entries: [[UInt8]]
    var counts: DerivedCounts
    var streamKeys: [[UInt8]]
    var treeHashes: [Digest]
    var subjectMap: [[UInt8]]
    var subjects: [SubjectID: SubjectRecord]
    var checkpoints: [IssuedCheckpoint]

    var description: String { "head \(head), \(size) entries, \(counts), \(subjects.count) subjects, \(checkpoints.count) checkpoints" }
}

extension LedgerStore {
    func snapshot() throws -> StorageSnapshot {
        try read { tx in
            let log = try tx.logState()
            var entries: [[UInt8]] = []
            var keys: [[UInt8]] = []
            let counts = try tx.derivedCounts()
            try tx.entries(0..<log.size, batchSize: 100, indexedKeys: false) { batch in
                for i in 0..<batch.count { entries.append(batch.entry(i)) }
            }
            try tx.entries(0..<min(log.size, counts.indexed), batchSize: 100, indexedKeys: true) { batch in
                keys += batch.indexedKeys ?? []
            }
            return StorageSnapshot(
                head: log.recordedHead, size: log.size, entries: entries, counts: counts, streamKeys: keys,
                treeHashes: try tx.treeHashes(Array(0..<counts.treeHashes)),
                subjectMap: try (0..<counts.subjectMapRecords).map { try tx.subjectMapRecord($0) },
                subjects: try tx.subjectRecords(), checkpoints: try tx.checkpoints())
        }
    }

    func readCheckpoints() throws -> [IssuedCheckpoint] { try read { try $0.checkpoints() } }
}

/// After an edit by someone without the key: each subject's status is what the full replay
/// `truth` gives, or an integrity error. A subject whose record was removed (or renamed) reads
/// as one the ledger does not know (a pseudonymous log cannot tell whose record is missing);
/// for it, `verifyFails` must hold, since verify names the pseudonym left without a record.
func expectReadsMatchReplayOrFail(_ ledger: Ledger, truth: LedgerReplay, subjects: [String], refs: [String: SubjectRef], edit: String, recordEdit: String, verifyFails: () -> Bool) {
    for subject in subjects {
        let ref = refs[subject]
        do {
            if ref != nil, try ledger.subjectRef(for: subject) == nil {
                #expect(edit.hasPrefix(recordEdit), "\(edit): \(subject) lost its record")
                #expect(verifyFails(), "\(edit): \(subject)'s record is gone and verify passed")
                continue
            }
            let listing = try ledger.report(for: subject).listing
            let expected = ConsentListing(state: ref.map { truth.state(of: $0) } ?? SubjectState(), catalog: SeedCatalog.catalog)
            #expect(listing == expected, "\(edit): status of \(subject) differs from the replay")
        } catch ConsentError.integrity {
        } catch {
            Issue.record("\(edit): status of \(subject) failed with \(error), not an integrity error")
        }
    }
}

/// Whether a line of `ledger.jsonl` is a head line (`{"head":…}`) rather than an event.
func isHeadLine(_ line: [UInt8]) -> Bool { line.count > 2 && line[0] == 0x7B && line[1] == 0x22 && line[2] == 0x68 }

/// The event lines of a log file, each with its 0x0A: its head lines left out.
func eventLines(of bytes: [UInt8]) -> [[UInt8]] { lines(of: bytes).filter { !isHeadLine($0) } }

/// Applies a change to the event lines of a log's lines, leaving its head lines where they are
/// (events removed leave their place empty; events added go at the end).
func changingEvents(_ all: [[UInt8]], _ change: ([[UInt8]]) -> [[UInt8]]) -> [[UInt8]] {
    let changed = change(all.filter { !isHeadLine($0) })
    var result: [[UInt8]] = []
    var i = 0
    for line in all {
        if isHeadLine(line) {
            result.append(line)
        } else if i < changed.count {
            result.append(changed[i])
            i += 1
        }
    }
    return result + changed[min(i, changed.count)...]
}

/// The newest signed head of a ledger folder: its newest head line (or, in the older layout,
/// its `head` file).
func newestHead(_ folder: String) -> SignedHead? {
    if access(folder + "/head", F_OK) == 0 {
        return RecordedHead.parse(String(decoding: readBytes(folder + "/head"), as: UTF8.self))?.signed
    }
    guard let line = lines(of: readLog(folder)).last(where: { isHeadLine($0) && $0.last == 0x0A }) else { return nil }
    return try? SignedHead(logLine: Array(line.dropLast()))
}

/// Turns a ledger folder into the older layout, which the storage still reads and writes: the
/// head lines taken out of the log and the newest one's note written to a `head` file.
func useHeadFileLayout(_ folder: String) {
    let all = lines(of: readLog(folder))
    let note = newestHead(folder)!.note
    writeBytes(Array(all.filter { !isHeadLine($0) }.joined()), to: folder + "/ledger.jsonl")
    writeBytes(Array(note.utf8), to: folder + "/head")
    // The line index's offsets were the other layout's: rebuilt by the next write.
    removeFolder(folder + "/lines.idx", folder + "/tree.hashes", folder + "/subjects.map")
}

/// Rewrites the note of a ledger folder's newest head (its newest head line, or its `head`
/// file in the older layout), as a tamperer without the key would.
func rewriteNewestHead(_ folder: String, _ change: (String) -> String) {
    if access(folder + "/head", F_OK) == 0 {
        writeBytes(Array(change(String(decoding: readBytes(folder + "/head"), as: UTF8.self)).utf8), to: folder + "/head")
        return
    }
    var all = lines(of: readLog(folder))
    let i = all.lastIndex(where: isHeadLine)!
    let note = try! SignedHead(logLine: Array(all[i].dropLast())).note
    all[i] = CanonicalJSON.serialize(.object(["head": .string(change(note))])) + [0x0A]
    writeBytes(Array(all.joined()), to: folder + "/ledger.jsonl")
}
