#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO

/// Where a ledger lives in PostgreSQL, parsed from a URL:
///
/// ```
/// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&sslmode=MODE]
/// ```
///
/// One ledger per PostgreSQL schema (default `consentledger`), so one database can hold
/// several (one per tenant, or one per test). `sslmode` follows libpq: `disable`, `prefer`
/// (the default: TLS when the server offers it, certificate not checked), `require` (TLS,
/// certificate not checked) and `verify-full` (TLS, certificate and host name checked).
public struct PostgresLedgerAddress: Sendable, Hashable, CustomStringConvertible {
    /// Whether and how the connection uses TLS, with libpq's `sslmode` names.
    public enum TLSMode: String, Sendable, Hashable {
        /// Plain TCP.
        case disable
        /// TLS when the server offers it, without checking its certificate (the default).
        case prefer
        /// TLS or no connection, without checking the certificate.
        case require
        /// TLS with the certificate and the host name checked against the system's roots.
        case verifyFull = "verify-full"
    }

    /// The server's host name or address (IPv6 without brackets).
    public let host: String
    /// The server's TCP port (5432 unless given).
    public let port: Int
    /// The PostgreSQL role to log in as.
    public let username: String
    /// The password, if the URL has one; never shown in ``description``.
    public let password: String?
    /// The database that holds the ledger's schema.
    public let database: String
    /// The schema that holds the ledger: one ledger per schema.
    public let schema: String
    /// Whether and how to use TLS.
    public let tlsMode: TLSMode

    /// Whether `text` names a PostgreSQL ledger rather than a folder.
    public static func isURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// Parses a `postgres://` URL; the error says which part is wrong.
    public init(url text: String) throws(ConsentError) {
        func bad(_ problem: String) -> ConsentError {
            .invalidRequest("PostgreSQL URL '\(Self.redacted(text))': \(problem) (expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&sslmode=disable|prefer|require|verify-full])")
        }
        guard let schemeEnd = text.range(of: "://"), Self.isURL(text) else { throw bad("it does not start with postgres://") }
        var rest = Substring(text[schemeEnd.upperBound...])
        var query: Substring = ""
        if let q = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: q)...]
            rest = rest[..<q]
        }
        guard let slash = rest.firstIndex(of: "/") else { throw bad("no /DATABASE") }
        let authority = rest[..<slash]
        guard let database = Self.percentDecoded(rest[rest.index(after: slash)...]) else { throw bad("bad %-escape in the database name") }
        guard !database.isEmpty else { throw bad("no database name") }
        guard let at = authority.lastIndex(of: "@") else { throw bad("no USER@ before the host") }
        let userInfo = authority[..<at]
        let hostPort = authority[authority.index(after: at)...]
        let user: Substring
        var password: String?
        if let colon = userInfo.firstIndex(of: ":") {
            user = userInfo[..<colon]
            guard let decoded = Self.percentDecoded(userInfo[userInfo.index(after: colon)...]) else { throw bad("bad %-escape in the password") }
            password = decoded
        } else {
            user = userInfo
        }
        guard let username = Self.percentDecoded(user), !username.isEmpty else { throw bad("no user name") }
        var host = String(hostPort)
        var port = 5432
        if let colon = hostPort.lastIndex(of: ":"), !hostPort.hasSuffix("]") {
            guard let p = Int(hostPort[hostPort.index(after: colon)...]), (1...65535).contains(p) else { throw bad("the port is not a number from 1 to 65535") }
            port = p
            host = String(hostPort[..<colon])
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw bad("no host") }
        var schema = "consentledger"
        var tlsMode = TLSMode.prefer
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let value = Self.percentDecoded(parts[1]) else { throw bad("'\(pair)' is not NAME=VALUE") }
            switch parts[0] {
            case "schema": schema = value
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else { throw bad("sslmode '\(value)' is not disable, prefer, require or verify-full") }
                tlsMode = mode
            default: throw bad("unknown parameter '\(parts[0])' (known: schema, sslmode)")
            }
        }
        guard Self.isIdentifier(schema) else {
            throw bad("schema '\(schema)' must be 1 to 63 lowercase letters, digits or _, start with a letter or _, and not start with pg_")
        }
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.schema = schema
        self.tlsMode = tlsMode
    }

    /// The URL without its password, for messages.
    public var description: String {
        "postgres://\(username)@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)?schema=\(schema)"
    }

    /// A schema name of lowercase letters, digits and _: it is written into SQL text (quoted),
    /// so only these are allowed. `pg_` names are PostgreSQL's own.
    static func isIdentifier(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !name.hasPrefix("pg_") else { return false }
        guard (1...63).contains(bytes.count), let first = bytes.first, first == 0x5F || (0x61...0x7A).contains(first) else { return false }
        return bytes.allSatisfy { $0 == 0x5F || (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) }
    }

    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var i = text.utf8.startIndex
        let utf8 = text.utf8
        while i < utf8.endIndex {
            let byte = utf8[i]
            if byte == 0x25 {
                let h = utf8.index(after: i)
                guard h < utf8.endIndex, utf8.index(after: h) < utf8.endIndex,
                    let value = UInt8(String(decoding: [utf8[h], utf8[utf8.index(after: h)]], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
                i = utf8.index(h, offsetBy: 2)
            } else {
                bytes.append(byte)
                i = utf8.index(after: i)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// `text` with any password replaced by `***`.
    static func redacted(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
        // The user info ends at the last @ of the authority, as the parser reads it (a password
        // may hold an unescaped @).
        let rest = text[schemeEnd.upperBound...]
        let authority = rest[..<(rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(text[at...])
    }

    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        do {
            switch tlsMode {
            case .disable:
                tls = .disable
            case .prefer, .require:
                var config = TLSConfiguration.makeClientConfiguration()
                config.certificateVerification = .none
                let context = try NIOSSLContext(configuration: config)
                tls = tlsMode == .prefer ? .prefer(context) : .require(context)
            case .verifyFull:
                tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            }
        } catch {
            throw ConsentError.storage("cannot set up TLS for \(self): \(error)")
        }
        return PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: tls)
    }
}
#endif
