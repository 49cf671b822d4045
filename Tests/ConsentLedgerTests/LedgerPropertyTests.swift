import ConsentDomain
import PropertyBased
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

/// Random command histories over several subjects, replayed and compared (the ledger's properties
/// 1, 2, 3 and 5; property 4 is in TamperTests). Ledgers live in /dev/shm when it exists, where
/// fsync is cheap, so a hundred histories run in seconds; durability has its own tests.
@Suite struct LedgerPropertyTests {
    static let subjects = ["s0", "s1", "s2", "s3"]
    static let features = ["medication-management", "timeline"]
    static let consents = ["required", "optional-a", "optional-b"]

    /// Decodes one random number into a command, so shrinking a failing history shrinks numbers.
    static func command(_ n: Int) -> LedgerCommand {
        let subject = subjects[n % 4]
        let feature = features[(n / 4) % 2]
        if (n / 8) % 3 == 2 {
            return LedgerCommand(subjectID: subject, request: .revoke(feature: feature, consent: consents[(n / 24) % 3]))
        }
        let mask = (n / 24) % 7 + 1
        let chosen = consents.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element)
        return LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: chosen))
    }

    static let histories = Gen.int(in: 0...167).array(of: 1...40)

    /// The reference model, written from the rules file without the domain's code: per subject
    /// and feature, the set of given consents.
    struct ReferenceModel {
        var given: [String: [String: Set<String>]] = [:]

        /// Applies a command; false when the rules refuse it.
        mutating func apply(_ command: LedgerCommand) -> Bool {
            var features = given[command.subjectID] ?? [:]
            switch command.request {
            case .give(let feature, let codes):
                var set = features[feature] ?? []
                if !set.contains("required") && !codes.contains("required") { return false }
                set.formUnion(codes)
                features[feature] = set
            case .revoke(let feature, let codes):
                var set = features[feature] ?? []
                for code in codes {
                    if code == "required", set.contains("required") { set = [] } else { set.remove(code) }
                }
                features[feature] = set
            }
            given[command.subjectID] = features
            return true
        }

        func consents(_ subject: String, _ feature: String) -> Set<String> { given[subject]?[feature] ?? [] }
    }

    static func givenSet(_ listing: ConsentListing, _ feature: String) -> Set<String> {
        Set(listing.features.first { $0.feature.key == feature }!.consents.filter(\.isGiven).map(\.definition.code))
    }

    static func folder(_ label: String) -> String {
        let base = PosixFile.kind(of: "/dev/shm") == .directory ? "/dev/shm" : "/tmp"
        return base + "/consentledger-\(label)-\(Sodium().randomBytes(6).map { String($0, radix: 16) }.joined())"
    }

    @Test func randomHistoriesMatchTheReferenceModelAndReplay() async throws {
        await propertyCheck(count: 60, input: Self.histories) { numbers in
            let path = Self.folder("prop")
            defer { removeFolder(path) }
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "prop", keyProtection: .insecurePlaintext)
            var model = ReferenceModel()
            var live: [String: ConsentListing] = [:]
            for n in numbers {
                let command = Self.command(n)
                let allowed = model.apply(command)
                do {
                    let (result, _) = try ledger.execute(command)
                    #expect(allowed, "the ledger accepted what the model refuses: \(command)")
                    live[command.subjectID] = result.listing
                    // Property 2: no optional consent is given while its feature's required one is withheld.
                    for line in result.listing.features where !line.isActive {
                        #expect(!line.consents.contains { $0.isGiven }, "optional given while inactive after \(command)")
                    }
                } catch ConsentError.ruleViolation {
                    #expect(!allowed, "the ledger refused what the model allows: \(command)")
                }
            }
            // Property 3: the live state equals the reference model.
            for subject in Self.subjects {
                let listing = live[subject] ?? ConsentListing(state: SubjectState(), catalog: SeedCatalog.catalog)
                for feature in Self.features {
                    #expect(Self.givenSet(listing, feature) == model.consents(subject, feature), "\(subject) \(feature)")
                }
            }
            // Properties 1 and 5: close, reopen and replay from disk: the same state, twice.
            for _ in 0..<2 {
                let reopened = try Ledger.open(store: FileLedgerStore(directory: path))
                let replay = try reopened.loadAll()
                for subject in Self.subjects {
                    let fromDisk = try reopened.report(for: subject).listing
                    #expect(fromDisk == (live[subject] ?? ConsentListing(state: SubjectState(), catalog: SeedCatalog.catalog)))
                    if let ref = try reopened.subjectRef(for: subject) {
                        #expect(ConsentListing(state: replay.state(of: ref), catalog: SeedCatalog.catalog) == fromDisk)
                    }
                }
                #expect(try reopened.verify().events == replay.eventCount)
            }
        }
    }

    /// A state as of time T equals replaying exactly the events up to T.
    @Test func stateAsOfATimeEqualsReplayingThePrefix() async throws {
        await propertyCheck(count: 25, input: Self.histories) { numbers in
            let path = Self.folder("asof")
            defer { removeFolder(path) }
            let clock = SteppingClock(step: 60_000)
            let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "asof", keyProtection: .insecurePlaintext, clock: clock.clock)
            var models: [(Timestamp, ReferenceModel)] = []
            var model = ReferenceModel()
            for n in numbers {
                let command = Self.command(n)
                if model.apply(command) {
                    let (result, _) = try ledger.execute(command)
                    if let at = result.events.first?.at { models.append((at, model)) }
                } else {
                    _ = try? ledger.execute(command)
                }
            }
            for (at, expected) in models {
                for subject in Self.subjects {
                    let listing = try ledger.report(for: subject, asOf: at).listing
                    for feature in Self.features {
                        #expect(Self.givenSet(listing, feature) == expected.consents(subject, feature))
                    }
                }
            }
        }
    }

    /// A batch of commands gives the same state as the same commands one by one.
    @Test func batchedCommandsEqualSingleCommands() async throws {
        await propertyCheck(count: 20, input: Self.histories) { numbers in
            let one = Self.folder("one"), batch = Self.folder("batch")
            defer { removeFolder(one, batch) }
            let a = try Ledger.create(store: FileLedgerStore(directory: one), catalog: SeedCatalog.catalog, name: "p", keyProtection: .insecurePlaintext)
            let b = try Ledger.create(store: FileLedgerStore(directory: batch), catalog: SeedCatalog.catalog, name: "p", keyProtection: .insecurePlaintext)
            var model = ReferenceModel()
            var accepted: [LedgerCommand] = []
            for n in numbers where model.apply(Self.command(n)) {
                accepted.append(Self.command(n))
                try a.execute(Self.command(n))
            }
            try b.loadAll()
            try b.execute(accepted)
            for subject in Self.subjects {
                let (la, lb) = (try a.report(for: subject).listing, try b.report(for: subject).listing)
                for feature in Self.features {
                    #expect(Self.givenSet(la, feature) == Self.givenSet(lb, feature))
                }
            }
            #expect(try a.verify().events == b.verify().events)
        }
    }
}
