import ConsentDomain
import Foundation
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
#if canImport(Glibc)
import Glibc
#endif

/// The log's reserve (`Spec/ledger-format.md`, "The log file"): zero bytes after the content,
/// made in steps, that appends fill in place so that their sync leaves the file's size alone.
@Suite struct LogReserveTests {
    static let step = Int(FileLedgerTransaction.reserveStep)
    static let give = LedgerCommand(subjectID: "zoe", request: .give(feature: "timeline", consents: ["required"]))

    func makeLedger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        return (ledger, path)
    }

    @Test func anAppendIntoTheReserveLeavesTheFileSizeAsItWas() throws {
        let (ledger, path) = try makeLedger("reserve-append")
        defer { removeFolder(path) }
        let file = readBytes(path + "/ledger.jsonl"), content = readLog(path)
        #expect(file.count % Self.step == 0 && file.count > content.count, "the file ends at a step, after its content")
        #expect(file[content.count...].allSatisfy { $0 == 0 }, "the reserve is zero bytes")
        let events = try ledger.verify().events
        try ledger.execute(Self.give)
        #expect(readBytes(path + "/ledger.jsonl").count == file.count, "an append into the reserve leaves the size as it was")
        let grown = readLog(path)
        #expect(grown.count > content.count && grown.starts(with: content))
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.verify().events == events + 1)
        #expect(try reopened.report(for: "zoe").events.count == 1)
    }

    @Test func aCommitPastTheReserveMakesANewOne() throws {
        let (ledger, path) = try makeLedger("reserve-grow")
        defer { removeFolder(path) }
        let first = readBytes(path + "/ledger.jsonl").count
        var commands = 0
        while readBytes(path + "/ledger.jsonl").count == first {
            try ledger.execute(LedgerCommand(subjectID: "s\(commands)", request: .give(feature: "timeline", consents: ["required"])))
            commands += 1
        }
        let file = readBytes(path + "/ledger.jsonl"), content = readLog(path)
        #expect(file.count == first + Self.step, "one step more, after \(commands) commands")
        #expect(content.count > first && content.count < file.count)
        #expect(file[content.count...].allSatisfy { $0 == 0 })
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == 8 + commands)
    }

    /// A write into the reserve that a crash cut short may leave a hole: a page of the commit
    /// still zeros, later ones written. From the first zero byte after the newest head line the
    /// rest is torn; reads ignore it and the next write keeps it aside and cuts it off. A hole in
    /// the head line only leaves a complete commit without its head, which is kept.
    @Test(arguments: [("in the commit's first event line", 40, false), ("in the commit's head line", -60, true)])
    func aHoleInAWriteIntoTheReserveIsATornTail(_ place: String, _ holeAt: Int, _ commitKept: Bool) throws {
        let (ledger, path) = try makeLedger("reserve-hole-\(commitKept)")
        defer { removeFolder(path) }
        let copy = path + "-copy"
        defer { removeFolder(copy) }
        copyFolder(path, to: copy)
        let file = readBytes(path + "/ledger.jsonl"), before = readLog(path)
        let events = try ledger.verify().events
        // The commit as a writer of the same ledger writes it: its events and its head line.
        try Ledger.open(store: FileLedgerStore(directory: copy)).execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "required")))
        let commit = Array(readLog(copy)[before.count...])
        #expect(before.count + commit.count < file.count, "the commit fits in the reserve")
        var written = before + commit + [UInt8](repeating: 0, count: file.count - before.count - commit.count)
        let hole = before.count + (holeAt >= 0 ? holeAt : commit.count + holeAt)
        for i in hole..<(hole + 20) { written[i] = 0 }
        writeBytes(written, to: path + "/ledger.jsonl")

        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let report = try reopened.verify()
        let kept = commitKept ? commit.filter { $0 == 0x0A }.count - 1 : 0
        #expect(report.events == events + kept, "\(place)")
        let end = commitKept ? before.count + commit.count - (commit.count - commit.dropLast().lastIndex(of: 0x0A)! - 1) : before.count
        #expect(report.torn?.offset == UInt64(end), "\(place): torn \(String(describing: report.torn))")
        #expect(readBytes(path + "/ledger.jsonl") == written, "reads change nothing")

        let (_, recovered) = try reopened.execute(Self.give)
        #expect(recovered?.offset == UInt64(end))
        #expect(readBytes("\(path)/recovered/torn-at-\(end).bin") == Array(written[end..<(before.count + commit.count)]), "the torn bytes kept aside")
        let after = try Ledger.open(store: FileLedgerStore(directory: path)).verify()
        #expect(after.events == events + kept + 1 && after.torn == nil)
        #expect(!readLog(path).contains(0), "no zero byte left in the content")
    }
}

/// A file's type, identity and size as the store asks them, without the file's times
/// (``PosixFile/Identity``): the same answers as `lstat`, `stat` and `fstat` give.
@Suite struct FileIdentityTests {
    @Test(arguments: ["a file", "a folder", "a symbolic link", "a FIFO", "nothing"])
    func identityAnswersAsStatDoes(_ kind: String) throws {
        let folder = LedgerPropertyTests.folder("identity-\(kind.split(separator: " ").last!)")
        defer { removeFolder(folder) }
        _ = system("mkdir -p '\(folder)' && printf 'twelve bytes' > '\(folder)/file'")
        let path = folder + "/thing"
        switch kind {
        case "a file": _ = system("printf 'abc' > '\(path)'")
        case "a folder": _ = system("mkdir '\(path)'")
        case "a symbolic link": _ = system("ln -s file '\(path)'")
        case "a FIFO": _ = system("mkfifo '\(path)'")
        default: break
        }
        var own = stat(), followed = stat()
        let ownFound = lstat(path, &own) == 0, followedFound = stat(path, &followed) == 0
        let identity = PosixFile.identity(of: path), throughLinks = PosixFile.identity(of: path, followingLinks: true)
        #expect((identity != nil) == ownFound && (throughLinks != nil) == followedFound)
        if let identity {
            #expect(identity.mode == own.st_mode && identity.inode == UInt64(own.st_ino))
            #expect(identity.isRegularFile == ((own.st_mode & S_IFMT) == S_IFREG))
        }
        if let throughLinks { #expect(throughLinks.mode == followed.st_mode && throughLinks.inode == UInt64(followed.st_ino)) }
        #expect(PosixFile.isRegularFile(path) == (kind == "a file"))
    }

    @Test func aDescriptorsIdentityAndSizeAreItsFiles() throws {
        let folder = LedgerPropertyTests.folder("identity-descriptor")
        defer { removeFolder(folder) }
        _ = system("mkdir -p '\(folder)' && printf 'twelve bytes' > '\(folder)/file'")
        let file = try PosixFile.regular(folder + "/file", flags: O_RDWR)
        #expect(file.identity() == PosixFile.identity(of: folder + "/file"))
        #expect(try file.size() == 12)
        try file.write(Array("and more".utf8), at: 12)
        #expect(try file.size() == 20)
        // The size moved the descriptor's own offset; reads and writes name theirs.
        #expect(try file.read(at: 0, count: 6) == Array("twelve".utf8))
        var st = stat()
        #expect(fstat(file.fd, &st) == 0 && UInt64(st.st_size) == 20)
    }
}
