import ConsentDomain
import TransparencyLog
/// A JSON value restricted to what the ledger format uses: no fractions or exponents, integers
/// within ±(2^53 − 1), so that RFC 8785 (JCS) serialisation is plain decimal digits.
package enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package static let maxSafeInteger: Int64 = 9_007_199_254_740_991

    package subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    package var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    package var intValue: Int64? {
        if case .int(let i) = self { return i }
        return nil
    }

    package var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    package var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    package var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }
}

/// Where and why JSON text could not be read.
package struct JSONParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Byte offset into the input, from 0.
    package let offset: Int
    /// Line and column (both from 1, column in bytes) of that offset.
    package let line: Int
    package let column: Int
    package let message: String

    package var description: String { "line \(line), column \(column): \(message)" }
}

/// RFC 8785 JSON Canonicalization Scheme, for the subset of JSON in ``JSONValue``.
///
/// `serialize` writes the one canonical form. `parse(_:canonical: true)` accepts exactly that form
/// and nothing else, so a successful strict parse proves the input was canonical without
/// re-encoding it. `parse(_:canonical: false)` reads ordinary JSON (whitespace, any key order) and
/// is for hand-written files such as the catalogue.
package enum CanonicalJSON {
    package static func serialize(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    package static func serialize(_ value: JSONValue, into out: inout [UInt8]) {
        write(value, into: &out)
    }

    private static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): writeInteger(i, into: &out)
        case .string(let s): writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, member) in members.sorted(by: { utf16Less($0.key, $1.key) }).enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member.value, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// JCS orders object members by their names' UTF-16 code units. Compared as UTF-8 bytes up to
    /// the first difference: while both differing bytes are ASCII, byte order is UTF-16 order
    /// (equal prefixes hold equal code points), and names are almost always ASCII. Otherwise the
    /// code units are compared (UTF-8 orders U+E000–U+FFFF before the code points past U+FFFF,
    /// UTF-16 after).
    static func utf16Less(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        let decided: Bool? = a.withUTF8 { x in
            b.withUTF8 { y in
                let n = min(x.count, y.count)
                var i = 0
                while i < n, x[i] == y[i] { i += 1 }
                if i == n { return x.count < y.count }
                guard x[i] < 0x80, y[i] < 0x80 else { return nil }
                return x[i] < y[i]
            }
        }
        return decided ?? a.utf16.lexicographicallyPrecedes(b.utf16)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// An integer in decimal, as RFC 8785 writes the numbers this format allows (whole numbers
    /// within ±2^53, though any `Int64` is written exactly): its digits written in place,
    /// without an intermediate string.
    package static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned, so that Int64.min has one too.
        var magnitude = value.magnitude
        // The digits from the last, on the stack, then appended at once (20 digits hold any).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var i = 20
            repeat {
                i -= 1
                digits[i] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[i...]))
        }
    }

    package static func writeString(_ s: String, into out: inout [UInt8]) {
        var s = s
        s.withUTF8 { writeString(utf8: $0, into: &out) }
    }

    /// The string of `utf8` (valid UTF-8), quoted and escaped. The bytes between two that need
    /// escaping (a quote, a backslash, a control character) are appended in one call: most
    /// strings (names, ids, timestamps, hex) have none, and byte-by-byte appends were the
    /// largest part of writing a proof or an event body.
    package static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var runStart = 0
        for (i, byte) in bytes.enumerated() where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
            runStart = i + 1
            switch byte {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x08: out.append(contentsOf: [0x5C, UInt8(ascii: "b")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0C: out.append(contentsOf: [0x5C, UInt8(ascii: "f")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            default:
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0xF)]])
            }
        }
        if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

    package static func parse(_ bytes: [UInt8], canonical: Bool) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in
            try parse(buffer, canonical: canonical)
        }
    }

    package static func parse(_ buffer: UnsafeBufferPointer<UInt8>, canonical: Bool) throws(JSONParseError) -> JSONValue {
        var parser = Parser(bytes: buffer, canonical: canonical)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == buffer.count else { throw parser.error("unexpected bytes after the JSON value") }
        return value
    }

    package struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        let canonical: Bool
        package var index = 0

        package init(bytes: UnsafeBufferPointer<UInt8>, canonical: Bool) {
            self.bytes = bytes
            self.canonical = canonical
        }

        func error(_ message: String, at offset: Int? = nil) -> JSONParseError {
            let at = min(offset ?? index, bytes.count)
            var line = 1
            var lineStart = 0
            for i in 0..<at where bytes[i] == 0x0A {
                line += 1
                lineStart = i + 1
            }
            return JSONParseError(offset: at, line: line, column: at - lineStart + 1, message: message)
        }

        mutating func skipWhitespace() {
            guard !canonical else { return }
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw error("unexpected end of input") }
            let start = literal.utf8Start
            for i in 0..<count where bytes[index + i] != start[i] {
                throw error("invalid literal")
            }
            index += count
            return value
        }

        mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth < 64 else { throw error("nesting is deeper than 64 levels") }
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try parseObject(depth: depth)
            case UInt8(ascii: "["): return try parseArray(depth: depth)
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"): return try expect("true", .bool(true))
            case UInt8(ascii: "f"): return try expect("false", .bool(false))
            case UInt8(ascii: "n"): return try expect("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .int(try parseInteger())
            default: throw error("unexpected character '\(Self.printable(bytes[index]))'")
            }
        }

        static func printable(_ b: UInt8) -> String {
            (0x20..<0x7F).contains(b) ? String(UnicodeScalar(b)) : "\\x" + String(b, radix: 16)
        }

        mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var members: [String: JSONValue] = [:]
            var previousKey: String?
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a member name") }
                let keyOffset = index
                let key = try parseString()
                if members[key] != nil { throw error("duplicate member name '\(key)'", at: keyOffset) }
                if canonical, let previousKey, !CanonicalJSON.utf16Less(previousKey, key) {
                    throw error("member '\(key)' is out of canonical (RFC 8785) order", at: keyOffset)
                }
                previousKey = key
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                members[key] = try parseValue(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in an object") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { throw error("expected ',' or '}'") }
                index += 1
                return .object(members)
            }
        }

        mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
            var items: [JSONValue] = []
            try forEachElement { (p) throws(JSONParseError) in items.append(try p.parseValue(depth: depth + 1)) }
            return .array(items)
        }

        /// Reads an array from its `[` to its `]`, calling `element` at the start of each
        /// element, which must read it.
        mutating func forEachElement(_ element: (inout Parser) throws(JSONParseError) -> Void) throws(JSONParseError) {
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                try element(&self)
                skipWhitespace()
                guard index < bytes.count else { throw error("unexpected end of input in an array") }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "]") else { throw error("expected ',' or ']'") }
                index += 1
                return
            }
        }

        mutating func parseInteger() throws(JSONParseError) -> Int64 {
            let start = index
            var negative = false
            if bytes[index] == UInt8(ascii: "-") {
                negative = true
                index += 1
            }
            let digitsStart = index
            var value: Int64 = 0
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                value = value &* 10 &+ Int64(bytes[index] - 0x30)
                index += 1
                if index - digitsStart > 16 { throw error("integer is out of range", at: start) }
            }
            let count = index - digitsStart
            guard count > 0 else { throw error("expected digits", at: start) }
            if count > 1, bytes[digitsStart] == 0x30 { throw error("integer has a leading zero", at: start) }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                throw error("only integers are allowed here", at: start)
            }
            guard value <= JSONValue.maxSafeInteger else { throw error("integer is out of range", at: start) }
            if negative && value == 0 { throw error("'-0' is not allowed", at: start) }
            return negative ? -value : value
        }

        package mutating func parseString() throws(JSONParseError) -> String {
            let start = index
            index += 1
            // Fast path: no escapes.
            var scan = index
            var union: UInt8 = 0
            while scan < bytes.count {
                let b = bytes[scan]
                if b == 0x22 || b == 0x5C || b < 0x20 { break }
                union |= b
                scan += 1
            }
            guard scan < bytes.count else { throw error("unterminated string", at: start) }
            if bytes[scan] == 0x22 {
                let slice = UnsafeBufferPointer(rebasing: bytes[index..<scan])
                let s: String
                if union < 0x80 {
                    s = String(decoding: slice, as: UTF8.self)  // ASCII: nothing to validate
                } else {
                    guard let valid = String(validating: slice, as: UTF8.self) else { throw error("string is not valid UTF-8", at: start) }
                    s = valid
                }
                index = scan + 1
                return s
            }
            var out: [UInt8] = Array(bytes[index..<scan])
            index = scan
            while true {
                guard index < bytes.count else { throw error("unterminated string", at: start) }
                let b = bytes[index]
                if b == 0x22 {
                    index += 1
                    break
                }
                if b < 0x20 { throw error("control character in a string must be escaped") }
                if b != 0x5C {
                    out.append(b)
                    index += 1
                    continue
                }
                guard index + 1 < bytes.count else { throw error("unterminated escape") }
                let e = bytes[index + 1]
                index += 2
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"):
                    if canonical { throw error("'\\/' is not canonical; write '/'", at: index - 2) }
                    out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    let escapeStart = index - 2
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == 0x5C, bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("unpaired surrogate", at: escapeStart)
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate", at: escapeStart) }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        throw error("unpaired surrogate", at: escapeStart)
                    }
                    if canonical {
                        // JCS escapes with \u only the control characters that have no short form.
                        let short: Set<UInt32> = [0x08, 0x09, 0x0A, 0x0C, 0x0D]
                        guard scalar < 0x20, !short.contains(scalar),
                            bytes[escapeStart + 2..<escapeStart + 6].allSatisfy({ !(0x41...0x46).contains($0) })
                        else { throw error("'\\u' escape is not canonical here", at: escapeStart) }
                    }
                    out.append(contentsOf: String(UnicodeScalar(scalar)!).utf8)
                default:
                    throw error("invalid escape '\\\(Self.printable(e))'", at: index - 2)
                }
            }
            guard let s = String(validating: out, as: UTF8.self) else { throw error("string is not valid UTF-8", at: start) }
            return s
        }

        /// The content of the string at `index` when it is plain printable ASCII without escapes
        /// (names, hex digits, times), consumed; otherwise nil and nothing consumed.
        mutating func plainASCIIString() -> Range<Int>? {
            guard index < bytes.count, bytes[index] == 0x22 else { return nil }
            var scan = index + 1
            // Eight bytes at a time while none of them can end the string or disqualify it: the
            // strings of an event (its `prev`, subject, key id, time) are most of its bytes, and
            // a byte at a time was about a fifth of reading a body in replay's profile.
            if let base = UnsafeRawPointer(bytes.baseAddress) {
                while scan + 8 <= bytes.count, Self.isPlainASCII(base.loadUnaligned(fromByteOffset: scan, as: UInt64.self)) {
                    scan += 8
                }
            }
            while scan < bytes.count {
                let b = bytes[scan]
                if b == 0x22 {
                    let range = (index + 1)..<scan
                    index = scan + 1
                    return range
                }
                if b == 0x5C || b < 0x20 || b >= 0x7F { return nil }
                scan += 1
            }
            return nil
        }

        /// The string at `index` when its content is exactly `length` bytes that `read`
        /// accepts, consumed, with what `read` made of it; otherwise nil, and nothing consumed.
        /// The content is not scanned for the string's end, so `read` must accept only bytes
        /// that could stand in a plain string (hex digits, a canonical time: no quote, no
        /// backslash, no control byte); then the result is the one the scan would give. An
        /// event's `prev`, subject and time are read this way.
        @inline(__always)
        mutating func takeQuoted<T>(length: Int, _ read: (UnsafeBufferPointer<UInt8>) -> T?) -> T? {
            let end = index + length + 1
            guard end < bytes.count, bytes[index] == 0x22, bytes[end] == 0x22,
                let value = read(UnsafeBufferPointer(rebasing: bytes[(index + 1)..<end]))
            else { return nil }
            index = end + 1
            return value
        }

        /// Whether all eight bytes of `word` are printable ASCII other than a quote or a
        /// backslash (0x20...0x7E without 0x22 and 0x5C). Exact: each test marks the high bit of
        /// a byte that fails it, and no borrow or carry crosses from one byte into the next
        /// (each works on the byte's seven low bits, with the high bit set before subtracting).
        static func isPlainASCII(_ word: UInt64) -> Bool {
            let high: UInt64 = 0x8080_8080_8080_8080
            let ones: UInt64 = 0x0101_0101_0101_0101
            let low7 = word & ~high
            let nonASCII = word & high
            let control = ~((low7 | high) &- (ones &* 0x20)) & high
            let delete = (low7 &+ ones) & high
            func equals(_ c: UInt64) -> UInt64 { ~(((low7 ^ (ones &* c)) | high) &- ones) & high }
            return (nonASCII | control | delete | equals(0x22) | equals(0x5C)) == 0
        }

        mutating func hex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("short '\\u' escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[index]
                let d: UInt32
                switch c {
                case 0x30...0x39: d = UInt32(c - 0x30)
                case 0x61...0x66: d = UInt32(c - 0x61 + 10)
                case 0x41...0x46: d = UInt32(c - 0x41 + 10)
                default: throw error("invalid hex digit in '\\u' escape")
                }
                v = v << 4 | d
                index += 1
            }
            return v
        }
    }
}

