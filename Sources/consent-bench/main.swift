// consent-bench: measures the ledger against libsodium's own speed on this machine.
//
//   consent-bench [--sizes 100000,1000000] [--subjects N] [--batch 1000] [--durable 500] [--dir DIR] [--keep] [--plot FILE.svg]
//
// For each size it builds a ledger in DIR (on disk, so syncs are real) of size / 100 subjects
// (unless --subjects fixes N) and measures, each phase in a child process of its own so that its
// peak memory (ru_maxrss) is its own:
//   append, batched               --batch commands per execute: one write, one set of syncs
//   raw fdatasync                 the disk's limit: one command's bytes appended, then fdatasync
//   durable, existing subjects    one command per execute by a long-running writer: p50 and p99
//                                 per command, and p50 over the raw fdatasync
//   durable, new subjects         the same, each command for a subject the ledger has never seen
//   SQLite table, 1 writer        the alternative: the same command's work in a plain SQLite
//                                 table (SQLiteBaseline.swift), WAL, synchronous=FULL
//   durable, 16 threads (group)   16 threads of one writer process, one command per call: calls
//                                 that wait share a commit and its sync (group commit)
//   SQLite table, 16 threads      the same 16 threads against the SQLite table
//   consentctl apply, 4 procs     4 apply processes at once, each with commands of its own
//   replay                        decode, hash links and rules for every event (Ledger.loadAll)
//   verify                        replay plus every signature, on all cores (Ledger.verify)
//   status / history              `consentctl status|history` for one subject, whole process
//   prove-state / verify-state    a state proof of one subject, written and checked offline
// With `--postgres URL` (a build with the PostgreSQL trait) it measures a PostgreSQL ledger
// instead: durable appends by one writer process, then by --writers processes at once (one
// transaction per command, serialised by the ledger's advisory lock), and verify.
// It prints the machine (cores, CPU, filesystem) first, and with --plot writes an SVG of time
// per operation against ledger size on log axes.
// Beside each it prints the raw libsodium rate of the matching primitive, measured in this run,
// and the ratio; the batched append's and verify's limits are measured again just before and
// just after their phase, and the higher of the two is the limit. Nothing is asserted: the
// numbers are for the reader and the closing note.

import ConsentDomain
import ConsentLedger
import TransparencyLog
#if PostgreSQL
import ConsentLedgerPostgres
#endif
import CSodium
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// MARK: - Workload

/// A per-subject script that is valid whatever the interleaving across subjects: 8 commands,
/// 14 events, ending with everything withheld so it can repeat.
let script: [ConsentRequest] = [
    .give(feature: "medication-management", consents: ["required", "optional-a"]),
    .give(feature: "timeline", consents: ["required", "optional-a", "optional-b"]),
    .revoke(feature: "medication-management", consent: "required"),
    .revoke(feature: "timeline", consent: "optional-b"),
    .give(feature: "medication-management", consents: ["required", "optional-b"]),
    .revoke(feature: "timeline", consent: "required"),
    .revoke(feature: "medication-management", consent: "optional-b"),
    .revoke(feature: "medication-management", consent: "required"),
]

func command(_ k: Int, subjects: Int) -> LedgerCommand {
    LedgerCommand(subjectID: "patient-\(k % subjects)", request: script[(k / subjects) % script.count], actor: k % 3 == 0 ? "dr.house" : "self")
}

