import ArgumentParser
import ConsentDomain
import ConsentLedger

struct CatalogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog",
        abstract: "Show the catalogue in force, or publish a new version of it.",
        discussion: """
            A new version keeps the features and consents and changes policy versions, links or \
            names. Grants of a changed version become outdated: a changed required consent makes \
            its feature inactive for every subject who gave it, until they consent again.

            Examples:
              consentctl catalog show --format json > catalog.json
              consentctl catalog publish catalog-v2.json --dry-run
              consentctl catalog publish catalog-v2.json
            """,
        subcommands: [CatalogShow.self, CatalogPublish.self],
        defaultSubcommand: CatalogShow.self
    )
}

struct CatalogShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show the catalogue in force: features, consents, links and policy versions.",
        discussion: """
            With --format json it prints the catalogue file itself (canonical JSON), which \
            'consentctl catalog publish' reads back: edit it and publish it as the next version.
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reporting(json: output.isJSON) {
            let current = try root.openLedger().catalogHistory().last!.catalog
            if output.isJSON {
                Swift.print(String(decoding: CatalogCodec.canonicalBytes(current), as: UTF8.self))
                return
            }
            for (i, f) in current.features.enumerated() {
                if i > 0 { print("") }
                print("\(f.name) (key \(f.key), code \(f.code))")
                var table = Table()
                for c in f.consents {
                    table.add(["  " + c.code, c.isRequired ? "required" : "optional", "v" + c.version, c.name, c.link])
                }
                table.print()
            }
        }
    }
}

struct CatalogPublish: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
        abstract: "Publish a new version of the catalogue as a signed event.",
        discussion: """
            FILE is a catalogue in the format 'consentctl catalog show --format json' prints. \
            Policy versions are 1 to 32 letters, digits, '.', '-', '_' or '+', beginning and \
            ending with a letter or digit. Publishing the catalogue in force changes nothing and \
            succeeds. --dry-run prints what would change, and how many subjects' grants would \
            become outdated, without appending anything.

            Examples:
              consentctl catalog publish catalog-v2.json --dry-run
              consentctl catalog publish catalog-v2.json --actor dpo@clinic.example
            """
    )

    @ParentCommand var root: ConsentCtl
    @OptionGroup var output: OutputOptions

    @Argument(help: ArgumentHelp("The new catalogue.", valueName: "FILE"))
    var file: String

    @Flag(help: "Show what would change and append nothing.")
    var dryRun = false

    @Option(help: "Who publishes.")
    var actor: String = "consentctl"

    func run() throws {
        try reporting(json: output.isJSON) {
            let ledger = try root.openLedger()
            let bytes: [UInt8]
            do {
                bytes = try LocalFile.read(file)
            } catch {
                throw ConsentError.invalidRequest("cannot read catalogue \(file): \(error)")
            }
            let catalog: Catalog
            do throws(CatalogError) {
                catalog = try CatalogCodec.decode(bytes)
            } catch {
                throw ConsentError.invalidCatalog(CatalogError(entry: "\(file): \(error.entry)", problem: error.problem))
            }
            let preview = try ledger.previewPublication(catalog)
            if dryRun || preview.changes.isEmpty {
                printPreview(preview, published: nil)
                return
            }
            let event = try ledger.publish(catalog, actor: actor)
            printPreview(preview, published: event)
        }
    }

    func printPreview(_ preview: PublicationPreview, published event: LedgerEvent?) {
        var hash: String?
        if case .catalogPublished(let p)? = event?.payload { hash = p.catalogHash }
        if output.isJSON {
            var members: [String: JSONValue] = [
                "ok": .bool(true),
                "published": .bool(event != nil),
                "dryRun": .bool(dryRun),
                "subjectsOutdated": .int(Int64(preview.subjectsOutdated)),
                "changes": .array(preview.changes.map { c in
                    .object([
                        "feature": .string(c.feature), "consent": .string(c.consent),
                        "oldVersion": .string(c.oldVersion), "newVersion": .string(c.newVersion),
                        "linkChanged": .bool(c.linkChanged), "namesChanged": .bool(c.namesChanged),
                        "subjectsOutdated": .int(Int64(c.subjectsOutdated)),
                    ])
                }),
            ]
            if let event { members["seq"] = .int(Int64(event.seq)) }
            if let hash { members["catalog"] = .string(hash) }
            printJSON(.object(members))
            return
        }
        guard !preview.changes.isEmpty else {
            print("Nothing to publish: \(file) is the catalogue in force.")
            return
        }
        if let event, let hash {
            print("Published catalogue version \(hash.prefix(16)) at seq \(event.seq):")
        } else {
            print("Dry run: publishing \(file) would change (nothing was appended):")
        }
        var table = Table()
        for c in preview.changes {
            var what = c.oldVersion == c.newVersion ? "v\(c.newVersion) (unchanged)" : "v\(c.oldVersion) -> v\(c.newVersion)"
            if c.linkChanged { what += ", new link" }
            if c.namesChanged { what += ", new names" }
            let outdated = c.subjectsOutdated == 1 ? "1 subject's grant outdated" : "\(c.subjectsOutdated) subjects' grants outdated"
            table.add(["  \(c.feature)/\(c.consent)", what, outdated])
        }
        table.print()
        let verb = event == nil ? "would become" : "became"
        print("\(preview.subjectsOutdated) subject\(preview.subjectsOutdated == 1 ? "" : "s") \(verb) outdated on at least one consent.")
    }
}