/// A JSON document the library produces (a subject's consents, a report, a FHIR bundle): its
/// canonical bytes (RFC 8785), or the document itself inside a caller's own `Encodable` value
/// (a service's response body). The value type behind it is the library's own.
public struct JSONDocument: Hashable, Sendable, Encodable, CustomStringConvertible {
    package let value: JSONValue

    package init(_ value: JSONValue) { self.value = value }

    /// The canonical JSON bytes (RFC 8785), without a trailing newline.
    public var canonicalBytes: [UInt8] { CanonicalJSON.serialize(value) }

    public var description: String { String(decoding: canonicalBytes, as: UTF8.self) }

    public func encode(to encoder: any Encoder) throws { try Self.encode(value, to: encoder) }

    private struct Key: CodingKey {
        let stringValue: String
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }

    private static func encode(_ value: JSONValue, to encoder: any Encoder) throws {
        switch value {
        case .object(let members):
            var container = encoder.container(keyedBy: Key.self)
            for (key, member) in members { try container.encode(JSONDocument(member), forKey: Key(key)) }
        case .array(let items):
            var container = encoder.unkeyedContainer()
            for item in items { try container.encode(JSONDocument(item)) }
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .bool(let b):
            var container = encoder.singleValueContainer()
            try container.encode(b)
        case .int(let i):
            var container = encoder.singleValueContainer()
            try container.encode(i)
        case .string(let s):
            var container = encoder.singleValueContainer()
            try container.encode(s)
        }
    }
}

