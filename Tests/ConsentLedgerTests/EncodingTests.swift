import ConsentDomain
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PropertyBased
import Synchronization
import Testing
@testable import ConsentLedger
@testable import ConsentReports
@testable import LedgerFormat
@testable import LedgerStorage
@testable import TransparencyLog

@Suite struct CanonicalJSONTests {
    @Test func serialisesPerRFC8785() {
        let value: JSONValue = .object([
            "b": .array([.int(-5), .int(0), .bool(true), .null]),
            "a": .string("quote\" back\\ nl\n tab\t bell\u{7} é € 😀 \u{7F}"),
            "\u{20AC}": .int(1), "\u{1F600}": .int(2), "\u{FB33}": .int(3),
        ])
        let text = String(decoding: CanonicalJSON.serialize(value), as: UTF8.self)
        // Keys sort by UTF-16 code units: U+1F600 (D83D DE00) sorts before U+FB33 and after U+20AC.
        #expect(text == #"{"a":"quote\" back\\ nl\n tab\t bell\u0007 é € 😀 "# + "\u{7F}" + #"","b":[-5,0,true,null],"€":1,"😀":2,"דּ":3}"#)
        #expect((try? CanonicalJSON.parse(Array(text.utf8), canonical: true)) == value)
    }

    /// A string of fewer than `count` pieces of `alphabet`, chosen by a generator seeded with `seed`.
    static func pieces(of alphabet: [String], seed: Int, fewerThan count: UInt64) -> String {
        var x = UInt64(seed) &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return (0..<Int(x % count)).map { _ in
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return alphabet[Int((x >> 33) % UInt64(alphabet.count))]
        }.joined()
    }

    /// Member names ordered by their UTF-8 bytes where that is UTF-16's order, by their UTF-16
    /// code units where it is not: always as UTF-16 orders them.
    @Test func memberNamesSortAsTheirUTF16CodeUnits() async {
        let alphabet: [String] = ["a", "b", "z", "A", "~", "\u{7F}", "é", "\u{0800}", "€", "\u{D7FF}", "\u{E000}", "\u{FB33}", "\u{FFFD}", "😀", "\u{10000}", "\u{10FFFF}"]
        let name = Gen.int(in: 0...999_999).map { Self.pieces(of: alphabet, seed: $0, fewerThan: 4) }
        await propertyCheck(count: 2000, input: zip(name, name)) { a, b in
            #expect(CanonicalJSON.utf16Less(a, b) == a.utf16.lexicographicallyPrecedes(b.utf16))
        }
    }

