import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// `consentctl` against a world that does not play along: a lock another process holds, and
/// strings in a bundle made to look like the tool's own output or to drive the terminal.
@Suite(.serialized) struct HostileInputTests {
    typealias CLI = ConsentctlTests

    static func ledger(_ dir: String) throws -> String {
        let ledger = dir + "/ledger"
        #expect(try CLI.run(["init", "--insecure-plaintext-key", "--name", "clinic.example/hostile"], ledger: ledger).status == 0)
        #expect(try CLI.run(["give", "--subject", "alice", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        return ledger
    }

    /// Runs `flock MODE lock cat` and waits until it holds the lock; it lets go when `release`
    /// closes cat's standard input.
    static func holdLock(_ ledger: String, exclusive: Bool) throws -> (holder: Process, release: () -> Void) {
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [exclusive ? "-x" : "-s", ledger + "/lock", "cat"]
        let input = Pipe()
        holder.standardInput = input
        holder.standardOutput = FileHandle.nullDevice
        try holder.run()
        let release = {
            try? input.fileHandleForWriting.close()
            holder.waitUntilExit()
        }
        // Held once /proc/locks lists the holder's pid.
        for _ in 0..<200 {
            if let locks = try? String(contentsOfFile: "/proc/locks", encoding: .utf8), locks.contains(" \(holder.processIdentifier) ") { return (holder, release) }
            usleep(10_000)
        }
        release()
        throw CocoaError(.fileLocking)
    }

    /// `flock -s lock sleep 20` made `give` wait for ever. Now it waits --lock-timeout seconds,
    /// then fails with exit code 3, naming the process that holds the lock; nothing changes.
    @Test(arguments: [true, false])
    func aHeldLockFailsAfterTheTimeoutNamingTheHolder(_ exclusive: Bool) throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let (holder, release) = try Self.holdLock(ledger, exclusive: exclusive)
        defer { release() }
        let before = CLI.snapshot(ledger)
        let started = Date()
        let give = try CLI.run(["--lock-timeout", "0.5", "give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        let waited = Date().timeIntervalSince(started)
        #expect(give.status == 3, "\(give.stderr)")
        #expect(give.stderr.contains("is locked by process \(holder.processIdentifier) (flock, \(exclusive ? "writing" : "reading"))"), "\(give.stderr)")
        // An exclusive holder stops the command's first read already.
        #expect(give.stderr.contains("stayed locked for 0.5 s") && give.stderr.contains(exclusive ? "nothing was read" : "nothing was written"), "\(give.stderr)")
        #expect(give.stderr.contains("--lock-timeout"))
        #expect(waited >= 0.5 && waited < 8)
        #expect(CLI.snapshot(ledger) == before)
        // Readers share the lock with readers only.
        let status = try CLI.run(["--lock-timeout", "0.2", "status", "--subject", "alice"], ledger: ledger)
        #expect(status.status == (exclusive ? 3 : 0), "\(status.stderr)")
    }

    @Test(arguments: ["-1", "nan", "1e9", "soon"])
    func aLockTimeoutThatIsNotASpanOfSecondsIsAUsageError(_ value: String) throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let run = try CLI.run(["--lock-timeout", value, "status", "--subject", "alice"], ledger: ledger)
        #expect(run.status == 64, "\(run.stderr)")
        #expect(run.stderr.contains("lock-timeout"), "\(run.stderr)")
    }

    /// Whether this machine lets the tests mount a small tmpfs (root with CAP_SYS_ADMIN): the
    /// full-disk and read-only cases need a real file system of their own.
    static let canMountTmpfs: Bool = {
        let probe = NSTemporaryDirectory() + "consentctl-mount-probe-" + UUID().uuidString
        guard mkdir(probe, 0o700) == 0 else { return false }
        defer { rmdir(probe) }
        guard mount("tmpfs", probe, "tmpfs", 0, "size=64k") == 0 else { return false }
        umount(probe)
        return true
    }()