extension CanonicalJSON {
    /// Reads a JSON object, keeping every member but one array, `lazy`, whose elements are
    /// checked and dropped: only where each starts is kept. A large array (an export bundle's
    /// `events`) then costs a few bytes per element, not a tree, and each element is read again
    /// from its offset (``parseElement(_:at:)``) when it is wanted. The object is read exactly as
    /// ``parse(_:canonical:)`` reads it, with the same errors; a `lazy` member that is not an
    /// array is kept as a member. `passed` is told, every few thousand elements, the offset
    /// below which the array has been read (a mapped file gives those pages back).
    /// `each` sees every element of the lazy array as it is read, before it is dropped.
    package static func parseObject(_ buffer: UnsafeBufferPointer<UInt8>, lazy: String, canonical: Bool, passed: (Int) -> Void = { _ in }, each: (JSONValue) -> Void = { _ in }) throws(JSONParseError) -> (members: [String: JSONValue], offsets: [Int]?) {
        var p = Parser(bytes: buffer, canonical: canonical)
        p.skipWhitespace()
        guard p.index < buffer.count, buffer[p.index] == UInt8(ascii: "{") else {
            // Not an object: read as any other JSON, so that its errors are the same.
            return (try parse(buffer, canonical: canonical).objectValue ?? [:], nil)
        }
        p.index += 1
        var members: [String: JSONValue] = [:]
        var offsets: [Int]?
        var previousKey: String?
        p.skipWhitespace()
        if p.index < buffer.count, buffer[p.index] == UInt8(ascii: "}") {
            p.index += 1
        } else {
            while true {
                p.skipWhitespace()
                guard p.index < buffer.count, buffer[p.index] == UInt8(ascii: "\"") else { throw p.error("expected a member name") }
                let keyOffset = p.index
                let key = try p.parseString()
                if members[key] != nil || (key == lazy && offsets != nil) { throw p.error("duplicate member name '\(key)'", at: keyOffset) }
                if canonical, let previousKey, !utf16Less(previousKey, key) {
                    throw p.error("member '\(key)' is out of canonical (RFC 8785) order", at: keyOffset)
                }
                previousKey = key
                p.skipWhitespace()
                guard p.index < buffer.count, buffer[p.index] == UInt8(ascii: ":") else { throw p.error("expected ':'") }
                p.index += 1
                p.skipWhitespace()
                if key == lazy, p.index < buffer.count, buffer[p.index] == UInt8(ascii: "[") {
                    offsets = try p.skipArray(depth: 1, passed: passed, each: each)
                } else {
                    members[key] = try p.parseValue(depth: 1)
                }
                p.skipWhitespace()
                guard p.index < buffer.count else { throw p.error("unexpected end of input in an object") }
                if buffer[p.index] == UInt8(ascii: ",") {
                    p.index += 1
                    continue
                }
                guard buffer[p.index] == UInt8(ascii: "}") else { throw p.error("expected ',' or '}'") }
                p.index += 1
                break
            }
        }
        p.skipWhitespace()
        guard p.index == buffer.count else { throw p.error("unexpected bytes after the JSON value") }
        return (members, offsets)
    }

    /// The element of a lazy array (``parseObject(_:lazy:canonical:)``) that starts at `offset`.
    package static func parseElement(_ buffer: UnsafeBufferPointer<UInt8>, at offset: Int, canonical: Bool) throws(JSONParseError) -> JSONValue {
        var p = Parser(bytes: buffer, canonical: canonical)
        p.index = offset
        return try p.parseValue(depth: 2)
    }
}

extension CanonicalJSON.Parser {
    /// Reads an array whose elements are checked and dropped; returns where each starts.
    mutating func skipArray(depth: Int, passed: (Int) -> Void, each: (JSONValue) -> Void) throws(JSONParseError) -> [Int] {
        var offsets: [Int] = []
        try forEachElement { (p) throws(JSONParseError) in
            if offsets.count % 4096 == 0 { passed(p.index) }
            offsets.append(p.index)
            each(try p.parseValue(depth: depth + 1))
        }
        return offsets
    }
}
