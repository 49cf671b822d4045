/// The UTC offsets of one time zone, for showing times to people (`--tz Europe/Berlin`).
///
/// Built from the bytes of a TZif file (RFC 8536), the format of the IANA time zone database in
/// `/usr/share/zoneinfo`: its transitions, and its footer's POSIX TZ rule for times after the last
/// one. The domain reads no files; the caller hands it the bytes. Rules, events and every stored
/// time stay UTC: a zone only changes how a time is printed and how a typed local time is read.
public struct ZoneRules: Hashable, Sendable {
    /// The zone's name as given (`UTC`, `Europe/Berlin`, `+01:00`).
    public let name: String
    /// Transition times (seconds since the epoch, ascending) and the offset (seconds east of UTC)
    /// that starts at each.
    let transitions: [(at: Int64, offset: Int32)]
    /// The offset before the first transition.
    let initialOffset: Int32
    /// The footer's rule, for times after the last transition.
    let rule: PosixRule?

    public static let utc = ZoneRules(name: "UTC", fixedOffsetSeconds: 0)

    public static func == (a: ZoneRules, b: ZoneRules) -> Bool { a.name == b.name }
    public func hash(into hasher: inout Hasher) { hasher.combine(name) }

    /// A zone with one fixed offset, such as `+01:00`.
    public init(name: String, fixedOffsetSeconds: Int32) {
        self.name = name
        transitions = []
        initialOffset = fixedOffsetSeconds
        rule = nil
    }

    /// A fixed offset written `+HH:MM` or `-HH:MM` (or `Z`/`UTC`), or nil.
    public init?(offset text: String) {
        if text == "UTC" || text == "Z" || text == "GMT" { self = .utc; return }
        let chars = Array(text.utf8)
        guard chars.count == 6, chars[0] == UInt8(ascii: "+") || chars[0] == UInt8(ascii: "-"), chars[3] == UInt8(ascii: ":"),
            let h = Int32(String(decoding: chars[1...2], as: UTF8.self)), let m = Int32(String(decoding: chars[4...5], as: UTF8.self)),
            h <= 18, m < 60
        else { return nil }
        self.init(name: text, fixedOffsetSeconds: (chars[0] == UInt8(ascii: "-") ? -1 : 1) * (h * 3600 + m * 60))
    }

