import ArgumentParser
import ConsentDomain

extension GrantEvidence.Channel: ExpressibleByArgument {}

/// How a consent was obtained, recorded on every consent a `give` appends (`GrantEvidence`).
struct EvidenceOptions: ParsableArguments {
    @Option(help: ArgumentHelp("When the subject agreed, if earlier than now (a paper form signed yesterday): a time, or a date meaning the start of that day. Never in the future, never before the subject's previous event about the feature. Rules and --at use the recorded time; this one is shown beside it.", valueName: "TIME"))
    var effectiveAt: String?

    @Option(help: ArgumentHelp("Where the consent was given.", valueName: "CHANNEL"))
    var channel: GrantEvidence.Channel?

    @Option(help: ArgumentHelp("The language of the notice the subject saw, as a BCP 47 tag (de, en-GB).", valueName: "TAG"))
    var noticeLanguage: String?

    @Option(help: ArgumentHelp("A reference to the document or scan that records the consent (up to 512 bytes). It can be personal data: the log holds it sealed under the subject's key, which erase destroys.", valueName: "REF"))
    var evidence: String?

    /// The evidence, its time parsed; the rules check the rest when the command runs.
    func grantEvidence() throws -> GrantEvidence {
        GrantEvidence(
            effectiveAt: try effectiveAt.map { try parseTime($0, option: "--effective-at", bareDate: .startOfDay) },
            channel: channel, noticeLanguage: noticeLanguage, reference: evidence)
    }
}
