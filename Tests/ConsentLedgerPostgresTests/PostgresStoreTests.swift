import Foundation
#if PostgreSQL
import ConsentDomain
import ConsentLedgerPostgres
import PostgresNIO
import PropertyBased
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// The real server these tests run against: `make test` starts a throwaway cluster
/// (scripts/with-test-postgres.sh) and passes its URL. Without it the tests fail, loudly.
enum TestDatabase {
    struct Missing: Error, CustomStringConvertible {
        var description: String {
            "CONSENTLEDGER_TEST_POSTGRES_URL is not set: these tests need a real PostgreSQL server. Run `make test`, which starts a throwaway one with scripts/with-test-postgres.sh."
        }
    }

    static func url() throws -> String {
        guard let value = getenv("CONSENTLEDGER_TEST_POSTGRES_URL").flatMap({ String(validatingCString: $0) }), !value.isEmpty else {
            throw Missing()
        }
        return value
    }

    /// A store at `url` whose writers keep the signing key in a key file of its own (the
    /// database never holds it).
    static func store(_ url: String) throws -> PostgresLedgerStore {
        try PostgresLedgerStore(url: url, keyStore: FileKeyStore(path: keyPath(url)))
    }

    /// The key file of the ledger at `url`, one per schema.
    static func keyPath(_ url: String) -> String {
        "/tmp/consentledger-pg-key-" + Sodium().sha256(Array(url.utf8)).hex.prefix(24) + ".key"
    }

    /// A URL naming a schema no test has used.
    static func freshURL(_ label: String) throws -> String {
        let base = try url()
        let suffix = Sodium().randomBytes(6).map { String($0, radix: 16) }.joined()
        return base + (base.contains("?") ? "&" : "?") + "schema=t_\(label)_\(suffix)"
    }

    /// Runs SQL as the test user, outside the store: to tamper, to inspect, to break things.
    @discardableResult
    static func sql(_ url: String, _ statement: String) async throws -> PostgresQueryResult {
        let connection = try await connect(url)
        do {
            let result = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: Logger(label: "test")).get()
            try await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// A connection of the test user's own, outside the store.
    static func connect(_ url: String) async throws -> PostgresConnection {
        let address = try PostgresLedgerAddress(url: url)
        let configuration = PostgresConnection.Configuration(
            host: address.host, port: address.port, username: address.username, password: address.password, database: address.database, tls: .disable)
        return try await PostgresConnection.connect(configuration: configuration, id: 1, logger: Logger(label: "test"))
    }

    /// A digest of every table of the ledger's schema, to show that nothing changed.
    static func fingerprint(_ url: String) async throws -> [String] {
        let schema = try PostgresLedgerAddress(url: url).schema
        var tables: [String] = []
        for table in ["ledger", "events", "head", "line_index", "tree_hashes", "subjects", "checkpoints", "schema_migrations"] {
            let row = try await sql(url, "SELECT count(*)::bigint, coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM \(schema).\(table) t").first!
            let (count, digest) = try row.decode((Int64, String).self)
            tables.append("\(table) \(count) \(digest)")
        }
        return tables
    }
}

/// Every line of a store's log, without newlines.
func allLines(_ store: any LedgerStore) throws -> [[UInt8]] { try store.snapshot().entries }

/// A ledger with the vectors' key, a stepping clock and counting randomness: the same commands
/// give the same bytes in any store.
func deterministicLedger(_ store: any LedgerStore) throws -> Ledger {
    try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "pg.test/same", keyProtection: .insecurePlaintext, signer: SodiumSigner(seed: vectorSeed)!,
                      clock: SteppingClock().clock, random: CountingRandom().source)
}

@Suite(.serialized) struct PostgresStoreTests {
    static let subjects = ["s0", "s1", "s2"]
    static let features = ["medication-management", "timeline"]
    static let consents = ["required", "optional-a", "optional-b"]

