#if PostgreSQL
import LedgerFormat
import LedgerStorage
import TransparencyLog
import PostgresNIO

/// Where a ledger lives in PostgreSQL, parsed from a URL:
///
/// ```
/// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&sslmode=MODE&sslrootcert=FILE]
/// ```
///
/// One ledger per PostgreSQL schema (default `consentledger`), so one database can hold
/// several (one per tenant, or one per test). `sslmode` says how the server is checked:
/// `verify-full` (the default: TLS, the certificate chain and the host name checked),
/// `verify-ca` (TLS, the chain checked, not the name), `require-unverified` (TLS, nothing
/// checked: anyone on the path can read what passes, so it must be asked for by name) or
/// `disable` (plain TCP, for a Unix-socket-like loopback only). libpq's `prefer` and `require`
/// are refused: they do not check the certificate, and their names do not say so.
/// `sslrootcert=FILE` (or `$PGSSLROOTCERT`) names the PEM file of a private CA to trust instead
/// of the system's roots.
public struct PostgresLedgerAddress: Sendable, Hashable, CustomStringConvertible {
    /// Whether and how the connection uses TLS, with libpq's `sslmode` names.
    public enum TLSMode: String, Sendable, Hashable, CaseIterable {
        /// Plain TCP.
        case disable
        /// TLS without checking the certificate: an attacker in the middle reads everything.
        case requireUnverified = "require-unverified"
        /// TLS with the certificate chain checked, not the host name.
        case verifyCA = "verify-ca"
        /// TLS with the certificate chain and the host name checked (the default).
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
    /// A PEM file of the CA certificates to trust instead of the system's roots.
    public let rootCertificates: String?

    /// Whether `text` names a PostgreSQL ledger rather than a folder.
    public static func isURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// Parses a `postgres://` URL; the error says which part is wrong. Without `sslrootcert`,
    /// `$PGSSLROOTCERT` names the CA file, as for libpq.
    public init(url text: String) throws(ConsentError) {
        func bad(_ problem: String) -> ConsentError {
            .invalidRequest("PostgreSQL URL '\(Self.redacted(text))': \(problem) (expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&sslmode=verify-full|verify-ca|require-unverified|disable&sslrootcert=FILE])")
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
        var tlsMode = TLSMode.verifyFull
        var rootCertificates = getenv("PGSSLROOTCERT").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let value = Self.percentDecoded(parts[1]) else { throw bad("'\(pair)' is not NAME=VALUE") }
            switch parts[0] {
            case "schema": schema = value
            case "sslmode":
                if value == "prefer" || value == "require" || value == "allow" {
                    throw bad("sslmode=\(value) does not check the server's certificate, so anyone on the path could read the ledger's traffic; use verify-full (the default; sslrootcert=FILE for a private CA), or, knowingly, sslmode=require-unverified")
                }
                guard let mode = TLSMode(rawValue: value) else { throw bad("sslmode '\(value)' is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))") }
                tlsMode = mode
            case "sslrootcert": rootCertificates = value
            default: throw bad("unknown parameter '\(parts[0])' (known: schema, sslmode, sslrootcert)")
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
        self.rootCertificates = rootCertificates
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
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

    /// Whether TLS is on without any check of the server: callers warn about it.
    public var isUnverified: Bool { tlsMode == .requireUnverified }

    /// The TLS settings the address asks for; nil for `sslmode=disable`.
    private func tlsConfiguration() throws -> TLSConfiguration? {
        if tlsMode == .verifyFull, Self.isIPAddress(host) {
            // With an address there is no name to send or check (SNI carries names only).
            throw ConsentError.invalidRequest("\(self): sslmode=verify-full checks the server's name, so give the host by the name its certificate holds, not the address \(host) (or use sslmode=verify-ca, which checks the certificate chain only)")
        }
        var config = TLSConfiguration.makeClientConfiguration()
        if let rootCertificates {
            do {
                config.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(rootCertificates))
            } catch {
                throw ConsentError.invalidRequest("sslrootcert \(rootCertificates): cannot read PEM certificates (\(error))")
            }
        }
        switch tlsMode {
        case .disable: return nil
        case .requireUnverified: config.certificateVerification = .none
        case .verifyCA: config.certificateVerification = .noHostnameVerification
        case .verifyFull: config.certificateVerification = .fullVerification
        }
        return config
    }

    /// The pool's configuration: `PostgresClient` makes the TLS context itself when it first
    /// connects.
    func clientConfiguration() throws -> PostgresClient.Configuration {
        let tls = try tlsConfiguration()
        return PostgresClient.Configuration(host: host, port: port, username: username, password: password, database: database, tls: tls.map { .require($0) } ?? .disable)
    }

    /// The configuration of one connection of its own (the store's probe, which says why the
    /// pool cannot connect).
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        guard let tls = try tlsConfiguration() else {
            return PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: .disable)
        }
        do {
            return PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: .require(try NIOSSLContext(configuration: tls)))
        } catch {
            throw ConsentError.storage("cannot set up TLS for \(self): \(error)")
        }
    }
}
#endif
