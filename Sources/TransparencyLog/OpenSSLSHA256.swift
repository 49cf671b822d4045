import CLibCrypto

/// SHA-256 from OpenSSL's libcrypto, which uses the CPU's SHA instructions where there are any.
/// The ledger's default hasher: on the benchmark machine it hashes an event body about five
/// times faster than libsodium's portable SHA-256. Safe to call from many threads at once.
public struct OpenSSLSHA256: SHA256Hasher {
    public init() {}

    /// OpenSSL's low-level SHA-256 in a context on this thread's stack. (Its EVP interface
    /// allocates and frees a context and the provider's state on every call: `perf` of replay
    /// showed that, and the tree's and the subject map's node hashes, of 64 bytes each, cost
    /// more in allocating than in hashing.)
    public func sha256(_ bytes: UnsafeRawBufferPointer) -> Digest {
        var out: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var context = SHA256_CTX()
        return withUnsafeMutableBytes(of: &out) { o in
            guard SHA256_Init(&context) == 1,
                SHA256_Update(&context, bytes.baseAddress, bytes.count) == 1,
                SHA256_Final(o.baseAddress!.assumingMemoryBound(to: UInt8.self), &context) == 1
            else { fatalError("OpenSSL SHA-256 failed") }
            return Digest(copying: o.baseAddress!)
        }
    }
}
