import ConsentDomain
import PropertyBased
import Testing

/// Human output shows the app's date format with the time of day, in UTC, and input accepts that
/// same form, so a time copied from the output can be typed back.
@Suite struct TimeFormatTests {
    @Test(arguments: [("2026-11-21T09:05:59.999Z", "21.11.2026 09:05"), ("2026-01-01T00:00:00.000Z", "01.01.2026 00:00"), ("1999-12-31T23:59:00.000Z", "31.12.1999 23:59")])
    func outputShowsDayMonthYearHourMinute(_ case_: (String, String)) throws {
        let t = try #require(Timestamp(rfc3339: case_.0))
        #expect(t.dayMonthYearTime == case_.1)
    }

    @Test(arguments: [("21.11.2026 09:05", "2026-11-21T09:05:00.000Z"), ("21.11.2026", "2026-11-21T23:59:59.999Z")])
    func inputAcceptsTheSameForm(_ case_: (String, String)) throws {
        #expect(Timestamp(dayMonthYear: case_.0)?.rfc3339 == case_.1)
    }

    @Test(arguments: ["21.11.26", "2026-11-21", "21.11.2026 9:05", "32.11.2026", "21.13.2026 10:00", "21.11.2026 24:00", "21.11.2026  10:00", ""])
    func otherFormsAreRefused(_ text: String) {
        #expect(Timestamp(dayMonthYear: text) == nil, "\(text.debugDescription)")
    }

    /// A canonical time read in place from a line's bytes is the time the general parser reads
    /// from the same text, and nothing the parser refuses: random times of the canonical shape
    /// with fields out of range now and then (month 0 or 13, day 0 or past the month's end,
    /// hour 24, minute or second 60), and one byte in three strings replaced by another.
    @Test func aCanonicalTimeReadInPlaceIsTheOneTheParserReads() async {
        let date = zip(Gen.int(in: 0...9999), Gen.int(in: 0...13), Gen.int(in: 0...32))
        let time = zip(Gen.int(in: 0...24), Gen.int(in: 0...60), Gen.int(in: 0...60), Gen.int(in: 0...999))
        let damage = zip(Gen.int(in: -40...23), Gen.int(in: 0x20...0x7E))
        await propertyCheck(count: 2_000, input: zip(date, time, damage)) { date, time, damage in
            func pad(_ value: Int, _ width: Int) -> String {
                let digits = String(value)
                return String(repeating: "0", count: max(0, width - digits.count)) + digits
            }
            var bytes = Array("\(pad(date.0, 4))-\(pad(date.1, 2))-\(pad(date.2, 2))T\(pad(time.0, 2)):\(pad(time.1, 2)):\(pad(time.2, 2)).\(pad(time.3, 3))Z".utf8)
            if damage.0 >= 0 { bytes[damage.0] = UInt8(damage.1) }
            let text = String(decoding: bytes, as: UTF8.self)
            let inPlace = bytes.withUnsafeBufferPointer { Timestamp(canonicalUTF8: $0) }
            #expect(inPlace == Timestamp(canonical: text), "\(text)")
            if let inPlace { #expect(inPlace.rfc3339 == text) }
        }
        // The format's limits, and one past them.
        for text in ["0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z", "2024-02-29T12:00:00.000Z", "2023-02-29T12:00:00.000Z", "2026-04-31T00:00:00.000Z"] {
            let inPlace = Array(text.utf8).withUnsafeBufferPointer { Timestamp(canonicalUTF8: $0) }
            #expect(inPlace == Timestamp(canonical: text), "\(text)")
        }
        #expect(Array("2026-01-01T00:00:00.000Z".utf8).withUnsafeBufferPointer { Timestamp(canonicalUTF8: $0) } != nil)
        #expect(Array("2026-01-01T00:00:00.00Z".utf8).withUnsafeBufferPointer { Timestamp(canonicalUTF8: $0) } == nil)
    }
}
