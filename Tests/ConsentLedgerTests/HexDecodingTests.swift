import ConsentDomain
import PropertyBased
import Testing
@testable import LedgerFormat
@testable import TransparencyLog

/// The hex of every line (its signature, `prev` and subject) is read through a lookup table on
/// replay's hot path. Each value has one spelling: lowercase digits only, so these tables check
/// every byte that is not one against the table's answer.
@Suite struct HexDecodingTests {
    static let lowercase = Array("0123456789abcdef".utf8)

    @Test(arguments: 0...255)
    func aByteIsAHexDigitExactlyWhenItIsALowercaseOne(_ value: Int) {
        let byte = UInt8(value)
        let expected = Self.lowercase.firstIndex(of: byte).map(UInt8.init)
        #expect([byte].withUnsafeBufferPointer { Hex.isLowercaseHex($0) } == (expected != nil))
        // In a digest, at the first and the last digit: decoded, or refused.
        for position in [0, 63] {
            var text = [UInt8](repeating: 0x30, count: 64)
            text[position] = byte
            let digest = text.withUnsafeBufferPointer { Digest(hexBytes: $0) }
            if let expected {
                var bytes = [UInt8](repeating: 0, count: 32)
                bytes[position / 2] = position % 2 == 0 ? expected << 4 : expected
                #expect(digest == Digest(bytes: bytes))
            } else {
                #expect(digest == nil, "byte \(value) at \(position)")
            }
        }
    }

    /// The same, for a byte at each place of a longer run: runs are checked eight bytes at a
    /// time, then the rest one by one. A subject's pseudonym (32 digits) is read the same way.
    @Test(arguments: 0...255)
    func aByteAnywhereInARunIsADigitExactlyWhenItIsALowercaseOne(_ value: Int) {
        let byte = UInt8(value)
        let isDigit = Self.lowercase.contains(byte)
        for length in [8, 17, 128] {
            for position in 0..<length {
                var text = Array(repeating: UInt8(ascii: "f"), count: length)
                text[position] = byte
                #expect(text.withUnsafeBufferPointer { Hex.isLowercaseHex($0) } == isDigit, "byte \(value) at \(position) of \(length)")
            }
        }
        for position in [0, 15, 16, 31] {
            var text = Array("00112233445566778899aabbccddeeff".utf8)
            text[position] = byte
            let ref = text.withUnsafeBufferPointer { SubjectRef(pseudonymHex: $0) }
            #expect((ref != nil) == isDigit, "byte \(value) at \(position) of a pseudonym")
            if isDigit { #expect(ref?.value == String(decoding: text, as: UTF8.self)) }
        }
    }

    @Test func decodingRoundTripsAndRefusesOtherLengths() {
        let bytes: [UInt8] = (0..<64).map { UInt8(($0 * 37 + 11) & 0xFF) }
        let text = Hex.encode(bytes)
        #expect(Hex.decode(text) == bytes)
        #expect(Array(text.utf8).withUnsafeBufferPointer { Hex.decode(buffer: $0) } == bytes)
        #expect(Hex.decode(String(text.dropLast())) == nil)
        #expect(Array(text.utf8.dropLast()).withUnsafeBufferPointer { Hex.decode(buffer: $0) } == nil)
        #expect(Array(text.uppercased().utf8).withUnsafeBufferPointer { Hex.decode(buffer: $0) } == nil)
        #expect([UInt8]().withUnsafeBufferPointer { Hex.decode(buffer: $0) } == [])
        var out = [UInt8](repeating: 0, count: 31)
        #expect(!Array(text.utf8.prefix(64)).withUnsafeBufferPointer { source in out.withUnsafeMutableBytes { Hex.decode(source, into: $0) } })
    }

    /// A line's signature is refused for any non-digit, by replay (which only checks its shape)
    /// and by verify (which decodes it).
    @Test(arguments: [0, 1, 64, 127], [UInt8(ascii: "A"), UInt8(ascii: "g"), UInt8(ascii: "/"), UInt8(ascii: ":"), 0x60, 0xC3])
    func aSignatureWithAnyOtherByteIsRefused(position: Int, byte: UInt8) throws {
        let signature = String(repeating: "0f", count: 64)
        var line = Array(#"{"body":{"a":1},"sig":""#.utf8) + Array(signature.utf8) + Array(#""}"#.utf8)
        let start = line.count - 2 - 128
        for decode in [false, true] {
            #expect(throws: Never.self) { try line.withUnsafeBufferPointer { _ = try EventCodec.splitLine($0, decodeSignature: decode) } }
        }
        line[start + position] = byte
        for decode in [false, true] {
            #expect(throws: EventDecodingError.self) { try line.withUnsafeBufferPointer { _ = try EventCodec.splitLine($0, decodeSignature: decode) } }
        }
    }
}

/// Hex is written straight into a string's or an array's storage (a pseudonym for every command,
/// a signature for every line). Each against a digit at a time.
@Suite struct HexEncodingTests {
    static func reference(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
    }

    @Test(arguments: 0...255)
    func everyByteIsSpelledByItsTwoLowercaseDigits(_ value: Int) {
        let byte = UInt8(value)
        let expected = String(format: "%02x", value)
        #expect(Hex.encode([byte]) == expected)
        #expect(Hex.encode([7, byte, 9]) == "07" + expected + "09")
        var out: [UInt8] = Array("x".utf8)
        [byte].withUnsafeBytes { Hex.append($0, to: &out) }
        #expect(String(decoding: out, as: UTF8.self) == "x" + expected)
    }

    @Test func noBytesAreSpelledAsNothing() {
        #expect(Hex.encode([UInt8]()) == "")
        #expect(Hex.encode([UInt8]()[...]) == "")
        #expect(Hex.encode(buffer: UnsafeRawBufferPointer(start: nil, count: 0)) == "")
        var out: [UInt8] = [1]
        Hex.append(UnsafeRawBufferPointer(start: nil, count: 0), to: &out)
        #expect(out == [1])
    }

    @Test func anyBytesAreSpelledAsOneDigitAtATimeSpellsThem() async {
        await propertyCheck(count: 500, input: Gen.int(in: 0...255).array(of: 0...300)) { ints in
            let bytes = ints.map(UInt8.init)
            let expected = Self.reference(bytes)
            #expect(Hex.encode(bytes) == expected)
            #expect(Hex.encode(bytes[...]) == expected)
            // A sequence with no contiguous storage takes the other path.
            #expect(Hex.encode(bytes.lazy.map { $0 }) == expected)
            var out: [UInt8] = [0x5B]
            bytes.withUnsafeBytes { Hex.append($0, to: &out) }
            #expect(out == [0x5B] + Array(expected.utf8))
            #expect(Hex.decode(expected) == bytes)
        }
    }
}
