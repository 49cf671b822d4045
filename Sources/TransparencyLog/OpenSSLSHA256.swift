import CLibCrypto

/// SHA-256 from OpenSSL's libcrypto, which uses the CPU's SHA instructions where there are any.
/// The ledger's default hasher: on the benchmark machine it hashes an event body about five
/// times faster than libsodium's portable SHA-256. Safe to call from many threads at once.
public struct OpenSSLSHA256: SHA256Hasher {
    /// The algorithm, fetched once: fetching on every call costs more than hashing a body.
    private final class Algorithm: @unchecked Sendable {
        let md: OpaquePointer
        init() {
            guard let md = EVP_MD_fetch(nil, "SHA256", nil) else { fatalError("OpenSSL has no SHA256") }
            self.md = md
        }
    }

    private static let algorithm = Algorithm()

    public init() {}

    public func sha256(_ bytes: UnsafeRawBufferPointer) -> Digest {
        var out: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &out) { o in
            let context = EVP_MD_CTX_new()
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestInit_ex(context, Self.algorithm.md, nil) == 1,
                EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) == 1,
                EVP_DigestFinal_ex(context, o.baseAddress!.assumingMemoryBound(to: UInt8.self), nil) == 1
            else { fatalError("OpenSSL SHA-256 failed") }
            return Digest(copying: o.baseAddress!)
        }
    }
}