    /// RFC 8785's string form, one scalar at a time, as the reference for the writer (which
    /// copies runs of plain bytes in one call).
    static func referenceString(_ s: String) -> String {
        var text = "\""
        for scalar in s.unicodeScalars {
            switch scalar.value {
            case 0x22: text += "\\\""
            case 0x5C: text += "\\\\"
            case 0x08: text += "\\b"
            case 0x09: text += "\\t"
            case 0x0A: text += "\\n"
            case 0x0C: text += "\\f"
            case 0x0D: text += "\\r"
            case 0..<0x20: text += "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }

    /// Every character that is escaped, at the start, in the middle and at the end of runs of
    /// plain characters of every length up to 9, next to one another and alone.
    @Test(arguments: Array(0..<0x20) + [0x22, 0x5C])
    func anEscapedCharacterAnywhereIsWrittenAsRFC8785Says(_ code: Int) {
        let special = String(UnicodeScalar(UInt8(code)))
        for plain in ["", "a", "é€", "abcdefgh", "0123456789abcdef😀"] {
            for s in [special, special + plain, plain + special, plain + special + plain, special + special + plain + special] {
                var out: [UInt8] = []
                CanonicalJSON.writeString(s, into: &out)
                #expect(String(decoding: out, as: UTF8.self) == Self.referenceString(s), "\(Array(s.utf8))")
                #expect((try? CanonicalJSON.parse(out, canonical: true)) == .string(s))
            }
        }
    }

    @Test(arguments: [0, 1, 9, 10, 11, 99, 100, 12_345, -1, -9, -10, 999_999_999_999_999_999, 1_000_000_000_000_000_000, 9_007_199_254_740_993, .max, .min, .max - 1, .min + 1] as [Int64])
    func anIntegerIsWrittenAsItsDecimalDigits(_ value: Int64) {
        var out: [UInt8] = [0x5B]
        CanonicalJSON.writeInteger(value, into: &out)
        #expect(out == [0x5B] + Array(String(value).utf8))
    }

    @Test func writtenStringsEqualTheReferenceAndParseBack() async {
        let alphabet: [String] = ["a", "Z", " ", "\"", "\\", "\n", "\u{0}", "\u{1F}", "\u{7F}", "é", "€", "😀", "/", "abcdefghijklmnop"]
        let strings = Gen.int(in: 0...999_999).map { Self.pieces(of: alphabet, seed: $0, fewerThan: 12) }
        await propertyCheck(count: 2000, input: strings) { s in
            var out: [UInt8] = [0x5B]
            CanonicalJSON.writeString(s, into: &out)
            #expect(String(decoding: out.dropFirst(), as: UTF8.self) == Self.referenceString(s))
            #expect(out.first == 0x5B)
        }
    }

    @Test func strictParsingRejectsEveryNonCanonicalForm() {
        let rejects = [
            #"{ "a":1}"#, #"{"b":1,"a":2}"#, #"{"a":1,"a":1}"#, #"{"a":01}"#, #"{"a":-0}"#, #"{"a":1.0}"#,
            #"{"a":1e3}"#, #"{"a":"\u0041"}"#, #"{"a":"\/"}"#, #"{"a":"\u000a"}"#, #"{"a":"\u001F"}"#,
            "{\"a\":\"\u{1}\"}", #"{"a":9007199254740992}"#, #"{"a":1} "#, #"{"a":"\ud800"}"#,
        ]
        for text in rejects {
            #expect(throws: JSONParseError.self, "\(text)") { try CanonicalJSON.parse(Array(text.utf8), canonical: true) }
        }
        #expect((try? CanonicalJSON.parse(Array(#"{"a":"\u001f"}"#.utf8), canonical: true)) != nil)
        #expect((try? CanonicalJSON.parse(Array(" { \"b\" : [1, 2], \"a\": \"\\/\" } ".utf8), canonical: false)) != nil)
    }

    @Test func parseErrorsSayWhere() {
        do {
            _ = try CanonicalJSON.parse(Array("{\n  \"a\": tru\n}".utf8), canonical: false)
            Issue.record("should fail")
        } catch {
            #expect(error.line == 2 && error.column == 8)
        }
    }
}

/// The library's JSON documents go into a caller's own `Encodable` values (a service's response
/// bodies) as the same JSON: encoded with sorted members, an ASCII document's bytes are its
/// canonical bytes.
@Suite struct JSONDocumentTests {
    @Test func aDocumentEncodesAsItsCanonicalJSON() throws {
        let listing = ConsentListing(state: SubjectState(), catalog: SeedCatalog.catalog)
        let document = ListingJSON.document(listing)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let encoded = try encoder.encode(document)
        #expect(Array(encoded) == document.canonicalBytes)
        struct Wrapper: Encodable { let features: JSONDocument; let n: Int }
        let wrapped = try encoder.encode(Wrapper(features: document, n: 1))
        #expect(Array(wrapped) == Array(#"{"features":"#.utf8) + document.canonicalBytes + Array(#","n":1}"#.utf8))
        let nulls = JSONDocument(.object(["a": .null, "b": .array([.bool(true), .int(-3), .string("x\"y")])]))
        #expect(Array(try encoder.encode(nulls)) == nulls.canonicalBytes)
    }
}

@Suite struct CatalogFileTests {
    func decode(_ text: String) -> CatalogError? {
        do {
            _ = try CatalogCodec.decode(Array(text.utf8))
            return nil
        } catch {
            return error
        }
    }

    @Test func samplesCatalogueIsTheBuiltInSeedCatalogue() throws {
        let sample = try CatalogCodec.decode(readBytes(packageRoot + "/Samples/catalog.json"))
        #expect(sample == SeedCatalog.catalog)
        #expect(sample.features.map(\.key) == ["medication-management", "timeline"])
        #expect(sample.features.allSatisfy { $0.requiredConsents.count == 1 && $0.optionalConsents.count == 2 })
        #expect(sample.features.allSatisfy { f in f.consents.allSatisfy { c in Set(c.names.map(\.language)) == ["de", "en"] } })
    }

    @Test func malformedJsonSaysLineAndColumn() {
        #expect(decode("{\n \"features\": [\n  {\"code\": 1,,}\n ]\n}")?.entry == "line 3, column 14")
    }

    @Test func duplicatesAndMissingRequiredNameTheEntry() throws {
        let sample = String(decoding: readBytes(packageRoot + "/Samples/catalog.json"), as: UTF8.self)
        let dupConsent = sample.replacingOccurrences(of: "\"code\": \"optional-b\"", with: "\"code\": \"optional-a\"")
        #expect(decode(dupConsent)?.description.contains("features[0] (medication-management) consent 'optional-a'") == true)
        let dupFeature = sample.replacingOccurrences(of: "\"code\": 2,", with: "\"code\": 1,")
        #expect(decode(dupFeature)?.description == "features[1] (timeline): feature code 1 is already used by features[0]")
        let noRequired = sample.replacingOccurrences(of: "\"required\": true", with: "\"required\": false")
        #expect(decode(noRequired)?.description == "features[0] (medication-management): the feature has no required consent; every feature needs at least one")
        let unknown = sample.replacingOccurrences(of: "\"link\":", with: "\"url\":")
        #expect(decode(unknown)?.description.contains("unknown member 'url'") == true)
    }
}

@Suite struct EventCodecTests {
    @Test func lineRoundTripsAndIsItselfCanonical() throws {
        let signer = SodiumSigner(seed: vectorSeed)!
        let event = LedgerEvent(seq: 3, at: Timestamp(canonical: "2026-01-15T09:00:00.000Z")!, actor: "dr \"house\"", command: CommandSpan(first: 2, size: 2),
                                payload: .consentRevoked(ConsentRevoked(subject: SubjectRef("00112233445566778899aabbccddeeff"), feature: 2, consent: "optional-a", reason: .cascade(cause: 2))))
        let (records, _) = try HashChain().seal([event], after: .zero, signer: signer, streams: emptyStreams())
        var line = records[0].line
        #expect(line.removeLast() == 0x0A)
        #expect(try EventCodec.decode(line: line) == records[0])
        #expect(try CanonicalJSON.serialize(CanonicalJSON.parse(line, canonical: true)) == line)
    }

    /// A commit appends what the sealer returns: each entry's line, leaf hash and stream are
    /// made on the thread that signed it. Enough events that the workers sign most of them, in
    /// both formats, each entry must be exactly what its record gives.
    @Test(arguments: [1, 2])
    func aSealedEntryIsItsRecordsLineLeafHashAndStream(version: Int) throws {
        let signer = SodiumSigner(seed: vectorSeed)!
        let hasher = OpenSSLSHA256()
        let at = Timestamp(canonical: "2026-01-15T09:00:00.000Z")!
        let events = (0..<300).map { i in
            let subject = SubjectRef(String(format: "%032x", i % 7))
            return LedgerEvent(seq: UInt64(5 + i), at: at, actor: i % 2 == 0 ? "self" : "dr. \"house\"", command: CommandSpan(first: UInt64(5 + i), size: 1),
                               payload: .consentGiven(ConsentGiven(subject: subject, feature: 1 + i % 2, consent: "optional-a", version: "1.0")))
        }
        let sealer = ChainSealer(chain: HashChain(hasher: hasher), after: .zero, signer: signer, streams: version == 2 ? emptyStreams() : nil)
        for event in events { try sealer.append(event) }
        let sealed = try sealer.finish()
        #expect(sealed.entries.map(\.record.event) == events)
        for entry in sealed.entries {
            var line = entry.record.line
            #expect(line.removeLast() == 0x0A)
            #expect(entry.line == line)
            #expect(entry.line == entry.record.lineWithoutNewline)
            #expect(entry.leafHash == hasher.sha256([0] + line))
            #expect(entry.streamKey == StreamKey.of(entry.record.event.payload))
            #expect(try EventCodec.decode(line: line) == entry.record)
        }
    }

    @Test func unknownMembersAndTypesAreRefused() throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[1].dropLast(), as: UTF8.self)
        let extra = line.replacingOccurrences(of: "\"version\":\"1.0\"}", with: "\"version\":\"1.0\",\"x\":1}")
        #expect(throws: EventDecodingError(problem: "member 'x' is not part of the ledger format")) {
            try EventCodec.decode(line: Array(extra.utf8))
        }
        let ledgerMember = line.replacingOccurrences(of: "\"kid\":", with: "\"ledger\":\"l\",\"kid\":")
        // "ledger" sorts after "kid": put it in canonical order to reach the membership check.
        let ordered = ledgerMember.replacingOccurrences(of: "\"ledger\":\"l\",", with: "")
            .replacingOccurrences(of: "\"prev\":", with: "\"ledger\":\"l\",\"prev\":")
        #expect(throws: EventDecodingError(problem: "member 'ledger' does not belong to a 'consent.given' event")) {
            try EventCodec.decode(line: Array(ordered.utf8))
        }
        let future = line.replacingOccurrences(of: "\"v\":2,", with: "\"v\":3,")
        #expect(future != line)
        #expect(throws: EventDecodingError(problem: "member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)")) { try EventCodec.decode(line: Array(future.utf8)) }
    }

    /// A member name is recognised from its bytes read as two words: every name of the format,
    /// in the middle of a body (the words read in place) and at its end (read a byte at a
    /// time), whichever name came before it (the caller refuses a repeated or out-of-order
    /// one); a name one byte longer or shorter, or with its last byte changed, is none (unless
    /// it spells another name), and so is a string of 17 bytes or with an escaped quote.
    @Test(arguments: 0..<EventBodyReader.names.count)
    func everyMemberNameIsRecognisedFromItsBytes(_ index: Int) {
        let name = EventBodyReader.names[index]
        func known(_ text: [UInt8], after previous: EventBodyReader.Name? = nil) -> (Int, Int)? {
            text.withUnsafeBufferPointer { EventBodyReader.knownName(at: 0, in: $0, after: previous).map { ($0.0.rawValue, $0.end) } }
        }
        let quote = UInt8(ascii: "\"")
        let middle = [quote] + name + Array("\":1,\"zzzzzzzzzzzzzzzzzz\":1}".utf8)
        let end = [quote] + name + [quote]
        for previous in [nil, EventBodyReader.Name(rawValue: 0), EventBodyReader.Name(rawValue: index), EventBodyReader.Name(rawValue: EventBodyReader.names.count - 1)] {
            #expect(known(middle, after: previous).map { [$0.0, $0.1] } == [index, name.count + 1])
            #expect(known(end, after: previous).map { [$0.0, $0.1] } == [index, name.count + 1])
        }
        var changed = name
        changed[changed.count - 1] ^= 0x01
        for variant in [name + Array("x".utf8), Array(name.dropLast()), changed] {
            let expected = EventBodyReader.names.firstIndex(of: variant)
            #expect(known([quote] + variant + Array("\":1,\"zzzzzzzzzzzzzzzzzz\":1}".utf8))?.0 == expected, "\(String(decoding: variant, as: UTF8.self))")
            #expect(known([quote] + variant + [quote])?.0 == expected, "\(String(decoding: variant, as: UTF8.self))")
        }
        #expect(known(Array("\"compromisedSincee\":1,\"zzzzzzzzzzzzzzzzzz\":1}".utf8)) == nil)
        #expect(known(Array("\"ver\\\"sion\":1,\"zzzzzzzzzzzzzzzzzz\":1}".utf8)) == nil)
        #expect(known(Array("\"\":1,\"zzzzzzzzzzzzzzzzzz\":1}".utf8)) == nil)
    }

    /// A member name that repeats, or comes before the one it should follow, is refused with
    /// its name and offset: the names before the last one are still recognised (after the
    /// names that may follow it), so the reader can say which rule the body breaks.
    @Test(arguments: [
        (#""actor":"self","#, #""actor":"self","actor":"self","#, "duplicate member name 'actor'"),
        (#""kid":"#, #""v":2,"kid":"#, "member 'kid' is out of canonical (RFC 8785) order"),
        (#""version":"1.0"}"#, #""version":"1.0","seq":1}"#, "member 'seq' is out of canonical (RFC 8785) order"),
    ])
    func aRepeatedOrMisorderedMemberIsRefusedByName(_ case_: (String, String, String)) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[1].dropLast(), as: UTF8.self)
        let edited = line.replacingOccurrences(of: case_.0, with: case_.1)
        #expect(edited != line)
        do {
            _ = try EventCodec.decode(line: Array(edited.utf8))
            Issue.record("read a body with \(case_.2)")
        } catch {
            #expect(error.problem.contains(case_.2), "\(error.problem)")
        }
    }

    /// The type is recognised from the body's bytes; anything but one of the eight types, even
    /// one byte off or of the same length, is refused by name, as is a missing type.
    @Test(arguments: [
        (#""type":"consent.given""#, #""type":"consent.givem""#, "unknown event type 'consent.givem'"),
        (#""type":"consent.given""#, #""type":"consent.granted""#, "unknown event type 'consent.granted'"),
        (#""type":"consent.given""#, #""type":"Consent.given""#, "unknown event type 'Consent.given'"),
        (#""type":"consent.given""#, #""type":"consent.given\u0000""#, "unknown event type 'consent.given\u{00}'"),
        (#""type":"consent.given","#, "", "member 'type' is missing"),
    ])
    func onlyTheEightEventTypesAreRead(_ case_: (String, String, String)) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[1].dropLast(), as: UTF8.self)
        #expect(try EventCodec.decode(line: Array(line.utf8)).event.payload.subject != nil)
        let edited = line.replacingOccurrences(of: case_.0, with: case_.1)
        #expect(edited != line)
        #expect(throws: EventDecodingError(problem: case_.2)) { try EventCodec.decode(line: Array(edited.utf8)) }
    }

    /// Replay hands the reader the key id it last met, so that a body with the same one does not
    /// make a new string. The hint never changes what is read: a body with another key id (one
    /// digit off) reads as its own.
    @Test func aKeyIDHintNeverChangesWhatIsRead() throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[1].dropLast(), as: UTF8.self)
        let other = line.replacingOccurrences(of: #""kid":"56475aa75463474c""#, with: #""kid":"56475aa75463474d""#)
        #expect(other != line)
        let hint = EventBodyReader.KeyIDHint("56475aa75463474c")
        func read(_ text: String, _ hint: EventBodyReader.KeyIDHint?) throws -> EventBodyReader.Read {
            let (body, _) = try Array(text.utf8).withUnsafeBufferPointer { line in
                let (body, signature) = try EventCodec.splitLine(line, decodeSignature: false)
                return (Array(body), signature)
            }
            return try body.withUnsafeBufferPointer { try EventBodyReader.read($0, keyIDHint: hint) }
        }
        for text in [line, other] {
            let plain = try read(text, nil), hinted = try read(text, hint)
            #expect(hinted.keyID == plain.keyID)
            #expect(hinted.event == plain.event)
            #expect(hinted.prev == plain.prev)
        }
        #expect(try read(other, hint).keyID == "56475aa75463474d")
        #expect(try read(line, EventBodyReader.KeyIDHint("56475aa7")).keyID == "56475aa75463474c")
    }

    /// The reader takes short cuts: a member name's closing quote found a word at a time, a
    /// `prev`, subject, time or expected key id taken by its length and checked as what it must
    /// be. Whatever a body's bytes, a body it reads must be exactly the canonical encoding of
    /// what it read: one byte of a real body (every type of the vectors, the 16-byte name
    /// `compromisedSince` among them) made a quote, a backslash, a control byte, a letter or a
    /// digit is refused, or read as the body it then is.
    @Test func aBodyThatIsReadIsTheEncodingOfWhatWasRead() async throws {
        let bodies = try eventLines(of: readLog(packageRoot + "/Spec/vectors/rotated-ledger")).map { line in
            try Array(line.dropLast()).withUnsafeBufferPointer { Array(try EventCodec.splitLine($0, decodeSignature: false).body) }
        }
        #expect(bodies.count > 10)
        let replacements: [UInt8] = [0x22, 0x5C, 0x00, 0x1F, 0x7F, 0xC3, UInt8(ascii: "a"), UInt8(ascii: "z"), UInt8(ascii: "0"), UInt8(ascii: "9"), UInt8(ascii: ":"), UInt8(ascii: ",")]
        func check(_ body: [UInt8], hint: EventBodyReader.KeyIDHint?) {
            guard let read = try? body.withUnsafeBufferPointer({ try EventBodyReader.read($0, keyIDHint: hint) }) else { return }
            let encoded = EventCodec.body(of: read.event, prev: read.prev, keyID: read.keyID, version: read.version, stream: read.stream)
            #expect(encoded == body, "\(String(decoding: body, as: UTF8.self))")
        }
        let input = zip(Gen.int(in: 0..<bodies.count), Gen.int(in: 0...1_000), Gen.int(in: 0..<replacements.count))
        await propertyCheck(count: 3_000, input: input) { which, at, replacement in
            var body = bodies[which]
            body[at % body.count] = replacements[replacement]
            check(body, hint: nil)
            check(body, hint: EventBodyReader.KeyIDHint("56475aa75463474c"))
        }
        for body in bodies {
            #expect((try? body.withUnsafeBufferPointer { try EventBodyReader.read($0) }) != nil)
            check(body, hint: nil)
        }
    }

    /// Evidence members belong to a grant only, and carry checked values.
    @Test(arguments: [
        ("an unknown channel", #""cmd":"#, #""channel":"fax","cmd":"#, "member 'channel' must be one of app, portal, paper, phone, clinician"),
        ("an effective time that is not a canonical time", #""feature":"#, #""effectiveAt":"2026-01-15T09:00:03Z","feature":"#, "member 'effectiveAt' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        ("a notice language that is not a tag", #""prev":"#, #""noticeLanguage":"de_DE","prev":"#, "notice language 'de_DE' is not a BCP 47 language tag (such as 'de' or 'en-GB')"),
        ("an empty evidence reference", #""feature":"#, #""evidence":"","feature":"#, "the evidence reference is empty"),
    ])
    func evidenceMembersAreChecked(_ case_: (String, String, String, String)) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        // seq 3 (line 4): bob's grant, which has no evidence.
        var line = String(decoding: tiny[3].dropLast(), as: UTF8.self)
        #expect(!line.contains("channel"))
        line = line.replacingOccurrences(of: case_.1, with: case_.2)
        #expect(throws: EventDecodingError(problem: case_.3), "\(case_.0)") { try EventCodec.decode(line: Array(line.utf8)) }
    }

    /// A grant's checks run in the order Spec/ledger-format.md gives them (subject, feature,
    /// renews, evidence), with its messages: a negative `renews` is refused, not read as absent.
    @Test(arguments: [
        ("a negative renews", [(#""seq":"#, #""renews":-1,"seq":"#)], "member 'renews' is missing or negative"),
        ("a bad subject before a negative renews", [(#""seq":"#, #""renews":-1,"seq":"#), (#""subject":""#, #""subject":"X"#)], "member 'subject' is not 32 lowercase hex digits"),
        ("a negative renews before a bad channel", [(#""seq":"#, #""renews":-1,"seq":"#), (#""cmd":"#, #""channel":"fax","cmd":"#)], "member 'renews' is missing or negative"),
    ])
    func grantChecksRunInTheSpecifiedOrder(_ case_: (String, [(String, String)], String)) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        var line = String(decoding: tiny[3].dropLast(), as: UTF8.self)
        for (from, to) in case_.1 {
            #expect(line.contains(from))
            line = line.replacingOccurrences(of: from, with: to)
        }
        #expect(throws: EventDecodingError(problem: case_.2), "\(case_.0)") { try EventCodec.decode(line: Array(line.utf8)) }
    }

    /// A subject is read straight from its bytes when it is 32 lowercase hex digits; anything
    /// else of that length or near it is refused with the reader's message, as before.
    @Test(arguments: ["uppercase", "a digit past f", "one digit short", "one digit more"])
    func aSubjectThatIsNotAPseudonymIsRefused(_ change: String) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let line = String(decoding: tiny[3].dropLast(), as: UTF8.self)
        let record = try EventCodec.decode(line: Array(line.utf8))
        let subject = try #require(record.event.payload.subject)
        #expect(subject.pseudonymBytes != nil && line.contains(#""subject":"\#(subject.value)""#))
        let hex = subject.value
        let bad = switch change {
        case "uppercase": hex.uppercased()
        case "a digit past f": String(hex.dropLast()) + "g"
        case "one digit short": String(hex.dropLast())
        default: hex + "0"
        }
        let edited = line.replacingOccurrences(of: #""subject":"\#(hex)""#, with: #""subject":"\#(bad)""#)
        #expect(throws: EventDecodingError(problem: "member 'subject' is not 32 lowercase hex digits"), "\(change)") { try EventCodec.decode(line: Array(edited.utf8)) }
    }

    @Test func evidenceOnAWithdrawalIsNotPartOfItsEvent() throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        let revoked = String(decoding: tiny.first { String(decoding: $0, as: UTF8.self).contains("consent.revoked") }!.dropLast(), as: UTF8.self)
        let line = revoked.replacingOccurrences(of: #""feature":"#, with: #""evidence":"scan","feature":"#)
        #expect(throws: EventDecodingError(problem: "member 'evidence' does not belong to a 'consent.revoked' event")) { try EventCodec.decode(line: Array(line.utf8)) }
    }

    /// Stream members: only in format 2, the previous event earlier, the subject map's root only
    /// on a command's last event.
    @Test(arguments: [
        ("a root on a command's first of two events", #""seq":1,"#, #""seq":1,"streamRoot":"\#(String(repeating: "ab", count: 32))","#, "member 'streamRoot' belongs only on the last event of a command"),
        ("a previous event that is not earlier", #""seq":1,"#, #""seq":1,"streamPrev":1,"#, "member 'streamPrev' must be an earlier sequence number than 1"),
        ("a previous seq that is not an integer", #""seq":1,"#, #""seq":1,"streamPrev":"0","#, "member 'streamPrev' must be an integer"),
        ("a stream member in format 1", #""seq":1,"#, #""seq":1,"streamPrev":0,"#, "member 'streamPrev' does not belong to a 'consent.given' event"),
    ])
    func streamMembersFollowTheirRules(_ case_: (String, String, String, String)) throws {
        let tiny = eventLines(of: readLog(packageRoot + "/Spec/vectors/tiny-ledger"))
        var line = String(decoding: tiny[1].dropLast(), as: UTF8.self).replacingOccurrences(of: case_.1, with: case_.2)
        if case_.0.hasSuffix("format 1") { line = line.replacingOccurrences(of: "\"v\":2,", with: "\"v\":1,") }
        #expect(throws: EventDecodingError(problem: case_.3), "\(case_.0)") { try EventCodec.decode(line: Array(line.utf8)) }
    }
}

/// Regression: `parallelMap` once wrote its results through `Array.withUnsafeMutableBufferPointer`
/// from several threads at once, which corrupted the heap on large inputs (found by the
/// benchmark). Heap-allocated results on every core must come back intact and in order.
@Suite struct ParallelMapTests {
    @Test func manyHeapResultsFromAllCoresArriveIntactAndInOrder() {
        for _ in 0..<20 {
            let results = parallelMap(50_000, minimumForParallel: 1) { i in String(repeating: "x", count: 20 + i % 7) + String(i) }
            #expect(results.count == 50_000)
            #expect(results.enumerated().allSatisfy { $0.element.hasSuffix(String($0.offset)) && $0.element.count == 20 + $0.offset % 7 + String($0.offset).count })
        }
    }
}

/// Signing a commit's events overlaps deciding and building them: whole chunks are offered to
/// other threads as the inputs arrive, and the caller takes every chunk no worker has started. A
/// command's few events never wait for another thread to wake up.
@Suite struct OverlappedMapTests {
    @Test(arguments: [0, 1, 2, 3, 4, 5, 27, 63, 64, 65, 200, 1_000], [nil, 1, 7, 64] as [Int?])
    func everyResultIsComputedOnceAndArrivesInOrder(count: Int, chunk: Int?) {
        let computed = Mutex([Int](repeating: 0, count: count))
        let map = OverlappedMap<Int, Int>(chunk: chunk) { i in
            computed.withLock { $0[i] += 1 }
            return i * 3
        }
        for i in 0..<count { map.append(i) }
        #expect(map.finish() == (0..<count).map { $0 * 3 })
        #expect(computed.withLock { $0 } == [Int](repeating: 1, count: count))
    }

    @Test(arguments: 0..<OverlappedMap<Int, Int>.minimumToShare)
    func anInputTooSmallToShareRunsOnTheCallersThread(count: Int) {
        let caller = pthread_self()
        let elsewhere = Mutex(0)
        let map = OverlappedMap<Int, Int>(chunk: 1) { i in
            if pthread_equal(pthread_self(), caller) == 0 { elsewhere.withLock { $0 += 1 } }
            return i
        }
        for i in 0..<count { map.append(i) }
        #expect(map.finish() == Array(0..<count))
        #expect(elsewhere.withLock { $0 } == 0)
    }

    /// A chunk is offered as soon as its inputs are there, not when the last input is: here the
    /// caller appends no more until a worker has computed the first chunk, with a 10-second
    /// deadline. (A map that offered its chunks only at the end would sign a commit's events
    /// only after its last command was decided.)
    @Test func aChunkIsComputedElsewhereWhileTheCallerIsStillAppending() {
        let caller = pthread_self()
        let workerComputed = DispatchSemaphore(value: 0)
        let map = OverlappedMap<Int, Int>(chunk: 4) { i in
            if pthread_equal(pthread_self(), caller) == 0, i == 3 { workerComputed.signal() }
            return i
        }
        for i in 0..<4 { map.append(i) }
        let waited = workerComputed.wait(timeout: .now() + 10)
        for i in 4..<10 { map.append(i) }
        #expect(map.finish() == Array(0..<10))
        #expect(waited == .success)
    }

    /// The caller does not wait idle for workers: a worker here cannot finish until the caller
    /// has computed a chunk itself. (Before, the caller computed only the last partial chunk and
    /// then waited, so a group commit's leader signed everything or nothing.)
    @Test func theCallerTakesTheChunksNoWorkerHasStarted() {
        let caller = pthread_self()
        let callerComputed = DispatchSemaphore(value: 0)
        let timedOut = Mutex(false)
        let map = OverlappedMap<Int, Int>(chunk: 4) { i in
            if pthread_equal(pthread_self(), caller) != 0 {
                callerComputed.signal()
            } else if callerComputed.wait(timeout: .now() + 10) == .timedOut {
                timedOut.withLock { $0 = true }
            } else {
                callerComputed.signal()
            }
            return i
        }
        for i in 0..<16 { map.append(i) }
        #expect(map.finish() == Array(0..<16))
        #expect(timedOut.withLock { $0 } == false)
    }

    @Test(arguments: [0, 3, 64, 200])
    func anAbandonedMapDestroysWhatItComputed(appended: Int) {
        let alive = MovedResultsTests.Counter()
        do {
            let map = OverlappedMap<Int, MovedResultsTests.Counted>(chunk: 8) { i in MovedResultsTests.Counted(i, alive) }
            for i in 0..<appended { map.append(i) }
            map.abandon()
        }
        #expect(alive.count.withLock { $0 } == 0)
    }

    /// Chunks start at the smallest size worth sharing and grow with the inputs so far, to two
    /// or more per core, up to 64.
    @Test(arguments: [(1, 2, 4), (4, 2, 4), (27, 2, 6), (27, 1, 13), (1_000, 2, 64), (200, 16, 6)])
    func aChunkGivesEachCoreTwoOrMore(appended: Int, cores: Int, expected: Int) {
        #expect(OverlappedMap<Int, Int>.chunkSize(after: appended, cores: cores) == expected)
    }
}

/// `parallelResults` hands its results over by moving them: each once, in order, and the ones
/// not taken (a batch given up at a failing line) are destroyed with it, not leaked.
@Suite struct MovedResultsTests {
    /// Counts its live instances in a counter of the test case's own (the cases run at once).
    final class Counted: Sendable {
        let alive: Counter
        let index: Int
        init(_ index: Int, _ alive: Counter) {
            self.index = index
            self.alive = alive
            alive.count.withLock { $0 += 1 }
        }
        deinit { alive.count.withLock { $0 -= 1 } }
    }

    final class Counter: Sendable { let count = Mutex(0) }

    @Test(arguments: [0, 1, 5_000], [0, 1, 2_500, 5_000])
    func resultsAreTakenInOrderAndTheRestDestroyed(count: Int, taking: Int) {
        let alive = Counter()
        do {
            let results = parallelResults(count, minimumForParallel: 64) { Counted($0, alive) }
            #expect(alive.count.withLock { $0 } == count)
            #expect(results.first?.index == (count > 0 ? 0 : nil))
            var taken: [Int] = []
            for _ in 0..<min(taking, count) {
                guard let next = results.next() else { break }
                taken.append(next.index)
            }
            #expect(taken == Array(0..<min(taking, count)))
            #expect(results.first == nil || taken.isEmpty)
            if taking >= count { #expect(results.next() == nil) }
        }
        #expect(alive.count.withLock { $0 } == 0)
    }

    /// Work given to run alongside runs once, and has finished when the results are returned,
    /// whether they are computed on all cores or (too few) on the calling thread.
    @Test(arguments: [0, 10, 5_000])
    func workAlongsideRunsOnceBeforeTheResultsAreReturned(count: Int) {
        let runs = Mutex(0)
        let results = parallelResults(count, minimumForParallel: 64, alongside: { runs.withLock { $0 += 1 } }) { $0 * 2 }
        #expect(runs.withLock { $0 } == 1)
        var all: [Int] = []
        while let next = results.next() { all.append(next) }
        #expect(all == (0..<count).map { $0 * 2 })
    }

    /// With a pool, the next batch's results are written into the storage of the batch before,
    /// once that is gone; what a batch held is destroyed whether it was taken or not.
    @Test(arguments: [0, 2_500, 5_000])
    func aPoolLendsTheSameStorageToTheNextBatch(taking: Int) {
        let alive = Counter()
        let pool = ResultSlotsPool<Counted>()
        for batch in 0..<3 {
            do {
                let results = parallelResults(5_000, minimumForParallel: 64, pool: pool) { Counted($0, alive) }
                #expect(pool.spareCount == 0, "batch \(batch) took the spare storage, or made its own")
                for _ in 0..<taking { _ = results.next() }
            }
            #expect(alive.count.withLock { $0 } == 0)
            #expect(pool.spareCount == 1, "batch \(batch) gave its storage back")
        }
        // A larger batch than the spare storage holds gets storage of its own.
        let larger = parallelResults(6_000, minimumForParallel: 64, pool: pool) { Counted($0, alive) }
        #expect(pool.spareCount == 1)
        _ = larger.next()
    }
}

/// The direct body writer must produce exactly what the generic RFC 8785 serialiser does, for
/// any event: random actors (with escapes and non-ASCII), times, sequence numbers and payloads.
@Suite struct BodyWriterTests {
    @Test func directWriterEqualsGenericSerialiser() async {
        // The last is long enough, escaped, to make the writer grow its memory more than once.
        let names = ["self", "dr. \"house\"", "Zoë\n\t", "\u{1}\u{7F}", "名前", "a\\b", String(repeating: "\u{1}\"é", count: 300)]
        let actors = Gen.int(in: 0...(names.count - 1)).map { names[$0] }
        let input = zip(actors, Gen.int(in: 0...1_000_000), Gen.int(in: -2_000_000_000...2_000_000_000), Gen.int(in: 0...3))
        await propertyCheck(count: 300, input: input) { actor, seq, seconds, kind in
            let at = Timestamp(millisecondsSinceEpoch: Int64(seconds) * 1000 + Int64(seq % 1000))
            let subject = SubjectRef("00112233445566778899aabbccddeeff")
            let payload: EventPayload
            switch kind {
            case 0: payload = .ledgerCreated(LedgerCreated(ledgerName: "n/\(actor)", catalogHash: "ab", publicKey: "cd"))
            case 1:
                // Evidence members of every combination, interleaved with the others in key order.
                let evidence = GrantEvidence(
                    effectiveAt: seq % 2 == 0 ? Timestamp(millisecondsSinceEpoch: at.millisecondsSinceEpoch - Int64(seq)) : nil,
                    channel: seq % 3 == 0 ? nil : GrantEvidence.Channel.allCases[seq % 5],
                    noticeLanguage: seq % 5 == 0 ? nil : "de-CH", reference: seq % 7 == 0 ? nil : "scan \(actor)",
                    sealedReference: seq % 4 == 0 ? nil : Array(repeating: UInt8(truncatingIfNeeded: seq), count: 41 + seq % 9))
                payload = .consentGiven(ConsentGiven(subject: subject, feature: seq % 7, consent: "optional-a", version: "v\(actor)", evidence: evidence))
            case 2: payload = .consentRevoked(ConsentRevoked(subject: subject, feature: 2, consent: "required", reason: .withdrawn))
            default: payload = .consentRevoked(ConsentRevoked(subject: subject, feature: 2, consent: "optional-b", reason: .cascade(cause: UInt64(seq / 2))))
            }
            let event = LedgerEvent(seq: UInt64(seq), at: at, actor: actor, command: CommandSpan(first: UInt64(seq / 2), size: seq - seq / 2 + 1), payload: payload)
            let prev = Sodium().sha256(Array(actor.utf8))
            #expect(EventCodec.body(of: event, prev: prev, keyID: "0123456789abcdef", version: 1) == EventCodec.bodyViaGenericSerialiser(of: event, prev: prev, keyID: "0123456789abcdef", version: 1))
            // Format 2, with stream links of every shape.
            let stream = StreamLink(previous: seq % 3 == 0 ? nil : UInt64(seq / 3), root: seq % 2 == 0 ? nil : Sodium().sha256(Array(String(seq).utf8)))
            #expect(EventCodec.body(of: event, prev: prev, keyID: "0123456789abcdef", stream: stream) == EventCodec.bodyViaGenericSerialiser(of: event, prev: prev, keyID: "0123456789abcdef", stream: stream))
        }
    }
}

/// OpenSSL's SHA-256 (the default hasher) and libsodium's agree on every input.
@Suite struct HasherAgreementTests {
    @Test func openSSLAndLibsodiumAgree() async {
        await propertyCheck(count: 200, input: Gen.int(in: 0...255).array(of: 0...700)) { ints in
            let bytes = ints.map { UInt8($0) }
            #expect(OpenSSLSHA256().sha256(bytes) == Sodium().sha256(bytes))
        }
        // FIPS 180-2 example: SHA-256("abc").
        #expect(OpenSSLSHA256().sha256(Array("abc".utf8)).hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}

/// Base64 as RFC 4648 section 4 writes it (padded), as signed notes and proofs carry it.
@Suite struct Base64Tests {
    @Test(arguments: [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")])
    func theRFCVectorsEncode(_ text: String, _ encoded: String) {
        #expect(Base64.encode(Array(text.utf8)) == encoded)
        #expect(Base64.decode(encoded) == Array(text.utf8))
    }

    @Test func everyLengthAndByteRoundTrips() async {
        await propertyCheck(count: 500, input: Gen.int(in: 0...255).array(of: 0...100)) { ints in
            let bytes = ints.map { UInt8($0) }
            let text = Base64.encode(bytes)
            #expect(text.utf8.count == (bytes.count + 2) / 3 * 4)
            #expect(Base64.decode(text) == bytes)
        }
    }
}

/// A body's plain strings are scanned eight bytes at a time while none of the eight can end
/// the string or disqualify it: the word test must agree with a byte at a time, exactly.
@Suite struct PlainASCIIScanTests {
    /// Printable ASCII other than a quote or a backslash: what may stay in the fast scan.
    static func isPlain(_ b: UInt8) -> Bool { b >= 0x20 && b < 0x7F && b != 0x22 && b != 0x5C }

    static func word(_ bytes: [UInt8]) -> UInt64 {
        bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
    }

    /// Every byte value at every position, among seven plain bytes.
    @Test(arguments: 0..<8)
    func everyByteValueAtEveryPosition(position: Int) {
        for value in 0...255 {
            var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 8)
            bytes[position] = UInt8(value)
            #expect(CanonicalJSON.Parser.isPlainASCII(Self.word(bytes)) == Self.isPlain(UInt8(value)), "byte \(value) at \(position)")
        }
    }

    /// Words of bytes near every boundary the test has (and any byte), mixed: a borrow or carry
    /// from one byte into the next would show as a word judged unlike its bytes.
    @Test func wordsOfBoundaryBytesAgreeWithTheirBytes() async {
        let edges: [UInt8] = [0x00, 0x01, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7E, 0x7F, 0x80, 0x81, 0xA2, 0xDC, 0xFE, 0xFF]
        let byte = Gen.int(in: 0...(edges.count + 255)).map { $0 < edges.count ? edges[$0] : UInt8($0 - edges.count) }
        await propertyCheck(count: 5_000, input: byte.array(of: 8...8)) { bytes in
            #expect(CanonicalJSON.Parser.isPlainASCII(Self.word(bytes)) == bytes.allSatisfy(Self.isPlain), "\(bytes)")
        }
    }

    /// The string the parser finds, or its refusal, is what a byte at a time finds, for
    /// strings of any length with any byte anywhere.
    @Test func aPlainStringIsFoundAsAByteAtATimeFindsIt() async {
        let byte = Gen.int(in: 0...40).map { n -> UInt8 in
            switch n {
            case 0: 0x22
            case 1: 0x5C
            case 2: 0x1F
            case 3: 0x7F
            case 4: 0xC3
            default: UInt8(ascii: "a") + UInt8(n % 26)
            }
        }
        await propertyCheck(count: 3_000, input: byte.array(of: 0...40)) { content in
            let text: [UInt8] = [0x22] + content + [0x22, UInt8(ascii: ",")]
            let expected: Range<Int>? = {
                for (i, b) in content.enumerated() {
                    if b == 0x22 { return 1..<(1 + i) }
                    if !Self.isPlain(b) { return nil }
                }
                return 1..<(1 + content.count)
            }()
            text.withUnsafeBufferPointer { buffer in
                var parser = CanonicalJSON.Parser(bytes: buffer, canonical: true)
                let found = parser.plainASCIIString()
                #expect(found == expected, "\(content)")
                #expect(parser.index == (found.map { $0.upperBound + 1 } ?? 0))
            }
        }
    }
}

/// The pseudonym against its definition in `Spec/`: the first 16 bytes of
/// SHA-256("consentledger-subject-v1\n" ‖ salt ‖ UTF-8(id)), in hex.
@Suite struct PseudonymTests {
    @Test func aPseudonymIsTheFirstHalfOfTheHashOfTheContextTheSaltAndTheId() async {
        let hasher = OpenSSLSHA256()
        let input = zip(Gen.int(in: 0...255).array(of: 16...16), Gen.int(in: 0...255).array(of: 0...80))
        await propertyCheck(count: 500, input: input) { saltInts, idInts in
            let salt = saltInts.map(UInt8.init), id = idInts.map(UInt8.init)
            let digest = hasher.sha256(Array("consentledger-subject-v1\n".utf8) + salt + id)
            #expect(Pseudonym.ref(id: id, salt: salt, hasher: hasher)?.value == Hex.encode(digest.bytes.prefix(16)))
        }
    }

    @Test(arguments: [0, 15, 17, 32])
    func aSaltOfAnotherLengthMakesNoPseudonym(length: Int) {
        #expect(Pseudonym.ref(id: Array("patient-1042".utf8), salt: [UInt8](repeating: 7, count: length), hasher: OpenSSLSHA256()) == nil)
    }
}
