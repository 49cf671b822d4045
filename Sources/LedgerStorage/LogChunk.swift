import Dispatch
import LedgerFormat
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A chunk of the log read into a buffer after the partial line the chunk before ended with:
/// the spans of its complete lines, and where the partial line it ends with starts.
struct LogChunk {
    /// Bytes read from the file (after the carried partial line).
    let read: Int
    /// Bytes of the buffer in use: the carried partial line and those read.
    let filled: Int
    /// The complete lines, without their 0x0A (only the event lines, when head lines are skipped).
    let spans: [Range<Int>]
    /// Where the partial line the chunk ends with starts (`filled` when it ends with a line).
    let consumed: Int

    /// Copies `carried` bytes of `carry` to the front of `buffer`, reads up to `count` bytes
    /// at `offset` after them, and finds the lines.
    static func read(_ file: PosixFile, into buffer: inout [UInt8], carryFrom carry: (bytes: [UInt8], range: Range<Int>)?, at offset: UInt64, count: Int, skipHeads: Bool) throws -> LogChunk {
        let carried = carry?.range.count ?? 0
        if buffer.count < carried + count { buffer.append(contentsOf: repeatElement(0, count: carried + count - buffer.count)) }
        if let carry, carried > 0 {
            buffer.withUnsafeMutableBytes { to in
                carry.bytes.withUnsafeBytes { from in _ = memcpy(to.baseAddress!, from.baseAddress! + carry.range.lowerBound, carried) }
            }
        }
        let read = try file.readInParts(at: offset, into: &buffer, startingAt: carried, count: count)
        let filled = carried + read
        var spans: [Range<Int>] = []
        var consumed = 0
        buffer.withUnsafeBufferPointer { all in
            let base = all.baseAddress!
            var start = 0
            while start < filled, let hit = memchr(base + start, Int32(FileLedgerStore.newline), filled - start) {
                let end = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                if !skipHeads || !SignedHead.isLogLine(UnsafeBufferPointer(rebasing: all[start..<end])) { spans.append(start..<end) }
                start = end + 1
            }
            consumed = start
        }
        return LogChunk(read: read, filled: filled, spans: spans, consumed: consumed)
    }

    /// The next chunk, read on another thread while the caller visits the one before (whose
    /// buffer this reads its carried partial line from, and does not write).
    final class ReadAhead: @unchecked Sendable {
        private let file: PosixFile
        private var buffer: [UInt8]
        private var carry: [UInt8]?
        private let carried: Range<Int>
        private let offset: UInt64
        private let count: Int
        private let skipHeads: Bool
        private let queue: DispatchQueue
        private var result: Result<LogChunk, any Error>?
        private let group = DispatchGroup()

        /// `queue`: a serial queue of the reader's own. Work sent to Dispatch's global queue
        /// waits for a free thread of its pool, which the visitor's work on every core holds
        /// until it is done, so the read began only then; a queue made with a label may start
        /// a thread of its own. One for each reader, so that readers do not wait for each
        /// other's reads.
        init(file: PosixFile, buffer: [UInt8], carry: [UInt8], carried: Range<Int>, at offset: UInt64, count: Int, skipHeads: Bool, queue: DispatchQueue) {
            self.queue = queue
            self.file = file
            self.buffer = buffer
            self.carry = carry
            self.carried = carried
            self.offset = offset
            self.count = count
            self.skipHeads = skipHeads
        }

        func start() {
            queue.async(group: group) { [self] in
                result = Result { try LogChunk.read(file, into: &buffer, carryFrom: (carry!, carried), at: offset, count: count, skipHeads: skipHeads) }
                // Let go of the visited chunk's buffer, so that it is written in place when it
                // is the next read's.
                carry = nil
            }
        }

        /// Waits for the read: the chunk (or why it failed) and the buffer it is in.
        @discardableResult
        func wait() -> (Result<LogChunk, any Error>, [UInt8]) {
            group.wait()
            let taken = buffer
            buffer = []
            return (result!, taken)
        }
    }
}