    static func command(_ n: Int) -> LedgerCommand {
        let subject = subjects[n % 3]
        let feature = features[(n / 3) % 2]
        if (n / 6) % 3 == 2 { return LedgerCommand(subjectID: subject, request: .revoke(feature: feature, consent: consents[(n / 18) % 3])) }
        let mask = (n / 18) % 7 + 1
        return LedgerCommand(subjectID: subject, request: .give(feature: feature, consents: consents.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element)))
    }

    // MARK: - Addresses

    @Test func postgresURLsAreParsedAndBadOnesExplained() throws {
        let a = try PostgresLedgerAddress(url: "postgres://alice:s%40cret@db.example:6543/consents?schema=clinic_7&sslmode=verify-full")
        #expect(a.host == "db.example" && a.port == 6543 && a.username == "alice" && a.password == "s@cret" && a.database == "consents")
        #expect(a.schema == "clinic_7" && a.tlsMode == .verifyFull)
        #expect(!a.description.contains("s@cret") && !a.description.contains("cret"), "messages never show the password")
        let b = try PostgresLedgerAddress(url: "postgresql://bob@[::1]/ledger")
        #expect(b.host == "::1" && b.port == 5432 && b.schema == "consentledger" && b.tlsMode == .verifyFull && b.password == nil, "certificates are checked by default")
        let c = try PostgresLedgerAddress(url: "postgres://u@db.example/d?sslmode=verify-ca&sslrootcert=/etc/ca.pem")
        #expect(c.tlsMode == .verifyCA && c.rootCertificates == "/etc/ca.pem")
        #expect(try PostgresLedgerAddress(url: "postgres://u@db.example/d?sslmode=require-unverified").isUnverified)
        let bad: [(String, String)] = [
            ("postgres://host/db", "no USER@"),
            ("postgres://u@h:99999/db", "port"),
            ("postgres://u@h/", "no database"),
            ("postgres://u@h/db?schema=Robert%27);DROP", "schema"),
            ("postgres://u@h/db?sslmode=maybe", "sslmode"),
            // libpq's modes that check nothing, under names that do not say so.
            ("postgres://u@h/db?sslmode=require", "does not check the server's certificate"),
            ("postgres://u@h/db?sslmode=prefer", "does not check the server's certificate"),
            ("postgres://u@h/db?colour=blue", "unknown parameter"),
            ("postgres://u:p%zz@h/db", "password"),
            ("postgres://u@h/db?schema=pg_catalog", "pg_"),
            // Regression: a password holding an unescaped @ was half shown in the message.
            ("postgres://u:p@ss@h/db?schema=Bad", "schema"),
        ]
        for (url, problem) in bad {
            #expect {
                _ = try PostgresLedgerAddress(url: url)
            } throws: { error in
                "\(error)".contains(problem) && !"\(error)".contains("p%zz") && !"\(error)".contains("ss@")
            }
        }
    }

    /// The server's certificate is checked by default (the test server's is signed by a private
    /// CA that $PGSSLROOTCERT names, for the name "localhost"): a certificate from another CA is
    /// refused, verify-full needs a host name, verify-ca checks the chain only, and only an
    /// explicit require-unverified connects without any check.
    @Test func theServerCertificateIsCheckedUnlessAskedNotTo() throws {
        guard let otherCA = getenv("CONSENTLEDGER_TEST_POSTGRES_OTHER_CA").map({ String(cString: $0) }) else { throw TestDatabase.Missing() }
        let url = try TestDatabase.freshURL("tls")
        let byAddress = url.replacingOccurrences(of: "@localhost:", with: "@127.0.0.1:")
        #expect(byAddress != url, "the test server is reached by name")
        /// "connected" when the server answered (there is no ledger in the fresh schema).
        func outcome(_ url: String) -> String {
            do {
                _ = try Ledger.open(store: TestDatabase.store(url))
                return "opened"
            } catch ConsentError.notFound(.ledger, _) {
                return "connected"
            } catch ConsentError.invalidRequest(let message) {
                return "refused: " + message
            } catch {
                return "failed: \(error)"
            }
        }
        #expect(outcome(url) == "connected", "verify-full by default, with the CA from $PGSSLROOTCERT")
        #expect(outcome(url + "&sslmode=verify-full") == "connected")
        #expect(outcome(url + "&sslrootcert=" + otherCA).hasPrefix("failed: "), "a certificate from another CA")
        #expect(outcome(byAddress).contains("give the host by the name its certificate holds"))
        #expect(outcome(byAddress + "&sslmode=verify-ca") == "connected")
        #expect(outcome(byAddress + "&sslmode=verify-ca&sslrootcert=" + otherCA).hasPrefix("failed: "))
        #expect(outcome(url + "&sslmode=require-unverified&sslrootcert=" + otherCA) == "connected", "nothing checked, as asked")
        #expect(outcome(url + "&sslrootcert=/no/such/ca.pem").contains("sslrootcert /no/such/ca.pem: cannot read PEM certificates"))
    }

    /// Regression: schema names that are SQL keywords work (the schema is quoted in SQL).
    @Test func aSchemaNamedLikeAKeywordWorks() throws {
        let url = try TestDatabase.url() + "?schema=user"
        let ledger: Ledger
        do {
            ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/user", keyProtection: .insecurePlaintext)
        } catch ConsentError.alreadyExists {
            ledger = try Ledger.open(store: try TestDatabase.store(url))
        }
        try ledger.execute(LedgerCommand(subjectID: "u\(Sodium().randomBytes(4).map(String.init).joined())", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events >= 2)
    }

    /// The storage conformance checks that the memory and file storages pass.
    @Test(arguments: StorageConformance.allCases)
    func conformance(_ check: StorageConformance) throws {
        try check.run { try TestDatabase.store(try TestDatabase.freshURL("conformance")) }
    }

    // MARK: - The same ledger as the file store

    /// The PostgreSQL store is a translator like the file store: the same commands with the same
    /// key, clock and randomness give the same lines, line index, tree, salts and checkpoints.
    @Test func randomHistoriesGiveTheSameBytesAsTheFileStore() async throws {
        _ = try TestDatabase.url()
        await propertyCheck(count: 12, input: Gen.int(in: 0...125).array(of: 1...20)) { numbers in
            let folder = TemporaryFolder("pg-same")
            defer { folder.remove() }
            let fileStore = FileLedgerStore(directory: folder.path + "/ledger")
            let pgStore = try TestDatabase.store(try TestDatabase.freshURL("same"))
            let onFile = try deterministicLedger(fileStore)
            let onPostgres = try deterministicLedger(pgStore)
            for n in numbers {
                let command = Self.command(n)
                let a = Result { try onFile.execute(command).result.listing }
                let b = Result { try onPostgres.execute(command).result.listing }
                switch (a, b) {
                case (.success(let x), .success(let y)): #expect(x == y)
                case (.failure(let x), .failure(let y)): #expect("\(x)" == "\(y)")
                default: Issue.record("the stores disagree on \(command): \(a) vs \(b)")
                }
            }
            #expect(try onFile.signedCheckpoint().note == onPostgres.signedCheckpoint().note)
            #expect(try fileStore.snapshot() == pgStore.snapshot())
            #expect(try Ledger.open(store: pgStore).verify().head == onFile.verify().head)
        }
    }

    // MARK: - Migration

    /// After an erasure no row of any table, and no byte of the subjects table's files (heap and
    /// index, read from the server's data directory), holds the id or the salt: the row is
    /// deleted and the table rewritten (VACUUM FULL), so no dead row version keeps them.
    @Test func anErasureLeavesNoTraceInAnyTableOrTheTablesFiles() async throws {
        let url = try TestDatabase.freshURL("erase")
        let store = try TestDatabase.store(url)
        let ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "pg.example/erase", keyProtection: .insecurePlaintext)
        let id = "erase-me-7f3a9c"
        // The evidence reference names the person: the events table must hold it only sealed.
        let reference = "consent form of \(id), scanned at the front desk"
        try ledger.execute(LedgerCommand(subjectID: id, request: .give(feature: "timeline", consents: ["required"]), evidence: GrantEvidence(channel: .paper, reference: reference)))
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let salt = try #require(try ledger.salt(of: id))
        let subjectKey = SubjectKey(id: SubjectID(id), salt: salt, hasher: Sodium()).bytes
        let schema = try PostgresLedgerAddress(url: url).schema
        func tableFiles() async throws -> [UInt8] {
            // What the server holds in memory reaches the files at a checkpoint.
            try await TestDatabase.sql(url, "CHECKPOINT")
            var bytes: [UInt8] = []
            for relation in ["\(schema).subjects", "\(schema).subjects_pkey"] {
                let rows = try await TestDatabase.sql(url, "SELECT pg_read_binary_file(pg_relation_filepath('\(relation)'))")
                for row in rows { bytes += (try row.decode(ByteBuffer.self)).readableBytesView }
            }
            return bytes
        }
        func everyRow() async throws -> [UInt8] {
            var text = ""
            let tables = try await TestDatabase.sql(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = '\(schema)'").map { try $0.decode(String.self) }
            for table in tables {
                for row in try await TestDatabase.sql(url, "SELECT t::text FROM \(schema).\(table) t") { text += try row.decode(String.self) + "\n" }
            }
            return Array(text.utf8)
        }
        func holds(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
            needle.count <= haystack.count && (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
        }
        // The scan finds the record while it is there (so it can fail).
        let foundBefore = holds(try await tableFiles(), Array(id.utf8))
        #expect(foundBefore, "the scan finds the record while it is there")
        // A transaction that took its snapshot before the erasure, and ends a little later: VACUUM
        // would keep the dead row for it, so the erasure waits for it before purging.
        let address = try PostgresLedgerAddress(url: url)
        let reader = try await TestDatabase.connect(url)
        _ = try await reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: Logger(label: "test")).get()
        _ = try await reader.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(schema).events"), logger: Logger(label: "test")).get()
        let ended = Mutex(false)
        // Ended from the connection's event loop: the erasure below blocks this test's thread,
        // and a task would need one of the cooperative pool's few threads, which other tests
        // may be blocking too.
        reader.eventLoop.scheduleTask(in: .milliseconds(1500)) {
            reader.query("COMMIT", logger: Logger(label: "test")).whenComplete { _ in
                ended.withLock { $0 = true }
                _ = reader.close() as EventLoopFuture<Void>
            }
        }
        let receipt = try ledger.erase(id, actor: "dpo", reason: "request 7")
        #expect(receipt.appended)
        #expect(ended.withLock { $0 }, "the purge waited for the older transaction")
        let files = try await tableFiles(), rows = try await everyRow()
        for (name, trace) in [("id", Array(id.utf8)), ("salt", salt), ("salt in hex", Array(Hex.encode(salt).utf8)), ("key", subjectKey), ("key in hex", Array(Hex.encode(subjectKey).utf8)), ("evidence reference", Array(reference.utf8))] {
            let inFiles = holds(files, trace), inRows = holds(rows, trace)
            #expect(!inFiles, "the subjects table's files hold the erased subject's \(name)")
            #expect(!inRows, "a row holds the erased subject's \(name)")
        }
        let bobStays = holds(try await tableFiles(), Array("bob".utf8))
        #expect(bobStays, "the other records stay")
        #expect(try ledger.verify().events == 4)
        #expect(try Ledger.open(store: try TestDatabase.store(url)).subjectRef(for: id) == nil)
    }

    @Test func migrateFileToPostgresAndBackKeepsEveryByte() throws {
        let folder = TemporaryFolder("pg-migrate")
        defer { folder.remove() }
        let original = FileLedgerStore(directory: folder.path + "/original")
        let ledger = try deterministicLedger(original)
        for n in [0, 3, 1, 4, 40, 7, 19, 2, 5, 60] { _ = try? ledger.execute(Self.command(n)) }
        let early = try ledger.signedCheckpoint()
        let changed = try Catalog(features: SeedCatalog.catalog.features.map { f in
            Feature(code: f.code, key: f.key, names: f.names, consents: f.consents.map { c in
                ConsentDefinition(code: c.code, names: c.names, isRequired: c.isRequired, link: c.link, version: f.key == "timeline" && c.isRequired ? "2.0" : c.version)
            })
        })
        try ledger.publish(changed)
        _ = try? ledger.execute(Self.command(9))
        let late = try ledger.signedCheckpoint()

        let url = try TestDatabase.freshURL("migrate")
        let postgres = try TestDatabase.store(url)
        let there = try LedgerCopy.copy(from: original, to: postgres)
        let back = FileLedgerStore(directory: folder.path + "/back")
        let again = try LedgerCopy.copy(from: postgres, to: back)
        #expect(there == again)
        #expect(there.checkpoints == 2)
        // The same bytes, file for file; the salts file may list subjects in another order, and
        // the log's head lines are the copy's own (one per part it was written in), so the line
        // index's offsets differ too.
        for name in ["catalog.json", "public.key", "secret.key", "tree.hashes", "checkpoints.jsonl"] {
            #expect(readBytes(original.directory + "/" + name) == readBytes(back.directory + "/" + name), "\(name) differs after the round trip")
        }
        #expect(eventLines(of: readLog(original.directory)) == eventLines(of: readLog(back.directory)))
        #expect(newestHead(original.directory) == newestHead(back.directory), "the same signed head")
        #expect(try original.readSubjectRecords() == back.readSubjectRecords())
        // Checkpoints signed before the move still prove consistency with the copy.
        let copy = try Ledger.open(store: postgres)
        #expect(try copy.signedCheckpoint().note == late.note)
        _ = try copy.proveConsistency(from: early.note)
        #expect(try copy.issuedCheckpoints().map(\.note) == [early.note, late.note])
        // Nothing is copied over an existing ledger.
        #expect(throws: ConsentError.self) { try LedgerCopy.copy(from: original, to: TestDatabase.store(url)) }
    }

    /// The PostgreSQL rows are caches like the files: `line_index` rows pointed at another
    /// subject change no answer, and a changed `subject_map` row is an integrity error.
    @Test func derivedRowsDecideNothing() async throws {
        let url = try TestDatabase.freshURL("derived_rows")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/derived", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        try ledger.execute(LedgerCommand(subjectID: "p2", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "p1", request: .revoke(feature: "timeline", consent: "required")))
        let truth = try ledger.report(for: "p1")
        #expect(truth.listing.activeFeatures.isEmpty)
        try await TestDatabase.sql(url, "UPDATE \(schema).line_index SET subject = (SELECT subject FROM \(schema).line_index WHERE seq = 3) WHERE seq IN (4, 5)")
        let reopened = try Ledger.open(store: TestDatabase.store(url))
        #expect(try reopened.report(for: "p1").listing == truth.listing)
        #expect(throws: ConsentError.self) {
            try reopened.execute(LedgerCommand(subjectID: "p1", request: .give(feature: "timeline", consents: ["optional-b"])))
        }
        // Every leaf of the map now claims seq 1.
        try await TestDatabase.sql(url, "UPDATE \(schema).subject_map SET record = overlay(record placing '\\x0000000000000001'::bytea from 25 for 8) WHERE get_byte(record, 0) = 1")
        let tampered = try Ledger.open(store: TestDatabase.store(url))
        #expect {
            _ = try tampered.report(for: "p1")
        } throws: { error in
            guard case ConsentError.integrity(let failure) = error else { return false }
            return failure.problem.contains("subject_map")
        }
    }

    // MARK: - Tampered rows

    /// One edit to one derived or side row, as someone without the key could make it, decoded
    /// from random numbers: which table, which row, what change.
    static func tamper(_ url: String, schema: String, table: Int, row: Int) async throws -> String {
        let edits: [(String, String)] = [
            ("line_index", "UPDATE \(schema).line_index SET subject = (SELECT subject FROM \(schema).line_index ORDER BY seq DESC LIMIT 1) WHERE seq = (SELECT seq FROM \(schema).line_index ORDER BY seq OFFSET \(row) % (SELECT count(*) FROM \(schema).line_index) LIMIT 1)"),
            ("line_index", "DELETE FROM \(schema).line_index WHERE seq >= (SELECT max(seq) FROM \(schema).line_index) - \(row % 3)"),
            ("tree_hashes", "UPDATE \(schema).tree_hashes SET hash = overlay(hash placing '\\x00'::bytea from \(1 + row % 32) for 1) WHERE idx = (SELECT idx FROM \(schema).tree_hashes ORDER BY idx OFFSET \(row) % (SELECT count(*) FROM \(schema).tree_hashes) LIMIT 1)"),
            ("tree_hashes", "DELETE FROM \(schema).tree_hashes WHERE idx >= (SELECT max(idx) FROM \(schema).tree_hashes) - \(row % 4)"),
            ("head", "UPDATE \(schema).head SET seq = seq - 1 - \(row % 2)"),
            ("head", "UPDATE \(schema).head SET note = replace(note, substr(note, 1 + length(note) - 30, 1), 'A')"),
            ("subjects", "UPDATE \(schema).subjects SET salt = (SELECT salt FROM \(schema).subjects ORDER BY subject_id DESC LIMIT 1) WHERE subject_id = (SELECT subject_id FROM \(schema).subjects ORDER BY subject_id LIMIT 1)"),
            ("subjects", "DELETE FROM \(schema).subjects WHERE subject_id = (SELECT subject_id FROM \(schema).subjects ORDER BY subject_id OFFSET \(row) % greatest(1, (SELECT count(*) FROM \(schema).subjects)) LIMIT 1)"),
            ("subject_map", "UPDATE \(schema).subject_map SET record = overlay(record placing '\\x07'::bytea from \(1 + row % 88) for 1) WHERE idx = (SELECT idx FROM \(schema).subject_map ORDER BY idx OFFSET \(row) % (SELECT count(*) FROM \(schema).subject_map) LIMIT 1)"),
            ("checkpoints", "UPDATE \(schema).checkpoints SET size = size + 1"),
        ]
        let (name, statement) = edits[table % edits.count]
        try await TestDatabase.sql(url, statement)
        return "\(name): edit \(table % edits.count), row \(row)"
    }

    /// The PostgreSQL rows are caches and side data like the files: after a random edit to one
    /// of them, every read answers what a full replay of the events answers or fails with an
    /// integrity error, and a write either appends events that replay under the rules or fails.
    @Test func anEditToDerivedRowsNeverChangesAnAnswerOrLetsARuleBreak() async throws {
        _ = try TestDatabase.url()
        let input = zip(Gen.int(in: 0...125).array(of: 2...12), Gen.int(in: 0...9), Gen.int(in: 0...1000), Gen.int(in: 0...125))
        await propertyCheck(count: 16, input: input) { numbers, table, row, write in
            let url = try TestDatabase.freshURL("tamper")
            let schema = try PostgresLedgerAddress(url: url).schema
            let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/tamper-prop", keyProtection: .insecurePlaintext)
            for n in numbers { _ = try? ledger.execute(Self.command(n)) }
            _ = try ledger.signedCheckpoint()
            let truth = try Ledger.open(store: TestDatabase.store(url)).loadAll()
            var refs: [String: SubjectRef] = [:]
            for subject in Self.subjects { refs[subject] = try ledger.subjectRef(for: subject) }
            let edit = try await Self.tamper(url, schema: schema, table: table, row: row)
            let reopened: Ledger
            do {
                reopened = try Ledger.open(store: TestDatabase.store(url))
            } catch ConsentError.integrity {
                return
            }
            expectReadsMatchReplayOrFail(reopened, truth: truth, subjects: Self.subjects, refs: refs, edit: edit, recordEdit: "subjects") {
                (try? Ledger.open(store: TestDatabase.store(url)).verify()) == nil
            }
            let command = Self.command(write)
            if refs[command.subjectID] != nil, (try? reopened.subjectRef(for: command.subjectID)) == .some(nil) { return }
            do {
                try reopened.execute(command)
                // Whatever was appended replays under the rules (replay re-checks every rule).
                _ = try Ledger.open(store: TestDatabase.store(url)).loadAll()
            } catch ConsentError.ruleViolation, ConsentError.integrity {
            } catch {
                Issue.record("\(edit): the write failed with \(error), not a rule or integrity error")
            }
        }
    }

    // MARK: - Schema

    @Test func schemaIsVersionedAndEventsAreAppendOnly() async throws {
        let url = try TestDatabase.freshURL("schema")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/schema", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let versions = try await TestDatabase.sql(url, "SELECT version FROM \(schema).schema_migrations ORDER BY version").map { try $0.decode(Int32.self) }
        #expect(versions == [1, 2, 3, 4, 5, 6, 7])
        // A head row from version 1 has no note (an unsigned head): it still opens and
        // verifies, and the next write signs one.
        try await TestDatabase.sql(url, "UPDATE \(schema).head SET note = NULL")
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 2)
        try Ledger.open(store: TestDatabase.store(url)).execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        let note = try await TestDatabase.sql(url, "SELECT note FROM \(schema).head").map { try $0.decode(String?.self) }
        let text = try #require(note.first ?? nil)
        let signed = try #require(RecordedHead.parse(text)?.signed)
        #expect(signed.checkpoint.size == 3)
        for statement in ["UPDATE \(schema).events SET line = line WHERE seq = 1", "DELETE FROM \(schema).events WHERE seq = 1", "TRUNCATE \(schema).events"] {
            await #expect(throws: (any Error).self, "\(statement) must be refused") { try await TestDatabase.sql(url, statement) }
        }
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 3)
        // A schema from a newer version is refused, not guessed at.
        try await TestDatabase.sql(url, "INSERT INTO \(schema).schema_migrations (version, description) VALUES (99, 'from the future')")
        #expect {
            _ = try Ledger.open(store: TestDatabase.store(url))
        } throws: { error in
            guard case ConsentError.storage(let message) = error else { return false }
            return message.contains("schema version 99") && message.contains("upgrade")
        }
        // No ledger at all: not found, with the command that creates one.
        #expect {
            _ = try Ledger.open(store: TestDatabase.store(try TestDatabase.freshURL("none")))
        } throws: { error in
            guard case ConsentError.notFound(.ledger, let message) = error else { return false }
            return message.contains("consentctl init --store")
        }
    }

    // MARK: - Tampering

    @Test func tamperedRowsAreFoundByVerify() async throws {
        let url = try TestDatabase.freshURL("tamper")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/tamper", keyProtection: .insecurePlaintext)
        for n in [0, 1, 2, 3, 4, 5] { _ = try? ledger.execute(Self.command(n)) }
        let events = try ledger.verify().events
        #expect(events >= 6)
        try await TestDatabase.sql(url, "ALTER TABLE \(schema).events DISABLE TRIGGER events_append_only")
        func failure() -> IntegrityFailure? {
            do {
                _ = try Ledger.open(store: TestDatabase.store(url)).verify()
                return nil
            } catch ConsentError.integrity(let failure) {
                return failure
            } catch {
                Issue.record("expected an integrity failure, got \(error)")
                return nil
            }
        }
        // One byte of line 3's signature.
        try await TestDatabase.sql(url, "CREATE TABLE \(schema).saved AS SELECT * FROM \(schema).events")
        try await TestDatabase.sql(url, "UPDATE \(schema).events SET line = overlay(line placing (CASE WHEN get_byte(line, length(line) - 5) = 48 THEN '\\x31' ELSE '\\x30' END)::bytea from length(line) - 4 for 1) WHERE seq = 2")
        #expect(failure().map { $0.line == 3 && $0.problem.contains("signature") } == true)
        // A row removed from the middle.
        try await TestDatabase.sql(url, "UPDATE \(schema).events e SET line = s.line FROM \(schema).saved s WHERE e.seq = s.seq")
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == events)
        try await TestDatabase.sql(url, "DELETE FROM \(schema).events WHERE seq = 3")
        #expect(failure()?.line == 4)
        // The newest rows removed: the head shows that acknowledged events are missing.
        try await TestDatabase.sql(url, "INSERT INTO \(schema).events SELECT * FROM \(schema).saved WHERE seq = 3")
        try await TestDatabase.sql(url, "DELETE FROM \(schema).events WHERE seq >= \(events - 2)")
        #expect(failure()?.problem.contains("acknowledged events are missing") == true)
    }

    // MARK: - Transactions

    /// A serialization failure that the server reports (SQLSTATE 40001, as a SERIALIZABLE
    /// transaction that lost to another gets) was a storage error, HTTP 503; it is a conflict
    /// (HTTP 409, try again), and nothing is changed.
    @Test func aSerializationFailureIsAConflict() async throws {
        let url = try TestDatabase.freshURL("serialization")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/serialization", keyProtection: .insecurePlaintext)
        let before = try await TestDatabase.fingerprint(url)
        try await TestDatabase.sql(url, """
            CREATE FUNCTION \(schema).lose_race() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'could not serialize access due to concurrent update' USING ERRCODE = '40001'; END $$
            """)
        try await TestDatabase.sql(url, "CREATE TRIGGER lose_race BEFORE INSERT ON \(schema).events FOR EACH ROW EXECUTE FUNCTION \(schema).lose_race()")
        #expect {
            try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        } throws: { error in
            guard case ConsentError.conflict(let message) = error else { return false }
            return message.contains("SQLSTATE 40001")
        }
        #expect(try await TestDatabase.fingerprint(url) == before)
        try await TestDatabase.sql(url, "DROP TRIGGER lose_race ON \(schema).events")
        #expect(try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"]))).result.events.count == 1)
    }

    /// A statement that fails inside the write transaction aborts it. The command must be
    /// reported as failed with the server's reason, leave nothing behind, and the ledger must
    /// not remember events that were never committed.
    @Test func aFailedTransactionIsReportedAndForgotten() async throws {
        let url = try TestDatabase.freshURL("rollback")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/rollback", keyProtection: .insecurePlaintext)
        _ = try ledger.loadAll()
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let before = try await TestDatabase.fingerprint(url)
        try await TestDatabase.sql(url, """
            CREATE FUNCTION \(schema).break_head() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full (simulated)'; END $$
            """)
        try await TestDatabase.sql(url, "CREATE TRIGGER break_head BEFORE UPDATE ON \(schema).head FOR EACH ROW EXECUTE FUNCTION \(schema).break_head()")
        #expect {
            try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        } throws: { error in
            guard case ConsentError.storage(let message) = error else { return false }
            return message.contains("disk full (simulated)")
        }
        #expect(try await TestDatabase.fingerprint(url) == before, "a failed command leaves every table as it was")
        try await TestDatabase.sql(url, "DROP TRIGGER break_head ON \(schema).head")
        let (result, _) = try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(result.events.map(\.seq) == [2], "the next command follows the last committed event")
        #expect(try ledger.report(for: "bob").events.count == 1)
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 3)
    }

    @Test func aRefusedCommandChangesNoRow() async throws {
        let url = try TestDatabase.freshURL("refused")
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/refused", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let before = try await TestDatabase.fingerprint(url)
        let refused: [LedgerCommand] = [
            LedgerCommand(subjectID: "carol", request: .give(feature: "timeline", consents: ["optional-a"])),
            LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["no-such-consent"])),
            LedgerCommand(subjectID: "alice", request: .give(feature: "no-such-feature", consents: ["required"])),
            LedgerCommand(subjectID: "", request: .give(feature: "timeline", consents: ["required"])),
        ]
        for command in refused {
            #expect(throws: ConsentError.self) { try ledger.execute(command) }
        }
        #expect(try await TestDatabase.fingerprint(url) == before)
    }

    // MARK: - Concurrency in one process

    /// Several ledgers on one schema, written from several threads at once: one chain, no gaps,
    /// every acknowledged command present. (The four-process test is in ConsentctlTests.)
    @Test func concurrentWritersInOneProcessKeepOneChain() async throws {
        let url = try TestDatabase.freshURL("threads")
        _ = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/threads", keyProtection: .insecurePlaintext)
        let acknowledged = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for writer in 0..<4 {
                group.addTask {
                    let manager = try await ConsentManager.open(store: try TestDatabase.store(url))
                    var seqs: [UInt64] = []
                    for i in 0..<25 {
                        let subject = "w\(writer)-\(i % 5)"
                        _ = try await manager.activate(["required"], of: "timeline", for: subject)
                        let history = try await manager.history(of: subject)
                        seqs.append(history.last!.seq)
                        _ = try await manager.revoke("required", of: "timeline", for: subject)
                        seqs.append(try await manager.history(of: subject).last!.seq)
                    }
                    return seqs
                }
            }
            var all: [UInt64] = []
            for try await seqs in group { all += seqs }
            return all
        }
        #expect(acknowledged.count == 200)
        #expect(Set(acknowledged) == Set(1...200), "every command got its own sequence number, with no gap")
        let report = try Ledger.open(store: TestDatabase.store(url)).verify()
        #expect(report.events == 201 && report.head.seq == 200)
    }

    // MARK: - Round trips

    /// A writer that committed last writes its next command in one statement, a transaction of
    /// its own (`append_commit`, which checks the head under the lock); a new subject costs one
    /// lookup more. Counted at the store, which sends every statement.
    @Test func aWriterThatCommittedLastWritesACommandInOneRoundTrip() throws {
        let url = try TestDatabase.freshURL("trips")
        let store = try TestDatabase.store(url)
        let ledger = try Ledger.create(store: store, catalog: SeedCatalog.catalog, name: "pg.test/trips", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        var before = store.statementsSent
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "optional-a")))
        #expect(store.statementsSent - before == 1, "an existing subject: the commit alone")
        before = store.statementsSent
        try ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
        #expect(store.statementsSent - before == 2, "a new subject: its lookup and the commit")
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 5)
    }

    /// Another writer (another process) moved the head since this writer's last commit, and
    /// changed what the next command's rule check depends on. The commit that expected the old
    /// head writes nothing; the command is decided again under the lock, on the real state, and
    /// refused; the next one follows the other writer's event.
    @Test func aWriterWhoseHeadMovedDecidesAgainUnderTheLock() throws {
        let url = try TestDatabase.freshURL("moved")
        let first = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/moved", keyProtection: .insecurePlaintext)
        try first.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let second = try Ledger.open(store: TestDatabase.store(url))
        try second.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "required")))
        // On what `first` remembers, the feature is active and an optional consent may be given
        // alone; on the log, it is inactive, which forbids it.
        #expect {
            try first.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        } throws: { error in
            guard case ConsentError.ruleViolation = error else { return false }
            return true
        }
        let (result, _) = try first.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        #expect(result.events.map(\.seq) == [3])
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 4)
    }

    /// A command that appends nothing (a consent already given, on what this writer remembers)
    /// was decided on the remembered head as much as one that appends: it stands only if the
    /// head is still that one. Here another writer withdrew the consent meanwhile, so the grant
    /// must be appended, not answered with "already given".
    @Test func aCommandThatAppendsNothingIsCheckedAgainstTheHeadToo() throws {
        let url = try TestDatabase.freshURL("noop")
        let first = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/noop", keyProtection: .insecurePlaintext)
        try first.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required", "optional-a"])))
        let second = try Ledger.open(store: TestDatabase.store(url))
        try second.execute(LedgerCommand(subjectID: "alice", request: .revoke(feature: "timeline", consent: "optional-a")))
        let (result, _) = try first.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        #expect(result.events.count == 1, "the grant is appended: the consent was withdrawn")
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 5)
    }

    /// The connection of a writer dies while its commit is in flight (the server ends the
    /// backend): the writer asks the server, on another connection, whether the commit was made,
    /// and says so; nothing is appended twice, and the next command goes on.
    @Test func aWriterWhoseConnectionDiesMidCommitFindsOutWhetherItWasMade() async throws {
        let url = try TestDatabase.freshURL("lost")
        let schema = try PostgresLedgerAddress(url: url).schema
        let ledger = try Ledger.create(store: try TestDatabase.store(url), catalog: SeedCatalog.catalog, name: "pg.test/lost", keyProtection: .insecurePlaintext)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        try await TestDatabase.sql(url, "CREATE FUNCTION \(schema).slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$")
        try await TestDatabase.sql(url, "CREATE TRIGGER slow BEFORE INSERT ON \(schema).events FOR EACH ROW EXECUTE FUNCTION \(schema).slow()")
        let killer = try await TestDatabase.connect(url)
        // From the connection's event loop: the command below blocks this test's thread.
        killer.eventLoop.scheduleTask(in: .seconds(1)) {
            // Every connection of this ledger's store, idle or not (as a restart would): the
            // writer's question must get through on a new one.
            killer.query(PostgresQuery(unsafeSQL: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%\(schema)%' AND pid <> pg_backend_pid()"), logger: Logger(label: "test")).whenComplete { _ in
                _ = killer.close() as EventLoopFuture<Void>
            }
        }
        #expect {
            try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        } throws: { error in
            guard case ConsentError.storage(let message) = error else { return false }
            return message.contains("nothing was appended")
        }
        try await TestDatabase.sql(url, "DROP TRIGGER slow ON \(schema).events")
        #expect(try Ledger.open(store: TestDatabase.store(url)).verify().events == 2)
        let (result, _) = try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        #expect(result.events.map(\.seq) == [2])
    }
}
#endif
