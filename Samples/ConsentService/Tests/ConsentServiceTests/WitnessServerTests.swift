import ConsentLedger
@testable import ConsentWitnessCore
import Foundation
import Hummingbird
import HummingbirdTesting
import LogWitness
import Logging
import Testing

/// consent-witness over HTTP: POST /add-checkpoint answers with C2SP tlog-witness's status
/// codes and content types, and the cosignature it returns verifies.
@Suite struct WitnessServerTests {
    struct Fixture {
        let folder: String
        let ledger: Ledger
        let witness: Witness

        init() throws {
            folder = NSTemporaryDirectory() + "consent-witness-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            ledger = try Ledger.create(store: FileLedgerStore(directory: folder + "/ledger"), catalog: SeedCatalog.catalog, name: "witness.test/ledger", keyProtection: .insecurePlaintext)
            let signer = SodiumSigner.generate()
            witness = try Witness(key: try CosignerKey(name: "witness.test/w1", publicKey: signer.publicKey), signer: signer,
                                  logs: [try ledger.verifierKey], state: try WitnessStateStore(directory: folder + "/state"), clock: { 1_800_000_000 })
        }

        var app: some ApplicationProtocol { makeWitnessApplication(witness: witness, port: 0, logger: Logger(label: "test")) }

        func body(old: Int64, proof: [Digest] = [], note: String? = nil) throws -> ByteBuffer {
            ByteBuffer(bytes: AddCheckpointRequest(oldSize: old, proof: proof, note: try note ?? ledger.signedCheckpoint().note).body)
        }
    }

    @Test func addCheckpointAnswersWithTheSpecsStatusCodes() async throws {
        let f = try Fixture()
        defer { try? FileManager.default.removeItem(atPath: f.folder) }
        try f.ledger.execute(LedgerCommand(subjectID: "alice", request: .give(feature: "timeline", consents: ["required"])))
        let (checkpoint, note) = try f.ledger.signedCheckpoint()
        let other = try Ledger.create(store: MemoryLedgerStore(name: "other"), catalog: SeedCatalog.catalog, name: "witness.test/other", keyProtection: .insecurePlaintext)
        try await f.app.test(.router) { client in
            // 400: not a request at all.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: ByteBuffer(string: "hello")) { response in
                #expect(response.status == .badRequest)
            }
            // 404: a ledger this witness does not witness.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: 0, note: try other.signedCheckpoint().note)) { response in
                #expect(response.status == .notFound)
            }
            // 403: this ledger's name, another key.
            let impostor = SodiumSigner.generate()
            let forged = SignedNote.sign(checkpoint.text, key: try NoteVerifierKey(name: checkpoint.origin, publicKey: impostor.publicKey), signer: impostor)
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: 0, note: forged)) { response in
                #expect(response.status == .forbidden)
            }
            // 200 with a cosignature line that verifies.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: 0)) { response in
                #expect(response.status == .ok)
                let line = String(buffer: response.body)
                #expect(line.hasPrefix("— witness.test/w1 ") && line.hasSuffix("\n"))
                let cosigners = try Cosignature.verifiedCosigners(of: note + line, keys: [f.witness.key])
                #expect(cosigners[f.witness.key] == 1_800_000_000)
            }
            // 409 with the witness's size as text/x.tlog.size.
            try f.ledger.execute(LedgerCommand(subjectID: "bob", request: .give(feature: "timeline", consents: ["required"])))
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: 0)) { response in
                #expect(response.status == .conflict)
                #expect(response.headers[.contentType] == "text/x.tlog.size")
                #expect(String(buffer: response.body) == "\(checkpoint.size)\n")
            }
            // 422: a proof from the witness's size that does not lead to the new checkpoint.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: checkpoint.size, proof: [Digest(bytes: [UInt8](repeating: 1, count: 32))!])) { response in
                #expect(response.status == .unprocessableContent)
            }
            // 400: an old size above the checkpoint's.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: try f.body(old: 1000)) { response in
                #expect(response.status == .badRequest)
            }
            // A request larger than any real one.
            try await client.execute(uri: "/add-checkpoint", method: .post, body: ByteBuffer(bytes: [UInt8](repeating: 0x41, count: AddCheckpointRequest.maximumBytes + 10))) { response in
                #expect(response.status == .badRequest || response.status == .contentTooLarge)
            }
            // GET / names the witness and its key.
            try await client.execute(uri: "/", method: .get) { response in
                #expect(String(buffer: response.body).contains(f.witness.key.text))
            }
        }
    }
}
