/// A point in time, UTC, with millisecond precision.
///
/// The domain has no clock: callers pass times in. The ledger format writes a timestamp as
/// RFC 3339 in UTC with exactly three fractional digits, `2026-11-21T22:42:59.123Z`, so that one
/// instant has exactly one spelling (see `Spec/ledger-format.md`).
public struct Timestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public let millisecondsSinceEpoch: Int64

    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = millisecondsSinceEpoch
    }

    /// The earliest time the ledger format can write (0000-01-01T00:00:00.000Z).
    public static let earliest = Timestamp(millisecondsSinceEpoch: -62_167_219_200_000)
    /// The latest time the ledger format can write (9999-12-31T23:59:59.999Z).
    public static let latest = Timestamp(millisecondsSinceEpoch: 253_402_300_799_999)

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    public var description: String { rfc3339 }

    /// The canonical form: `YYYY-MM-DDTHH:MM:SS.sssZ`.
    public var rfc3339: String {
        let (days, msOfDay) = Self.floorDivide(millisecondsSinceEpoch, 86_400_000)
        let (y, m, d) = Self.civilDate(fromDays: days)
        let h = msOfDay / 3_600_000
        let mi = (msOfDay / 60_000) % 60
        let s = (msOfDay / 1000) % 60
        let ms = msOfDay % 1000
        // Every event's body and listing writes a time: the usual years are written as digits
        // into one buffer, without the interpolation's intermediate strings.
        if (0...9999).contains(y) {
            return String(unsafeUninitializedCapacity: 24) { buffer in
                func digits(_ value: Int64, _ width: Int, at start: Int) {
                    var value = value
                    for i in stride(from: start + width - 1, through: start, by: -1) {
                        buffer[i] = UInt8(ascii: "0") + UInt8(value % 10)
                        value /= 10
                    }
                }
                digits(y, 4, at: 0); buffer[4] = UInt8(ascii: "-")
                digits(m, 2, at: 5); buffer[7] = UInt8(ascii: "-")
                digits(d, 2, at: 8); buffer[10] = UInt8(ascii: "T")
                digits(h, 2, at: 11); buffer[13] = UInt8(ascii: ":")
                digits(mi, 2, at: 14); buffer[16] = UInt8(ascii: ":")
                digits(s, 2, at: 17); buffer[19] = UInt8(ascii: ".")
                digits(ms, 3, at: 20); buffer[23] = UInt8(ascii: "Z")
                return 24
            }
        }
        return "\(Self.pad(y, 4))-\(Self.pad(m, 2))-\(Self.pad(d, 2))T\(Self.pad(h, 2)):\(Self.pad(mi, 2)):\(Self.pad(s, 2)).\(Self.pad(ms, 3))Z"
    }

    /// The date as the app shows it (rule R7): `dd.MM.yyyy`, in UTC.
    public var dayMonthYear: String {
        let (days, _) = Self.floorDivide(millisecondsSinceEpoch, 86_400_000)
        let (y, m, d) = Self.civilDate(fromDays: days)
        return "\(Self.pad(d, 2)).\(Self.pad(m, 2)).\(Self.pad(y, 4))"
    }

    /// `dd.MM.yyyy HH:mm` in a zone: the app's date format with the time of day, as people read it.
    public func dayMonthYearTime(in zone: ZoneRules) -> String { zone.local(self).dayMonthYearTime }

    /// `dd.MM.yyyy HH:mm` in UTC: the app's date format (R7) with the time of day.
    public var dayMonthYearTime: String {
        let (_, ms) = Self.floorDivide(millisecondsSinceEpoch, 86_400_000)
        let minutes = ms / 60_000
        return dayMonthYear + " " + Self.pad(minutes / 60, 2) + ":" + Self.pad(minutes % 60, 2)
    }

    /// Parses `dd.MM.yyyy HH:mm` (UTC), the form human output shows, or `dd.MM.yyyy` alone,
    /// meaning the end of that day, as a bare RFC 3339 date does.
    public init?(dayMonthYear text: String) {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 1 || parts.count == 2 else { return nil }
        let date = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        guard date.count == 3, date[0].count == 2, date[1].count == 2, date[2].count == 4 else { return nil }
        var iso = "\(date[2])-\(date[1])-\(date[0])"
        if parts.count == 2 {
            let time = parts[1].split(separator: ":", omittingEmptySubsequences: false)
            guard time.count == 2, time[0].count == 2, time[1].count == 2 else { return nil }
            iso += "T\(time[0]):\(time[1]):00Z"
        }
        guard let t = Timestamp(rfc3339: iso) else { return nil }
        self = t
    }

    /// Parses exactly the canonical form written by ``rfc3339``; anything else is `nil`.
    /// Parses the canonical form from UTF-8 bytes.
    public init?(canonicalUTF8 b: UnsafeBufferPointer<UInt8>) {
        // Read in place, the fields at their fixed offsets: every event has a time, and the
        // general parser (offsets, fractions of any length, checked twice over) was 700
        // instructions of each event's replay.
        guard b.count == 24, let base = b.baseAddress,
            base[4] == 0x2D, base[7] == 0x2D, base[10] == 0x54, base[13] == 0x3A, base[16] == 0x3A, base[19] == 0x2E, base[23] == 0x5A
        else { return nil }
        var notDigits: UInt8 = 0
        func number(_ from: Int, _ count: Int) -> Int64 {
            var value: Int64 = 0
            for i in from..<from + count {
                let digit = base[i] &- 0x30
                notDigits |= digit > 9 ? 1 : 0
                value = value &* 10 &+ Int64(digit)
            }
            return value
        }
        let (y, mo, d) = (number(0, 4), number(5, 2), number(8, 2))
        let (h, mi, s, ms) = (number(11, 2), number(14, 2), number(17, 2), number(20, 3))
        guard notDigits == 0, mo >= 1, mo <= 12, d >= 1, d <= Self.daysInMonth(y, mo), h < 24, mi < 60, s < 60 else { return nil }
        let value = Timestamp(millisecondsSinceEpoch: Self.days(fromCivil: y, mo, d) * 86_400_000 + h * 3_600_000 + mi * 60_000 + s * 1000 + ms)
        guard value >= .earliest, value <= .latest else { return nil }
        self = value
    }

    public init?(canonical text: String) {
        // The canonical form is fixed-width: digits everywhere but the separators. With that
        // shape, and fields the parser accepts as in range, formatting gives back the same text.
        var shapeOK = text.utf8.count == 24
        if shapeOK {
            for (i, c) in text.utf8.enumerated() {
                switch i {
                case 4, 7: shapeOK = shapeOK && c == 0x2D
                case 10: shapeOK = shapeOK && c == 0x54
                case 13, 16: shapeOK = shapeOK && c == 0x3A
                case 19: shapeOK = shapeOK && c == 0x2E
                case 23: shapeOK = shapeOK && c == 0x5A
                default: shapeOK = shapeOK && c >= 0x30 && c <= 0x39
                }
            }
        }
        guard shapeOK, let parsed = Timestamp(rfc3339: text) else { return nil }
        self = parsed
    }

    /// Parses what a person may type: an RFC 3339 date-time with `Z` or a numeric offset and
    /// any number of fractional digits (truncated to milliseconds), or a bare date `YYYY-MM-DD`,
    /// meaning the end of that day in UTC (so `--at 2026-11-21` includes all of that day).
    public init?(rfc3339 text: String) {
        var text = text
        guard let value = text.withUTF8({ Timestamp.parse($0) }) else { return nil }
        self = value
    }

    private static func parse(_ b: UnsafeBufferPointer<UInt8>) -> Timestamp? {
        func digits(_ from: Int, _ count: Int) -> Int64? {
            guard from + count <= b.count else { return nil }
            var v: Int64 = 0
            for i in from..<(from + count) {
                let c = b[i]
                guard c >= 0x30, c <= 0x39 else { return nil }
                v = v * 10 + Int64(c - 0x30)
            }
            return v
        }
        guard let y = digits(0, 4), b.count >= 10, b[4] == 0x2D, let mo = digits(5, 2), b[7] == 0x2D,
            let d = digits(8, 2), (1...12).contains(mo), d >= 1, d <= Self.daysInMonth(y, mo)
        else { return nil }
        let days = Self.days(fromCivil: y, mo, d)
        if b.count == 10 {
            return Timestamp(millisecondsSinceEpoch: days * 86_400_000 + 86_399_999)
        }
        guard b.count >= 20, b[10] == 0x54 || b[10] == 0x74, let h = digits(11, 2), b[13] == 0x3A,
            let mi = digits(14, 2), b[16] == 0x3A, let s = digits(17, 2), h < 24, mi < 60, s < 60
        else { return nil }
        var i = 19
        var ms: Int64 = 0
        if b[i] == 0x2E {
            i += 1
            var n = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                if n < 3 { ms = ms * 10 + Int64(b[i] - 0x30) }
                n += 1
                i += 1
            }
            guard n > 0 else { return nil }
            for _ in n..<max(n, 3) { ms *= 10 }
        }
        guard i < b.count else { return nil }
        var offsetMinutes: Int64 = 0
        if b[i] == 0x5A || b[i] == 0x7A {
            i += 1
        } else if b[i] == 0x2B || b[i] == 0x2D {
            let sign: Int64 = b[i] == 0x2D ? -1 : 1
            guard let oh = digits(i + 1, 2), i + 3 < b.count, b[i + 3] == 0x3A, let om = digits(i + 4, 2),
                oh < 24, om < 60
            else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let local = days * 86_400_000 + h * 3_600_000 + mi * 60_000 + s * 1000 + ms
        let value = Timestamp(millisecondsSinceEpoch: local - offsetMinutes * 60_000)
        guard value >= .earliest, value <= .latest else { return nil }
        return value
    }

    // MARK: - Calendar arithmetic (proleptic Gregorian, after Howard Hinnant's algorithms)

    static func floorDivide(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b
        var r = a % b
        if r < 0 {
            q -= 1
            r += b
        }
        return (q, r)
    }

    static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civilDate(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    private static func daysInMonth(_ y: Int64, _ m: Int64) -> Int64 {
        switch m {
        case 2: return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    private static func pad(_ v: Int64, _ width: Int) -> String {
        let s = String(v)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
}
