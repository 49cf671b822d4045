import ArgumentParser
import ConsentLedger

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where the signing key's passphrase comes from. Never an argument: a command line is seen by
/// every user of the machine (`ps`) and kept in shell histories.
///
/// In order: `--passphrase-file FILE`, `--passphrase-fd N`, `$CONSENTCTL_PASSPHRASE`, then a
/// prompt on the terminal (without echo). A file or descriptor's one trailing line end is
/// dropped.
struct PassphraseOptions {
    static let environmentVariable = "CONSENTCTL_PASSPHRASE"
    /// A passphrase is a line, not a document.
    static let maximumBytes = 4096

    var file: String?
    var fd: Int32?

    var sourceHelp: String {
        "give --passphrase-file FILE or --passphrase-fd N, set $\(Self.environmentVariable), or run it in a terminal to be asked"
    }

    /// Reads the passphrase once. `prompt` is what the terminal shows, `missing` the error when
    /// there is no source at all; `confirm` asks twice at a prompt (a new passphrase).
    func read(prompt: String, missing: String, confirm: Bool = false, missingIsUsage: Bool = false) throws -> SecretBytes {
        let passphrase: SecretBytes
        if let file {
            passphrase = try Self.readAll(path: file)
        } else if let fd {
            passphrase = try Self.readAll(fd: fd, what: "descriptor \(fd)")
        } else if let value = environment(Self.environmentVariable) {
            passphrase = SecretBytes(copying: Array(value.utf8))
        } else {
            do {
                passphrase = try Self.prompt(prompt, missing: "\(missing): \(sourceHelp)")
            } catch ConsentError.keyLocked(let message) where missingIsUsage {
                throw ConsentError.invalidRequest(message)
            }
            if confirm {
                let again = try Self.prompt("Again, to confirm: ", missing: "no terminal to confirm the passphrase")
                guard again.constantTimeEquals(passphrase) else { throw ConsentError.invalidRequest("the two passphrases differ; nothing was created") }
            }
        }
        guard passphrase.count > 0 else { throw ConsentError.invalidRequest("the passphrase is empty") }
        return passphrase
    }

    /// A source the ledger calls when (and only when) a write needs the key.
    func source(for location: String) -> PassphraseSource {
        let options = self
        return { try options.read(prompt: "Passphrase for the signing key \(location): ", missing: "the signing key \(location) is encrypted and no passphrase was given") }
    }

    static func readAll(path: String) throws -> SecretBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            throw ConsentError.invalidRequest("cannot read the passphrase file \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ConsentError.invalidRequest("cannot read the passphrase file \(path): \(String(cString: strerror(errno)))") }
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            break
        case S_IFIFO:
            // A pipe, as process substitution gives (--passphrase-file <(pass show clinic)):
            // wait a while for its writer, never forever.
            var waiting = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&waiting, 1, Self.pipeTimeoutMilliseconds) == 1 else {
                throw ConsentError.invalidRequest("the passphrase pipe \(path) gave nothing within \(Self.pipeTimeoutMilliseconds / 1000) seconds")
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        default:
            throw ConsentError.invalidRequest("the passphrase file \(path) is neither a regular file nor a pipe")
        }
        return try readAll(fd: fd, what: path)
    }

    /// How long a passphrase pipe may take to deliver.
    static let pipeTimeoutMilliseconds: Int32 = 30_000

    /// Reads to the end (at most ``maximumBytes``), dropping one trailing "\n" or "\r\n".
    static func readAll(fd: Int32, what: String) throws -> SecretBytes {
        var buffer = [UInt8](repeating: 0, count: maximumBytes + 1)
        defer { zeroize(&buffer) }
        var count = 0
        while count < buffer.count {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ConsentError.invalidRequest("cannot read the passphrase from \(what): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            count += n
        }
        guard count <= maximumBytes else { throw ConsentError.invalidRequest("the passphrase from \(what) is longer than \(maximumBytes) bytes") }
        if count > 0, buffer[count - 1] == 0x0A { count -= 1 }
        if count > 0, buffer[count - 1] == 0x0D { count -= 1 }
        return SecretBytes(copying: buffer[0..<count])
    }

    /// Asks on the controlling terminal with echo off, and restores the terminal afterwards.
    /// Only when standard input is a terminal: a script or a pipe never waits for a prompt.
    static func prompt(_ text: String, missing: String) throws -> SecretBytes {
        guard isatty(0) == 1 else { throw ConsentError.keyLocked(missing) }
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { throw ConsentError.keyLocked(missing) }
        defer { close(tty) }
        var saved = termios()
        let isTerminal = tcgetattr(tty, &saved) == 0
        if isTerminal {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            _ = tcsetattr(tty, TCSAFLUSH, &quiet)
        }
        defer { if isTerminal { _ = tcsetattr(tty, TCSAFLUSH, &saved) } }
        _ = text.withCString { write(tty, $0, strlen($0)) }
        var line = [UInt8](repeating: 0, count: maximumBytes + 1)
        defer { zeroize(&line) }
        var count = 0
        var byte: UInt8 = 0
        while count <= maximumBytes {
            let n = Glibc.read(tty, &byte, 1)
            if n < 0, errno == EINTR { continue }
            if n <= 0 || byte == 0x0A { break }
            line[count] = byte
            count += 1
        }
        byte = 0
        guard count <= maximumBytes else { throw ConsentError.invalidRequest("the passphrase is longer than \(maximumBytes) bytes") }
        if count > 0, line[count - 1] == 0x0D { count -= 1 }
        return SecretBytes(copying: line[0..<count])
    }
}

/// How a new key file is sealed: `--kdf`, or `--insecure-plaintext-key` for tests and demos.
struct NewKeyOptions: ParsableArguments {
    @Option(help: "How hard the passphrase is made to guess: interactive (Argon2id over 64 MiB; the default) or moderate (256 MiB; each unlock takes about a second).")
    var kdf: KeyHardness = .interactive

    @Flag(help: "Store the secret key unencrypted, for tests and demos only: anyone who can read the file can sign as this ledger.")
    var insecurePlaintextKey = false

    /// The protection asked for; a passphrase is read from `passphrase`'s sources (asked twice
    /// at a prompt), and none at all is a usage error.
    func protection(_ passphrase: PassphraseOptions) throws -> KeyProtection {
        if insecurePlaintextKey { return .insecurePlaintext }
        let secret = try passphrase.read(
            prompt: "New passphrase for the signing key: ",
            missing: "a new key file is sealed under a passphrase, and none was given (--insecure-plaintext-key stores it unencrypted, for tests and demos)",
            confirm: true, missingIsUsage: true)
        return .passphrase(secret, hardness: kdf.hardness)
    }

    var summary: String { insecurePlaintextKey ? "UNENCRYPTED (tests and demos only)" : "sealed under your passphrase (\(kdf.hardness))" }
}

/// `--kdf`: how hard a new passphrase is made to guess.
enum KeyHardness: String, ExpressibleByArgument, CaseIterable {
    case interactive, moderate

    var hardness: PassphraseHardness {
        switch self {
        case .interactive: return .interactive
        case .moderate: return .moderate
        }
    }
}
