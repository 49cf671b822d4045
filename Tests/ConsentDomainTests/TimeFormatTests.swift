import ConsentDomain
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
}