    /// On a 200 KB tmpfs, once the disk was full, `status` for any subject and `checkpoint`
    /// failed with exit 3 (reads repaired derived files, which needs writing). Reads now work on
    /// a full disk and on a read-only mount; a write fails with exit 3 and changes nothing, and
    /// leaves no temporary file; a checkpoint that would need recording is not handed out.
    @Test(.enabled(if: canMountTmpfs, "needs to mount a tmpfs"))
    func aFullDiskOrAReadOnlyMountStopsWritesNotReads() throws {
        let dir = CLI.temporaryFolder()
        defer { umount(dir); try? FileManager.default.removeItem(atPath: dir) }
        #expect(mount("tmpfs", dir, "tmpfs", 0, "size=512k") == 0)
        let ledger = try Self.ledger(dir)
        #expect(try CLI.run(["give", "--subject", "bob", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        #expect(try CLI.run(["checkpoint"], ledger: ledger).status == 0)
        // Fill the disk.
        let filler = dir + "/filler"
        let fd = open(filler, O_WRONLY | O_CREAT, 0o600)
        let block = [UInt8](repeating: 0, count: 4096)
        while write(fd, block, block.count) > 0 {}
        close(fd)
        // Writes fit in the last pages' slack for a while; the first that does not fails whole.
        var refused: CLI.Run?
        for i in 0..<60 where refused == nil {
            let before = CLI.snapshot(ledger)
            let give = try CLI.run(["give", "--subject", "filler-\(i)", "--feature", "timeline", "--consent", "required"], ledger: ledger)
            guard give.status != 0 else { continue }
            refused = give
            #expect(CLI.snapshot(ledger) == before, "the refused write changed the ledger: \(give.stderr)")
        }
        #expect(refused?.status == 3 && refused?.stderr.contains("No space left on device") == true, "\(refused?.stderr ?? "every write fitted")")
        #expect(try FileManager.default.contentsOfDirectory(atPath: ledger).filter { $0.contains(".tmp-") }.isEmpty)
        let full = CLI.snapshot(ledger)
        for reading in [["status", "--subject", "alice"], ["history", "--subject", "bob"], ["verify"], ["export", "--subject", "alice", "--out", "-"], ["report"]] {
            let run = try CLI.run(reading, ledger: ledger)
            #expect(run.status == 0, "\(reading[0]) on a full disk: \(run.stderr)")
        }
        #expect(CLI.snapshot(ledger) == full, "a read wrote")
        // Room again: the write goes through, and the ledger verifies.
        unlink(filler)
        #expect(try CLI.run(["give", "--subject", "carol", "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        #expect(try CLI.run(["verify"], ledger: ledger).status == 0)
        // Read-only: reads work; a write and a checkpoint that needs recording fail with exit 3.
        #expect(mount("tmpfs", dir, "tmpfs", UInt(MS_REMOUNT | MS_RDONLY), "size=512k") == 0)
        defer { _ = mount("tmpfs", dir, "tmpfs", UInt(MS_REMOUNT), "size=512k") }
        let readOnly = CLI.snapshot(ledger)
        for reading in [["status", "--subject", "carol"], ["verify"], ["subjects", "list"]] {
            let run = try CLI.run(reading, ledger: ledger)
            #expect(run.status == 0, "\(reading[0]) on a read-only mount: \(run.stderr)")
        }
        let checkpoint = try CLI.run(["checkpoint"], ledger: ledger)
        #expect(checkpoint.status == 3 && checkpoint.stdout.isEmpty && checkpoint.stderr.contains("was not handed out"), "\(checkpoint.stderr)")
        let readOnlyGive = try CLI.run(["give", "--subject", "dave", "--feature", "timeline", "--consent", "required"], ledger: ledger)
        #expect(readOnlyGive.status == 3 && readOnlyGive.stderr.contains("Read-only file system"), "\(readOnlyGive.stderr)")
        #expect(CLI.snapshot(ledger) == readOnly)
    }

    /// A subject id with a character that reorders text (U+202E) or a C1 control: human output
    /// shows it escaped, JSON output stays JSON (the terminal escapes must not reach it).
    @Test func jsonOutputStaysJSONWhateverTheIdHolds() throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let id = "eve\u{202E}gnp.exe\u{85}"
        #expect(try CLI.run(["give", "--subject", id, "--feature", "timeline", "--consent", "required"], ledger: ledger).status == 0)
        let human = try CLI.run(["status", "--subject", id], ledger: ledger)
        #expect(human.status == 0 && human.stdout.contains("eve\\u{202E}gnp.exe\\u{85}") && !human.stdout.contains("\u{202E}"), "\(human.stdout)")
        let json = try CLI.run(["status", "--subject", id, "--json"], ledger: ledger)
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)")
        #expect(parsed["subject"] as? String == id)
    }

    /// A newline in a bundle's `verifierKey` printed a line of its own, such as a fake
    /// "OK: 99 events", and escape sequences reached the terminal. Now they are shown escaped.
    @Test func aBundleCannotForgeALineOrDriveTheTerminal() throws {
        let dir = CLI.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        #expect(try CLI.run(["export", "--subject", "alice", "--out", dir + "/alice.json"], ledger: ledger).status == 0)
        let key = try CLI.run(["key", "show"], ledger: ledger).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // The bundle's own bytes with one member changed (canonical JSON escapes of a newline,
        // ESC and BEL), so that the reader gets as far as comparing the keys.
        var bundle = try String(contentsOfFile: dir + "/alice.json", encoding: .utf8)
        let member = try #require(bundle.range(of: "\"verifierKey\":\"" + key + "\""))
        bundle.replaceSubrange(member, with: "\"verifierKey\":\"x\\nOK: 99 events verified\\u001b[2J\\u001b]0;pwned\\u0007\"")
        try bundle.write(toFile: dir + "/forged.json", atomically: true, encoding: .utf8)
        let run = try CLI.run(["verify-export", dir + "/forged.json", "--key", key], ledger: nil)
        #expect(run.status == 2, "\(run.stderr)")
        #expect(!(run.stdout + run.stderr).contains("\nOK: 99"))
        #expect(!(run.stdout + run.stderr).contains("\u{1B}"))
        #expect(run.stderr.contains("x\\nOK: 99 events verified\\u{1B}[2J"), "\(run.stderr)")
    }
}
