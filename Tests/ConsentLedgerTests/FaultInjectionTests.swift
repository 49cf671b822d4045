import ConsentDomain
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage

/// A disk that fails: the file storage's own calls (`open`, `write`, a sync, `rename`) fail one
/// at a time, at every point of a command's path, with EIO, ENOSPC or EROFS
/// (``FileFaults``). Each time the command either reports the failure or succeeds (a failure
/// after the log's sync leaves the derived files behind, which is a warning); nothing it
/// acknowledged is lost, the command is wholly in the log or wholly absent, a new process opens
/// and verifies the ledger, and the next write succeeds.
@Suite(.serialized) struct FaultInjectionTests {
    enum Scenario: String, CaseIterable, Sendable {
        /// A command for a subject the ledger has not met: its record, then its events.
        case newSubject
        /// A command for a known subject: the events alone.
        case knownSubject
        /// An erasure: its event, then the subject file rewritten and renamed into place.
        case erasure

        func run(_ ledger: Ledger) throws {
            switch self {
            case .newSubject: try ledger.execute(LedgerCommand(subjectID: "nora", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
            case .knownSubject: try ledger.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "required")))
            case .erasure: _ = try ledger.erase("bob", actor: "dpo")
            }
        }
    }

    static func base(_ label: String) throws -> String {
        let path = LedgerPropertyTests.folder("faults-\(label)")
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "test.example/faults", keyProtection: .insecurePlaintext, clock: SteppingClock().clock)
        try ledger.execute(Array(seedScenario))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "medication-management", consents: ["required"])))
        return path
    }

    /// The number of events in the log a new process finds (`verify`), after finishing an
    /// erasure that a failure cut short (its event is in, the record not yet destroyed: verify
    /// says to run the erasure again, which is the documented way out).
    static func eventsAfterRecovery(_ path: String, scenario: Scenario) throws -> Int {
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path))
        do {
            return try ledger.verify().events
        } catch ConsentError.integrity(let failure) where scenario == .erasure && failure.problem.contains("the erasure was cut short") {
            _ = try ledger.erase("bob", actor: "dpo")
            return try ledger.verify().events
        }
    }

    @Test(arguments: Scenario.allCases, [FileFaults.Call.open, .write, .sync, .rename])
    func everyFailureAlongACommandsPathIsReportedAndRecovered(_ scenario: Scenario, _ call: FileFaults.Call) throws {
        let base = try Self.base("\(scenario.rawValue)-\(call)")
        let work = base + "-work"
        defer { removeFolder(base, work) }
        let before = try Ledger.open(store: FileLedgerStore(directory: base)).verify().events
        // How many such calls the command makes when nothing fails.
        copyFolder(base, to: work)
        let counting = try Ledger.open(store: FileLedgerStore(directory: work))
        FileFaults.arm(folder: work, calls: [call], failAt: 0, code: EIO)
        try scenario.run(counting)
        let total = FileFaults.disarm().calls
        let after = try Self.eventsAfterRecovery(work, scenario: scenario)
        #expect(after > before)
        #expect(total > 0 || call == .rename, "the path makes no \(call) call")
        var reported = 0
        for n in 0..<total {
            let code = [EIO, ENOSPC, EROFS][n % 3]
            copyFolder(base, to: work)
            let ledger = try Ledger.open(store: FileLedgerStore(directory: work))
            FileFaults.arm(folder: work, calls: [call], failAt: n + 1, code: code)
            let outcome = Result { try scenario.run(ledger) }
            let (_, failed) = FileFaults.disarm()
            #expect(failed, "\(call) \(n + 1) of \(total) was not reached")
            if case .failure(let error) = outcome {
                reported += 1
                guard case ConsentError.storage(let message) = error else {
                    Issue.record("\(call) \(n + 1): not a storage error: \(error)")
                    continue
                }
                #expect(message.contains(work), "the message names the folder: \(message)")
            }
            // A new process: the command is wholly in or wholly out, and acknowledged means in.
            let events = try Self.eventsAfterRecovery(work, scenario: scenario)
            if case .success = outcome {
                #expect(events == after, "\(call) \(n + 1) of \(total): acknowledged, then \(events) events, not \(after)")
            } else {
                #expect(events == before || events == after, "\(call) \(n + 1) of \(total): \(events) events, neither \(before) nor \(after)")
                // A command that failed before its events were durable changed nothing: no
                // half-written line in the log, no record of a subject without events.
                if events == before {
                    for name in ["ledger.jsonl", "subjects.jsonl"] {
                        // The content: a write cut back takes the log's reserve out with it.
                        #expect(withoutReserve(readBytes(work + "/" + name)) == withoutReserve(readBytes(base + "/" + name)), "\(call) \(n + 1) of \(total) changed \(name)")
                    }
                }
            }
            // And it goes on.
            let next = try Ledger.open(store: FileLedgerStore(directory: work))
            try next.execute(LedgerCommand(subjectID: "otto", request: .give(feature: "timeline", consents: ["required"])))
            #expect(try next.verify().events == events + 1)
        }
        #expect(total == 0 || reported > 0, "no \(call) failure was reported")
        print("fault injection: \(scenario) \(call): \(total) points, \(reported) reported as failures, the others acknowledged")
    }
}