    /// Parses a TZif file (versions 1–4). Nil when the bytes are not one.
    public init?(name: String, tzif bytes: [UInt8]) {
        func u32(_ i: Int) -> UInt32? {
            guard i >= 0, i + 4 <= bytes.count else { return nil }
            return bytes[i..<i + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
        func i64(_ i: Int) -> Int64? {
            guard i >= 0, i + 8 <= bytes.count else { return nil }
            return Int64(bitPattern: bytes[i..<i + 8].reduce(0) { $0 << 8 | UInt64($1) })
        }
        guard bytes.count >= 44, bytes.starts(with: Array("TZif".utf8)) else { return nil }
        func counts(_ at: Int) -> (isut: Int, isstd: Int, leap: Int, time: Int, type: Int, char: Int)? {
            guard let a = u32(at + 20), let b = u32(at + 24), let c = u32(at + 28), let d = u32(at + 32), let e = u32(at + 36), let f = u32(at + 40),
                e >= 1, d < 100_000, e < 256, f < 100_000, c < 100_000
            else { return nil }
            return (Int(a), Int(b), Int(c), Int(d), Int(e), Int(f))
        }
        guard let v1 = counts(0) else { return nil }
        let version = bytes[4]
        var header = 0
        var timeSize = 4
        var c = v1
        if version >= UInt8(ascii: "2") {
            // Skip the 32-bit block to the 64-bit header and data.
            header = 44 + v1.time * 4 + v1.time + v1.type * 6 + v1.char + v1.leap * 8 + v1.isstd + v1.isut
            guard let v2 = counts(header), bytes.count >= header + 44, bytes[header..<header + 4].elementsEqual(Array("TZif".utf8)) else { return nil }
            c = v2
            timeSize = 8
        }
        let times = header + 44
        let indices = times + c.time * timeSize
        let types = indices + c.time
        let end = types + c.type * 6 + c.char + c.leap * (timeSize + 4) + c.isstd + c.isut
        guard end <= bytes.count else { return nil }
        var offsets: [Int32] = []
        for t in 0..<c.type {
            guard let raw = u32(types + t * 6) else { return nil }
            offsets.append(Int32(bitPattern: raw))
        }
        var list: [(Int64, Int32)] = []
        for i in 0..<c.time {
            let at: Int64
            if timeSize == 8 { guard let v = i64(times + i * 8) else { return nil }; at = v } else { guard let v = u32(times + i * 4) else { return nil }; at = Int64(Int32(bitPattern: v)) }
            let index = Int(bytes[indices + i])
            guard index < offsets.count else { return nil }
            list.append((at, offsets[index]))
        }
        guard zip(list, list.dropFirst()).allSatisfy({ $0.0 < $1.0 }) else { return nil }
        self.name = name
        transitions = list
        // RFC 8536: local time before the first transition is type 0.
        initialOffset = offsets[0]
        var footer: PosixRule?
        if timeSize == 8, end < bytes.count, bytes[end] == 0x0A, let close = bytes[(end + 1)...].firstIndex(of: 0x0A) {
            footer = PosixRule(String(decoding: bytes[(end + 1)..<close], as: UTF8.self))
        }
        rule = footer
    }

    /// The offset east of UTC, in seconds, at a moment.
    public func offsetSeconds(at t: Timestamp) -> Int32 {
        let s = Self.floorSeconds(t.millisecondsSinceEpoch)
        guard let first = transitions.first, s >= first.at else { return transitions.isEmpty ? (rule?.offset(atUTC: s) ?? initialOffset) : initialOffset }
        if let last = transitions.last, s >= last.at, let rule { return rule.offset(atUTC: s) }
        var low = 0, high = transitions.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if transitions[mid].at <= s { low = mid } else { high = mid - 1 }
        }
        return transitions[low].offset
    }

    /// The UTC moment a local wall-clock time (read as if it were UTC) names in this zone. In a
    /// gap or an overlap of a daylight-saving change it takes the offset in force just before.
    public func utc(fromLocal local: Timestamp) -> Timestamp {
        let guess = Int64(offsetSeconds(at: local)) * 1000
        let first = Timestamp(millisecondsSinceEpoch: local.millisecondsSinceEpoch - guess)
        let offset = Int64(offsetSeconds(at: first)) * 1000
        return Timestamp(millisecondsSinceEpoch: local.millisecondsSinceEpoch - offset)
    }

    /// The local wall-clock time of a moment, as a timestamp whose UTC fields are the local ones.
    public func local(_ t: Timestamp) -> Timestamp {
        Timestamp(millisecondsSinceEpoch: t.millisecondsSinceEpoch + Int64(offsetSeconds(at: t)) * 1000)
    }

    static func floorSeconds(_ ms: Int64) -> Int64 { ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000) }
}

/// A POSIX TZ rule such as `CET-1CEST,M3.5.0,M10.5.0/3` (the TZif footer): a standard offset and
/// optionally a daylight-saving offset with the `M` rules that start and end it.
struct PosixRule: Sendable {
    let standard: Int32
    let daylight: Int32?
    /// (month, week 1–5, weekday 0–6, seconds after local midnight)
    let start: (month: Int, week: Int, day: Int, time: Int64)?
    let end: (month: Int, week: Int, day: Int, time: Int64)?

