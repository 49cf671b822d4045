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

/// A large commit's head line is written once more after it, alone, once the commit is durable
/// (`Spec/ledger-format.md`, Writing, step 5): a reader then finds the log's end from that line,
/// not from the whole commit.
@Suite struct RepeatedHeadLineTests {
    /// The log's lines (without their 0x0A) from byte `from` of its content on.
    static func lines(_ path: String, from: Int = 0) -> [[UInt8]] {
        readLog(path)[from...].split(separator: 0x0A, omittingEmptySubsequences: false).dropLast().map(Array.init)
    }

    /// Commands enough for a commit past the threshold (about 90 KB).
    static let bulk = 200

    static func isHeadLine(_ line: [UInt8]) -> Bool { line.starts(with: Array("{\"h".utf8)) }

    /// Commands for `count` new subjects, one event each: about 450 bytes of log apiece.
    static func newSubjects(_ count: Int, from first: Int = 0) -> [LedgerCommand] {
        (first..<(first + count)).map { LedgerCommand(subjectID: "bulk-\($0)", request: .give(feature: "timeline", consents: ["required"])) }
    }

    func makeLedger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        return (ledger, path)
    }

    /// Writes `commands` as one commit (one group of `executeInOrder`).
    func commitInOneGroup(_ ledger: Ledger, _ commands: [LedgerCommand]) throws {
        try ledger.executeInOrder(commands, groupSize: commands.count) { _, _, warning in #expect(warning == nil) }
    }

    @Test func aLargeCommitsHeadLineIsWrittenAgainAloneAndASmallOnesIsNot() throws {
        let (ledger, path) = try makeLedger("head-repeated")
        defer { removeFolder(path) }
        let small = Self.lines(path)
        #expect(zip(small, small.dropFirst()).allSatisfy { !(Self.isHeadLine($0) && Self.isHeadLine($1)) }, "a small commit has one head line")
        let before = readLog(path).count
        try commitInOneGroup(ledger, Self.newSubjects(Self.bulk))
        let commit = Self.lines(path, from: before)
        #expect(readLog(path).count - before > FileLedgerTransaction.headRepeatedAfter)
        #expect(commit.count == Self.bulk + 2 && commit[..<Self.bulk].allSatisfy { !Self.isHeadLine($0) })
        #expect(Self.isHeadLine(commit[Self.bulk]) && commit[Self.bulk + 1] == commit[Self.bulk], "the head line, then the same line again")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let report = try reopened.verify()
        #expect(report.events == 8 + Self.bulk && report.torn == nil)
        #expect(try reopened.report(for: "bulk-\(Self.bulk - 1)").events.count == 1)
        // The next (small) commit has one head line again.
        let grown = readLog(path).count
        try reopened.execute(Self.newSubjects(1, from: Self.bulk))
        let next = Self.lines(path, from: grown)
        #expect(next.count == 2 && !Self.isHeadLine(next[0]) && Self.isHeadLine(next[1]))
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().events == 8 + Self.bulk + 1)
    }

    /// A crash after the commit's sync, during the repeated head line's write, leaves that line
    /// cut short, or with a hole of zeros: a torn tail after the commit, which is kept whole.
    /// Reads change nothing; the next write keeps the torn bytes aside and cuts them.
    @Test(arguments: [("cut short", 50, 0), ("with a hole at its start", 0, 20), ("with a hole inside", 100, 20)])
    func aCrashDuringTheRepeatedHeadLineLosesNothing(_ how: String, _ at: Int, _ hole: Int) throws {
        let (ledger, path) = try makeLedger("head-repeat-torn-\(at)-\(hole)")
        defer { removeFolder(path) }
        try commitInOneGroup(ledger, Self.newSubjects(Self.bulk))
        let content = readLog(path), file = readBytes(path + "/ledger.jsonl")
        let repeated = content.dropLast().lastIndex(of: 0x0A)! + 1
        var written = file
        if hole == 0 {
            for i in (repeated + at)..<content.count { written[i] = 0 }
        } else {
            for i in (repeated + at)..<(repeated + at + hole) { written[i] = 0 }
        }
        writeBytes(written, to: path + "/ledger.jsonl")

        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        let report = try reopened.verify()
        #expect(report.events == 8 + Self.bulk, "\(how): every event of the commit kept")
        #expect(report.torn?.offset == UInt64(repeated), "\(how): torn \(String(describing: report.torn))")
        #expect(try reopened.report(for: "bulk-\(Self.bulk - 1)").events.count == 1)
        #expect(readBytes(path + "/ledger.jsonl") == written, "reads change nothing")

        let (_, recovered) = try reopened.execute(Self.newSubjects(1, from: Self.bulk)[0])
        #expect(recovered?.offset == UInt64(repeated))
        let after = try Ledger.open(store: FileLedgerStore(directory: path)).verify()
        #expect(after.events == 8 + Self.bulk + 1 && after.torn == nil)
        #expect(!readLog(path).contains(0))
    }
}

