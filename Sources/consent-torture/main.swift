// consent-torture: kills writers with SIGKILL at random moments and checks what they leave.
//
//   consent-torture [--kind group|batched|apply|cli|rotate|publish|erase|service|all] [--kills 200] [--dir DIR] [--seed N] [--service PATH]
//
// Each round starts a writer process on one ledger, waits for its first acknowledgement, lets
// it run a random few milliseconds more and kills it with SIGKILL. Then it checks, in this
// process, through the library:
//   - the writer died of that kill (a writer that failed, or hung for 20 s, fails the run; one
//     that finished its work before the kill is counted apart);
//   - the ledger opens and `verify` passes (which replays every command span: a command is in
//     the log whole or not at all);
//   - every command the writer acknowledged before it died is present, with all its events;
//   - every subject in the ledger has exactly the events of one whole command.
// Writer kinds:
//   group    16 threads of one process, one `Ledger.execute` per command: concurrent calls
//            share commits (group commit); each call must answer with its own command's result
//   batched  `Ledger.execute` of 20 commands at a time, acknowledged when the call returns
//   apply    `consentctl apply` of a file of commands, acknowledged line by line on its output
//   cli      one `consentctl give`, then one `consentctl revoke`, per subject, each a process of
//            its own, acknowledged when it exits 0 (the kill takes the process in flight too)
//   rotate   `key rotate` with a command signed by the new key after each, acknowledged per
//            rotation: after the kill the key file must be the key in force (a rotation cut
//            short is finished by the next writer)
//   publish  catalogue publications (a new policy version of timeline/required each time)
//   erase    a subject given consents, then erased; an erasure cut short between its event and
//            the destruction of the record is finished by running it again, as `verify` says
//   service  the HTTP service (--service PATH, Samples/ConsentService) under 16 clients at once,
//            each `activate` acknowledged when it answered 200; the service is killed, not the
//            clients
// In group, batched and apply, every command gives `required` and `optional-a` of Timeline to a
// subject of its own (two events), so that its presence is all or nothing and easy to count;
// the other kinds check what their own acknowledgements promise.

import ConsentDomain
import ConsentLedger
import LedgerFormat
import TransparencyLog
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    var text = "consent-torture: " + message + "\n"
    text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    exit(1)
}

/// One line on standard output, written whole and at once (not buffered): the driver must see
/// every acknowledgement a writer made before the kill.
func acknowledge(_ line: String) {
    let text = line + "\n"
    let written = text.utf8.withContiguousStorageIfAvailable { write(1, $0.baseAddress, $0.count) } ?? -1
    if written != text.utf8.count { exit(70) }
}

func give(_ subject: String) -> LedgerCommand {
    LedgerCommand(subjectID: subject, request: .give(feature: "timeline", consents: ["required", "optional-a"]))
}

// MARK: - Writers (child processes)

