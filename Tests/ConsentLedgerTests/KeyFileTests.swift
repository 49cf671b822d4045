import ConsentDomain
import Foundation
import Synchronization
import Testing
@testable import ConsentLedger
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

#if canImport(Glibc)
import Glibc
#endif

/// The signing key file of `Spec/key-file.md`: sealed under a passphrase with Argon2id and
/// XSalsa20-Poly1305, checked member by member, unlocked only when a write needs the key.
/// `Spec/vectors/key-file/` is rebuilt here byte for byte (CONSENTLEDGER_UPDATE_VECTORS=1
/// rewrites it after a deliberate format change).
@Suite struct KeyFileTests {
    static let vectors = packageRoot + "/Spec/vectors/key-file"
    static let passphrase = "correct horse battery staple"
    /// Argon2id's floor: the tests that are not about the vector need no 64 MiB per unlock.
    static let fast = PassphraseHardness.minimum

    static func secret(_ text: String) -> SecretBytes { SecretBytes(copying: Array(text.utf8)) }

    /// Salt `10 11 … 1f`, then nonce `20 21 … 37`: the vector's fixed "random" bytes.
    static func fixedRandom() -> (Int) -> [UInt8] {
        let next = Mutex<UInt8>(0x10)
        return { count in
            next.withLock { start in
                defer { start &+= UInt8(count) }
                return (0..<count).map { start &+ UInt8($0) }
            }
        }
    }

    static func vectorFile() throws -> [UInt8] {
        try SigningKeyFile.encrypted(SodiumSigner(seed: vectorSeed)!, passphrase: secret(passphrase), hardness: .interactive, random: fixedRandom())
    }

    static func read(_ bytes: [UInt8]) throws -> SigningKeyFile.Contents {
        try SigningKeyFile.read(SecretBytes(copying: bytes), location: "test.key")
    }

    static func unlock(_ bytes: [UInt8], _ passphrase: String) throws -> SodiumSigner {
        guard case .encrypted(let sealed) = try read(bytes) else { throw ConsentError.invalidRequest("not encrypted") }
        return try sealed.unlock(passphrase: secret(passphrase), location: "test.key")
    }

    /// Rewrites one member of an encrypted key file's JSON.
    static func edit(_ bytes: [UInt8], _ change: (inout [String: JSONValue]) -> Void) throws -> [UInt8] {
        var object = try #require(try CanonicalJSON.parse(Array(bytes.dropLast()), canonical: true).objectValue)
        change(&object)
        return CanonicalJSON.serialize(.object(object)) + [0x0A]
    }

    /// The negative vectors: a change to the vector file, the passphrase tried, and what must
    /// happen: `wrong-passphrase` (the box does not open), `not-its-key` (it opens, but the seed
    /// is another key's) or `malformed` (refused before any Argon2id work).
    static let negatives: [(name: String, passphrase: String, expect: String, change: @Sendable ([UInt8]) throws -> [UInt8])] = [
        ("wrong-passphrase", "correct horse battery stapler", "wrong-passphrase", { $0 }),
        ("flipped-box-byte", passphrase, "wrong-passphrase", { b in try edit(b) { o in
            var box = Base64.decode(o["box"]!.stringValue!)!; box[20] ^= 1; o["box"] = .string(Base64.encode(box)) } }),
        ("changed-salt", passphrase, "wrong-passphrase", { b in try edit(b) { o in
            var kdf = o["kdf"]!.objectValue!; kdf["salt"] = .string(Base64.encode([UInt8](repeating: 0, count: 16))); o["kdf"] = .object(kdf) } }),
        ("changed-opslimit", passphrase, "wrong-passphrase", { b in try edit(b) { o in
            var kdf = o["kdf"]!.objectValue!; kdf["opslimit"] = .int(3); o["kdf"] = .object(kdf) } }),
        ("other-public-key", passphrase, "not-its-key", { b in try edit(b) { o in
            o["publicKey"] = .string(SodiumSigner(seed: Array(vectorSeed.reversed()))!.publicKey.hex) } }),
        ("memlimit-too-large", passphrase, "malformed", { b in try edit(b) { o in
            var kdf = o["kdf"]!.objectValue!; kdf["memlimit"] = .int(1 << 40); o["kdf"] = .object(kdf) } }),
        ("opslimit-zero", passphrase, "malformed", { b in try edit(b) { o in
            var kdf = o["kdf"]!.objectValue!; kdf["opslimit"] = .int(0); o["kdf"] = .object(kdf) } }),
        ("other-algorithm", passphrase, "malformed", { b in try edit(b) { o in
            var kdf = o["kdf"]!.objectValue!; kdf["algorithm"] = .string("argon2i13"); o["kdf"] = .object(kdf) } }),
        ("unknown-member", passphrase, "malformed", { b in try edit(b) { o in o["comment"] = .string("x") } }),
        ("version-2", passphrase, "malformed", { b in try edit(b) { o in o["version"] = .int(2) } }),
        ("short-nonce", passphrase, "malformed", { b in try edit(b) { o in o["nonce"] = .string(Base64.encode([UInt8](repeating: 1, count: 12))) } }),
        ("not-canonical", passphrase, "malformed", { b in Array(String(decoding: b, as: UTF8.self).replacingOccurrences(of: ",", with: ", ").utf8) }),
        ("over-long", passphrase, "malformed", { b in b + [UInt8](repeating: 0x20, count: 4096) }),
    ]

