import ConsentDomain
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
import TransparencyLog

/// A ledger folder that someone else has been at: its lock held, its files swapped for FIFOs,
/// folders or links, temporary files left by a killed writer, a checkpoints file that cannot be
/// written. Each fails at once with a storage error that says what it found, or is tidied, and
/// no byte of the ledger changes.
@Suite struct HostileFolderTests {
    static func ledger(_ label: String, lockTimeout: Duration = FileLedgerStore.defaultLockTimeout) throws -> (String, Ledger) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/\(label)", keyProtection: .insecurePlaintext, clock: SteppingClock().clock)
        try ledger.execute(Array(seedScenario))
        return (path, ledger)
    }

    /// The bytes of every regular file in the folder but the lock, read without the ledger's
    /// lock or any of its readers (which the cases here hold or break).
    static func folderBytes(_ path: String) -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for name in PosixFile.directoryEntries(path) where name != "lock" {
            var st = stat()
            guard lstat(path + "/" + name, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            files[name] = readBytes(path + "/" + name)
        }
        return files
    }

    static let give = LedgerCommand(subjectID: "zoe", request: .give(feature: "timeline", consents: ["required"]))

    static func storageMessage(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch ConsentError.storage(let message) {
            return message
        } catch {
            return "not a storage error: \(error)"
        }
    }

    /// A held lock used to block a write for ever (`flock -s lock sleep 20` stopped `give`).
    /// Now a write waits at most the store's lock timeout, then fails, changing nothing.
    @Test(arguments: [true, false])
    func aHeldLockFailsAfterTheTimeout(_ exclusiveHolder: Bool) throws {
        let (path, _) = try Self.ledger("held-lock")
        defer { removeFolder(path) }
        let holder = open(path + "/lock", O_RDONLY)
        #expect(holder >= 0)
        defer { close(holder) }
        #expect(flock(holder, exclusiveHolder ? LOCK_EX : LOCK_SH) == 0)
        let store = FileLedgerStore(directory: path, lockTimeout: .milliseconds(300))
        let before = Self.folderBytes(path)
        let started = ContinuousClock.now
        let message = Self.storageMessage { _ = try store.write { _ in 1 } }
        let waited = ContinuousClock.now - started
        #expect(message?.contains("is locked by another process, and stayed locked for 0.3 s") == true, "\(message ?? "no error")")
        #expect(message?.contains("nothing was written") == true)
        #expect(waited >= .milliseconds(300) && waited < .seconds(5))
        // A reader waits only for a writer.
        let read = Self.storageMessage { _ = try store.read { try $0.logState() } }
        #expect((read != nil) == exclusiveHolder)
        #expect(Self.folderBytes(path) == before)
        // Once the holder lets go, the ledger is written as usual.
        flock(holder, LOCK_UN)
        try Ledger.open(store: store).execute(Self.give)
    }

    /// A timeout of zero takes a free lock and does not wait for a held one.
    @Test func aZeroTimeoutTakesAFreeLock() throws {
        let (path, _) = try Self.ledger("zero-timeout")
        defer { removeFolder(path) }
        let store = FileLedgerStore(directory: path, lockTimeout: .zero)
        try Ledger.open(store: store).execute(Self.give)
    }

    /// A FIFO, a folder or a symbolic link where a ledger file should be: a FIFO made reads hang
    /// for ever (waiting for a writer), a link could make a write change a file outside the
    /// folder. Each is refused when opened, saying what it found.
    @Test(arguments: ["ledger.jsonl", "catalog.json", "public.key", "subjects.jsonl", "lines.idx", "lock", "checkpoints.jsonl"], ["a FIFO", "a folder", "a symbolic link"])
    func aLedgerFileThatIsNotARegularFileIsRefused(_ name: String, _ kind: String) throws {
        let (path, _) = try Self.ledger("not-regular")
        defer { removeFolder(path) }
        let target = path + "/" + name
        let kept = path + "/kept-" + name
        if PosixFile.ownKind(of: target) != .missing { #expect(rename(target, kept) == 0) }
        switch kind {
        case "a FIFO": #expect(mkfifo(target, 0o600) == 0)
        case "a folder": #expect(mkdir(target, 0o700) == 0)
        default: #expect(symlink(kept, target) == 0)
        }
        let before = Self.folderBytes(path)
        let message = Self.storageMessage {
            // In this order, each stops at the first that opens the file (the checkpoint needs
            // no subject record, the write needs the checkpoints file not at all).
            let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
            _ = try ledger.report(for: "alice")
            _ = try ledger.signedCheckpoint()
            try ledger.execute(Self.give)
        }
        #expect(message?.contains("\(target) is \(kind), not a regular file") == true, "\(message ?? "no error")")
        #expect(Self.folderBytes(path) == before, "a file changed")
    }

    /// A writer killed between writing a temporary file and renaming it into place left it in
    /// the folder for good. A process's first write now removes them; a key file's temporary,
    /// which a key command makes without the ledger's lock, and a subject map's, which a
    /// long-running writer makes off the commit path, only once it is ten minutes old.
    @Test func strayTemporaryFilesAreSweptByTheNextWrite() throws {
        let (path, _) = try Self.ledger("stray-temporary")
        defer { removeFolder(path) }
        let stray = ["head.tmp-0123456789ab", "subjects.jsonl.tmp-a1b2c3d4e5f6", "subjects.map.tmp-ffffffffffff"]
        let keptNames = ["secret.key.tmp-0123456789ab", "notes.tmp-0123456789ab", "head.tmp-short", "head.tmp-0123456789AB", "subjects.map.copy.tmp-eeeeeeeeeeee"]
        let oldOnes = ["secret.key.next.tmp-abcdefabcdef", "subjects.map.copy.tmp-ffffffffffff"]
        for name in stray + keptNames + oldOnes { writeBytes(Array("x".utf8), to: path + "/" + name) }
        for name in oldOnes {
            var old = [timespec(tv_sec: time(nil) - 3600, tv_nsec: 0), timespec(tv_sec: time(nil) - 3600, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, path + "/" + name, &old, 0) == 0)
        }
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        _ = try ledger.report(for: "alice")
        #expect(stray.allSatisfy { PosixFile.ownKind(of: path + "/" + $0) == .file }, "a read removes nothing")
        try ledger.execute(Self.give)
        for name in stray + oldOnes { #expect(PosixFile.ownKind(of: path + "/" + name) == .missing, "\(name)") }
        for name in keptNames { #expect(PosixFile.ownKind(of: path + "/" + name) == .file, "\(name)") }
        #expect(try ledger.verify().events > 0)
    }

    /// `verify` holds the log to every checkpoint the ledger handed out, so one that cannot be
    /// recorded is not handed out: on a read-only mount, `checkpoint` signed and recorded
    /// nothing, and said nothing.
    @Test func aCheckpointThatCannotBeRecordedIsNotHandedOut() throws {
        let (path, _) = try Self.ledger("unrecorded-checkpoint")
        defer { removeFolder(path) }
        let full = try Ledger.open(store: ReadsOnly(base: FileLedgerStore(directory: path)))
        let message = Self.storageMessage { _ = try full.signedCheckpoint() }
        #expect(message?.contains("was not handed out: recording it in checkpoints.jsonl of \(path) failed (cannot write \(path): No space left on device") == true, "\(message ?? "no error")")
        #expect(PosixFile.ownKind(of: path + "/checkpoints.jsonl") == .missing)
        // Once recorded, handing the same checkpoint out again needs no write.
        let (checkpoint, note) = try Ledger.open(store: FileLedgerStore(directory: path)).signedCheckpoint()
        let again = try full.signedCheckpoint()
        #expect(again.checkpoint == checkpoint && again.note == note)
        #expect(try full.issuedCheckpoints().map(\.size) == [checkpoint.size])
    }

    /// Recording a checkpoint read every record before it (1.9 s at 100,000): now the newest
    /// line decides for a checkpoint of the growing log, and a repeat appends nothing.
    @Test func recordingACheckpointAppendsOneLineAndARepeatNone() throws {
        let (path, ledger) = try Self.ledger("checkpoint-append")
        defer { removeFolder(path) }
        let store = FileLedgerStore(directory: path)
        func lines() -> Int { readBytes(path + "/checkpoints.jsonl").filter { $0 == 0x0A }.count }
        let (first, note) = try ledger.signedCheckpoint()
        #expect(lines() == 1)
        try store.write { tx in try tx.recordCheckpoint(IssuedCheckpoint(size: first.size, note: note)) }
        #expect(lines() == 1)
        try ledger.execute(Self.give)
        let (second, secondNote) = try ledger.signedCheckpoint()
        #expect(second.size > first.size && lines() == 2)
        // The newest cosigned by a witness (a line that replaces it).
        let secondCosigned = secondNote + "— witness abc\n"
        try store.write { tx in try tx.recordCheckpoint(IssuedCheckpoint(size: second.size, note: secondCosigned, replaces: true)) }
        #expect(lines() == 3)
        // An older size that is recorded: found in the whole file, nothing appended.
        try store.write { tx in try tx.recordCheckpoint(IssuedCheckpoint(size: first.size, note: note)) }
        #expect(lines() == 3)
        // The older checkpoint cosigned since takes its place (a line that replaces it), and the
        // newest size's line follows it again, so that the last line still decides.
        let cosigned = note + "— witness abc\n"
        try store.write { tx in try tx.recordCheckpoint(IssuedCheckpoint(size: first.size, note: cosigned, replaces: true)) }
        #expect(lines() == 5)
        #expect(try store.read { try $0.newestCheckpoint() }?.note == secondCosigned)
        // The newest, issued again: nothing appended; both keep their cosignatures (the
        // newest was appended over, plain, when an older line came last).
        _ = try ledger.signedCheckpoint()
        #expect(lines() == 5)
        let recorded = try store.read { try $0.checkpoints() }
        #expect(recorded.map(\.size) == [first.size, second.size])
        #expect(recorded.map(\.note) == [cosigned, secondCosigned])
    }
}

/// A store whose disk is full: reads work, every write fails before it starts.
final class ReadsOnly: LedgerStore, Sendable {
    let base: FileLedgerStore
    init(base: FileLedgerStore) { self.base = base }
    var names: StorageNames { base.names }
    var keyStore: (any KeyStore)? { base.keyStore }
    func create(_ setup: LedgerSetup) throws { try base.create(setup) }
    func read<T>(_ body: (any LedgerReadTransaction) throws -> T) throws -> T { try base.read(body) }
    func write<T>(_ body: (any LedgerWriteTransaction) throws -> T) throws -> T {
        throw ConsentError.storage("cannot write \(base.directory): No space left on device (simulated)")
    }
}

/// Strings from a ledger, a bundle or a request are shown on a terminal with their control
/// characters escaped.
@Suite struct TerminalTextTests {
    @Test(arguments: [
        ("plain", "plain"),
        ("ünïcødé ✓", "ünïcødé ✓"),
        ("x\nOK: 99 events", "x\\nOK: 99 events"),
        ("\u{1B}[2J\u{1B}]0;title\u{07}", "\\u{1B}[2J\\u{1B}]0;title\\u{7}"),
        ("tab\there\r", "tab\\there\\r"),
        ("del\u{7F} c1\u{9B}", "del\\u{7F} c1\\u{9B}"),
        ("bidi \u{202E}txt.exe\u{2069}", "bidi \\u{202E}txt.exe\\u{2069}"),
        ("nul\u{0}", "nul\\u{0}"),
    ])
    func controlCharactersAreEscaped(_ raw: String, _ shown: String) {
        #expect(Terminal.escaped(raw) == shown)
    }
}