/// Writes until killed (or 100,000 commands), acknowledging each command once its call returned.
func writer(kind: String, dir: String, prefix: String) throws {
    // The subject map is compacted every hundred or so commands instead of every ~24,000, so
    // that kills land in compactions too: in a commit, and (for the writers of many commits,
    // from their fourth) in a copy made off the commit path or in its installation.
    SubjectMap.compactionSlack = 64
    SubjectMap.compactionRecordsPerKey = 3
    let store = FileLedgerStore(directory: dir)
    store.mapCompactor.backgroundAfterCommits.store(4, ordering: .relaxed)
    store.mapCompactor.minimumRecords.store(0, ordering: .relaxed)
    let ledger = try Ledger.open(store: store)
    try ledger.unlock()
    switch kind {
    case "group":
        let lock = Mutex(())
        onThreads(16) { t in
            for i in 0..<100_000 {
                let subject = "\(prefix)-t\(t)-\(i)"
                do {
                    // A group commit must answer each call with its own command's result.
                    let answer = try ledger.execute(give(subject)).result
                    guard answer.subjectID == subject, answer.events.count == 2 else {
                        fail("\(subject): answered with \(answer.subjectID)'s result of \(answer.events.count) event(s)")
                    }
                } catch {
                    fail("\(subject): \(error)")
                }
                lock.withLock { _ in acknowledge(subject) }
            }
        }
    case "batched":
        for b in 0..<5_000 {
            let subjects = (0..<20).map { "\(prefix)-b\(b)-\($0)" }
            _ = try ledger.execute(subjects.map(give))
            for subject in subjects { acknowledge(subject) }
        }
    case "cli":
        let consentctl = String(selfPath().dropLast("consent-torture".count)) + "consentctl"
        for i in 0..<100_000 {
            let subject = "\(prefix)-c\(i)"
            for (verb, consents, ack) in [("give", ["required", "optional-a"], subject), ("revoke", ["optional-a"], subject + " revoked")] {
                let arguments = [consentctl, "--ledger", dir, verb, "--subject", subject, "--feature", "timeline"] + consents.flatMap { ["--consent", $0] }
                guard run(arguments) == 0 else { fail("\(verb) \(subject) failed") }
                acknowledge(ack)
            }
        }
    case "rotate":
        for i in 0..<1_000 {
            let receipt = try ledger.rotateKey(protection: .insecurePlaintext, actor: "torture")
            _ = try ledger.execute(give("\(prefix)-k\(i)"))
            acknowledge("rotation \(receipt.seq) \(prefix)-k\(i)")
        }
    case "publish":
        for i in 0..<10_000 {
            guard try ledger.publish(Torture.catalog(version: "\(prefix).\(i)"), actor: "torture") != nil else { fail("publication \(i) appended nothing") }
            acknowledge("version \(prefix).\(i)")
        }
    case "service":
        try serviceWriter(dir: dir, prefix: prefix)
    case "erase":
        for i in 0..<10_000 {
            let subject = "\(prefix)-e\(i)"
            _ = try ledger.execute(give(subject))
            _ = try ledger.erase(subject, actor: "dpo")
            acknowledge(subject)
        }
    default:
        fail("unknown writer kind \(kind)")
    }
}

/// Starts a process with its output and errors to /dev/null; its pid, nil if it cannot start.
func spawnQuietly(_ arguments: [String]) -> pid_t? {
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    var pid: pid_t = 0
    guard posix_spawn(&pid, arguments[0], &actions, nil, argv, environ) == 0 else { return nil }
    return pid
}

/// Runs a process to its end; its exit status (-1 if it could not start or was killed).
func run(_ arguments: [String]) -> Int32 {
    guard let pid = spawnQuietly(arguments) else { return -1 }
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    return (status & 0x7F) == 0 ? (status >> 8) & 0xFF : -1
}

