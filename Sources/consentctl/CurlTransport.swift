import ConsentLedger

#if canImport(Glibc)
import Glibc
#endif

/// The witness client's HTTP: libcurl, loaded only when a command talks to a witness. Linking
/// an HTTP stack into consentctl would slow every command's start (Foundation's networking
/// costs about 6 ms per process here), and consentctl stays free of NIO.
struct CurlWitnessTransport: WitnessTransport {
    /// How long one request may take in all.
    let timeoutMilliseconds: Int

    private typealias Easy = OpaquePointer
    private typealias SetOptionPointer = @convention(c) (Easy?, Int32, UnsafeRawPointer?) -> Int32
    private typealias SetOptionLong = @convention(c) (Easy?, Int32, Int) -> Int32
    private typealias GetInfoPointer = @convention(c) (Easy?, Int32, UnsafeMutableRawPointer?) -> Int32
    private typealias WriteFunction = @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int

    /// libcurl's C API as far as a POST needs it (curl/curl.h: the option numbers are its ABI).
    private struct Curl: @unchecked Sendable {
        let initialize: @convention(c) () -> Easy?
        let cleanup: @convention(c) (Easy?) -> Void
        let perform: @convention(c) (Easy?) -> Int32
        let setPointer: SetOptionPointer
        let setLong: SetOptionLong
        let getInfo: GetInfoPointer
        let describe: @convention(c) (Int32) -> UnsafePointer<CChar>?
        let appendHeader: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> OpaquePointer?
        let freeHeaders: @convention(c) (OpaquePointer?) -> Void

        static let loaded: Result<Curl, ConsentError> = {
            let names = ["libcurl.so.4", "libcurl.so", "libcurl-gnutls.so.4"]
            guard let handle = names.lazy.compactMap({ dlopen($0, RTLD_NOW | RTLD_LOCAL) }).first else {
                return .failure(.unavailable("talking to a witness needs libcurl (Debian: apt-get install libcurl4), and it is not installed"))
            }
            func symbol<T>(_ name: String, as: T.Type) -> T? {
                dlsym(handle, name).map { unsafeBitCast($0, to: T.self) }
            }
            guard let globalInit = symbol("curl_global_init", as: (@convention(c) (Int) -> Int32).self), globalInit(3) == 0,
                let initialize = symbol("curl_easy_init", as: (@convention(c) () -> Easy?).self),
                let cleanup = symbol("curl_easy_cleanup", as: (@convention(c) (Easy?) -> Void).self),
                let perform = symbol("curl_easy_perform", as: (@convention(c) (Easy?) -> Int32).self),
                let setPointer = symbol("curl_easy_setopt", as: SetOptionPointer.self),
                let setLong = symbol("curl_easy_setopt", as: SetOptionLong.self),
                let getInfo = symbol("curl_easy_getinfo", as: GetInfoPointer.self),
                let describe = symbol("curl_easy_strerror", as: (@convention(c) (Int32) -> UnsafePointer<CChar>?).self),
                let appendHeader = symbol("curl_slist_append", as: (@convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> OpaquePointer?).self),
                let freeHeaders = symbol("curl_slist_free_all", as: (@convention(c) (OpaquePointer?) -> Void).self)
            else { return .failure(.unavailable("the libcurl found lacks functions consentctl needs")) }
            return .success(Curl(initialize: initialize, cleanup: cleanup, perform: perform, setPointer: setPointer, setLong: setLong,
                                 getInfo: getInfo, describe: describe, appendHeader: appendHeader, freeHeaders: freeHeaders))
        }()
    }

    // curl/curl.h option and info numbers.
    private static let optURL: Int32 = 10002, optPostFields: Int32 = 10015, optPostFieldSize: Int32 = 60
    private static let optWriteFunction: Int32 = 20011, optWriteData: Int32 = 10001, optHeaders: Int32 = 10023
    private static let optTimeout: Int32 = 155, optConnectTimeout: Int32 = 156, optNoSignal: Int32 = 99
    private static let optProtocols: Int32 = 181, optRedirectProtocols: Int32 = 182
    private static let infoResponseCode: Int32 = 0x200002, infoContentType: Int32 = 0x100012

    /// The answer's body, bounded: a witness answers with a few lines.
    private final class Sink {
        var bytes: [UInt8] = []
        var overflow = false
    }

    func addCheckpoint(_ body: [UInt8], to url: String) throws -> WitnessResponse {
        let curl = try Curl.loaded.get()
        guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
            throw ConsentError.invalidRequest("--witness-url \(url): a witness is reached over http:// or https://")
        }
        let endpoint = (url.hasSuffix("/") ? String(url.dropLast()) : url) + "/add-checkpoint"
        guard let easy = curl.initialize() else { throw ConsentError.unavailable("libcurl could not start a request") }
        defer { curl.cleanup(easy) }
        let sink = Sink()
        let context = Unmanaged.passUnretained(sink).toOpaque()
        let write: WriteFunction = { data, size, count, context in
            let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
            let n = size * count
            guard sink.bytes.count + n <= AddCheckpointRequest.maximumBytes else { sink.overflow = true; return 0 }
            data!.withMemoryRebound(to: UInt8.self, capacity: n) { sink.bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: n)) }
            return n
        }
        var headers = curl.appendHeader(nil, "Content-Type: text/plain; charset=utf-8")
        headers = curl.appendHeader(headers, "Expect:")
        defer { curl.freeHeaders(headers) }
        let code: Int32 = endpoint.withCString { urlPointer in
            body.withUnsafeBytes { payload in
                var failed: Int32 = 0
                for result in [
                    curl.setPointer(easy, Self.optURL, urlPointer),
                    curl.setLong(easy, Self.optProtocols, 3),  // CURLPROTO_HTTP | CURLPROTO_HTTPS
                    curl.setLong(easy, Self.optRedirectProtocols, 0),
                    curl.setLong(easy, Self.optNoSignal, 1),
                    curl.setLong(easy, Self.optTimeout, timeoutMilliseconds),
                    curl.setLong(easy, Self.optConnectTimeout, min(timeoutMilliseconds, 5000)),
                    curl.setLong(easy, Self.optPostFieldSize, payload.count),
                    curl.setPointer(easy, Self.optPostFields, payload.baseAddress),
                    curl.setPointer(easy, Self.optHeaders, UnsafeRawPointer(headers)),
                    curl.setPointer(easy, Self.optWriteFunction, unsafeBitCast(write, to: UnsafeRawPointer.self)),
                    curl.setPointer(easy, Self.optWriteData, UnsafeRawPointer(context)),
                ] where result != 0 && failed == 0 { failed = result }
                return failed != 0 ? failed : curl.perform(easy)
            }
        }
        withExtendedLifetime(sink) {}
        guard !sink.overflow else { throw ConsentError.unavailable("the witness at \(url) answered with more than \(AddCheckpointRequest.maximumBytes) bytes") }
        guard code == 0 else {
            throw ConsentError.unavailable("cannot reach the witness at \(url): \(curl.describe(code).map { String(cString: $0) } ?? "libcurl error \(code)")")
        }
        var status = 0
        _ = curl.getInfo(easy, Self.infoResponseCode, &status)
        var type: UnsafePointer<CChar>?
        _ = curl.getInfo(easy, Self.infoContentType, &type)
        return WitnessResponse(status: status, contentType: type.map { String(cString: $0) } ?? "", body: sink.bytes, problem: nil)
    }
}
