import LedgerFormat
import LedgerStorage
import TransparencyLog
import ConsentDomain
import Dispatch

/// The consent logic the patient app calls (rule R9), for a backend that embeds the ledger.
///
/// Every method is `async` and runs the ledger's blocking file work on threads of the manager's
/// own (up to 64 at once), never on the caller's executor. The one exception is a read of
/// current consents that the storage can start without waiting (no writer holds a folder's
/// lock, ``Ledger/currentListingWithoutWaiting(for:)``): it runs on the caller's thread, since
/// handing it to a thread and back cost more than the read. Every call that changes consents
/// answers with the subject's updated consents. One manager may be shared by any number of
/// tasks; writes are serialised by the ledger's lock, also against other processes using the
/// same folder or PostgreSQL schema, and writes that arrive together share a commit and its
/// sync (group commit, see `Ledger.execute(_:)`).
///
/// ```swift
/// let consents = try await ConsentManager.open(directory: "/var/lib/consents")
/// let after = try await consents.activate(["required", "optional-a"], of: "timeline", for: "patient-42")
/// ```
public final class ConsentManager: Sendable {
    /// The ledger underneath, for what this API does not cover.
    public let ledger: Ledger
    /// Each call that waits (for the disk, the lock, a shared commit) has a thread of its own.
    private let workers = BlockingWorkers(maximum: 64)

    /// Wraps an open ledger.
    public init(ledger: Ledger) {
        self.ledger = ledger
    }

    /// Opens the ledger in a folder (the embedded file store). With `passphrase`, an encrypted
    /// signing key is unlocked once, here, so that no write asks again.
    public static func open(directory: String, passphrase: PassphraseSource? = nil) async throws(ConsentError) -> ConsentManager {
        try await open(store: FileLedgerStore(directory: directory), passphrase: passphrase)
    }

    /// Opens the ledger in any store, for example a `PostgresLedgerStore` from the
    /// ConsentLedgerPostgres library. With `passphrase`, the signing key is unlocked here, once.
    public static func open(store: any LedgerStore, passphrase: PassphraseSource? = nil) async throws(ConsentError) -> ConsentManager {
        let ledger = try await run(on: DispatchQueue.global()) {
            let ledger = try Ledger.open(store: store, passphrase: passphrase)
            if passphrase != nil { try ledger.unlock() }
            return ledger
        }
        return ConsentManager(ledger: ledger)
    }

    /// Creates a ledger in a new folder with a catalogue (the seed's by default).
    public static func create(directory: String, catalog: Catalog = SeedCatalog.catalog, name: String, keyProtection: KeyProtection) async throws(ConsentError) -> ConsentManager {
        try await create(store: FileLedgerStore(directory: directory), catalog: catalog, name: name, keyProtection: keyProtection)
    }

    /// Creates a ledger in any store that holds none yet.
    public static func create(store: any LedgerStore, catalog: Catalog = SeedCatalog.catalog, name: String, keyProtection: KeyProtection) async throws(ConsentError) -> ConsentManager {
        let ledger = try await run(on: DispatchQueue.global()) { try Ledger.create(store: store, catalog: catalog, name: name, keyProtection: keyProtection) }
        return ConsentManager(ledger: ledger)
    }