/// The service kind's writer: starts the service on the ledger (in this process group, so the
/// driver's kill takes it too) and sends it one `activate` per subject from 16 threads at once,
/// each acknowledged once the service answered 200 (it answers only after the commit).
func serviceWriter(dir: String, prefix: String) throws {
    guard let service = getenv("CONSENT_TORTURE_SERVICE").map({ String(cString: $0) }) else { fail("the service kind needs --service PATH") }
    let key = dir + ".token.key"
    let subjects = (0..<16).map { "\(prefix)-s\($0)" }
    let tokens = subjects.map { String(output([service, "token", "--subject", $0, "--token-key", key]).split(separator: "\n").first ?? "") }
    guard tokens.allSatisfy({ !$0.isEmpty }) else { fail("consent-service token gave no token") }
    let port = freePort()
    guard let pid = spawnQuietly([service, "serve", "--store", dir, "--port", String(port), "--token-key", key, "--insecure-plaintext-key"]) else { fail("cannot start \(service)") }
    let started = monotonic()
    while post(port: port, path: "/v1/principal", token: tokens[0], body: nil) == nil {
        guard monotonic() - started < 20 else { fail("the service did not answer on port \(port)") }
        usleep(20_000)
    }
    let lock = Mutex(())
    onThreads(subjects.count) { t in
        let status = post(port: port, path: "/v1/subjects/\(subjects[t])/features/timeline/activate", token: tokens[t], body: #"{"consents":["required","optional-a"]}"#)
        if status == 200 { lock.withLock { _ in acknowledge(subjects[t]) } }
    }
    kill(pid, SIGTERM)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
}

/// A port nobody listens on.
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// One HTTP/1.1 request to 127.0.0.1 (POST with a body, GET without); the response's status,
/// or nil when the connection failed.
func post(port: Int, path: String, token: String, body: String?) -> Int? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: UInt16(port).bigEndian, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
    let connected = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard connected == 0 else { return nil }
    let request = "\(body == nil ? "GET" : "POST") \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nContent-Type: application/json\r\nContent-Length: \(body?.utf8.count ?? 0)\r\nConnection: close\r\n\r\n\(body ?? "")"
    var sent = 0
    let bytes = Array(request.utf8)
    while sent < bytes.count {
        let n = bytes[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        sent += n
    }
    let text = String(decoding: readToEnd(fd).prefix(32), as: UTF8.self)
    guard text.hasPrefix("HTTP/1.1 "), let code = Int(text.dropFirst(9).prefix(3)) else { return nil }
    return code
}

/// Starts `arguments` with its standard output into a pipe; nil if it cannot start. With
/// `ownGroup`, in a process group of its own, so that a kill of the group takes the children
/// it starts too (a `consentctl` in flight dies with its writer, as in a power cut).
func spawnReading(_ arguments: [String], ownGroup: Bool = false) -> (pid: pid_t, output: Int32)? {
    var pipe: [Int32] = [0, 0]
    pipe.withUnsafeMutableBufferPointer { _ = Glibc.pipe($0.baseAddress!) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
    posix_spawn_file_actions_addclose(&actions, pipe[0])
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    if ownGroup {
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
    }
    var pid: pid_t = 0
    let started = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
    close(pipe[1])
    guard started == 0 else { close(pipe[0]); return nil }
    return (pid, pipe[0])
}

/// What a descriptor gives until its end (or an error).
func readToEnd(_ fd: Int32) -> [UInt8] {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = read(fd, &chunk, chunk.count)
        if n <= 0 { break }
        bytes += chunk[0..<n]
    }
    return bytes
}

/// A process's standard output (empty if it fails).
func output(_ arguments: [String]) -> String {
    guard let (pid, fd) = spawnReading(arguments) else { return "" }
    let bytes = readToEnd(fd)
    close(fd)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    return String(decoding: bytes, as: UTF8.self)
}

enum Torture {
    /// The seed catalogue with timeline's `required` consent at `version`.
    static func catalog(version: String) -> Catalog {
        let features = SeedCatalog.catalog.features.map { f in
            Feature(code: f.code, key: f.key, names: f.names, consents: f.consents.map { c in
                ConsentDefinition(code: c.code, names: c.names, isRequired: c.isRequired, link: c.link, version: f.key == "timeline" && c.code == "required" ? version : c.version)
            })
        }
        return try! Catalog(features: features)
    }
}

// MARK: - Driver

struct Round {
    let acknowledged: [String]
    /// Whether the driver killed the writer after its first acknowledgement, and the writer died
    /// of that kill (not of an error of its own, nor of a hang the driver gave up on).
    let killedAsPlanned: Bool
    /// Whether the writer finished all its work, and exited 0, before the kill came.
    let finished: Bool
    let status: Int32
}

/// Starts `arguments`, waits for its first line of output, lets it run `delay` microseconds
/// more, kills it and returns what it acknowledged. `subject` turns an output line into the
/// subject it acknowledges.
/// Which file `subjects.map` is (its inode): a compaction replaces it with a new one.
func mapFile(_ dir: String) -> UInt64 {
    var st = stat()
    return stat(dir + "/subjects.map", &st) == 0 ? UInt64(st.st_ino) : 0
}

func killRound(_ arguments: [String], delay: UInt32, subject: (Substring) -> String?) -> Round {
    // A process group of its own, killed whole.
    guard let (pid, outputFD) = spawnReading(arguments, ownGroup: true) else { fail("cannot start \(arguments[0])") }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    var killed = false, hung = false
    let started = monotonic()
    while true {
        if !killed {
            var poller = pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)
            // No acknowledgement within 20 s: a writer that hangs. Kill it; the round fails.
            if poll(&poller, 1, 100) == 0 {
                if monotonic() - started > 20 { kill(-pid, SIGKILL); killed = true; hung = true }
                continue
            }
        }
        let n = read(outputFD, &buffer, buffer.count)
        if n <= 0 { break }
        output += buffer[0..<n]
        if !killed, output.contains(0x0A) {
            usleep(delay)
            kill(-pid, SIGKILL)
            killed = true
        }
    }
    close(outputFD)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    // Only whole lines: a line cut by the kill acknowledges nothing.
    let text = String(decoding: output, as: UTF8.self)
    var lines = text.split(separator: "\n", omittingEmptySubsequences: true)
    if !text.hasSuffix("\n"), !lines.isEmpty { lines.removeLast() }
    // WIFSIGNALED and WTERMSIG, which Swift does not import.
    let diedOfKill = (status & 0x7F) == SIGKILL
    return Round(acknowledged: lines.compactMap(subject), killedAsPlanned: killed && !hung && diedOfKill, finished: !hung && status == 0, status: status)
}