func printError(_ text: String) {
    var line = text
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

func now() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// CPU seconds this process has used, user and system, on all its threads.
func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

func emit(_ key: String, _ events: Int, _ seconds: Double, _ extra: String = "") {
    print("RESULT \(key) \(events) \(seconds) \(extra)")
}

// MARK: - Phases (run in child processes)

/// Builds a ledger of at least `target` events with batched appends.
func phaseBuild(dir: String, target: Int, subjects: Int, batch: Int) throws {
    let ledger = try Ledger.create(store: FileLedgerStore(directory: dir), catalog: SeedCatalog.catalog, name: "bench", keyProtection: .insecurePlaintext)
    try ledger.loadAll()
    var k = 0, events = 0
    let start = now()
    while events < target {
        let commands = (k..<(k + batch)).map { command($0, subjects: subjects) }
        k += batch
        events += try ledger.execute(commands).results.reduce(0) { $0 + $1.events.count }
    }
    emit("batched", events, now() - start, "commands=\(k)")
}

/// Appends `count` commands, one durable execute each, to an existing ledger.
/// `offset` is the number of commands already run, so every subject's script continues.
/// Durable single commands by one long-running writer (the key unlocked once, the log replayed
/// once): commands of existing subjects continuing their script, or each of a subject the ledger
/// has never seen. Emits the total and the median and 99th percentile of one command.
/// With `warmUp`, the process first runs that many commands of the workload untimed (from
/// `offset` on; the timed ones follow them), as a long-running writer has already met its
/// subjects. The statements those sent are not counted either.
func phaseDurable(dir: String, count: Int, subjects: Int, offset: Int, newSubjects: Bool, warmUp: Int = 0) throws {
    let storage = try store(dir)
    let ledger = try Ledger.open(store: storage)
    try ledger.loadAll()
    var warmUpEvents = 0
    for k in 0..<warmUp { warmUpEvents += try ledger.execute(command(offset + k, subjects: subjects)).result.events.count }
    let sentBefore = statementsSent(storage)
    var events = 0
    var times: [Double] = []
    times.reserveCapacity(count)
    let start = now()
    for i in 0..<count {
        let one = newSubjects
            ? LedgerCommand(subjectID: "new-\(offset)-\(i)", request: .give(feature: "medication-management", consents: ["required", "optional-a"]))
            : command(offset + warmUp + i, subjects: subjects)
        let t = now()
        events += try ledger.execute(one).result.events.count
        times.append(now() - t)
    }
    let total = now() - start
    times.sort()
    emit("durable", events, total, "commands=\(count) p50=\(times[count / 2]) p99=\(times[min(count - 1, count * 99 / 100)]) warmupEvents=\(warmUpEvents)" + roundTrips(storage, since: sentBefore, commands: count))
}

/// Commands of the workload for `writers` writers, each owning the subjects `s` with
/// `s % writers == w` so that every subject's script runs in order whatever the interleaving:
/// writer `w`'s next `count` commands from command `offset` on.
func ownCommands(writer w: Int, writers: Int, count: Int, subjects: Int, offset: Int) -> [LedgerCommand] {
    var commands: [LedgerCommand] = []
    var k = offset
    while commands.count < count {
        if (k % subjects) % writers == w { commands.append(command(k, subjects: subjects)) }
        k += 1
    }
    return commands
}

/// `writers` threads of one process, each running `perWriter` durable commands one at a time on
/// subjects of its own: concurrent calls share commits (group commit). Emits the events, the
/// wall time and the p50 and p99 of one call.
func phaseGroup(dir: String, writers: Int, perWriter: Int, subjects: Int, offset: Int, warmUp: Int = 0) throws {
    let storage = try store(dir)
    // CONSENT_BENCH_COMPACT_IN_COMMIT=1: the subject map compacted in the commit that wants it,
    // as before compaction moved off the commit path (for an A/B of the same binary).
    let compactor = (storage as? FileLedgerStore)?.mapCompactor
    if getenv("CONSENT_BENCH_COMPACT_IN_COMMIT").map({ String(cString: $0) }) == "1" {
        compactor?.backgroundAfterCommits.store(.max, ordering: .relaxed)
    }
    let mapBefore = fileIdentity(dir + "/subjects.map")
    let ledger = try Ledger.open(store: storage)
    try ledger.loadAll()
    try ledger.unlock()
    let planned = (0..<writers).map { ownCommands(writer: $0, writers: writers, count: perWriter + warmUp, subjects: subjects, offset: offset) }
    // Each writer's first commands, untimed and one at a time: the writers' subjects are met.
    var warmUpEvents = 0
    for plan in planned {
        for one in plan.prefix(warmUp) { warmUpEvents += try ledger.execute(one).result.events.count }
    }
    let plans = planned.map { Array($0.dropFirst(warmUp)) }
    let sentBefore = statementsSent(storage)
    let times = Mutex<[Double]>([])
    let events = Mutex(0)
    let failure = Mutex<String?>(nil)
    let start = now()
    onThreads(writers) { w in
        var mine: [Double] = []
        var appended = 0
        for one in plans[w] {
            let t = now()
            do {
                appended += try ledger.execute(one).result.events.count
            } catch {
                failure.withLock { $0 = "\(one.subjectID): \(error)" }
                return
            }
            mine.append(now() - t)
        }
        times.withLock { $0 += mine }
        events.withLock { $0 += appended }
    }
    let wall = now() - start
    if let message = failure.withLock({ $0 }) { throw BenchError.failed(message) }
    let sorted = times.withLock { $0 }.sorted()
    // Whether subjects.map was replaced by a compact copy meanwhile, and how many copies were
    // made off the commit path.
    let compacted = compactor == nil ? "" : " mapCompacted=\(fileIdentity(dir + "/subjects.map") != mapBefore ? 1 : 0) offPath=\(compactor!.installed.load(ordering: .relaxed))"
    emit("group", events.withLock { $0 }, wall, "commands=\(sorted.count) p50=\(sorted[sorted.count / 2]) p99=\(sorted[min(sorted.count - 1, sorted.count * 99 / 100)]) max=\(sorted.last!) warmupEvents=\(warmUpEvents)" + compacted + roundTrips(storage, since: sentBefore, commands: sorted.count))
}

/// A file's inode, 0 when it is missing: a file replaced by rename is a new inode.
func fileIdentity(_ path: String) -> UInt64 {
    var st = stat()
    return stat(path, &st) == 0 ? UInt64(st.st_ino) : 0
}

/// For a PostgreSQL ledger: the statements sent per command since `before` (each a round trip).
func roundTrips(_ storage: any LedgerStore, since before: Int, commands: Int) -> String {
    #if PostgreSQL
    if let postgres = storage as? PostgresLedgerStore { return " statements=\(Double(postgres.statementsSent - before) / Double(max(1, commands)))" }
    #endif
    return ""
}

/// Statements a PostgreSQL ledger's store has sent; 0 for other storages.
func statementsSent(_ storage: any LedgerStore) -> Int {
    #if PostgreSQL
    if let postgres = storage as? PostgresLedgerStore { return postgres.statementsSent }
    #endif
    return 0
}

/// The physical limit of a durable command: append as many bytes as one command writes to a
/// file on the same disk, then `fdatasync` it. Emits the median and 99th percentile of 200.
func phaseFsync(dir: String, bytes: Int) throws {
    let path = dir + "/fsync-probe"
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0o600)
    guard fd >= 0 else { throw BenchError.failed("cannot create \(path)") }
    defer { close(fd); unlink(path) }
    let line = [UInt8](repeating: 0x61, count: bytes - 1) + [0x0A]
    var times: [Double] = []
    for i in 0..<220 {
        let t = now()
        guard line.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes, fdatasync(fd) == 0 else { throw BenchError.failed("write or fdatasync failed") }
        if i >= 20 { times.append(now() - t) }  // the first ones warm the file's blocks up
    }
    times.sort()
    emit("fsync", times.count, times.reduce(0, +), "p50=\(times[times.count / 2]) p99=\(times[times.count * 99 / 100])")
}

