import ConsentDomain
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// A random history, then a random edit to one random derived or side file, made by someone
/// without the key: after it, every read either answers exactly what a full replay of the log
/// answers or fails with an integrity error, and every write either appends an event the rules
/// allow or fails. Nothing in between.
@Suite struct DerivedTamperPropertyTests {
    static let files = ["lines.idx", "tree.hashes", "head", "subjects.jsonl", "checkpoints.jsonl", "subjects.map"]

    /// One edit, decoded from random numbers: which file, what kind of change, where.
    static func tamper(_ path: String, file: Int, kind: Int, position: Int) -> String {
        let name = files[file % files.count]
        var bytes = readBytes(path + "/" + name)
        guard !bytes.isEmpty else { return "\(name): empty, left alone" }
        let at = position % bytes.count
        switch kind % 5 {
        case 0:
            bytes[at] ^= UInt8(1 << (position % 8))
        case 1:
            bytes.removeLast(min(bytes.count, 1 + position % 64))
        case 2:
            for i in at..<min(bytes.count, at + 32) { bytes[i] = 0 }
        case 3:
            // Swap two aligned 32-byte blocks (whole records of lines.idx and tree.hashes).
            let blocks = bytes.count / 32
            guard blocks >= 2 else { bytes[at] ^= 1; break }
            let (a, b) = (position % blocks, (position / blocks) % blocks)
            for i in 0..<32 { bytes.swapAt(a * 32 + i, b * 32 + i) }
        default:
            // Swap two lines (subject records, checkpoints).
            var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false).map(Array.init)
            guard lines.count >= 3 else { bytes[at] ^= 1; break }
            let n = lines.count - 1
            lines.swapAt(position % n, (position / n) % n)
            bytes = Array(lines.joined(separator: [0x0A]))
        }
        writeBytes(bytes, to: path + "/" + name)
        return "\(name): edit \(kind % 5) at \(at)"
    }

    @Test func anEditToDerivedDataNeverChangesAnAnswerOrLetsARuleBreak() async {
        let input = zip(LedgerPropertyTests.histories, Gen.int(in: 0...5), Gen.int(in: 0...4), Gen.int(in: 0...1_000_000), Gen.int(in: 0...167))
        await propertyCheck(count: 80, input: input) { numbers, file, kind, position, write in
            let path = LedgerPropertyTests.folder("tamper-prop")
            defer { removeFolder(path) }
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "tamper-prop", keyProtection: .insecurePlaintext)
            var model = LedgerPropertyTests.ReferenceModel()
            for n in numbers {
                let command = LedgerPropertyTests.command(n)
                if model.apply(command) { try ledger.execute(command) }
            }
            _ = try ledger.signedCheckpoint()
            // The truth: each subject's consents by a full replay of the log.
            let truth = try Ledger.open(store: FileLedgerStore(directory: path)).loadAll()
            var refs: [String: SubjectRef] = [:]
            for subject in LedgerPropertyTests.subjects { refs[subject] = try ledger.subjectRef(for: subject) }
            let edit = Self.tamper(path, file: file, kind: kind, position: position)

            let reopened: Ledger
            do {
                reopened = try Ledger.open(store: FileLedgerStore(directory: path))
            } catch ConsentError.integrity {
                return
            }
            expectReadsMatchReplayOrFail(reopened, truth: truth, subjects: LedgerPropertyTests.subjects, refs: refs, edit: edit, recordEdit: "subjects.jsonl") {
                if case .failed(.integrity) = verifyFolder(path) { return true }
                return false
            }
            let command = LedgerPropertyTests.command(write)
            let allowed = model.apply(command)
            // A subject whose record was removed or renamed is, to a write as to a read, a
            // subject the ledger does not know (see above; verify has failed already): its
            // write is judged as a new subject's, so it is not compared with the model.
            if refs[command.subjectID] != nil, (try? reopened.subjectRef(for: command.subjectID)) == .some(nil) { return }
            do {
                let (result, _) = try reopened.execute(command)
                #expect(allowed || result.events.isEmpty, "\(edit): a write the rules refuse was appended: \(command)")
                // Whatever was appended replays under the rules.
                _ = try Ledger.open(store: FileLedgerStore(directory: path)).loadAll()
            } catch ConsentError.ruleViolation {
                #expect(!allowed, "\(edit): the rules refused what they allow: \(command)")
            } catch ConsentError.integrity {
            } catch {
                Issue.record("\(edit): the write failed with \(error), not an integrity error")
            }
        }
    }
}