    private static func run<T: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> T) async throws(ConsentError) -> T {
        try await run(submit: { job in queue.async(execute: job) }, body)
    }

    private static func run<T: Sendable>(submit: (@escaping @Sendable () -> Void) -> Void, _ body: @escaping @Sendable () throws -> T) async throws(ConsentError) -> T {
        let result: Result<T, ConsentError> = await withCheckedContinuation { continuation in
            submit {
                do {
                    continuation.resume(returning: .success(try body()))
                } catch let error as ConsentError {
                    continuation.resume(returning: .failure(error))
                } catch {
                    continuation.resume(returning: .failure(.storage("\(error)")))
                }
            }
        }
        return try result.get()
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws(ConsentError) -> T {
        try await Self.run(submit: workers.submit, body)
    }

    /// The subject's current consents: read here when that cannot wait, else on a worker.
    private func currentListing(for subject: String) async throws(ConsentError) -> ConsentListing {
        let ledger = self.ledger
        do {
            if let listing = try ledger.currentListingWithoutWaiting(for: subject) { return listing }
        } catch let error as ConsentError {
            throw error
        } catch {
            throw .storage("\(error)")
        }
        return try await run { try ledger.currentListing(for: subject) }
    }

    // MARK: - Reading

    /// The consents of one feature, by key (`timeline`) or code (`2`), required first (R7, R9).
    public func consents(of feature: String, for subject: String) async throws(ConsentError) -> FeatureLine {
        let listing = try await currentListing(for: subject)
        guard let line = listing.features.first(where: { $0.feature.key == feature || String($0.feature.code) == feature }) else {
            throw ConsentError.invalidRequest("unknown feature '\(feature)'")
        }
        return line
    }

    /// The consents of the subject's active features (R3, R9).
    public func activeConsents(for subject: String) async throws(ConsentError) -> [FeatureLine] {
        try await state(of: subject).filter(\.isActive)
    }

    /// Every feature's consents, now or as they were at a past time (replayed from the log).
    public func state(of subject: String, at time: Timestamp? = nil) async throws(ConsentError) -> [FeatureLine] {
        let ledger = self.ledger
        if time == nil { return try await currentListing(for: subject).features }
        return try await run { try ledger.report(for: subject, asOf: time).listing.features }
    }

    /// The subject's history, oldest first, up to a time if given.
    public func history(of subject: String, until time: Timestamp? = nil) async throws(ConsentError) -> [HistoryEntry] {
        let ledger = self.ledger
        return try await run { try ledger.report(for: subject, asOf: time).events.compactMap(HistoryEntry.init) }
    }

    // MARK: - Changing consents

    /// Gives a set of consents of one feature: activates it when they include its required
    /// consents (R2, R5), or gives withheld ones of an active feature (R6). Answers with every
    /// feature's consents after the change (R9).
    public func activate(_ consents: [String], of feature: String, for subject: String, actor: String = "self") async throws(ConsentError) -> [FeatureLine] {
        let ledger = self.ledger
        return try await run {
            try ledger.execute(LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents), actor: actor)).result.listing.features
        }
    }

    /// Withdraws one consent; a required one takes the feature's optional ones with it (R4).
    /// Answers with every feature's consents after the change (R9).
    public func revoke(_ consent: String, of feature: String, for subject: String, actor: String = "self") async throws(ConsentError) -> [FeatureLine] {
        try await revoke([consent], of: feature, for: subject, actor: actor)
    }

    /// Withdraws several consents of one feature in one atomic command: the named optional ones
    /// first, as the subject's own withdrawals, then the required one with its cascade (R4).
    /// Answers with every feature's consents after the change (R9).
    public func revoke(_ consents: [String], of feature: String, for subject: String, actor: String = "self") async throws(ConsentError) -> [FeatureLine] {
        let ledger = self.ledger
        return try await run {
            try ledger.execute(LedgerCommand(subjectID: subject, request: .revoke(feature: feature, consents: consents), actor: actor)).result.listing.features
        }
    }

    /// Erases a subject (GDPR Art. 17): a signed `subject.erased` event, then the subject's
    /// record destroyed, so nothing links the person to their events any more; every proof stays
    /// valid. Answers with the receipt for the requester's records.
    public func erase(_ subject: String, actor: String, reason: String? = nil) async throws(ConsentError) -> ErasureReceipt {
        let ledger = self.ledger
        return try await run { try ledger.erase(subject, actor: actor, reason: reason) }
    }

    // MARK: - Proof

    /// The current signed checkpoint (C2SP tlog-checkpoint as a signed note).
    public func checkpoint() async throws(ConsentError) -> (checkpoint: Checkpoint, note: String) {
        let ledger = self.ledger
        return try await run { try ledger.signedCheckpoint() }
    }

    /// An offline-verifiable export of one subject (`Spec/export-format.md`).
    public func export(subject: String) async throws(ConsentError) -> AuditExport {
        let ledger = self.ledger
        return try await run { try ledger.exportSubject(subject) }
    }

    /// The verifier key auditors pin.
    public func verifierKey() throws(ConsentError) -> NoteVerifierKey {
        do {
            return try ledger.verifierKey
        } catch let error as ConsentError {
            throw error
        } catch {
            throw .storage("\(error)")
        }
    }
}
