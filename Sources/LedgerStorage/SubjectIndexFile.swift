import LedgerFormat
import TransparencyLog
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `subjects.idx`: where each subject's record line starts in `subjects.jsonl`, so that a process
/// that reads one subject reads a few hundred bytes of that file instead of all of it (at five
/// million events and 50,000 subjects, 10 MB on every `status`).
///
/// A hint, never an answer. A line it points at is used only when it is a complete line of
/// `subjects.jsonl` that starts as the subject's line starts and decodes as its record; the record
/// is then checked where it is used (its signature), like one found by reading every line. When
/// the index finds nothing, the whole file is read as before: the index never says that a subject
/// has no record. So an index that is stale, cut short, or rewritten by someone without the key can
/// cost a read of the whole file, and nothing else. The layout is in `Spec/ledger-format.md`
/// (`subjects.idx`).
///
/// The layout: a 32-byte header (`CLSUBIX1`, then the slot count, the entries and the size of
/// `subjects.jsonl` the entries describe, each a little-endian u64), then the slots: 16 bytes each,
/// a key (u64; 0 for an empty slot) and the line's byte offset (u64). A key is the first 8 bytes,
/// little-endian, of SHA-256 over the id as its line writes it (the canonical JSON string, quotes
/// included). An entry sits in the first free slot from `key % slots` on (linear probing).
enum SubjectIndexFile {
    static let magic = Array("CLSUBIX1".utf8)
    static let headerSize = 32
    static let slotSize = 16
    /// Slots looked at from a key's first slot. A table at most half full finds a free slot well
    /// before this; an entry that would go further is left out (found by reading every line).
    static let probeLimit = 64
    /// A key that is never a subject's: written over an erased subject's slot, so that the slots
    /// after it stay reachable while the index is rewritten without it.
    static let erasedKey = UInt64.max
    /// The most slots a header may claim (2^36 slots: a terabyte); a larger count is not an index.
    static let maximumSlots: UInt64 = 1 << 36

    struct Header: Equatable {
        var slots: UInt64
        var entries: UInt64
        /// The size of `subjects.jsonl` (bytes) whose lines the entries describe.
        var covered: UInt64
    }

    /// The key of the subject whose line starts `{"id":` ‖ `quotedID` ‖ `,"salt":"`.
    static func key(quotedID: UnsafeRawBufferPointer) -> UInt64 {
        let digest = OpenSSLSHA256().sha256(quotedID)
        let word = Self.word(digest.bytes, 0)
        return word == 0 || word == erasedKey ? 1 : word
    }

    static func key(quotedID: [UInt8]) -> UInt64 {
        quotedID.withUnsafeBytes { key(quotedID: $0) }
    }

    /// The canonical JSON string of an id's line: the bytes that follow `{"id":` in it.
    static func quoted(_ id: SubjectID) -> [UInt8] {
        var out: [UInt8] = []
        CanonicalJSON.writeString(id.text, into: &out)
        return out
    }

    static func header(of file: PosixFile) -> Header? {
        guard let bytes = try? file.read(at: 0, count: headerSize), bytes.count == headerSize, Array(bytes[0..<8]) == magic else { return nil }
        let header = Header(slots: word(bytes, 8), entries: word(bytes, 16), covered: word(bytes, 24))
        guard header.slots >= UInt64(probeLimit), header.slots <= maximumSlots, header.slots & (header.slots - 1) == 0,
              let size = try? file.size(), size >= UInt64(headerSize) + header.slots * UInt64(slotSize)
        else { return nil }
        return header
    }

    /// The offsets the index gives for `key`: unverified, in probing order. Empty when the file is
    /// not an index.
    static func offsets(for key: UInt64, in file: PosixFile) -> [UInt64] {
        guard let header = header(of: file) else { return [] }
        var found: [UInt64] = []
        _ = probe(key, in: file, header) { slot, slotKey, offset in
            if slotKey == 0 { return true }
            if slotKey == key { found.append(offset) }
            return false
        }
        return found
    }

    /// Visits the slots from `key`'s first on, at most ``probeLimit``, until `visit` returns true;
    /// returns the slot it stopped at.
    private static func probe(_ key: UInt64, in file: PosixFile, _ header: Header, _ visit: (UInt64, UInt64, UInt64) -> Bool) -> UInt64? {
        let first = key & (header.slots - 1)
        // The probed slots in at most two reads: up to the table's end, then from its start.
        let head = min(UInt64(probeLimit), header.slots - first)
        guard var bytes = try? file.read(at: UInt64(headerSize) + first * UInt64(slotSize), count: Int(head) * slotSize) else { return nil }
        if head < UInt64(probeLimit) {
            guard let rest = try? file.read(at: UInt64(headerSize), count: (probeLimit - Int(head)) * slotSize) else { return nil }
            bytes += rest
        }
        for i in 0..<(bytes.count / slotSize) {
            let slot = (first + UInt64(i)) & (header.slots - 1)
            if visit(slot, word(bytes, i * slotSize), word(bytes, i * slotSize + 8)) { return slot }
        }
        return nil
    }