    static func outcome(_ bytes: [UInt8], _ passphrase: String) -> String {
        do {
            _ = try unlock(bytes, passphrase)
            return "unlocked"
        } catch ConsentError.keyLocked {
            return "wrong-passphrase"
        } catch ConsentError.integrity(let failure) where failure.problem.contains("does not give the public key") {
            return "not-its-key"
        } catch ConsentError.integrity(let failure) where failure.problem.contains("is not a signing key file") {
            return "malformed"
        } catch {
            return "other: \(error)"
        }
    }

    @Test func theVectorIsRebuiltByteForByteAndUnlocksToTheTestKey() throws {
        let file = try Self.vectorFile()
        let update = getenv("CONSENTLEDGER_UPDATE_VECTORS") != nil
        if update {
            try? FileManager.default.createDirectory(atPath: Self.vectors + "/negative", withIntermediateDirectories: true)
            writeBytes(file, to: Self.vectors + "/encrypted.key")
            writeBytes(Array((Hex.encode(vectorSeed) + "\n").utf8), to: Self.vectors + "/plaintext.key")
            var cases: [JSONValue] = []
            for negative in Self.negatives {
                writeBytes(try negative.change(file), to: Self.vectors + "/negative/\(negative.name).key")
                cases.append(.object(["file": .string("negative/\(negative.name).key"), "passphrase": .string(negative.passphrase), "expect": .string(negative.expect)]))
            }
            let expected: JSONValue = .object([
                "encrypted": .object(["file": .string("encrypted.key"), "passphrase": .string(Self.passphrase), "seed": .string(Hex.encode(vectorSeed)),
                                      "publicKey": .string(SodiumSigner(seed: vectorSeed)!.publicKey.hex)]),
                "plaintext": .object(["file": .string("plaintext.key"), "seed": .string(Hex.encode(vectorSeed))]),
                "negative": .array(cases),
            ])
            writeBytes(CanonicalJSON.serialize(expected) + [0x0A], to: Self.vectors + "/expected.json")
        }
        let committed = readBytes(Self.vectors + "/encrypted.key") == file
        #expect(committed, "Spec/vectors/key-file/encrypted.key is what the code writes")
        let signer = try Self.unlock(file, Self.passphrase)
        #expect(signer.publicKey == SodiumSigner(seed: vectorSeed)!.publicKey)
        #expect(signer.withSeed { Array($0) } == vectorSeed)
        guard case .plaintext(let plain) = try Self.read(readBytes(Self.vectors + "/plaintext.key")) else {
            Issue.record("plaintext.key is not read as a plaintext key")
            return
        }
        #expect(plain.publicKey == signer.publicKey)
    }

    @Test(arguments: negatives.map(\.name))
    func aChangedKeyFileIsRefusedForItsReason(name: String) throws {
        let negative = try #require(Self.negatives.first { $0.name == name })
        let bytes = try negative.change(try Self.vectorFile())
        let committed = readBytes(Self.vectors + "/negative/\(name).key") == bytes
        #expect(committed, "Spec/vectors/key-file/negative/\(name).key is what the change gives")
        #expect(Self.outcome(bytes, negative.passphrase) == negative.expect)
    }

    @Test func aPlaintextKeyFileIsReadWithoutAPassphrase() throws {
        let signer = SodiumSigner.generate()
        let file = SigningKeyFile.plaintext(signer)
        guard case .plaintext(let read) = try SigningKeyFile.read(file, location: "k") else {
            Issue.record("read as encrypted")
            return
        }
        #expect(read.publicKey == signer.publicKey)
        // A line end and spaces after the digits are tolerated, anything else is not.
        #expect(throws: ConsentError.self) { try Self.read(Array(("X" + String(repeating: "0", count: 63)).utf8)) }
        #expect(throws: ConsentError.self) { try Self.read(Array(String(repeating: "0", count: 62).utf8)) }
    }