enum BenchError: Error { case failed(String) }

func phaseReplay(dir: String) throws {
    let (start, cpuStart) = (now(), cpuSeconds())
    let ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
    let replay = try ledger.loadAll()
    emit("replay", replay.eventCount, now() - start, "subjects=\(replay.subjects.count) cpu=\(cpuSeconds() - cpuStart)")
}

/// Checkpoints and proofs through the library, on the open ledger: the mean of many.
func phaseProofs(dir: String) throws {
    let ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
    let size = try ledger.signedCheckpoint().checkpoint.size
    var start = now()
    for _ in 0..<20 { _ = try ledger.signedCheckpoint() }
    let checkpoint = (now() - start) / 20
    var rng = SystemRandomNumberGenerator()
    start = now()
    for _ in 0..<1000 { _ = try ledger.inclusionProof(seq: Int64.random(in: 0..<size, using: &rng), size: size) }
    let inclusion = (now() - start) / 1000
    let (_, old) = try ledger.signedCheckpoint()
    start = now()
    for _ in 0..<200 { _ = try ledger.proveConsistency(from: old) }
    let consistency = (now() - start) / 200
    print("RESULT proofs \(size) \(checkpoint) inclusion=\(inclusion) consistency=\(consistency)")
}

/// A subject's current consents through the library, on an open ledger, the way the service
/// answers `status`: `count` calls cycling over `subjects` subjects, after one untimed pass.
func phaseReads(dir: String, count: Int, subjects: Int) throws {
    let ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
    for s in 0..<subjects { _ = try ledger.currentListing(for: "patient-\(s)") }
    var times: [Double] = []
    times.reserveCapacity(count)
    for k in 0..<count {
        let t = now()
        _ = try ledger.currentListing(for: "patient-\(k % subjects)")
        times.append(now() - t)
    }
    let total = times.reduce(0, +)
    times.sort()
    emit("reads", count, total, "p50=\(times[count / 2]) p99=\(times[count * 99 / 100])")
}

/// A folder, or (with the PostgreSQL trait) a postgres:// URL.
func store(_ location: String) throws -> any LedgerStore {
    #if PostgreSQL
    // The database keeps no key: the bench's writers share a key file named after the schema.
    if PostgresLedgerAddress.isURL(location) {
        let schema = try PostgresLedgerAddress(url: location).schema
        return try PostgresLedgerStore(url: location, keyStore: FileKeyStore(path: "/tmp/consent-bench-\(schema).key"))
    }
    #endif
    return FileLedgerStore(directory: location)
}

/// One of several writer processes: `count` durable commands on subjects of its own.
func phaseWriter(location: String, count: Int, writer: Int) throws {
    let ledger = try Ledger.open(store: try store(location))
    try ledger.loadAll()
    var events = 0
    let start = now()
    for k in 0..<count {
        let c = command(k, subjects: 100)
        events += try ledger.execute(LedgerCommand(subjectID: "w\(writer)-" + c.subjectID, request: c.request, actor: c.actor)).result.events.count
    }
    emit("writer", events, now() - start, "commands=\(count)")
}

func phaseVerify(dir: String) throws {
    let (start, cpuStart) = (now(), cpuSeconds())
    let storage = try store(dir)
    let ledger = try Ledger.open(store: storage)
    let report = try ledger.verify()
    let (wall, cpu) = (now() - start, cpuSeconds() - cpuStart)
    // What verify checked a signature of, besides the events (counted after the timing): a
    // folder keeps every commit's signed head, and each subject record is signed.
    let (heads, records) = try storage.read { tx -> (Int, Int) in
        var heads = 0
        try tx.heads { _ in heads += 1 }
        return (heads, try tx.subjectRecords().count)
    }
    emit("verify", report.events, wall, "subjects=\(report.subjects) heads=\(heads) records=\(records) cpu=\(cpu)")
}

// MARK: - Raw libsodium rates

struct RawRates {
    let sign: Double, verify: Double, sha256: Double
    /// OpenSSL's SHA-256 (the ledger's hasher), for comparison with libsodium's.
    var sha256OpenSSL: Double = 0
    /// Verifications per second with every core verifying at once (same message, own keys).
    var verifyAllCores: Double = 0
}

/// How many times per second `body` runs on this thread, over about `seconds`.
func operationsPerSecond(over seconds: Double, _ body: () -> Void) -> Double {
    var n = 0
    let start = now()
    while now() - start < seconds {
        for _ in 0..<200 { body() }
        n += 200
    }
    return Double(n) / (now() - start)
}

/// Operations per second for one core, on messages the size of an event body.
func rawRates(messageSize: Int) -> RawRates {
    _ = Sodium()
    var pk = [UInt8](repeating: 0, count: 32), sk = [UInt8](repeating: 0, count: 64)
    crypto_sign_keypair(&pk, &sk)
    var message = [UInt8](repeating: 0x61, count: messageSize)
    var sig = [UInt8](repeating: 0, count: 64)
    var digest = [UInt8](repeating: 0, count: 32)
    func rate(_ body: () -> Void) -> Double { operationsPerSecond(over: 1.5, body) }
    let sign = rate { message[0] &+= 1; crypto_sign_detached(&sig, nil, message, UInt64(message.count), sk) }
    crypto_sign_detached(&sig, nil, message, UInt64(message.count), sk)
    let verify = rate { _ = crypto_sign_verify_detached(sig, message, UInt64(message.count), pk) }
    let sha = rate { crypto_hash_sha256(&digest, message, UInt64(message.count)) }
    let openssl = OpenSSLSHA256()
    let sslRate = message.withUnsafeBytes { m in rate { _ = openssl.sha256(m) } }
    var rates = RawRates(sign: sign, verify: verify, sha256: sha)
    rates.sha256OpenSSL = sslRate
    rates.verifyAllCores = parallelVerifyRate(message: message, signature: sig, publicKey: pk)
    return rates
}