func monotonic() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// The checks after each kill. Returns the number of events in the log.
func check(dir: String, acknowledged: [String], round: Int) throws -> Int {
    let ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
    let report = try ledger.verify()
    for subject in acknowledged {
        let events = try ledger.report(for: subject).events.count
        guard events == 2 else { fail("round \(round): \(subject) was acknowledged but has \(events) event(s) in the log") }
    }
    let replay = try ledger.loadAll()
    for (ref, state) in replay.subjects {
        let given = state.consents.values.filter(\.isGiven).count
        guard given == 2 else { fail("round \(round): subject \(ref.value) has \(given) consent(s) given, not the 2 of one whole command") }
    }
    guard replay.eventCount == 1 + 2 * replay.subjects.count, report.events == replay.eventCount else {
        fail("round \(round): \(replay.eventCount) events for \(replay.subjects.count) subjects")
    }
    return replay.eventCount
}

/// The checks after each kill for the kinds whose commands differ. Returns the number of
/// events in the log.
func check(kind: String, dir: String, acknowledged: [String], round: Int) throws -> Int {
    var ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
    var report: VerificationReport
    do {
        report = try ledger.verify()
    } catch ConsentError.integrity(let failure) where kind == "erase" && failure.problem.contains("the erasure was cut short") {
        // The erasure in flight committed its event, and the kill came before its record was
        // destroyed: running it again finishes it, as the message says.
        let inFlight = "r\(round)-e\(acknowledged.count)"
        _ = try ledger.erase(inFlight, actor: "dpo")
        ledger = try Ledger.open(store: FileLedgerStore(directory: dir))
        report = try ledger.verify()
    }
    let replay = try ledger.loadAll()
    switch kind {
    case "cli":
        for line in acknowledged {
            let parts = line.split(separator: " ")
            let events = try ledger.report(for: String(parts[0])).events.count
            guard events == (parts.count == 2 ? 3 : 2) || (parts.count == 1 && events == 3) else {
                fail("round \(round): '\(line)' was acknowledged but the subject has \(events) event(s)")
            }
        }
        for (ref, state) in replay.subjects {
            let given = state.consents.values.filter(\.isGiven).count, all = state.consents.count
            guard (given == 2 && all == 2) || (given == 1 && all == 2) else {
                fail("round \(round): subject \(ref.value) has \(given) of \(all) consents given: not the state of whole commands")
            }
        }
    case "rotate":
        for line in acknowledged {
            let subject = String(line.split(separator: " ")[2])
            guard try ledger.report(for: subject).events.count == 2 else { fail("round \(round): '\(line)' was acknowledged but its command is missing") }
        }
        let rotations = report.keys.periods.count - 1
        guard rotations >= acknowledged.count else { fail("round \(round): \(acknowledged.count) rotations acknowledged, \(rotations) in the log") }
        // The key file holds the key in force: a rotation cut short is finished by this writer.
        _ = try Ledger.open(store: FileLedgerStore(directory: dir)).execute(give("check-r\(round)"))
    case "publish":
        let versions = Set(try ledger.catalogHistory().compactMap { $0.catalog.feature(named: "timeline")?.consent(code: "required")?.version })
        for line in acknowledged where !versions.contains(String(line.dropFirst("version ".count))) {
            fail("round \(round): '\(line)' was acknowledged but is not in the log")
        }
    case "erase":
        for subject in acknowledged where try ledger.subjectRef(for: subject) != nil {
            fail("round \(round): \(subject)'s erasure was acknowledged but its record remains")
        }
        for (ref, state) in replay.subjects where state.erasedAt == nil {
            guard state.consents.values.filter(\.isGiven).count == 2 else { fail("round \(round): subject \(ref.value) is neither erased nor given whole") }
        }
    default:
        fail("no check for \(kind)")
    }
    let final = try Ledger.open(store: FileLedgerStore(directory: dir)).verify()
    return final.events
}

func option(_ name: String, _ args: [String]) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    return args[i + 1]
}