    /// The line of `bytes` that starts at `start`, when the byte before it is a newline (or it
    /// starts the file), it starts with `needle`, and a newline ends it; nil for anything else,
    /// whatever `bytes` holds (a read may return less than was asked for).
    static func completeLine(in bytes: [UInt8], at start: Int, atFileStart: Bool, startingWith needle: [UInt8]) -> ArraySlice<UInt8>? {
        guard start >= 0, bytes.count > start + needle.count else { return nil }
        guard atFileStart ? start == 0 : start >= 1 && bytes[start - 1] == 0x0A else { return nil }
        guard bytes[start..<(start + needle.count)].elementsEqual(needle), let end = bytes[start...].firstIndex(of: 0x0A) else { return nil }
        return bytes[start..<end]
    }

    /// Adds entries to the index in place, the file's lines from `covered` to `newCovered`
    /// appended since the index last described it. False when the index must be written afresh
    /// instead: no index, one that describes another size of the file, or too full.
    static func insert(_ added: [(key: UInt64, offset: UInt64)], into file: PosixFile, covered: UInt64, newCovered: UInt64) throws -> Bool {
        guard var header = header(of: file), header.covered == covered, (header.entries + UInt64(added.count)) * 2 <= header.slots else { return false }
        for entry in added {
            guard let slot = probe(entry.key, in: file, header, { _, slotKey, _ in slotKey == 0 }) else { return false }
            try file.write(slotBytes(entry.key, entry.offset), at: UInt64(headerSize) + slot * UInt64(slotSize))
            header.entries += 1
        }
        header.covered = newCovered
        try file.write(headerBytes(header), at: 0)
        return true
    }

    /// Overwrites the slots of `keys` in place with ``erasedKey`` (an erasure: the subject's key
    /// must not stay in the file's blocks). Returns whether any slot was overwritten.
    static func erase(_ keys: [UInt64], in file: PosixFile) throws -> Bool {
        guard let header = header(of: file) else { return false }
        var erased = false
        for key in keys {
            var slots: [UInt64] = []
            _ = probe(key, in: file, header) { slot, slotKey, _ in
                if slotKey == key { slots.append(slot) }
                return slotKey == 0
            }
            for slot in slots {
                try file.write(slotBytes(erasedKey, 0), at: UInt64(headerSize) + slot * UInt64(slotSize))
                erased = true
            }
        }
        return erased
    }

    /// A whole index of `subjects`, the bytes of `subjects.jsonl`: an entry for each complete line
    /// shaped like a record (a line of spaces, an erased record's remains, has none). Four slots
    /// per entry, so that it takes as many new subjects again before it is written afresh.
    static func build(from subjects: [UInt8]) -> [UInt8] {
        let entries = subjects.withUnsafeBytes { self.entries(ofLines: $0, at: 0) }
        var slots = UInt64(probeLimit)
        while slots < UInt64(entries.count) * 4 { slots *= 2 }
        var table = [UInt8](repeating: 0, count: headerSize + Int(slots) * slotSize)
        var placed: UInt64 = 0
        for entry in entries {
            var slot = entry.key & (slots - 1)
            for _ in 0..<probeLimit {
                let at = headerSize + Int(slot) * slotSize
                if word(table, at) == 0 {
                    table.replaceSubrange(at..<(at + slotSize), with: slotBytes(entry.key, entry.offset))
                    placed += 1
                    break
                }
                slot = (slot + 1) & (slots - 1)
            }
        }
        table.replaceSubrange(0..<headerSize, with: headerBytes(Header(slots: slots, entries: placed, covered: UInt64(PosixFile.lastNonZero(subjects).map { $0 + 1 } ?? 0))))
        return table
    }

    /// The entries of `lines`, bytes of `subjects.jsonl` from offset `base` on: one for each
    /// complete line shaped like a record, at the line's offset in the file.
    static func entries(ofLines lines: UnsafeRawBufferPointer, at base: UInt64) -> [(key: UInt64, offset: UInt64)] {
        var entries: [(key: UInt64, offset: UInt64)] = []
        guard let pointer = lines.baseAddress else { return entries }
        let prefix = Array(#"{"id":"#.utf8), middle = Array(#","salt":""#.utf8)
        var start = 0
        while start < lines.count, let newline = memchr(pointer + start, 0x0A, lines.count - start) {
            let end = UnsafeRawPointer(newline) - pointer
            defer { start = end + 1 }
            guard end - start > prefix.count, memcmp(pointer + start, prefix, prefix.count) == 0,
                  memchr(pointer + start, 0, end - start) == nil  // a line an unfinished append left
            else { continue }
            // The id's string ends where `,"salt":"` first follows it: inside a JSON string a
            // quote is always escaped, so the string cannot hold those bytes.
            let from = start + prefix.count
            var length = 0
            while from + length + middle.count <= end, memcmp(pointer + from + length, middle, middle.count) != 0 { length += 1 }
            guard from + length + middle.count <= end else { continue }
            entries.append((key(quotedID: UnsafeRawBufferPointer(start: pointer + from, count: length)), base + UInt64(start)))
        }
        return entries
    }

    static func headerBytes(_ header: Header) -> [UInt8] {
        magic + bytes(header.slots) + bytes(header.entries) + bytes(header.covered)
    }

    private static func slotBytes(_ key: UInt64, _ offset: UInt64) -> [UInt8] {
        bytes(key) + bytes(offset)
    }

    private static func bytes(_ value: UInt64) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    private static func word(_ bytes: [UInt8], _ at: Int) -> UInt64 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) }.littleEndian
    }
}
