/// Lowercase hexadecimal, the only spelling of binary values in the ledger format.
///
/// The generic functions are inlinable: every signature of every line is decoded here, and an
/// unspecialised call across the module boundary costs more than the decoding.
package enum Hex {
    @usableFromInline static let digits = Array("0123456789abcdef".utf8)

    @inlinable
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the lowercase hex of `bytes` to `out`, without building a String.
    package static func append(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
    }

    /// Decodes lowercase hex; uppercase or odd length is `nil`, so each value has one spelling.
    package static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(buffer: $0) }
    }

    /// Decodes lowercase hex bytes; nil for anything else.
    @inlinable
    package static func decode(bytes utf8: some Collection<UInt8>) -> [UInt8]? {
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var iterator = utf8.makeIterator()
        while let a = iterator.next(), let b = iterator.next() {
            guard let hi = value(a), let lo = value(b) else { return nil }
            out.append(hi << 4 | lo)
        }
        return out
    }

    /// Decodes lowercase hex from a buffer: not generic, for the hot path (the signature of every
    /// line), so that no call crosses the module boundary unspecialised.
    package static func decode(buffer: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        guard buffer.count % 2 == 0 else { return nil }
        let out = [UInt8](unsafeUninitializedCapacity: buffer.count / 2) { out, count in
            count = decode(buffer, into: UnsafeMutableRawBufferPointer(out)) ? out.count : 0
        }
        return out.count == buffer.count / 2 ? out : nil
    }

    /// Each byte's value as a lowercase hex digit (0–15), or 0xFF for any other byte: a table, so
    /// that replay checks the 200 hex digits of every line without a branch per digit. Written
    /// once, before first use, and only read after: safe to share.
    private nonisolated(unsafe) static let digitValues: UnsafePointer<UInt8> = {
        let table = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
        table.initialize(repeating: 0xFF, count: 256)
        for (i, digit) in digits.enumerated() { table[Int(digit)] = UInt8(i) }
        return UnsafePointer(table)
    }()

    /// Whether every byte is a lowercase hex digit.
    package static func isLowercaseHex(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let table = digitValues
        var invalid: UInt8 = 0
        for b in bytes { invalid |= table[Int(b)] }
        return invalid & 0xF0 == 0
    }

    /// Decodes `2 * out.count` lowercase hex digits into `out`. False, with `out` holding
    /// garbage, when `hex` has another length or a byte that is not a lowercase hex digit.
    package static func decode(_ hex: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableRawBufferPointer) -> Bool {
        guard hex.count == 2 * out.count, let source = hex.baseAddress else { return hex.count == 2 * out.count }
        let table = digitValues
        var invalid: UInt8 = 0
        for i in 0..<out.count {
            let high = table[Int(source[2 * i])], low = table[Int(source[2 * i + 1])]
            invalid |= high | low
            out[i] = high << 4 | (low & 0x0F)
        }
        return invalid & 0xF0 == 0
    }

    package static func nibble(_ c: UInt8) -> UInt8? { value(c) }

    @inlinable
    static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
}
