#if PostgreSQL
import ConsentLedger
import ConsentLedgerPostgres
import Foundation
import Testing

/// `consentctl --store postgres://…` end to end, against the server `make test` starts
/// (scripts/with-test-postgres.sh passes its URL in CONSENTLEDGER_TEST_POSTGRES_URL).
@Suite(.serialized) struct PostgresCLITests {
    struct NoServer: Error, CustomStringConvertible {
        var description: String {
            "CONSENTLEDGER_TEST_POSTGRES_URL is not set: these tests need a real PostgreSQL server. Run `make test`, which starts a throwaway one with scripts/with-test-postgres.sh."
        }
    }

    static func freshURL(_ label: String) throws -> String {
        guard let base = ProcessInfo.processInfo.environment["CONSENTLEDGER_TEST_POSTGRES_URL"], !base.isEmpty else { throw NoServer() }
        return base + (base.contains("?") ? "&" : "?") + "schema=cli_\(label)_\(UUID().uuidString.prefix(8).lowercased())"
    }

    @discardableResult
    /// consentctl against the ledger at `url`, whose writers keep the signing key in a key file
    /// of its own (the database never holds it).
    static func ctl(_ url: String, _ arguments: [String]) throws -> ConsentctlTests.Run {
        try ConsentctlTests.run(["--store", url] + arguments, ledger: nil, environment: ["CONSENTCTL_KEY_FILE": keyPath(url)])
    }

    static func keyPath(_ url: String) -> String {
        NSTemporaryDirectory() + "consentctl-pg-key-" + String(UInt64(bitPattern: Int64(url.hashValue)), radix: 16) + ".key"
    }

    /// Everything the store holds, read through the store: to show that a refused command
    /// changed nothing.
    static func fingerprint(_ url: String) throws -> [String] {
        try PostgresLedgerStore(url: url).read { tx in
            let log = try tx.logState()
            let counts = try tx.derivedCounts()
            var parts = ["head \(log.recordedHead)", "size \(log.size)", "\(counts)"]
            try tx.entries(0..<log.size, batchSize: 500, indexedKeys: false) { batch in
                for i in 0..<batch.count { parts.append(String(decoding: batch.entry(i), as: UTF8.self)) }
            }
            try tx.entries(0..<min(log.size, counts.indexed), batchSize: 500, indexedKeys: true) { batch in parts.append("\(batch.indexedKeys ?? [])") }
            parts.append("\(try tx.treeHashes(Array(0..<counts.treeHashes)).map(\.hex))")
            parts.append("\(try (0..<counts.subjectMapRecords).map { try tx.subjectMapRecord($0) })")
            parts.append("\(try tx.subjectRecords().sorted { $0.key < $1.key }.map { "\($0.key.text)=\($0.value)" })")
            parts.append("\(try tx.checkpoints())")
            return parts
        }
    }

