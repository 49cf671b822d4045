import Foundation
import Testing
@testable import ConsentDomain

/// Time zones for people (`--tz`): offsets from the system's TZif files, before and after their
/// last transition, and the POSIX rule of the footer agreeing with the transitions it continues.
@Suite struct ZoneRulesTests {
    static func zone(_ name: String) throws -> ZoneRules {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "/usr/share/zoneinfo/" + name)))
        return try #require(ZoneRules(name: name, tzif: bytes))
    }

    /// (zone, UTC time, expected offset in seconds): summer and winter, both hemispheres, a
    /// half-hour zone, and years past the file's transitions (the footer's rule).
    @Test(arguments: [
        ("Europe/Berlin", "2026-07-01T12:00:00Z", 7200), ("Europe/Berlin", "2026-01-15T12:00:00Z", 3600),
        ("Europe/Berlin", "2026-03-29T00:59:59Z", 3600), ("Europe/Berlin", "2026-03-29T01:00:00Z", 7200),
        ("Europe/Berlin", "2026-10-25T00:59:59Z", 7200), ("Europe/Berlin", "2026-10-25T01:00:00Z", 3600),
        ("Europe/Berlin", "2050-07-01T12:00:00Z", 7200), ("Europe/Berlin", "2050-12-01T12:00:00Z", 3600),
        ("America/New_York", "2026-07-01T12:00:00Z", -14400), ("America/New_York", "2060-01-10T12:00:00Z", -18000),
        ("Australia/Sydney", "2026-01-10T00:00:00Z", 39600), ("Australia/Sydney", "2026-07-10T00:00:00Z", 36000),
        ("Australia/Sydney", "2055-01-10T00:00:00Z", 39600), ("Australia/Sydney", "2055-07-10T00:00:00Z", 36000),
        ("Asia/Kolkata", "2026-07-01T00:00:00Z", 19800), ("UTC", "2026-07-01T00:00:00Z", 0),
    ])
    func offsetsMatchTheZoneDatabase(name: String, at: String, offset: Int32) throws {
        #expect(try Self.zone(name).offsetSeconds(at: Timestamp(rfc3339: at)!) == offset)
    }

    /// The footer's rule, applied to the years the file also lists transitions for, gives the
    /// same offsets: a check of the POSIX rule reader against the database itself.
    @Test(arguments: ["Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Santiago", "Europe/London"])
    func theFooterRuleAgreesWithTheTransitions(name: String) throws {
        let zone = try Self.zone(name)
        let rule = try #require(zone.rule)
        let from = Timestamp(rfc3339: "2030-01-01T00:00:00Z")!.millisecondsSinceEpoch / 1000
        let until = min(zone.transitions.last!.at, Timestamp(rfc3339: "2037-01-01T00:00:00Z")!.millisecondsSinceEpoch / 1000)
        var s = from
        while s < until {
            #expect(rule.offset(atUTC: s) == zone.offsetSeconds(at: Timestamp(millisecondsSinceEpoch: s * 1000)), "\(name) at \(s)")
            s += 6 * 3600 + 17
        }
    }

    @Test func aLocalTimeIsReadBackInItsZone() throws {
        let berlin = try Self.zone("Europe/Berlin")
        let local = Timestamp(dayMonthYear: "01.07.2026 14:00")!
        #expect(berlin.utc(fromLocal: local) == Timestamp(rfc3339: "2026-07-01T12:00:00Z"))
        #expect(Timestamp(rfc3339: "2026-07-01T12:00:00Z")!.dayMonthYearTime(in: berlin) == "01.07.2026 14:00")
    }

    @Test(arguments: [("+01:00", 3600), ("-05:30", -19800), ("UTC", 0), ("Z", 0), ("+1:00", nil), ("+25:00", nil), ("Europe/Berlin", nil)] as [(String, Int32?)])
    func fixedOffsets(text: String, seconds: Int32?) {
        #expect(ZoneRules(offset: text)?.offsetSeconds(at: Timestamp(millisecondsSinceEpoch: 0)) == seconds)
    }

    @Test(arguments: [[UInt8](), Array("TZif".utf8), Array("TZif2".utf8) + [UInt8](repeating: 0, count: 60), Array("not a zone file at all, but long enough to have a header".utf8)])
    func bytesThatAreNotATZifFileAreRefused(bytes: [UInt8]) {
        #expect(ZoneRules(name: "x", tzif: bytes) == nil)
    }
}

/// Any bytes, and any footer text, give a zone or nil: never a trap.
@Suite struct ZoneRulesRobustnessTests {
    @Test func randomAndMutatedBytesNeverTrap() throws {
        let berlin = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "/usr/share/zoneinfo/Europe/Berlin")))
        var generator = SystemRandomNumberGenerator()
        for round in 0..<2_000 {
            var bytes = berlin
            for _ in 0..<(1 + round % 8) { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            if round % 3 == 0 { bytes = Array(bytes.prefix(Int.random(in: 0..<bytes.count, using: &generator))) }
            if let zone = ZoneRules(name: "x", tzif: bytes) { _ = zone.offsetSeconds(at: Timestamp(millisecondsSinceEpoch: Int64.random(in: -4_000_000_000_000...4_000_000_000_000, using: &generator))) }
        }
        for footer in ["", "CET", "CET-1CEST", "CET-1CEST,M3.5.0", "X99999999999999999-1Y,M1.1.1,M2.2.2", "<+05>-5", "AAA-1BBB,M13.1.0,M1.1.0", "AAA-1BBB,M3.5.0/99999999,M10.5.0/3"] {
            _ = PosixRule(footer)?.offset(atUTC: 1_800_000_000)
        }
    }
}