    init?(_ text: String) {
        var s = Substring(text)
        func name() -> Bool {
            if s.first == "<" {
                guard let close = s.firstIndex(of: ">") else { return false }
                s = s[s.index(after: close)...]
                return true
            }
            let letters = s.prefix { $0.isLetter }
            guard letters.count >= 3 else { return false }
            s = s.dropFirst(letters.count)
            return true
        }
        /// [+-]hh[:mm[:ss]] as seconds; POSIX offsets are west-positive, so the caller negates.
        func time() -> Int64? {
            var sign: Int64 = 1
            if s.first == "+" { s = s.dropFirst() } else if s.first == "-" { sign = -1; s = s.dropFirst() }
            var parts: [Int64] = []
            for _ in 0..<3 {
                let digits = s.prefix { $0.isASCII && $0.isNumber }
                guard !digits.isEmpty, digits.count <= 3, let v = Int64(digits), v <= (parts.isEmpty ? 167 : 59) else { break }
                parts.append(v)
                s = s.dropFirst(digits.count)
                if s.first == ":" { s = s.dropFirst() } else { break }
            }
            guard !parts.isEmpty else { return nil }
            return sign * (parts[0] * 3600 + (parts.count > 1 ? parts[1] * 60 : 0) + (parts.count > 2 ? parts[2] : 0))
        }
        func date() -> (Int, Int, Int, Int64)? {
            guard s.first == "M" else { return nil }
            s = s.dropFirst()
            let fields = s.prefix { $0.isNumber || $0 == "." }.split(separator: ".").compactMap { Int($0) }
            s = s.dropFirst(s.prefix { $0.isNumber || $0 == "." }.count)
            guard fields.count == 3, (1...12).contains(fields[0]), (1...5).contains(fields[1]), (0...6).contains(fields[2]) else { return nil }
            var at: Int64 = 7200
            if s.first == "/" {
                s = s.dropFirst()
                guard let t = time() else { return nil }
                at = t
            }
            return (fields[0], fields[1], fields[2], at)
        }
        guard name(), let std = time() else { return nil }
        standard = Int32(-std)
        if s.isEmpty {
            daylight = nil; start = nil; end = nil
            return
        }
        guard name() else { return nil }
        var dst = -std + 3600
        if s.first != ",", !s.isEmpty { guard let d = time() else { return nil }; dst = -d }
        daylight = Int32(dst)
        guard s.first == "," else { return nil }
        s = s.dropFirst()
        guard let a = date(), s.first == "," else { return nil }
        s = s.dropFirst()
        guard let b = date(), s.isEmpty else { return nil }
        start = (a.0, a.1, a.2, a.3)
        end = (b.0, b.1, b.2, b.3)
    }

    /// The offset at a UTC second.
    func offset(atUTC seconds: Int64) -> Int32 {
        guard let daylight, let start, let end else { return standard }
        let year = Timestamp.civilDate(fromDays: Timestamp.floorDivide(seconds * 1000 + Int64(standard) * 1000, 86_400_000).0).0
        // Each change happens at a local time: the start in standard time, the end in daylight.
        let begins = Self.moment(year, start) - Int64(standard)
        let ends = Self.moment(year, end) - Int64(daylight)
        let inside = begins < ends ? (seconds >= begins && seconds < ends) : !(seconds >= ends && seconds < begins)
        return inside ? daylight : standard
    }

    /// Seconds since the epoch of the local time "week w's weekday d of month m, plus time",
    /// counted as if local were UTC (week 5 means the last).
    static func moment(_ year: Int64, _ rule: (month: Int, week: Int, day: Int, time: Int64)) -> Int64 {
        let first = Timestamp.days(fromCivil: year, Int64(rule.month), 1)
        let weekdayOfFirst = Int((first % 7 + 11) % 7)  // 1970-01-01 was a Thursday (4)
        var day = 1 + (rule.day - weekdayOfFirst + 7) % 7 + (rule.week - 1) * 7
        let length = Int(Timestamp.days(fromCivil: rule.month == 12 ? year + 1 : year, rule.month == 12 ? 1 : Int64(rule.month + 1), 1) - first)
        while day > length { day -= 7 }
        return (first + Int64(day - 1)) * 86_400 + rule.time
    }
}