/// The records file's reserve (`Spec/ledger-format.md`, subjects.jsonl, The reserve): a new
/// subject's record is written over zero bytes kept after the lines, so that its sync leaves the
/// file's size alone; a line holding a zero byte (an append a crash cut short) is skipped.
@Suite struct RecordsReserveTests {
    static let step = Int(FileLedgerTransaction.reserveStep)

    func makeLedger(_ label: String) throws -> (Ledger, String) {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        try ledger.execute(Array(seedScenario))
        return (ledger, path)
    }

    static func give(_ subject: String) -> LedgerCommand {
        LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required"]))
    }

    @Test func aNewSubjectsRecordIsWrittenIntoTheReserve() throws {
        let (ledger, path) = try makeLedger("records-reserve")
        defer { removeFolder(path) }
        let file = readBytes(path + "/subjects.jsonl"), lines = withoutReserve(file)
        let subjects = try ledger.verify().subjects
        #expect(file.count == Self.step && lines.last == 0x0A, "the file ends at a step, after its lines")
        #expect(file[lines.count...].allSatisfy { $0 == 0 })
        try ledger.execute(Self.give("zoe"))
        let after = readBytes(path + "/subjects.jsonl")
        #expect(after.count == file.count, "a record written into the reserve leaves the size as it was")
        #expect(withoutReserve(after).starts(with: lines) && withoutReserve(after).count > lines.count)
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.verify().subjects == subjects + 1)
        #expect(try reopened.report(for: "zoe").events.count == 1)
        #expect(try FileLedgerStore(directory: path).readSubjectRecords().count == subjects + 1)
    }

    /// A record line with a hole of zeros where a page was never written, after the records:
    /// skipped by every reader (the full read, one subject's read, verification), and the
    /// subject it would have been gets a record of its own.
    @Test(arguments: ["a subject with its own record", "the subject of the torn line"])
    func aLineHoldingZeroBytesIsSkipped(_ reader: String) throws {
        let (ledger, path) = try makeLedger("records-torn-\(reader.count)")
        defer { removeFolder(path) }
        let file = readBytes(path + "/subjects.jsonl"), lines = withoutReserve(file)
        let subjects = try ledger.verify().subjects
        let ids = try FileLedgerStore(directory: path).readSubjectRecords().keys.sorted()
        var torn = FileLedgerStore.encodeSubjectLines([(SubjectID("zed"), SubjectRecord(salt: [UInt8](repeating: 7, count: 16), signature: nil))])
        for i in 10..<30 { torn[i] = 0 }
        writeBytes(lines + torn + [UInt8](repeating: 0, count: file.count - lines.count - torn.count), to: path + "/subjects.jsonl")
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
        #expect(try reopened.verify().subjects == subjects)
        #expect(try FileLedgerStore(directory: path).readSubjectRecords().keys.sorted() == ids)
        if reader == "a subject with its own record" {
            #expect(try reopened.report(for: "alice").events.count > 0)
        } else {
            #expect(try reopened.report(for: "zed").events.isEmpty)
            try reopened.execute(Self.give("zed"))
            let again = try Ledger.open(store: FileLedgerStore(directory: path))
            #expect(try again.verify().subjects == subjects + 1)
            #expect(try again.report(for: "zed").events.count == 1)
        }
    }
}

/// A read of 2 MiB or more is made in pieces read at once, one per core: what is read must be
/// what one read gives, the file's end included.
@Suite struct ReadInPartsTests {
    /// (file size, offset, count): below one piece's 1 MiB, two pieces, pieces of odd sizes, a
    /// read that runs past the file's end in its first piece, in its last, and one from past it.
    static let mebibyte = 1 << 20
    static let cases: [(size: Int, offset: Int, count: Int)] = [
        (3 * mebibyte, 0, mebibyte), (3 * mebibyte, 0, 2 * mebibyte), (5 * mebibyte, 7, 4 * mebibyte + 3),
        (3 * mebibyte, 0, 4 * mebibyte), (3 * mebibyte + 5, mebibyte, 4 * mebibyte), (2 * mebibyte, 3 * mebibyte, 2 * mebibyte),
    ]

    @Test(arguments: cases)
    func aReadInPartsGivesWhatOneReadGives(_ case_: (size: Int, offset: Int, count: Int)) throws {
        let folder = TemporaryFolder("parts")
        defer { folder.remove() }
        let path = folder.path + "/file"
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let bytes = (0..<case_.size).map { _ -> UInt8 in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 56)
        }
        writeBytes(bytes, to: path)
        let file = try PosixFile(path: path, flags: O_RDONLY)
        var whole = [UInt8](repeating: 0, count: case_.count + 9)
        var parts = whole
        let once = try file.read(at: UInt64(case_.offset), into: &whole, startingAt: 9, count: case_.count)
        let inParts = try file.readInParts(at: UInt64(case_.offset), into: &parts, startingAt: 9, count: case_.count)
        #expect(once == max(0, min(case_.count, case_.size - case_.offset)))
        #expect(inParts == once)
        #expect(parts[..<(9 + once)] == whole[..<(9 + once)])
    }
}
