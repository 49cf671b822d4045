#if PostgreSQL
import ConsentLedger
import ConsentLedgerPostgres
import Synchronization
import TransparencyLog
#if canImport(Glibc)
import Glibc
#endif

/// The physical limit of a durable PostgreSQL command on this machine and server: pgbench (the
/// server's own load generator, through libpq) committing one-row INSERT transactions of one
/// command's bytes, from `clients` connections, for 5 seconds. Emits the transactions per
/// second.
func phasePgbench(url: String, clients: Int) throws {
    let address = try PostgresLedgerAddress(url: url)
    let find = runChild(["/bin/sh", "-c", "command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -n 1"])
    guard let pgbench = find.output.split(separator: "\n").last.map(String.init), !pgbench.isEmpty else {
        throw BenchError.failed("pgbench was not found (Debian's postgresql package has it)")
    }
    let psql = String(pgbench.dropLast("pgbench".count)) + "psql"
    let ssl = address.tlsMode == .disable ? "disable" : "require"
    let connection = "host=\(address.host) port=\(address.port) user=\(address.username) dbname=\(address.database) sslmode=\(ssl)"
    let table = "\(address.schema).pgbench_one_row"
    let script = "/tmp/consent-bench-pgbench-\(getpid()).sql"
    let body = String(repeating: "a", count: 330)
    guard let file = fopen(script, "w") else { throw BenchError.failed("cannot write \(script)") }
    fputs("INSERT INTO \(table) (body) VALUES ('\(body)');\n", file)
    fclose(file)
    defer { unlink(script) }
    let setup = runChild(["/bin/sh", "-c", "'\(psql)' -q '\(connection)' -c 'CREATE TABLE IF NOT EXISTS \(table) (id bigserial PRIMARY KEY, body text NOT NULL)' 2>&1"])
    guard setup.status == 0 else { throw BenchError.failed("psql could not create \(table): \(setup.output)") }
    let run = runChild(["/bin/sh", "-c", "'\(pgbench)' -n -c \(clients) -j \(min(clients, 2)) -T 5 -f '\(script)' '\(connection)' 2>&1"])
    guard run.status == 0, let line = run.output.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
          let tps = Double(line.dropFirst("tps = ".count).prefix { $0 != " " }) else {
        throw BenchError.failed("pgbench failed (status \(run.status)): \(run.output)")
    }
    emit("pgbench", Int(tps * 5), 5, "tps=\(tps)")
}

/// Events a phase appended before it was timed.
func warmUpEvents(_ m: Measured) -> Int { Int(noteValue(m, "warmupEvents") ?? 0) }

/// `make bench-postgres`: a PostgreSQL ledger's durable commands against pgbench's one-row
/// transactions on the same server, in the same run.
func benchPostgres(url: String, writers: Int, perWriter: Int) -> Never {
    let location = url + (url.contains("?") ? "&" : "?") + "schema=bench_\(time(nil))"
    do {
        _ = try Ledger.create(store: try store(location), catalog: SeedCatalog.catalog, name: "bench", keyProtection: .insecurePlaintext)
    } catch {
        printError("consent-bench: \(error)\n")
        exit(1)
    }
    let raw = rawRates(messageSize: 330)
    print("consent-bench: PostgreSQL ledger \((try? PostgresLedgerAddress(url: location).description) ?? "")")
    print("machine: \(machineDescription(path: "/tmp"))")
    let pg1 = measure(["phase", "pgbench", location, "1"])
    let pg16 = measure(["phase", "pgbench", location, "16"])
    let tps1 = noteValue(pg1, "tps") ?? .nan, tps16 = noteValue(pg16, "tps") ?? .nan
    print("limit: pgbench, one-row INSERT transactions: \(format(tps1))/s with 1 client, \(format(tps16))/s with 16")
    print("limit: raw libsodium sign, one core: \(format(raw.sign))/s")
    print("")

    // Each timed phase is a long-running writer: its process first runs commands of its own
    // subjects untimed (the statements they send are not counted), then is timed.
    let subjects = 200
    var events = 1
    let single = measure(["phase", "durable", location, String(perWriter), String(subjects), "0", String(subjects * 2)])
    events += single.events + warmUpEvents(single)
    let fresh = measure(["phase", "durable-new", location, String(perWriter / 2), String(subjects), String(subjects * 2 + perWriter), String(subjects * 2)])
    events += fresh.events + warmUpEvents(fresh)
    let warmUpPerWriter = (subjects + 15) / 16 * 2
    let group = measure(["phase", "group", location, "16", String(perWriter / 8), String(subjects), String(subjects * 6 + perWriter), String(warmUpPerWriter)])
    events += group.events + warmUpEvents(group)

    let runs = Mutex<[ChildRun]>([])
    let start = now()
    onThreads(writers) { w in
        let run = runChild([selfPath(), "phase", "writer", location, String(perWriter / 4), String(w)])
        runs.withLock { $0.append(run) }
    }
    let wall = now() - start
    let processEvents = runs.withLock { $0 }.reduce(0) { total, run in
        guard run.status == 0, let line = run.output.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else {
            printError("consent-bench: a writer failed (status \(run.status)):\n\(run.output)\n")
            exit(1)
        }
        return total + Int(line.split(separator: " ")[2])!
    }
    events += processEvents
    let verify = measure(["phase", "verify", location])

    func commands(_ m: Measured) -> Double { noteValue(m, "commands") ?? .nan }
    func ms(_ m: Measured, _ key: String) -> String { format((noteValue(m, key) ?? .nan) * 1000) }
    let singleRate = commands(single) / single.seconds
    let freshRate = commands(fresh) / fresh.seconds
    print([pad("path", 40), pad("measured", 44), "target"].joined(separator: " "))
    print([pad("1 writer, existing subject", 40), pad("\(format(singleRate)) commands/s (p50 \(ms(single, "p50")) ms, p99 \(ms(single, "p99")))", 44),
           "≥ 1,000 commands/s; \(format(singleRate / tps1 * 100))% of pgbench's 1 client"].joined(separator: " "))
    print([pad("   statements per command", 40), pad(format(noteValue(single, "statements") ?? .nan), 44), "≤ 2 round trips plus COMMIT"].joined(separator: " "))
    print([pad("1 writer, new subject", 40), pad("\(format(freshRate)) commands/s (p50 \(ms(fresh, "p50")) ms)", 44),
           "\(format(freshRate / tps1 * 100))% of pgbench's 1 client"].joined(separator: " "))
    print([pad("   statements per command", 40), pad(format(noteValue(fresh, "statements") ?? .nan), 44), "≤ 2 round trips plus COMMIT"].joined(separator: " "))
    print([pad("16 threads, one process (group commit)", 40), pad("\(format(group.rate)) events/s (p99 \(ms(group, "p99")) ms)", 44),
           "≥ 5,000 events/s; \(format(commands(group) / group.seconds / tps16 * 100))% of pgbench's 16 clients in commands/s"].joined(separator: " "))
    print([pad("   statements per command", 40), pad(format(noteValue(group, "statements") ?? .nan), 44), ""].joined(separator: " "))
    print([pad("\(writers) writer processes", 40), pad("\(format(Double(processEvents) / wall)) events/s", 44), ""].joined(separator: " "))
    print([pad("verify (all, \(cores) cores)", 40), pad("\(format(verify.rate)) events/s", 44),
           "count \(verify.events == events ? "exact" : "WRONG: expected \(events)")"].joined(separator: " "))
    exit(verify.events == events ? 0 : 1)
}
#endif
