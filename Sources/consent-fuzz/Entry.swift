import ConsentLedger
#if canImport(Glibc)
import Glibc
#endif

/// A message on standard error.
func complain(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

/// The target `CONSENT_FUZZ_TARGET` names.
let selectedTarget: FuzzTarget = {
    let name = getenv("CONSENT_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        complain("consent-fuzz: set CONSENT_FUZZ_TARGET to one of: \(names)")
        exit(64)
    }
    return target
}()

#if FUZZING
/// libFuzzer's entry point (built with `--sanitize=fuzzer`, which brings its own `main`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selectedTarget.run(bytes)
    return 0
}
#else
/// Without libFuzzer: runs the target once on each file named (a corpus, or a crash found
/// earlier), for a regression run without the sanitizers.
@main
enum ReplayInputs {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.count == 2, arguments[0] == "--seed-derived" {
            DerivedFiles.shared.writeSeeds(to: arguments[1])
            return
        }
        let files = arguments
        guard !files.isEmpty else {
            complain("usage: CONSENT_FUZZ_TARGET=NAME consent-fuzz FILE...   (built with --sanitize=fuzzer, libFuzzer's options)")
            exit(64)
        }
        for file in files {
            guard let bytes = try? LocalFile.read(file, limit: 1 << 30) else {
                complain("consent-fuzz: cannot read \(file)")
                exit(66)
            }
            selectedTarget.run(bytes)
        }
        print("consent-fuzz: \(selectedTarget.rawValue): \(files.count) input(s), no crash")
    }
}
#endif
