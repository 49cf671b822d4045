/// Text that came from a ledger, a bundle, a request or another process, made safe to show on
/// a terminal: control characters (C0, DEL, C1) and the Unicode controls that reorder text are
/// written as escapes (`\n`, `\r`, `\t`, `\u{1B}`), so that no such string can move the cursor,
/// change colours, clear the screen, or start a line that looks like the tool's own output
/// ("OK: 99 events"). Everything else is shown as it is.
public enum Terminal {
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default: out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            }
        }
        return out
    }

    /// C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates
    /// (U+202A–U+202E, U+2066–U+2069), which make a terminal show text in another order than
    /// it is.
    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