    @Test(arguments: [0, 1, 7])
    func aNewKeysPassphraseHasAtLeastEightBytes(length: Int) {
        #expect(throws: ConsentError.invalidRequest("the passphrase is too short: a new key's passphrase has at least 8 bytes")) {
            try SigningKeyFile.encrypted(.generate(), passphrase: Self.secret(String(repeating: "p", count: length)), hardness: Self.fast, random: { Sodium().randomBytes($0) })
        }
    }

    @Test func aRefusedPassphraseCreatesNoLedger() throws {
        let path = LedgerPropertyTests.folder("short-passphrase")
        defer { removeFolder(path) }
        #expect(throws: ConsentError.self) {
            try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "short", keyProtection: .passphrase(Self.secret("short"), hardness: Self.fast))
        }
        #expect(PosixFile.kind(of: path + "/ledger.jsonl") == .missing)
        #expect(PosixFile.kind(of: path + "/secret.key") == .missing)
    }

    /// Reads never unlock; the first write asks for the passphrase once, and the ledger keeps
    /// the key for every later write. A wrong passphrase changes nothing.
    @Test func onlyWritesUnlockAndALedgerUnlocksOnce() throws {
        let path = LedgerPropertyTests.folder("unlock-once")
        defer { removeFolder(path) }
        _ = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "unlock", keyProtection: .passphrase(Self.secret(Self.passphrase), hardness: Self.fast))
        let key = readBytes(path + "/secret.key")
        #expect(key.first == UInt8(ascii: "{"))
        #expect(!String(decoding: key, as: UTF8.self).contains(Hex.encode(try FileKeyStore(path: path + "/secret.key").unlockSigner(passphrase: { Self.secret(Self.passphrase) }).withSeed { Array($0) })))

        let asked = Mutex(0)
        let counting: PassphraseSource = { asked.withLock { $0 += 1 }; return Self.secret(Self.passphrase) }
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path), passphrase: counting)
        _ = try ledger.report(for: "alice")
        _ = try ledger.verify()
        #expect(asked.withLock { $0 } == 0, "reads never ask")
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["optional-a"])))
        #expect(asked.withLock { $0 } == 1, "the first write asks, the second does not")

        let before = readLog(path)
        for source: PassphraseSource? in [nil, { Self.secret("not the passphrase") }] {
            let locked = try Ledger.open(store: FileLedgerStore(directory: path), passphrase: source)
            #expect(throws: ConsentError.self) {
                try locked.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
            }
            #expect(readLog(path) == before, "a locked key appends nothing")
        }
    }

    @Test func aPlaintextKeyIsSealedInPlaceAndKeepsItsPublicKey() throws {
        let path = LedgerPropertyTests.folder("reprotect")
        defer { removeFolder(path) }
        let ledger = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "reprotect", keyProtection: .insecurePlaintext)
        let publicKey = ledger.publicKey
        try ledger.reprotectKey(.passphrase(Self.secret(Self.passphrase), hardness: Self.fast))
        let keys = FileKeyStore(path: path + "/secret.key")
        #expect(try keys.isEncrypted() == true)
        #expect(try keys.unlockSigner(passphrase: { Self.secret(Self.passphrase) }).publicKey == publicKey)
        var st = stat()
        #expect(stat(path + "/secret.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
        let reopened = try Ledger.open(store: FileLedgerStore(directory: path), passphrase: { Self.secret(Self.passphrase) })
        try reopened.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        #expect(try reopened.verify().events == 2)
    }

    /// A stand-in for an HSM or KMS: signs through a key the ledger never sees, and counts.
    final class ExternalSigner: EventSigner {
        let inner: SodiumSigner
        let signatures = Mutex(0)
        init(_ inner: SodiumSigner) { self.inner = inner }
        var publicKey: PublicKey { inner.publicKey }
        func sign(_ message: UnsafeRawBufferPointer) -> Signature {
            signatures.withLock { $0 += 1 }
            return inner.sign(message)
        }
    }

    @Test func aSignerOfYourOwnSignsWithoutAnyKeyFile() throws {
        let path = LedgerPropertyTests.folder("external-signer")
        defer { removeFolder(path) }
        let created = try Ledger.create(store: FileLedgerStore(directory: path), catalog: SeedCatalog.catalog, name: "external", keyProtection: .insecurePlaintext)
        let hsm = ExternalSigner(try created.keys!.unlockSigner(passphrase: nil))
        #expect(unlink(path + "/secret.key") == 0, "no key on disk at all")
        let ledger = try Ledger.open(store: FileLedgerStore(directory: path), signer: hsm)
        try ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        #expect(hsm.signatures.withLock { $0 } >= 2, "the event and the head were signed through it")
        #expect(try ledger.verify().events == 2)
        #expect(throws: ConsentError.self) { try ledger.reprotectKey(.insecurePlaintext) }
        #expect(throws: ConsentError.self) { try Ledger.open(store: FileLedgerStore(directory: path), signer: SodiumSigner.generate()) }
    }
}