    /// Runs SQL with psql (Debian's postgresql client), outside consentctl: to set up what an
    /// older version left behind.
    @discardableResult
    static func psql(_ url: String, _ sql: String) throws -> String {
        let address = try PostgresLedgerAddress(url: url)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        process.arguments = ["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h", address.host, "-p", String(address.port), "-U", address.username, "-d", address.database, "-c", sql]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "psql: \(sql)")
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The database keeps no secret key: a writer without a key file is told where the key must
    /// come from, and a seed an older version left in a table is moved into a key file (sealed
    /// under a passphrase) by `key move-out`, after which the table is gone.
    @Test func theDatabaseKeepsNoKeyAndAnOldOneIsMovedOut() throws {
        let url = try Self.freshURL("keys")
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let schema = try PostgresLedgerAddress(url: url).schema
        #expect(try Self.ctl(url, ["init", "--insecure-plaintext-key"]).status == 0)
        #expect(try Self.psql(url, "SELECT to_regclass('\(schema).signing_key') IS NULL") == "t", "a new schema has no key table")
        let keyless = try ConsentctlTests.run(["--store", url, "give", "--subject", "a", "--feature", "timeline", "--consent", "required"], ledger: nil)
        #expect(keyless.status == 66 && keyless.stderr.contains("keeps no signing key: writers load it from a key file (consentctl --key-file FILE)"), "\(keyless.stderr)")
        #expect(try ConsentctlTests.run(["--store", url, "status", "--subject", "a"], ledger: nil).status == 0, "reads need no key")

        // What an older version left: the seed in a table, and no key file.
        let seed = try String(contentsOfFile: Self.keyPath(url), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        try Self.psql(url, "CREATE TABLE \(schema).signing_key (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seed bytea NOT NULL); INSERT INTO \(schema).signing_key (seed) VALUES (decode('\(seed)', 'hex'))")
        try FileManager.default.removeItem(atPath: Self.keyPath(url))
        let warned = try ConsentctlTests.run(["--store", url, "status", "--subject", "a"], ledger: nil)
        #expect(warned.status == 0 && warned.stderr.contains("still keeps the secret signing key in table \(schema).signing_key"), "\(warned.stderr)")

        let keyFile = dir + "/ledger.key"
        let moved = try ConsentctlTests.run(["--store", url, "--key-file", keyFile, "key", "move-out", "--format", "json"], ledger: nil, environment: ["CONSENTCTL_PASSPHRASE": "a passphrase for the moved key"])
        #expect(moved.status == 0, "\(moved.stderr)")
        // The output has exactly the members Spec/schemas/key-move-out.schema.json requires.
        let schemaURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Spec/schemas/key-move-out.schema.json")
        let moveOutSchema = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: schemaURL)) as? [String: Any])
        let output = try ConsentctlTests.json(moved.stdout)
        #expect(Set(output.keys) == Set(moveOutSchema["required"] as? [String] ?? []) && output["key"] as? String == keyFile && output["from"] as? String == "\(schema).signing_key")
        #expect(try Self.psql(url, "SELECT to_regclass('\(schema).signing_key') IS NULL") == "t", "the table is gone")
        let file = try String(contentsOfFile: keyFile, encoding: .utf8)
        #expect(file.hasPrefix("{") && !file.contains(seed), "sealed, not the seed")
        let give = try ConsentctlTests.run(["--store", url, "--key-file", keyFile, "give", "--subject", "a", "--feature", "timeline", "--consent", "required"], ledger: nil,
                                           environment: ["CONSENTCTL_PASSPHRASE": "a passphrase for the moved key"])
        #expect(give.status == 0 && !give.stderr.contains("warning"), "\(give.stderr)")
        #expect(try ConsentctlTests.run(["--store", url, "verify"], ledger: nil).status == 0)
        // No table holds the secret any more, in any form (pg_dump writes bytea as \x and hex).
        let dump = Process()
        dump.executableURL = URL(fileURLWithPath: "/usr/bin/pg_dump")
        let address = try PostgresLedgerAddress(url: url)
        dump.arguments = ["-h", address.host, "-p", String(address.port), "-U", address.username, "-n", schema, address.database]
        let dumped = Pipe()
        dump.standardOutput = dumped
        try dump.run()
        let tables = String(decoding: dumped.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        dump.waitUntilExit()
        #expect(dump.terminationStatus == 0 && tables.contains("CREATE TABLE"), "pg_dump of schema \(schema)")
        #expect(!tables.lowercased().contains(seed.lowercased()), "the seed is in no table")
        let again = try ConsentctlTests.run(["--store", url, "--key-file", dir + "/other.key", "key", "move-out", "--insecure-plaintext-key"], ledger: nil)
        #expect(again.status == 66 && again.stderr.contains("nothing to move"), "\(again.stderr)")
    }

    /// An unverified TLS connection works only when asked for by name, and says what it risks.
    @Test func anUnverifiedConnectionIsAskedForAndWarnedAbout() throws {
        let url = try Self.freshURL("unverified")
        let run = try Self.ctl(url + "&sslmode=require-unverified", ["init", "--insecure-plaintext-key"])
        #expect(run.status == 0 && run.stderr.contains("warning: sslmode=require-unverified: the server's certificate is not checked"), "\(run.stderr)")
        let refused = try Self.ctl(url + "&sslmode=require", ["verify"])
        #expect(refused.status == 64 && refused.stderr.contains("sslmode=require does not check the server's certificate"), "\(refused.stderr)")
    }

    @Test func everyCommandRunsAgainstPostgres() throws {
        let url = try Self.freshURL("all")
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try Self.ctl(url, ["init", "--insecure-plaintext-key", "--name", "pg.example/cli"]).status == 0)
        #expect(try Self.ctl(url, ["init", "--insecure-plaintext-key"]).status == 73, "a second init finds the ledger")
        #expect(try Self.ctl(url, ["give", "--subject", "alice", "--feature", "medication-management", "--consent", "required", "--consent", "optional-a"]).status == 0)
        let checkpoint = try Self.ctl(url, ["checkpoint"])
        #expect(checkpoint.status == 0 && checkpoint.stdout.hasPrefix("pg.example/cli\n3\n"))
        try checkpoint.stdout.write(toFile: dir + "/old.checkpoint", atomically: true, encoding: .utf8)
        let revoke = try Self.ctl(url, ["revoke", "--subject", "alice", "--feature", "medication-management", "--consent", "required"])
        #expect(revoke.status == 0 && revoke.stdout.contains("cascade"))
        let status = try ConsentctlTests.json(try Self.ctl(url, ["status", "--subject", "alice", "--json"]).stdout)
        #expect((status["features"] as? [[String: Any]])?.map { $0["active"] as? Bool } == [false, false])
        let history = try ConsentctlTests.json(try Self.ctl(url, ["history", "--subject", "alice", "--json"]).stdout)
        #expect((history["events"] as? [[String: Any]])?.map { $0["seq"] as? Int } == [1, 2, 3, 4])
        let applied = try Self.ctl(url, ["apply", dir + "/commands.jsonl"])
        #expect(applied.status == 64 && applied.stderr.contains("cannot read"))
        try #"{"subject":"bob","feature":"timeline","give":["required"]}"#.write(toFile: dir + "/commands.jsonl", atomically: true, encoding: .utf8)
        #expect(try Self.ctl(url, ["apply", dir + "/commands.jsonl"]).stdout == #"{"events":[5],"line":1,"ok":true}"# + "\n")
        #expect(try Self.ctl(url, ["catalog"]).stdout.contains("timeline"))
        let report = try ConsentctlTests.json(try Self.ctl(url, ["report", "--json"]).stdout)
        #expect(report["checkpoint"] != nil)
        let verify = try ConsentctlTests.json(try Self.ctl(url, ["verify", "--json"]).stdout)
        #expect(verify["ok"] as? Bool == true && verify["events"] as? Int == 6)
        let key = try Self.ctl(url, ["key", "show"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.hasPrefix("pg.example/cli+"))
        #expect(try Self.ctl(url, ["export", "--subject", "alice", "--out", dir + "/alice.json"]).status == 0)
        #expect(try ConsentctlTests.run(["verify-export", dir + "/alice.json", "--key", key], ledger: nil).status == 0)
        #expect(try Self.ctl(url, ["export", "--subject", "alice", "--format", "fhir", "--out", dir + "/alice.fhir.json"]).status == 0)
        #expect(try Self.ctl(url, ["prove-consistency", "--from", dir + "/old.checkpoint", "--out", dir + "/proof.txt"]).status == 0)
        #expect(try ConsentctlTests.run(["verify-consistency", dir + "/proof.txt", "--key", key], ledger: nil).status == 0)

        // Bad input: a clear message, its exit code, and not one changed row.
        let before = try Self.fingerprint(url)
        let unknown = try Self.ctl(url, ["give", "--subject", "alice", "--feature", "timeline", "--consent", "optional-z"])
        #expect(unknown.status == 64 && unknown.stderr.contains("optional-z"))
        #expect(try Self.ctl(url, ["give", "--subject", "carol", "--feature", "timeline", "--consent", "optional-a"]).status == 1)
        try "{\"subject\":\"dave\",\"feature\":\"timeline\",\"give\":[\"required\"]}\nnot json\n".write(toFile: dir + "/bad.jsonl", atomically: true, encoding: .utf8)
        let badApply = try Self.ctl(url, ["apply", dir + "/bad.jsonl"])
        #expect(badApply.status == 64 && badApply.stderr.contains("line 2"))
        #expect(try Self.fingerprint(url) == before)
        let both = try ConsentctlTests.run(["--store", url, "--ledger", dir, "verify"], ledger: nil)
        #expect(both.status == 64 && both.stderr.contains("not both"))
        let nowhere = try Self.ctl(try Self.freshURL("none"), ["status", "--subject", "alice"])
        #expect(nowhere.status == 66 && nowhere.stderr.contains("consentctl init --store"))
        let refused = try Self.ctl("postgres://nobody@127.0.0.1:1/none?sslmode=disable", ["verify"])
        #expect(refused.status == 3 && refused.stderr.contains("cannot connect to PostgreSQL at postgres://nobody@127.0.0.1:1/none"))
    }

    @Test func migrateCopiesAFolderIntoPostgresAndBack() throws {
        let url = try Self.freshURL("migrate")
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let folder = dir + "/ledger"
        #expect(try ConsentctlTests.run(["init", "--insecure-plaintext-key"], ledger: folder).status == 0)
        #expect(try ConsentctlTests.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-b"], ledger: folder).status == 0)
        #expect(try ConsentctlTests.run(["revoke", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: folder).status == 0)
        let checkpoint = try ConsentctlTests.run(["checkpoint"], ledger: folder).stdout
        let there = try ConsentctlTests.run(["migrate", "--to", url, "--json"], ledger: folder)
        #expect(there.status == 0)
        #expect(try ConsentctlTests.json(there.stdout)["events"] as? Int == 5)
        // PostgreSQL keeps no key: the copy's writers use the key file where it is.
        #expect(try ConsentctlTests.json(there.stdout)["keyFile"] as? String == folder + "/secret.key")
        try FileManager.default.copyItem(atPath: folder + "/secret.key", toPath: Self.keyPath(url))
        #expect(try Self.ctl(url, ["checkpoint"]).stdout == checkpoint, "the same signed checkpoint from the copy")
        #expect(try ConsentctlTests.run(["migrate", "--to", url], ledger: folder).status == 73, "never over an existing ledger")
        let back = dir + "/back"
        #expect(try Self.ctl(url, ["migrate", "--to", back]).status == 0)
        // The same files; the log's head lines are the copy's own (one per part it was written
        // in), so only its event lines, and the newest head, are the same.
        for name in ["catalog.json", "public.key", "secret.key", "subjects.jsonl", "tree.hashes", "checkpoints.jsonl"] {
            #expect(FileManager.default.contents(atPath: folder + "/" + name) == FileManager.default.contents(atPath: back + "/" + name), "\(name) differs")
        }
        // (Without the zero bytes a writer reserves after the log's content.)
        func events(_ path: String) -> [Data.SubSequence] {
            (FileManager.default.contents(atPath: path + "/ledger.jsonl") ?? Data()).split(separator: 0x0A).filter { $0.first != 0 && $0.dropFirst(2).first != UInt8(ascii: "h") }
        }
        #expect(events(folder) == events(back) && !events(folder).isEmpty)
    }

    /// Four processes append 2,000 commands each to one ledger at the same time. Afterwards:
    /// verify passes, the count is exact, and every acknowledged command is in the log, under
    /// the sequence numbers its acknowledgement gave.
    @Test func fourProcessesAppendTwoThousandCommandsEach() throws {
        let url = try Self.freshURL("four")
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try Self.ctl(url, ["init", "--insecure-plaintext-key"]).status == 0)
        let perProcess = 2000, processes = 4
        // Per process: 40 subjects; each command gives required + optional-a (2 events) or
        // withdraws required (2 events: the withdrawal and its cascade).
        var expected: [String: [(seqCount: Int, give: Bool)]] = [:]
        for p in 0..<processes {
            var lines: [String] = []
            for i in 0..<perProcess {
                let subject = "p\(p)-s\(i % 40)"
                let give = (i / 40) % 2 == 0
                lines.append(give
                    ? #"{"subject":"\#(subject)","feature":"medication-management","give":["required","optional-a"]}"#
                    : #"{"subject":"\#(subject)","feature":"medication-management","revoke":"required"}"#)
                expected[subject, default: []].append((2, give))
            }
            try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/commands\(p).jsonl", atomically: true, encoding: .utf8)
        }
        let running = try (0..<processes).map { p -> (Process, Pipe, Pipe) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ConsentctlTests.binary)
            process.arguments = ["--store", url, "--key-file", Self.keyPath(url), "apply", dir + "/commands\(p).jsonl"]
            let out = Pipe(), err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            return (process, out, err)
        }
        var acknowledged: [String: [[Int]]] = [:]
        var allSeqs: [Int] = []
        for (p, (process, out, err)) in running.enumerated() {
            let stdout = out.fileHandleForReading.readDataToEndOfFile()
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "process \(p): \(stderr)")
            let acks = String(decoding: stdout, as: UTF8.self).split(separator: "\n")
            #expect(acks.count == perProcess)
            for (i, ack) in acks.enumerated() {
                let object = try ConsentctlTests.json(String(ack))
                #expect(object["line"] as? Int == i + 1 && object["ok"] as? Bool == true)
                let seqs = try #require(object["events"] as? [Int])
                #expect(seqs.count == 2)
                acknowledged["p\(p)-s\(i % 40)", default: []].append(seqs)
                allSeqs += seqs
            }
        }
        let total = processes * perProcess * 2
        #expect(allSeqs.count == total && Set(allSeqs) == Set(1...total), "one chain: no gap, no duplicate sequence number")
        let verify = try ConsentctlTests.json(try Self.ctl(url, ["verify", "--json"]).stdout)
        #expect(verify["ok"] as? Bool == true && verify["events"] as? Int == total + 1 && verify["subjects"] as? Int == processes * 40)
        // Each subject's history holds exactly its acknowledged events, in order.
        for (subject, commands) in acknowledged.sorted(by: { $0.key < $1.key }) {
            let history = try ConsentctlTests.json(try Self.ctl(url, ["history", "--subject", subject, "--json"]).stdout)
            let events = try #require(history["events"] as? [[String: Any]])
            #expect(events.compactMap { $0["seq"] as? Int } == commands.flatMap { $0 }, "\(subject)")
            let kinds = events.compactMap { $0["type"] as? String }
            #expect(kinds == expected[subject]!.flatMap { $0.give ? ["given", "given"] : ["withdrawn", "cascade-withdrawn"] }, "\(subject)")
        }
    }

    /// Writer processes killed (SIGKILL) at random moments, mid-transaction or not: every
    /// acknowledged command is in the ledger, nothing half-written is, and it still verifies.
    @Test func killedWritersLoseNothingAcknowledged() throws {
        let url = try Self.freshURL("killed")
        let dir = ConsentctlTests.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try Self.ctl(url, ["init", "--insecure-plaintext-key"]).status == 0)
        var acknowledged: [String: [Int]] = [:]
        var ackedCommands = 0, kills = 0
        for round in 0..<6 {
            let lines = (0..<400).map { i -> String in
                let subject = "r\(round)-s\(i % 20)"
                return (i / 20) % 2 == 0
                    ? #"{"subject":"\#(subject)","feature":"timeline","give":["required","optional-a"]}"#
                    : #"{"subject":"\#(subject)","feature":"timeline","revoke":"required"}"#
            }
            try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/commands.jsonl", atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ConsentctlTests.binary)
            process.arguments = ["--store", url, "--key-file", Self.keyPath(url), "apply", dir + "/commands.jsonl"]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            usleep(UInt32.random(in: 200_000...900_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            if process.terminationReason == .uncaughtSignal { kills += 1 }
            for ack in String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n") {
                let object = try ConsentctlTests.json(String(ack))
                let line = try #require(object["line"] as? Int)
                acknowledged["r\(round)-s\((line - 1) % 20)", default: []] += try #require(object["events"] as? [Int])
                ackedCommands += 1
            }
            let verify = try Self.ctl(url, ["verify"])
            #expect(verify.status == 0, "after round \(round): \(verify.stderr)")
        }
        #expect(ackedCommands > 0, "some commands were acknowledged before the kills")
        for (subject, seqs) in acknowledged {
            let history = try ConsentctlTests.json(try Self.ctl(url, ["history", "--subject", subject, "--json"]).stdout)
            let present = Set(((history["events"] as? [[String: Any]]) ?? []).compactMap { $0["seq"] as? Int })
            #expect(Set(seqs).isSubset(of: present), "\(subject): acknowledged events missing")
        }
        // Each command appends two events. A killed process may have committed commands it had
        // not yet acknowledged: `apply` commits up to 256 in one group, then acknowledges them
        // one by one, so a kill between the commit and the last acknowledgement leaves up to
        // one group unacknowledged.
        let events = try #require(try ConsentctlTests.json(try Self.ctl(url, ["verify", "--json"]).stdout)["events"] as? Int)
        #expect(events >= 1 + 2 * ackedCommands && events <= 1 + 2 * (ackedCommands + 256 * kills) && events % 2 == 1, "\(events) events for \(ackedCommands) acknowledged commands and \(kills) kills")
        #expect(try Self.ctl(url, ["give", "--subject", "final", "--feature", "timeline", "--consent", "required"]).status == 0)
    }
}
#endif