func selfPath() -> String {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    return String(decoding: buffer[0..<max(0, n)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

let args = Array(CommandLine.arguments.dropFirst())
if args.first == "write", args.count == 4 {
    do { try writer(kind: args[1], dir: args[2], prefix: args[3]) } catch { fail("writer: \(error)") }
    exit(0)
}
if args.contains("--help") {
    print("usage: consent-torture [--kind group|batched|apply|cli|rotate|publish|erase|service|all] [--kills 200] [--dir DIR] [--seed N] [--service PATH/consent-service]")
    exit(0)
}
let kills = Int(option("--kills", args) ?? "200") ?? 200
let allKinds = ["group", "batched", "apply", "cli", "rotate", "publish", "erase", "service"]
if let service = option("--service", args) { setenv("CONSENT_TORTURE_SERVICE", service, 1) }
// `all` takes the service kind only when the service's binary is given.
let kinds = (option("--kind", args) ?? "all") == "all" ? allKinds.filter { $0 != "service" || option("--service", args) != nil } : [option("--kind", args)!]
guard kinds.allSatisfy(allKinds.contains) else { fail("--kind must be one of \(allKinds.joined(separator: ", ")) or all") }
let base = option("--dir", args) ?? "/tmp/consent-torture"
guard base.hasPrefix("/"), base.split(separator: "/").count >= 2, !base.contains("'"), !base.contains("..") else {
    fail("--dir must be an absolute path at least two levels deep, without quotes or '..'")
}
srandom(UInt32(option("--seed", args) ?? "") ?? UInt32(time(nil) & 0xFFFF))
let consentctl = String(selfPath().dropLast("consent-torture".count)) + "consentctl"
var total = 0
for kind in kinds {
    let dir = "\(base)/\(kind)"
    _ = system("rm -rf '\(dir)' && mkdir -p '\(base)'")
    do {
        _ = try Ledger.create(store: FileLedgerStore(directory: dir), catalog: SeedCatalog.catalog, name: "torture.example/\(kind)", keyProtection: .insecurePlaintext)
    } catch {
        fail("cannot create \(dir): \(error)")
    }
    var acknowledged = 0
    var events = 1
    var finishedFirst = 0
    // Rounds in which subjects.map was replaced by a compact copy (a new file).
    var mapReplaced = 0
    for round in 0..<kills {
        let mapBefore = mapFile(dir)
        // Up to 30 ms after the first acknowledgement: the writers are in the middle of commits.
        let delay = UInt32(random() % 30_000)
        let result: Round
        if kind == "apply" {
            let file = "\(base)/apply-commands.jsonl"
            let lines = (0..<2000).map { "{\"subject\":\"r\(round)-\($0)\",\"feature\":\"timeline\",\"give\":[\"required\",\"optional-a\"]}" }
            let handle = fopen(file, "w")
            fputs(lines.joined(separator: "\n") + "\n", handle)
            fclose(handle)
            result = killRound([consentctl, "--ledger", dir, "apply", file], delay: delay) { line in
                // {"events":[..],"line":N,"ok":true}: line N gives "r<round>-<N-1>".
                guard line.contains("\"ok\":true"), let at = line.firstRange(of: "\"line\":") else { return nil }
                return Int(line[at.upperBound...].prefix { $0.isNumber }).map { "r\(round)-\($0 - 1)" }
            }
        } else {
            result = killRound([selfPath(), "write", kind, dir, "r\(round)"], delay: delay) { String($0) }
        }
        if result.finished { finishedFirst += 1 }
        guard result.killedAsPlanned || result.finished, !result.acknowledged.isEmpty else {
            fail("\(kind), round \(round): the writer did not run until the kill (wait status \(result.status), \(result.acknowledged.count) acknowledged): it failed or hung")
        }
        do {
            events = ["group", "batched", "apply", "service"].contains(kind)
                ? try check(dir: dir, acknowledged: result.acknowledged, round: round)
                : try check(kind: kind, dir: dir, acknowledged: result.acknowledged, round: round)
        } catch {
            fail("\(kind), round \(round): after the kill the ledger fails: \(error)")
        }
        acknowledged += result.acknowledged.count
        if mapFile(dir) != mapBefore { mapReplaced += 1 }
    }
    acknowledge("consent-torture: \(kind): \(kills - finishedFirst) kills survived (\(finishedFirst) writers finished first); \(acknowledged) acknowledged commands all present; verify passed after every kill; \(events) events in the end; the subject map was compacted in \(mapReplaced) round(s)")
    total += kills - finishedFirst
    _ = system("rm -rf '\(dir)'")
}
acknowledge("consent-torture: \(total) kills in all, nothing acknowledged lost")
