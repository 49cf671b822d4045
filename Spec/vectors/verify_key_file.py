#!/usr/bin/env python3
"""An independent reader of the signing key file, written from Spec/key-file.md.

    python3 Spec/vectors/verify_key_file.py                      # check Spec/vectors/key-file/
    python3 Spec/vectors/verify_key_file.py KEYFILE PASSFILE     # open KEYFILE, print its public key

Needs PyNaCl (libsodium's Python binding) for Argon2id, XSalsa20-Poly1305 and Ed25519. Prints
one line per check and ends with "N passed, M failed"; exits 0 only when nothing failed.
"""
import base64
import binascii
import json
import os
import sys

import nacl.bindings as sodium
import nacl.exceptions
import nacl.pwhash.argon2id as argon2id
import nacl.secret
import nacl.signing

HERE = os.path.dirname(os.path.abspath(__file__))
TYPE = "consentledger-signing-key"
MIN_OPS, MIN_MEM = 1, 8192
MAX_OPS, MAX_MEM = 4, 1 << 30


class KeyFileError(Exception):
    def __init__(self, kind, detail):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def canonical(value):
    """Canonical JSON as Spec/ledger-format.md defines it (members sorted by UTF-16 code units)."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v) for k, v in items) + "}"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise KeyFileError("malformed", f"unexpected JSON value {value!r}")


def b64(text, length, member):
    if not isinstance(text, str):
        raise KeyFileError("malformed", f"{member} is not a string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError("malformed", f"{member} is not base64")
    if base64.b64encode(raw).decode() != text or len(raw) != length:
        raise KeyFileError("malformed", f"{member} is not {length} bytes of canonical base64")
    return raw


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def open_key_file(data, passphrase):
    """Returns (seed, public key) or raises KeyFileError(kind) with kind malformed,
    wrong-passphrase or not-its-key."""
    if len(data) > 4096:
        raise KeyFileError("malformed", "longer than 4096 bytes")
    if not data.startswith(b"{"):
        text = data.rstrip(b"\n\r ")
        if len(text) != 64 or any(c not in b"0123456789abcdef" for c in text):
            raise KeyFileError("malformed", "neither an encrypted key nor 64 lowercase hex digits")
        seed = bytes.fromhex(text.decode())
        return seed, nacl.signing.SigningKey(seed).verify_key.encode()
    line = data[:-1] if data.endswith(b"\n") else data
    try:
        obj = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise KeyFileError("malformed", f"not JSON: {e}")
    if not isinstance(obj, dict):
        raise KeyFileError("malformed", "not an object")
    if canonical(obj).encode() != line:
        raise KeyFileError("malformed", "not canonical JSON")
    if set(obj) != {"type", "version", "publicKey", "kdf", "nonce", "box"}:
        raise KeyFileError("malformed", f"members {sorted(obj)}")
    if obj["type"] != TYPE or not is_int(obj["version"]) or obj["version"] != 1:
        raise KeyFileError("malformed", "type or version")
    pk = obj["publicKey"]
    if not isinstance(pk, str) or len(pk) != 64 or any(c not in "0123456789abcdef" for c in pk):
        raise KeyFileError("malformed", "publicKey")
    kdf = obj["kdf"]
    if not isinstance(kdf, dict) or set(kdf) != {"algorithm", "opslimit", "memlimit", "salt"}:
        raise KeyFileError("malformed", "kdf members")
    if kdf["algorithm"] != "argon2id13":
        raise KeyFileError("malformed", "kdf.algorithm")
    ops, mem = kdf["opslimit"], kdf["memlimit"]
    if not (is_int(ops) and is_int(mem) and MIN_OPS <= ops <= MAX_OPS and MIN_MEM <= mem <= MAX_MEM):
        raise KeyFileError("malformed", f"limits {ops}, {mem}")
    salt = b64(kdf["salt"], 16, "kdf.salt")
    nonce = b64(obj["nonce"], 24, "nonce")
    box = b64(obj["box"], 48, "box")
    key = argon2id.kdf(32, passphrase, salt, opslimit=ops, memlimit=mem)
    try:
        # PyNaCl's SecretBox takes the nonce apart from "tag || ciphertext": exactly `box`.
        seed = nacl.secret.SecretBox(key).decrypt(box, nonce)
    except nacl.exceptions.CryptoError:
        raise KeyFileError("wrong-passphrase", "the box does not open")
    public = nacl.signing.SigningKey(seed).verify_key.encode()
    if public.hex() != pk:
        raise KeyFileError("not-its-key", "the seed gives another public key")
    return seed, public


def check_vectors():
    root = os.path.join(HERE, "key-file")
    with open(os.path.join(root, "expected.json"), "rb") as f:
        expected = json.load(f)
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(("ok    " if ok else "FAIL  ") + name + ("" if ok else f": {detail}"))

    def read(name):
        with open(os.path.join(root, name), "rb") as f:
            return f.read()

    enc = expected["encrypted"]
    try:
        seed, public = open_key_file(read(enc["file"]), enc["passphrase"].encode())
        check("encrypted.key opens to the test seed", seed.hex() == enc["seed"], seed.hex())
        check("encrypted.key names the test seed's public key", public.hex() == enc["publicKey"], public.hex())
    except KeyFileError as e:
        check("encrypted.key opens", False, str(e))
    # Sealing from the spec, with the vector's salt and nonce, gives the same bytes.
    key = argon2id.kdf(32, enc["passphrase"].encode(), bytes(range(0x10, 0x20)), opslimit=2, memlimit=64 << 20)
    sealed = nacl.secret.SecretBox(key).encrypt(bytes.fromhex(enc["seed"]), bytes(range(0x20, 0x38)))
    built = canonical({
        "type": TYPE, "version": 1, "publicKey": enc["publicKey"],
        "kdf": {"algorithm": "argon2id13", "opslimit": 2, "memlimit": 64 << 20, "salt": base64.b64encode(bytes(range(0x10, 0x20))).decode()},
        "nonce": base64.b64encode(bytes(range(0x20, 0x38))).decode(),
        "box": base64.b64encode(sealed.ciphertext).decode(),
    }).encode() + b"\n"
    check("sealing as specified rebuilds encrypted.key byte for byte", built == read(enc["file"]))
    plain = expected["plaintext"]
    try:
        seed, _ = open_key_file(read(plain["file"]), b"")
        check("plaintext.key reads to the test seed", seed.hex() == plain["seed"])
    except KeyFileError as e:
        check("plaintext.key reads", False, str(e))
    for case in expected["negative"]:
        try:
            open_key_file(read(case["file"]), case["passphrase"].encode())
            got = "opened"
        except KeyFileError as e:
            got = e.kind
        check(f"{case['file']} is refused as {case['expect']}", got == case["expect"], got)
    # Limits out of range are refused before any Argon2id work (a SENSITIVE file would be fine).
    for ops, mem, kind in [(5, 64 << 20, "malformed"), (2, (1 << 30) + 1024, "malformed"), (2, 4096, "malformed")]:
        obj = json.loads(read(enc["file"]))
        obj["kdf"]["opslimit"], obj["kdf"]["memlimit"] = ops, mem
        try:
            open_key_file(canonical(obj).encode() + b"\n", enc["passphrase"].encode())
            got = "opened"
        except KeyFileError as e:
            got = e.kind
        check(f"limits {ops} passes, {mem} bytes are refused", got == kind, got)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


def main(argv):
    if len(argv) == 3:
        with open(argv[1], "rb") as f:
            data = f.read()
        with open(argv[2], "rb") as f:
            passphrase = f.read()
        if passphrase.endswith(b"\n"):
            passphrase = passphrase[:-1]
        if passphrase.endswith(b"\r"):
            passphrase = passphrase[:-1]
        try:
            _, public = open_key_file(data, passphrase)
        except KeyFileError as e:
            print(f"FAIL  {argv[1]}: {e}")
            return 1
        print(f"ok    {argv[1]} opens; public key {public.hex()}")
        return 0
    if len(argv) != 1:
        print(__doc__)
        return 64
    return check_vectors()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
