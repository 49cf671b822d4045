import ConsentDomain
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Property 4 of issue 2: every single-byte change, deleted line, swapped pair of lines and
/// truncation of a valid ledger is caught by `verify`, or by open for a torn tail. Exhaustive on
/// the vectors' tiny ledger, random on random ledgers.
@Suite struct TamperTests {
    static let tiny = packageRoot + "/Spec/vectors/tiny-ledger"

    /// Copies a ledger once per test; each case replaces its log and verifies it (verify
    /// writes nothing, so the copy can be reused).
    final class Scratch {
        let path = LedgerPropertyTests.folder("tamper")

        init(copying base: String = TamperTests.tiny) { copyFolder(base, to: path) }

        deinit { removeFolder(path) }

        func outcome(ofLog log: [UInt8]) -> VerifyOutcome {
            writeBytes(log, to: path + "/ledger.jsonl")
            return verifyFolder(path)
        }
    }

    static func isCaught(_ outcome: VerifyOutcome) -> Bool {
        if case .failed(.integrity) = outcome { return true }
        return false
    }

    @Test func everySingleByteChangeIsCaught() {
        let scratch = Scratch()
        let log = readBytes(Self.tiny + "/ledger.jsonl")
        #expect(scratch.outcome(ofLog: log) == .ok(events: 10))
        var missed: [Int] = []
        for offset in log.indices {
            // Two changes per byte: a flipped low bit and a byte of another class.
            for replacement in [log[offset] ^ 0x01, log[offset] == 0x7B ? 0x30 : 0x7B] {
                var changed = log
                changed[offset] = replacement
                if !Self.isCaught(scratch.outcome(ofLog: changed)) { missed.append(offset) }
            }
        }
        #expect(missed.isEmpty, "byte changes at these offsets were not caught: \(missed.prefix(20))")
    }

    @Test func everyTruncationIsCaught() {
        let scratch = Scratch()
        let log = readBytes(Self.tiny + "/ledger.jsonl")
        let missed = (0..<log.count).filter { !Self.isCaught(scratch.outcome(ofLog: Array(log[..<$0]))) }
        #expect(missed.isEmpty, "truncations at these lengths were not caught: \(missed.prefix(20))")
    }

    @Test func everyDeletedLineAndSwappedPairIsCaught() {
        let scratch = Scratch()
        let original = lines(of: readBytes(Self.tiny + "/ledger.jsonl"))
        for i in original.indices {
            var deleted = original
            deleted.remove(at: i)
            #expect(Self.isCaught(scratch.outcome(ofLog: Array(deleted.joined()))), "deleting line \(i + 1)")
            for j in original.indices where j > i {
                var swapped = original
                swapped.swapAt(i, j)
                #expect(Self.isCaught(scratch.outcome(ofLog: Array(swapped.joined()))), "swapping lines \(i + 1) and \(j + 1)")
            }
        }
    }

    /// The same on random ledgers: a random history, then one random change of each kind.
    @Test func randomChangesToRandomLedgersAreCaught() async throws {
        let input = zip(LedgerPropertyTests.histories, Gen.int(in: 0...1_000_000), Gen.int(in: 1...255))
        await propertyCheck(count: 40, input: input) { numbers, position, delta in
            let path = LedgerPropertyTests.folder("rand")
            defer { removeFolder(path) }
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "r")
            for n in numbers { _ = try? ledger.execute(LedgerPropertyTests.command(n)) }
            let log = readBytes(path + "/ledger.jsonl")
            let scratch = Scratch(copying: path)
            let all = lines(of: log)
            var flipped = log
            flipped[position % log.count] = flipped[position % log.count] &+ UInt8(delta)
            #expect(Self.isCaught(scratch.outcome(ofLog: flipped)), "byte \(position % log.count) + \(delta)")
            #expect(Self.isCaught(scratch.outcome(ofLog: Array(log[..<(position % log.count)]))), "truncated to \(position % log.count)")
            if all.count > 1 {
                var deleted = all
                deleted.remove(at: position % all.count)
                #expect(Self.isCaught(scratch.outcome(ofLog: Array(deleted.joined()))))
                var swapped = all
                let i = position % all.count, j = (position / 7) % all.count
                if i != j {
                    swapped.swapAt(i, j)
                    #expect(Self.isCaught(scratch.outcome(ofLog: Array(swapped.joined()))))
                }
            }
        }
    }
}
