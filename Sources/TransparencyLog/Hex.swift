/// Lowercase hexadecimal, the only spelling of binary values in the ledger format.
///
/// The generic functions are inlinable: every signature of every line is decoded here, and an
/// unspecialised call across the module boundary costs more than the decoding.
package enum Hex {
    @usableFromInline static let digits = Array("0123456789abcdef".utf8)

    @inlinable
    package static func encode(_ bytes: some Sequence<UInt8>) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(buffer: UnsafeRawBufferPointer($0)) }) {
            return encoded
        }
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The lowercase hex of `bytes`, written straight into the string's storage: a writer
    /// spells a pseudonym this way for every command.
    package static func encode(buffer bytes: UnsafeRawBufferPointer) -> String {
        guard !bytes.isEmpty else { return "" }
        return String(unsafeUninitializedCapacity: 2 * bytes.count) { out in
            write(bytes, to: UnsafeMutableRawPointer(out.baseAddress!))
            return 2 * bytes.count
        }
    }

    /// Appends the lowercase hex of `bytes` to `out`, without building a String. The digits are
    /// written on the stack and appended at once: appending them one by one checked the array's
    /// capacity twice a byte, and a writer appends a signature's 128 digits to every line.
    package static func append(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * bytes.count) { digits in
            write(bytes, to: UnsafeMutableRawPointer(digits.baseAddress!))
            out.append(contentsOf: UnsafeBufferPointer(digits))
        }
    }

    /// Writes the `2 * bytes.count` lowercase hex digits of `bytes` at `out`.
    private static func write(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutableRawPointer) {
        let table = digitSpelling
        for (i, b) in bytes.enumerated() {
            out.storeBytes(of: table[Int(b >> 4)], toByteOffset: 2 * i, as: UInt8.self)
            out.storeBytes(of: table[Int(b & 0x0F)], toByteOffset: 2 * i + 1, as: UInt8.self)
        }
    }

    /// The sixteen digits, at a fixed address: written without the bounds checks of `digits`.
    private static var digitSpelling: UnsafePointer<UInt8> { ("0123456789abcdef" as StaticString).utf8Start }

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

    /// Whether every byte is a lowercase hex digit. Eight bytes at a time: replay checks the 128
    /// digits of every line's signature.
    package static func isLowercaseHex(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = UnsafeRawPointer(bytes.baseAddress) else { return true }
        let high: UInt64 = 0x8080_8080_8080_8080
        var valid = high
        var i = 0
        while i + 8 <= bytes.count {
            valid &= lowercaseHexBytes(base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            i += 8
        }
        let table = digitValues
        var invalid: UInt8 = 0
        while i < bytes.count {
            invalid |= table[Int(bytes[i])]
            i += 1
        }
        return valid == high && invalid & 0xF0 == 0
    }

    /// 0x80 in each byte of `x` that is a lowercase hex digit, 0 in the others. A byte below
    /// 0x80 plus (0x80 - k) has its top bit set exactly when it is at least k, with no carry
    /// into the next byte.
    @inline(__always)
    static func lowercaseHexBytes(_ x: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101, high: UInt64 = 0x8080_8080_8080_8080
        let ascii = ~x & high
        let low = x & ~high
        func atLeast(_ k: UInt64) -> UInt64 { (low &+ ones &* (0x80 - k)) & high }
        let decimal = atLeast(0x30) & ~atLeast(0x3A)
        let letter = atLeast(0x61) & ~atLeast(0x67)
        return ascii & (decimal | letter)
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
