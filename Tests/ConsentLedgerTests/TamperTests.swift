import ConsentDomain
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Every single-byte change, deleted line, swapped pair of lines and truncation of a valid
/// ledger's log is caught by `verify`, or leaves the very same ledger: a change that only cuts or
/// removes head lines (as a crash may leave them) loses no event and changes no answer. The
/// ledger has a checkpoint of its whole log recorded, as one issued to anyone does, so a cut of
/// whole commits (with their heads) is caught against it. Exhaustive on the vectors' tiny ledger,
/// random on random ledgers.
@Suite struct TamperTests {
    static let tiny = packageRoot + "/Spec/vectors/tiny-ledger"

    /// Copies a ledger once per test, with a checkpoint of its whole log recorded; each case
    /// replaces its log and verifies it (verify writes nothing, so the copy can be reused).
    final class Scratch {
        let path = LedgerPropertyTests.folder("tamper")
        let events: Int

        init(copying base: String = TamperTests.tiny) {
            copyFolder(base, to: path)
            let ledger = try! Ledger.open(store: FileLedgerStore(directory: path))
            _ = try! ledger.signedCheckpoint()
            events = try! ledger.verify().events
        }

        /// Caught, or the same ledger.
        func holds(_ outcome: VerifyOutcome) -> Bool { TamperTests.isCaught(outcome) || outcome == .ok(events: events) }

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
        let log = readLog(Self.tiny)
        #expect(scratch.outcome(ofLog: log) == .ok(events: 10))
        var missed: [Int] = []
        for offset in log.indices {
            // Two changes per byte: a flipped low bit and a byte of another class.
            for replacement in [log[offset] ^ 0x01, log[offset] == 0x7B ? 0x30 : 0x7B] {
                var changed = log
                changed[offset] = replacement
                if !scratch.holds(scratch.outcome(ofLog: changed)) { missed.append(offset) }
            }
        }
        #expect(missed.isEmpty, "byte changes at these offsets were not caught: \(missed.prefix(20))")
    }

    @Test func everyTruncationIsCaught() {
        let scratch = Scratch()
        let log = readLog(Self.tiny)
        let missed = (0..<log.count).filter { !scratch.holds(scratch.outcome(ofLog: Array(log[..<$0]))) }
        #expect(missed.isEmpty, "truncations at these lengths were not caught: \(missed.prefix(20))")
    }

    @Test func everyDeletedLineAndSwappedPairIsCaught() {
        let scratch = Scratch()
        let original = lines(of: readLog(Self.tiny))
        for i in original.indices {
            var deleted = original
            deleted.remove(at: i)
            #expect(scratch.holds(scratch.outcome(ofLog: Array(deleted.joined()))), "deleting line \(i + 1)")
            for j in original.indices where j > i {
                var swapped = original
                swapped.swapAt(i, j)
                #expect(scratch.holds(scratch.outcome(ofLog: Array(swapped.joined()))), "swapping lines \(i + 1) and \(j + 1)")
            }
        }
    }

    /// The same on random ledgers: a random history, then one random change of each kind.
    @Test func randomChangesToRandomLedgersAreCaught() async throws {
        let input = zip(LedgerPropertyTests.histories, Gen.int(in: 0...1_000_000), Gen.int(in: 1...255))
        await propertyCheck(count: 40, input: input) { numbers, position, delta in
            let path = LedgerPropertyTests.folder("rand")
            defer { removeFolder(path) }
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "r", keyProtection: .insecurePlaintext)
            for n in numbers { _ = try? ledger.execute(LedgerPropertyTests.command(n)) }
            let log = readLog(path)
            let scratch = Scratch(copying: path)
            let all = lines(of: log)
            var flipped = log
            flipped[position % log.count] = flipped[position % log.count] &+ UInt8(delta)
            #expect(scratch.holds(scratch.outcome(ofLog: flipped)), "byte \(position % log.count) + \(delta)")
            #expect(scratch.holds(scratch.outcome(ofLog: Array(log[..<(position % log.count)]))), "truncated to \(position % log.count)")
            if all.count > 1 {
                var deleted = all
                deleted.remove(at: position % all.count)
                #expect(scratch.holds(scratch.outcome(ofLog: Array(deleted.joined()))))
                var swapped = all
                let i = position % all.count, j = (position / 7) % all.count
                if i != j {
                    swapped.swapAt(i, j)
                    #expect(scratch.holds(scratch.outcome(ofLog: Array(swapped.joined()))))
                }
            }
        }
    }
}