/// The raw rates measured again beside the phase they limit: this virtual machine's speed moves
/// by 8–16% between runs and within one (its second core's most: a run has measured both cores
/// at 1.38× one core where others measured 1.9×), so a limit measured at the start of a
/// 25-minute run can be off by as much for a phase at its end.
enum RawNow {
    private static let keys: (pk: [UInt8], sk: [UInt8]) = {
        _ = Sodium()
        var pk = [UInt8](repeating: 0, count: 32), sk = [UInt8](repeating: 0, count: 64)
        crypto_sign_keypair(&pk, &sk)
        return (pk, sk)
    }()

    /// Ed25519 signatures per second on one core, 330-byte messages, over about a second.
    static func sign() -> Double {
        var message = [UInt8](repeating: 0x61, count: 330)
        var sig = [UInt8](repeating: 0, count: 64)
        return operationsPerSecond(over: 1.0) {
            message[0] &+= 1
            crypto_sign_detached(&sig, nil, message, UInt64(message.count), keys.sk)
        }
    }

    /// Verifications per second with every core verifying at once.
    static func verifyAllCores() -> Double {
        let message = [UInt8](repeating: 0x61, count: 330)
        var sig = [UInt8](repeating: 0, count: 64)
        crypto_sign_detached(&sig, nil, message, UInt64(message.count), keys.sk)
        return parallelVerifyRate(message: message, signature: sig, publicKey: keys.pk)
    }
}

func parallelVerifyRate(message: [UInt8], signature: [UInt8], publicKey: [UInt8]) -> Double {
        let perCore = 20_000
    let start = now()
    DispatchQueue.concurrentPerform(iterations: cores) { _ in
        for _ in 0..<perCore { _ = crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) }
    }
    return Double(perCore * cores) / (now() - start)
}

// MARK: - Running children

struct ChildRun {
    let status: Int32
    let seconds: Double
    let maxRSSKiB: Int
    let output: String
}

func runChild(_ arguments: [String]) -> ChildRun {
    var pipe: [Int32] = [0, 0]
    pipe.withUnsafeMutableBufferPointer { _ = Glibc.pipe($0.baseAddress!) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
    posix_spawn_file_actions_addclose(&actions, pipe[0])
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let start = now()
    let rc = posix_spawn(&pid, arguments[0], &actions, nil, argv, environ)
    close(pipe[1])
    guard rc == 0 else { return ChildRun(status: -1, seconds: 0, maxRSSKiB: 0, output: "spawn failed: \(rc)") }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(pipe[0], &buffer, buffer.count)
        if n <= 0 { break }
        output += buffer[0..<n]
    }
    close(pipe[0])
    var status: Int32 = 0
    var usage = rusage()
    wait4(pid, &status, 0, &usage)
    return ChildRun(status: status, seconds: now() - start, maxRSSKiB: usage.ru_maxrss, output: String(decoding: output, as: UTF8.self))
}

func selfPath() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    return String(decoding: buffer[0..<max(0, n)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

struct Measured {
    let events: Int, seconds: Double, maxRSSKiB: Int, note: String
    var rate: Double { Double(events) / seconds }
}

func measure(_ arguments: [String]) -> Measured {
    let run = runChild([selfPath()] + arguments)
    guard run.status == 0, let line = run.output.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else {
        printError("consent-bench: phase \(arguments) failed (status \(run.status)):\n\(run.output)\n")
        exit(1)
    }
    let parts = line.split(separator: " ")
    return Measured(events: Int(parts[2])!, seconds: Double(parts[3])!, maxRSSKiB: run.maxRSSKiB, note: parts.dropFirst(4).joined(separator: " "))
}

/// The run of median time among `runs` runs of a phase, after one run not counted (a warm-up:
/// the ledger's pages read into the cache), and the fastest and slowest time. For the phases
/// short enough to repeat: one run of replay at 10k events takes 20 ms, and this machine's
/// minute-to-minute noise moved a single run by a third.
func measureMedian(_ arguments: [String], runs: Int = 5) -> (median: Measured, fastest: Double, slowest: Double) {
    _ = measure(arguments)
    let all = (0..<runs).map { _ in measure(arguments) }.sorted { $0.seconds < $1.seconds }
    return (all[all.count / 2], all.first!.seconds, all.last!.seconds)
}

/// `consentctl apply` from `processes` processes at once, each with a file of `perProcess`
/// commands for subjects of its own (the workload's script, under a prefix of the process's).
/// Returns the commands acknowledged in total and the wall time of the slowest.
func applyProcesses(dir: String, processes: Int, perProcess: Int) -> (commands: Int, seconds: Double, failed: Bool) {
    let consentctl = String(selfPath().dropLast("consent-bench".count)) + "consentctl"
    for p in 0..<processes {
        var text = ""
        for k in 0..<perProcess {
            let c = command(k, subjects: 100)
            let (verb, feature, consents): (String, String, [String])
            switch c.request {
            case .give(let f, let codes): (verb, feature, consents) = ("give", f, codes)
            case .revoke(let f, let codes): (verb, feature, consents) = ("revoke", f, codes)
            }
            text += "{\"subject\":\"a\(p)-\(c.subjectID)\",\"feature\":\"\(feature)\",\"\(verb)\":[\(consents.map { "\"\($0)\"" }.joined(separator: ","))],\"actor\":\"\(c.actor)\"}\n"
        }
        let file = fopen("\(dir)/apply-\(p).jsonl", "w")
        fputs(text, file)
        fclose(file)
    }
    let runs = Mutex<[ChildRun]>([])
    let start = now()
    onThreads(processes) { p in
        let run = runChild([consentctl, "--ledger", dir, "apply", "\(dir)/apply-\(p).jsonl"])
        runs.withLock { $0.append(run) }
    }
    let wall = now() - start
    let all = runs.withLock { $0 }
    let acknowledged = all.reduce(0) { $0 + $1.output.split(separator: "\n").filter { $0.contains("\"ok\":true") }.count }
    return (acknowledged, wall, all.contains { $0.status != 0 } || acknowledged != processes * perProcess)
}

