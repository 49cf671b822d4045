import ConsentDomain
import Foundation
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// `subjects.idx`: a read of one subject finds its line through the index instead of reading every
/// line of `subjects.jsonl`, and no index, however wrong, changes an answer.
@Suite struct SubjectIndexTests {
    static let ids = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "José", "quote\"d", "back\\slash", "😀"]
    static let unknown = ["nobody", "alic", "alice ", "Alice"]

    /// A ledger of `ids`' subjects, each with one event.
    static func ledger(_ label: String, ids: [String] = ids) throws -> String {
        let path = LedgerPropertyTests.folder(label)
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: label, keyProtection: .insecurePlaintext)
        for id in ids { try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        return path
    }

    /// Each id's pseudonym as a process that looks it up first finds it (a store of its own per
    /// id: a store's third lookup keeps the whole file instead), and how many lookups read every
    /// line.
    static func answers(_ path: String, _ ids: [String]) throws -> (refs: [String: String], scans: Int) {
        var refs: [String: String] = [:], scans = 0
        for id in ids {
            let store = FileLedgerStore(directory: path)
            refs[id] = try Ledger.open(store: store).subjectRef(for: id)?.value ?? "none"
            scans += store.subjectCache.scans
        }
        return (refs, scans)
    }

    /// The example of `Spec/ledger-format.md` (`subjects.idx`).
    @Test func theSpecsKeyExample() {
        let key = SubjectIndexFile.key(quotedID: SubjectIndexFile.quoted(SubjectID("alice")))
        #expect(key == 18_317_604_414_582_444_042)
        #expect(key & 63 == 10)
    }

    @Test func aReadOfOneSubjectReadsOneLine() throws {
        let path = try Self.ledger("index-read")
        defer { removeFolder(path) }
        #expect(PosixFile.isRegularFile(path + "/subjects.idx"))
        let (refs, scans) = try Self.answers(path, Self.ids)
        #expect(scans == 0, "every known subject found through the index")
        #expect(Set(refs.values).count == Self.ids.count && !refs.values.contains("none"))
        // An id with no record is never taken from the index: every line is read.
        let (none, unknownScans) = try Self.answers(path, Self.unknown)
        #expect(none.values.allSatisfy { $0 == "none" })
        #expect(unknownScans == Self.unknown.count)
        // The same answers without the index.
        unlink(path + "/subjects.idx")
        #expect(try Self.answers(path, Self.ids).refs == refs)
    }

    /// Damage of every kind to the index, each on a copy of one ledger: the answers for every
    /// subject and for ids without records stay those of the intact ledger (at worst every line
    /// is read), nothing crashes, and a later write puts an index right again.
    @Test func noIndexChangesAnAnswer() async throws {
        let path = try Self.ledger("index-damage")
        defer { removeFolder(path) }
        let all = Self.ids + Self.unknown
        let truth = try Self.answers(path, all).refs
        let intact = readBytes(path + "/subjects.idx")
        let subjects = readBytes(path + "/subjects.jsonl")
        let lineStarts = [0] + subjects.indices.filter { subjects[$0] == 0x0A && $0 + 1 < subjects.count }.map { $0 + 1 }
        let slots = (intact.count - SubjectIndexFile.headerSize) / SubjectIndexFile.slotSize
        let damage = zip(Gen.int(in: 0...5), Gen.int(in: 0...(intact.count - 1)), Gen.int(in: 0...255), Gen.int(in: 0...1_000_000))
        await propertyCheck(count: 40, input: damage) { kind, at, byte, seed in
            var index = intact
            func word(_ value: UInt64, at offset: Int) {
                index.replaceSubrange(offset..<(offset + 8), with: withUnsafeBytes(of: value.littleEndian) { Array($0) })
            }
            switch kind {
            case 0: index[at] = UInt8(byte)                        // one byte changed
            case 1: index = Array(index.prefix(at))                 // cut short
            case 2:                                                 // every entry moved to another line
                for slot in 0..<slots {
                    let offset = SubjectIndexFile.headerSize + slot * SubjectIndexFile.slotSize
                    if index[offset..<(offset + 8)].contains(where: { $0 != 0 }) {
                        word(UInt64(lineStarts[(slot + seed) % lineStarts.count]), at: offset + 8)
                    }
                }
            case 3:                                                 // every key made every id's
                let key = SubjectIndexFile.key(quotedID: SubjectIndexFile.quoted(SubjectID(Self.ids[seed % Self.ids.count])))
                for slot in 0..<slots { word(key, at: SubjectIndexFile.headerSize + slot * SubjectIndexFile.slotSize) }
                for slot in 0..<slots { word(UInt64(lineStarts[(slot + seed) % lineStarts.count] + seed % 3), at: SubjectIndexFile.headerSize + slot * SubjectIndexFile.slotSize + 8) }
            case 4: word([0, 1, 3, 1 << 62, UInt64.max][seed % 5], at: 8)  // a slot count that is no table's
            default: index = (0..<at).map { _ in UInt8(truncatingIfNeeded: seed &* 31 &+ at) }  // not an index
            }
            let copy = LedgerPropertyTests.folder("index-damage-copy")
            defer { removeFolder(copy) }
            copyFolder(path, to: copy)
            writeBytes(index, to: copy + "/subjects.idx")
            #expect((try? Self.answers(copy, all).refs) == truth, "damage \(kind) at \(at)")
            // A write for a new subject: the answers stay the same, and an index that is not one
            // (or is cut short) is written afresh, so that every subject is found through it.
            guard let writer = try? Ledger.open(store: FileLedgerStore(directory: copy)) else { Issue.record("cannot open"); return }
            #expect((try? writer.execute(LedgerCommand(subjectID: "newcomer", request: .give(feature: "timeline", consents: ["required"])))) != nil)
            let after = try? Self.answers(copy, Self.ids + ["newcomer"])
            #expect(after?.refs.filter { Self.ids.contains($0.key) } == truth.filter { Self.ids.contains($0.key) }, "damage \(kind)")
            #expect(after?.refs["newcomer"] != "none")
            if [1, 4, 5].contains(kind) {
                #expect(after?.scans == 0, "damage \(kind): written afresh")
            }
        }
    }

    /// Records appended by a writer that did not update the index (one that crashed between the
    /// two, or an older one), a rewrite of the file (an erasure), and more subjects than the
    /// table holds: each time the next write leaves an index that finds every subject.
    @Test func theIndexFollowsAppendsRewritesAndGrowth() throws {
        let path = try Self.ledger("index-follows", ids: ["a0"])
        defer { removeFolder(path) }
        // Records appended behind the index's back, then a write.
        let stale = readBytes(path + "/subjects.idx")
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        for id in ["a1", "a2"] { try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        writeBytes(stale, to: path + "/subjects.idx")
        #expect(try Self.answers(path, ["a1", "a2"]).scans == 2)
        try Ledger.open(store: FileLedgerStore(directory: path)).execute(LedgerCommand(subjectID: "a3", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try Self.answers(path, ["a0", "a1", "a2", "a3"]).scans == 0)
        // Past half of the table's 64 slots, and an erasure that rewrites subjects.jsonl.
        let grown = (4..<80).map { "a\($0)" }
        for id in grown { try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]))) }
        #expect(readBytes(path + "/subjects.idx").count > SubjectIndexFile.headerSize + 64 * SubjectIndexFile.slotSize)
        _ = try ledger.erase("a1", actor: "dpo")
        let (refs, scans) = try Self.answers(path, ["a0", "a2", "a3"] + grown)
        #expect(scans == 0 && !refs.values.contains("none"))
        #expect(try Self.answers(path, ["a1"]).refs["a1"] == "none")
        #expect(try Ledger.open(store: FileLedgerStore(directory: path)).verify().subjects == 80)
    }

    /// What a read at an index's offset returned, however short (the file cut since its size
    /// was read): a line only when it is whole and the id's; never a crash.
    @Test(arguments: [
        ("", 1, false, false), ("\n", 1, false, false), ("\n{\"id\":\"a\"", 1, false, false),
        ("\n{\"id\":\"a\",\"salt\":\"00\"}", 1, false, false), ("x{\"id\":\"a\",\"salt\":\"00\"}\n", 1, false, false),
        ("\n{\"id\":\"a\",\"salt\":\"00\"}\n", 1, false, true), ("{\"id\":\"a\",\"salt\":\"00\"}\n", 0, true, true),
        ("{\"id\":\"a\",\"salt\":\"00\"}\n", 0, false, false), ("\n{\"id\":\"b\",\"salt\":\"00\"}\n", 1, false, false),
        ("\n{\"id\":\"a\",\"salt\":\"00\"}\n", 40, false, false), ("\n{\"id\":\"a\",\"salt\":\"00\"}\n", -1, false, false),
    ])
    func aLineIsTakenOnlyWhenWholeAndTheIDs(_ text: String, _ start: Int, _ atFileStart: Bool, _ taken: Bool) {
        let needle = Array(#"{"id":"a","salt":""#.utf8)
        let line = SubjectIndexFile.completeLine(in: Array(text.utf8), at: start, atFileStart: atFileStart, startingWith: needle)
        #expect((line != nil) == taken)
        if let line { #expect(Array(line) == Array(#"{"id":"a","salt":"00"}"#.utf8)) }
    }

    /// An erased subject's key leaves the index: overwritten in place (the same file's bytes)
    /// before the index is written afresh without it, and the other keys stay reachable.
    @Test func anErasedKeyIsOverwrittenInPlaceAndTheOthersStayReachable() throws {
        let folder = LedgerPropertyTests.folder("index-erase")
        defer { removeFolder(folder) }
        // Colliding keys: many ids in a table of 64 slots, so chains run through the erased slot.
        let ids = (0..<30).map { "id-\($0)" }
        var lines: [UInt8] = []
        for id in ids { lines += FileLedgerStore.encodeSubjectLines([(SubjectID(id), SubjectRecord(salt: [UInt8](repeating: 1, count: 16), signature: nil))]) }
        #expect(mkdir(folder, 0o700) == 0)
        let path = folder + "/subjects.idx"
        writeBytes(SubjectIndexFile.build(from: lines), to: path)
        let file = try PosixFile.regular(path, flags: O_RDWR)
        let keys = ids.map { SubjectIndexFile.key(quotedID: SubjectIndexFile.quoted(SubjectID($0))) }
        let offsets = keys.map { SubjectIndexFile.offsets(for: $0, in: file) }
        #expect(offsets.allSatisfy { $0.count == 1 })
        #expect(try SubjectIndexFile.erase([keys[7], keys[19]], in: file))
        let bytes = readBytes(path)
        for k in [7, 19] { #expect(!Self.contains(bytes, withUnsafeBytes(of: keys[k].littleEndian) { Array($0) }), "key \(k) left") }
        for (k, key) in keys.enumerated() where k != 7 && k != 19 {
            #expect(SubjectIndexFile.offsets(for: key, in: file) == offsets[k], "id-\(k) still found")
        }
    }

    /// A FIFO, a folder or a link where the index should be: reads and writes go on without it
    /// (a FIFO opened for reading would wait for ever), and nothing outside the folder changes.
    @Test(arguments: ["a FIFO", "a folder", "a symbolic link"])
    func anIndexThatIsNotARegularFileIsNotUsed(_ kind: String) throws {
        let path = try Self.ledger("index-kind", ids: ["alice", "bob"])
        defer { removeFolder(path) }
        let target = path + "/subjects.idx", outside = path + "-outside"
        defer { unlink(outside) }
        writeBytes(Array("outside".utf8), to: outside)
        unlink(target)
        switch kind {
        case "a FIFO": #expect(mkfifo(target, 0o600) == 0)
        case "a folder": #expect(mkdir(target, 0o700) == 0)
        default: #expect(symlink(outside, target) == 0)
        }
        let (refs, _) = try Self.answers(path, ["alice", "bob"])
        #expect(!refs.values.contains("none"))
        try Ledger.open(store: FileLedgerStore(directory: path)).execute(LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["required"])))
        #expect(readBytes(outside) == Array("outside".utf8))
        #expect(try Self.answers(path, ["alice", "carol"]).refs.values.allSatisfy { $0 != "none" })
        if kind == "a folder" { rmdir(target) }
    }

    static func contains(_ bytes: [UInt8], _ needle: [UInt8]) -> Bool {
        guard bytes.count >= needle.count else { return false }
        return (0...(bytes.count - needle.count)).contains { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
