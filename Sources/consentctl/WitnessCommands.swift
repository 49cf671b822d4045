import ArgumentParser
import ConsentLedger

// MARK: - witness keygen, witness show

struct WitnessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "witness",
        abstract: "Make and show a witness's key (C2SP tlog-cosignature).",
        discussion: """
            A witness cosigns a ledger's checkpoints after checking that each one extends the \
            last it cosigned, so the ledger cannot show different histories to different \
            auditors. The witness server is consent-witness (in Samples/ConsentService); these \
            commands make its key and print the key that auditors pin with --witness.
            """,
        subcommands: [WitnessKeygen.self, WitnessShow.self]
    )
}

/// The witness's name and key file, shared by keygen and show.
struct WitnessKeyOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The witness's name, a schema-less URL such as witness.example.org/w1 (no spaces or '+').", valueName: "NAME"))
    var name: String

    @Option(help: ArgumentHelp("The witness's key file.", valueName: "FILE"))
    var key: String

    func cosignerKey(_ publicKey: PublicKey) throws -> CosignerKey {
        do {
            return try CosignerKey(name: name, publicKey: publicKey)
        } catch {
            throw ConsentError.invalidRequest("--name: \(error)")
        }
    }
}

struct WitnessKeygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Make a witness key file and print its verifier key.",
        discussion: """
            Writes a new Ed25519 key to --key (mode 0600, sealed under a passphrase as the \
            ledger's key is: Spec/key-file.md) and prints the witness's verifier key, \
            NAME+ID+BASE64 with signature type 0x04. Give that to auditors: they pass it to \
            verify-export, verify-state and verify-consistency with --witness.

            Example:
              consentctl --passphrase-file witness.pass witness keygen --name witness.example.org/w1 --key witness.key
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var witness: WitnessKeyOptions
    @OptionGroup(title: "The key file") var newKey: NewKeyOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let signer = SodiumSigner.generate()
            let key = try witness.cosignerKey(signer.publicKey)
            let store = FileKeyStore(path: absolute(witness.key))
            try store.save(signer, protection: try newKey.protection(root.passphrase))
            if newKey.insecurePlaintextKey {
                printError("warning: the witness key is stored unencrypted in \(store.keyLocation) (--insecure-plaintext-key): for tests and demos only")
            }
            if output.isJSON {
                printJSON(.object(["ok": .bool(true), "witnessKey": .string(key.text), "name": .string(key.name), "keyFile": .string(store.keyLocation)]))
            } else {
                printError("Wrote the witness key to \(store.keyLocation), \(newKey.summary). Its verifier key, for auditors' --witness:")
                print(key.text)
            }
        }
    }
}

struct WitnessShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print a witness's verifier key (NAME+ID+BASE64, type 0x04).",
        discussion: "Reads only the public half of the key file: no passphrase is needed."
    )

    @OptionGroup var witness: WitnessKeyOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let store = FileKeyStore(path: absolute(witness.key))
            let file: SecretBytes
            do {
                file = try store.loadKeyFile()
            } catch ConsentError.notFound(.signingKey, _) {
                throw ConsentError.notFound(.file, "no witness key file at \(store.keyLocation) (make one with consentctl witness keygen)")
            }
            let publicKey: PublicKey
            switch try SigningKeyFile.read(file, location: store.keyLocation) {
            case .encrypted(let sealed): publicKey = sealed.publicKey
            case .plaintext(let signer): publicKey = signer.publicKey
            }
            let key = try witness.cosignerKey(publicKey)
            if output.isJSON {
                printJSON(.object(["witnessKey": .string(key.text), "name": .string(key.name)]))
            } else {
                print(key.text)
            }
        }
    }
}

// MARK: - checkpoint --witness-url

/// `checkpoint --witness-url URL --witness KEY …`: the witnesses to submit the checkpoint to.
struct WitnessSubmissionOptions: ParsableArguments {
    @Option(name: .customLong("witness-url"), help: ArgumentHelp(
        "Submit the checkpoint to the witness at URL (its submission prefix; POST URL/add-checkpoint) and add its cosignature. Repeat for each witness, each with its --witness key in the same order.",
        valueName: "URL"))
    var urls: [String] = []

    @Option(name: .customLong("witness"), help: ArgumentHelp(
        "The key of the witness at the --witness-url in the same position (NAME+ID+BASE64, or a file holding it): only cosignatures that verify with it are kept.",
        valueName: "KEY"))
    var keys: [String] = []

    @Option(name: .customLong("witness-timeout"), help: ArgumentHelp("Seconds to wait for each witness (1 to 600).", valueName: "SECONDS"))
    var timeout: Int = 30

    func validate() throws {
        guard urls.count == keys.count else {
            throw ValidationError("give one --witness KEY for each --witness-url, in the same order (\(urls.count) URL\(urls.count == 1 ? "" : "s"), \(keys.count) key\(keys.count == 1 ? "" : "s"))")
        }
        guard (1...600).contains(timeout) else { throw ValidationError("--witness-timeout must be between 1 and 600 seconds") }
    }

    func endpoints() throws -> [WitnessEndpoint] {
        try zip(urls, keys).map { url, key in WitnessEndpoint(url: url, key: try readCosignerKey(key, option: "--witness")) }
    }
}