// MARK: - Main

func option(_ name: String, _ args: [String]) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    return args[i + 1]
}

func format(_ value: Double) -> String {
    // A failed phase can give an infinite rate (no time measured): printed, never converted.
    guard value.isFinite else { return String(value) }
    if value >= 100 { return String(Int(value.rounded())) }
    let scaled = (value * 100).rounded() / 100
    return String(scaled)
}

func pad(_ s: String, _ width: Int, right: Bool = false) -> String {
    s.count >= width ? s : (right ? String(repeating: " ", count: width - s.count) + s : s + String(repeating: " ", count: width - s.count))
}

let args = Array(CommandLine.arguments.dropFirst())
let cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
do {
    if args.first == "phase" {
        let dir = args[2]
        switch args[1] {
        case "build": try phaseBuild(dir: dir, target: Int(args[3])!, subjects: Int(args[4])!, batch: Int(args[5])!)
        case "durable": try phaseDurable(dir: dir, count: Int(args[3])!, subjects: Int(args[4])!, offset: Int(args[5])!, newSubjects: false, warmUp: args.count > 6 ? Int(args[6])! : 0)
        case "durable-new": try phaseDurable(dir: dir, count: Int(args[3])!, subjects: Int(args[4])!, offset: Int(args[5])!, newSubjects: true, warmUp: args.count > 6 ? Int(args[6])! : 0)
        case "fsync": try phaseFsync(dir: dir, bytes: Int(args[3])!)
        case "replay": try phaseReplay(dir: dir)
        case "verify": try phaseVerify(dir: dir)
        case "proofs": try phaseProofs(dir: dir)
        case "reads": try phaseReads(dir: dir, count: Int(args[3])!, subjects: Int(args[4])!)
        #if PostgreSQL
        case "pgbench": try phasePgbench(url: dir, clients: Int(args[3])!)
        #endif
        case "writer": try phaseWriter(location: dir, count: Int(args[3])!, writer: Int(args[4])!)
        case "group": try phaseGroup(dir: dir, writers: Int(args[3])!, perWriter: Int(args[4])!, subjects: Int(args[5])!, offset: Int(args[6])!, warmUp: args.count > 7 ? Int(args[7])! : 0)
        case "sqlite": try phaseSQLite(dir: dir, writers: Int(args[3])!, perWriter: Int(args[4])!, lines: try eventLines(of: dir, count: 4000))
        default: printError("unknown phase\n"); exit(64)
        }
        exit(0)
    }
} catch {
    printError("consent-bench: \(error)\n")
    exit(1)
}

if args.contains("--help") {
    print("usage: consent-bench [--sizes 100000,1000000] [--subjects 10000] [--batch 1000] [--durable 500] [--dir DIR] [--keep] [--plot FILE.svg]")
    print("       consent-bench --postgres URL [--writers 4] [--commands 2000]   (built with the PostgreSQL trait)")
    exit(0)
}

if let url = option("--postgres", args) {
    #if PostgreSQL
    benchPostgres(url: url, writers: Int(option("--writers", args) ?? "4") ?? 4, perWriter: Int(option("--commands", args) ?? "2000") ?? 2000)
    #else
    printError("consent-bench: built without the PostgreSQL trait; build with --traits PostgreSQL (make bench-postgres)\n")
    exit(64)
    #endif
}
let sizes = (option("--sizes", args) ?? "100000,1000000").split(separator: ",").compactMap { Int($0) }
// The workload keeps about 100 events per subject at every size unless --subjects fixes the count.
let fixedSubjects = option("--subjects", args).flatMap { Int($0) }
let batch = Int(option("--batch", args) ?? "1000") ?? 1000
let durableCount = Int(option("--durable", args) ?? "500") ?? 500
let base = option("--dir", args) ?? "/tmp/consent-bench"
// The folder is emptied with rm -rf: refuse anything that is not a plain, specific path.
guard base.hasPrefix("/"), base.split(separator: "/").count >= 2, !base.contains("'"), !base.contains("..") else {
    printError("consent-bench: --dir must be an absolute path at least two levels deep, without quotes or '..'\n")
    exit(64)
}
let keep = args.contains("--keep")
let consentctl = String(selfPath().dropLast("consent-bench".count)) + "consentctl"

print("machine: \(machineDescription(path: base))")
print("consent-bench: \(cores) cores, \(fixedSubjects.map { "\($0) subjects" } ?? "events / 100 subjects"), batches of \(batch) commands, ledgers under \(base)")
let raw = rawRates(messageSize: 330)
print("raw libsodium, one core, 330-byte messages: sign \(format(raw.sign))/s, verify \(format(raw.verify))/s, SHA-256 \(format(raw.sha256))/s")
print("SHA-256 in the ledger is OpenSSL's (CPU SHA instructions): \(format(raw.sha256OpenSSL))/s one core, \(format(raw.sha256OpenSSL / raw.sha256))x libsodium's")
print("raw libsodium verify with all \(cores) cores at once: \(format(raw.verifyAllCores))/s (\(format(raw.verifyAllCores / raw.verify))x one core)")
print("")

