#ifndef CLIBCRYPTO_SHIM_H
#define CLIBCRYPTO_SHIM_H
/* SHA256_Init, _Update and _Final are deprecated since OpenSSL 3.0, in favour of EVP, but kept
 * in every 3.x: they hash in a context on the caller's stack, where EVP allocates and frees two
 * contexts per digest, which costs more than hashing a 64-byte tree node (OpenSSLSHA256). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/evp.h>
#include <openssl/sha.h>
#endif