_ = system("rm -rf '\(base)' && mkdir -p '\(base)'")
/// A `key=value` of a phase's note, as a number.
func noteValue(_ m: Measured, _ key: String) -> Double? {
    m.note.split(separator: " ").first { $0.hasPrefix(key + "=") }.flatMap { Double($0.dropFirst(key.count + 1)) }
}

var failures = 0
var plot = PlotData()
let plotPath = option("--plot", args)
for size in sizes {
    let dir = "\(base)/ledger-\(size)"
    let subjects = fixedSubjects ?? max(1, size / 100)
    print("== \(size) events over \(subjects) subjects ==")
    let header = [pad("phase", 28), pad("events", 9, right: true), pad("seconds", 9, right: true), pad("events/s", 10, right: true), pad("peak MB", 8, right: true), "  limit (raw libsodium)", "  ratio"]
    print(header.joined(separator: " "))
    func row(_ name: String, _ m: Measured, limitName: String, limit: Double) {
        let mb = Double(m.maxRSSKiB) / 1024
        print([pad(name, 28), pad(String(m.events), 9, right: true), pad(format(m.seconds), 9, right: true), pad(format(m.rate), 10, right: true), pad(format(mb), 8, right: true), "  \(limitName) \(format(limit))/s", "  \(format(m.rate / limit * 100))%"].joined(separator: " "))
    }
    // Each rate-limited phase is compared with its limit measured just before and just after
    // it, the higher of the two (the ratio the less flattering).
    let signBefore = RawNow.sign()
    let built = measure(["phase", "build", dir, String(size), String(subjects), String(batch)])
    let signAfter = RawNow.sign()
    row("append, batched (1 fsync)", built, limitName: "sign x \(cores) cores (target 80%; one core \(format(signBefore))/s before, \(format(signAfter))/s after)", limit: max(signBefore, signAfter) * Double(cores))
    let commandsRun = String(Int(noteValue(built, "commands") ?? 0))
    // The physical limit of one durable command: its bytes appended and fdatasync'ed, on this disk.
    var logInfo = stat()
    stat(dir + "/ledger.jsonl", &logInfo)
    let commandBytes = Int(logInfo.st_size) / max(1, built.events) * 14 / 8 + 300
    let fsync = measure(["phase", "fsync", dir, String(commandBytes)])
    let fsyncP50 = noteValue(fsync, "p50") ?? .nan
    print([pad("raw fdatasync (\(commandBytes) B)", 28), pad(String(fsync.events), 9, right: true), pad(format(fsyncP50 * 1000) + " ms", 9, right: true), pad(format(1 / fsyncP50), 10, right: true), pad("", 8, right: true), "  p50 of one append + fdatasync on this disk; p99 \(format((noteValue(fsync, "p99") ?? .nan) * 1000)) ms"].joined(separator: " "))
    func durableRow(_ name: String, _ m: Measured, target: String = " (target <= 2x)") {
        let p50 = noteValue(m, "p50") ?? .nan, p99 = noteValue(m, "p99") ?? .nan
        let commands = noteValue(m, "commands") ?? .nan
        print([pad(name, 28), pad(String(m.events), 9, right: true), pad(format(p50 * 1000) + " ms", 9, right: true), pad(format(commands / m.seconds) + " c/s", 10, right: true), pad(format(Double(m.maxRSSKiB) / 1024), 8, right: true), "  p50 per command (p99 \(format(p99 * 1000)) ms) vs raw fdatasync \(format(fsyncP50 * 1000)) ms", "  \(format(p50 / fsyncP50))x" + target].joined(separator: " "))
    }
    let durable = measure(["phase", "durable", dir, String(durableCount), String(subjects), commandsRun])
    durableRow("durable, existing subjects", durable)
    let durableNew = measure(["phase", "durable-new", dir, String(durableCount), String(subjects), String(size)])
    durableRow("durable, new subjects", durableNew)
    plot.add("durable command, existing subject (p50)", size: size, ms: (noteValue(durable, "p50") ?? .nan) * 1000)
    plot.add("durable command, new subject (p50)", size: size, ms: (noteValue(durableNew, "p50") ?? .nan) * 1000)
    plot.add("raw fdatasync (p50)", size: size, ms: fsyncP50 * 1000)
    // The same command by a plain SQLite table (see SQLiteBaseline.swift), then many writers at
    // once: threads of one process sharing commits, SQLite's threads, and apply processes.
    let sqlite1 = measure(["phase", "sqlite", dir, "1", String(durableCount)])
    durableRow("SQLite table, 1 writer", sqlite1, target: "")
    plot.add("SQLite table, same command (p50)", size: size, ms: (noteValue(sqlite1, "p50") ?? .nan) * 1000)
    let durableP50 = noteValue(durable, "p50") ?? .nan, sqliteP50 = noteValue(sqlite1, "p50") ?? .nan
    print([pad("  ledger vs SQLite, 1 writer", 28), pad("", 9), pad("", 9), pad("", 10), pad("", 8), "  SQLite p50 / ledger p50 (existing subjects): \(format(sqliteP50 / durableP50))x (target >= 1.0x)"].joined(separator: " "))
    // Each writer owns subjects of its own (at most one writer per subject).
    let writers = min(16, subjects), perWriter = max(10, durableCount / 4)
    func concurrentRow(_ name: String, _ m: Measured, _ note: String) {
        let p99 = noteValue(m, "p99") ?? .nan, commands = noteValue(m, "commands") ?? .nan
        print([pad(name, 28), pad(String(m.events), 9, right: true), pad(format(m.seconds), 9, right: true), pad(format(m.rate), 10, right: true), pad(format(Double(m.maxRSSKiB) / 1024), 8, right: true), "  \(format(commands / m.seconds)) commands/s, p50 \(format((noteValue(m, "p50") ?? .nan) * 1000)) ms, p99 \(format(p99 * 1000)) ms, max \(format((noteValue(m, "max") ?? .nan) * 1000)) ms per call", note].joined(separator: " "))
    }
    let group = measure(["phase", "group", dir, String(writers), String(perWriter), String(subjects), String(Int(commandsRun)! + durableCount)])
    concurrentRow("durable, \(writers) threads (group)", group, " (target >= 20000 events/s, p99 <= 10 ms)")
    let sqlite16 = measure(["phase", "sqlite", dir, String(writers), String(perWriter)])
    concurrentRow("SQLite table, \(writers) threads", sqlite16, "")
    print([pad("  ledger vs SQLite, \(writers) thr.", 28), pad("", 9), pad("", 9), pad("", 10), pad("", 8), "  events/s of the ledger / SQLite's: \(format(group.rate / sqlite16.rate))x (target >= 5x)"].joined(separator: " "))
    let applied = applyProcesses(dir: dir, processes: 4, perProcess: durableCount)
    print([pad("consentctl apply, 4 procs", 28), pad(String(applied.commands), 9, right: true), pad(format(applied.seconds), 9, right: true), pad(format(Double(applied.commands) / applied.seconds) + " c/s", 10, right: true), pad("", 8), "  whole processes at once, commands/s in total vs raw fdatasync \(format(1 / fsyncP50))/s", "  \(format(Double(applied.commands) / applied.seconds * fsyncP50 * 100))% (target >= 25%)", applied.failed ? "  FAILED" : ""].joined(separator: " "))
    if applied.failed { failures += 1 }
    let (replay, fastestReplay, slowestReplay) = measureMedian(["phase", "replay", dir])
    // How many cores a phase kept busy: its CPU time over its wall time.
    func busy(_ m: Measured) -> String { noteValue(m, "cpu").map { ", \(format($0 / m.seconds)) cores busy" } ?? "" }
    row("replay (links + rules)", replay, limitName: "target 1M events/s, median of 5, \(format(fastestReplay * 1000))–\(format(slowestReplay * 1000)) ms\(busy(replay)):", limit: 1_000_000)
    plot.add("replay, whole ledger", size: size, ms: replay.seconds * 1000)
    let verifyBefore = RawNow.verifyAllCores()
    let verify = measure(["phase", "verify", dir])
    let verifyAfter = RawNow.verifyAllCores()
    row("verify (all, \(cores) cores)", verify, limitName: "verify, \(cores) cores at once (target 90%; \(format(verifyBefore))/s before, \(format(verifyAfter))/s after\(busy(verify)))", limit: max(verifyBefore, verifyAfter))
    // Events are not all verify checks: every commit's signed head and every subject record
    // carry a signature too, and the ledgers of the small sizes hold many one-command commits
    // from the durable phases before this one.
    let signatures = Double(verify.events) + (noteValue(verify, "heads") ?? 0) + (noteValue(verify, "records") ?? 0)
    print([pad("  verify, every signature", 28), pad(String(Int(signatures)), 9, right: true), pad("", 9), pad(format(signatures / verify.seconds), 10, right: true), pad("", 8), "  signatures/s (events, \(Int(noteValue(verify, "heads") ?? 0)) heads, \(Int(noteValue(verify, "records") ?? 0)) subject records): \(format(signatures / verify.seconds / max(verifyBefore, verifyAfter) * 100))% of the limit"].joined(separator: " "))
    plot.add("verify, whole ledger", size: size, ms: verify.seconds * 1000)
    let proofs = measure(["phase", "proofs", dir])
    let parts = Dictionary(uniqueKeysWithValues: proofs.note.split(separator: " ").map { kv -> (String, Double) in
        let p = kv.split(separator: "=")
        return (String(p[0]), Double(p[1]) ?? 0)
    })
    func ms(_ seconds: Double) -> String { format(seconds * 1000) + " ms" }
    print([pad("checkpoint (sign + root)", 28), pad("-", 9, right: true), pad(ms(proofs.seconds), 9, right: true), pad("-", 10, right: true), pad("", 8, right: true), "  library call, mean of 20"].joined(separator: " "))
    print([pad("inclusion proof", 28), pad("-", 9, right: true), pad(ms(parts["inclusion"] ?? 0), 9, right: true), pad("-", 10, right: true), pad("", 8, right: true), "  library call, mean of 1000 (target < 1 ms)"].joined(separator: " "))
    print([pad("consistency proof", 28), pad("-", 9, right: true), pad(ms(parts["consistency"] ?? 0), 9, right: true), pad("-", 10, right: true), pad("", 8, right: true), "  library call incl. checking the old note, mean of 200 (target < 1 ms)"].joined(separator: " "))
    // A subject's status in a long-running process (the service's `status`): each subject's
    // events read and proved against the signed root, the tree hashes it authenticated kept.
    let readSubjects = min(subjects, 400)
    let reads = measure(["phase", "reads", dir, "2000", String(readSubjects)])
    print([pad("status, in-process", 28), pad("-", 9, right: true), pad(ms(noteValue(reads, "p50") ?? .nan), 9, right: true), pad("-", 10, right: true), pad(format(Double(reads.maxRSSKiB) / 1024), 8, right: true), "  library call, p50 of 2000 over \(readSubjects) subjects (p99 \(ms(noteValue(reads, "p99") ?? .nan)))"].joined(separator: " "))
    plot.add("status, in-process (p50)", size: size, ms: (noteValue(reads, "p50") ?? .nan) * 1000)
    // One subject of the workload, the same at every size that has it.
    let probe = "patient-\(min(42, subjects - 1))"
    let bundlePath = "\(base)/\(probe)-\(size).json"
    let exported = runChild([consentctl, "--ledger", dir, "export", "--subject", probe, "--out", bundlePath])
    if exported.status != 0 { failures += 1 }
    print([pad("consentctl export (1 subj.)", 28), pad("-", 9, right: true), pad(ms(exported.seconds), 9, right: true), pad("-", 10, right: true), pad(format(Double(exported.maxRSSKiB) / 1024), 8, right: true), "  whole process, wall time (target < 100 ms)", exported.status == 0 ? "" : "  FAILED \(exported.status)"].joined(separator: " "))
    let key = runChild([consentctl, "--ledger", dir, "key", "show"]).output.split(separator: "\n").first.map(String.init) ?? ""
    let checked = runChild([consentctl, "verify-export", bundlePath, "--key", key])
    if checked.status != 0 { failures += 1 }
    print([pad("consentctl verify-export", 28), pad("-", 9, right: true), pad(ms(checked.seconds), 9, right: true), pad("-", 10, right: true), pad(format(Double(checked.maxRSSKiB) / 1024), 8, right: true), "  whole process, wall time, offline", checked.status == 0 ? "" : "  FAILED \(checked.status)"].joined(separator: " "))
    // The whole ledger as one bundle, verified offline: streamed, so its memory must not grow
    // with the bundle. Against the bundle's size (what a verifier holding the file would need)
    // and against the library's verify of the same ledger above (the same checks, from disk).
    if size <= 1_000_000 {
        let allPath = "\(base)/all-\(size).json"
        let exportedAll = runChild([consentctl, "--ledger", dir, "export", "--all", "--out", allPath])
        var st = stat()
        let bundleMB = stat(allPath, &st) == 0 ? Double(st.st_size) / 1_048_576 : .nan
        let checkedAll = runChild([consentctl, "verify-export", allPath, "--key", key])
        if exportedAll.status != 0 || checkedAll.status != 0 { failures += 1 }
        let rssMB = Double(checkedAll.maxRSSKiB) / 1024
        print([pad("verify-export (all)", 28), pad(String(size), 9, right: true), pad(format(checkedAll.seconds), 9, right: true), pad(format(Double(size) / checkedAll.seconds), 10, right: true), pad(format(rssMB), 8, right: true),
               "  whole process; bundle \(format(bundleMB)) MB, peak RSS \(format(rssMB / bundleMB))x the bundle (target < 300 MB at 150k events); \(format(verify.seconds / checkedAll.seconds))x the library verify's rate",
               checkedAll.status == 0 ? "" : "  FAILED \(checkedAll.status)"].joined(separator: " "))
        _ = unlink(allPath)
    }
    let cp = runChild([consentctl, "--ledger", dir, "checkpoint"])
    if cp.status != 0 { failures += 1 }
    print([pad("consentctl checkpoint", 28), pad("-", 9, right: true), pad(ms(cp.seconds), 9, right: true), pad("-", 10, right: true), pad(format(Double(cp.maxRSSKiB) / 1024), 8, right: true), "  whole process, wall time"].joined(separator: " "))
    // Short whole-process commands: the median of 5 runs (one run is at the mercy of the machine).
    func median(_ arguments: [String]) -> ChildRun {
        let runs = (0..<5).map { _ in runChild(arguments) }.sorted { $0.seconds < $1.seconds }
        return runs.first { $0.status != 0 } ?? runs[2]
    }
    let statePath = "\(base)/\(probe)-\(size).state.json"
    let commands: [(name: String, arguments: [String], note: String)] = [
        ("consentctl status (1 subj.)", [consentctl, "--ledger", dir, "status", "--subject", probe], "target <= 20 ms, <= 32 MB"),
        ("consentctl history (1 subj.)", [consentctl, "--ledger", dir, "history", "--subject", probe], "target <= 20 ms, <= 32 MB"),
        ("consentctl prove-state", [consentctl, "--ledger", dir, "prove-state", "--subject", probe, "--out", statePath], "no secret key; target <= 20 ms, <= 32 MB"),
        ("consentctl verify-state", [consentctl, "verify-state", statePath, "--key", key], "offline; target <= 20 ms"),
    ]
    for command in commands {
        let run = median(command.arguments)
        if run.status != 0 { failures += 1 }
        let mb = Double(run.maxRSSKiB) / 1024
        plot.add(String(command.name.split(separator: " (")[0]) + ", whole process", size: size, ms: run.seconds * 1000)
        print([pad(command.name, 28), pad("-", 9, right: true), pad(ms(run.seconds), 9, right: true), pad("-", 10, right: true), pad(format(mb), 8, right: true), "  whole process, wall time, median of 5 (\(command.note))", run.status == 0 ? "" : "  FAILED \(run.status)"].joined(separator: " "))
    }
    print("")
    if !keep { _ = system("rm -rf '\(dir)'") }
}
if let plotPath {
    let file = fopen(plotPath, "w")
    fputs(plot.svg(title: "consent-bench: time per operation against ledger size", subtitle: machineDescription(path: base)), file)
    fclose(file)
    print("plot: \(plotPath)")
}
// A command that failed makes the run fail, so a bench that broke cannot pass as a slow one.
if failures > 0 {
    printError("consent-bench: \(failures) whole-process command(s) failed (marked FAILED above)\n")
    exit(1)
}
