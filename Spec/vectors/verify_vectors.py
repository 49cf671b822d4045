#!/usr/bin/env python3
"""An independent verifier for the ConsentLedger format, versions 1 and 2.

Written from Spec/ledger-format.md (and Spec/erasure.md for sealed evidence) alone, with the
Python 3 standard library only: SHA-256 and SHA-512 come from hashlib, Ed25519 verification is
implemented below from RFC 8032 (with the stricter acceptance rules that the spec adopts from
libsodium), XSalsa20-Poly1305 (NaCl's crypto_secretbox, which seals a grant's evidence reference
under its subject's key) from the Salsa20 and Poly1305 specifications, and canonical JSON (RFC
8785) is checked by a strict parser of its own. Event bodies are read in one pass, as the spec's
"Reading a body" describes, so that failures carry the reference implementation's reasons.
(PyNaCl, when it happens to be installed, is used only to cross-check XSalsa20-Poly1305.)

Usage:
    python3 Spec/vectors/verify_vectors.py          check Spec/vectors (tiny-ledger, expected.json,
                                                    tampered/*.jsonl, rotated-ledger: key
                                                    rotation and revocation; sealed evidence:
                                                    seq 9 opened with bob's record, and refused
                                                    under another key, garbled, not UTF-8, not a
                                                    reference, or beside a clear one)
    python3 Spec/vectors/verify_vectors.py DIR      verify the ledger folder DIR (structure only;
                                                    its derived files and subjects.jsonl too, if
                                                    present, and every sealed evidence reference
                                                    of a subject with a record opened with it)

Prints one line per check and ends with "N passed, M failed"; exits 0 only when M is 0.
"""

import base64
import binascii
import functools
import hashlib
import hmac
import json
import os
import sys
import unicodedata

# ---------------------------------------------------------------------------------------------
# Ed25519 (RFC 8032, section 5.1), verification with libsodium's acceptance rules
# ---------------------------------------------------------------------------------------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _recover_x(y, sign):
    """RFC 8032 5.1.3 step 2-4: the x coordinate for y and the sign bit, or None."""
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


_BY = 4 * pow(5, P - 2, P) % P
BASE = (_recover_x(_BY, 0), _BY, 1, _recover_x(_BY, 0) * _BY % P)
IDENTITY = (0, 1, 1, 0)


def _add(p, q):
    """Addition in extended coordinates (RFC 8032 5.1.4)."""
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, p):
    q = IDENTITY
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _neg(p):
    return ((P - p[0]) % P, p[1], p[2], (P - p[3]) % P)


def _compress(p):
    zinv = pow(p[2], P - 2, P)
    x, y = p[0] * zinv % P, p[1] * zinv % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _decompress(s):
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


# The y coordinates (sign bit ignored) of the points of order 1, 2, 4 and 8, including the
# non-canonical spellings p and p+1 of 0 and 1. libsodium's ge25519_has_small_order.
_Y8 = 2707385501144840649318225287225658788936804267575313519463743609750303402022
SMALL_ORDER_Y = {0, 1, P - 1, _Y8, P - _Y8, P, P + 1}


def _has_small_order(encoding):
    return (int.from_bytes(encoding, "little") & ((1 << 255) - 1)) in SMALL_ORDER_Y


def ed25519_verify(public_key, message, signature):
    """True when `signature` is a valid Ed25519 signature of `message` by `public_key`, under the
    rules of Spec/ledger-format.md ("Signatures"): S < L; R and A not of small order; A's y
    canonical; [S]B - [k]A encodes to exactly the bytes R (cofactorless)."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    r_bytes, s_bytes = signature[:32], signature[32:]
    s = int.from_bytes(s_bytes, "little")
    if s >= L or _has_small_order(r_bytes):
        return False
    if (int.from_bytes(public_key, "little") & ((1 << 255) - 1)) >= P or _has_small_order(public_key):
        return False
    a = _decompress(public_key)
    if a is None:
        return False
    k = int.from_bytes(hashlib.sha512(r_bytes + public_key + message).digest(), "little") % L
    check = _add(_mul(s, BASE), _mul(k, _neg(a)))
    return _compress(check) == r_bytes


# The derived ledgers sign and check the same few messages many times; remember the answers.
ed25519_verify = functools.lru_cache(maxsize=None)(ed25519_verify)


def ed25519_public_key(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return _compress(_mul(a, BASE))


@functools.lru_cache(maxsize=None)
def ed25519_sign(seed, message):
    """RFC 8032 5.1.6; to show that the vectors' signatures are reproducible, and to sign the
    derived test ledgers with the test key."""
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    public = _compress(_mul(a, BASE))
    r = int.from_bytes(hashlib.sha512(h[32:] + message).digest(), "little") % L
    big_r = _compress(_mul(r, BASE))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % L
    return big_r + int.to_bytes((r + k * a) % L, 32, "little")


# ---------------------------------------------------------------------------------------------
# XSalsa20-Poly1305 (NaCl crypto_secretbox; libsodium's crypto_secretbox_easy), for the sealed
# evidence references of Spec/erasure.md, "Sealed evidence"
# ---------------------------------------------------------------------------------------------

_MASK32 = 0xFFFFFFFF
# "expand 32-byte k", the four constant words of Salsa20 with a 32-byte key.
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)


def _salsa20_rounds(x):
    """The 20 rounds (10 double rounds) of Salsa20 over the 16 words `x`, in place."""
    def rotl(v, c):
        return ((v << c) | (v >> (32 - c))) & _MASK32

    def quarter(a, b, c, d):
        x[b] ^= rotl((x[a] + x[d]) & _MASK32, 7)
        x[c] ^= rotl((x[b] + x[a]) & _MASK32, 9)
        x[d] ^= rotl((x[c] + x[b]) & _MASK32, 13)
        x[a] ^= rotl((x[d] + x[c]) & _MASK32, 18)
    for _ in range(10):
        # Column round, then row round.
        quarter(0, 4, 8, 12)
        quarter(5, 9, 13, 1)
        quarter(10, 14, 2, 6)
        quarter(15, 3, 7, 11)
        quarter(0, 1, 2, 3)
        quarter(5, 6, 7, 4)
        quarter(10, 11, 8, 9)
        quarter(15, 12, 13, 14)


def _salsa20_input(key, nonce16):
    """The Salsa20 input matrix for a 32-byte key and 16 bytes of nonce and counter."""
    k = [int.from_bytes(key[i:i + 4], "little") for i in range(0, 32, 4)]
    n = [int.from_bytes(nonce16[i:i + 4], "little") for i in range(0, 16, 4)]
    return [_SIGMA[0], k[0], k[1], k[2], k[3], _SIGMA[1], n[0], n[1], n[2], n[3], _SIGMA[2], k[4], k[5], k[6], k[7], _SIGMA[3]]


def hsalsa20(key, nonce16):
    """HSalsa20: the 32-byte subkey of XSalsa20 (words 0, 5, 10, 15, 6, 7, 8, 9 of the rounds'
    output, without the final addition of the input)."""
    x = _salsa20_input(key, nonce16)
    _salsa20_rounds(x)
    return b"".join(x[i].to_bytes(4, "little") for i in (0, 5, 10, 15, 6, 7, 8, 9))


def salsa20_stream(key, nonce8, length):
    """`length` bytes of the Salsa20/20 keystream for a 32-byte key and an 8-byte nonce, the
    64-bit block counter starting at 0."""
    out = bytearray()
    counter = 0
    while len(out) < length:
        x = _salsa20_input(key, nonce8 + counter.to_bytes(8, "little"))
        y = list(x)
        _salsa20_rounds(y)
        out += b"".join(((y[i] + x[i]) & _MASK32).to_bytes(4, "little") for i in range(16))
        counter += 1
    return bytes(out[:length])


def xsalsa20_stream(key, nonce24, length):
    """XSalsa20: Salsa20 under HSalsa20(key, first 16 bytes of the nonce) and the last 8."""
    return salsa20_stream(hsalsa20(key, nonce24[:16]), nonce24[16:], length)


_P1305 = (1 << 130) - 5


def poly1305(key, message):
    """The Poly1305 tag (16 bytes) of `message` under the one-time 32-byte `key` (RFC 8439 2.5)."""
    r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
    s = int.from_bytes(key[16:32], "little")
    acc = 0
    for i in range(0, len(message), 16):
        acc = (acc + int.from_bytes(message[i:i + 16] + b"\x01", "little")) * r % _P1305
    return ((acc + s) & ((1 << 128) - 1)).to_bytes(16, "little")


def secretbox_seal(message, nonce, key):
    """crypto_secretbox_easy: the 16-byte Poly1305 tag followed by the ciphertext. The XSalsa20
    keystream's first 32 bytes are the Poly1305 key; the message is XORed with the keystream from
    byte 32 on."""
    assert len(nonce) == 24 and len(key) == 32
    stream = xsalsa20_stream(key, nonce, 32 + len(message))
    cipher = bytes(a ^ b for a, b in zip(message, stream[32:]))
    return poly1305(stream[:32], cipher) + cipher


def secretbox_open(box, nonce, key):
    """crypto_secretbox_open_easy: the message inside `box` (tag ‖ ciphertext), or None when the
    box is shorter than a tag or its tag does not verify under `key` and `nonce`."""
    assert len(nonce) == 24 and len(key) == 32
    if len(box) < 16:
        return None
    stream = xsalsa20_stream(key, nonce, 32 + len(box) - 16)
    if not hmac.compare_digest(poly1305(stream[:32], box[16:]), box[:16]):
        return None
    return bytes(a ^ b for a, b in zip(box[16:], stream[32:]))


# ---------------------------------------------------------------------------------------------
# Canonical JSON (RFC 8785 subset): a strict parser that accepts exactly the canonical form
# ---------------------------------------------------------------------------------------------

MAX_SAFE_INTEGER = 2**53 - 1
SHORT_ESCAPES = {0x22: 0x22, 0x5C: 0x5C, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09}
HEX_LOWER = b"0123456789abcdef"


class JSONError(Exception):
    def __init__(self, offset, message):
        super().__init__(message)
        self.offset = offset
        self.message = message


def utf16_key(s):
    """Sort key of RFC 8785 section 3.2.3: UTF-16 code units, compared as unsigned integers."""
    return s.encode("utf-16-be", "surrogatepass")


class StrictParser:
    """Accepts exactly the bytes that the canonical serialisation of some value produces."""

    def __init__(self, data):
        self.b = data
        self.i = 0

    def fail(self, message, at=None):
        raise JSONError(self.i if at is None else at, message)

    def parse(self):
        value = self.value(0)
        if self.i != len(self.b):
            self.fail("unexpected bytes after the JSON value")
        return value

    def value(self, depth):
        if depth >= 64:
            self.fail("nesting is deeper than 64 levels")
        if self.i >= len(self.b):
            self.fail("unexpected end of input")
        c = self.b[self.i]
        if c == 0x7B:
            return self.obj(depth)
        if c == 0x5B:
            return self.arr(depth)
        if c == 0x22:
            return self.string()
        for literal, v in ((b"true", True), (b"false", False), (b"null", None)):
            if c == literal[0]:
                if self.i + len(literal) > len(self.b):
                    self.fail("unexpected end of input")
                if self.b[self.i:self.i + len(literal)] != literal:
                    self.fail("invalid literal")
                self.i += len(literal)
                return v
        if c == 0x2D or 0x30 <= c <= 0x39:
            return self.integer()
        self.fail("unexpected character '%s'" % _printable(c))  # whitespace included

    def obj(self, depth):
        self.i += 1
        members = {}
        seen = set()  # names as the reference tells them apart (see same_text)
        previous = None
        if self.i < len(self.b) and self.b[self.i] == 0x7D:
            self.i += 1
            return members
        while True:
            if self.i >= len(self.b) or self.b[self.i] != 0x22:
                self.fail("expected a member name")
            at = self.i
            key = self.string()
            # The reference keeps members in a Swift dictionary, whose String keys are equal when
            # canonically equivalent: two names that differ only in Unicode normalisation are
            # duplicates to it (Spec/ledger-format.md, Canonical JSON, Reading).
            if unicodedata.normalize("NFC", key) in seen:
                self.fail("duplicate member name %r" % key, at)
            seen.add(unicodedata.normalize("NFC", key))
            if previous is not None and not utf16_key(previous) < utf16_key(key):
                self.fail("member %r is out of canonical (RFC 8785) order" % key, at)
            previous = key
            if self.i >= len(self.b) or self.b[self.i] != 0x3A:
                self.fail("expected ':'")
            self.i += 1
            members[key] = self.value(depth + 1)
            if self.i >= len(self.b):
                self.fail("unexpected end of input in an object")
            if self.b[self.i] == 0x2C:
                self.i += 1
                continue
            if self.b[self.i] != 0x7D:
                self.fail("expected ',' or '}'")
            self.i += 1
            return members

    def arr(self, depth):
        self.i += 1
        items = []
        if self.i < len(self.b) and self.b[self.i] == 0x5D:
            self.i += 1
            return items
        while True:
            items.append(self.value(depth + 1))
            if self.i >= len(self.b):
                self.fail("unexpected end of input in an array")
            if self.b[self.i] == 0x2C:
                self.i += 1
                continue
            if self.b[self.i] != 0x5D:
                self.fail("expected ',' or ']'")
            self.i += 1
            return items

    # integer() and string() follow the reference's parser (CanonicalJSON.swift) check for check,
    # so that a body that is not canonical is refused with the same message at the same byte.

    def integer(self):
        start = self.i
        negative = self.b[self.i] == 0x2D
        if negative:
            self.i += 1
        digits_start = self.i
        while self.i < len(self.b) and 0x30 <= self.b[self.i] <= 0x39:
            self.i += 1
            if self.i - digits_start > 16:
                self.fail("integer is out of range", start)
        digits = self.b[digits_start:self.i]
        if not digits:
            self.fail("expected digits", start)
        if len(digits) > 1 and digits[0] == 0x30:
            self.fail("integer has a leading zero", start)
        if self.i < len(self.b) and self.b[self.i] in b".eE":
            self.fail("only integers are allowed here", start)
        value = int(digits)
        if value > MAX_SAFE_INTEGER:
            self.fail("integer is out of range", start)
        if negative and value == 0:
            self.fail("'-0' is not allowed", start)
        return -value if negative else value

    def _hex4(self):
        if self.i + 4 > len(self.b):
            self.fail("short '\\u' escape")
        v = 0
        for _ in range(4):
            c = self.b[self.i]
            if c not in b"0123456789abcdefABCDEF":
                self.fail("invalid hex digit in '\\u' escape")
            v = v << 4 | int(chr(c), 16)
            self.i += 1
        return v

    def plain_ascii_string(self):
        """(start, end) of the content of the string at i when it is printable ASCII without
        escapes, consumed; otherwise None and nothing consumed."""
        if self.i >= len(self.b) or self.b[self.i] != 0x22:
            return None
        scan = self.i + 1
        while scan < len(self.b):
            c = self.b[scan]
            if c == 0x22:
                content = (self.i + 1, scan)
                self.i = scan + 1
                return content
            if c == 0x5C or c < 0x20 or c >= 0x7F:
                return None
            scan += 1
        return None

    def string(self):
        start = self.i
        self.i += 1
        out = bytearray()
        while True:
            if self.i >= len(self.b):
                self.fail("unterminated string", start)
            c = self.b[self.i]
            if c == 0x22:
                self.i += 1
                break
            if c < 0x20:
                self.fail("control character in a string must be escaped")
            if c != 0x5C:
                out.append(c)
                self.i += 1
                continue
            if self.i + 1 >= len(self.b):
                self.fail("unterminated escape")
            e = self.b[self.i + 1]
            self.i += 2
            if e in SHORT_ESCAPES:
                out.append(SHORT_ESCAPES[e])
            elif e == 0x2F:
                self.fail("'\\/' is not canonical; write '/'", self.i - 2)
            elif e == 0x75:
                escape_start = self.i - 2
                scalar = self._hex4()
                if 0xD800 <= scalar < 0xDC00:
                    if not (self.i + 1 < len(self.b) and self.b[self.i] == 0x5C and self.b[self.i + 1] == 0x75):
                        self.fail("unpaired surrogate", escape_start)
                    self.i += 2
                    low = self._hex4()
                    if not 0xDC00 <= low < 0xE000:
                        self.fail("unpaired surrogate", escape_start)
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                elif 0xDC00 <= scalar < 0xE000:
                    self.fail("unpaired surrogate", escape_start)
                # JCS escapes with \u only the control characters that have no short form.
                if (scalar >= 0x20 or scalar in (0x08, 0x09, 0x0A, 0x0C, 0x0D)
                        or any(0x41 <= x <= 0x46 for x in self.b[escape_start + 2:escape_start + 6])):
                    self.fail("'\\u' escape is not canonical here", escape_start)
                out += chr(scalar).encode("utf-8")
            else:
                self.fail("invalid escape '\\%s'" % _printable(e), self.i - 2)
        try:
            return out.decode("utf-8", "strict")
        except UnicodeDecodeError:
            self.fail("string is not valid UTF-8", start)


def _printable(c):
    return chr(c) if 0x20 <= c < 0x7F else "\\x%x" % c


def parse_canonical(data):
    return StrictParser(bytes(data)).parse()


def serialize(value):
    """RFC 8785 serialisation of the subset (used to cross-check the strict parser)."""
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError("integer out of range")
        return str(value).encode()
    if isinstance(value, str):
        out = bytearray(b'"')
        for byte in value.encode("utf-8"):
            if byte == 0x22:
                out += b'\\"'
            elif byte == 0x5C:
                out += b"\\\\"
            elif byte in (0x08, 0x09, 0x0A, 0x0C, 0x0D):
                out += {0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0C: b"\\f", 0x0D: b"\\r"}[byte]
            elif byte < 0x20:
                out += b"\\u%04x" % byte
            else:
                out.append(byte)
        return bytes(out + b'"')
    if isinstance(value, list):
        return b"[" + b",".join(serialize(v) for v in value) + b"]"
    if isinstance(value, dict):
        keys = sorted(value, key=utf16_key)
        return b"{" + b",".join(serialize(k) + b":" + serialize(value[k]) for k in keys) + b"}"
    raise ValueError("not a JSON value of the subset: %r" % (value,))


# ---------------------------------------------------------------------------------------------
# Small formats
# ---------------------------------------------------------------------------------------------

def sha256(data):
    return hashlib.sha256(data).digest()


def hex_decode(text, length=None):
    """Lowercase hex only; None for anything else."""
    if not isinstance(text, str) or len(text) % 2 or any(c not in "0123456789abcdef" for c in text):
        return None
    raw = bytes.fromhex(text)
    if length is not None and len(raw) != length:
        return None
    return raw


def key_id(public_key):
    return sha256(public_key)[:8].hex()


SALT_LENGTH = 16


def subject_ref(subject_id, salt):
    """The pseudonym; the salt MUST be SALT_LENGTH bytes (a variable length would let bytes move
    between the salt and the id without changing the hash)."""
    assert len(salt) == SALT_LENGTH
    return sha256(b"consentledger-subject-v1\n" + salt + subject_id.encode("utf-8"))[:16].hex()


SIGNING_CONTEXT = b"consentledger-event-v1\n"
ZERO_HASH = "0" * 64
# What a subject record's signature covers (format 2): this context and the canonical JSON of the
# record's id and salt, without its signature (Spec/ledger-format.md, subjects.jsonl).
SUBJECT_RECORD_CONTEXT = b"consentledger-subject-record-v1\n"


def subject_record_message(subject_id, salt):
    return SUBJECT_RECORD_CONTEXT + serialize({"id": subject_id, "salt": salt.hex()})


# Scalars that join the character before them (grapheme cluster break Extend, SpacingMark, ZWJ),
# approximated from the general category; Swift escapes them where they would join the opening
# quote or an escape. And Prepend scalars, which would join the closing quote.
_PREPEND = set(range(0x0600, 0x0606)) | {0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x110BD, 0x110CD}


def _joins_previous(c):
    cp = ord(c)
    return (unicodedata.category(c) in ("Mn", "Me", "Mc") or cp == 0x200D or 0x1F3FB <= cp <= 0x1F3FF
            or 0xE0020 <= cp <= 0xE007F)


def _swift_escape(cp):
    return "\\u{%s}" % ("%02X" % cp if cp <= 0xFF else "%04X" % cp if cp <= 0xFFFF else "%08X" % cp)


def swift_quoted(text):
    """`text` as Swift's String.debugDescription writes it (the reference names a subject record's
    id so): in double quotes; \\, " and ' after a backslash; \\0 \\t \\n \\r; other ASCII controls
    as \\u{XX}; a joining scalar right after the opening quote or an escape as \\u{XXXX}, and a
    Prepend scalar at the end likewise (the joining classes approximated, see above)."""
    short = {"\\": "\\\\", '"': '\\"', "'": "\\'", "\0": "\\0", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
    out, want_break = [], True
    for c in text:
        cp = ord(c)
        if c in short:
            out.append(short[c])
            want_break = True
        elif cp < 0x20 or cp == 0x7F:
            out.append(_swift_escape(cp))
            want_break = True
        elif want_break and _joins_previous(c):
            out.append(_swift_escape(cp))
        else:
            out.append(c)
            want_break = False
    if out and len(out[-1]) == 1 and ord(out[-1]) in _PREPEND:
        out[-1] = _swift_escape(ord(out[-1]))
    return '"%s"' % "".join(out)


def _days_from_civil(y, m, d):
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_time(text):
    """Milliseconds since the epoch for a canonical time YYYY-MM-DDTHH:MM:SS.sssZ, else None."""
    if not isinstance(text, str) or len(text) != 24:
        return None
    b = text.encode("utf-8")
    if len(b) != 24 or not all(b[i] in b"0123456789" for i in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22)):
        return None
    if (b[4], b[7], b[10], b[13], b[16], b[19], b[23]) != tuple(b"--T::.Z"):
        return None
    y, mo, d = int(text[0:4]), int(text[5:7]), int(text[8:10])
    h, mi, s, ms = int(text[11:13]), int(text[14:16]), int(text[17:19]), int(text[20:23])
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    days_in_month = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if not (1 <= mo <= 12 and 1 <= d <= days_in_month[mo - 1] and h < 24 and mi < 60 and s < 60):
        return None
    return ((_days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + s * 1000 + ms


def trimmed_text(data):
    """Small text files: trailing LF, CR and space are ignored."""
    return data.rstrip(b"\n\r ").decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# Catalogue
# ---------------------------------------------------------------------------------------------

class CatalogError(Exception):
    pass


def _is_slug(s):
    b = s.encode("utf-8")
    return 0 < len(b) <= 64 and 0x61 <= b[0] <= 0x7A and all(
        0x61 <= c <= 0x7A or 0x30 <= c <= 0x39 or c == 0x2D for c in b)


def _names(value, entry):
    if not isinstance(value, dict) or not value:
        raise CatalogError("%s: 'name' must be a non-empty object of language tag to text" % entry)
    for language, text in value.items():
        if not isinstance(text, str) or not text:
            raise CatalogError("%s: name in %r must be a non-empty string" % (entry, language))
    return value


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Catalog(dict):
    """A validated catalogue: {feature code: feature}, each feature a dict with 'code', 'key',
    'names' and 'consents' (each with 'code', 'names', 'required', 'link', 'version'; required
    first, then optional, each group in catalogue order). `ordered` lists the features in
    catalogue order; `value` is the normalised catalogue as JSON and `bytes` its canonical bytes,
    whose SHA-256 is the catalogue's hash."""


def decode_catalog(root):
    """Validates a parsed catalogue; returns (Catalog, features in catalogue order)."""
    if not isinstance(root, dict):
        raise CatalogError("the top level must be a JSON object")
    for k in root:
        if k != "features":
            raise CatalogError("unknown member %r" % k)
    features = root.get("features")
    if not isinstance(features, list) or not features:
        raise CatalogError("'features' must be a non-empty array")
    catalog, keys = Catalog(), set()
    ordered = []
    for i, f in enumerate(features):
        entry = "features[%d]" % i
        if not isinstance(f, dict):
            raise CatalogError(entry + ": must be an object")
        for k in f:
            if k not in ("code", "key", "name", "consents"):
                raise CatalogError("%s: unknown member %r" % (entry, k))
        code, key = f.get("code"), f.get("key")
        if not _is_int(code) or code < 0:
            raise CatalogError(entry + ": 'code' must be a non-negative integer")
        if not isinstance(key, str) or not _is_slug(key):
            raise CatalogError(entry + ": 'key' must be a slug")
        if code in catalog or key in keys:
            raise CatalogError(entry + ": feature code or key used twice")
        names = _names(f.get("name"), entry)
        consents = f.get("consents")
        if not isinstance(consents, list) or not consents:
            raise CatalogError(entry + ": 'consents' must be a non-empty array")
        seen = set()
        parsed = []
        for j, c in enumerate(consents):
            centry = "%s consents[%d]" % (entry, j)
            if not isinstance(c, dict):
                raise CatalogError(centry + ": must be an object")
            for k in c:
                if k not in ("code", "name", "required", "link", "version"):
                    raise CatalogError("%s: unknown member %r" % (centry, k))
            ccode, required, link, version = c.get("code"), c.get("required"), c.get("link"), c.get("version")
            if not isinstance(ccode, str) or not _is_slug(ccode) or ccode in seen:
                raise CatalogError(centry + ": 'code' must be a slug, unique in its feature")
            seen.add(ccode)
            if not isinstance(required, bool):
                raise CatalogError(centry + ": 'required' must be true or false")
            cnames = _names(c.get("name"), centry)
            # At least 10 bytes of UTF-8, as the reference counts.
            if not isinstance(link, str) or not (link.startswith("https://") or link.startswith("http://")) or len(link.encode("utf-8")) < 10:
                raise CatalogError(centry + ": 'link' must be an http(s) URL")
            if not isinstance(version, str) or not version:
                raise CatalogError(centry + ": 'version' must be a non-empty string")
            parsed.append({"code": ccode, "names": cnames, "required": required, "link": link, "version": version})
        if not any(c["required"] for c in parsed):
            raise CatalogError(entry + ": the feature has no required consent")
        feature = {"code": code, "key": key, "names": names,
                   "consents": [c for c in parsed if c["required"]] + [c for c in parsed if not c["required"]]}
        catalog[code] = feature
        keys.add(key)
        ordered.append(feature)
    catalog.ordered = ordered
    catalog.value = {"features": [
        {"code": f["code"], "key": f["key"], "name": f["names"], "consents": [
            {"code": c["code"], "name": c["names"], "required": c["required"], "link": c["link"], "version": c["version"]}
            for c in f["consents"]]}
        for f in ordered]}
    catalog.bytes = serialize(catalog.value)
    return catalog, ordered


def catalog_hash(catalog):
    """hex(SHA-256(catalogue bytes)): of the normalised catalogue's canonical JSON."""
    return sha256(catalog.bytes).hex()


def _equivalent_names(a, b):
    n = unicodedata.normalize
    return {n("NFC", k): n("NFC", v) for k, v in a.items()} == {n("NFC", k): n("NFC", v) for k, v in b.items()}


def _equivalent(a, b):
    """The two catalogues are equal as the reference's Catalog values compare: strings (names,
    links, versions) equal when canonically equivalent, as Swift compares strings."""
    n = unicodedata.normalize
    if [(f["code"], f["key"]) for f in a.ordered] != [(f["code"], f["key"]) for f in b.ordered]:
        return False
    for fa, fb in zip(a.ordered, b.ordered):
        if not _equivalent_names(fa["names"], fb["names"]) or len(fa["consents"]) != len(fb["consents"]):
            return False
        for ca, cb in zip(fa["consents"], fb["consents"]):
            if (ca["code"], ca["required"]) != (cb["code"], cb["required"]) or not _equivalent_names(ca["names"], cb["names"]) \
                    or n("NFC", ca["link"]) != n("NFC", cb["link"]) or n("NFC", ca["version"]) != n("NFC", cb["version"]):
                return False
    return True


def problem_as_update(new, current):
    """Why `new` cannot replace `current` as the catalogue in force (a published version), or
    None: it keeps the features (codes and keys, in order) and each feature's consents (codes
    and required flags, in consent order); it may change versions, links and names, and must
    change something (Spec/ledger-format.md, Catalogue versions)."""
    if _equivalent(new, current):
        return "it is identical to the catalogue in force"
    if [f["code"] for f in new.ordered] != [f["code"] for f in current.ordered] \
            or [f["key"] for f in new.ordered] != [f["key"] for f in current.ordered]:
        return "its features differ from the catalogue in force (a new version may change versions, links and names only)"
    for fn, fc in zip(new.ordered, current.ordered):
        if [(c["code"], c["required"]) for c in fn["consents"]] != [(c["code"], c["required"]) for c in fc["consents"]]:
            return "the consents of '%s' differ from the catalogue in force (a new version may change versions, links and names only)" % fn["key"]
    return None


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------

class Failure(Exception):
    """Verification failed at `line` (1-based, or None) and `seq` (or None)."""

    def __init__(self, line, seq, reason):
        super().__init__(reason)
        self.line, self.seq, self.reason = line, seq, reason

    def __str__(self):
        where = []
        if self.line is not None:
            where.append("line %d" % self.line)
        if self.seq is not None:
            where.append("seq %d" % self.seq)
        return (", ".join(where) + ": " if where else "") + self.reason


class DecodeError(Exception):
    pass


LINE_PREFIX = b'{"body":'
SIG_PREFIX = b',"sig":"'
# A log that holds its heads (a folder without a `head` file) has, after each commit's event
# lines, one head line: the canonical JSON {"head":NOTE}, NOTE the signed head after the commit.
# A line is a head line when its first three bytes are these (an event line starts {"body":).
HEAD_LINE_PREFIX = b'{"h'
# Every member name of format versions 1 and 2, in canonical (byte) order. The body reader refuses
# any other name as soon as it meets it, and reports "first" extra or missing members in this order.
BODY_NAMES = ["actor", "at", "attested", "catalog", "cause", "channel", "cmd", "cmdSize", "compromisedSince", "consent",
              "correctedFrom", "document", "effectiveAt", "evidence", "feature", "handover", "kid", "ledger", "noticeLanguage", "notices", "prev",
              "publicKey", "reason", "renews", "sealedEvidence", "seq", "streamPrev", "streamRoot", "subject", "type", "v", "version"]
NAME_INDEX = {name.encode("ascii"): i for i, name in enumerate(BODY_NAMES)}
INTEGER_MEMBERS = {"v", "seq", "cmd", "cmdSize", "feature", "cause", "renews", "streamPrev", "compromisedSince"}
HEX64_MEMBERS = {"prev", "streamRoot"}  # strings of 64 lowercase hex digits
# Format 2: every event's place in its stream (Spec/ledger-format.md, Streams and the subject map).
# Allowed in format 2 only, on every type, each optional at the body level.
STREAM_MEMBERS = {"streamPrev", "streamRoot"}
# A grant's evidence (Spec/ledger-format.md, consent.given): optional, on consent.given only. The
# reference is 'evidence' in clear (read in older ledgers, no longer written) or 'sealedEvidence',
# sealed under the subject's key (Spec/erasure.md, Sealed evidence), never both.
EVIDENCE_MEMBERS = {"effectiveAt", "channel", "noticeLanguage", "evidence", "sealedEvidence"}
CHANNELS = ("app", "portal", "paper", "phone", "clinician")
EVIDENCE_MAX_BYTES = 512
ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
ASCII_DIGITS = frozenset("0123456789")
FORMAT_VERSIONS = (1, 2)
JSON_MEMBERS = {"document", "notices", "attested"}  # any canonical JSON value, checked after the scan
COMMON = {"v", "seq", "at", "actor", "cmd", "cmdSize", "prev", "kid", "type"}
TYPE_MEMBERS = {
    "ledger.created": {"ledger", "catalog", "publicKey"},
    "catalog.published": {"catalog", "document", "notices"},
    "consent.given": {"subject", "feature", "consent", "version"},
    "consent.revoked": {"subject", "feature", "consent", "reason"},
    "subject.erased": {"subject"},
    # Format 2 only (refused in a v 1 body after the member checks): the new key and its handover
    # signature (Spec/ledger-format.md, Key rotation).
    "key.rotated": {"publicKey", "handover"},
    # Format 2 only, likewise: a retired key marked compromised from a seq on, and the hashes of
    # the events it signed from there to its rotation (Spec/ledger-format.md, Key rotation,
    # Revocation).
    "key.revoked": {"publicKey", "compromisedSince", "attested"},
    # Format 2 only, likewise: the ledger's time before a clock correction (Spec/ledger-format.md,
    # Clock corrections); 'reason' is optional, as on an erasure.
    "clock.corrected": {"correctedFrom"},
}
ERASURE_REASON_MAX_BYTES = 200
NOTICE_MEMBERS = {"consent", "feature", "sha256", "version"}


class Event:
    pass


def _scan_body(p, members):
    """One pass over the body (Spec/ledger-format.md, "Reading a body"): canonical JSON, an object
    whose member names are names of the format, each value of its member's JSON type."""
    b = p.b
    if len(b) < 2 or b[0] != 0x7B:
        p.fail("expected a JSON object")
    p.i = 1
    if b[1] == 0x7D:
        raise DecodeError("body is an empty object")
    previous = None
    while True:
        name_offset = p.i
        content = p.plain_ascii_string()
        if content is None:
            if p.i >= len(b) or b[p.i] != 0x22:
                p.fail("expected a member name")
            raise DecodeError("member '%s' is not part of the ledger format" % p.string())
        index = NAME_INDEX.get(b[content[0]:content[1]])
        if index is None:
            raise DecodeError("member '%s' is not part of the ledger format" % b[content[0]:content[1]].decode("ascii"))
        name = BODY_NAMES[index]
        # Known names are ASCII, so byte order is RFC 8785's UTF-16 order.
        if previous is not None and previous >= index:
            p.fail("duplicate member name '%s'" % name if previous == index
                   else "member '%s' is out of canonical (RFC 8785) order" % name, name_offset)
        previous = index
        if p.i >= len(b) or b[p.i] != 0x3A:
            p.fail("expected ':'")
        p.i += 1
        if p.i >= len(b):
            p.fail("unexpected end of input")
        if name in JSON_MEMBERS:
            # Parsed by the generic canonical parser; the value is one level inside the body.
            members[name] = p.value(1)
        elif name in INTEGER_MEMBERS:
            if not (b[p.i] == 0x2D or 0x30 <= b[p.i] <= 0x39):
                raise DecodeError("member '%s' must be an integer" % name)
            members[name] = p.integer()
        elif name in ("at", "effectiveAt", "correctedFrom"):
            content = p.plain_ascii_string()
            text = b[content[0]:content[1]].decode("ascii") if content else None
            if text is None or parse_time(text) is None:
                raise DecodeError("member '%s' is not a canonical UTC time like 2026-01-31T08:00:00.000Z" % name)
            members[name] = text
        elif name in HEX64_MEMBERS:
            content = p.plain_ascii_string()
            text = b[content[0]:content[1]].decode("ascii") if content else None
            if text is None or hex_decode(text, 32) is None:
                raise DecodeError("member '%s' is not 64 lowercase hex digits" % name)
            members[name] = text
        else:
            if b[p.i] != 0x22:
                raise DecodeError("member '%s' must be a string" % name)
            members[name] = p.string()
        if p.i >= len(b):
            p.fail("unexpected end of input in an object")
        if b[p.i] == 0x2C:
            p.i += 1
            continue
        if b[p.i] != 0x7D:
            p.fail("expected ',' or '}'")
        p.i += 1
        break
    if p.i != len(b):
        p.fail("unexpected bytes after the JSON value")


def _first(names):
    return min(names, key=BODY_NAMES.index)


def is_subject_ref(s):
    """32 lowercase hex digits: the only spelling of a subject reference."""
    return len(s.encode("utf-8")) == 32 and all(c in "0123456789abcdef" for c in s)


def effective_time(seq, at_ms, corrections):
    """Spec/ledger-format.md, Clock corrections: the effective time of the event at `seq` recorded
    at `at_ms` is the earliest of its own time and the times of the clock corrections after it.
    `corrections` holds (seq, at in ms, ...) of each clock.corrected event."""
    return min([at_ms] + [c[1] for c in corrections if c[0] > seq])


def check_reason(reason):
    """The 'reason' of an erasure or a clock correction: optional; when present not empty, at most
    200 bytes of UTF-8, no control character."""
    if reason is None:
        return
    if reason == "":
        raise DecodeError("member 'reason': the reason is empty")
    if len(reason.encode("utf-8")) > ERASURE_REASON_MAX_BYTES:
        raise DecodeError("member 'reason': the reason has %d bytes, more than %d" % (len(reason.encode("utf-8")), ERASURE_REASON_MAX_BYTES))
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in reason):
        raise DecodeError("member 'reason': the reason contains a control character")


def read_body(body):
    """Canonical body bytes -> Event (without signature). Raises DecodeError; the checks and
    their order are those of the reference (EventBodyReader.swift)."""
    m = {}
    try:
        _scan_body(StrictParser(bytes(body)), m)
    except JSONError as e:
        raise DecodeError("body is not canonical JSON: byte %d: %s" % (min(e.offset, len(body)) + len(LINE_PREFIX) + 1, e.message))

    if m.get("v", -1) not in FORMAT_VERSIONS:
        raise DecodeError("member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)")
    if "type" not in m:
        raise DecodeError("member 'type' is missing")
    etype = m["type"]
    if etype not in TYPE_MEMBERS:
        raise DecodeError("unknown event type '%s'" % etype)
    allowed = COMMON | TYPE_MEMBERS[etype]
    if m["v"] == 2:
        allowed = allowed | STREAM_MEMBERS
    if etype == "consent.revoked" and m.get("reason") == "cascade":
        allowed = allowed | {"cause"}
    grant_optional = ({"renews"} | EVIDENCE_MEMBERS) if etype == "consent.given" else ({"reason"} if etype in ("subject.erased", "clock.corrected") else set())
    optional = grant_optional | STREAM_MEMBERS
    allowed = allowed | grant_optional
    if set(m) - allowed:
        raise DecodeError("member '%s' does not belong to a '%s' event" % (_first(set(m) - allowed), etype))
    if allowed - optional - set(m):
        raise DecodeError("member '%s' is missing from a '%s' event" % (_first(allowed - optional - set(m)), etype))

    def integer(k):
        if m[k] < 0:
            raise DecodeError("member '%s' is missing or negative" % k)
        return m[k]

    def subject():
        if not is_subject_ref(m["subject"]):
            raise DecodeError("member 'subject' is not 32 lowercase hex digits")
        return m["subject"]

    e = Event()
    e.body, e.type = bytes(body), etype
    e.seq, e.cmd, e.cmd_size = integer("seq"), integer("cmd"), integer("cmdSize")
    if not (e.cmd_size >= 1 and e.cmd <= e.seq and e.seq - e.cmd < e.cmd_size):
        raise DecodeError("command span cmd=%d cmdSize=%d does not contain seq %d" % (e.cmd, e.cmd_size, e.seq))
    e.subject = None
    if etype == "ledger.created":
        e.ledger, e.catalog, e.public_key = m["ledger"], m["catalog"], m["publicKey"]
    elif etype == "catalog.published":
        e.document, e.notices = _published(m["document"], m["notices"])
        e.catalog = m["catalog"]
    elif etype == "consent.given":
        e.subject = subject()
        e.feature, e.consent, e.version = integer("feature"), m["consent"], m["version"]
        # Spec: a non-negative integer. (The reference reads a negative 'renews' as absent; see
        # Spec/ledger-format.md, consent.given.)
        e.renews = integer("renews") if "renews" in m else None
        e.evidence = {k: m[k] for k in EVIDENCE_MEMBERS if k in m}
        problem = evidence_problem(e.evidence)
        if problem:
            raise DecodeError(problem)
    elif etype == "subject.erased":
        e.subject = subject()
        e.reason = m.get("reason")
        check_reason(e.reason)
    elif etype == "clock.corrected":
        # A ledger event. Whether it names the previous event's time and moves time back is
        # replay's rule 5b.
        if m["v"] < 2:
            raise DecodeError("a 'clock.corrected' event belongs only to format version 2")
        e.corrected_from = m["correctedFrom"]
        e.corrected_from_ms = parse_time(e.corrected_from)
        e.reason = m.get("reason")
        check_reason(e.reason)
    elif etype == "key.rotated":
        # A ledger event (no subject, the ledger stream). Whether the key is new and the handover
        # verifies is the key schedule's check (Verifying, step 5, item 7a), not the reader's.
        if m["v"] < 2:
            raise DecodeError("a 'key.rotated' event belongs only to format version 2")
        if hex_decode(m["publicKey"], 32) is None:
            raise DecodeError("member 'publicKey' is not 64 lowercase hex digits")
        if hex_decode(m["handover"], 64) is None:
            raise DecodeError("member 'handover' is not 128 lowercase hex digits")
        e.public_key, e.handover = m["publicKey"], m["handover"]
    elif etype == "key.revoked":
        # Reading a body, item 2.6b. A ledger event too; whether the key is a retired one of the
        # schedule and the hashes those of the log is the key schedule's check (Verifying, step 5,
        # item 7a, and step 6a).
        if m["v"] < 2:
            raise DecodeError("a 'key.revoked' event belongs only to format version 2")
        if hex_decode(m["publicKey"], 32) is None:
            raise DecodeError("member 'publicKey' is not 64 lowercase hex digits")
        e.public_key, e.compromised_since = m["publicKey"], integer("compromisedSince")
        if not isinstance(m["attested"], list) or not m["attested"]:
            raise DecodeError("member 'attested' must be a non-empty array of event hashes")
        if any(hex_decode(h, 32) is None for h in m["attested"]):
            raise DecodeError("member 'attested' holds something that is not 64 lowercase hex digits")
        e.attested = list(m["attested"])
    else:
        e.reason = m["reason"]
        if e.reason == "cascade":
            e.cause = integer("cause")
        elif e.reason != "withdrawn":
            raise DecodeError("unknown revocation reason '%s'" % e.reason)
        e.subject = subject()
        e.feature, e.consent = integer("feature"), m["consent"]
    e.at, e.actor, e.prev, e.kid = m["at"], m["actor"], m["prev"], m["kid"]
    e.at_ms = parse_time(e.at)
    # The stream members: the stream's previous event is an earlier one, and the subject map's
    # root is only ever on a command's last event.
    e.stream_prev = None
    if "streamPrev" in m:
        if not 0 <= m["streamPrev"] < e.seq:
            raise DecodeError("member 'streamPrev' must be an earlier sequence number than %d" % e.seq)
        e.stream_prev = m["streamPrev"]
    e.stream_root = m.get("streamRoot")
    if e.stream_root is not None and e.seq != e.cmd + e.cmd_size - 1:
        raise DecodeError("member 'streamRoot' belongs only on the last event of a command")
    e.v = m["v"]
    # Belt and braces: what the reader accepted is what the serialiser writes.
    if serialize(m) != e.body:
        raise DecodeError("body is not canonical JSON (re-serialisation differs)")
    return e


def is_language_tag(tag):
    """The shape of a BCP 47 tag: a primary subtag of 2-8 ASCII letters, then subtags of 1-8 ASCII
    letters or digits, joined by '-' (the IANA registry is not consulted)."""
    parts = tag.split("-")
    # ASCII only, compared as code points: str.isalpha or lower() would let in letters such as
    # U+212A KELVIN SIGN, whose lowercase is the ASCII 'k'.
    ascii_alpha = lambda t: all(c in ASCII_LETTERS for c in t)
    ascii_alnum = lambda t: all(c in ASCII_LETTERS or c in ASCII_DIGITS for c in t)
    return 2 <= len(parts[0]) <= 8 and ascii_alpha(parts[0]) and all(1 <= len(t) <= 8 and ascii_alnum(t) for t in parts[1:])


def evidence_problem(evidence):
    """Why a grant's evidence members cannot be read, or None (the reference's messages), in the
    order of Reading a body, 2.5: channel, noticeLanguage, evidence, then sealedEvidence (first
    both present, then its shape). Whether a sealed reference opens needs the subject's record
    (Verifying, step 10, item 5: open_evidence)."""
    if "channel" in evidence and evidence["channel"] not in CHANNELS:
        return "member 'channel' must be one of %s" % ", ".join(CHANNELS)
    if "noticeLanguage" in evidence and not is_language_tag(evidence["noticeLanguage"]):
        return "notice language '%s' is not a BCP 47 language tag (such as 'de' or 'en-GB')" % evidence["noticeLanguage"]
    ref = evidence.get("evidence")
    if ref is not None:
        if ref == "":
            return "the evidence reference is empty"
        if len(ref.encode("utf-8")) > EVIDENCE_MAX_BYTES:
            return "the evidence reference is longer than %d bytes" % EVIDENCE_MAX_BYTES
        if any(ord(c) < 0x20 or ord(c) == 0x7F or 0x80 <= ord(c) <= 0x9F for c in ref):
            return "the evidence reference contains a control character"
        if ref[0] == " " or ref[-1] == " ":
            return "the evidence reference has leading or trailing spaces"
    sealed = evidence.get("sealedEvidence")
    if sealed is not None:
        if ref is not None:
            return SEALED_BOTH
        raw = hex_decode(sealed)
        if raw is None or not SEALED_MIN_BYTES <= len(raw) <= SEALED_MAX_BYTES:
            return SEALED_SHAPE
    return None


# Sealed evidence (Spec/erasure.md, Sealed evidence): a grant's reference sealed with
# crypto_secretbox_easy under the subject's key, which is derived from the subject's record.
EVIDENCE_KEY_CONTEXT = b"consentledger-evidence-key-v1\n"
EVIDENCE_NONCE_CONTEXT = b"consentledger-evidence-nonce-v1\n"
SEALED_OVERHEAD = 24 + 16  # the nonce and the Poly1305 tag
SEALED_MIN_BYTES, SEALED_MAX_BYTES = SEALED_OVERHEAD + 1, SEALED_OVERHEAD + EVIDENCE_MAX_BYTES
SEALED_SHAPE = ("member 'sealedEvidence' must be %d to %d lowercase hex digits (a nonce, a tag and a sealed reference of 1 to %d bytes)"
                % (2 * SEALED_MIN_BYTES, 2 * SEALED_MAX_BYTES, EVIDENCE_MAX_BYTES))
SEALED_BOTH = "a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both"


def evidence_key(subject_id, salt):
    """The subject's key: SHA-256("consentledger-evidence-key-v1\\n" ‖ salt ‖ UTF-8(id)), over the
    salt's 16 bytes and the id as the subject's record holds them."""
    return sha256(EVIDENCE_KEY_CONTEXT + bytes(salt) + subject_id.encode("utf-8"))


def evidence_nonce(key, seq, reference):
    """The nonce a writer seals the reference of the event of `seq` with: the first 24 bytes of
    SHA-256("consentledger-evidence-nonce-v1\\n" ‖ key ‖ seq as 8 bytes big-endian ‖ reference).
    A reader does not check it: any 24 bytes open."""
    plain = reference.encode("utf-8") if isinstance(reference, str) else bytes(reference)
    return sha256(EVIDENCE_NONCE_CONTEXT + key + seq.to_bytes(8, "big") + plain)[:24]


def seal_evidence(reference, seq, key, nonce=None):
    """`reference` (a str, or bytes for the cases that are not UTF-8) sealed for the event of
    `seq` under `key`, as 'sealedEvidence' holds it: lowercase hex of nonce ‖ tag ‖ ciphertext.
    The nonce is the writer's (evidence_nonce) unless one is given."""
    plain = reference.encode("utf-8") if isinstance(reference, str) else bytes(reference)
    if nonce is None:
        nonce = evidence_nonce(key, seq, plain)
    return (nonce + secretbox_seal(plain, nonce, key)).hex()


class SealError(Exception):
    """Why a sealed evidence reference cannot be opened under a subject's key (the reference's
    messages, Spec/erasure.md, Sealed evidence, Opening)."""

    def __init__(self, problem):
        super().__init__(problem)
        self.problem = problem


def flip_hex_byte(hex_text, i):
    """`hex_text` with the lowest bit of its byte `i` flipped (a tampered sealed reference)."""
    raw = bytearray.fromhex(hex_text)
    raw[i] ^= 0x01
    return raw.hex()


def open_evidence(sealed, key):
    """The reference inside `sealed` (the member's hex, or its bytes), opened under `key` and
    checked as a clear 'evidence' member is checked. Raises SealError, the checks in this order:
    the length (only where the member's shape was not checked already), the tag, UTF-8, the
    reference's own checks."""
    raw = hex_decode(sealed) if isinstance(sealed, str) else bytes(sealed)
    if raw is None:
        raise SealError(SEALED_SHAPE)
    if not SEALED_MIN_BYTES <= len(raw) <= SEALED_MAX_BYTES:
        raise SealError("the sealed evidence reference is %d bytes, not %d to %d" % (len(raw), SEALED_MIN_BYTES, SEALED_MAX_BYTES))
    plain = secretbox_open(raw[24:], raw[:24], key)
    if plain is None:
        raise SealError("the sealed evidence reference does not open under the subject's key")
    try:
        reference = plain.decode("utf-8")
    except UnicodeDecodeError:
        raise SealError("the sealed evidence reference opens to bytes that are not UTF-8") from None
    problem = evidence_problem({"evidence": reference})
    if problem is not None:
        raise SealError("the sealed evidence reference opens to one no command records: %s" % problem)
    return reference


def opened_event(e, key):
    """A grant whose reference is sealed, with the reference opened under `key` (the subject's
    key): a copy of the event whose evidence lists it in clear, as 'evidence' (so that a replay's
    listing shows it opened). Any other event is returned as it is. Raises SealError."""
    sealed = getattr(e, "evidence", {}).get("sealedEvidence") if e.type == "consent.given" else None
    if sealed is None:
        return e
    reference = open_evidence(sealed, key)
    o = Event()
    o.__dict__.update(e.__dict__)
    o.evidence = {k: v for k, v in e.evidence.items() if k != "sealedEvidence"}
    o.evidence["evidence"] = reference
    return o


def _published(document, notices):
    """The members of a catalog.published event: the catalogue (validated as any catalogue and
    normalised) and one notice per consent. Whether 'catalog' is the catalogue's hash is checked
    with the signature (verify) or after decoding (replay), not here."""
    if not isinstance(document, dict):
        raise DecodeError("member 'document' must be a catalogue object")
    try:
        catalog, _ = decode_catalog(document)
    except CatalogError as err:
        raise DecodeError("member 'document' is not a valid catalogue: %s" % err)
    if not isinstance(notices, list):
        raise DecodeError("member 'notices' must be an array")
    for n in notices:
        if not (isinstance(n, dict) and set(n) == NOTICE_MEMBERS and _is_int(n["feature"]) and isinstance(n["consent"], str)
                and isinstance(n["version"], str) and hex_decode(n["sha256"], 32) is not None):
            raise DecodeError("a notice must be {consent, feature, sha256 (64 hex digits), version}")
    return catalog, notices


def is_head_line(line):
    """Whether a line of a log that holds its heads (without its 0x0A) is a head line: its first
    three bytes are {"h. (In the older layout, with a `head` file, every line is an event line,
    and one that starts {"h is a malformed event.)"""
    return line[:3] == HEAD_LINE_PREFIX


def head_line(note):
    """The head line (without its 0x0A) that holds the signed head `note`: {"head":NOTE}."""
    return serialize({"head": note})


def event_lines(log):
    """The complete event lines of a log that holds its heads (each without its 0x0A), its head
    lines left out; for a log of the older layout, all of its complete lines."""
    return [line for line in log.split(b"\n")[:-1] if not is_head_line(line)]


def decode_line(line):
    """One line without its newline -> Event. Raises DecodeError."""
    if len(line) < len(LINE_PREFIX) + 2 + len(SIG_PREFIX) + 128 + 2:
        raise DecodeError("line is too short to be an event (%d bytes)" % len(line))
    if not line.startswith(LINE_PREFIX):
        raise DecodeError('line does not start with {"body":')
    sig_start = len(line) - 2 - 128
    if line[-2:] != b'"}' or line[sig_start - len(SIG_PREFIX):sig_start] != SIG_PREFIX:
        raise DecodeError('line does not end with ,"sig":"<128 hex digits>"}')
    signature = hex_decode(line[sig_start:-2].decode("latin-1"), 64)
    if signature is None:
        raise DecodeError("signature is not 128 lowercase hex digits")
    e = read_body(line[len(LINE_PREFIX):sig_start - len(SIG_PREFIX)])
    e.signature = signature
    return e


# ---------------------------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------------------------

class Violation(Exception):
    def __init__(self, seq, reason):
        super().__init__(reason)
        self.seq, self.reason = seq, reason


def same_text(a, b):
    """Equality of strings where the reference compares them as Swift strings, under which
    canonically equivalent spellings (NFC and NFD) are equal. Replay no longer does this: `actor`
    and `version` are compared byte for byte (same_bytes); it remains for the export verifier's
    comparisons (Spec/export-format.md, Comparing strings) and the catalogue identity check."""
    return a == b or unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b)


def same_bytes(a, b):
    """Byte-for-byte equality of two strings (Python compares str by code points, which for valid
    UTF-8 is the same as comparing the bytes)."""
    return a.encode("utf-8") == b.encode("utf-8")


class SubjectState:
    """One subject's consents (Spec/ledger-format.md, Replay, rules 6 to 15, and the subject part of
    rule 4). A consent's status is absent (never given), ("given", version, seq, at, evidence) or
    ("withdrawn", at, seq, cause), cause None for the subject's own withdrawal."""

    def __init__(self):
        self.consents = {}              # (feature, code) -> status
        self.last_seq = None            # seq of the subject's latest event
        self.open = None                # (cmd, cmdSize) of the command being applied
        self.command_feature = None     # the one feature that command is about
        self.required_revocations = []  # seqs of that command's withdrawals of required consents
        self.feature_times = {}         # feature -> at (ms) of the latest event of earlier commands
        self.erased_at = None           # seq of the subject.erased event: nothing of theirs may follow

    def status(self, feature, code):
        return self.consents.get((feature, code))

    def is_given(self, feature, code):
        s = self.consents.get((feature, code))
        return s is not None and s[0] == "given"

    def is_current(self, feature, consent):
        """Given, with the policy version in force (compared byte for byte)."""
        s = self.consents.get((feature["code"], consent["code"]))
        return s is not None and s[0] == "given" and same_bytes(s[1], consent["version"])

    def is_outdated(self, feature, consent):
        return self.is_given(feature["code"], consent["code"]) and not self.is_current(feature, consent)

    def is_active(self, feature):
        """Rule R3: every required consent is current (an outdated one deactivates the feature)."""
        return all(self.is_current(feature, c) for c in feature["consents"] if c["required"])

    def apply(self, e, catalog):
        span = (e.cmd, e.cmd_size)
        if self.erased_at is not None:
            raise Violation(e.seq, "the subject was erased at seq %d: no event of theirs may follow" % self.erased_at)
        if self.open is not None and (self.open != span or e.seq != (0 if self.last_seq is None else self.last_seq) + 1):
            # A command is one subject's, so its events are consecutive even in the subject's own
            # history: a gap means one is missing.
            raise Violation(e.seq, "command starting at seq %d is incomplete: expected %d events" % self.open)
        if self.open is None:
            if e.cmd != e.seq:
                raise Violation(e.seq, "event claims to belong to a command starting at seq %d, which is not open for this subject" % e.cmd)
            self.open, self.command_feature, self.required_revocations = span, None, []
        if e.subject is None:
            raise Violation(e.seq, "a ledger event is not a subject's event")
        if e.type == "subject.erased":
            if e.cmd_size != 1:
                raise Violation(e.seq, "an erasure is a command of its own, of one event")
            self.erased_at, self.last_seq, self.open = e.seq, e.seq, None
            return
        feature = catalog.get(e.feature)
        if feature is None:
            raise Violation(e.seq, "unknown feature code %d" % e.feature)
        definition = next((c for c in feature["consents"] if c["code"] == e.consent), None)
        if definition is None:
            raise Violation(e.seq, "unknown consent '%s' in feature '%s'" % (e.consent, feature["key"]))
        if self.command_feature is not None and self.command_feature != feature["code"]:
            raise Violation(e.seq, "a command is about one feature; this event is about feature %d, the command's first about %d" % (feature["code"], self.command_feature))
        self.command_feature = feature["code"]
        key = (feature["code"], definition["code"])
        label = (definition["code"], feature["key"])
        if e.type == "consent.given":
            if self.is_current(feature, definition):
                raise Violation(e.seq, "consent '%s' of '%s' is given twice (rule R6 gives only a withheld consent)" % label)
            # A re-consent names the outdated grant it renews; a first grant names none.
            outdated = self.consents[key][2] if self.is_given(*key) else None
            if e.renews != outdated:
                if outdated is not None:
                    raise Violation(e.seq, "consent '%s' of '%s' renews the outdated grant at seq %d, so 'renews' must name it" % (label + (outdated,)))
                raise Violation(e.seq, "'renews' names seq %d, but consent '%s' of '%s' has no outdated grant" % ((e.renews,) + label))
            if not definition["required"] and not self.is_active(feature):
                raise Violation(e.seq, "optional consent '%s' given while '%s' is not active: a required consent is withheld or outdated (rule R2)" % label)
            if not same_bytes(e.version, definition["version"]):
                raise Violation(e.seq, "consent '%s' of '%s' records policy version '%s' but the catalogue's is '%s'" % (label + (e.version, definition["version"])))
            effective = e.evidence.get("effectiveAt")
            if effective is not None:
                # Evidence, never a rule input: an agreement before the recording, and not before
                # the subject's previous command about the feature.
                if parse_time(effective) > e.at_ms:
                    raise Violation(e.seq, "consent '%s' of '%s' has an effective time after the time it was recorded" % label)
                previous = self.feature_times.get(feature["code"])
                if previous is not None and parse_time(effective) < previous:
                    raise Violation(e.seq, "consent '%s' of '%s' has an effective time before the subject's previous event about '%s'" % (label + (feature["key"],)))
            self.consents[key] = ("given", e.version, e.seq, e.at, e.evidence)
        else:
            if not self.is_given(*key):
                raise Violation(e.seq, "consent '%s' of '%s' is revoked while it is withheld" % label)
            if e.reason == "withdrawn":
                if definition["required"]:
                    self.required_revocations.append(e.seq)
                elif self.required_revocations:
                    raise Violation(e.seq, "optional consent '%s' is withdrawn in the same command as a required one; it must be a cascade (rule R4)" % e.consent)
            else:
                if definition["required"]:
                    raise Violation(e.seq, "required consent '%s' cannot be revoked by cascade (rule R4 cascades to optional consents only)" % e.consent)
                if e.cause not in self.required_revocations:
                    raise Violation(e.seq, "cascade names cause seq %d, which is not a revocation of a required consent of '%s' in the same command" % (e.cause, feature["key"]))
            self.consents[key] = ("withdrawn", e.at, e.seq, e.cause if e.reason == "cascade" else None)
        self.last_seq = e.seq
        if e.seq == e.cmd + e.cmd_size - 1:
            if self.command_feature is not None:
                self.feature_times[self.command_feature] = e.at_ms
            # Rule 15: no optional consent survives a *withheld* required consent. An outdated
            # required consent is still given, so it does not call for a cascade.
            f = catalog.get(self.command_feature) if self.command_feature is not None else None
            if f is not None and any(c["required"] and not self.is_given(f["code"], c["code"]) for c in f["consents"]):
                for c in f["consents"]:
                    if not c["required"] and self.is_given(f["code"], c["code"]):
                        raise Violation(e.seq, "optional consent '%s' of '%s' is still given after a required consent of its feature was withdrawn (rule R4 cascade missing)" % (c["code"], f["key"]))
            self.open = None


class Replay:
    """The whole log (Spec/ledger-format.md, Replay, rules 1 to 16 and 5a). `catalog` is the
    catalogue in force; `versions` lists (seq, at, catalogue) of the genesis catalogue and each
    published one."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.versions = []
        self.subjects = {}
        self.genesis = None
        self.last_seq = None
        self.last_at = None
        self.count = 0
        self.open = None  # ((cmd, cmdSize), subject, at in ms, actor) of the command being applied
        self.clock_corrections = []  # (seq, at in ms, at) of each clock.corrected event (rule 5b)

    def apply(self, e):
        expected = 0 if self.last_seq is None else self.last_seq + 1
        if e.seq != expected:
            raise Violation(e.seq, "sequence number %d where %d was expected" % (e.seq, expected))
        # Rule 2; a clock correction is the one event that moves time back (rule 5b).
        if self.last_at is not None and e.at_ms < self.last_at and e.type != "clock.corrected":
            raise Violation(e.seq, "time %s is earlier than the previous event's %s" % (e.at, self.last_at_text))
        span = (e.cmd, e.cmd_size)
        if self.open is not None:
            if span != self.open[0] or e.subject != self.open[1]:
                raise Violation(e.seq, "command starting at seq %d is incomplete: expected %d events" % self.open[0])
            if e.at_ms != self.open[2] or not same_bytes(e.actor, self.open[3]):
                raise Violation(e.seq, "events of one command share one time and one actor")
        else:
            if e.cmd != e.seq:
                raise Violation(e.seq, "event claims command start %d, but a new command must start at its own seq" % e.cmd)
            self.open = (span, e.subject, e.at_ms, e.actor)
        if e.type == "ledger.created":
            if e.seq != 0 or e.cmd_size != 1:
                raise Violation(e.seq, "a genesis event can only be the first event, alone in its command")
            self.genesis = e
            self.versions = [(e.seq, e.at, self.catalog)]
        elif e.type == "catalog.published":
            if self.genesis is None or e.cmd_size != 1:
                raise Violation(e.seq, "a catalogue version is published alone in its command, after the genesis event")
            problem = problem_as_update(e.document, self.catalog)
            if problem is not None:
                raise Violation(e.seq, "the published catalogue cannot replace the one in force: %s" % problem)
            expected = [(f["code"], c["code"], c["version"]) for f in e.document.ordered for c in f["consents"]]
            if len(e.notices) != len(expected) or any(
                    n["feature"] != f or n["consent"] != c or not same_bytes(n["version"], v)
                    for n, (f, c, v) in zip(e.notices, expected)):
                raise Violation(e.seq, "the notices must list every consent of the published catalogue, in catalogue order, with its version")
            self.catalog = e.document
            self.versions.append((e.seq, e.at, e.document))
        elif e.type == "key.rotated":
            # Rule 5a. It changes no consent; its key is taken into the schedule by verify (step 5,
            # item 7a), after this rule.
            if self.genesis is None or e.cmd_size != 1:
                raise Violation(e.seq, "a key rotation is alone in its command, after the genesis event")
        elif e.type == "key.revoked":
            # Rule 5a, likewise; the revocation is taken into the schedule by item 7a.
            if self.genesis is None or e.cmd_size != 1:
                raise Violation(e.seq, "a key revocation is alone in its command, after the genesis event")
        elif e.type == "clock.corrected":
            # Rule 5b.
            if self.genesis is None or e.cmd_size != 1 or self.last_at is None:
                raise Violation(e.seq, "a clock correction is alone in its command, after the genesis event")
            if e.corrected_from_ms != self.last_at:
                raise Violation(e.seq, "a clock correction names the time it corrects, the previous event's %s, but this one names %s" % (self.last_at_text, e.corrected_from))
            if not e.at_ms < self.last_at:
                raise Violation(e.seq, "a clock correction moves the ledger's time back, but %s is not earlier than the previous event's %s" % (e.at, self.last_at_text))
            floor_ms, floor_text, what = ((self.clock_corrections[-1][1], self.clock_corrections[-1][2], "the previous clock correction's")
                                          if self.clock_corrections else (self.genesis.at_ms, self.genesis.at, "the genesis event's"))
            if e.at_ms < floor_ms:
                raise Violation(e.seq, "a clock correction cannot set the ledger's time to %s, before %s %s" % (e.at, what, floor_text))
            self.clock_corrections.append((e.seq, e.at_ms, e.at))
        else:
            if self.genesis is None:
                raise Violation(e.seq, "the log does not start with a genesis event")
            self.subjects.setdefault(e.subject, SubjectState()).apply(e, self.catalog)
        if e.seq == e.cmd + e.cmd_size - 1:
            self.open = None
        self.last_seq, self.last_at, self.last_at_text = e.seq, e.at_ms, e.at
        self.count += 1


# ---------------------------------------------------------------------------------------------
# Streams and the subject map (format 2; Spec/ledger-format.md, "Streams and the subject map")
# ---------------------------------------------------------------------------------------------

STREAM_KEY_LENGTH = 16
LEDGER_STREAM = bytes(STREAM_KEY_LENGTH)  # the stream of ledger events: genesis, catalogue versions, key rotations and revocations
EMPTY_HASH = bytes(32)                    # the hash of an empty subtree, and of the empty map
KEY_BITS = 8 * STREAM_KEY_LENGTH          # 128: no path is longer, no proof has more siblings


def stream_key(subject):
    """The stream of an event with this `subject` (None for ledger events): the reference's 16
    bytes. (A subject that is not 32 lowercase hex digits never gets here: the reader refuses it.)"""
    raw = hex_decode(subject, STREAM_KEY_LENGTH) if isinstance(subject, str) else None
    return LEDGER_STREAM if raw is None else raw


def map_leaf(key, seq):
    """leaf(key, seq) = SHA-256(0x02 || key || seq as 8 bytes big-endian)."""
    return sha256(b"\x02" + key + seq.to_bytes(8, "big"))


def map_node(left, right):
    """node(left, right) = SHA-256(0x03 || left || right)."""
    return sha256(b"\x03" + left + right)


def key_bit(key, depth):
    """Bit `depth` of the key, the most significant bit of byte 0 first: 0 goes left, 1 right."""
    return (key[depth >> 3] >> (7 - (depth & 7))) & 1


def map_root(entries, depth=0):
    """The root of the map {key: seq} by the definition: an empty subtree hashes to 32 zero bytes,
    a subtree with one key to that key's leaf, any other to the node of its two halves."""
    if not entries:
        return EMPTY_HASH
    if len(entries) == 1:
        (key, seq), = entries.items()
        return map_leaf(key, seq)
    halves = ({}, {})
    for key, seq in entries.items():
        halves[key_bit(key, depth)][key] = seq
    return map_node(map_root(halves[0], depth + 1), map_root(halves[1], depth + 1))


class MapLeaf:
    def __init__(self, key, seq):
        self.key, self.seq, self.hash, self.index = key, seq, map_leaf(key, seq), None


class MapInner:
    def __init__(self, left, right):
        self.left, self.right, self.index = left, right, None
        self.hash = map_node(subtree_hash(left), subtree_hash(right))


def subtree_hash(node):
    return EMPTY_HASH if node is None else node.hash


class SubjectMap:
    """The subject map, built one update at a time (as verify and a writer build it): nodes are
    never changed, a change copies its path, so that the nodes of the last stored map keep their
    record index (`index`) and only new nodes are written as records."""

    def __init__(self):
        self.top = None
        self.count = 0

    @property
    def root(self):
        return subtree_hash(self.top)

    def set(self, key, seq):
        self.top = self._set(self.top, 0, key, seq)

    def _set(self, node, depth, key, seq):
        if node is None:
            self.count += 1
            return MapLeaf(key, seq)
        if isinstance(node, MapLeaf):
            if node.key == key:
                return MapLeaf(key, seq)
            self.count += 1
            return self._split(depth, node, MapLeaf(key, seq))
        if key_bit(key, depth) == 0:
            return MapInner(self._set(node.left, depth + 1, key, seq), node.right)
        return MapInner(node.left, self._set(node.right, depth + 1, key, seq))

    def _split(self, depth, a, b):
        """The subtree at `depth` that holds exactly the two leaves a and b."""
        side_a, side_b = key_bit(a.key, depth), key_bit(b.key, depth)
        if side_a != side_b:
            return MapInner(a, b) if side_a == 0 else MapInner(b, a)
        child = self._split(depth + 1, a, b)
        return MapInner(child, None) if side_a == 0 else MapInner(None, child)

    def lookup(self, key):
        """(seq or None, proof) for `key`; the proof is (siblings from depth 0 down, end), the end
        None (an empty subtree) or the (key, seq) of the leaf where the key's path ends."""
        siblings, node, depth = [], self.top, 0
        while isinstance(node, MapInner):
            if key_bit(key, depth) == 0:
                siblings.append(subtree_hash(node.right))
                node = node.left
            else:
                siblings.append(subtree_hash(node.left))
                node = node.right
            depth += 1
        if node is None:
            return None, (siblings, None)
        return (node.seq if node.key == key else None), (siblings, (node.key, node.seq))

    def take_new_records(self, first_index, covered):
        """The records of the nodes made since the last call, children before parents, numbered
        from `first_index`, then a root record for a log of `covered` records (as a write appends
        them to subjects.map)."""
        records = []

        def place(node):
            if node is None or node.index is not None:
                return
            if isinstance(node, MapLeaf):
                record = map_leaf_record(node.key, node.seq)
            else:
                place(node.left)
                place(node.right)
                record = map_inner_record(map_ref(node.left), map_ref(node.right), subtree_hash(node.left), subtree_hash(node.right))
            node.index = first_index + len(records)
            records.append(record)
        place(self.top)
        records.append(map_root_record(covered, map_ref(self.top), self.root, self.count))
        return records


def verify_map_proof(key, root, proof):
    """What a proof shows for `key` against the map root `root`: ("present", seq), ("absent",),
    or None when it does not lead to `root` (Spec/ledger-format.md, Proofs)."""
    siblings, end = proof
    if len(key) != STREAM_KEY_LENGTH or len(siblings) > KEY_BITS:
        return None
    if end is None:
        h, found = EMPTY_HASH, ("absent",)
    else:
        other, seq = end
        if len(other) != STREAM_KEY_LENGTH:
            return None
        if other == key:
            found = ("present", seq)
        elif any(key_bit(other, d) != key_bit(key, d) for d in range(len(siblings))):
            return None  # another key's leaf shows absence only where the two paths agree
        else:
            found = ("absent",)
        h = map_leaf(other, seq)
    for depth in range(len(siblings) - 1, -1, -1):
        h = map_node(h, siblings[depth]) if key_bit(key, depth) == 0 else map_node(siblings[depth], h)
    return found if h == root else None


class StreamCheck:
    """Verifying, step 5, item 8: every event is of the genesis event's format version; in format 2
    it names its stream's newest event so far; a command's last event records its seq for its
    stream in the subject map, and an event that carries a root (the last event of a commit) signs
    the map's root so far."""

    def __init__(self, version):
        self.version = version
        self.newest = {}  # stream key -> seq of the stream's newest event
        self.map = SubjectMap()
        self.last_has_root = False  # whether the newest event checked carries a root

    def check(self, e, number):
        if e.v != self.version:
            raise Failure(number, e.seq, "the event is of format version %d, but the ledger's genesis event is of version %d" % (e.v, self.version))
        if self.version < 2:
            return
        key = stream_key(e.subject)
        expected = self.newest.get(key)
        if e.stream_prev != expected:
            def name(seq, nothing):
                return nothing if seq is None else "seq %d" % seq
            raise Failure(number, e.seq, "the event names %s as its stream's previous event, but that is %s: an event of this stream "
                          "was left out or added" % (name(e.stream_prev, "no event"), name(expected, "none")))
        if e.seq == e.cmd + e.cmd_size - 1:
            self.map.set(key, e.seq)
        if e.stream_root is not None and e.stream_root != self.map.root.hex():
            raise Failure(number, e.seq, "the event signs subject-map root %s, but the events so far give %s"
                          % (e.stream_root, self.map.root.hex()))
        self.newest[key] = e.seq
        self.last_has_root = e.stream_root is not None


class StreamLinker:
    """For the derived test ledgers: a format-2 writer's stream members for each next event."""

    def __init__(self):
        self.newest = {}
        self.map = SubjectMap()

    def link(self, body, ends_commit):
        """The stream members of `body` (a dict), before it is hashed; `ends_commit`: whether the
        body is the last of a commit (then, if it ends a command, it carries the root)."""
        seq, cmd, size = body.get("seq"), body.get("cmd"), body.get("cmdSize")
        if not all(_is_int(x) and x >= 0 for x in (seq, cmd, size)):
            return {}
        key = stream_key(body.get("subject"))
        members = {}
        if key in self.newest:
            members["streamPrev"] = self.newest[key]
        if seq == cmd + size - 1:
            self.map.set(key, seq)
            if ends_commit:
                members["streamRoot"] = self.map.root.hex()
        return members

    def sealed(self, body):
        if _is_int(body.get("seq")):
            self.newest[stream_key(body.get("subject"))] = body["seq"]


# The stored subject map, subjects.map: fixed records of 88 bytes, appended only. Record i is
# referred to as i + 1 (0 is the empty subtree). Bytes 1-7 of every record are zero.
MAP_RECORD = 88
MAP_ROOT_SEARCH = 1 << 20  # how many records from the end a reader looks back for a root record
INT64_MAX = 2**63 - 1


def map_ref(node):
    return 0 if node is None else node.index + 1


def map_leaf_record(key, seq):
    """Tag 1: key at bytes 8-23, seq u64 big-endian at 24-31, the rest zero."""
    return b"\x01" + bytes(7) + key + seq.to_bytes(8, "big") + bytes(56)


def map_inner_record(left_ref, right_ref, left_hash, right_hash):
    """Tag 2: left and right references u64 big-endian at 8 and 16, their hashes at 24 and 56."""
    return b"\x02" + bytes(7) + left_ref.to_bytes(8, "big") + right_ref.to_bytes(8, "big") + left_hash + right_hash


def map_root_record(covered, ref, root, keys):
    """Tag 3: covered log size at 8, root reference at 16, root hash at 24-55, key count at 56,
    the rest zero."""
    return b"\x03" + bytes(7) + covered.to_bytes(8, "big") + ref.to_bytes(8, "big") + root + keys.to_bytes(8, "big") + bytes(24)


def derive_subject_map(log, per="commit"):
    """subjects.map for every event line of `log` (head lines skipped), as writers append it: one
    write (its new nodes, then a root record) per commit, that is after each event that carries a
    root (per="commit"), or for the whole log at once (per="log")."""
    m, out = SubjectMap(), bytearray()
    lines = event_lines(log)
    for n, raw in enumerate(lines, 1):
        e = decode_line(raw)
        if e.seq == e.cmd + e.cmd_size - 1:
            m.set(stream_key(e.subject), e.seq)
        if (per == "commit" and e.stream_root is not None) or n == len(lines):
            out += b"".join(m.take_new_records(len(out) // MAP_RECORD, n))
    return bytes(out)


class MapDamaged(Exception):
    pass


def _u64(record, offset):
    return int.from_bytes(record[offset:offset + 8], "big")


def _map_ref(value):
    if value > INT64_MAX:
        raise MapDamaged("a record reference is out of range")
    return value


def stored_map_root(data):
    """The newest root record of subjects.map (None if none in the last MAP_ROOT_SEARCH records):
    (its index, covered size, root reference, root hash, key count). A partial record at the end
    is ignored."""
    count = len(data) // MAP_RECORD
    for index in range(count - 1, max(-1, count - 1 - MAP_ROOT_SEARCH), -1):
        record = data[index * MAP_RECORD:(index + 1) * MAP_RECORD]
        if record[0] != 3:
            continue
        try:
            if any(record[1:8]) or any(record[64:88]):
                raise MapDamaged("not a root record")
            covered, keys = _u64(record, 8), _u64(record, 56)
            if covered > INT64_MAX or keys > INT64_MAX:
                raise MapDamaged("a root record's counts are out of range")
            ref, root = _map_ref(_u64(record, 16)), record[24:56]
            if (ref == 0) != (root == EMPTY_HASH):
                raise MapDamaged("a root record's reference and hash disagree")
        except MapDamaged as damage:
            raise MapDamaged("record %d: %s" % (index, damage))
        return index, covered, ref, root, keys
    return None


def stored_map_entries(data, ref, expected):
    """Every (key, seq) of the stored map whose root is record `ref` (0: empty) hashing to
    `expected`, each node checked to hash to what its parent records."""
    found = []

    def walk(ref, expected, depth):
        if ref == 0:
            if expected != EMPTY_HASH:
                raise MapDamaged("an empty subtree with a non-zero hash")
            return
        index = ref - 1
        record = data[index * MAP_RECORD:(index + 1) * MAP_RECORD]
        if len(record) != MAP_RECORD:
            raise MapDamaged("record %d: there is no such record" % index)
        if any(record[1:8]):
            raise MapDamaged("record %d: not a node record" % index)
        if record[0] == 1:
            if any(record[32:88]):
                raise MapDamaged("record %d: a leaf record's unused bytes are not zero" % index)
            key, seq = record[8:24], _u64(record, 24)
            if map_leaf(key, seq) != expected:
                raise MapDamaged("record %d does not hash to the value its parent records" % index)
            found.append((key, seq))
        elif record[0] == 2:
            try:
                left, right = _map_ref(_u64(record, 8)), _map_ref(_u64(record, 16))
            except MapDamaged as damage:
                raise MapDamaged("record %d: %s" % (index, damage))
            left_hash, right_hash = record[24:56], record[56:88]
            if (left == 0) != (left_hash == EMPTY_HASH) or (right == 0) != (right_hash == EMPTY_HASH):
                raise MapDamaged("record %d: an empty child with a non-zero hash, or the reverse" % index)
            if map_node(left_hash, right_hash) != expected:
                raise MapDamaged("record %d does not hash to the value its parent records" % index)
            if depth >= KEY_BITS:
                raise MapDamaged("the tree is deeper than a key has bits")
            walk(left, left_hash, depth + 1)
            walk(right, right_hash, depth + 1)
        else:
            raise MapDamaged("record %d: record tag %d is not a node" % (index, record[0]))
    walk(ref, expected, 0)
    return found


DERIVED_REPAIR = "rebuild it: delete lines.idx, tree.hashes and subjects.map"


def check_stored_map(data, size, streams):
    """Verifying, step 9: the stored subject map, when its newest root record covers the whole
    log (`size` records), holds what the log builds (`streams`, the StreamCheck after step 5).
    Returns whether it was checked."""
    def fail(problem):
        return Failure(None, None, "the subject map disagrees with the log: %s (%s)" % (problem, DERIVED_REPAIR))
    try:
        newest = stored_map_root(data)
        if newest is None or newest[1] != size:
            return False
        _, _, ref, root, _ = newest
        if root != streams.map.root:
            raise fail("its root %s differs from %s, the root the log's events build" % (root.hex(), streams.map.root.hex()))
        entries = stored_map_entries(data, ref, root)
    except MapDamaged as damage:
        raise fail(str(damage))
    if len(entries) != len(streams.newest) or any(streams.newest.get(key) != seq for key, seq in entries):
        raise fail("its entries differ from each stream's newest event in the log")
    return True


# ---------------------------------------------------------------------------------------------
# Verifying a ledger folder (Spec/ledger-format.md, "Verifying, step by step")
# ---------------------------------------------------------------------------------------------

class Report:
    pass


# ---------------------------------------------------------------------------------------------
# The key schedule (Spec/ledger-format.md, Key rotation)
# ---------------------------------------------------------------------------------------------

HANDOVER_CONTEXT = b"consentledger-key-handover-v1\n"


def handover_message(ledger, prev, old_key, new_key):
    """H, what the new key signs in a key.rotated event's `handover`: the context, the ledger's
    name, the rotation's own `prev` (hex, as in the body), the key in force and the new key (hex),
    each followed by a line feed. The name and `prev` pin the handover to one point of one ledger."""
    return (HANDOVER_CONTEXT + ledger.encode("utf-8") + b"\n" + prev.encode("ascii") + b"\n"
            + old_key.hex().encode("ascii") + b"\n" + new_key.hex().encode("ascii") + b"\n")


class KeySchedule:
    """The ledger's keys, oldest first, each with the first seq it signs: the genesis key from 0,
    each rotation's key from the rotation's seq + 1. Built from public.key (which the genesis
    event pins) and the log's key.rotated events, each taken in after its own line was checked
    with the key it retires, so no key is trusted that the genesis key did not hand over to."""

    def __init__(self, genesis_key):
        self.periods = [(0, genesis_key, key_id(genesis_key))]  # (first seq, key, key id)
        # The revocations taken in, oldest first: (seq of the key.revoked event, key id of the
        # revoked key, C the seq it was compromised from, U the rotation that retired it, the
        # attested hashes as 64-digit hex texts, one per seq C ... U).
        self.revocations = []

    def in_force(self, seq):
        """(key, key id) of the key in force for the event of `seq`: the newest key introduced
        before it. A checkpoint of size S is signed by in_force(S), the key of the next event, so
        the head a rotation commits is the new key's."""
        period = [p for p in self.periods if p[0] <= seq][-1]
        return period[1], period[2]

    @property
    def keys(self):
        return [p[1] for p in self.periods]

    def key_problem(self, kid, seq):
        """Step 5, item 2: why an event of `seq` whose `kid` is `kid` is not signed by the key in
        force, or None; a key earlier in the schedule than the one in force (one the ledger
        rotated away from) is named as such."""
        start, _, expected = [p for p in self.periods if p[0] <= seq][-1]
        if kid == expected:
            return None
        retired = " (a key this ledger has rotated away from)" if any(p[2] == kid and p[0] < start for p in self.periods) else ""
        return "signed with key id %s%s, not the ledger's key in force for this event, %s" % (kid, retired, expected)

    def admit(self, e, ledger):
        """Step 5, item 7a: takes in the key.rotated event `e` (its line already checked with the
        key in force, item 2 and 3), in the spec's order: after the previous rotation; a key (or
        key id) the ledger has not used; a handover by the new key over H. Raises Failure with the
        rotation's line and seq."""
        if e.seq < self.periods[-1][0]:
            raise Failure(e.line, e.seq, "the key rotation comes before the rotation at seq %d" % (self.periods[-1][0] - 1))
        new = bytes.fromhex(e.public_key)
        new_kid = key_id(new)
        if any(key == new or kid == new_kid for _, key, kid in self.periods):
            raise Failure(e.line, e.seq, "the key rotation names key %s, which this ledger has used before" % new_kid)
        old, _ = self.in_force(e.seq)
        if not ed25519_verify(new, handover_message(ledger, e.prev, old, new), bytes.fromhex(e.handover)):
            raise Failure(e.line, e.seq, "the key rotation's handover signature does not verify with the new key %s" % new_kid)
        self.periods.append((e.seq + 1, new, new_kid))

    def revocation(self, e):
        """Key rotation, Revocation, items 1-6 in order (and the reference's last check, which the
        body reader makes unreachable), for the key.revoked event `e` against the schedule so
        far: (None, the revocation as self.revocations holds it) or (the reason, None). Item 1
        cannot fail for a line that passed step 5, item 2, nor for an entry that passed Checking
        an entry."""
        _, in_force_kid = self.in_force(e.seq)
        if e.kid != in_force_kid:
            return "the key revocation is signed with key id %s, not with the key in force, %s" % (e.kid, in_force_kid), None
        key = hex_decode(e.public_key, 32)
        index = next((i for i, p in enumerate(self.periods) if p[1] == key), None)
        if index is None:
            return "the key revocation names a key this ledger never used", None
        start, _, kid = self.periods[index]
        # Rotated away from before this event: the next period has begun by its seq. (In a file's
        # schedule, which holds every rotation below the checkpoint, a key retired only after the
        # revocation is still in force for it.)
        if not (start <= e.seq and index + 1 < len(self.periods) and self.periods[index + 1][0] <= e.seq):
            return "the key revocation names key %s, which is still in force: a key is rotated away from before it is revoked" % kid, None
        if any(r[1] == kid for r in self.revocations):
            return "the key revocation names key %s, which was revoked before" % kid, None
        until = self.periods[index + 1][0] - 1  # U, the rotation that retired it
        since = e.compromised_since
        if not start <= since <= until:
            return "the key revocation says key %s was compromised from seq %d, but it signed seq %d to %d" % (kid, since, start, until), None
        if len(e.attested) != until - since + 1:
            return "the key revocation attests %d events, but key %s signed %d from seq %d to %d" % (
                len(e.attested), kid, until - since + 1, since, until), None
        if any(hex_decode(h, 32) is None for h in e.attested):
            return "the key revocation attests something that is not a hash", None
        return None, (e.seq, kid, since, until, list(e.attested))

    def admit_revocation(self, e):
        """Step 5, item 7a, for a key.revoked event `e` (its line already checked with the key in
        force): takes the revocation in. Raises Failure with the revocation's line and seq."""
        problem, revocation = self.revocation(e)
        if problem is not None:
            raise Failure(e.line, e.seq, problem)
        self.revocations.append(revocation)

    def unattested(self, seq, kid, body_hash):
        """The first revocation (as self.revocations holds it) whose compromised window holds the
        event of `seq` signed by key `kid` but whose `attested` entry for it is not `body_hash`
        (hex SHA-256 of its BODY), or None. An event outside every revoked key's window needs no
        attestation."""
        for revocation in self.revocations:
            r_seq, r_kid, since, until, attested = revocation
            if r_kid == kid and since <= seq <= until and attested[seq - since] != body_hash:
                return revocation
        return None


def unattested_reason(revocation_seq, kid, since):
    """Verifying, step 6a: an event of a revoked key's compromised window that its revocation
    does not attest."""
    return "signed by key %s after it was compromised (seq %d on), and not re-attested by its revocation at seq %d" % (
        kid, since, revocation_seq)


def read_file(folder, name):
    with open(os.path.join(folder, name), "rb") as f:
        return f.read()


def log_content(log):
    """The content of a log file (The log file): its bytes before the run of zero bytes at its
    end, which a writer reserves for its appends."""
    return log.rstrip(b"\0")


def verify_folder(folder, log=None, head_text=None, derived=None, subjects=None, subject_map=None):
    """Verifies the ledger folder; `log` and `head_text` replace ledger.jsonl and head, `derived`
    the bytes of (lines.idx, tree.hashes) (False: none; None: the folder's; an absent file is
    empty), `subject_map` the bytes of subjects.map (False: none; None: the folder's, if there is
    one), `subjects` the bytes of subjects.jsonl. Returns a Report or raises Failure naming the
    first bad entry. (Step 8, the recorded checkpoints, is in verify_export.py, which has signed
    notes.)

    The layout: a folder with a `head` file, or a call with `head_text`, is of the older layout
    (every line of the log an event line, the head in the file); otherwise the log holds its
    heads (a head line after each commit's event lines; the recorded head is the newest, complete
    commits after it are kept and the earlier head lines are checked, step 8), read from `log`
    when given. Lines, seqs, leaves and the derived files count event lines only."""
    if derived is None:
        derived = tuple(read_file(folder, n) if os.path.isfile(os.path.join(folder, n)) else b"" for n in ("lines.idx", "tree.hashes"))
    if subject_map is None:
        subject_map = read_file(folder, "subjects.map") if os.path.isfile(os.path.join(folder, "subjects.map")) else False
    if log is None:
        if not os.path.isfile(os.path.join(folder, "ledger.jsonl")):
            raise Failure(None, None, "no ledger at %s (no ledger.jsonl)" % folder)
        log = read_file(folder, "ledger.jsonl")
    # The log's content: its bytes before the zero bytes reserved for appends (The log file).
    log = log_content(log)

    # Steps 1 and 2: the key, the catalogue and the genesis event.
    public_key = hex_decode(trimmed_text(read_file(folder, "public.key")), 32)
    if public_key is None:
        raise Failure(None, None, "public.key does not hold a 64-digit lowercase hex Ed25519 public key")
    kid = key_id(public_key)
    catalog_bytes = read_file(folder, "catalog.json")
    heads_in_log = head_text is None and not os.path.isfile(os.path.join(folder, "head"))
    newline = log.find(b"\n")
    if newline < 0:
        raise Failure(1, 0, "the genesis line is incomplete (no newline)")
    if heads_in_log and is_head_line(log[:newline]):
        raise Failure(1, 0, "the log begins with a head line, not the genesis event")
    try:
        genesis = decode_line(log[:newline])
    except DecodeError as e:
        raise Failure(1, 0, "genesis event is malformed: %s" % e)
    if genesis.type != "ledger.created" or genesis.seq != 0 or genesis.prev != ZERO_HASH:
        raise Failure(1, 0, "the first line is not a genesis event with seq 0 and a zero prev")
    if genesis.public_key != public_key.hex() or genesis.kid != kid:
        raise Failure(1, 0, "the genesis event pins public key %s, but the ledger's public key is %s" % (genesis.public_key, public_key.hex()))
    if not ed25519_verify(public_key, SIGNING_CONTEXT + genesis.body, genesis.signature):
        raise Failure(1, 0, "the genesis event's signature does not verify with the ledger's public key")
    if sha256(catalog_bytes).hex() != genesis.catalog:
        raise Failure(1, 0, "the stored catalogue's SHA-256 differs from the hash pinned in the genesis event")
    try:
        catalog_value = parse_canonical(catalog_bytes)
    except JSONError as e:
        raise Failure(1, 0, "stored catalogue: catalog.json is not canonical JSON: byte %d: %s" % (e.offset + 1, e.message))
    try:
        catalog, catalog_order = decode_catalog(catalog_value)
    except CatalogError as e:
        raise Failure(1, 0, "stored catalogue: %s" % e)

    # Steps 3 and 4: the head and the end of the log (torn tail). If either fails, an earlier
    # line may be bad too, and the first bad line of the whole file is named instead: the checks
    # of step 5 over every complete event line (in a log that holds its heads, every complete line
    # that is not a head line, those after the newest head line included), numbered among them.
    ends = [i + 1 for i, b in enumerate(log) if b == 0x0A]
    starts = [0] + ends[:-1]
    if heads_in_log:
        # ends and starts of the event lines only: event line i is seq i, line i + 1.
        kinds = [is_head_line(log[starts[k]:ends[k] - 1]) for k in range(len(ends))]
        all_ends, all_starts = ends, starts
        ends = [all_ends[k] for k in range(len(all_ends)) if not kinds[k]]
        starts = [all_starts[k] for k in range(len(all_ends)) if not kinds[k]]
        try:
            (head_seq, head_hash, head_root), end, complete_lines, torn_lines, head_note = find_end_in_log(
                log, all_ends, all_starts, genesis.ledger)
        except Failure:
            check_lines(log, ends, starts, len(ends), public_key, catalog, None, genesis.v)
            raise
    else:
        if head_text is None:
            head_text = read_file(folder, "head").decode("utf-8", "replace")
        try:
            head_seq, head_hash, head_root = parse_head(head_text, genesis.ledger)
            head_note = head_text if head_root is not None else None
            end, complete_lines, torn_lines = find_end(log, ends, starts)
        except Failure:
            check_lines(log, ends, starts, len(ends), public_key, catalog, None, genesis.v)
            raise

    # Step 5: every line up to the end of the last complete command, in order; the derived files
    # in the same pass: lines.idx when it covers the whole log, tree.hashes when it does too
    # (otherwise they are left for a rebuild).
    if not derived or len(derived[0]) // INDEX_ENTRY < complete_lines:
        derived = None
    elif len(derived[1]) // 32 < stored_hash_count(complete_lines):
        derived = (derived[0], None)
    replay, previous_hash, head_seen, records, streams, schedule = check_lines(
        log, ends, starts, complete_lines, public_key, catalog, (head_seq, head_hash), genesis.v, derived)

    # Step 3, continued: the recorded head's signature, now that the lines gave the key schedule:
    # the key in force for seq SIZE, the key of the event after it (so the head a rotation
    # commits is the new key's).
    if head_note is not None:
        head_key, head_kid = schedule.in_force(head_seq + 1)
        problem = head_signature_problem(head_note, genesis.ledger, head_key)
        if problem is not None:
            raise Failure(None, None, "the signed head does not verify with the ledger's key in force at size %d, %s: %s"
                          % (head_seq + 1, head_kid, problem))

    # Steps 6 and 7: the head was reached; no command is left open.
    if not head_seen or replay.last_seq is None:
        last = "none" if replay.last_seq is None else str(replay.last_seq)
        raise Failure(replay.count + 1, None if replay.last_seq is None else replay.last_seq + 1,
                      "the log ends at seq %s but seq %d was acknowledged: acknowledged events are missing (truncated log)" % (last, head_seq))
    # Step 6a: every event line of a revoked key's compromised window (seq C ... U) hashes to the
    # entry of its revocation's `attested` at its position; oldest revocation first, in order.
    for revocation_seq, revoked_kid, since, until, attested in schedule.revocations:
        for s in range(since, until + 1):
            if records[s].hash != attested[s - since]:
                raise Failure(s + 1, s, unattested_reason(revocation_seq, revoked_kid, since))
    if replay.open is not None:
        first = replay.open[0][0]
        raise Failure(first + 1, first, "the command starting here is incomplete")

    # Step 3, continued: a signed head's root is the root of the log's first SEQ + 1 lines.
    if head_root is not None:
        leaves = [leaf_hash(log[starts[i]:ends[i] - 1]) for i in range(head_seq + 1)]
        if tree_root(leaves) != head_root:
            raise Failure(None, None, "the signed head commits to root %s at size %d, but the log's first %d records hash to another root"
                          % (head_root.hex(), head_seq + 1, head_seq + 1))

    # Step 8 (the part about the log itself; recorded checkpoints are in verify_export.py): every
    # earlier head line of a log that holds its heads.
    if heads_in_log:
        check_earlier_heads(log, all_ends, all_starts, end, genesis.ledger, schedule, records)

    # Step 9 (format 2): the log's last event carries the subject map's root; the stored subject
    # map, when its newest root record covers the whole log, holds what the log builds (one that
    # is behind is left for the next write).
    if streams.version >= 2 and not streams.last_has_root:
        raise Failure(replay.count, replay.count - 1, "the log's last event carries no subject-map root (every commit ends with one)")
    map_checked = streams.version >= 2 and subject_map is not False and check_stored_map(subject_map, replay.count, streams)

    # Step 10: in format 2 every subject record carries the signature of a key of the schedule
    # (the key in force when it was written, or when a revocation signed it again) over its id and
    # salt, a key that no revocation names (checked in file order; the reference names one of the
    # failing records, which one is not part of the format); then
    # every pseudonym in the log has exactly one subject record whose id and salt hash to it
    # (records without events are allowed: a command that failed after saving its salt); then
    # every sealed evidence reference of a subject with a record opens under the key that record
    # gives (item 5).
    try:
        subject_records = read_subject_records(folder, subjects)
        for record in subject_records.values():
            check_subject_record(record, schedule, genesis.v, "subjects.jsonl of %s" % folder)
    except ValueError as e:
        raise Failure(None, None, str(e))
    recorded = {}
    # An erased subject has no record, and must have none (one left is an unfinished erasure).
    erased = {ref for ref, state in replay.subjects.items() if state.erased_at is not None}
    for subject_id, record in subject_records.items():
        ref = subject_ref(subject_id, record.salt)
        if ref in erased:
            raise Failure(None, None, "the subject of pseudonym %s was erased, but a record of it remains in subjects.jsonl" % ref)
        if ref in recorded:
            raise Failure(None, None, "two subject records in subjects.jsonl have the same pseudonym %s" % ref)
        recorded[ref] = subject_id
    missing = sorted(ref for ref in replay.subjects if ref not in recorded and ref not in erased)
    if missing:
        raise Failure(None, None, "%d pseudonym(s) in the log have no subject record in subjects.jsonl whose id and salt hash "
                      "to them (%s): subject records were altered, swapped or removed" % (len(missing), ", ".join(missing[:3])))
    # Item 5: in log order, each verified grant's sealed reference, under the key of its subject's
    # record, at the event's line and seq. An erased subject has no record (item 4): its sealed
    # references stay sealed, its key is gone.
    keys, opened, left_sealed = {}, 0, 0
    for e in records:
        sealed = e.evidence.get("sealedEvidence") if e.type == "consent.given" else None
        if sealed is None:
            continue
        if e.subject not in recorded:
            left_sealed += 1  # an erased subject's (item 3 has refused any other without a record)
            continue
        if e.subject not in keys:
            subject_id = recorded[e.subject]
            keys[e.subject] = evidence_key(subject_id, subject_records[subject_id].salt)
        try:
            open_evidence(sealed, keys[e.subject])
        except SealError as err:
            raise Failure(e.line, e.seq, "%s (the key of the subject's record in subjects.jsonl): the event or the record is not what "
                          "the ledger wrote" % err.problem)
        opened += 1

    report = Report()
    report.events, report.records, report.replay = replay.count, records, replay
    report.head = (replay.last_seq, previous_hash)
    report.recorded_head = (head_seq, head_hash)
    # public_key and key_id are the genesis key's (public.key); key_schedule holds every key.
    report.ledger_name, report.public_key, report.key_id = genesis.ledger, public_key, kid
    report.key_schedule = schedule
    report.catalog, report.catalog_order = catalog, catalog_order
    report.derived_checked = None if derived is None else "lines.idx" if derived[1] is None else "lines.idx and tree.hashes"
    report.map_checked, report.version, report.streams = map_checked, genesis.v, streams
    report.torn = None if end == len(log) else (end, len(log) - end, torn_lines)
    report.heads_in_log = heads_in_log
    # Sealed evidence references: (opened with their subjects' records, left sealed: erased).
    report.sealed = (opened, left_sealed)
    return report


def note_key_hash(name, public_key):
    """C2SP signed-note key hash of an Ed25519 key: the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)."""
    return sha256(name.encode("utf-8") + b"\n\x01" + public_key)[:4]


def parse_head(text, name, signed_only=False):
    """Step 3: the signed head (a checkpoint note with one 'chain HASH' extension line and a block
    of well-formed signature lines) -> (seq, hash hex, root bytes); or, unless `signed_only` (a
    head line), the older unsigned `SEQ HASH` -> (seq, hash hex, None). Its signature is not
    checked here: the key that signs it is the one in force at its size, which only the lines
    tell, so verify_folder checks it after step 5 (head_signature_problem)."""
    split = text.rfind("\n\n")
    if split < 0 and signed_only:
        raise Failure(None, None, "head is not a signed head (a checkpoint note with a 'chain' line and a signature block)")
    if split < 0:
        parts = text.rstrip("\n\r ").split(" ")
        if (len(parts) != 2 or not parts[0].isascii() or not parts[0].isdigit() or str(int(parts[0])) != parts[0]
                or int(parts[0]) >= 2**64 or hex_decode(parts[1], 32) is None):
            raise Failure(None, None, "head is not a signed head or 'SEQ HASH'")
        return int(parts[0]), parts[1], None
    body, block = text[:split + 1], text[split + 2:]
    lines = body[:-1].split("\n")
    root = base64_decode(lines[2]) if len(lines) == 4 else None
    if (len(lines) != 4 or lines[0] != name or not lines[1].isascii() or not lines[1].isdigit() or str(int(lines[1])) != lines[1]
            or int(lines[1]) < 1 or root is None or len(root) != 32 or not lines[3].startswith("chain ")
            or hex_decode(lines[3][6:], 32) is None):
        raise Failure(None, None, "head is not a signed head of this ledger (ORIGIN, SIZE, ROOT, 'chain HASH')")
    for line in block.rstrip("\n").split("\n"):
        fields = line[2:].split(" ") if line.startswith("\u2014 ") else []
        raw = base64_decode(fields[1]) if len(fields) == 2 else None
        if raw is None or len(raw) <= 4:
            raise Failure(None, None, "the head's signature block is malformed")
    return int(lines[1]) - 1, lines[3][6:], root


def head_signature_problem(text, name, public_key):
    """The signature of a signed head that parse_head read (its signature lines well formed):
    None when a signature by (`name`, `public_key`) verifies, else what is wrong."""
    split = text.rfind("\n\n")
    body, block = text[:split + 1], text[split + 2:]
    signed = False
    for line in block.rstrip("\n").split("\n"):
        fields = line[2:].split(" ")
        raw = base64_decode(fields[1])
        if fields[0] == name and raw[:4] == note_key_hash(name, public_key):
            if len(raw) != 68 or not ed25519_verify(public_key, body.encode("utf-8"), raw[4:]):
                return "its signature by key %s+%s does not verify" % (name, note_key_hash(name, public_key).hex())
            signed = True
    return None if signed else "it carries no signature by key %s+%s" % (name, note_key_hash(name, public_key).hex())


def base64_decode(text):
    """Standard base64 with padding, canonical; None if not."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode() == text else None


def tree_root(leaves):
    """RFC 6962 root of the leaf hashes (at least one), folding the complete subtrees."""
    frontier = []
    for n, h in enumerate(leaves):
        while n & 1:
            h = node_hash(frontier.pop(), h)
            n >>= 1
        frontier.append(h)
    root = frontier[-1]
    for h in reversed(frontier[:-1]):
        root = node_hash(h, root)
    return root


def find_end(log, ends, starts):
    """Step 4 (Torn tails) of a log of the older layout (a `head` file; every line an event
    line): (end offset, lines before it, torn complete lines)."""
    if not ends:
        raise Failure(1, 0, "the log holds no complete event")

    def tail_line(k):
        try:
            return decode_line(log[starts[k]:ends[k] - 1])
        except DecodeError as e:
            raise Failure(k + 1, None, "malformed event at byte offset %d: %s" % (starts[k], e))

    k = len(ends) - 1
    newest = tail_line(k)
    torn_lines = 0
    if newest.seq != newest.cmd + newest.cmd_size - 1:
        last = newest
        while last.seq != newest.cmd:
            k -= 1
            if k < 0:
                raise Failure(1, 0, "the log holds no complete event")
            previous = tail_line(k)
            if (previous.cmd, previous.cmd_size) != (newest.cmd, newest.cmd_size) or previous.seq + 1 != last.seq:
                raise Failure(k + 1, previous.seq, "the last command's events are not contiguous")
            last = previous
        torn_lines = len(ends) - k
        k -= 1
        if k < 0:
            raise Failure(1, 0, "the log holds no complete event")
    # Step 4 (format 2): complete commands after the last event that carries streamRoot belong to
    # a commit a crash cut short.
    last = tail_line(k)
    while last.v >= 2 and last.stream_root is None:
        torn_lines = len(ends) - k
        k -= 1
        if k < 0:
            raise Failure(1, 0, "the log holds no complete event")
        before = tail_line(k)
        if before.seq + 1 != last.seq:
            raise Failure(k + 1, before.seq, "the last commit's events are not contiguous")
        last = before
    return ends[k], k + 1, torn_lines


def find_end_in_log(log, ends, starts, name):
    """Step 4 (Torn tails) of a log that holds its heads, over all its complete lines (`ends` and
    `starts`, head lines included): the recorded head is the newest head line, which must hold a
    signed head of the ledger (step 3; its signature is checked after step 5, with the key in
    force at its size) and follow the event of seq SIZE - 1 (the nearest event
    line before it; earlier head lines are skipped). The complete lines after it must be events,
    their seqs following SEQ one by one. Going forward over them, the events up to the last one
    that ends a commit (its seq is cmd + cmdSize - 1 and, in format 2, it carries streamRoot) are
    kept: a commit whose head line never reached the disk, or was cut, is signed event by event
    and part of the log, which is then ahead of its head. The events after it (a commit a crash
    cut short, never acknowledged) and any partial line are the torn tail. Returns ((seq, hash
    hex, root) of the head, end offset of the kept log, the event lines before it, the complete
    event lines after it, the head's note)."""
    def line(k):
        return log[starts[k]:ends[k] - 1]

    def where(k):
        return "the line at byte offset %d (line %d)" % (starts[k], k + 1)

    # The newest head line whose commit (its lines since the head line before it) holds no zero
    # byte: an acknowledged line never holds one, and a zero byte marks a write into the log's
    # reserve that a crash cut short.
    k = len(ends) - 1
    while k >= 0:
        if is_head_line(line(k)):
            p = k - 1
            while p >= 0 and not is_head_line(line(p)):
                p -= 1
            if log.find(b"\0", ends[p] if p >= 0 else 0, ends[k]) < 0:
                break
        k -= 1
    if k < 0:
        raise Failure(None, None, "the log holds no head line: the signed head that ends every commit is missing")
    try:
        note = head_line_note(line(k))
    except HeadLineError as e:
        raise Failure(None, None, "the head line at byte offset %d (line %d) is not a signed head: %s" % (starts[k], k + 1, e))
    try:
        head = parse_head(note, name, signed_only=True)
    except Failure as f:
        raise Failure(None, None, "the head line at byte offset %d (line %d): %s" % (starts[k], k + 1, f.reason))
    # The event line just before the newest head line (earlier head lines skipped).
    j = k - 1
    while j >= 0 and is_head_line(line(j)):
        j -= 1
    if j < 0:
        raise Failure(1, 0, "the log begins with a head line, not the genesis event")
    try:
        last = decode_line(line(j))
    except DecodeError as e:
        raise Failure(None, None, "%s, the event before the newest head line, is malformed: %s" % (where(j), e))
    if last.seq != head[0]:
        raise Failure(None, last.seq, "the head line at byte offset %d covers %d entries, but follows the event of seq %d"
                      % (starts[k], head[0] + 1, last.seq))
    # After the head: events only, in sequence; complete commits kept, the rest torn. From the
    # first zero byte after the head on, everything is torn.
    kept = sum(1 for j in range(k) if not is_head_line(line(j)))
    end, torn, previous = ends[k], 0, last.seq
    first_zero = log.find(b"\0", ends[k])
    for j in range(k + 1, len(ends)):
        if first_zero >= 0 and ends[j] > first_zero:
            break
        try:
            e = decode_line(line(j))
        except DecodeError as err:
            raise Failure(None, None, "%s, after the log's newest head line, is neither an event nor a head line: %s" % (where(j), err))
        if e.seq != previous + 1:
            raise Failure(None, e.seq, "the events after the newest head line are not contiguous: seq %d at byte offset %d" % (e.seq, starts[j]))
        previous = e.seq
        torn += 1
        if e.seq == e.cmd + e.cmd_size - 1 and (e.v < 2 or e.stream_root is not None):
            end, kept, torn = ends[j], kept + torn, 0
    return head, end, kept, torn, note


class HeadLineError(Exception):
    pass


def head_line_note(line):
    """A head line (without its 0x0A) -> its NOTE: the line MUST be canonical JSON {"head":NOTE}.
    Raises HeadLineError otherwise."""
    try:
        value = parse_canonical(line)
    except JSONError as e:
        raise HeadLineError("the head line is not canonical JSON: byte %d: %s" % (e.offset + 1, e.message))
    if not (isinstance(value, dict) and list(value) == ["head"] and isinstance(value["head"], str)):
        raise HeadLineError('the head line is not {"head":NOTE}')
    return value["head"]


def read_head_note(note):
    """The form of a signed head, as a store reads it (the signature not checked, the origin any):
    -> (origin, size, root bytes). Raises HeadLineError."""
    split = note.rfind("\n\n")
    if split < 0:
        raise HeadLineError("the head has no signature block")
    lines = note[:split].split("\n")
    root = base64_decode(lines[2]) if len(lines) == 4 else None
    if (len(lines) != 4 or not lines[0] or not lines[1].isascii() or not lines[1].isdigit() or str(int(lines[1])) != lines[1]
            or int(lines[1]) < 1 or int(lines[1]) > 1 << 62 or root is None or len(root) != 32 or not lines[3].startswith("chain ")
            or hex_decode(lines[3][6:], 32) is None):
        raise HeadLineError("the head is not a checkpoint of at least one record with one extension line 'chain HASH'")
    return lines[0], int(lines[1]), root


def note_signature_problem(note, name, public_key):
    """C2SP signed-note opening with the key (`name`, `public_key`): None if a signature by that
    key verifies (and every signature line is well formed), else what is wrong."""
    split = note.rfind("\n\n")
    if split < 0:
        return "note has no blank line before its signatures"
    text, block = note[:split + 1], note[split + 2:]
    if not block.endswith("\n"):
        return "note's signature block does not end with a newline"
    if any((ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F for c in text):
        return "note text contains control characters"
    lines = block[:-1].split("\n")
    if len(lines) > 100:
        return "note has more than 100 signature lines"
    found = False
    for line in lines:
        if not line.startswith("\u2014 "):
            return "signature line does not start with '\u2014 '"
        fields = line[2:].split(" ")
        raw = base64_decode(fields[1]) if len(fields) == 2 else None
        if raw is None or len(raw) <= 4:
            return "malformed signature line"
        if fields[0] != name or raw[:4] != note_key_hash(name, public_key):
            continue
        if len(raw) != 68 or not ed25519_verify(public_key, text.encode("utf-8"), raw[4:]):
            return "the signature by %s does not verify" % name
        found = True
    return None if found else "the note has no signature by key %s+%s" % (name, note_key_hash(name, public_key).hex())


def check_earlier_heads(log, ends, starts, end, name, schedule, records):
    """Step 8, earlier head lines: every complete head line before `end` (the end of the kept
    log), in file order, MUST be {"head":NOTE} with NOTE a signed head and its SIZE the number of
    event lines before it (the newest included); then each one but the newest (a head line equal
    to the newest is the newest), oldest first, MUST verify with the key of `schedule` (a
    KeySchedule) in force at its SIZE, and name the ledger and the root of the first SIZE event
    lines (`records`, the verified lines). Its chain line is not checked. Raises Failure."""
    heads, entries = [], 0
    for k in range(len(ends)):
        if ends[k] > end:
            break
        line = log[starts[k]:ends[k] - 1]
        if not is_head_line(line):
            entries += 1
            continue
        at = "the head line at byte offset %d (line %d)" % (starts[k], k + 1)
        try:
            note = head_line_note(line)
            origin, size, root = read_head_note(note)
        except HeadLineError as e:
            raise Failure(None, None, "%s is not a signed head: %s" % (at, e))
        if size != entries:
            raise Failure(None, entries, "%s covers %d entries but follows %d" % (at, size, entries))
        heads.append((note, origin, size, root))
    newest = heads[-1][0] if heads else None
    earlier = [h for h in heads if h[0] != newest]
    if not earlier:
        return
    roots = prefix_roots([leaf_hash(log[e.offset:e.offset + e.length]) for e in records], {h[2] for h in earlier})
    for note, origin, size, root in earlier:
        problem = note_signature_problem(note, name, schedule.in_force(size)[0])
        if problem is not None:
            raise Failure(None, size - 1, "the head kept after entry %d does not verify with the ledger's key: %s" % (size - 1, problem))
        if origin != name or roots.get(size) != root:
            raise Failure(None, size - 1, "the head kept after entry %d commits to root %s of '%s', but the log's first %d records hash to "
                          "another root" % (size - 1, root.hex(), origin, size))


def prefix_roots(leaves, sizes):
    """{size: RFC 6962 root of the first `size` leaf hashes} for each of `sizes` (1 ≤ size ≤
    len(leaves)), in one pass over the leaves."""
    roots, frontier = {}, []
    for n, h in enumerate(leaves):
        m = n
        while m & 1:
            h = node_hash(frontier.pop(), h)
            m >>= 1
        frontier.append(h)
        if n + 1 in sizes:
            root = frontier[-1]
            for x in reversed(frontier[:-1]):
                root = node_hash(x, root)
            roots[n + 1] = root
    return roots


def check_lines(log, ends, starts, count, public_key, catalog, head, version, derived=None):
    """Step 5 over the first `count` lines; `public_key` is the genesis key, from which the key
    schedule starts; `head` is (seq, hash) or None (no head check); `version` the genesis event's
    format version; `derived` is (lines.idx bytes, tree.hashes bytes or None) to check batch by
    batch, or None. Returns (replay, hash of the last line, whether the head's seq was seen,
    records, the StreamCheck, the KeySchedule the lines gave)."""
    replay = Replay(catalog)
    streams = StreamCheck(version)
    schedule = KeySchedule(public_key)
    previous_hash = ZERO_HASH
    head_seen = False
    records = []
    tree = DerivedTree()
    for i in range(count):
        number = i + 1
        try:
            e = decode_line(log[starts[i]:ends[i] - 1])
        except DecodeError as err:
            raise Failure(number, None, str(err))
        # Items 2 and 3: the key in force for the seq the event claims, with the rotations of the
        # lines before it (a retired key's signature is refused even where it verifies).
        problem = schedule.key_problem(e.kid, e.seq)
        if problem is not None:
            raise Failure(number, e.seq, problem)
        key, kid = schedule.in_force(e.seq)
        if not ed25519_verify(key, SIGNING_CONTEXT + e.body, e.signature):
            raise Failure(number, e.seq, "signature does not verify with the ledger's public key %s" % kid)
        if e.type == "catalog.published" and catalog_hash(e.document) != e.catalog:
            raise Failure(number, e.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
        if e.seq + 1 != number:
            raise Failure(number, e.seq, "line %d holds seq %d; expected seq %d (lines removed, inserted or reordered)" % (number, e.seq, number - 1))
        if e.prev != previous_hash:
            raise Failure(number, e.seq, "prev %s does not match the previous event's hash %s" % (e.prev, previous_hash))
        try:
            replay.apply(e)
        except Violation as v:
            raise Failure(number, v.seq, v.reason)
        e.line = number
        if e.type == "key.rotated":
            # Item 7a, after the replay's rule 5a: the new key signs from the next event on.
            schedule.admit(e, replay.genesis.ledger)
        elif e.type == "key.revoked":
            # Item 7a: a revocation of a retired key, its window and its count of hashes; whether
            # the hashes are the window's events is step 6a's (after the head is reached).
            schedule.admit_revocation(e)
        body_hash = sha256(e.body).hex()
        streams.check(e, number)
        if head is not None and e.seq == head[0]:
            if body_hash != head[1]:
                raise Failure(number, e.seq, "hash differs from the recorded head %s" % head[1])
            head_seen = True
        previous_hash = body_hash
        e.line, e.hash = number, body_hash
        e.offset, e.length = starts[i], ends[i] - 1 - starts[i]
        records.append(e)
        # The reference checks derived data per batch of up to 16384 lines, once every line of the
        # batch has passed (its batches also end at its 4 MiB reads; not part of the format).
        if derived is not None and (len(records) % DERIVED_BATCH == 0 or i == count - 1):
            tree.check(records[-(len(records) % DERIVED_BATCH or DERIVED_BATCH):], log, derived)
    return replay, previous_hash, head_seen, records, streams, schedule


# ---------------------------------------------------------------------------------------------
# Derived files beside the log: lines.idx and tree.hashes (Spec/ledger-format.md, The ledger
# folder; layouts in Spec/export-format.md, Files beside the log)
# ---------------------------------------------------------------------------------------------

INDEX_ENTRY = 32
DERIVED_BATCH = 16384
NO_SUBJECT = bytes(16)


def stored_hash_count(n):
    """tlog.StoredHashCount: how many hashes tree.hashes holds for n records: StoredHashIndex(0,
    n - 1) + 1, that is (n - 1) + (n - 1)/2 + (n - 1)/4 + ... + 1, plus one per subtree that record
    n - 1 completes (the trailing 1 bits of n - 1)."""
    if n == 0:
        return 0
    count, k = 1, n - 1
    while k:
        count += k
        k >>= 1
    k = n - 1
    while k & 1:
        count += 1
        k >>= 1
    return count


def index_entry(offset, length, subject):
    """One lines.idx entry: offset u64 LE, length u32 LE, 4 zero bytes, the subject's 16 bytes."""
    return offset.to_bytes(8, "little") + length.to_bytes(4, "little") + bytes(4) + subject


def subject_bytes(e):
    return bytes.fromhex(e.subject) if e.subject is not None else NO_SUBJECT


def leaf_hash(line):
    return sha256(b"\x00" + line)


def node_hash(left, right):
    return sha256(b"\x01" + left + right)


class DerivedTree:
    """What the derived files must hold, record by record: each lines.idx entry, and the stored
    hashes of tree.hashes (a record's leaf hash, then the subtrees it completes)."""

    def __init__(self):
        self.frontier = []
        self.tree_index = 0

    def expected_hashes(self, e, line):
        h = leaf_hash(line)
        out = [h]
        n = e.seq
        while n & 1:
            h = node_hash(self.frontier.pop(), h)
            out.append(h)
            n >>= 1
        self.frontier.append(h)
        return out

    def check(self, batch, log, derived):
        index, tree = derived
        expected = []
        for e in batch:
            stored = index[(e.line - 1) * INDEX_ENTRY:e.line * INDEX_ENTRY]
            # The 4 reserved bytes are not compared (the reference decodes offset, length, subject).
            if stored[:12] + stored[16:] != index_entry(e.offset, e.length, subject_bytes(e))[:12] + subject_bytes(e):
                raise Failure(e.line, e.seq, "the line index entry differs from the log (%s)" % DERIVED_REPAIR)
            expected += self.expected_hashes(e, log[e.offset:e.offset + e.length])
        if tree is None:  # behind the log: only lines.idx is checked
            return
        for k, h in enumerate(expected):
            i = self.tree_index + k
            if tree[32 * i:32 * i + 32] != h:
                raise Failure(None, None, "tree hash %d differs from the log (%s)" % (i, DERIVED_REPAIR))
        self.tree_index += len(expected)


def derive_files(log):
    """lines.idx and tree.hashes for every event line of `log`, as the reference writes them: one
    entry per event, at its byte offset in the file (head lines skipped, but counted in the
    offsets)."""
    index, tree, t = bytearray(), bytearray(), DerivedTree()
    offset = 0
    for raw in log.split(b"\n")[:-1]:
        if is_head_line(raw):
            offset += len(raw) + 1
            continue
        e = decode_line(raw)
        index += index_entry(offset, len(raw), subject_bytes(e))
        for h in t.expected_hashes(e, raw):
            tree += h
        offset += len(raw) + 1
    return bytes(index), bytes(tree)


class SubjectRecord:
    """One line of subjects.jsonl: the id, the salt and the signature (None in the unsigned form)."""

    def __init__(self, subject_id, salt, sig, line):
        self.id, self.salt, self.sig, self.line = subject_id, salt, sig, line


SUBJECT_LINE_FORM = '{"id":…,"salt":…[,"sig":…]}'


def decode_subject_line(line):
    """A subject record: canonical {"id":ID,"salt":HEX} or {"id":ID,"salt":HEX,"sig":SIG}, ID a
    string, HEX 32 and SIG 128 lowercase hex digits; None for anything else."""
    try:
        v = parse_canonical(line)
    except JSONError:
        return None
    if not isinstance(v, dict) or set(v) not in ({"id", "salt"}, {"id", "salt", "sig"}) or not isinstance(v["id"], str):
        return None
    salt = hex_decode(v["salt"], SALT_LENGTH)
    sig = hex_decode(v["sig"], 64) if "sig" in v else b""
    if salt is None or sig is None:
        return None
    return v["id"], salt, sig or None


def read_subject_records(folder, data=None):
    """subjects.jsonl -> {id: SubjectRecord}, in file order; a final line without a newline is
    ignored. Ids are compared byte for byte (Python compares str by code points, which for UTF-8
    is the same), so canonically equivalent spellings are different ids; an id that appears twice
    is refused. Signatures are not checked here (check_subject_record)."""
    if data is None:
        data = read_file(folder, "subjects.jsonl")
    records = {}
    # Zero bytes after the last line are reserved for appends; a line that holds a zero byte is
    # bytes of an append a crash cut short, never acknowledged (subjects.jsonl): both skipped.
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        if line and line.strip(b" ") == b"":
            continue  # an erased record's bytes, overwritten with spaces (an erasure cut short)
        if b"\0" in line:
            continue
        decoded = decode_subject_line(line)
        if decoded is None:
            raise ValueError("subjects.jsonl line %d is not %s" % (n, SUBJECT_LINE_FORM))
        if decoded[0] in records:
            raise ValueError("subjects.jsonl line %d repeats subject id '%s'" % (n, decoded[0]))
        records[decoded[0]] = SubjectRecord(decoded[0], decoded[1], decoded[2], n)
    return records


def read_subjects(folder, data=None):
    """subjects.jsonl -> {id: salt} (read_subject_records, signatures not checked)."""
    return {i: r.salt for i, r in read_subject_records(folder, data).items()}


def check_subject_record(record, public_key, version, place="subjects.jsonl"):
    """A record may be used only if its salt is 16 bytes and, in a format-2 ledger, its signature
    verifies over its id and salt with the ledger's key (`subjects.jsonl`, Using a record):
    `public_key`, any key of a list of them, or a KeySchedule (a record keeps the signature of the
    key in force when it was written, or of the key in force when a revocation signed it again).
    With a KeySchedule, as the reference's checkRecord: the newest key of the schedule whose
    signature verifies (periods scanned from the newest), and if a revocation of the schedule
    names that key, the record is refused with that revocation's seq. A format-1 ledger's records
    are not signed, and a 'sig' there is not checked. Raises ValueError with the reference's text."""
    if isinstance(public_key, KeySchedule):
        keys, revocations = [(key, kid) for _, key, kid in reversed(public_key.periods)], public_key.revocations
    else:
        keys = [(key, None) for key in ([public_key] if isinstance(public_key, bytes) else list(public_key))]
        revocations = []
    if len(record.salt) != SALT_LENGTH:
        raise ValueError("the subject record of %s in %s has a salt of %d bytes, not %d"
                         % (swift_quoted(record.id), place, len(record.salt), SALT_LENGTH))
    if version < 2:
        return
    message = subject_record_message(record.id, record.salt)
    signed_by = None if record.sig is None else next(
        ((key, kid) for key, kid in keys if ed25519_verify(key, message, record.sig)), None)
    if signed_by is None:
        raise ValueError("the subject record of %s in %s does not carry the ledger key's signature over its id and salt: "
                         "it was altered, swapped or made up" % (swift_quoted(record.id), place))
    # A revoked key's signature vouches for no record: its revocation signed again, with the key
    # in force, every record it could vouch for (Key rotation, Revocation: Records).
    revocation = next((r for r in revocations if r[1] == signed_by[1]), None)
    if revocation is not None:
        raise ValueError("the subject record of %s in %s is signed only by key %s, which the ledger revoked at seq %d: the "
                         "revocation signed every record it could vouch for again, so this one was written or changed with "
                         "the leaked key" % (swift_quoted(record.id), place, signed_by[1], revocation[0]))


SUBJECT_SHAPE_START, SUBJECT_SHAPE_END = b'{"id":"', b'"}'


def read_subject_record(data, subject_id):
    """One subject's record as a read of one subject finds it, without reading the others
    (Spec/ledger-format.md, subjects.jsonl, Reading one subject's record): the lines that start
    with {"id":ID,"salt":" (ID the id's canonical JSON string). None when no line does and every
    line is shaped like a record. Raises ValueError with the reference's text. The record is not
    checked here (check_subject_record)."""
    needle = b'{"id":' + serialize(subject_id) + b',"salt":"'
    found, malformed = None, None
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        if (line and line.strip(b" ") == b"") or b"\0" in line:
            continue  # an erased record's spaces, or an unfinished append's bytes
        shaped = (line.startswith(SUBJECT_SHAPE_START) and line.endswith(SUBJECT_SHAPE_END)
                  and len(line) >= len(SUBJECT_SHAPE_START) + len(SUBJECT_SHAPE_END) + 1)
        if malformed is None and not shaped:
            malformed = n
        if len(line) > len(needle) and line.startswith(needle):
            decoded = decode_subject_line(line)
            if decoded is None or decoded[0] != subject_id:
                raise ValueError("subjects.jsonl has a malformed line for subject id '%s'" % subject_id)
            if found is not None:
                raise ValueError("subjects.jsonl repeats subject id '%s'" % subject_id)
            found = SubjectRecord(decoded[0], decoded[1], decoded[2], n)
    if found is None and malformed is not None:
        raise ValueError("subjects.jsonl line %d is not a subject record, and subject id '%s' has none: it may have been that line"
                         % (malformed, subject_id))
    return found


# ---------------------------------------------------------------------------------------------
# Writing events (only for the derived test ledgers, re-signed with the vectors' test key)
# ---------------------------------------------------------------------------------------------

def signed_head_note(name, seed, size, root, chain_hash):
    """The signed head a writer records after a commit: the checkpoint note of the log's first
    `size` events (origin `name`, `root` their RFC 6962 root) with the 'chain HASH' line of event
    size - 1, signed with the key of `seed`."""
    text = "%s\n%d\n%s\nchain %s\n" % (name, size, base64.b64encode(root).decode(), chain_hash)
    signature = note_key_hash(name, ed25519_public_key(seed)) + ed25519_sign(seed, text.encode())
    return text + "\n\u2014 %s %s\n" % (name, base64.b64encode(signature).decode())


def sign_log(bodies, seed, heads_in_log=False):
    """Chains, links and signs event bodies (dicts) into ledger.jsonl bytes: 'prev' is set here
    and, in a body of format 2 ('v' 2), the stream members are what a writer writes (any it holds
    are replaced; a format-1 body gets none). Commits: a body read from a ledger ends one where it
    carried a root, a body made by a test (no 'prev') is a commit of its own, and the last body ends
    one. A body's member '@streams', {name: value, or None to leave the member out}, then overrides
    the stream members: for the derived cases that break a stream rule. Returns (log, head text):
    in the older layout (no head lines; the head text `SEQ HASH` for a `head` file), or, with
    `heads_in_log`, a log that holds its heads (after each commit that ends a command, and after
    the last body, a head line signed for the genesis body's ledger name) and None.

    Keys: `seed` signs until a body with the member '@next' (a key.rotated body: the new key's
    seed) hands over, as a writer rotating its key does: that body is signed with the key it
    retires, its 'publicKey' (unless it holds one) is the new key and its 'handover' the new key's
    signature over H (Key rotation; with its 'prev' as set here), or, if it has an '@handover',
    that seed's signature over H, or that hex text as it is; every later body and every head of a
    size past the rotation is signed with the new seed. A body's '@seed' signs that body alone
    instead. The 'kid' members are the bodies' own: a test sets them.

    Revocations: a body's '@attest' (FIRST, LAST) or (FIRST, LAST, EDIT) sets its 'attested' to
    the hashes (hex SHA-256 of BODY) of the bodies at positions FIRST ... LAST of those written
    before it (their seqs, in a log whose seqs are its positions), as a writer revoking a key
    re-attests them, or to EDIT(those hashes) (a list) for the cases that break the rule."""
    lines, prev, leaves, hashes = [], ZERO_HASH, [], []
    linker = StreamLinker()
    origin = bodies[0].get("ledger") if bodies else None
    for n, b in enumerate(bodies):
        ends_commit = n == len(bodies) - 1 or "streamRoot" in b or "prev" not in b
        b = {k: v for k, v in b.items() if k not in STREAM_MEMBERS}
        b["prev"] = prev
        override = b.pop("@streams", {})
        signer = b.pop("@seed", seed)
        successor, handover_seed = b.pop("@next", None), b.pop("@handover", None)
        attest = b.pop("@attest", None)
        if attest is not None:
            b["attested"] = hashes[attest[0]:attest[1] + 1]
            if len(attest) > 2:
                b["attested"] = attest[2](list(b["attested"]))
        if successor is not None:
            b.setdefault("publicKey", ed25519_public_key(successor).hex())
            message = handover_message(origin, prev, ed25519_public_key(seed), bytes.fromhex(b["publicKey"]))
            b["handover"] = (handover_seed if isinstance(handover_seed, str)
                             else ed25519_sign(handover_seed or successor, message).hex())
        links = linker.link(b, ends_commit)
        if b.get("v") == 2:
            b.update(links)
        for name, value in override.items():
            if value is None:
                b.pop(name, None)
            else:
                b[name] = value
        body = serialize(b)
        line = LINE_PREFIX + body + SIG_PREFIX + ed25519_sign(signer, SIGNING_CONTEXT + body).hex().encode() + b'"}'
        if successor is not None:
            seed = successor  # in force from the next event on, and for every head after this one
        lines.append(line + b"\n")
        prev = sha256(body).hex()
        hashes.append(prev)
        linker.sealed(b)
        leaves.append(leaf_hash(line))
        ends_command = all(_is_int(b.get(k)) for k in ("seq", "cmd", "cmdSize")) and b["seq"] == b["cmd"] + b["cmdSize"] - 1
        if heads_in_log and ((ends_commit and ends_command) or n == len(bodies) - 1):
            lines.append(head_line(signed_head_note(origin, seed, len(leaves), tree_root(leaves), prev)) + b"\n")
    if heads_in_log:
        return b"".join(lines), None
    return b"".join(lines), "%d %s" % (bodies[-1]["seq"], prev)


def catalog_version(value, changes=None, edit=None):
    """A copy of the catalogue `value` with policy versions changed ({(feature key, consent code):
    version}) and, optionally, `edit(copy)` applied."""
    out = json.loads(json.dumps(value))
    for f in out["features"]:
        for c in f["consents"]:
            if (f["key"], c["code"]) in (changes or {}):
                c["version"] = changes[(f["key"], c["code"])]
    if edit:
        edit(out)
    return out


def notices_of(value):
    """The notices a writer puts in a catalog.published event: one per consent of the normalised
    catalogue, in catalogue order, sha256 = SHA-256 of the UTF-8 bytes of the consent's link."""
    catalog, _ = decode_catalog(value)
    return [{"consent": c["code"], "feature": f["code"], "sha256": sha256(c["link"].encode("utf-8")).hex(), "version": c["version"]}
            for f in catalog.ordered for c in f["consents"]]


def publish_body(seq, value, at, kid, actor="vector-generator", version=2):
    """A catalog.published event body (without 'prev' and stream members) for the catalogue
    `value`, as written."""
    catalog, _ = decode_catalog(value)
    return {"v": version, "seq": seq, "at": at, "actor": actor, "cmd": seq, "cmdSize": 1, "kid": kid, "type": "catalog.published",
            "catalog": catalog_hash(catalog), "document": catalog.value, "notices": notices_of(value)}


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, name, detail=""):
        if ok:
            self.passed += 1
            print("ok    " + name + ("  (" + detail + ")" if detail else ""))
        else:
            self.failed += 1
            print("FAIL  " + name + (": " + detail if detail else ""))

    def run(self, name, fn):
        """fn() returns (ok, detail); an exception is a failure."""
        try:
            ok, detail = fn()
        except Exception as exc:  # noqa: BLE001 - report any crash as a failed check
            ok, detail = False, "%s: %s" % (type(exc).__name__, exc)
        self.check(ok, name, detail)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 0 if self.failed == 0 else 1


def describe_torn(torn):
    if torn is None:
        return "no torn tail"
    return "torn tail ignored: %d bytes at offset %d, %d complete line(s)" % (torn[1], torn[0], torn[2])


def self_tests(checks):
    # RFC 8032 section 7.1, TEST 1 (empty message).
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    sig = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    checks.check(ed25519_public_key(seed) == public and ed25519_sign(seed, b"") == sig and ed25519_verify(public, b"", sig)
                 and not ed25519_verify(public, b"x", sig), "ed25519: RFC 8032 7.1 TEST 1 (key, signature, verify, reject)")
    s_plus_l = sig[:32] + int.to_bytes(int.from_bytes(sig[32:], "little") + L, 32, "little")
    checks.check(not ed25519_verify(public, b"", s_plus_l), "ed25519: S + L (malleated signature) is rejected")
    checks.check(all(_mul(8, _decompress(int.to_bytes(y, 32, "little"))) [0] % P == 0 for y in (_Y8, P - _Y8)),
                 "ed25519: the order-8 y coordinates of the small-order list are of order 8")

    accept = [b'{"a":1,"b":[true,false,null],"c":"x"}', b'"\\u001f\\n\\"\\\\/\xc3\xa9"', b"-9007199254740991",
              b'{"\xc3\xa9":1,"\xf0\x9f\x98\x80":2,"\xef\xbc\xa1":3}', b'"\x7f"', b"0", b"[]", b"{}"]
    for text in accept:
        def ok(text=text):
            v = parse_canonical(text)
            return serialize(v) == text, "round-trips"
        label = "".join(c if 0x20 <= ord(c) < 0x7F else "<U+%04X>" % ord(c) for c in text.decode("utf-8"))
        checks.run("jcs: accepts canonical %s" % label, ok)
    reject = [
        (b'{ "a":1}', "whitespace"), (b'{"a":1}\n', "trailing newline"), (b'{"b":1,"a":2}', "unsorted keys"),
        (b'{"a":1,"a":1}', "duplicate keys"), (b"1.0", "fraction"), (b"1e3", "exponent"), (b"01", "leading zero"),
        (b"-0", "minus zero"), (b"9007199254740992", "integer beyond 2^53-1"), (b'"\\/"', "escaped slash"),
        (b'"\\u0041"', "needless \\u escape"), (b'"\\u000a"', "\\u for a short escape"), (b'"\\u001F"', "uppercase hex"),
        (b'"\\ud83d\\ude00"', "escaped non-control character"), (b'"\x01"', "raw control character"),
        (b'"\xc3"', "invalid UTF-8"), (b'"\xed\xa0\x80"', "UTF-8-encoded surrogate"), (b"True", "bad literal"),
        (b'{"\xef\xbc\xa1":1,"\xf0\x9f\x98\x80":2}', "keys in code-point rather than UTF-16 order"),
    ]
    for text, why in reject:
        def rejected(text=text):
            try:
                parse_canonical(text)
            except JSONError as e:
                return True, e.message
            return False, "accepted"
        checks.run("jcs: rejects %s" % why, rejected)
    checks.check(parse_time("2026-01-15T09:00:00.000Z") == 1768467600000 and parse_time("0000-02-29T00:00:00.000Z") is not None
                 and all(parse_time(t) is None for t in ("2026-01-15T09:00:00Z", "2026-01-15T09:00:00.0000Z", "2026-01-15t09:00:00.000Z",
                                                          "2026-02-29T00:00:00.000Z", "2026-01-15T09:00:60.000Z", "2026-01-15T09:00:00.000+00:00")),
                 "time: canonical spelling accepted, every other spelling rejected")

    def link(url):
        consent = {"code": "required", "link": url, "name": {"en": "R"}, "required": True, "version": "1.0"}
        try:
            decode_catalog({"features": [{"code": 1, "consents": [consent], "key": "f", "name": {"en": "F"}}]})
        except CatalogError:
            return False
        return True
    checks.check(link("https://\u00e9") and not link("https://a") and not link("ftp://example.org"),
                 "catalogue: a link's minimum length of 10 is counted in UTF-8 bytes ('https://\\u00e9' is 10 bytes, 9 characters)")
    secretbox_self_tests(checks)


# NaCl's own test of crypto_secretbox (tests/secretbox.c; libsodium's test/default/secretbox.c):
# key, nonce, a message of 131 bytes, and the box (tag, then ciphertext).
SECRETBOX_KAT = (
    "1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389",
    "69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37",
    "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a1ac728d45e6c61296cdc3c01233561f41db66cce"
    "314adb310e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a838f21af1fde048977eb48f59ffd4924ca1c60902e52f0a089bc76897040"
    "e082f937763848645e0705",
    "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531a1186ac0dfc17c98dce87b4da7f011"
    "ec48c97271d2c20f9b928fe2270d6fb863d51738b48eeee314a7cc8ab932164548e526ae90224368517acfeabd6bb3732bc0e9da99832b61ca01b6de"
    "56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74e355a5",
)


def secretbox_self_tests(checks):
    """XSalsa20-Poly1305 (sealed evidence): known answers, refusals, and, where PyNaCl happens to
    be installed, agreement with libsodium on random inputs (skipped silently otherwise: this file
    needs nothing but the standard library)."""
    # RFC 8439 2.5.2: Poly1305 alone.
    checks.check(poly1305(bytes.fromhex("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b"),
                          b"Cryptographic Forum Research Group").hex() == "a8061dc1305136c6c22b8baf0c0127a9",
                 "secretbox: Poly1305, RFC 8439 2.5.2")
    key, nonce, message, box = (bytes.fromhex(x) for x in SECRETBOX_KAT)
    checks.check(secretbox_seal(message, nonce, key) == box and secretbox_open(box, nonce, key) == message,
                 "secretbox: NaCl's crypto_secretbox test (131 bytes): sealed to its box byte for byte, and opened")

    def flipped(data, i):
        return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
    refused = [("a flipped byte of the tag", flipped(box, 0), nonce, key), ("a flipped byte of the ciphertext", flipped(box, 100), nonce, key),
               ("a flipped byte of the nonce", box, flipped(nonce, 23), key), ("another key", box, nonce, flipped(key, 31)),
               ("a box cut short", box[:-1], nonce, key), ("a box shorter than a tag", box[:15], nonce, key)]
    for what, b, n, k in refused:
        checks.check(secretbox_open(b, n, k) is None, "secretbox: refuses %s" % what)
    checks.check(secretbox_open(secretbox_seal(b"", nonce, key), nonce, key) == b"" and len(secretbox_seal(b"", nonce, key)) == 16,
                 "secretbox: an empty message seals to a tag alone, which opens")
    try:
        import nacl.secret  # noqa: F401 - optional: only for the cross-check
    except ImportError:
        return
    import random
    rng = random.Random(20260115)
    lengths = (0, 1, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 511, 512)
    agree = True
    for n in lengths:
        k, iv, m = (bytes(rng.getrandbits(8) for _ in range(size)) for size in (32, 24, n))
        theirs = nacl.secret.SecretBox(k).encrypt(m, iv).ciphertext
        agree = agree and secretbox_seal(m, iv, k) == theirs and secretbox_open(theirs, iv, k) == m \
            and nacl.secret.SecretBox(k).decrypt(secretbox_seal(m, iv, k), iv) == m
    checks.check(agree, "secretbox: agrees with PyNaCl (libsodium) on random keys, nonces and messages of %d lengths from 0 to 512 bytes"
                 % len(lengths))


def check_vectors(checks, here):
    folder = os.path.join(here, "tiny-ledger")
    with open(os.path.join(here, "expected.json"), "rb") as f:
        expected_bytes = f.read()
    expected = json.loads(expected_bytes)
    checks.check(expected_bytes.endswith(b"\n") and serialize(parse_canonical(expected_bytes[:-1])) == expected_bytes[:-1],
                 "expected.json is canonical JSON followed by a newline")

    seed = hex_decode(trimmed_text(read_file(folder, "secret.key")), 32)
    public = hex_decode(trimmed_text(read_file(folder, "public.key")), 32)
    checks.check(seed == bytes(range(32)) and ed25519_public_key(seed) == public,
                 "secret.key is the test seed 00..1f and derives public.key", public.hex() if public else "")
    for name in ("public.key", "secret.key"):
        data = read_file(folder, name)
        checks.check(len(data) == 65 and data.endswith(b"\n") and hex_decode(data[:-1].decode(), 32) is not None,
                     "%s is 64 lowercase hex digits and a newline" % name)

    try:
        report = verify_folder(folder)
        checks.check(True, "tiny-ledger verifies", "%d events, %d subjects, head seq %d, %s" % (
            report.events, len(report.replay.subjects), report.head[0], describe_torn(report.torn)))
    except Failure as f:
        checks.check(False, "tiny-ledger verifies", str(f))
        return

    checks.check(report.public_key.hex() == expected["publicKey"], "publicKey matches expected.json")
    checks.check(report.key_id == expected["keyID"] == key_id(public), "keyID = SHA-256(public key)[:8] matches expected.json", report.key_id)
    catalog_hash = sha256(read_file(folder, "catalog.json")).hex()
    checks.check(catalog_hash == expected["catalogSha256"] == report.records[0].catalog,
                 "catalogSha256 = SHA-256(catalog.json) = genesis 'catalog'", catalog_hash)
    checks.check(report.ledger_name == expected["ledgerName"], "ledgerName matches expected.json", report.ledger_name)
    checks.check(len(report.records) == len(expected["events"]) == report.events, "event count matches expected.json",
                 str(report.events))
    for e, x in zip(report.records, expected["events"]):
        message = SIGNING_CONTEXT + e.body
        checks.check(
            x["line"] == e.line and x["seq"] == e.seq and x["type"] == e.type and x["prev"] == e.prev
            and x["bodySha256"] == sha256(e.body).hex() and x["signedMessageSha256"] == sha256(message).hex(),
            "line %d (seq %d, %s): bodySha256, signedMessageSha256, prev, seq, type" % (e.line, e.seq, e.type))
        checks.check(ed25519_sign(seed, message) == e.signature,
                     "line %d: signature is reproduced by signing with the test key" % e.line)
    seed = hex_decode(trimmed_text(read_file(folder, "secret.key")), 32)

    def signed_head(size, root, chain_hash):
        return signed_head_note(report.ledger_name, seed, size, root, chain_hash)

    # The log holds its heads: a head line after each commit's event lines. `file_lines` are all
    # its lines, `events` its event lines (each without its 0x0A).
    log = read_file(folder, "ledger.jsonl")
    file_lines = log.split(b"\n")[:-1]
    events = event_lines(log)
    newest = max(k for k, line in enumerate(file_lines) if is_head_line(line))
    head_note = parse_canonical(file_lines[newest])["head"]
    leaves = [leaf_hash(line) for line in events]
    checks.check(not os.path.exists(os.path.join(folder, "head")) and newest == len(file_lines) - 1
                 and head_note == signed_head(len(leaves), tree_root(leaves), expected["head"]["hash"])
                 and report.heads_in_log and report.head == report.recorded_head == (expected["head"]["seq"], expected["head"]["hash"]),
                 "tiny-ledger has no head file; its last line is the newest head line, {\"head\":NOTE} with NOTE the signed head of "
                 "the tiny ledger (reproduced with the test key), and matches expected.json", head_note.split("\n")[3])

    def every_head_line():
        # One head line after each commit (after each event that carries a root), its size the
        # log's size after the commit, its bytes the canonical JSON of the note signed then.
        sizes, count = [], 0
        for line in file_lines:
            if not is_head_line(line):
                count += 1
                continue
            e = report.records[count - 1]
            if line != head_line(signed_head(count, tree_root(leaves[:count]), e.hash)) or e.stream_root is None:
                return False, "the head line after %d events" % count
            sizes.append(count)
        commits = [e.seq + 1 for e in report.records if e.stream_root is not None]
        return sizes == commits and len(file_lines) == len(events) + len(sizes), "head lines of sizes %s" % sizes
    checks.run("ledger.jsonl: a head line after each commit's events (the genesis event's included), of the log's size after "
               "the commit, reproduced byte for byte with the test key (JCS, the em dash as UTF-8)", every_head_line)

    def with_heads(change):
        """The tiny log with its head lines' notes changed by `change(size, note)` (None: the line
        removed)."""
        out = []
        for line in file_lines:
            if is_head_line(line):
                note = parse_canonical(line)["head"]
                changed = change(int(note.split("\n")[1]), note)
                if changed is None:
                    continue
                line = head_line(changed)
            out.append(line + b"\n")
        return b"".join(out)

    def newest_head(note):
        """The tiny log with its newest head line's note replaced (None: the line removed)."""
        return with_heads(lambda size, old: note if size == len(events) else old)

    def head_verdict(data, phrase, line=None, seq=None, head=None):
        def run():
            try:
                verify_folder(folder, log=data, head_text=head)
            except Failure as f:
                return phrase in f.reason and (f.line, f.seq) == (line, seq), str(f)
            return False, "verified"
        return run

    def flip_digit(note):
        """The note with one base64 digit of its signature changed."""
        return note[:-6] + ("A" if note[-6] != "A" else "B") + note[-5:]
    flipped = flip_digit(head_note)
    checks.run("a newest head line whose signature is changed (one base64 digit) fails (step 3)",
               head_verdict(newest_head(flipped), "the signed head does not verify with the ledger's key"))
    raw = base64.b64decode(head_note.split(" ")[-1])
    one_byte = head_note[:head_note.rindex(" ") + 1] + base64.b64encode(raw[:30] + bytes([raw[30] ^ 0x01]) + raw[31:]).decode() + "\n"
    checks.run("a newest head line with one flipped byte in its signature fails (step 3)",
               head_verdict(newest_head(one_byte), "the signed head does not verify with the ledger's key"))
    checks.run("a newest head line re-signed over another root fails (step 3)",
               head_verdict(newest_head(signed_head(len(leaves), tree_root(leaves[:-1]), expected["head"]["hash"])),
                            "the signed head commits to root"))
    checks.run("a newest head line re-signed over another chain hash fails at line 10 (the recorded head)",
               head_verdict(newest_head(signed_head(len(leaves), tree_root(leaves), report.records[8].hash)),
                            "hash differs from the recorded head", 10, 9))
    checks.run("a newest head line holding an unsigned 'SEQ HASH' fails: not a signed head",
               head_verdict(newest_head("%d %s\n" % (expected["head"]["seq"], expected["head"]["hash"])), "is not a signed head"))
    checks.run("a newest head line that is not {\"head\":NOTE} fails: not a signed head",
               head_verdict(log[:-1 - len(file_lines[-1])] + serialize({"head": head_note, "size": 10}) + b"\n",
                            'is not a signed head: the head line is not {"head":NOTE}'))
    checks.run("a newest head line in non-canonical JSON fails: not a signed head",
               head_verdict(log[:-1 - len(file_lines[-1])] + b'{"head": ' + file_lines[-1][8:] + b"\n",
                            "is not a signed head: the head line is not canonical JSON"))
    checks.run("a newest head line signed for another ledger name fails: not a signed head of this ledger",
               head_verdict(newest_head(head_note.replace(report.ledger_name, "other.example/ledger")), "is not a signed head of this ledger"))

    # Earlier head lines (every head line before the newest) are checked after the event lines,
    # like recorded checkpoints (step 8): first the form and place of each, in file order; then
    # the signature, the origin and the root of each, oldest first.
    def head_at(size):
        """The byte offset and file line number (1-based) of the tiny log's head line of `size`."""
        k = next(k for k, line in enumerate(file_lines) if is_head_line(line) and parse_canonical(line)["head"].split("\n")[1] == str(size))
        return sum(len(line) + 1 for line in file_lines[:k]), k + 1

    def earlier(size, note):
        """The tiny log with its head line of `size` holding `note` instead."""
        return with_heads(lambda n, old: note if n == size else old)

    def as_line(data, size, replacement):
        """`data` with the head line of `size` replaced by the bytes `replacement`."""
        old = head_line(signed_head(size, tree_root(leaves[:size]), report.records[size - 1].hash))
        assert data.count(old + b"\n") == 1
        return data.replace(old + b"\n", replacement + b"\n")
    offset6, line6 = head_at(6)
    offset8, line8 = head_at(8)
    checks.run("an earlier head line that is only '{\"hx' fails: not a signed head (no line, no seq)",
               head_verdict(as_line(log, 8, b'{"hx'), "the head line at byte offset %d (line %d) is not a signed head: the head line is not "
                            "canonical JSON" % (offset8, line8)))
    checks.run("an earlier head line that is only '{\"h' (3 bytes, still a head line) fails: not a signed head",
               head_verdict(as_line(log, 8, b'{"h'), "(line %d) is not a signed head" % line8))
    checks.run("an earlier head line {\"head\":\"x\"} fails: not a signed head (no signature block)",
               head_verdict(earlier(8, "x"), "(line %d) is not a signed head: the head has no signature block" % line8))
    checks.run("an earlier head line with a member besides 'head' fails: not a signed head",
               head_verdict(as_line(log, 8, serialize({"head": signed_head(8, tree_root(leaves[:8]), report.records[7].hash), "size": 8})),
                            'is not a signed head: the head line is not {"head":NOTE}'))
    checks.run("an earlier head line whose signature is changed (one base64 digit) fails: the head kept after entry 5, seq 5",
               head_verdict(with_heads(lambda size, note: flip_digit(note) if size == 6 else note),
                            "the head kept after entry 5 does not verify with the ledger's key", seq=5))
    checks.run("an earlier head line re-signed over another root fails: the head kept after entry 5 commits to root, seq 5",
               head_verdict(earlier(6, signed_head(6, tree_root(leaves[:5]), report.records[5].hash)),
                            "the head kept after entry 5 commits to root %s of '%s', but the log's first 6 records hash to another root"
                            % (tree_root(leaves[:5]).hex(), report.ledger_name), seq=5))
    other_origin_text = "other.example/ledger\n6\n%s\nchain %s\n" % (base64.b64encode(tree_root(leaves[:6])).decode(), report.records[5].hash)
    other_origin = other_origin_text + "\n\u2014 %s %s\n" % (report.ledger_name, base64.b64encode(
        note_key_hash(report.ledger_name, report.public_key) + ed25519_sign(seed, other_origin_text.encode())).decode())
    checks.run("an earlier head line of another origin, signed by the ledger's key, fails: it commits to the root of another log",
               head_verdict(earlier(6, other_origin), "the head kept after entry 5 commits to root %s of 'other.example/ledger'"
                            % tree_root(leaves[:6]).hex(), seq=5))
    checks.run("an earlier head line signed for another ledger name fails: it does not verify with the ledger's key",
               head_verdict(earlier(6, head_note.replace(report.ledger_name, "other.example/ledger").replace("\n10\n", "\n6\n")),
                            "the head kept after entry 5 does not verify with the ledger's key: the note has no signature by key", seq=5))
    checks.run("an earlier head line of size 5 where 6 events precede it fails: covers 5 entries but follows 6, seq 6",
               head_verdict(earlier(6, signed_head(5, tree_root(leaves[:5]), report.records[4].hash)),
                            "the head line at byte offset %d (line %d) covers 5 entries but follows 6" % (offset6, line6), seq=6))
    checks.run("the head lines of sizes 6 and 8 swapped fail at the first: covers 8 entries but follows 6, seq 6",
               head_verdict(as_line(as_line(log, 6, b'{"h6'), 8, file_lines[line6 - 1]).replace(b'{"h6\n', file_lines[line8 - 1] + b"\n"),
                            "(line %d) covers 8 entries but follows 6" % line6, seq=6))
    checks.run("an earlier head line with an unchecked chain line (another event's hash) verifies",
               lambda: (verify_folder(folder, log=earlier(6, signed_head(6, tree_root(leaves[:6]), report.records[4].hash))).events == 10,
                        "10 events"))
    checks.run("a bad signature on the head of size 6 and '{\"hx' for the head of size 8: the form is checked first (line %d)" % line8,
               head_verdict(as_line(with_heads(lambda size, note: flip_digit(note) if size == 6 else note), 8, b'{"hx'),
                            "(line %d) is not a signed head" % line8))
    checks.run("a bad signature on the heads of sizes 6 and 8: the oldest is named (entry 5)",
               head_verdict(with_heads(lambda size, note: flip_digit(note) if size in (6, 8) else note),
                            "the head kept after entry 5 does not verify", seq=5))
    bad_line_3 = file_lines[3][:-10] + (b"1" if file_lines[3][-10:-9] == b"0" else b"0") + file_lines[3][-9:]
    checks.run("a bad earlier head line and a bad signature on event line 3 (seq 2): the event line is named first",
               head_verdict(as_line(log, 8, b'{"hx').replace(file_lines[3], bad_line_3), "signature does not verify", 3, 2))
    checks.run("the newest head line repeated (a commit of no entries) verifies: the copy before it is the newest's own head",
               lambda: (verify_folder(folder, log=log + file_lines[-1] + b"\n").events == 10, "10 events"))

    # The log file's reserve (The log file): zero bytes after the content are no part of it; a
    # zero byte inside the newest commit marks a write into the reserve a crash cut short.
    reserve = b"\0" * (32768 - len(log) % 32768)
    checks.run("the log followed by a reserve of zero bytes up to a multiple of 32,768 verifies as without it",
               lambda: (lambda r: (r.events == 10 and r.torn is None, "%d events, torn %r" % (r.events, r.torn)))(verify_folder(folder, log=log + reserve)))
    last_commit = log.rfind(b"\n", 0, log.rfind(b"\n", 0, len(log) - 1)) + 1  # the newest commit's last event line
    holed = log[:last_commit + 30] + b"\0" * 20 + log[last_commit + 50:] + reserve
    checks.run("a hole of zero bytes in the newest commit's last event line: that commit is torn (9 events, torn from its first line)",
               lambda: (lambda r: (r.events == 9 and r.torn is not None and r.torn[0] == last_commit,
                                   "%d events, torn %r" % (r.events, r.torn)))(verify_folder(folder, log=holed)))
    head_holed = log[:len(log) - 40] + b"\0" * 20 + log[len(log) - 20:] + reserve
    checks.run("a hole of zero bytes in the newest head line: the commit's events are kept, the head line is torn",
               lambda: (lambda r: (r.events == 10 and r.torn is not None and r.torn[0] == log.rfind(b"\n", 0, len(log) - 1) + 1,
                                   "%d events, torn %r" % (r.events, r.torn)))(verify_folder(folder, log=head_holed)))
    # A large commit's head line written again (Writing, step 5), a crash leaving a hole in it:
    # the commit and its first head line stand, the repeated line is torn.
    repeat_holed = log + file_lines[-1][:10] + b"\0" * 20 + file_lines[-1][30:] + b"\n" + reserve
    checks.run("a hole of zero bytes in the newest head line written again: the commit stands, the repetition is torn",
               lambda: (lambda r: (r.events == 10 and r.torn is not None and r.torn[0] == len(log),
                                   "%d events, torn %r" % (r.events, r.torn)))(verify_folder(folder, log=repeat_holed)))

    # The older layout (a `head` file; no head lines, every line an event line) stays readable:
    # the tiny ledger in that layout, its log the event lines and its head the newest note.
    older_log = b"".join(line + b"\n" for line in events)
    checks.run("older layout: the tiny ledger's event lines with the newest head's note as the head file verify",
               lambda: (verify_folder(folder, log=older_log, head_text=head_note).events == 10, "10 events"))
    checks.run("older layout: a head file whose signature is changed fails (step 3)",
               head_verdict(older_log, "the signed head does not verify with the ledger's key", head=flipped))
    checks.run("older layout: a head file re-signed over another root fails (step 3)",
               head_verdict(older_log, "the signed head commits to root",
                            head=signed_head(len(leaves), tree_root(leaves[:-1]), expected["head"]["hash"])))
    checks.run("older layout: an older unsigned head 'SEQ HASH' still verifies",
               lambda: (verify_folder(folder, log=older_log, head_text="%d %s\n" % (expected["head"]["seq"], expected["head"]["hash"])).events
                        == len(leaves), "ok"))
    checks.run("older layout: a head line in the log is a malformed event (line 2)",
               head_verdict(file_lines[0] + b"\n" + file_lines[1] + b"\n" + older_log[len(file_lines[0]) + 1:],
                            'line does not start with {"body":', 2, head=head_note))

    salts = read_subjects(folder)
    refs_in_log = set(report.replay.subjects)
    checks.check(sorted(salts) == [s["id"] for s in expected["subjects"]], "subjects.jsonl lists exactly the expected ids",
                 ", ".join(sorted(salts)))
    for s in expected["subjects"]:
        salt = bytes.fromhex(s["salt"])
        ref = subject_ref(s["id"], salt)
        checks.check(ref == s["ref"] and salts.get(s["id"]) == salt and ref in refs_in_log,
                     "subject %s: ref from id and salt matches, salt in subjects.jsonl, ref in the log" % s["id"], ref)

    subjects_bytes = read_file(folder, "subjects.jsonl")
    subject_lines = subjects_bytes.split(b"\n")[:-1]

    def signed_record(subject_id, salt):
        """The line a format-2 writer writes for a new subject."""
        sig = ed25519_sign(seed, subject_record_message(subject_id, salt))
        return serialize({"id": subject_id, "salt": salt.hex(), "sig": sig.hex()}) + b"\n"

    def unsigned(line):
        v = parse_canonical(line)
        del v["sig"]
        return serialize(v)

    def records_signed():
        records = read_subject_records(folder)
        lines_again = b"".join(signed_record(i, r.salt) for i, r in records.items())
        message = subject_record_message("alice", records["alice"].salt)
        return (lines_again == subjects_bytes and all(r.sig is not None for r in records.values())
                and subject_lines[0][:-len(b',"sig":"') - 130] + b"}" == unsigned(subject_lines[0]) == message[len(SUBJECT_RECORD_CONTEXT):]
                and sha256(message).hex() == "223e3fd3c324b1195363f6192c8506e973fbf294d3d10c9b4000f1ca0f914e1f"), sha256(message).hex()
    checks.run("subjects.jsonl: every record is signed with the test key over \"consentledger-subject-record-v1\\n\" || "
               "{\"id\":ID,\"salt\":HEX} (the line without its sig), reproduced byte for byte", records_signed)

    def repeated_id():
        try:
            read_subjects(folder, subjects_bytes + subject_lines[0] + b"\n")
        except ValueError as e:
            return str(e) == "subjects.jsonl line 3 repeats subject id 'alice'", str(e)
        return False, "accepted"
    checks.run("subjects.jsonl with a repeated id is refused", repeated_id)

    # The records file's reserve (subjects.jsonl): zero bytes after the lines are no record, and
    # a line holding a zero byte (an append into the reserve a crash cut short) is skipped.
    records_reserve = b"\0" * (32768 - len(subjects_bytes) % 32768)
    checks.run("subjects.jsonl followed by a reserve of zero bytes verifies as without it",
               lambda: (lambda r: (r.events == 10, "%d events" % r.events))(verify_folder(folder, subjects=subjects_bytes + records_reserve)))
    torn_append = subject_lines[0][:12] + b"\0" * 40 + subject_lines[0][52:] + b"\n" + records_reserve
    checks.run("subjects.jsonl with a line holding zero bytes after its records (an unfinished append): skipped, verifies",
               lambda: (lambda r: (r.events == 10, "%d events" % r.events))(verify_folder(folder, subjects=subjects_bytes + torn_append)))
    checks.run("one subject's record: a line holding zero bytes is skipped, not a malformed line",
               lambda: (lambda r: (r is not None and r.salt == salts["bob"], repr(r)))(read_subject_record(subjects_bytes + torn_append, "bob")))

    def salts_swapped(lines):
        records = [parse_canonical(line) for line in lines]
        records[0]["salt"], records[1]["salt"] = records[1]["salt"], records[0]["salt"]
        return b"".join(serialize(r) + b"\n" for r in records)

    no_signature = "does not carry the ledger key's signature over its id and salt: it was altered, swapped or made up"

    def step_10(data, expect, log=None, head=None):
        """Verification with subjects.jsonl `data`: `expect` None to verify, else the reason it
        must end with (no line, no seq)."""
        def run():
            try:
                r = verify_folder(folder, log=log, head_text=head, subjects=data)
            except Failure as f:
                return expect is not None and f.reason.endswith(expect) and f.line is None and f.seq is None, str(f)
            return expect is None, "verified, %d events, format %d" % (r.events, r.version)
        return run

    place = "subjects.jsonl of %s" % folder
    checks.run("subjects.jsonl with two salts swapped fails verification (step 10: alice's record is not signed over its id and salt)",
               step_10(salts_swapped(subject_lines), 'the subject record of "alice" in %s %s' % (place, no_signature)))
    checks.run("subjects.jsonl with alice's record without its sig fails verification (step 10, format 2)",
               step_10(unsigned(subject_lines[0]) + b"\n" + subject_lines[1] + b"\n", 'the subject record of "alice" in %s %s' % (place, no_signature)))
    checks.run("subjects.jsonl with bob's sig on alice's record fails verification (step 10)",
               step_10(subject_lines[0][:-130] + subject_lines[1][-130:] + b"\n" + subject_lines[1] + b"\n", no_signature))
    checks.run("subjects.jsonl with an id changed (alice to alicf, sig kept) fails verification (step 10)",
               step_10(subjects_bytes.replace(b'"alice"', b'"alicf"'), 'the subject record of "alicf" in %s %s' % (place, no_signature)))
    checks.run("subjects.jsonl without one subject's record fails verification (step 10: the pseudonym in the log has no record)",
               step_10(subject_lines[1] + b"\n", "1 pseudonym(s) in the log have no subject record in subjects.jsonl whose id and salt hash "
                       "to them (%s): subject records were altered, swapped or removed" % subject_ref("alice", salts["alice"])))
    checks.run("a signed subject record with no events (a command that failed after saving its salt) verifies",
               step_10(subjects_bytes + signed_record("nobody-yet", b"\x07" * 16), None))
    checks.run("an unsigned subject record with no events, made up, fails verification (step 10, format 2)",
               step_10(subjects_bytes + serialize({"id": "nobody-yet", "salt": "07" * 16}) + b"\n",
                       'the subject record of "nobody-yet" in %s %s' % (place, no_signature)))
    checks.run("a subject record whose sig is uppercase hex is a malformed line",
               step_10(subject_lines[0][:-6] + subject_lines[0][-6:-5].upper() + subject_lines[0][-5:] + b"\n" + subject_lines[1] + b"\n",
                       'subjects.jsonl line 1 is not {"id":…,"salt":…[,"sig":…]}'))

    # Format 1: records are unsigned, and a 'sig' is not checked.
    fmt1, head1 = sign_log([dict(parse_canonical(e.body), v=1) for e in report.records], seed, heads_in_log=True)
    unsigned_lines = b"".join(unsigned(line) + b"\n" for line in subject_lines)
    checks.run("format 1: the tiny ledger with unsigned subject records verifies",
               step_10(unsigned_lines, None, fmt1, head1))
    checks.run("format 1: the tiny ledger with the signed subject records verifies (a sig is not checked)",
               step_10(subjects_bytes, None, fmt1, head1))
    checks.run("format 1: a record with a sig that is not the key's verifies (a sig is not checked)",
               step_10(subject_lines[0][:-130] + subject_lines[1][-130:] + b"\n" + subject_lines[1] + b"\n", None, fmt1, head1))
    checks.run("format 1: two salts swapped fail verification only at the pseudonyms (step 10)",
               step_10(salts_swapped([unsigned(line) for line in subject_lines]),
                       "2 pseudonym(s) in the log have no subject record in subjects.jsonl whose id and salt hash to them (%s): "
                       "subject records were altered, swapped or removed" % ", ".join(sorted(refs_in_log)), fmt1, head1))

    # Reading one subject's record, as status, history, export and prove-state do.
    def one(data, subject_id, expect):
        """read_subject_record then check_subject_record (format 2): `expect` the salt's owner (an
        id of the vectors), None for no record, or the text of the failure."""
        def run():
            try:
                record = read_subject_record(data, subject_id)
                if record is not None:
                    check_subject_record(record, report.public_key, 2)
            except ValueError as e:
                return str(e) == expect, str(e)
            got = None if record is None else next((i for i in salts if salts[i] == record.salt), record.salt.hex())
            return got == expect, "salt of %s" % got if record else "no record"
        return run

    record_of = 'the subject record of "%s" in subjects.jsonl ' + no_signature
    cut = subject_lines[0] + b"\n" + subject_lines[1][:-1] + b"\n"
    garbled = subject_lines[0] + b"\n" + subject_lines[1][1:] + b"\n"
    for name, data, subject_id, expect in [
        ("alice's record is found and its signature verifies", subjects_bytes, "alice", "alice"),
        ("with two salts swapped, alice's record is refused", salts_swapped(subject_lines), "alice", record_of % "alice"),
        ("with two salts swapped, bob's record is refused", salts_swapped(subject_lines), "bob", record_of % "bob"),
        ("with alice's line repeated, a read of alice fails", subjects_bytes + subject_lines[0] + b"\n", "alice",
         "subjects.jsonl repeats subject id 'alice'"),
        ("alice's line repeated is not seen by a read of bob", subjects_bytes + subject_lines[0] + b"\n", "bob", "bob"),
        ("alice's line with a salt of 30 hex digits: a malformed line for alice",
         subject_lines[0].replace(b'01"', b'"') + b"\n", "alice", "subjects.jsonl has a malformed line for subject id 'alice'"),
        ("bob's line without its last byte: a malformed line for bob", cut, "bob",
         "subjects.jsonl has a malformed line for subject id 'bob'"),
        ("bob's line without its first byte: a read of alice reads only alice's", garbled, "alice", "alice"),
        ("bob's line without its first byte: a read of bob names the line that may have been his", garbled, "bob",
         "subjects.jsonl line 2 is not a subject record, and subject id 'bob' has none: it may have been that line"),
        ("alice's record removed: a read of alice finds none (an unknown subject; only verify notices)",
         subject_lines[1] + b"\n", "alice", None),
        ("alice's id changed to alicf: a read of alice finds none (an unknown subject; only verify notices)",
         subjects_bytes.replace(b'"alice"', b'"alicf"'), "alice", None),
        ("alice's id changed to alicf: a read of alicf refuses the record",
         subjects_bytes.replace(b'"alice"', b'"alicf"'), "alicf", record_of % "alicf"),
        ("a partial last line is ignored", subjects_bytes + b'{"id":"carol","salt":"', "carol", None),
    ]:
        checks.run("one subject's record: %s" % name, one(data, subject_id, expect))

    def equivalent_spellings():
        composed, decomposed = "Jos\u00e9", "Jose\u0301"
        data = b"".join(serialize({"id": i, "salt": salt.hex()}) + b"\n" for i, salt in ((composed, b"\x03" * 16), (decomposed, b"\x04" * 16)))
        got = read_subjects(folder, data + b'{"id":"partial')
        refs = {subject_ref(i, got[i]) for i in (composed, decomposed)}
        return len(got) == 2 and len(refs) == 2, ", ".join(sorted(refs))
    checks.run("subjects.jsonl: NFC and NFD spellings of one name are two ids, two references; a partial last line is ignored",
               equivalent_spellings)

    def quoted_ids():
        # The reference names a record's id as Swift's String.debugDescription writes it.
        cases = {"it's \"q\" \\": '"it\\\'s \\"q\\" \\\\"', "bell\x07": '"bell\\u{07}"', "\u0301x": '"\\u{0301}x"',
                 "e\u0301": '"e\u0301"', "\u540d\u524d": '"\u540d\u524d"'}
        got = {i: swift_quoted(i) for i in cases}
        return got == cases, " ".join(got.values())
    checks.run("a subject record's id in a failure is quoted as the reference quotes it", quoted_ids)

    for subject in ("alice", "bob"):
        state = report.replay.subjects.get(subject_ref(subject, salts[subject]), SubjectState())
        got = {f["key"]: {"active": state.is_active(f),
                          "given": [c["code"] for c in f["consents"] if state.is_given(f["code"], c["code"])]}
               for f in report.catalog_order}
        checks.check(got == expected["finalState"][subject], "finalState of %s matches expected.json" % subject,
                     json.dumps(got, sort_keys=True))

    for t in expected["tampered"]:
        log = read_file(os.path.join(here, "tampered"), t["file"])
        try:
            verify_folder(folder, log=log)
            checks.check(False, "tampered/%s fails at line %d" % (t["file"], t["line"]), "it verified")
        except Failure as f:
            checks.check(f.line == t["line"] and t["reason"] in f.reason,
                         "tampered/%s fails at line %d" % (t["file"], t["line"]), str(f))

    # Torn tails in a log that holds its heads. `lines` are the tiny log's lines with their
    # 0x0A: 0 seq 0, 1 head (size 1), 2-6 seq 1-5, 7 head (6), 8-9 seq 6-7, 10 head (8), 11 seq 8,
    # 12 head (9), 13 seq 9, 14 head (10). `torn` is the next commit (seq 10-12, alice's timeline
    # withdrawn with its cascades) as a writer signs it with the test key, and `commit_head` its
    # head line. A commit whose event lines all reached the disk is kept even without its head
    # line (every event is signed): the log is then ahead of its head. Only an unfinished commit
    # (and any partial line) is torn.
    log = read_file(folder, "ledger.jsonl")
    lines = log.splitlines(keepends=True)
    bodies = [parse_canonical(e.body) for e in report.records]
    alice = bodies[1]["subject"]
    withdrawal = [dict(v=2, seq=10 + i, at="2026-01-15T09:00:05.000Z", actor="self", cmd=10, cmdSize=3, kid=report.key_id,
                       type="consent.revoked", subject=alice, feature=2, consent=consent, reason="withdrawn" if i == 0 else "cascade",
                       **({} if i == 0 else {"cause": 10})) for i, consent in enumerate(("required", "optional-a", "optional-b"))]
    after = sign_log(bodies + withdrawal, seed, heads_in_log=True)[0].splitlines(keepends=True)
    torn, commit_head = after[15:18], after[18]

    def tail(data, count, torn_tail, head_seq=None, **options):
        """Verifies with `data` as the log: `count` events, the recorded head at seq `head_seq`
        (count - 1 unless given: a log ahead of its head), and the torn tail (offset, bytes,
        complete lines) or None."""
        def run():
            r = verify_folder(folder, log=data, **options)
            return (r.events == count and r.torn == torn_tail and r.head[0] == count - 1
                    and r.recorded_head[0] == (count - 1 if head_seq is None else head_seq),
                    "%d events, recorded head at seq %d, %s" % (r.events, r.recorded_head[0], describe_torn(r.torn)))
        return run
    checks.check(after[:15] == lines and len(after) == 19 and is_head_line(commit_head),
                 "a writer's next commit (seq 10-12) and its head line, signed with the test key, after the tiny ledger's lines")
    checks.run("the tiny ledger with that commit and its head line verifies: 13 events", tail(b"".join(after), 13, None))
    checks.run("a partial last line is a torn tail: ignored, ledger still verifies",
               tail(log + events[1][:40], 10, (len(log), 40, 0)))
    checks.run("a torn commit after the newest head line (two complete event lines and a partial line) is ignored: 10 events",
               tail(log + torn[0] + torn[1] + torn[2][:60], 10, (len(log), len(torn[0]) + len(torn[1]) + 60, 2)))
    checks.run("a whole commit after the newest head line, its head line cut mid-line, is kept (13 events, head at seq 9); "
               "the partial head line is the torn tail (0 complete lines)",
               tail(log + b"".join(torn) + commit_head[:40], 13, (len(log) + len(b"".join(torn)), 40, 0), 9))
    checks.run("a whole commit after the newest head line without its head line is kept: 13 events, the log ahead of its head (seq 9)",
               tail(log + b"".join(torn), 13, None, 9))
    # The commit after that one (seq 13-15, alice's consents of feature 2 given again).
    regrant = [dict(v=2, seq=13 + i, at="2026-01-15T09:00:06.000Z", actor="self", cmd=13, cmdSize=3, kid=report.key_id,
                    type="consent.given", subject=alice, feature=2, consent=consent, version="1.0")
               for i, consent in enumerate(("required", "optional-a", "optional-b"))]
    after2 = sign_log(bodies + withdrawal + regrant, seed, heads_in_log=True)[0].splitlines(keepends=True)
    following = after2[19:22]
    checks.check(after2[:19] == after and len(after2) == 23, "a writer's commit after that (seq 13-15) and its head line")
    checks.run("a whole commit kept without its head line, then two complete lines and a partial line of the next: 13 events, "
               "the head at seq 9, 2 complete torn lines",
               tail(log + b"".join(torn) + following[0] + following[1] + following[2][:60], 13,
                    (len(log) + len(b"".join(torn)), len(following[0]) + len(following[1]) + 60, 2), 9))
    checks.run("two whole commits after the newest head line, both head lines missing: both kept, 16 events, the head at seq 9",
               tail(log + b"".join(torn) + b"".join(following), 16, None, 9))
    checks.run("the log cut after the head line of size 9 (a commit boundary): a validly signed older state, 9 events",
               tail(b"".join(lines[:13]), 9, None))
    checks.run("the newest head line alone removed: its commit's event (seq 9) is kept, 10 events, the head at seq 8",
               tail(b"".join(lines[:14]), 10, None, 8))
    checks.run("the head lines of sizes 9 and 10 removed: both commits are kept, 10 events, the head at seq 7",
               tail(b"".join(lines[:12]) + lines[13], 10, None, 7))
    checks.run("the head lines of sizes 8, 9 and 10 removed: 10 events, the head at seq 5 (the last kept commit's end is seq 9)",
               tail(b"".join(lines[:10]) + lines[11] + lines[13], 10, None, 5))
    checks.run("complete lines of an unfinished command after the head line of size 6 are a torn tail: 6 events",
               tail(b"".join(lines[:9]), 6, (len(b"".join(lines[:8])), len(lines[8]), 1)))
    checks.run("complete commands of an unfinished commit after the head line of size 1 are a torn tail: 1 event",
               tail(b"".join(lines[:4]), 1, (len(b"".join(lines[:2])), len(lines[2]) + len(lines[3]), 2)))
    fmt1_lines = sign_log([dict(b, v=1) for b in bodies], seed, heads_in_log=True)[0].splitlines(keepends=True)
    checks.run("format 1: the same complete commands after the head line of size 1 end commits (no streamRoot in format 1): "
               "kept, 3 events, the head at seq 0",
               tail(b"".join(fmt1_lines[:4]), 3, None, 0, derived=False))
    checks.run("format 1: a complete command and an unfinished one after the head line of size 6: 8 events kept, 1 torn line",
               tail(b"".join(fmt1_lines[:9]) + fmt1_lines[9], 8, None, 5, derived=False)
               if len(fmt1_lines) > 9 and not is_head_line(fmt1_lines[9]) else lambda: (False, "unexpected format-1 log"))

    def tail_failure(data, phrase, line=None, seq=None):
        def run():
            try:
                r = verify_folder(folder, log=data)
            except Failure as f:
                return phrase in f.reason and (f.line, f.seq) == (line, seq), str(f)
            return False, "verified, %d events" % r.events
        return run

    def end_failure(data, phrase, seq=None):
        """Step 4 alone (find_end_in_log, as the operations that do not scan see it): it fails
        with `phrase`, no line and `seq`."""
        def run():
            ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
            try:
                find_end_in_log(data, ends, [0] + ends[:-1], report.ledger_name)
            except Failure as f:
                return phrase in f.reason and (f.line, f.seq) == (None, seq), str(f)
            return False, "found the end"
        return run
    # A line after the newest head line that is not an event fails step 4; verification then
    # scans every event line of the file (step 4's first bad entry), and that line is the first
    # bad one: its own decode failure, its place among the event lines, no seq.
    checks.run("step 4: a garbage complete line after the newest head line is neither an event nor a head line",
               end_failure(log + b"garbage\n", "the line at byte offset %d (line 16), after the log's newest head line, is neither an "
                           "event nor a head line: line is too short to be an event (7 bytes)" % len(log)))
    checks.run("a garbage complete line after the newest head line fails verification as the first bad entry: line 11, no seq",
               tail_failure(log + b"garbage\n", "line is too short to be an event (7 bytes)", 11))
    checks.run("step 4: a malformed event after an event after the newest head line is neither an event nor a head line",
               end_failure(log + torn[0] + torn[1].replace(b'"v":2', b'"v":3'), "(line 17), after the log's newest head line, is "
                           "neither an event nor a head line: member 'v' must be 1 or 2"))
    checks.run("a malformed event after an event after the newest head line fails verification at line 12, no seq",
               tail_failure(log + torn[0] + torn[1].replace(b'"v":2', b'"v":3'), "member 'v' must be 1 or 2", 12))
    checks.run("step 4: an event after the newest head line that skips a seq (11 after 9): the events are not contiguous, seq 11",
               end_failure(log + torn[1], "the events after the newest head line are not contiguous: seq 11 at byte offset %d" % len(log), 11))
    checks.run("step 4: the last event repeated after the newest head line: not contiguous, seq 9",
               end_failure(log + lines[13], "the events after the newest head line are not contiguous: seq 9", 9))
    checks.run("an event after the newest head line that skips a seq fails verification as the first bad entry: line 11 holds seq 11",
               tail_failure(log + torn[1], "line 11 holds seq 11; expected seq 10", 11, 11))
    checks.run("the last event repeated after the newest head line fails verification: line 11 holds seq 9",
               tail_failure(log + lines[13], "line 11 holds seq 9; expected seq 10", 11, 9))
    flipped_torn = torn[1][:-10] + (b"1" if torn[1][-10:-9] == b"0" else b"0") + torn[1][-9:]
    checks.run("a kept commit (its head line missing) is verified like any line: a bad signature on its seq 11 fails at line 12",
               tail_failure(log + torn[0] + flipped_torn + torn[2], "signature does not verify", 12, 11))
    checks.run("a bad signature in an unfinished commit after the newest head line is a torn tail, not verified: 10 events",
               tail(log + torn[0] + flipped_torn, 10, (len(log), len(torn[0]) + len(flipped_torn), 2)))
    checks.run("the newest head line moved before the last event and a bad signature after it: the first bad entry (line 12, seq 11)",
               tail_failure(b"".join(lines[:13]) + lines[14] + lines[13] + torn[0] + flipped_torn,
                            "signature does not verify", 12, 11))
    bad_signature = lines[3][:-10] + (b"1" if lines[3][-10:-9] == b"0" else b"0") + lines[3][-9:]
    checks.run("a garbage line after the newest head line and a bad signature on line 3 (seq 2): the first bad line is named",
               tail_failure(b"".join(lines[:3]) + bad_signature + b"".join(lines[4:]) + b"garbage\n", "signature does not verify", 3, 2))
    checks.run("the newest head line moved before the last event fails: it follows the event of seq 8",
               tail_failure(b"".join(lines[:13]) + lines[14] + lines[13],
                            "the head line at byte offset %d covers 10 entries, but follows the event of seq 8" % len(b"".join(lines[:13])),
                            seq=8))
    checks.run("the head line of size 9 repeated after seq 9 as the newest fails: it follows the event of seq 9",
               tail_failure(b"".join(lines[:14]) + lines[12], "covers 9 entries, but follows the event of seq 9", seq=9))
    checks.run("the head line of size 9 repeated after the head line of size 10: the event before it (the head line of size 10 "
               "skipped) is seq 9",
               tail_failure(log + lines[12], "covers 9 entries, but follows the event of seq 9", seq=9))
    checks.run("no head line at all fails: the log holds no head line",
               tail_failure(older_log, "the log holds no head line"))
    checks.run("no head line and a bad signature on line 3 (seq 2): the first bad line is named",
               tail_failure(b"".join(line for line in lines[:3] if not is_head_line(line)) + bad_signature
                            + b"".join(line for line in lines[4:] if not is_head_line(line)), "signature does not verify", 3, 2))
    checks.run("a log that begins with a head line fails at line 1, seq 0",
               tail_failure(lines[1] + lines[0] + b"".join(lines[2:]), "the log begins with a head line, not the genesis event", 1, 0))

    # Torn tails and the head file in the older layout: the walk over complete commands and
    # streamRoot, a head behind the log, a log behind the head.
    old = [line + b"\n" for line in events]

    def torn_partial_older():
        r = verify_folder(folder, log=older_log + old[1][:40], head_text=head_note)
        return r.events == 10 and r.torn == (len(older_log), 40, 0), describe_torn(r.torn)
    checks.run("older layout: a partial last line is a torn tail: ignored, ledger still verifies", torn_partial_older)

    def torn_command():
        r = verify_folder(folder, log=b"".join(old[:7]), head_text="5 " + report.records[5].hash)
        return r.events == 6 and r.torn == (len(b"".join(old[:6])), len(old[6]), 1), describe_torn(r.torn)
    checks.run("older layout: complete lines of an unfinished command are a torn tail (head at seq 5)", torn_command)

    def torn_commit():
        # Lines 2-6 are one commit of two commands; only line 6 carries streamRoot. Keep the
        # first command whole: it ends a command, not the commit.
        r = verify_folder(folder, log=b"".join(old[:3]), head_text="0 " + report.records[0].hash)
        return r.events == 1 and r.torn == (len(old[0]), len(old[1]) + len(old[2]), 2), describe_torn(r.torn)
    checks.run("older layout: complete commands of an unfinished commit are a torn tail (format 2; head at seq 0)", torn_commit)

    def truncated():
        try:
            verify_folder(folder, log=b"".join(old[:7]), head_text=head_note)
        except Failure as f:
            return f.line == 7 and "truncated log" in f.reason, str(f)
        return False, "it verified"
    checks.run("older layout: head at seq 9 with the log cut inside the command at seq 6: truncation found at line 7", truncated)

    def ahead():
        r = verify_folder(folder, log=older_log, head_text="5 " + report.records[5].hash)
        return r.events == 10, "log runs ahead of head; accepted"
    checks.run("older layout: head behind the log (crash between log sync and head write) is accepted", ahead)

    def wrong_head():
        try:
            verify_folder(folder, log=older_log, head_text="5 " + report.records[4].hash)
        except Failure as f:
            return f.line == 6 and "recorded head" in f.reason, str(f)
        return False, "it verified"
    checks.run("older layout: head naming seq 5 with another hash fails at line 6", wrong_head)


def check_resigned(checks, here):
    """Ledgers that are validly signed with the test key and chained, but break a rule of the
    spec. They are derived here, not by the reference implementation, so they test this verifier
    against the spec's replay rules rather than against the vectors."""
    folder = os.path.join(here, "tiny-ledger")
    seed = bytes(range(32))
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in event_lines(read_file(folder, "ledger.jsonl"))]
    bob = bodies[8]["subject"]

    def build(change, heads_in_log=False):
        events = [dict(b) for b in bodies]
        events = change(events) or events
        return sign_log(events, seed, heads_in_log)

    def edit(i, **members):
        def change(events):
            events[i].update(members)
        return change

    def drop_cascade(events):
        events[6]["cmdSize"] = 1
        del events[7]
        for n, b in enumerate(events):
            b["seq"] = n
            b["cmd"] = n if b["cmdSize"] == 1 else b["cmd"]

    def optional_first(events):
        events[1]["consent"], events[2]["consent"] = "optional-a", "required"

    def second_genesis(events):
        g = dict(bodies[0])
        g.update(seq=9, cmd=9, at=events[9]["at"])
        events[9] = g

    def withdrawn_not_cascade(events):
        events[7]["reason"] = "withdrawn"
        del events[7]["cause"]

    def remove(i, member):
        def change(events):
            del events[i][member]
        return change

    def remove_all(i, *members):
        def change(events):
            for member in members:
                events[i].pop(member, None)
        return change

    def effective_from(*seqs, at):
        def change(events):
            for i in seqs:
                events[i]["effectiveAt"] = at
        return change

    def alice_regrant(effective):
        """Appends a command (seq 10) in which alice gives medication-management's required
        consent again, after its withdrawal at 09:00:02, with the given effective time."""
        def change(events):
            b = {k: v for k, v in bodies[1].items() if k not in ("prev", "streamPrev", "streamRoot")}
            b.update(seq=len(events), cmd=len(events), cmdSize=1, at="2026-01-15T09:00:05.000Z", effectiveAt=effective)
            events.append(b)
        return change

    alice = bodies[1]["subject"]

    def alice_timeline(*revocations, **members):
        """Appends one command (seq 10 on) withdrawing alice's timeline consents, in the order
        given: (consent, reason, cause or None)."""
        def change(events):
            first = len(events)
            for i, (consent, reason, cause) in enumerate(revocations):
                b = dict(v=2, seq=first + i, at="2026-01-15T09:00:05.000Z", actor="self", cmd=first, cmdSize=len(revocations),
                         kid=bodies[0]["kid"], type="consent.revoked", subject=alice, feature=2, consent=consent, reason=reason)
                if cause is not None:
                    b["cause"] = cause
                b.update(members)
                events.append(b)
        return change

    def actors(first, second):
        def change(events):
            events[6]["actor"], events[7]["actor"] = first, second
        return change

    def in_clear(i, reference):
        """Event i with its reference in clear ('evidence', as older ledgers hold it), not sealed."""
        def change(events):
            events[i].pop("sealedEvidence", None)
            events[i]["evidence"] = reference
        return change

    def streams(i, **members):
        """Event i's stream members, as given, instead of what a writer writes (None: left out)."""
        return edit(i, **{"@streams": members})

    def format_1(*except_for, **members):
        """The whole ledger in format 1 (v 1, no stream members), but for the events named: of
        format 2; and `members` on the last event (stream members as given)."""
        def change(events):
            for n, b in enumerate(events):
                b["v"] = 2 if n in except_for else 1
            if members:
                events[-1]["@streams"] = members
        return change

    cases = [
        ("unchanged, re-signed", None, None, None),
        ("cascade naming a cause outside its command", edit(7, cause=5), 8, "cascade names cause seq 5"),
        ("required consent withdrawn without its cascade", drop_cascade, 7, "still given after a required consent of its feature was withdrawn"),
        ("cascade written as a plain withdrawal", withdrawn_not_cascade, 8, "it must be a cascade (rule R4)"),
        ("second event of a command at another time", edit(2, at="2026-01-15T09:00:01.500Z"), 3, "events of one command share one time and one actor"),
        ("second event of a command by another actor", edit(7, actor="dr.house"), 8, "events of one command share one time and one actor"),
        ("actor spelt NFC, then NFD, in one command (compared byte for byte)",
         actors("dr.jos\u00e9", "dr.jose\u0301"), 8, "events of one command share one time and one actor"),
        ("a command about two features", edit(5, feature=1), 6, "a command is about one feature; this event is about feature 1, the command's first about 2"),
        ("optional consent withdrawn, then the required one and a cascade, in one command (allowed)",
         alice_timeline(("optional-a", "withdrawn", None), ("required", "withdrawn", None), ("optional-b", "cascade", 11)), None, None),
        ("cascade citing its command's withdrawal of an optional consent",
         alice_timeline(("optional-a", "withdrawn", None), ("required", "withdrawn", None), ("optional-b", "cascade", 10)), 13, "cascade names cause seq 10"),
        ("cascade citing itself", alice_timeline(("required", "withdrawn", None), ("optional-a", "cascade", 11), ("optional-b", "cascade", 10)),
         12, "cascade names cause seq 11"),
        ("optional consent withdrawn after a cascade in one command",
         alice_timeline(("required", "withdrawn", None), ("optional-a", "cascade", 10), ("optional-b", "withdrawn", None)), 13, "it must be a cascade (rule R4)"),
        ("subject reference in uppercase hex", edit(9, subject=bob.upper()), 10, "member 'subject' is not 32 lowercase hex digits"),
        ("subject reference of 30 hex digits", edit(9, subject=bob[:30]), 10, "member 'subject' is not 32 lowercase hex digits"),
        ("subject reference that is an id, not a hash", edit(9, subject="bob"), 10, "member 'subject' is not 32 lowercase hex digits"),
        ("a member that is not part of the format", edit(9, note="x"), 10, "member 'note' is not part of the ledger format"),
        ("a member missing", remove(9, "version"), 10, "member 'version' is missing from a 'consent.given' event"),
        ("a cascade without its cause", remove(7, "cause"), 8, "member 'cause' is missing from a 'consent.revoked' event"),
        ("a withdrawal with a cause", edit(6, cause=5), 7, "member 'cause' does not belong to a 'consent.revoked' event"),
        ("an integer member written as a string", edit(9, feature="2"), 10, "member 'feature' must be an integer"),
        ("a string member written as an integer", edit(9, actor=7), 10, "member 'actor' must be a string"),
        ("a negative feature code", edit(9, feature=-2), 10, "member 'feature' is missing or negative"),
        ("an unknown revocation reason", edit(6, reason="expired"), 7, "unknown revocation reason 'expired'"),
        ("time going backwards", edit(8, at="2026-01-15T09:00:01.999Z"), 9, "earlier than the previous"),
        ("policy version not the catalogue's", edit(1, version="2.0"), 2, "policy version '2.0'"),
        ("optional consent before the required one", optional_first, 2, "given while"),
        ("second event of a command for another subject", edit(2, subject=bob), 3, "is incomplete"),
        ("consent given twice", edit(9, consent="required"), 10, "given twice"),
        ("revoking a withheld consent", edit(6, consent="optional-b"), 7, "revoked while it is withheld"),
        ("unknown consent", edit(9, consent="optional-c"), 10, "unknown consent"),
        ("a key id that is not the ledger's", edit(3, kid="0000000000000000"), 4, "not the ledger's key"),
        ("a member that does not belong to the type", edit(8, cause=1), 9, "does not belong"),
        # A grant's evidence (seq 9 carries all four members, its reference sealed).
        ("an unknown channel", edit(9, channel="fax"), 10, "member 'channel' must be one of app, portal, paper, phone, clinician"),
        ("a notice language that is not a BCP 47 tag", edit(9, noticeLanguage="de_DE"), 10, "not a BCP 47 language tag"),
        ("an empty evidence reference in clear", in_clear(9, ""), 10, "the evidence reference is empty"),
        ("the reference in clear, as older ledgers hold it (still read: allowed)", in_clear(9, "scan-0042"), None, None),
        ("an effective time after the recorded time", edit(9, effectiveAt="2026-01-15T09:00:04.001Z"), 10, "effective time after the time it was recorded"),
        ("an effective time before the subject's previous event about the feature", edit(9, effectiveAt="2026-01-15T09:00:02.999Z"), 10,
         "effective time before the subject's previous event about 'timeline'"),
        ("an effective time that is not a canonical time", edit(9, effectiveAt="2026-01-15T09:00:03Z"), 10, "member 'effectiveAt' is not a canonical UTC time"),
        ("evidence on a withdrawal", edit(6, evidence="scan-1"), 7, "member 'evidence' does not belong to a 'consent.revoked' event"),
        ("an effective time on a cascade", edit(7, effectiveAt="2026-01-15T09:00:02.000Z"), 8,
         "member 'effectiveAt' does not belong to a 'consent.revoked' event"),
        ("a channel on the genesis event", edit(0, channel="app"), 1, "member 'channel' does not belong to a 'ledger.created' event"),
        ("an effective time equal to the recorded time (allowed)", edit(9, effectiveAt="2026-01-15T09:00:04.000Z"), None, None),
        ("an effective time equal to the time of the subject's previous event about the feature (allowed)",
         edit(9, effectiveAt="2026-01-15T09:00:03.000Z"), None, None),
        ("no evidence at all on the last grant (allowed)", remove_all(9, "effectiveAt", "channel", "noticeLanguage", "sealedEvidence"), None, None),
        ("bob's first grant effective before alice's events about the feature (another subject's events do not count: allowed)",
         edit(8, effectiveAt="2026-01-15T09:00:00.500Z"), None, None),
        ("a command of three grants effective before the subject's earlier command about another feature, and before "
         "the recorded time of its own first event (neither counts: allowed)", effective_from(3, 4, 5, at="2026-01-15T09:00:00.500Z"), None, None),
        ("a re-grant effective between the subject's two earlier commands about the feature (only the latest counts)",
         alice_regrant("2026-01-15T09:00:01.500Z"), 11, "consent 'required' of 'medication-management' has an effective time before "
         "the subject's previous event about 'medication-management'"),
        ("a re-grant effective at the subject's latest earlier command about the feature (allowed)",
         alice_regrant("2026-01-15T09:00:02.000Z"), None, None),
        ("genesis pinning another catalogue", edit(0, catalog="00" * 32), 1, "catalogue's SHA-256 differs"),
        ("a second genesis event", second_genesis, 10, "genesis event can only be the first"),
        ("a command that does not start at its own seq", edit(9, cmd=8, cmdSize=2), 10, "must start at its own seq"),
        # Streams and the subject map (format 2).
        ("an event naming an earlier event of its stream than the newest", streams(6, streamPrev=4), 7,
         "the event names seq 4 as its stream's previous event, but that is seq 5: an event of this stream was left out or added"),
        ("an event naming another subject's event as its stream's previous one", streams(9, streamPrev=7), 10,
         "the event names seq 7 as its stream's previous event, but that is seq 8"),
        ("a subject's first event naming a previous event", streams(8, streamPrev=7), 9,
         "the event names seq 7 as its stream's previous event, but that is none: an event of this stream was left out or added"),
        ("an event without its stream link", streams(9, streamPrev=None), 10,
         "the event names no event as its stream's previous event, but that is seq 8"),
        ("a wrong subject-map root", streams(8, streamRoot="00" * 32), 9,
         "the event signs subject-map root %s, but the events so far give %s" % ("00" * 32, bodies[8]["streamRoot"])),
        ("a command's last event signing the root before the command", streams(9, streamRoot=bodies[8]["streamRoot"]), 10,
         "the event signs subject-map root %s, but the events so far give %s" % (bodies[8]["streamRoot"], bodies[9]["streamRoot"])),
        ("the subject-map root on a command's first event", streams(1, streamRoot="ab" * 32), 2,
         "member 'streamRoot' belongs only on the last event of a command"),
        ("a root on the last event of a command inside a commit, the map's root there (allowed)",
         streams(2, streamRoot=map_node(map_node(map_leaf(LEDGER_STREAM, 0), map_leaf(bytes.fromhex(alice), 2)), EMPTY_HASH).hex()), None, None),
        ("a wrong root on the last event of a command inside a commit", streams(2, streamRoot="00" * 32), 3,
         "the event signs subject-map root %s, but the events so far give" % ("00" * 32)),
        ("no root on a commit's last event inside the log (the next root covers both commits: allowed)",
         streams(8, streamRoot=None), None, None),
        # Recovery takes a last commit without its root for one a crash cut short (Torn tails,
        # step 4): with the head at seq 9 the log then looks truncated.
        ("no root on the log's last event", streams(9, streamRoot=None), 10,
         "acknowledged events are missing (truncated log)"),
        ("'streamPrev' naming the event itself", streams(9, streamPrev=9), 10, "member 'streamPrev' must be an earlier sequence number than 9"),
        ("a negative 'streamPrev'", streams(9, streamPrev=-1), 10, "member 'streamPrev' must be an earlier sequence number than 9"),
        ("'streamPrev' written as a string", streams(9, streamPrev="8"), 10, "member 'streamPrev' must be an integer"),
        ("'streamRoot' in uppercase hex", streams(9, streamRoot=bodies[9]["streamRoot"].upper()), 10,
         "member 'streamRoot' is not 64 lowercase hex digits"),
        ("'streamRoot' of 62 hex digits", streams(9, streamRoot=bodies[9]["streamRoot"][:62]), 10,
         "member 'streamRoot' is not 64 lowercase hex digits"),
        ("'streamPrevHash', a member of no format", streams(9, streamPrevHash=bodies[9]["prev"]), 10,
         "member 'streamPrevHash' is not part of the ledger format"),
        ("a format-1 event in a format-2 ledger", edit(9, v=1), 10,
         "the event is of format version 1, but the ledger's genesis event is of version 2"),
        ("the tiny ledger in format 1 (no stream members; still read)", format_1(), None, None),
        ("a format-2 event in a format-1 ledger", format_1(9), 10,
         "the event is of format version 2, but the ledger's genesis event is of version 1"),
        ("stream members in a format-1 event", format_1(streamPrev=8), 10,
         "member 'streamPrev' does not belong to a 'consent.given' event"),
    ] + policy_cases(bodies, read_file(folder, "catalog.json")) + [
        ("malformed last line and a bad signature on line 3: the first bad line is named,", None, 3, "signature does not verify"),
        ("malformed last line alone", None, 10, "member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)"),
        ("malformed head and a bad signature on line 3: the first bad line is named,", None, 3, "signature does not verify"),
    ]
    # Each case in both layouts: the older one (a head file 'SEQ HASH', every line an event line)
    # and a log that holds its heads (a signed head line after each commit). Where the outcome
    # differs, `in_log` says how: a last commit without its root has its head line there, so
    # it is not taken for a torn tail, and step 9 refuses it.
    in_log = {"no root on the log's last event": (10, "the log's last event carries no subject-map root (every commit ends with one)")}
    checks.check(build(lambda events: None, True)[0] == read_file(folder, "ledger.jsonl"),
                 "re-signed with head lines: the tiny ledger's events, re-signed with their head lines, are "
                 "tiny-ledger/ledger.jsonl byte for byte")
    for heads_in_log in (False, True):
        for name, change, line, reason in cases:
            if heads_in_log and name in in_log:
                line, reason = in_log[name]

            def run(name=name, change=change, line=line, reason=reason, heads_in_log=heads_in_log):
                log, head = build(change or (lambda events: None), heads_in_log)
                if name.startswith("malformed"):
                    lines = log.split(b"\n")
                    numbers = [k for k, data in enumerate(lines[:-1]) if not is_head_line(data)]  # the event lines
                    if "line 3" in name:
                        k = numbers[2]
                        lines[k] = lines[k][:-9] + (b"1" if lines[k][-9:-8] == b"0" else b"0") + lines[k][-8:]
                    if "last line" in name:
                        lines[numbers[9]] = lines[numbers[9]].replace(b'"v":2', b'"v":3')
                    if "head" in name and heads_in_log:
                        note = parse_canonical(lines[-2])["head"]
                        lines[-2] = head_line("9  " + note.split("\n")[3][6:])
                    elif "head" in name:
                        head = "9  " + head.split(" ")[1]
                    log = b"\n".join(lines)
                try:
                    r = verify_folder(folder, log=log, head_text=head)
                except Failure as f:
                    return line is not None and f.line == line and reason in f.reason, str(f)
                return line is None, "verified, %d events" % r.events
            expect = "verifies" if line is None else "fails at line %d" % line
            checks.run("re-signed (%s): %s %s" % ("heads in the log" if heads_in_log else "older layout", name, expect), run)

    # A torn tail whose lines are not one contiguous command. The tail check names the line of
    # the offending event's seq; verify names the first bad line of the whole file instead.
    log, _ = build(lambda events: events.append(dict(bodies[9], seq=10, cmd=9, cmdSize=3)))
    head = "9 " + sha256(log.split(b"\n")[9][len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]).hex()

    def tail_not_contiguous():
        ends = [i + 1 for i, b in enumerate(log) if b == 0x0A]
        try:
            find_end(log, ends, [0] + ends[:-1])
        except Failure as f:
            return (f.line, f.seq) == (10, 9) and "not contiguous" in f.reason, str(f)
        return False, "no failure"
    checks.run("older layout: torn tail not contiguous: the tail check fails at line 10, seq 9", tail_not_contiguous)

    def verify_not_contiguous():
        try:
            verify_folder(folder, log=log, head_text=head)
        except Failure as f:
            return f.line == 11 and "must start at its own seq" in f.reason, str(f)
        return False, "it verified"
    checks.run("older layout: torn tail not contiguous: verify names line 11, the first line that fails", verify_not_contiguous)

    # The body reader on bytes that a serialiser cannot produce (spec: "Reading a body").
    body = serialize(bodies[9])

    def at(fragment, plus=0):
        return body.index(fragment) + plus + len(LINE_PREFIX) + 1

    raw = [
        (body.replace(b'"seq":9,', b'"seq":9,"seq":9,'),
         "body is not canonical JSON: byte %d: duplicate member name 'seq'" % at(b'"seq":9,', 8)),
        (body.replace(b'"actor":"self","at":"2026-01-15T09:00:04.000Z"', b'"at":"2026-01-15T09:00:04.000Z","actor":"self"'),
         "body is not canonical JSON: byte %d: member 'actor' is out of canonical (RFC 8785) order"
         % (len(b'{"at":"2026-01-15T09:00:04.000Z",') + len(LINE_PREFIX) + 1)),
        (b'{"\xc3\xa9":1,' + body[1:], "member '\u00e9' is not part of the ledger format"),
        (b'{"note":[' + body[1:], "member 'note' is not part of the ledger format"),
        (b'{"\\u0076":1}', "body is not canonical JSON: byte 11: '\\u' escape is not canonical here"),
        (b"{}", "body is an empty object"),
        (b'{ ' + body[1:], "body is not canonical JSON: byte 10: expected a member name"),
        (body.replace(b'"seq":9', b'"seq":09'), "body is not canonical JSON: byte %d: integer has a leading zero" % at(b'"seq":9', 6)),
        (body.replace(b'"v":2', b'"v":true'), "member 'v' must be an integer"),
        (body.replace(b'"v":2', b'"v":3'), "member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)"),
        (body.replace(b'"v":2', b'"v":0'), "member 'v' must be 1 or 2 (this reader knows format versions 1 and 2)"),
        (body.replace(b'"at":"2026-01-15T09:00:04.000Z"', b'"at":"2026-01-15T09:00:04Z"'),
         "member 'at' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        (body.replace(b'"seq":9', b'"seq":-9'), "member 'seq' is missing or negative"),
        (body.replace(b'"cmd":9', b'"cmd":8'), "command span cmd=8 cmdSize=1 does not contain seq 9"),
    ]
    for data, message in raw:
        def run_raw(data=data, message=message):
            try:
                read_body(data)
            except DecodeError as e:
                return str(e) == message, str(e)
            return False, "accepted"
        checks.run("body reader: %s" % message.replace("\u00e9", "<U+00E9>"), run_raw)


def check_evidence(checks, here):
    """A grant's evidence (Spec/ledger-format.md, consent.given, Reading a body 2.3 and 2.5;
    Spec/erasure.md, Sealed evidence): the body reader on the tiny ledger's last event (seq 9,
    which carries all four members, its reference sealed under bob's key) with the members
    changed; the sealed reference opened with bob's record and refused when it cannot be, alone and
    in the tiny ledger re-signed with the test key and verified with its records (Verifying, step
    10, item 5); and the replay rule 11a on decoded events. The bodies given to the reader need no
    signature: it is given them directly."""
    folder = os.path.join(here, "tiny-ledger")
    lines = event_lines(read_file(folder, "ledger.jsonl"))
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in lines]
    grant, withdrawal = bodies[9], bodies[6]
    salts = read_subjects(folder)
    bob_key, alice_key = evidence_key("bob", salts["bob"]), evidence_key("alice", salts["alice"])
    sealed = grant.get("sealedEvidence", "")
    e = decode_line(lines[9])
    checks.check(e.evidence == {"effectiveAt": "2026-01-15T09:00:03.500Z", "channel": "paper", "noticeLanguage": "de", "sealedEvidence": sealed}
                 and len(sealed) == 2 * (SEALED_OVERHEAD + len("scan-0042")),
                 "evidence: the tiny ledger's seq 9 carries effectiveAt 09:00:03.500, channel paper, notice language de, and its "
                 "reference sealed (sealedEvidence: a nonce, a tag and 9 bytes), none in clear", json.dumps(e.evidence, sort_keys=True))

    def opens(sealed_value, key):
        try:
            return open_evidence(sealed_value, key)
        except SealError as err:
            return err.problem
    checks.check(bob_key == sha256(b"consentledger-evidence-key-v1\n" + b"\x02" * 16 + b"bob") and opens(sealed, bob_key) == "scan-0042",
                 "evidence: seq 9's sealed reference opens under bob's key (SHA-256 of the context, his record's salt and id) to "
                 "scan-0042", opens(sealed, bob_key))
    checks.check(sealed[:48] == evidence_nonce(bob_key, 9, "scan-0042").hex() and seal_evidence("scan-0042", 9, bob_key) == sealed,
                 "evidence: seq 9's nonce is the writer's (SHA-256 of the context, bob's key, seq 9 as 8 bytes big-endian and "
                 "scan-0042; its first 24 bytes), and sealing scan-0042 for seq 9 under bob's key gives its sealedEvidence byte for byte",
                 sealed[:48])
    checks.check(all(decode_line(line).evidence == {} for line in lines[1:9] if decode_line(line).type == "consent.given"),
                 "evidence: the tiny ledger's other grants carry none")
    try:
        report = verify_folder(folder)
        detail = "%d opened, %d of erased subjects left sealed" % report.sealed
        ok = report.sealed == (1, 0)
    except Failure as f:
        ok, detail = False, str(f)
    checks.check(ok, "evidence: verifying the tiny ledger opens its one sealed reference with its subject's record (step 10, item 5)", detail)

    # Opening (Spec/erasure.md, Sealed evidence, Opening): the messages, in their order.
    flip = flip_hex_byte
    no_key = "the sealed evidence reference does not open under the subject's key"
    not_utf8 = "the sealed evidence reference opens to bytes that are not UTF-8"
    recorded = "the sealed evidence reference opens to one no command records: %s"
    open_cases = [
        ("seq 9 under bob's key", sealed, bob_key, "scan-0042"),
        ("seq 9 under alice's key", sealed, alice_key, no_key),
        ("bob's reference sealed under alice's key, under bob's", seal_evidence("scan-0042", 9, alice_key), bob_key, no_key),
        ("seq 9 with the first byte of its nonce flipped", flip(sealed, 0), bob_key, no_key),
        ("seq 9 with the last byte of its nonce flipped", flip(sealed, 23), bob_key, no_key),
        ("seq 9 with a byte of its tag flipped", flip(sealed, 24), bob_key, no_key),
        ("seq 9 with a byte of its ciphertext flipped", flip(sealed, len(sealed) // 2 - 1), bob_key, no_key),
        ("seq 9 without its last byte", sealed[:-2], bob_key, no_key),
        ("seq 9 with a byte added", sealed + "00", bob_key, no_key),
        ("scan-0042 sealed with a nonce of zeros (a reader does not check the nonce)",
         seal_evidence("scan-0042", 9, bob_key, nonce=bytes(24)), bob_key, "scan-0042"),
        ("scan-0042 sealed with the nonce of another seq", seal_evidence("scan-0042", 8, bob_key), bob_key, "scan-0042"),
        ("a reference of 512 bytes", seal_evidence("\u00e9" * 256, 9, bob_key), bob_key, "\u00e9" * 256),
        ("bytes that are not UTF-8 (0xff)", seal_evidence(b"scan-\xff0042", 9, bob_key), bob_key, not_utf8),
        ("a UTF-8-encoded surrogate", seal_evidence(b"scan-\xed\xa0\x80", 9, bob_key), bob_key, not_utf8),
        ("an overlong encoding of '/'", seal_evidence(b"scan\xc0\xaf0042", 9, bob_key), bob_key, not_utf8),
        ("a UTF-8 sequence cut short", seal_evidence(b"scan-\xc3", 9, bob_key), bob_key, not_utf8),
        ("a reference with a line feed", seal_evidence("scan\n0042", 9, bob_key), bob_key,
         recorded % "the evidence reference contains a control character"),
        ("a reference with U+0085", seal_evidence("scan\u00850042", 9, bob_key), bob_key, recorded % "the evidence reference contains a control character"),
        ("a reference with a leading space", seal_evidence(" scan-0042", 9, bob_key), bob_key,
         recorded % "the evidence reference has leading or trailing spaces"),
        ("an empty reference (40 bytes: the member's shape refuses it first)", seal_evidence("", 9, bob_key), bob_key,
         "the sealed evidence reference is 40 bytes, not 41 to 552"),
        ("a reference of 513 bytes (553 bytes: the member's shape refuses it first)", seal_evidence("x" * 513, 9, bob_key), bob_key,
         "the sealed evidence reference is 553 bytes, not 41 to 552"),
    ]
    for what, value, key, expected in open_cases:
        def run_open(value=value, key=key, expected=expected):
            got = opens(value, key)
            shown = got if len(got) <= 80 else "%s… (%d UTF-8 bytes)" % (got[:8], len(got.encode("utf-8")))
            return got == expected, "".join(c if 0x20 <= ord(c) < 0x7F else "<U+%04X>" % ord(c) for c in shown)
        checks.run("evidence: opening %s: %s" % (what, "refused (%s)" % expected if expected.startswith("the sealed") else "opens"), run_open)

    # The tiny ledger re-signed with seq 9's (or 5's) sealed reference changed, verified with its
    # records (Verifying, step 10, item 5: after every line and record has passed, in log order,
    # at the event's line and seq).
    seed = bytes(range(32))

    def ledger(*changes):
        """The tiny ledger with each (i, members) applied to event i (a member None: left out)."""
        events = [dict(b) for b in bodies]
        for i, members in changes:
            events[i].update(members)
            events[i] = {k: v for k, v in events[i].items() if v is not None}
        return sign_log(events, seed, heads_in_log=True)[0]

    def in_ledger(problem):
        return "%s (the key of the subject's record in subjects.jsonl): the event or the record is not what the ledger wrote" % problem
    ledger_cases = [
        ("bob's reference sealed under alice's key", ledger((9, {"sealedEvidence": seal_evidence("scan-0042", 9, alice_key)})), 10,
         in_ledger(no_key)),
        ("a flipped byte of the box (its ciphertext)", ledger((9, {"sealedEvidence": flip(sealed, len(sealed) // 2 - 1)})), 10, in_ledger(no_key)),
        ("a flipped byte of the box (its tag)", ledger((9, {"sealedEvidence": flip(sealed, 24)})), 10, in_ledger(no_key)),
        ("a flipped byte of the nonce", ledger((9, {"sealedEvidence": flip(sealed, 0)})), 10, in_ledger(no_key)),
        ("a box that opens to bytes that are not UTF-8", ledger((9, {"sealedEvidence": seal_evidence(b"scan-\xff0042", 9, bob_key)})), 10,
         in_ledger(not_utf8)),
        ("a box that opens to a reference with a control character", ledger((9, {"sealedEvidence": seal_evidence("scan\n0042", 9, bob_key)})),
         10, in_ledger(recorded % "the evidence reference contains a control character")),
        ("a box that opens to a reference with a trailing space", ledger((9, {"sealedEvidence": seal_evidence("scan-0042 ", 9, bob_key)})),
         10, in_ledger(recorded % "the evidence reference has leading or trailing spaces")),
        ("the reference in clear and sealed at once", ledger((9, {"evidence": "scan-0042"})), 10, SEALED_BOTH),
        ("the sealed reference in uppercase hex", ledger((9, {"sealedEvidence": sealed.upper()})), 10, SEALED_SHAPE),
        ("a sealed reference on a withdrawal", ledger((6, {"sealedEvidence": sealed})), 7,
         "member 'sealedEvidence' does not belong to a 'consent.revoked' event"),
        ("alice's seq 5 and bob's seq 9 each sealed under the other's key (the first in log order is named)",
         ledger((5, {"sealedEvidence": seal_evidence("scan-0041", 5, bob_key)}), (9, {"sealedEvidence": seal_evidence("scan-0042", 9, alice_key)})),
         6, in_ledger(no_key)),
        ("the reference in clear, as older ledgers hold it (still read)", ledger((9, {"sealedEvidence": None, "evidence": "scan-0042"})), None, None),
        ("bob's reference sealed with a nonce of zeros (any 24 bytes open)",
         ledger((9, {"sealedEvidence": seal_evidence("scan-0042", 9, bob_key, nonce=bytes(24))})), None, None),
        ("another reference sealed for bob's seq 9", ledger((9, {"sealedEvidence": seal_evidence("paper form 7, front desk", 9, bob_key)})),
         None, None),
        ("a reference sealed under alice's key on her grant at seq 5", ledger((5, {"sealedEvidence": seal_evidence("scan-0041", 5, alice_key)})),
         None, None),
    ]
    for what, log, line, reason in ledger_cases:
        def run_ledger(log=log, line=line, reason=reason):
            try:
                r = verify_folder(folder, log=log, derived=False, subject_map=False)
            except Failure as f:
                # An opening failure names the event's seq; a line that cannot be read names none.
                seq = line - 1 if reason is not None and reason.startswith("the sealed") else None
                return reason is not None and (f.line, f.seq, f.reason) == (line, seq, reason), str(f)
            return reason is None, "verified; sealed references: %d opened, %d left sealed" % r.sealed
        checks.run("evidence: the tiny ledger re-signed, %s: %s" % (
            what, "accepted" if reason is None else "refused at line %d (%s)" % (line, reason)), run_ledger)

    def without(body, *members):
        return {k: v for k, v in body.items() if k not in members}
    clear = without(grant, "sealedEvidence")  # the grant as an older ledger holds it, without a reference
    tag = "notice language '%s' is not a BCP 47 language tag (such as 'de' or 'en-GB')"
    shape = SEALED_SHAPE
    both = SEALED_BOTH
    cases = [(dict(grant, channel=c), None) for c in CHANNELS] + [
        (dict(grant, channel="fax"), "member 'channel' must be one of app, portal, paper, phone, clinician"),
        (dict(grant, channel="Paper"), "member 'channel' must be one of app, portal, paper, phone, clinician"),
        (dict(grant, channel=""), "member 'channel' must be one of app, portal, paper, phone, clinician"),
        (dict(grant, channel=1), "member 'channel' must be a string"),
        (dict(clear, channel="fax", noticeLanguage="x", evidence=""), "member 'channel' must be one of app, portal, paper, phone, clinician"),
    ] + [(dict(grant, noticeLanguage=t), None) for t in ("en-GB", "zh-Hant-TW", "sr-Latn-RS", "de-CH-1996", "abcdefgh", "EN", "es-419")] + [
        (dict(grant, noticeLanguage=t), tag % t) for t in (
            "", "d", "abcdefghi", "1de", "de-", "-de", "de--CH", "de_DE", "de-123456789", "x-private", "de CH",
            "\u212ade", "\u0130t", "de-\u0661", "d\u00e9")] + [
        (dict(clear, noticeLanguage="x", evidence=""), tag % "x"),
        (dict(grant, noticeLanguage=None), "member 'noticeLanguage' must be a string"),
    ] + [(dict(clear, evidence=r), None) for r in ("scan-0042", "a", "scan 42", "\u00a0scan\u00a0", "\u00e9" * 256, "x" * 512, "\u2028")] + [
        (dict(clear, evidence=""), "the evidence reference is empty"),
        (dict(clear, evidence="x" * 513), "the evidence reference is longer than 512 bytes"),
        (dict(clear, evidence="x" * 511 + "\u00e9"), "the evidence reference is longer than 512 bytes"),
    ] + [(dict(clear, evidence=r), "the evidence reference contains a control character")
         for r in ("a\tb", "a\nb", "\u0000", "a\u001f", "a\u007f", "a\u0080", "a\u0085", "a\u009f")] + [
        (dict(clear, evidence=" scan-0042"), "the evidence reference has leading or trailing spaces"),
        (dict(clear, evidence="scan-0042 "), "the evidence reference has leading or trailing spaces"),
        (dict(clear, evidence=" "), "the evidence reference has leading or trailing spaces"),
        (dict(clear, evidence=["scan"]), "member 'evidence' must be a string"),
        # Reading a body, 2.5: 'sealedEvidence' after 'evidence', first both present, then its
        # shape: 41 to 552 bytes in lowercase hex. Whether it opens is not the reader's check.
    ] + [(dict(grant, sealedEvidence=s), None) for s in ("00" * SEALED_MIN_BYTES, "ff" * SEALED_MAX_BYTES, sealed[:-2], "0123456789abcdef" * 6)] + [
        (dict(grant, sealedEvidence=s), shape) for s in (
            "", "00" * (SEALED_MIN_BYTES - 1), "00" * (SEALED_MAX_BYTES + 1), sealed[:-1], sealed + "0", sealed.upper(),
            sealed[:-1] + "g", sealed[:-2] + "\u00e9", " " + sealed[1:], "0x" + sealed[2:], "\uff10" * 82)] + [
        (dict(grant, sealedEvidence=1), "member 'sealedEvidence' must be a string"),
        (dict(grant, sealedEvidence=[sealed]), "member 'sealedEvidence' must be a string"),
        (dict(grant, evidence="scan-0042"), both),
        (dict(grant, evidence="scan-0042", sealedEvidence="zz"), both),
        (dict(grant, evidence=""), "the evidence reference is empty"),
        (dict(grant, noticeLanguage="x", sealedEvidence="zz"), tag % "x"),
        (dict(grant, channel="fax", evidence="scan-0042"), "member 'channel' must be one of app, portal, paper, phone, clinician"),
        (dict(without(grant, "effectiveAt", "channel", "noticeLanguage")), None),
        (dict(grant, effectiveAt="2026-01-15T09:00:03.5Z"), "member 'effectiveAt' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        (dict(grant, effectiveAt="2026-01-15T09:00:03.500+00:00"),
         "member 'effectiveAt' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        (dict(grant, effectiveAt=1768467603500), "member 'effectiveAt' is not a canonical UTC time like 2026-01-31T08:00:00.000Z"),
        # Reading a body, 2.3: on another type an evidence member does not belong, whatever its value.
        (dict(withdrawal, evidence="scan-0042"), "member 'evidence' does not belong to a 'consent.revoked' event"),
        (dict(withdrawal, sealedEvidence=sealed), "member 'sealedEvidence' does not belong to a 'consent.revoked' event"),
        (dict(withdrawal, sealedEvidence="zz"), "member 'sealedEvidence' does not belong to a 'consent.revoked' event"),
        (dict(withdrawal, evidence="scan-0042", sealedEvidence=sealed), "member 'evidence' does not belong to a 'consent.revoked' event"),
        (dict(withdrawal, channel="fax"), "member 'channel' does not belong to a 'consent.revoked' event"),
        (dict(withdrawal, effectiveAt="2026-01-15T09:00:01.000Z", noticeLanguage="de"),
         "member 'effectiveAt' does not belong to a 'consent.revoked' event"),
        (dict(bodies[7], noticeLanguage="de"), "member 'noticeLanguage' does not belong to a 'consent.revoked' event"),
        (dict(bodies[0], evidence="scan-0042"), "member 'evidence' does not belong to a 'ledger.created' event"),
        (dict(bodies[0], sealedEvidence=sealed), "member 'sealedEvidence' does not belong to a 'ledger.created' event"),
        (dict(without(grant, "streamPrev", "streamRoot"), v=1), None),  # allowed in format 1 too
        (dict(without(clear, "streamPrev", "streamRoot"), v=1, evidence="scan-0042"), None),
    ]

    def spelt(value, short=True):
        """A value for a check's name: printable ASCII, a long string shortened."""
        if short and isinstance(value, str) and len(value) > 32:
            return "%s (%d UTF-8 bytes)" % (spelt(value[:2] + "\u2026" + value[-2:]), len(value.encode("utf-8")))
        return "".join(c if 0x20 <= ord(c) < 0x7F else "<U+%04X>" % ord(c) for c in json.dumps(value, ensure_ascii=False))
    for body, message in cases:
        changed = {k: v for k, v in body.items() if k in EVIDENCE_MEMBERS and v != grant.get(k)}
        label = ", ".join("%s %s" % (k, spelt(v)) for k, v in sorted(changed.items()))
        if body.get("type") != "consent.given":
            label = "%s on a %s" % (", ".join("%s %s" % (k, spelt(body[k])) for k in sorted(EVIDENCE_MEMBERS & set(body))), body["type"])
        elif body.get("v") == 1:
            label = "all four in a format-1 event, the reference %s" % ("sealed" if "sealedEvidence" in body else "in clear")
        else:
            # Members of seq 9 left out (the reference in clear instead of sealed, or no evidence).
            label = ", ".join([label] * bool(label) + ["no %s" % k for k in sorted(EVIDENCE_MEMBERS & set(grant) - set(body))])

        def run(body=body, message=message):
            data = serialize(body)
            try:
                read_body(data)
            except DecodeError as err:
                return message is not None and str(err) == message, str(err)
            return message is None, "accepted"
        checks.run("evidence: body reader, %s: %s" % (label or "unchanged", "accepted" if message is None else "refused (%s)" % spelt(message, False)[1:-1]), run)

    # Rule 11a on the decoded events of the tiny ledger: evidence is never a rule input.
    catalog, _ = decode_catalog(parse_canonical(read_file(folder, "catalog.json")))

    def replay(changes):
        """Bob's two commands (seq 8 and 9) with members changed, applied to a fresh subject
        replay; the Violation's reason, or None."""
        state = SubjectState()
        try:
            for i in (8, 9):
                b = dict(bodies[i], **changes.get(i, {}))
                for k in [k for k, v in b.items() if v is None]:
                    del b[k]
                state.apply(read_body(serialize(b)), catalog)
        except Violation as v:
            return "seq %d: %s" % (v.seq, v.reason), state
        return None, state
    rule_cases = [
        ({}, None),
        ({9: {"effectiveAt": "2026-01-15T09:00:04.001Z"}}, "seq 9: consent 'optional-b' of 'timeline' has an effective time after the time it was recorded"),
        ({9: {"effectiveAt": "2026-01-15T09:00:02.999Z"}},
         "seq 9: consent 'optional-b' of 'timeline' has an effective time before the subject's previous event about 'timeline'"),
        ({8: {"effectiveAt": "2026-01-15T09:00:03.001Z"}}, "seq 8: consent 'required' of 'timeline' has an effective time after the time it was recorded"),
        ({8: {"effectiveAt": "2000-01-01T00:00:00.000Z"}}, None),
        ({9: {"effectiveAt": "2026-01-15T09:00:03.000Z"}}, None),
        ({9: {"effectiveAt": "2026-01-15T09:00:04.000Z"}}, None),
    ]
    for changes, reason in rule_cases:
        def run_rule(changes=changes, reason=reason):
            got, state = replay(changes)
            if got is None and reason is None:
                # Evidence, never a rule input: the grant is valid from its recorded time.
                status = state.status(2, "optional-b")
                return status[3] == bodies[9]["at"], "optional-b valid from %s" % status[3]
            return got == reason, got or "accepted"
        what = ", ".join("seq %d effectiveAt %s" % (i, c["effectiveAt"]) for i, c in sorted(changes.items())) or "unchanged"
        checks.run("evidence: rule 11a, bob's grants, %s: %s" % (what, "accepted" if reason is None else "refused (%s)" % reason), run_rule)


def policy_cases(bodies, catalog_bytes):
    """Derived cases for catalogue versions (Spec/ledger-format.md, Catalogue versions, rules 5 and
    8-11, 15): events appended to the tiny ledger from seq 10 on, as (name, change, line, reason)."""
    kid = bodies[0]["kid"]
    alice, bob = bodies[1]["subject"], bodies[8]["subject"]
    v1 = parse_canonical(catalog_bytes)
    v2 = catalog_version(v1, {("timeline", "required"): "2.0"})

    def at(seq):
        return "2026-01-15T09:00:%02d.000Z" % (seq - 5)

    def publish(seq, value=v2, **members):
        b = publish_body(seq, value, at(seq), kid)
        b.update(members)
        return b

    def subject_event(kind, seq, subject, feature, consent, cmd=None, size=1, **members):
        b = {"v": 2, "seq": seq, "at": at(seq if cmd is None else cmd), "actor": "self", "cmd": seq if cmd is None else cmd,
             "cmdSize": size, "kid": kid, "type": kind, "subject": subject, "feature": feature, "consent": consent}
        b.update(members)
        return b

    def give(seq, subject, feature, consent, version, renews=None, **span):
        extra = {"version": version} if renews is None else {"version": version, "renews": renews}
        return subject_event("consent.given", seq, subject, feature, consent, **dict(span, **extra))

    def revoke(seq, subject, feature, consent, cause=None, **span):
        extra = {"reason": "withdrawn"} if cause is None else {"reason": "cascade", "cause": cause}
        return subject_event("consent.revoked", seq, subject, feature, consent, **dict(span, **extra))

    def then(*new):
        def change(events):
            events.extend(json.loads(json.dumps(b)) for b in new)
        return change

    def timeline(edit):
        def change(value):
            edit(next(f for f in value["features"] if f["key"] == "timeline"))
        return change

    def drop_optional_b(f):
        f["consents"] = [c for c in f["consents"] if c["code"] != "optional-b"]

    def make_required(f):
        f["consents"][1]["required"] = True

    def optional_first(value):
        for f in value["features"]:
            f["consents"] = [c for c in f["consents"] if not c["required"]] + [c for c in f["consents"] if c["required"]]

    reconsent = give(11, alice, 2, "required", "2.0", renews=3)
    unordered = catalog_version(v2, edit=optional_first)
    notices = notices_of(v2)
    return [
        ("a catalogue version published (timeline's required consent 2.0), then alice's re-consent naming the grant it renews",
         then(publish(10), reconsent), None, None),
        ("a published catalogue whose 'catalog' member is not its hash", then(publish(10, catalog="ab" * 32)), 11,
         "the published catalogue's SHA-256 differs from its 'catalog' member"),
        ("a published catalogue identical to the one in force", then(publish(10, v1)), 11,
         "the published catalogue cannot replace the one in force: it is identical to the catalogue in force"),
        ("a published catalogue without one of timeline's consents", then(publish(10, catalog_version(v2, edit=timeline(drop_optional_b)))),
         11, "the consents of 'timeline' differ from the catalogue in force"),
        ("a published catalogue that makes an optional consent required", then(publish(10, catalog_version(v2, edit=timeline(make_required)))),
         11, "the consents of 'timeline' differ from the catalogue in force"),
        ("a published catalogue with a feature key changed",
         then(publish(10, catalog_version(v2, edit=timeline(lambda f: f.update(key="timelines"))))), 11,
         "its features differ from the catalogue in force"),
        ("a published catalogue that changes only a name and a link (allowed)",
         then(publish(10, catalog_version(v1, edit=timeline(lambda f: (f["name"].update(en="Timeline (new)"),
                                                                        f["consents"][0].update(link="https://example.org/new")))))), None, None),
        ("notices with the old policy version", then(publish(10, notices=notices_of(v1))), 11,
         "the notices must list every consent of the published catalogue, in catalogue order, with its version"),
        ("notices missing one consent", then(publish(10, notices=notices[:-1])), 11, "the notices must list every consent"),
        ("notices in another order", then(publish(10, notices=notices[::-1])), 11, "the notices must list every consent"),
        ("notices whose sha256 is not the link's hash (not checked: accepted)",
         then(publish(10, notices=[dict(n, sha256="00" * 32) for n in notices])), None, None),
        ("a document not in consent order, 'catalog' the hash of the normalised catalogue (accepted)",
         then(publish(10, document=unordered)), None, None),
        ("a document not in consent order, 'catalog' the hash of the document's own bytes",
         then(publish(10, document=unordered, catalog=sha256(serialize(unordered)).hex())), 11,
         "the published catalogue's SHA-256 differs from its 'catalog' member"),
        ("a re-consent without 'renews'", then(publish(10), give(11, alice, 2, "required", "2.0")), 12,
         "consent 'required' of 'timeline' renews the outdated grant at seq 3, so 'renews' must name it"),
        ("a re-consent naming another grant", then(publish(10), give(11, alice, 2, "required", "2.0", renews=4)), 12,
         "renews the outdated grant at seq 3, so 'renews' must name it"),
        ("'renews' on a grant after a withdrawal (nothing outdated)", then(give(10, alice, 1, "required", "1.0", renews=1)), 11,
         "'renews' names seq 1, but consent 'required' of 'medication-management' has no outdated grant"),
        ("a re-consent recording the old policy version", then(publish(10), give(11, alice, 2, "required", "1.0", renews=3)), 12,
         "consent 'required' of 'timeline' records policy version '1.0' but the catalogue's is '2.0'"),
        ("a current consent given again after the publication", then(publish(10), give(11, alice, 2, "optional-a", "1.0")), 12,
         "consent 'optional-a' of 'timeline' is given twice"),
        ("an optional consent given while the required one is outdated (no re-consent)",
         then(publish(10), give(11, bob, 2, "optional-a", "1.0")), 12,
         "optional consent 'optional-a' given while 'timeline' is not active: a required consent is withheld or outdated (rule R2)"),
        ("a re-consent and an optional consent in one command, required first (allowed)",
         then(publish(10), give(11, bob, 2, "required", "2.0", renews=8, cmd=11, size=2), give(12, bob, 2, "optional-a", "1.0", cmd=11, size=2)),
         None, None),
        ("an optional consent withdrawn while the required one is outdated (allowed: outdated is not withheld)",
         then(publish(10), revoke(11, alice, 2, "optional-a")), None, None),
        ("the outdated required consent withdrawn without its cascade", then(publish(10), revoke(11, alice, 2, "required")), 12,
         "optional consent 'optional-a' of 'timeline' is still given after a required consent of its feature was withdrawn (rule R4 cascade missing)"),
        ("the outdated required consent withdrawn with its cascade (allowed)",
         then(publish(10), revoke(11, alice, 2, "required", cmd=11, size=3), revoke(12, alice, 2, "optional-a", cause=11, cmd=11, size=3),
              revoke(13, alice, 2, "optional-b", cause=11, cmd=11, size=3)), None, None),
        ("an optional consent's version changed: its re-consent, the feature still active (allowed)",
         then(publish(10, catalog_version(v1, {("timeline", "optional-b"): "1.1"})), give(11, bob, 2, "optional-b", "1.1", renews=9)),
         None, None),
        ("a publication in a command of two events", then(publish(10, cmdSize=2), dict(reconsent, seq=11, cmd=10, cmdSize=2, at=at(10))), 11,
         "a catalogue version is published alone in its command, after the genesis event"),
        ("a publication inside a subject's command",
         then(give(10, alice, 1, "required", "1.0", cmd=10, size=2), publish(11)), 12, "command starting at seq 10 is incomplete: expected 2 events"),
        ("a second publication restoring 1.0 (the old grants are current again)", then(publish(10), publish(11, v1)), None, None),
        ("a first grant after the publication recording the old version",
         then(publish(10, catalog_version(v1, {("medication-management", "required"): "2.0"})), give(11, bob, 1, "required", "1.0")), 12,
         "records policy version '1.0' but the catalogue's is '2.0'"),
        ("a re-consent whose version is the catalogue's spelt NFD instead of NFC (compared byte for byte)",
         then(publish(10, catalog_version(v1, {("timeline", "required"): "2.0-\u00e9"})),
              give(11, alice, 2, "required", "2.0-e\u0301", renews=3)), 12, "records policy version"),
        ("a negative 'renews'", then(give(10, alice, 1, "required", "1.0", renews=-1)), 11, "member 'renews' is missing or negative"),
        ("'renews' on a withdrawal", then(revoke(10, alice, 2, "optional-a", renews=4)), 11,
         "member 'renews' does not belong to a 'consent.revoked' event"),
        ("a publication without notices", then({k: v for k, v in publish(10).items() if k != "notices"}), 11,
         "member 'notices' is missing from a 'catalog.published' event"),
        ("a publication with a 'ledger' member", then(publish(10, ledger="x")), 11,
         "member 'ledger' does not belong to a 'catalog.published' event"),
        ("a publication with a 'subject' member", then(publish(10, subject=alice)), 11,
         "member 'subject' does not belong to a 'catalog.published' event"),
        ("a publication whose document is not an object", then(publish(10, document=[])), 11, "member 'document' must be a catalogue object"),
        ("a publication whose document is not a valid catalogue", then(publish(10, document={"features": []})), 11,
         "member 'document' is not a valid catalogue"),
        ("a publication without its link to the ledger stream's previous event (the genesis event)",
         then(publish(10, **{"@streams": {"streamPrev": None}})), 11,
         "the event names no event as its stream's previous event, but that is seq 0"),
        ("a publication whose notices are not an array", then(publish(10, notices={})), 11, "member 'notices' must be an array"),
        ("a notice whose sha256 is uppercase hex", then(publish(10, notices=[dict(notices[0], sha256="AB" * 32)] + notices[1:])), 11,
         "a notice must be {consent, feature, sha256 (64 hex digits), version}"),
        ("a notice with another member", then(publish(10, notices=[dict(notices[0], link="x")] + notices[1:])), 11,
         "a notice must be {consent, feature, sha256 (64 hex digits), version}"),
    ]


def check_policy_versions(checks, here):
    """States after publications, the subject-replay gap rule, and the body reader on
    catalog.published bodies."""
    folder = os.path.join(here, "tiny-ledger")
    seed = bytes(range(32))
    tiny = read_file(folder, "ledger.jsonl")
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in event_lines(tiny)]
    cases = {name: change for name, change, _, _ in policy_cases(bodies, read_file(folder, "catalog.json"))}
    salts = read_subjects(folder)
    alice, bob = subject_ref("alice", salts["alice"]), subject_ref("bob", salts["bob"])

    def states(case):
        events = [dict(b) for b in bodies]
        cases[case](events)
        log, head = sign_log(events, seed, heads_in_log=True)
        r = verify_folder(folder, log=log, head_text=head, derived=False)
        timeline = r.replay.catalog[2]
        out = {}
        for who, ref in (("alice", alice), ("bob", bob)):
            st = r.replay.subjects[ref]
            out[who] = (st.is_active(timeline), ["%s:%s" % (c["code"], "outdated" if st.is_outdated(timeline, c) else "current")
                                                 for c in timeline["consents"] if st.is_given(2, c["code"])])
        return r, out

    def after_reconsent():
        r, got = states("a catalogue version published (timeline's required consent 2.0), then alice's re-consent naming the grant it renews")
        want = {"alice": (True, ["required:current", "optional-a:current", "optional-b:current"]),
                "bob": (False, ["required:outdated", "optional-b:current"])}
        return got == want and [s for s, _, _ in r.replay.versions] == [0, 10], json.dumps(got, sort_keys=True)
    checks.run("policy versions: after the publication alice's re-consent makes timeline active again; bob's required consent "
               "is outdated, his timeline inactive, his optional consent still given (no cascade)", after_reconsent)

    def after_restore():
        _, got = states("a second publication restoring 1.0 (the old grants are current again)")
        return got["bob"] == (True, ["required:current", "optional-b:current"]), json.dumps(got, sort_keys=True)
    checks.run("policy versions: a second publication restoring 1.0 makes bob's 1.0 grant current and his timeline active again", after_restore)

    def after_optional_withdrawn():
        _, got = states("an optional consent withdrawn while the required one is outdated (allowed: outdated is not withheld)")
        return got["alice"] == (False, ["required:outdated", "optional-b:current"]), json.dumps(got, sort_keys=True)
    checks.run("policy versions: alice withdraws an optional consent while her required one is outdated; the other optional "
               "consent stays given", after_optional_withdrawn)

    # Rule 4 in a subject's own history: a command's events are consecutive there too.
    catalog, _ = decode_catalog(parse_canonical(read_file(folder, "catalog.json")))
    events = [decode_line(line) for line in event_lines(tiny)]

    def subject_gap():
        st = SubjectState()
        try:
            for e in events:
                if e.subject == alice and e.seq != 4:
                    st.apply(e, catalog)
        except Violation as v:
            return v.seq == 5 and v.reason == "command starting at seq 3 is incomplete: expected 3 events", "seq %d: %s" % (v.seq, v.reason)
        return False, "accepted"
    checks.run("subject replay: alice's events without seq 4 (inside the command 3-5) fail at seq 5 (a command's events are "
               "consecutive in the subject's history)", subject_gap)

    # The body reader on catalog.published bodies that a serialiser cannot produce.
    v2 = catalog_version(parse_canonical(read_file(folder, "catalog.json")), {("timeline", "required"): "2.0"})
    body = serialize(dict(publish_body(10, v2, "2026-01-15T09:00:05.000Z", bodies[0]["kid"]), prev=ZERO_HASH))

    def byte(i):
        return i + len(LINE_PREFIX) + 1

    spaced = body.replace(b'"document":{', b'"document":{ ', 1)
    swapped = body.replace(b'"link":"https://consentledger.example/notices/medication-management/required","name":',
                           b'"name":', 1)
    swapped = swapped.replace(b'"required":true,"version":"1.0"}',
                              b'"link":"https://consentledger.example/notices/medication-management/required","required":true,"version":"1.0"}', 1)
    deep = body.replace(b'"notices":[', b'"notices":[' + b"[" * 62 + b"0" + b"]" * 62 + b",", 1)
    # Both spellings of one name, in canonical (UTF-16) order: "e" U+0301 sorts before U+00E9.
    twice = catalog_version(v2, edit=lambda value: value["features"][0]["name"].update({"e\u0301": "x", "\u00e9": "y"}))
    nfc_twice = serialize(dict(publish_body(10, v2, "2026-01-15T09:00:05.000Z", bodies[0]["kid"]), prev=ZERO_HASH, document=twice))
    raw = [
        (spaced, "body is not canonical JSON: byte %d: expected a member name" % byte(spaced.index(b"{ ") + 1)),
        (swapped, "body is not canonical JSON: byte %d: member 'link' is out of canonical (RFC 8785) order"
         % byte(swapped.index(b'"link":"https://consentledger.example/notices/medication-management/required","required"'))),
        (deep, "body is not canonical JSON: byte %d: nesting is deeper than 64 levels" % byte(deep.index(b"0]"))),
        (nfc_twice, "body is not canonical JSON: byte %d: duplicate member name '\u00e9'" % byte(nfc_twice.index('"\u00e9"'.encode()))),
    ]
    labels = ["whitespace inside 'document'", "a member out of order inside 'document'",
              "a value nested 64 levels deep inside 'notices'",
              "two names in 'document' that differ only in Unicode normalisation (duplicates, as the reference decides)"]
    for label, (data, message) in zip(labels, raw):
        def run_raw(data=data, message=message):
            try:
                read_body(data)
            except DecodeError as e:
                return str(e) == message, str(e).encode("ascii", "backslashreplace").decode()
            return False, "accepted"
        checks.run("body reader: %s: %s" % (label, message.encode("ascii", "backslashreplace").decode()), run_raw)


def check_derived_files(checks, here):
    """lines.idx and tree.hashes beside the log: their layout, and verify checking them."""
    folder = os.path.join(here, "tiny-ledger")
    log = read_file(folder, "ledger.jsonl")
    index, tree = derive_files(log)
    # One entry per event line, at its byte offset in the file: record 1 (seq 1) is after the
    # genesis line (640 bytes) and the head line of size 1 (293 bytes), at 935 = 0x3a7.
    lines = log.split(b"\n")
    checks.check(index[:32] == bytes.fromhex("00000000000000008002000000000000") + bytes(16)
                 and index[32:64] == bytes.fromhex("a703000000000000bc01000000000000" "4d0deb9245e18aa6cf570b7b4336ab00")
                 and len(lines[0]) + 1 + len(lines[1]) + 1 == 0x3a7 and is_head_line(lines[1])
                 and len(index) == 320 and len(tree) == 576 == 32 * stored_hash_count(10),
                 "derived files of the tiny ledger: lines.idx records 0 (offset 0, 640 bytes) and 1 (offset 935, after the genesis "
                 "line and its head line, 444 bytes), one per event line, 10 entries; tree.hashes 18 hashes")

    def verdict(data, line=None, reason=None, checked="lines.idx and tree.hashes"):
        def run():
            try:
                r = verify_folder(folder, derived=data)
            except Failure as f:
                return reason is not None and f.line == line and reason in f.reason, str(f)
            return reason is None and r.derived_checked == checked, "verified; %s checked" % (r.derived_checked or "no derived file")
        return run

    def flip(data, i):
        return data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
    checks.run("derived files that match the log are checked and pass", verdict((index, tree)))
    checks.run("a lines.idx entry (line 3's offset) changed: fails at line 3",
               verdict((flip(index, 64), tree), 3, "the line index entry differs from the log (rebuild it: delete lines.idx, tree.hashes and subjects.map)"))
    checks.run("a lines.idx entry's subject changed: fails at line 9",
               verdict((flip(index, 8 * 32 + 20), tree), 9, "the line index entry differs from the log"))
    checks.run("a lines.idx entry's 4 reserved bytes changed: not compared, verifies", verdict((flip(index, 2 * 32 + 13), tree)))
    checks.run("tree hash 5 changed: fails with no line",
               verdict((index, flip(tree, 5 * 32)), None, "tree hash 5 differs from the log (rebuild it: delete lines.idx, tree.hashes and subjects.map)"))
    checks.run("tree.hashes one hash short of the log: left for a rebuild, not checked; lines.idx still checked",
               verdict((index, tree[:-32]), checked="lines.idx"))
    checks.run("tree.hashes one hash short of the log and a lines.idx entry's subject changed: fails at line 9",
               verdict((flip(index, 8 * 32 + 20), tree[:-32]), 9, "the line index entry differs from the log"))
    checks.run("lines.idx one entry short of the log: neither file checked (tree.hashes only with lines.idx)",
               verdict((index[:-32], flip(tree, 0)), checked=None))
    checks.run("no lines.idx and no tree.hashes: nothing checked", verdict((b"", b""), checked=None))

    def every_line(log):
        """lines.idx as if every line of the log were an event line, its head lines included."""
        out, offset = bytearray(), 0
        for raw in log.split(b"\n")[:-1]:
            out += index_entry(offset, len(raw), NO_SUBJECT if is_head_line(raw) else subject_bytes(decode_line(raw)))
            offset += len(raw) + 1
        return bytes(out)
    checks.run("a lines.idx with an entry for each head line too (15 entries): fails at line 2, seq 1 (one entry per event line)",
               verdict((every_line(log), tree), 2, "the line index entry differs from the log"))


def check_subject_map(checks, here):
    """Streams and the subject map: the roots of the tiny ledger from the definition, the map
    algorithm against the definition on random key sets, proofs, and verify checking a stored
    subjects.map (Spec/ledger-format.md, Streams and the subject map; The ledger folder)."""
    import random
    folder = os.path.join(here, "tiny-ledger")
    log = read_file(folder, "ledger.jsonl")
    events = [decode_line(line) for line in event_lines(log)]
    alice, bob = bytes.fromhex(events[1].subject), bytes.fromhex(events[8].subject)

    # The worked example: the genesis event's root is the leaf of the ledger stream at seq 0.
    genesis_root = map_leaf(LEDGER_STREAM, 0)
    checks.check(sha256(b"\x02" + bytes(16) + bytes(8)) == genesis_root and genesis_root.hex() == events[0].stream_root
                 == "d3396282a06c23f48a71004c78b303313c88dbe217546ed7388710046bc74b43",
                 "subject map: the genesis event's streamRoot is leaf(16 zero bytes, 0) = SHA-256(0x02 || 24 zero bytes)", genesis_root.hex())
    checks.check(map_node(map_node(map_leaf(LEDGER_STREAM, 0), map_leaf(alice, 5)), EMPTY_HASH).hex() == events[5].stream_root
                 and map_node(map_node(map_leaf(LEDGER_STREAM, 0), map_leaf(alice, 7)), map_leaf(bob, 9)).hex() == events[9].stream_root,
                 "subject map: the roots at seq 5 (two keys, both left at depth 0, apart at depth 1) and seq 9 (bob's key goes right) "
                 "are as documented")
    newest, roots = {}, 0
    ok = [e.seq for e in events if e.stream_root is not None] == [0, 5, 7, 8, 9]
    for e in events:
        if e.seq == e.cmd + e.cmd_size - 1:
            newest[stream_key(e.subject)] = e.seq
        if e.stream_root is not None:
            roots += 1
            ok = ok and map_root(newest).hex() == e.stream_root
    checks.check(ok, "subject map: the tiny ledger's roots are on the last event of each commit (seq 0, 5, 7, 8, 9), each the root, by "
                 "the definition, of each stream's newest seq so far", "%d roots" % roots)

    # The incremental map (as verify and writers build it) against the definition.
    rng = random.Random(20260115)

    def random_keys(n):
        keys = [bytes(rng.getrandbits(8) for _ in range(16)) for _ in range(n)]
        # Keys that share long prefixes: a deep split, down to the last bit.
        base = keys[0] if keys else bytes(16)
        keys += [base[:15] + bytes([base[15] ^ 1]), base[:8] + bytes([base[8] ^ 0x80]) + base[9:], LEDGER_STREAM, bytes(15) + b"\x01"]
        return keys

    def agree():
        for trial in range(40):
            keys = random_keys(rng.randrange(0, 40))
            m, entries = SubjectMap(), {}
            for step in range(rng.randrange(1, 120)):
                key, seq = rng.choice(keys), rng.randrange(0, 2**64)
                m.set(key, seq)
                entries[key] = seq
                if m.root != map_root(entries) or m.count != len(entries):
                    return False, "trial %d step %d: %s != %s" % (trial, step, m.root.hex(), map_root(entries).hex())
        return True, "40 random key sets, every update"
    checks.run("subject map: the incremental root equals the recursive definition after every update (random keys, "
               "updates of present keys, keys differing only in their last bit)", agree)

    def proofs():
        checked = 0
        for trial in range(30):
            keys = random_keys(rng.randrange(1, 60))
            m, entries = SubjectMap(), {}
            for key in keys:
                entries[key] = rng.randrange(0, 2**64)
                m.set(key, entries[key])
            root = m.root
            for key in list(entries) + random_keys(10):
                seq, proof = m.lookup(key)
                want = ("present", entries[key]) if key in entries else ("absent",)
                if seq != entries.get(key) or verify_map_proof(key, root, proof) != want:
                    return False, "trial %d: key %s" % (trial, key.hex())
                siblings, end = proof
                # A proof with one sibling changed, or another seq, shows nothing.
                if siblings:
                    i = rng.randrange(len(siblings))
                    changed = siblings[:i] + [bytes([siblings[i][0] ^ 1]) + siblings[i][1:]] + siblings[i + 1:]
                    if verify_map_proof(key, root, (changed, end)) is not None:
                        return False, "a changed sibling was accepted"
                if end is not None and verify_map_proof(key, root, (siblings, (end[0], end[1] ^ 1))) is not None:
                    return False, "another seq was accepted"
                if verify_map_proof(key, root, (siblings + [EMPTY_HASH], end)) is not None:
                    return False, "an extra sibling was accepted"
                checked += 1
        return True, "%d keys, present and absent" % checked
    checks.run("subject map: proofs of present and absent keys verify against the root; a changed sibling, another seq or an "
               "extra sibling does not", proofs)

    def absence_elsewhere():
        # Alice's leaf, at depth 2 of the tiny map, proves nothing about a key whose path leaves
        # hers above it; the empty map proves every key absent; a one-key map proves every other
        # key absent with no sibling.
        m = SubjectMap()
        for k, seq in ((LEDGER_STREAM, 0), (alice, 7), (bob, 9)):
            m.set(k, seq)
        _, proof = m.lookup(alice)
        elsewhere = bytes([alice[0] ^ 0x40]) + alice[1:]  # bit 1 differs
        one = SubjectMap()
        one.set(bob, 9)
        return (len(proof[0]) == 2 and verify_map_proof(alice, m.root, proof) == ("present", 7)
                and verify_map_proof(elsewhere, m.root, proof) is None
                and verify_map_proof(alice, EMPTY_HASH, ([], None)) == ("absent",)
                and verify_map_proof(alice, one.root, ([], (bob, 9))) == ("absent",)
                and verify_map_proof(alice, m.root, ([EMPTY_HASH] * 129, None)) is None), "ok"
    checks.run("subject map: another key's leaf shows absence only where the paths agree; the empty map; a one-key map; "
               "more than 128 siblings", absence_elsewhere)

    def read_streams():
        # Reading one stream: the newest seq from the map whose root the last event carries, then
        # each streamPrev; the result is exactly the stream's events, for every stream.
        m = SubjectMap()
        for e in events:
            if e.seq == e.cmd + e.cmd_size - 1:
                m.set(stream_key(e.subject), e.seq)
        if m.root.hex() != events[-1].stream_root:
            return False, "the map is not the last event's"
        for key in (LEDGER_STREAM, alice, bob, bytes(15) + b"\x07"):
            seq, proof = m.lookup(key)
            if verify_map_proof(key, m.root, proof) != (("absent",) if seq is None else ("present", seq)):
                return False, "proof"
            found = []
            while seq is not None:
                e = events[seq]
                if e.seq != seq or stream_key(e.subject) != key:
                    return False, "seq %d is not the stream's" % seq
                found.append(seq)
                seq = e.stream_prev
            if found[::-1] != [e.seq for e in events if stream_key(e.subject) == key]:
                return False, "stream %s: %s" % (key.hex(), found)
        return True, "ledger stream [0], alice [1..7], bob [8, 9], an absent key []"
    checks.run("subject map: reading one stream (the newest seq from the map, then each streamPrev) gives exactly the stream's "
               "events, for each stream of the tiny ledger and an absent key", read_streams)

    # subjects.map: its layout for the tiny ledger, and verify checking it.
    data = derive_subject_map(log)
    records = [data[i:i + MAP_RECORD] for i in range(0, len(data), MAP_RECORD)]
    checks.check(records[0] == b"\x01" + bytes(87) and records[1] == b"\x03" + bytes(7) + (1).to_bytes(8, "big") + (1).to_bytes(8, "big")
                 + genesis_root + (1).to_bytes(8, "big") + bytes(24) and len(data) % MAP_RECORD == 0
                 and records[-1][24:56].hex() == events[9].stream_root and records[-1][8:16] == (10).to_bytes(8, "big"),
                 "subjects.map of the tiny ledger, one write per commit: record 0 the genesis leaf (key and seq all zero), "
                 "record 1 its root record (covers 1, refers to 1, one key); the last root record covers 10 with line 10's root",
                 "%d records" % len(records))
    compact = derive_subject_map(log, per="log")
    checks.check(len(compact) == 6 * MAP_RECORD and compact[-MAP_RECORD:][24:56] == data[-MAP_RECORD:][24:56],
                 "subjects.map written in one go: 5 node records (3 leaves, 2 inner) and a root record, the same root")

    def verdict(data, reason=None, checked=True, log=None, head=None):
        def run():
            try:
                r = verify_folder(folder, log=log, head_text=head, subject_map=data)
            except Failure as f:
                return reason is not None and f.line is None and reason in f.reason, str(f)
            return reason is None and r.map_checked == checked, "verified; subjects.map %s" % ("checked" if r.map_checked else "not checked")
        return run

    def at(data, record, offset, value):
        i = record * MAP_RECORD + offset
        return data[:i] + value + data[i + len(value):]

    def flip(data, record, offset):
        i = record * MAP_RECORD + offset
        return data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]

    roots = [i for i, r in enumerate(records) if r[0] == 3]
    last_root = roots[-1]
    # The newest leaf of alice's stream: the map's records of the last write to it.
    alice_leaf = max(i for i, r in enumerate(records) if r[0] == 1 and r[8:24] == alice)
    inner = max(i for i, r in enumerate(records[:last_root]) if r[0] == 2)
    earlier = derive_subject_map(b"".join(line + b"\n" for line in event_lines(log)[:9]))
    cases = [
        ("one that matches the log is checked and passes", data, None, True),
        ("one written in one go is checked and passes", compact, None, True),
        ("its newest root record covering 9 of the 10 records: behind, not checked", data[:roots[-2] * MAP_RECORD + MAP_RECORD], None, False),
        ("a partial record at the end (a torn write): ignored, checked", data + b"\x02" + bytes(40), None, True),
        ("node records after its newest root record (an unfinished write): ignored, checked",
         data + records[alice_leaf] + records[inner], None, True),
        ("an empty file: not checked", b"", None, False),
        ("alice's newest leaf naming an older seq",
         at(data, alice_leaf, 24, (2).to_bytes(8, "big")), "does not hash to the value its parent records", None),
        ("an inner record's hash of a child changed", flip(data, inner, 30), "does not hash to the value its parent records", None),
        ("the newest root record with another root hash",
         flip(data, last_root, 40), "its root %s differs from %s, the root the log's events build"
         % (flip(records[last_root], 0, 40)[24:56].hex(), events[9].stream_root), None),
        ("the map of the first 9 records, its root record claiming 10",
         at(earlier, len(earlier) // MAP_RECORD - 1, 8, (10).to_bytes(8, "big")), "the root the log's events build", None),
        ("the newest root record with a non-zero byte 1", at(data, last_root, 1, b"\x01"), "record %d: not a root record" % last_root, None),
        ("the newest root record referring past the file's end",
         at(data, last_root, 16, (len(records) + 5).to_bytes(8, "big")), "there is no such record", None),
        ("the newest root record referring to the empty subtree with a non-zero hash",
         at(data, last_root, 16, bytes(8)), "a root record's reference and hash disagree", None),
        ("a leaf record with a non-zero unused byte", at(data, alice_leaf, 40, b"\x01"), "a leaf record's unused bytes are not zero", None),
        ("an inner record naming an empty child with a non-zero hash",
         at(data, inner, 8 if records[inner][8:16] != bytes(8) else 16, bytes(8)), "an empty child with a non-zero hash, or the reverse", None),
    ]
    for name, stored, reason, checked in cases:
        checks.run("subjects.map: %s%s" % (name, "" if reason is None else ": fails, no line"), verdict(stored, reason, checked))
    fmt1, head1 = sign_log([dict(parse_canonical(e.body), v=1) for e in events], bytes(range(32)), heads_in_log=True)
    checks.run("subjects.map beside a format-1 ledger is not read", verdict(b"\x03" + bytes(87), None, False, fmt1, head1))


def check_folder(checks, folder):
    try:
        r = verify_folder(folder)
    except Failure as f:
        checks.check(False, "ledger %s verifies" % folder, "first bad entry: %s" % f)
        return
    except (OSError, ValueError) as exc:
        checks.check(False, "ledger %s verifies" % folder, str(exc))
        return
    checks.check(True, "ledger %s verifies" % folder, "ledger %r, %d events, %d subjects" % (
        r.ledger_name, r.events, len(r.replay.subjects)))
    print("      head      seq %d %s" % r.head)
    print("      recorded  seq %d %s (%s)" % (r.recorded_head + ("the log's newest head line" if r.heads_in_log else "the head file",)))
    print("      key       %s (kid %s)%s" % (r.public_key.hex(), r.key_id, ", the genesis key" if len(r.key_schedule.periods) > 1 else ""))
    for start, key, kid in r.key_schedule.periods[1:]:
        print("                %s (kid %s), in force from seq %d (key.rotated at seq %d)" % (key.hex(), kid, start, start - 1))
    for seq, kid, since, until, attested in r.key_schedule.revocations:
        print("      revoked   kid %s, compromised from seq %d (key.revoked at seq %d): its events of seq %d-%d re-attested"
              % (kid, since, seq, since, until))
    print("      " + describe_torn(r.torn))
    print("      catalogue versions in force from seq %s" % ", ".join(str(seq) for seq, _, _ in r.replay.versions))
    print("      derived   %s" % ("%s checked" % r.derived_checked if r.derived_checked == "lines.idx and tree.hashes" else
                                 "lines.idx checked, tree.hashes not (absent, or behind the log: the next write rebuilds it)"
                                 if r.derived_checked else "lines.idx and tree.hashes not checked (absent, or behind the log: the next write rebuilds them)"))
    if r.version >= 2:
        print("      map       subjects.map %s; root of the log %s, %d streams" % (
            "checked" if r.map_checked else "not checked (absent, or behind the log: the next write brings it up to date)",
            r.streams.map.root.hex(), len(r.streams.newest)))
    else:
        print("      format    1 (no streams, no subject map)")
    if r.sealed != (0, 0):
        print("      evidence  %d sealed reference(s) opened with their subjects' records%s" % (
            r.sealed[0], ", %d of erased subjects left sealed (their keys are gone)" % r.sealed[1] if r.sealed[1] else ""))
    # Not needed to verify the log, but read by every operation that names a subject.
    if os.path.isfile(os.path.join(folder, "subjects.jsonl")):
        def subjects():
            salts = read_subjects(folder)
            # Verify (step 10) has checked each record's signature in format 2.
            signed = ", each signed by the ledger's key" if len(r.key_schedule.periods) == 1 else ", each signed by one of the ledger's keys"
            return True, "%d subject ids, each once%s" % (len(salts), signed if r.version >= 2 else "")
        checks.run("subjects.jsonl is well formed", subjects)


def check_erasure(checks, here):
    """Erasure (Spec/erasure.md): a subject.erased event appended to the tiny ledger, with the
    subject's record removed from subjects.jsonl; what may and may not follow."""
    folder = os.path.join(here, "tiny-ledger")
    seed = bytes(range(32))
    tiny = read_file(folder, "ledger.jsonl")
    subjects = read_file(folder, "subjects.jsonl")
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in event_lines(tiny)]
    kid, alice, bob = bodies[0]["kid"], bodies[1]["subject"], bodies[8]["subject"]
    without = lambda who: b"".join(line + b"\n" for line in subjects.split(b"\n")[:-1] if b'"id":"%s"' % who.encode() not in line)

    def erased(seq, subject, **members):
        b = {"v": 2, "seq": seq, "at": "2026-01-15T09:00:%02d.000Z" % (seq - 5), "actor": "dpo", "cmd": seq, "cmdSize": 1, "kid": kid,
             "type": "subject.erased", "subject": subject}
        b.update(members)
        return b

    def give(seq, subject):
        return {"v": 2, "seq": seq, "at": "2026-01-15T09:00:%02d.000Z" % (seq - 5), "actor": "self", "cmd": seq, "cmdSize": 1, "kid": kid,
                "type": "consent.given", "subject": subject, "feature": 1, "consent": "required", "version": "1.0"}

    # Bob's sealed reference (seq 9) with a byte of its box flipped: it no longer opens under his
    # key, which verify notices only while his record, and so his key, exists.
    garbled = [dict(b) for b in bodies]
    raw = bytearray.fromhex(garbled[9]["sealedEvidence"])
    raw[-1] ^= 0x01
    garbled[9]["sealedEvidence"] = raw.hex()
    cases = [
        ("alice erased at seq 10, her record gone", [erased(10, alice, reason="request 2026-118")], without("alice"), None, None),
        ("alice erased without a reason", [erased(10, alice)], without("alice"), None, None),
        ("alice erased; her record's line left as spaces (an erasure cut short after the overwrite)", [erased(10, alice)],
         without("alice") + b" " * 80 + b"\n", None, None),
        ("bob erased after his evidence-carrying grant", [erased(10, bob)], without("bob"), None, None),
        ("bob erased, his sealed reference at seq 9 garbled (an erased subject's references are not opened: his key is gone)",
         [erased(10, bob)], without("bob"), None, None, garbled),
        ("alice erased, bob's sealed reference at seq 9 garbled (bob's record gives his key)", [erased(10, alice)], without("alice"), 10,
         "the sealed evidence reference does not open under the subject's key (the key of the subject's record in subjects.jsonl): "
         "the event or the record is not what the ledger wrote", garbled),
        ("alice erased, her record still there", [erased(10, alice)], subjects, None,
         "the subject of pseudonym %s was erased, but a record of it remains in subjects.jsonl" % alice),
        ("an event of alice after her erasure", [erased(10, alice), give(11, alice)], without("alice"), 12,
         "the subject was erased at seq 10: no event of theirs may follow"),
        ("alice erased twice", [erased(10, alice), erased(11, alice)], without("alice"), 12,
         "the subject was erased at seq 10: no event of theirs may follow"),
        ("a reason of 201 bytes", [erased(10, alice, reason="x" * 201)], without("alice"), 11,
         "member 'reason': the reason has 201 bytes, more than 200"),
        ("a reason with a line feed", [erased(10, alice, reason="a\nb")], without("alice"), 11,
         "member 'reason': the reason contains a control character"),
        ("an empty reason", [erased(10, alice, reason="")], without("alice"), 11, "member 'reason': the reason is empty"),
        ("an erasure naming a feature", [erased(10, alice, feature=1)], without("alice"), 11,
         "member 'feature' does not belong to a 'subject.erased' event"),
        ("an erasure without its subject", [{k: v for k, v in erased(10, alice).items() if k != "subject"}], without("alice"), 11,
         "member 'subject' is missing from a 'subject.erased' event"),
    ]
    for case in cases:
        name, appended, subject_data, line, reason = case[:5]
        base = case[5] if len(case) > 5 else bodies  # the tiny ledger's bodies, or an edited copy

        def run(appended=appended, subject_data=subject_data, line=line, reason=reason, base=base):
            log, head = sign_log(base + appended, seed, heads_in_log=True)
            try:
                r = verify_folder(folder, log=log, head_text=head, derived=False, subjects=subject_data)
            except Failure as f:
                return reason is not None and f.reason.endswith(reason) and f.line == line, str(f)
            erased_refs = sorted(ref for ref, st in r.replay.subjects.items() if st.erased_at is not None)
            return reason is None, "accepted; erased: %s; sealed references: %d opened, %d left sealed" % ((", ".join(erased_refs),) + r.sealed)
        checks.run("erasure: %s: %s" % (name, "accepted" if reason is None else "refused (%s)" % reason), run)


def check_rotation(checks, here):
    """Key rotation and revocation (Spec/ledger-format.md, Key rotation; the vector rotated-ledger/):
    the vector verifies and is reproduced with its two seeds, and derived copies, re-signed so that
    each breaks one rule of the key schedule, fail where the spec says."""
    folder = os.path.join(here, "rotated-ledger")
    genesis_seed, new_seed, other_seed = bytes(range(32)), bytes(range(32, 64)), bytes(range(64, 96))
    genesis_key, new_key, other_key = (ed25519_public_key(s) for s in (genesis_seed, new_seed, other_seed))
    genesis_kid, new_kid, other_kid = key_id(genesis_key), key_id(new_key), key_id(other_key)
    log = read_file(folder, "ledger.jsonl")
    file_lines = log.split(b"\n")[:-1]
    events = event_lines(log)

    def bodies_of(data):
        return [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in event_lines(data)]
    bodies = bodies_of(log)
    tiny_folder = os.path.join(here, "tiny-ledger")
    tiny = bodies_of(read_file(tiny_folder, "ledger.jsonl"))
    try:
        report = verify_folder(folder)
    except Failure as f:
        checks.check(False, "rotated-ledger verifies", str(f))
        return
    periods = [(start, key) for start, key, _ in report.key_schedule.periods]
    checks.check(report.events == 11 and periods == [(0, genesis_key), (7, new_key)],
                 "rotated-ledger verifies: 11 events, key schedule [(0, genesis key), (7, key of seed 20..3f)]",
                 ", ".join("%s from seq %d" % (kid, start) for start, _, kid in report.key_schedule.periods))
    window = [e.hash for e in report.records[3:7]]
    checks.check(report.key_schedule.revocations == [(10, genesis_kid, 3, 6, window)],
                 "rotated-ledger: one revocation (seq 10) of the genesis key, compromised from seq 3 to its rotation (seq 6), "
                 "attesting the body hashes of seq 3-6", repr([r[:4] for r in report.key_schedule.revocations]))
    checks.check(new_kid == "24f6ed6acbfe1009" and new_key.hex().startswith("29acbae1") and genesis_kid == "56475aa75463474c",
                 "the key of seed 20..3f is 29acbae1..., key id 24f6ed6acbfe1009 (Test vectors, rotated-ledger/)", new_key.hex())
    public = hex_decode(trimmed_text(read_file(folder, "public.key")), 32)
    secret = hex_decode(trimmed_text(read_file(folder, "secret.key")), 32)
    checks.check(public == genesis_key == report.public_key and report.key_id == genesis_kid,
                 "rotated-ledger: public.key keeps the genesis key (the key of seed 00..1f)", public.hex() if public else "")
    checks.check(secret == new_seed and ed25519_public_key(secret) == new_key,
                 "rotated-ledger: secret.key holds the seed 20..3f, the key in force", secret.hex() if secret else "")
    for name in ("public.key", "secret.key"):
        data = read_file(folder, name)
        checks.check(len(data) == 65 and data.endswith(b"\n") and hex_decode(data[:-1].decode(), 32) is not None,
                     "rotated-ledger: %s is 64 lowercase hex digits and a newline" % name)

    # The rotation (line 7, seq 6): a ledger event alone in its command, signed by the key it
    # retires; its handover is the new key's signature over H, spelt out here from the spec.
    rotation = report.records[6]
    h = (b"consentledger-key-handover-v1\n" + b"consentledger.example/rotated" + b"\n" + rotation.prev.encode() + b"\n"
         + genesis_key.hex().encode() + b"\n" + new_key.hex().encode() + b"\n")
    checks.check(rotation.type == "key.rotated" and (rotation.seq, rotation.cmd, rotation.cmd_size) == (6, 6, 1)
                 and rotation.subject is None and rotation.kid == genesis_kid and rotation.public_key == new_key.hex()
                 and rotation.prev == report.records[5].hash and rotation.at == "2026-01-15T09:00:02.000Z"
                 and rotation.actor == "vector-generator",
                 "line 7 (seq 6) is a key.rotated event alone in its command, kid of the genesis key, naming the new key")
    checks.check(h == handover_message(report.ledger_name, rotation.prev, genesis_key, new_key)
                 and ed25519_sign(new_seed, h).hex() == rotation.handover,
                 "line 7: the handover is reproduced by signing H with the seed 20..3f (H = context, ledger, prev, old key, new key)",
                 "SHA-256(H) %s" % sha256(h).hex())
    handover = bytes.fromhex(rotation.handover)
    checks.check(not ed25519_verify(genesis_key, h, handover)
                 and not ed25519_verify(new_key, handover_message(tiny[0]["ledger"], rotation.prev, genesis_key, new_key), handover)
                 and not ed25519_verify(new_key, handover_message(report.ledger_name, report.records[4].hash, genesis_key, new_key), handover),
                 "line 7: the handover verifies neither with the old key nor for another ledger name or another prev")
    for e in report.records:
        seed, kid, which = (genesis_seed, genesis_kid, "genesis") if e.seq <= 6 else (new_seed, new_kid, "new")
        checks.check(e.kid == kid and ed25519_sign(seed, SIGNING_CONTEXT + e.body) == e.signature,
                     "rotated-ledger line %d (seq %d, %s): kid %s, signature reproduced with the %s seed" % (e.line, e.seq, e.type, kid, which))
    same = lambda a, b, *left_out: {k: v for k, v in a.items() if k not in left_out} == {k: v for k, v in b.items() if k not in left_out}
    checks.check(same(bodies[0], tiny[0], "ledger") and all(same(bodies[i], tiny[i], "prev") for i in range(1, 6)),
                 "rotated-ledger lines 1-6 are the tiny ledger's events (but for the ledger's name and the prev links it changes)")

    # Heads: each signed with the key in force for seq SIZE, the key of the next event. The head
    # of size 6 (the rotation is seq 6) is the genesis key's; from size 7 on, the new key's.
    def head_lines():
        sizes, count = [], 0
        for line in file_lines:
            if not is_head_line(line):
                count += 1
                continue
            seed = genesis_seed if count <= 6 else new_seed
            e = report.records[count - 1]
            if line != head_line(signed_head_note(report.ledger_name, seed, count, tree_root([leaf_hash(x) for x in events[:count]]), e.hash)):
                return False, "the head line after %d events" % count
            sizes.append(count)
        return sizes == [1, 6, 7, 9, 10, 11], "head lines of sizes %s" % sizes
    checks.run("rotated-ledger: every head line is reproduced byte for byte, sizes 1 and 6 with the genesis seed, 7, 9, 10 and 11 "
               "with the new seed", head_lines)
    newest = parse_canonical(file_lines[-1])["head"]
    checks.check(note_signature_problem(newest, report.ledger_name, new_key) is None
                 and note_signature_problem(newest, report.ledger_name, genesis_key) is not None,
                 "rotated-ledger: the newest head (size 11) verifies with the new key and not with the genesis key",
                 note_signature_problem(newest, report.ledger_name, genesis_key) or "")
    revoking = [dict(b) for b in bodies]
    revoking[6]["@next"] = new_seed
    checks.check(sign_log(revoking, genesis_seed, heads_in_log=True)[0] == log,
                 "rotated-ledger: ledger.jsonl is reproduced byte for byte by a writer of its bodies that hands over to the seed 20..3f "
                 "at seq 6 (this file's sign_log)")
    # The first ten events: the rotation without the revocation, which the rotation cases below
    # extend.
    rotating = revoking[:10]

    # The revocation (line 11, seq 10): a ledger event alone in its command, signed by the key in
    # force (the new one), naming the genesis key, compromised from seq 3; its `attested` are the
    # body hashes of seq 3 to 6 (the rotation that retired the key), spelt out here.
    revocation = report.records[10]
    expected = {"v": 2, "seq": 10, "at": "2026-01-15T09:00:05.000Z", "actor": "vector-generator", "cmd": 10, "cmdSize": 1,
                "kid": new_kid, "type": "key.revoked", "publicKey": genesis_key.hex(), "compromisedSince": 3,
                "attested": [sha256(report.records[s].body).hex() for s in range(3, 7)], "prev": report.records[9].hash,
                "streamPrev": 6, "streamRoot": report.streams.map.root.hex()}
    revocation_body = serialize(expected)
    checks.check(events[10] == LINE_PREFIX + revocation_body + SIG_PREFIX + ed25519_sign(new_seed, SIGNING_CONTEXT + revocation_body).hex().encode() + b'"}',
                 "line 11 (seq 10) is reproduced byte for byte: a key.revoked event alone in its command, kid of the new key, naming the "
                 "genesis key, compromisedSince 3, attested = SHA-256 of the bodies of seq 3-6, signed with the seed 20..3f",
                 "attested %s" % ", ".join(h[:8] for h in expected["attested"]))
    checks.check(revocation.type == "key.revoked" and revocation.subject is None and revocation.compromised_since == 3
                 and revocation.attested == [e.hash for e in report.records[3:7]] and revocation.stream_prev == 6,
                 "line 11: the body reader reads publicKey, compromisedSince and attested; the revocation is in the ledger stream "
                 "(streamPrev 6, the rotation)")
    checks.check(sign_log(rotating + [dict({k: v for k, v in bodies[10].items() if k != "attested"}, **{"@attest": (3, 6)})],
                          genesis_seed, heads_in_log=True)[0] == log,
                 "rotated-ledger: a writer that re-attests the events 3-6 it wrote (their body hashes, in order) writes ledger.jsonl "
                 "byte for byte")

    def with_derived():
        index, tree = derive_files(log)
        r = verify_folder(folder, derived=(index, tree), subject_map=derive_subject_map(log))
        entries = [index[n * INDEX_ENTRY:(n + 1) * INDEX_ENTRY] for n in (6, 10)]
        return (r.derived_checked == "lines.idx and tree.hashes" and r.map_checked and all(e[16:] == NO_SUBJECT for e in entries)
                and r.streams.newest[LEDGER_STREAM] == 10), \
            "the rotation's and the revocation's lines.idx entries name no subject; the ledger stream's newest is seq 10"
    checks.run("rotated-ledger with its derived files and subject map verifies: the rotation and the revocation are in the ledger "
               "stream", with_derived)

    # Subject records keep the signature of the key in force when they were written, unless a
    # revocation of that key signed them again (Key rotation, Revocation: Records): bob's is the
    # new key's (his first command is after the rotation); alice's, first signed by the genesis
    # key, was signed again with the new key by the revocation (seq 10).
    records = read_subject_records(folder)
    message = {i: subject_record_message(i, r.salt) for i, r in records.items()}
    checks.check(ed25519_sign(new_seed, message["alice"]) == records["alice"].sig
                 and ed25519_sign(new_seed, message["bob"]) == records["bob"].sig
                 and not any(ed25519_verify(genesis_key, message[i], records[i].sig) for i in ("alice", "bob")),
                 "rotated-ledger subjects.jsonl: both records are signed with the new seed, reproduced: bob's written after the "
                 "rotation, alice's signed again by the revocation (seq 10)")
    subject_lines = read_file(folder, "subjects.jsonl").split(b"\n")[:-1]

    def record(subject_id, seed):
        salt = records[subject_id].salt
        return serialize({"id": subject_id, "salt": salt.hex(), "sig": ed25519_sign(seed, subject_record_message(subject_id, salt)).hex()}) + b"\n"

    def verdict(data, line, seq, reason, ledger=folder, **options):
        """Verifies `data` as the log of `ledger`: `reason` None to verify, else the exact reason
        expected, with `line` and `seq`."""
        def run():
            try:
                r = verify_folder(ledger, log=data, derived=False, subject_map=False, **options)
            except Failure as f:
                return reason is not None and f.reason == reason and (f.line, f.seq) == (line, seq), str(f)
            return reason is None, "verified, %d events, keys %s" % (
                r.events, ", ".join("%s from seq %d" % (kid, start) for start, _, kid in r.key_schedule.periods))
        return run
    no_signature = "does not carry the ledger key's signature over its id and salt: it was altered, swapped or made up"
    def revoked_record(subject_id, kid=genesis_kid, at=10):
        """Using a record, the third message: the record of `subject_id` is signed only by key
        `kid`, which the revocation at seq `at` names."""
        return ('the subject record of "%s" in subjects.jsonl of %s is signed only by key %s, which the ledger revoked at seq %d: '
                "the revocation signed every record it could vouch for again, so this one was written or changed with the leaked key"
                % (subject_id, folder, kid, at))
    alice_genesis, bob_genesis = record("alice", genesis_seed), record("bob", genesis_seed)
    checks.check(alice_genesis == b'{"id":"alice","salt":"01010101010101010101010101010101","sig":"'
                 + ed25519_sign(genesis_seed, message["alice"]).hex().encode() + b'"}\n'
                 and ed25519_verify(genesis_key, message["alice"], bytes.fromhex(parse_canonical(alice_genesis[:-1])["sig"])),
                 "rotated-ledger: alice's record as the genesis key signed it (before the revocation signed it again) is reproduced "
                 "with the genesis seed")
    # The log cut before the revocation (10 events, seq 0-9, and the head of size 10): the genesis
    # key is retired but not revoked yet, so its records are still usable.
    before_revocation = b"".join(line + b"\n" for line in file_lines[:file_lines.index(events[9]) + 2])
    checks.check(before_revocation == b"".join(line + b"\n" for line in file_lines[:-2]) and len(event_lines(before_revocation)) == 10
                 and is_head_line(file_lines[file_lines.index(events[9]) + 1]),
                 "rotated-ledger cut before its revocation: the first 10 events and the head of size 10")
    checks.run("rotated-ledger: alice's record as the genesis key signed it is refused at step 10: the genesis key, which signed "
               "it, was revoked at seq 10 (no line, no seq, as the other record failures)",
               verdict(log, None, None, revoked_record("alice"), subjects=alice_genesis + subject_lines[1] + b"\n"))
    checks.run("rotated-ledger: bob's record signed with the revoked genesis key after the revocation is refused at step 10 "
               "(the revoked-key message)",
               verdict(log, None, None, revoked_record("bob"), subjects=subject_lines[0] + b"\n" + bob_genesis))
    checks.run("rotated-ledger: with both records signed by the revoked key, alice's (first in the file) is named",
               verdict(log, None, None, revoked_record("alice"), subjects=alice_genesis + bob_genesis))
    checks.run("rotated-ledger cut before its revocation (10 events): alice's record as the genesis key signed it verifies "
               "(the genesis key is retired, not revoked: any key of the schedule, step 10)",
               verdict(before_revocation, None, None, None, subjects=alice_genesis + subject_lines[1] + b"\n"))
    checks.run("rotated-ledger cut before its revocation (10 events): bob's record re-signed with the genesis key verifies "
               "(any key of the schedule, step 10)",
               verdict(before_revocation, None, None, None, subjects=subject_lines[0] + b"\n" + bob_genesis))
    checks.run("rotated-ledger cut before its revocation (10 events): the vector's records, signed by the new key, verify",
               verdict(before_revocation, None, None, None))
    checks.run("rotated-ledger: alice's record signed by a key the ledger never used fails (step 10)",
               verdict(log, None, None, 'the subject record of "alice" in subjects.jsonl of %s %s' % (folder, no_signature),
                       subjects=record("alice", other_seed) + subject_lines[1] + b"\n"))
    checks.run("rotated-ledger: a record with a salt changed, signed by no key, gets the no-signature message, not the "
               "revoked-key one (step 10)",
               verdict(log, None, None, 'the subject record of "alice" in subjects.jsonl of %s %s' % (folder, no_signature),
                       subjects=alice_genesis.replace(b"0101010101010101", b"0101010101010102", 1) + subject_lines[1] + b"\n"))
    before_rotation = b"".join(line + b"\n" for line in file_lines[:file_lines.index(events[5]) + 2])
    checks.run("rotated-ledger cut before its rotation (6 events): alice's record, signed by the new key (the revocation signed "
               "it again), is signed by no key of that schedule, the genesis key alone (step 10)",
               verdict(before_rotation, None, None, 'the subject record of "alice" in subjects.jsonl of %s %s' % (folder, no_signature)))
    checks.run("rotated-ledger cut before its rotation (6 events): alice's record as the genesis key signed it verifies; bob's, "
               "signed by the new key, is then refused (step 10)",
               verdict(before_rotation, None, None, 'the subject record of "bob" in subjects.jsonl of %s %s' % (folder, no_signature),
                       subjects=alice_genesis + subject_lines[1] + b"\n"))

    # The body reader on the rotation's body.
    body = parse_canonical(rotation.body)

    def reads_from(base, reason, members=None, without=(), raw=None):
        """The body reader refuses `base` with `members` changed and `without` left out (or the
        bytes `raw`) for `reason`."""
        def run():
            b = {k: v for k, v in dict(base, **(members or {})).items() if k not in without}
            try:
                read_body(raw if raw is not None else serialize(b))
            except DecodeError as e:
                return str(e) == reason, str(e)
            return False, "read"
        return run

    def reads(reason, **kw):
        """The body reader refuses the rotation's body so changed, for `reason`."""
        return reads_from(body, reason, **kw)
    rotation_v1 = {k: v for k, v in body.items() if k not in STREAM_MEMBERS}
    handover_member = b'"handover":"%s",' % rotation.handover.encode()
    kid_member = b'"kid":"%s",' % genesis_kid.encode()
    swapped = rotation.body.replace(handover_member, b"").replace(kid_member, kid_member + handover_member)
    for name, reason, kw in [
        ("in a format-1 body", "a 'key.rotated' event belongs only to format version 2", dict(raw=serialize(dict(rotation_v1, v=1)))),
        ("with 'publicKey' in uppercase hex", "member 'publicKey' is not 64 lowercase hex digits", dict(members={"publicKey": new_key.hex().upper()})),
        ("with 'publicKey' of 62 digits", "member 'publicKey' is not 64 lowercase hex digits", dict(members={"publicKey": new_key.hex()[:62]})),
        ("with 'publicKey' an integer", "member 'publicKey' must be a string", dict(members={"publicKey": 7})),
        ("with 'handover' of 126 digits", "member 'handover' is not 128 lowercase hex digits", dict(members={"handover": rotation.handover[:126]})),
        ("with 'handover' in uppercase hex", "member 'handover' is not 128 lowercase hex digits", dict(members={"handover": rotation.handover.upper()})),
        ("with 'handover' an array", "member 'handover' must be a string", dict(members={"handover": []})),
        ("without 'handover'", "member 'handover' is missing from a 'key.rotated' event", dict(without=("handover",))),
        ("without 'publicKey' and 'handover'", "member 'handover' is missing from a 'key.rotated' event", dict(without=("handover", "publicKey"))),
        ("with a subject", "member 'subject' does not belong to a 'key.rotated' event", dict(members={"subject": bodies[1]["subject"]})),
        ("with 'handover' after 'kid'", "body is not canonical JSON: byte %d: member 'handover' is out of canonical (RFC 8785) order"
         % (swapped.index(b'"handover"') + len(LINE_PREFIX) + 1), dict(raw=swapped)),
    ]:
        checks.run("body reader: a key.rotated event %s is refused (%s)" % (name, reason), reads(reason, **kw))
    checks.run("body reader: 'handover' on a consent.given event does not belong to it",
               reads("member 'handover' does not belong to a 'consent.given' event",
                     raw=serialize(dict(bodies[1], handover=rotation.handover))))

    # The body reader on the revocation's body (Reading a body, items 1.2, 1.3, 2.2, 2.3, 2.6b).
    revoked_body = parse_canonical(revocation.body)

    def reads_revocation(reason, **kw):
        return reads_from(revoked_body, reason, **kw)
    revocation_v1 = {k: v for k, v in revoked_body.items() if k not in STREAM_MEMBERS}
    attested = revoked_body["attested"]
    spaced = revocation.body.replace(b'"attested":[', b'"attested":[ ')
    reordered = revocation.body.replace(b'"compromisedSince":3,', b"").replace(b'"attested":', b'"compromisedSince":3,"attested":')
    not_hex = "member 'attested' holds something that is not 64 lowercase hex digits"
    not_array = "member 'attested' must be a non-empty array of event hashes"
    for name, reason, kw in [
        ("in a format-1 body", "a 'key.revoked' event belongs only to format version 2", dict(raw=serialize(dict(revocation_v1, v=1)))),
        ("in a format-1 body with 'publicKey' in uppercase (the version is checked first)", "a 'key.revoked' event belongs only to "
         "format version 2", dict(raw=serialize(dict(revocation_v1, v=1, publicKey=genesis_key.hex().upper())))),
        ("with 'publicKey' in uppercase hex", "member 'publicKey' is not 64 lowercase hex digits", dict(members={"publicKey": genesis_key.hex().upper()})),
        ("with 'publicKey' of 62 digits and 'compromisedSince' -1 (publicKey first)", "member 'publicKey' is not 64 lowercase hex digits",
         dict(members={"publicKey": genesis_key.hex()[:62], "compromisedSince": -1})),
        ("with 'compromisedSince' -1", "member 'compromisedSince' is missing or negative", dict(members={"compromisedSince": -1})),
        ("with 'compromisedSince' -1 and 'attested' empty (compromisedSince first)", "member 'compromisedSince' is missing or negative",
         dict(members={"compromisedSince": -1, "attested": []})),
        ("with 'compromisedSince' a string", "member 'compromisedSince' must be an integer", dict(members={"compromisedSince": "3"})),
        ("with 'compromisedSince' 3.0", "body is not canonical JSON: byte %d: only integers are allowed here"
         % (revocation.body.index(b'"compromisedSince":3') + len(b'"compromisedSince":') + len(LINE_PREFIX) + 1),
         dict(raw=revocation.body.replace(b'"compromisedSince":3,', b'"compromisedSince":3.0,'))),
        ("with 'attested' empty", not_array, dict(members={"attested": []})),
        ("with 'attested' a string", not_array, dict(members={"attested": attested[0]})),
        ("with 'attested' an object", not_array, dict(members={"attested": {"3": attested[0]}})),
        ("with 'attested' null", not_array, dict(members={"attested": None})),
        ("with 'attested' holding an integer", not_hex, dict(members={"attested": attested[:3] + [7]})),
        ("with 'attested' holding a hash in uppercase hex", not_hex, dict(members={"attested": attested[:3] + [attested[3].upper()]})),
        ("with 'attested' holding 62 hex digits", not_hex, dict(members={"attested": [attested[0][:62]] + attested[1:]})),
        ("with 'attested' holding a nested array", not_hex, dict(members={"attested": [attested]})),
        ("with 'attested' holding null", not_hex, dict(members={"attested": [None]})),
        ("with a space after 'attested''s '['", "body is not canonical JSON: byte %d: unexpected character ' '"
         % (spaced.index(b"[ ") + 1 + len(LINE_PREFIX) + 1), dict(raw=spaced)),
        ("with 'compromisedSince' before 'attested'", "body is not canonical JSON: byte %d: member 'attested' is out of canonical "
         "(RFC 8785) order" % (reordered.index(b'"attested"') + len(LINE_PREFIX) + 1), dict(raw=reordered)),
        ("without 'attested'", "member 'attested' is missing from a 'key.revoked' event", dict(without=("attested",))),
        ("without 'compromisedSince' and 'publicKey'", "member 'compromisedSince' is missing from a 'key.revoked' event",
         dict(without=("compromisedSince", "publicKey"))),
        ("without 'publicKey'", "member 'publicKey' is missing from a 'key.revoked' event", dict(without=("publicKey",))),
        ("with a 'handover'", "member 'handover' does not belong to a 'key.revoked' event", dict(members={"handover": rotation.handover})),
        ("with a subject", "member 'subject' does not belong to a 'key.revoked' event", dict(members={"subject": bodies[1]["subject"]})),
        ("of type 'key.revoke'", "unknown event type 'key.revoke'", dict(members={"type": "key.revoke"})),
    ]:
        checks.run("body reader: a key.revoked event %s is refused (%s)" % (name, reason), reads_revocation(reason, **kw))

    def zeros_read():
        e = read_body(serialize(dict(revoked_body, attested=["0" * 64] * 5, compromisedSince=99)))
        return (e.attested, e.compromised_since, e.public_key) == (["0" * 64] * 5, 99, genesis_key.hex()), "read"
    checks.run("body reader: a key.revoked event attesting hashes of no event, for a window of another length, is read (the key "
               "schedule and step 6a check them)", zeros_read)
    for member, value, etype, base in (("attested", attested, "key.rotated", body), ("compromisedSince", 3, "key.rotated", body),
                                       ("compromisedSince", 3, "consent.given", bodies[1]), ("attested", attested, "ledger.created", bodies[0])):
        checks.run("body reader: '%s' on a %s event does not belong to it" % (member, etype),
                   reads("member '%s' does not belong to a '%s' event" % (member, etype), raw=serialize(dict(base, **{member: value}))))

    # Derived ledgers. `rotating` is the vector's bodies with the handover to the seed 20..3f at
    # seq 6; each case changes it, sign_log re-signs (with the key in force for each event and
    # head, as a writer does) and the reason expected is the reference's, with its line and seq.
    def build(change):
        b = [dict(x) for x in rotating]
        b = change(b) or b
        return sign_log(b, genesis_seed, heads_in_log=True)[0]

    def edit(i, **members):
        def change(b):
            b[i].update(members)
        return change

    def appended(*extra):
        def change(b):
            return b + [dict(x) for x in extra]
        return change

    def rotation_to(seq, seed, **members):
        """A key.rotated body at `seq` (a command of its own) handing over to the key of `seed`,
        signed by the key in force (the new key of the vector, unless `members` say otherwise)."""
        x = {"v": 2, "seq": seq, "at": "2026-01-15T09:00:05.000Z", "actor": "vector-generator", "cmd": seq, "cmdSize": 1,
             "kid": new_kid, "type": "key.rotated", "@next": seed}
        x.update(members)
        return x

    def grant(seq, kid, **members):
        """Bob gives timeline's optional-a (seq `seq`, a command of its own)."""
        x = {"v": 2, "seq": seq, "at": "2026-01-15T09:00:06.000Z", "actor": "self", "cmd": seq, "cmdSize": 1, "kid": kid,
             "type": "consent.given", "subject": bodies[9]["subject"], "feature": 2, "consent": "optional-a", "version": "1.0"}
        x.update(members)
        return x

    def resign_head(data, size, seed):
        """`data` with its head line of `size` signed with `seed` instead (its text unchanged)."""
        out = []
        for line in data.split(b"\n")[:-1]:
            if is_head_line(line):
                note = parse_canonical(line)["head"]
                origin, n, root = read_head_note(note)
                if n == size:
                    line = head_line(signed_head_note(origin, seed, n, root, note.split("\n")[3][6:]))
            out.append(line + b"\n")
        return b"".join(out)

    retired = "signed with key id %s (a key this ledger has rotated away from), not the ledger's key in force for this event, %s"
    # Line 8 re-signed by the new key but claiming seq 3: item 2 (the key in force for the seq it
    # claims, the genesis key) comes before item 5 (seq), and the new key is no retired key.
    moved = serialize(dict({k: v for k, v in bodies[7].items() if k != "streamPrev"}, seq=3, cmd=3, cmdSize=1))
    moved = log.replace(events[7], LINE_PREFIX + moved + SIG_PREFIX + ed25519_sign(new_seed, SIGNING_CONTEXT + moved).hex().encode() + b'"}')
    third = appended(rotation_to(10, other_seed), grant(11, other_kid))
    cases = [
        # (a) An event after the rotation signed by the key it retired.
        ("(a) the last event (seq 9) re-signed with the retired genesis key and its kid",
         build(edit(9, kid=genesis_kid, **{"@seed": genesis_seed})), 10, 9, retired % (genesis_kid, new_kid)),
        ("the first event after the rotation (seq 7) re-signed with the retired genesis key and its kid",
         build(edit(7, kid=genesis_kid, **{"@seed": genesis_seed})), 8, 7, retired % (genesis_kid, new_kid)),
        ("seq 7 signed with the genesis key but carrying the new key's kid",
         build(edit(7, **{"@seed": genesis_seed})), 8, 7, "signature does not verify with the ledger's public key %s" % new_kid),
        ("the rotation itself signed by the new key with its kid (the key it retires signs it)",
         build(edit(6, kid=new_kid, **{"@seed": new_seed})), 7, 6,
         "signed with key id %s, not the ledger's key in force for this event, %s" % (new_kid, genesis_kid)),
        ("after a second rotation (seq 10, to the key of seed 40..5f), an event signed by the first rotation's key",
         build(appended(rotation_to(10, other_seed), grant(11, new_kid, **{"@seed": new_seed}))), 12, 11, retired % (new_kid, other_kid)),
        ("line 8 re-signed by the new key but claiming seq 3, before the rotation", moved, 8, 3,
         "signed with key id %s, not the ledger's key in force for this event, %s" % (new_kid, genesis_kid)),
        # (b) A handover another key signed, or made for another point of the log.
        ("(b) the rotation's handover signed by another key (seed 40..5f)",
         build(edit(6, **{"@handover": other_seed})), 7, 6,
         "the key rotation's handover signature does not verify with the new key %s" % new_kid),
        ("the rotation's handover signed by the old key (the genesis seed)",
         build(edit(6, **{"@handover": genesis_seed})), 7, 6,
         "the key rotation's handover signature does not verify with the new key %s" % new_kid),
        ("the vector's handover copied into a rotation one event later (another prev)",
         build(lambda b: b[:6] + [grant(6, genesis_kid, at="2026-01-15T09:00:01.000Z", consent="required", feature=1),
                                  dict(b[6], seq=7, cmd=7, **{"@handover": rotation.handover})]
               + [dict(x, seq=x["seq"] + 1, cmd=x["cmd"] + 1, **({"cause": x["cause"] + 1} if "cause" in x else {})) for x in b[7:]]),
         8, 7, "the key rotation's handover signature does not verify with the new key %s" % new_kid),
        # (c) A key the ledger has used before.
        ("(c) the rotation naming the genesis key again (and later events signed by it)",
         build(lambda b: b[:6] + [dict(b[6], publicKey=genesis_key.hex(), **{"@next": genesis_seed})]
               + [dict(x, kid=genesis_kid) for x in b[7:]]),
         7, 6, "the key rotation names key %s, which this ledger has used before" % genesis_kid),
        ("a second rotation (seq 10) back to the genesis key",
         build(appended(rotation_to(10, genesis_seed), grant(11, genesis_kid))), 11, 10,
         "the key rotation names key %s, which this ledger has used before" % genesis_kid),
        ("a second rotation (seq 10) naming the key in force",
         build(appended(rotation_to(10, new_seed), grant(11, new_kid))), 11, 10,
         "the key rotation names key %s, which this ledger has used before" % new_kid),
        # (d) Heads signed by a key not in force at their size.
        ("(d) the head of size 7 (the one the rotation commits) signed by the genesis key",
         resign_head(log, 7, genesis_seed), None, 6, "the head kept after entry 6 does not verify with the ledger's key: the note has no "
         "signature by key %s+%s" % (report.ledger_name, note_key_hash(report.ledger_name, new_key).hex())),
        ("the head of size 6 (before the rotation, which the genesis key signs) signed by the new key",
         resign_head(log, 6, new_seed), None, 5, "the head kept after entry 5 does not verify with the ledger's key: the note has no "
         "signature by key %s+%s" % (report.ledger_name, note_key_hash(report.ledger_name, genesis_key).hex())),
        ("the head of size 10 (the new key's) signed by the genesis key",
         resign_head(log, 10, genesis_seed), None, 9, "the head kept after entry 9 does not verify with the ledger's key: the note has no "
         "signature by key %s+%s" % (report.ledger_name, note_key_hash(report.ledger_name, new_key).hex())),
        ("the newest head (size 11, after the revocation) signed by the genesis key",
         resign_head(log, 11, genesis_seed), None, None, "the signed head does not verify with the ledger's key in force at size 11, %s: "
         "it carries no signature by key %s+%s" % (new_kid, report.ledger_name, note_key_hash(report.ledger_name, new_key).hex())),
        # (e) A rotation that shares its command.
        ("(e) a key.rotated event in a command of two events (the rotation and another)",
         build(lambda b: b[:6] + [dict(b[6], cmdSize=2), dict(rotation_to(7, other_seed), cmd=6, cmdSize=2, at=b[6]["at"])]), 7, 6,
         "a key rotation is alone in its command, after the genesis event"),
        ("a key.rotated event in a format-1 ledger",
         build(lambda b: [dict(x, v=1) for x in b]), 7, None, "a 'key.rotated' event belongs only to format version 2"),
        # Accepted.
        ("the rotation as the log's last event (its head, size 7, the new key's)", build(lambda b: b[:7]), None, None, None),
        ("a second rotation (seq 10, to the key of seed 40..5f) and an event it signs", build(third), None, None, None),
    ]
    for name, data, line, seq, reason in cases:
        where = ", ".join(w for w in ("line %d" % line if line else "", "seq %d" % seq if seq is not None else "") if w)
        checks.run("rotation: %s: %s" % (name, "verifies" if reason is None else "fails at %s" % where if where else "fails, no line or seq"),
                   verdict(data, line, seq, reason))

    def two_rotations():
        r = verify_folder(folder, log=build(third), derived=False, subject_map=False)
        return [(start, key) for start, key, _ in r.key_schedule.periods] == [(0, genesis_key), (7, new_key), (11, other_key)], \
            ", ".join("%s from seq %d" % (kid, start) for start, _, kid in r.key_schedule.periods)
    checks.run("rotation: two rotations give the schedule [(0, genesis), (7, new), (11, seed 40..5f)]", two_rotations)
    checks.run("rotation: the vector's rotation replayed into the tiny ledger (seq 10, its handover as it is) fails: another ledger, "
               "another prev",
               verdict(sign_log(tiny + [dict(rotation_to(10, new_seed, kid=genesis_kid), **{"@handover": rotation.handover})],
                                genesis_seed, heads_in_log=True)[0],
                       11, 10, "the key rotation's handover signature does not verify with the new key %s" % new_kid, ledger=tiny_folder))

    # Without head lines the log fails step 3 and 4; the scan of every line (step 4's first bad
    # entry) follows the rotation, so no line is bad and the failure is step 3's.
    older = b"".join(line + b"\n" for line in events)
    checks.run("rotation: the vector's event lines without head lines fail only for the missing head (the scan follows the rotation)",
               verdict(older, None, None, "the log holds no head line: the signed head that ends every commit is missing"))
    checks.run("rotation, older layout: the event lines with the newest head's note as the head file verify",
               verdict(older, None, None, None, head_text=newest))
    checks.run("rotation, older layout: a head file of size 11 signed by the genesis key fails",
               verdict(older, None, None, "the signed head does not verify with the ledger's key in force at size 11, %s: it carries no "
                       "signature by key %s+%s" % (new_kid, report.ledger_name, note_key_hash(report.ledger_name, new_key).hex()),
                       head_text=parse_canonical(resign_head(log, 11, genesis_seed).split(b"\n")[-2])["head"]))


    # Revocation (Key rotation, Revocation; Verifying, step 5 item 7a and step 6a). `revoking` is
    # the whole vector (its revocation as it is, attesting the honest events 3-6); the cases below
    # change it, or `rotating` (the first ten events) and a revocation of their own, whose
    # 'attested' sign_log fills with the hashes of the events it wrote ('@attest'), and re-sign.
    def revoked(seq, key, since, window=None, kid=new_kid, **members):
        """A key.revoked body at `seq` (a command of its own) naming `key`, compromised from
        `since`, attesting the events of `window` (first, last[, edit]) as written (by default
        `since` to 6, the genesis key's rotation), signed by the key in force (the new one, unless
        `kid` and an '@seed' say otherwise)."""
        x = {"v": 2, "seq": seq, "at": "2026-01-15T09:00:05.000Z", "actor": "vector-generator", "cmd": seq, "cmdSize": 1,
             "kid": kid, "type": "key.revoked", "publicKey": key.hex(), "compromisedSince": since,
             "@attest": window if window is not None else (since, 6)}
        x.update(members)
        return x

    def build_revoking(change):
        b = [dict(x) for x in revoking]
        b = change(b) or b
        return sign_log(b, genesis_seed, heads_in_log=True)[0]

    def wrong(i):
        """An '@attest' edit: entry i of the attested list replaced by the hash of nothing."""
        def edit(hashes):
            hashes[i] = sha256(b"").hex()
            return hashes
        return edit

    def thief(b):
        """seq 5, alice's grant of timeline's optional-b, replaced by one the holder of the leaked
        genesis key made (evidence of a paper form that never was); the revocation still attests
        the honest events."""
        b[5]["evidence"] = "forged-form-0666"

    unattested = "signed by key %s after it was compromised (seq %d on), and not re-attested by its revocation at seq %d"
    still = "the key revocation names key %s, which is still in force: a key is rotated away from before it is revoked"
    second_rotation = rotation_to(10, other_seed)
    # A revocation of the first rotation's key (the key of seed 20..3f, which signed both records of
    # the vector) makes its writer sign both records again with the key in force (seed 40..5f).
    resigned = dict(subjects=record("alice", other_seed) + record("bob", other_seed))
    revocation_cases = [
        # Accepted.
        ("the vector's revocation written again by a writer that re-attests seq 3-6", build(appended(revoked(10, genesis_key, 3))),
         None, None, None),
        ("a revocation from seq 0 (the genesis event on: 7 hashes, seq 0-6)", build(appended(revoked(10, genesis_key, 0))), None, None, None),
        ("a revocation from seq 6 (the rotation alone: 1 hash)", build(appended(revoked(10, genesis_key, 6))), None, None, None),
        ("the vector, then bob's grant (seq 11, after the revocation)", build_revoking(lambda b: b + [grant(11, new_kid)]), None, None, None),
        ("a second rotation (seq 10, to the key of seed 40..5f), then a revocation of the first rotation's key from seq 8 (seq 11, "
         "attesting seq 8-10), both records signed again with the key of seed 40..5f",
         build(appended(second_rotation, revoked(11, new_key, 8, (8, 10), kid=other_kid))), None, None, None, resigned),
        ("the same, with the vector's records (signed by the first rotation's key, which seq 11 revokes): refused at step 10",
         build(appended(second_rotation, revoked(11, new_key, 8, (8, 10), kid=other_kid))), None, None,
         revoked_record("alice", new_kid, 11)),
        ("the same, alice's record signed again and bob's still by the first rotation's key: bob's is refused at step 10",
         build(appended(second_rotation, revoked(11, new_key, 8, (8, 10), kid=other_kid))), None, None,
         revoked_record("bob", new_kid, 11),
         dict(subjects=record("alice", other_seed) + subject_lines[1] + b"\n")),
        # (f) An event of the window that the revocation does not attest (step 6a).
        ("(f) the revocation's hash for seq 4 replaced (a thief's event it leaves out)",
         build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(1))))), 5, 4, unattested % (genesis_kid, 3, 10)),
        ("the revocation's hash for seq 6 (the rotation) replaced", build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(3))))),
         7, 6, unattested % (genesis_kid, 3, 10)),
        ("the revocation attesting seq 2-5 instead of 3-6 (each hash one event early)", build(appended(revoked(10, genesis_key, 3, (2, 5)))),
         4, 3, unattested % (genesis_kid, 3, 10)),
        ("seq 5 replaced by an event signed with the leaked genesis key (and the log re-chained), the vector's revocation as it is",
         build_revoking(thief), 6, 5, unattested % (genesis_kid, 3, 10)),
        ("two revocations, both with a wrong hash: the newer key's (seq 11, window 7-10, seq 8 wrong) is checked first, being older "
         "than the genesis key's (seq 12, window 3-6, seq 4 wrong)",
         build(appended(second_rotation, revoked(11, new_key, 7, (7, 10, wrong(1)), kid=other_kid),
                        revoked(12, genesis_key, 3, (3, 6, wrong(1)), kid=other_kid))), 9, 8, unattested % (new_kid, 7, 11)),
        ("a wrong hash for seq 4, and a later line (seq 11) whose signature does not verify: step 5 comes before step 6a",
         build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(1))), grant(11, new_kid, **{"@seed": other_seed}))), 12, 11,
         "signature does not verify with the ledger's public key %s" % new_kid),
        # (g) A revocation that cannot be taken in (step 5, item 7a; Revocation, items 2-6).
        ("(g) a revocation naming a key this ledger never used (seed 40..5f)", build(appended(revoked(10, other_key, 3))), 11, 10,
         "the key revocation names a key this ledger never used"),
        ("a revocation naming the key in force", build(appended(revoked(10, new_key, 7, (7, 9)))), 11, 10, still % new_kid),
        ("a revocation of the genesis key before it was rotated away from (seq 6, signed by it)",
         build(lambda b: b[:6] + [revoked(6, genesis_key, 3, (3, 5), kid=genesis_kid)]), 7, 6, still % genesis_kid),
        ("a key revoked twice (the vector, then a second revocation of the genesis key at seq 11)",
         build_revoking(lambda b: b + [revoked(11, genesis_key, 3)]), 12, 11,
         "the key revocation names key %s, which was revoked before" % genesis_kid),
        ("compromisedSince 7, after the genesis key's period (seq 0-6)", build(appended(revoked(10, genesis_key, 7, (3, 6)))), 11, 10,
         "the key revocation says key %s was compromised from seq 7, but it signed seq 0 to 6" % genesis_kid),
        ("compromisedSince 5, before the first rotation's key's period (seq 7-10), after a second rotation",
         build(appended(second_rotation, revoked(11, new_key, 5, (7, 10), kid=other_kid))), 12, 11,
         "the key revocation says key %s was compromised from seq 5, but it signed seq 7 to 10" % new_kid),
        ("compromisedSince 10, past the log's last event", build(appended(revoked(10, genesis_key, 10, (3, 6)))), 11, 10,
         "the key revocation says key %s was compromised from seq 10, but it signed seq 0 to 6" % genesis_kid),
        ("3 hashes (seq 3-5) for the window seq 3-6", build(appended(revoked(10, genesis_key, 3, (3, 5)))), 11, 10,
         "the key revocation attests 3 events, but key %s signed 4 from seq 3 to 6" % genesis_kid),
        ("5 hashes (seq 2-6) for the window seq 3-6", build(appended(revoked(10, genesis_key, 3, (2, 6)))), 11, 10,
         "the key revocation attests 5 events, but key %s signed 4 from seq 3 to 6" % genesis_kid),
        ("a revocation signed by the key it revokes (the genesis key, with its kid)",
         build(appended(revoked(10, genesis_key, 3, kid=genesis_kid, **{"@seed": genesis_seed}))), 11, 10, retired % (genesis_kid, new_kid)),
        # (h) The body and the command.
        ("(h) a key.revoked event in a format-1 ledger (at seq 6, naming the genesis key)",
         build(lambda b: [dict(x, v=1) for x in b[:6]] + [revoked(6, genesis_key, 3, (3, 5), kid=genesis_kid, v=1)]), 7, None,
         "a 'key.revoked' event belongs only to format version 2"),
        ("a key.revoked event in a command of two events (the revocation and bob's grant)",
         build(appended(revoked(10, genesis_key, 3, cmdSize=2), grant(11, new_kid, cmd=10, cmdSize=2, at="2026-01-15T09:00:05.000Z",
                                                                    actor="vector-generator"))), 11, 10,
         "a key revocation is alone in its command, after the genesis event"),
        ("a revocation whose 'attested' is empty", build(appended(revoked(10, genesis_key, 3, (3, 6, lambda h: [])))), 11, None,
         "member 'attested' must be a non-empty array of event hashes"),
        ("a revocation whose 'attested' holds a hash in uppercase hex",
         build(appended(revoked(10, genesis_key, 3, (3, 6, lambda h: h[:1] + [h[1].upper()] + h[2:])))), 11, None,
         "member 'attested' holds something that is not 64 lowercase hex digits"),
        ("a revocation whose 'attested' holds an integer", build(appended(revoked(10, genesis_key, 3, (3, 6, lambda h: h[:3] + [6]))))
         , 11, None, "member 'attested' holds something that is not 64 lowercase hex digits"),
    ]
    # The schedule's own checks, apart from a line (as a bundle's schedule takes revocations in):
    # item 1, which a line that passed step 5 item 2 cannot fail, and the reference's last check,
    # which the body reader makes unreachable.
    def apart(reason, **changes):
        def run():
            schedule = KeySchedule(genesis_key)
            schedule.periods.append((7, new_key, new_kid))
            e = decode_line(events[10])
            for k, v in changes.items():
                setattr(e, k, v)
            problem, taken = schedule.revocation(e)
            ok = problem == reason and (taken is None if reason is not None else taken == (10, genesis_kid, 3, 6, revocation.attested))
            return ok, problem or repr(taken[:4])
        return run
    checks.run("revocation, the schedule alone: the vector's revocation is taken in as (10, genesis kid, 3, 6, its hashes)",
               apart(None))
    checks.run("revocation, the schedule alone (item 1): a revocation carrying the genesis key's kid is not signed with the key in force",
               apart("the key revocation is signed with key id %s, not with the key in force, %s" % (genesis_kid, new_kid), kid=genesis_kid))
    checks.run("revocation, the schedule alone (the reference's last check): an attested entry that is not a hash",
               apart("the key revocation attests something that is not a hash", attested=revocation.attested[:3] + ["x" * 64]))
    checks.run("revocation, the schedule alone: a revocation of seq 5, before the rotation that retires the key (seq 6)",
               apart("the key revocation names key %s, which is still in force: a key is rotated away from before it is revoked" % genesis_kid,
                     seq=5, kid=genesis_kid))
    for name, data, line, seq, reason, *options in revocation_cases:
        where = ", ".join(w for w in ("line %d" % line if line else "", "seq %d" % seq if seq is not None else "") if w)
        checks.run("revocation: %s: %s" % (name, "verifies" if reason is None else "fails at %s" % where if where else "fails, no line or seq"),
                   verdict(data, line, seq, reason, **(options[0] if options else {})))

    both_revoked = build(appended(second_rotation, revoked(11, new_key, 8, (8, 10), kid=other_kid),
                                  revoked(12, genesis_key, 0, kid=other_kid)))

    def two_revocations():
        r = verify_folder(folder, log=both_revoked, derived=False, subject_map=False, **resigned)
        return ([x[:4] for x in r.key_schedule.revocations] == [(11, new_kid, 8, 10), (12, genesis_kid, 0, 6)]
                and [len(x[4]) for x in r.key_schedule.revocations] == [3, 7]), repr([x[:4] for x in r.key_schedule.revocations])
    checks.run("revocation: a second rotation, then revocations of both retired keys (seq 11: the first rotation's key from seq 8; "
               "seq 12: the genesis key from seq 0) verify, in that order (both records signed again with the key of seed 40..5f)",
               two_revocations)
    checks.run("revocation: the same two revocations, alice's record as the genesis key signed it: refused at step 10 naming the "
               "genesis key's revocation (seq 12)",
               verdict(both_revoked, None, None, revoked_record("alice", at=12),
                       subjects=alice_genesis + record("bob", other_seed)))
    # The windows are checked once the head is reached (step 6a): a log cut inside the window
    # before its revocation has nothing to check; one cut after the revocation, below the head,
    # fails step 6 first.
    checks.run("revocation: the vector cut before its revocation (10 events) verifies (nothing to re-attest yet)",
               verdict(b"".join(line + b"\n" for line in file_lines[:file_lines.index(events[9]) + 2]), None, None, None))
    def truncated_first():
        data = build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(1))), grant(11, new_kid)))
        newest_note = parse_canonical(data.split(b"\n")[-2])["head"]
        cut = b"".join(line + b"\n" for line in event_lines(data)[:11])
        return verdict(cut, 12, 11, "the log ends at seq 10 but seq 11 was acknowledged: acknowledged events are missing (truncated log)",
                       head_text=newest_note)()
    checks.run("revocation, older layout: a wrong hash for seq 4 and a head file of size 12 over 11 event lines: step 6 (truncated "
               "log) before step 6a", truncated_first)
    checks.run("revocation, older layout: a wrong hash for seq 4 and the newest head as the head file: step 6a",
               verdict(b"".join(line + b"\n" for line in event_lines(build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(1))))))),
                       5, 4, unattested % (genesis_kid, 3, 10),
                       head_text=parse_canonical(build(appended(revoked(10, genesis_key, 3, (3, 6, wrong(1))))).split(b"\n")[-2])["head"]))

def check_clock(checks, here):
    """Clock corrections (Spec/ledger-format.md, Clock corrections; the vector clock-ledger/): the
    vector verifies with one correction, bob's grant stamped 2999 has the correction's time as its
    effective time, and copies re-signed with the vector key, each breaking rule 5b or rule 2, fail
    where the spec says."""
    folder = os.path.join(here, "clock-ledger")
    seed = bytes(range(32))
    log = read_file(folder, "ledger.jsonl")
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in event_lines(log)]
    try:
        report = verify_folder(folder)
    except Failure as f:
        checks.check(False, "clock-ledger verifies", str(f))
        return
    corrected_at = parse_time("2026-01-15T09:10:00.000Z")
    corrections = report.replay.clock_corrections
    checks.check(report.events == 9 and [c[:2] for c in corrections] == [(7, corrected_at)],
                 "clock-ledger verifies: 9 events, one clock correction (seq 7, 2026-01-15T09:10:00.000Z)", repr(corrections))
    correction = report.records[7]
    checks.check(correction.type == "clock.corrected" and correction.subject is None and (correction.cmd, correction.cmd_size) == (7, 1)
                 and correction.corrected_from == "2999-01-01T00:00:00.000Z" and correction.reason == "NTP server served 2999"
                 and correction.stream_prev == 0,
                 "line 8 (seq 7) is a clock.corrected event alone in its command, in the ledger stream (streamPrev 0), correcting 2999-01-01")
    grant = report.records[6]
    checks.check(grant.at == "2999-01-01T00:00:00.000Z" and effective_time(6, grant.at_ms, corrections) == corrected_at
                 and effective_time(8, report.records[8].at_ms, corrections) == report.records[8].at_ms
                 and effective_time(5, report.records[5].at_ms, corrections) == report.records[5].at_ms,
                 "effective times: bob's grant (seq 6, stamped 2999) counts as 2026-01-15T09:10:00.000Z; seq 5 and seq 8 keep their own")

    def build(change):
        b = [dict(x) for x in bodies]
        change(b)
        return sign_log(b, seed, heads_in_log=True)[0]

    def edit(i, **members):
        return lambda b: b[i].update(members)

    def verdict(data, line, seq, reason):
        def run():
            try:
                r = verify_folder(folder, log=data, derived=False, subject_map=False)
            except Failure as f:
                return reason is not None and f.line == line and f.seq == seq and reason in f.reason, str(f)
            return reason is None, "verified, %d events" % r.events
        return run
    cases = [
        ("the vector re-signed as it is", build(lambda b: None), None, None, None),
        ("a correction naming 2998 instead of the previous event's time", build(edit(7, correctedFrom="2998-01-01T00:00:00.000Z")), 8, 7,
         "a clock correction names the time it corrects, the previous event's 2999-01-01T00:00:00.000Z, but this one names "
         "2998-01-01T00:00:00.000Z"),
        ("a correction whose time is the time it corrects", build(edit(7, at="2999-01-01T00:00:00.000Z")), 8, 7,
         "a clock correction moves the ledger's time back, but 2999-01-01T00:00:00.000Z is not earlier than the previous event's "
         "2999-01-01T00:00:00.000Z"),
        ("a correction in a command of two events", build(edit(7, cmdSize=2)), 8, 7,
         "a clock correction is alone in its command, after the genesis event"),
        ("a correction in a format-1 body", build(edit(7, v=1)), 8, None, "a 'clock.corrected' event belongs only to format version 2"),
        ("a correction with an empty reason", build(edit(7, reason="")), 8, None, "member 'reason': the reason is empty"),
        ("a correction to a time before the genesis event's", build(edit(7, at="2026-01-15T08:59:59.999Z")), 8, 7,
         "a clock correction cannot set the ledger's time to 2026-01-15T08:59:59.999Z, before the genesis event's 2026-01-15T09:00:00.000Z"),
        ("a second correction to a time before the first's",
         build(lambda b: b.extend([dict(b[6], seq=9, cmd=9, at="2999-06-01T00:00:00.000Z"),
                                   dict(b[7], seq=10, cmd=10, at="2026-01-15T09:09:00.000Z", correctedFrom="2999-06-01T00:00:00.000Z")])),
         11, 10, "a clock correction cannot set the ledger's time to 2026-01-15T09:09:00.000Z, before the previous clock correction's "
         "2026-01-15T09:10:00.000Z"),
        ("rule 2 after a correction: bob's withdrawal a second before it", build(edit(8, at="2026-01-15T09:09:59.000Z")), 9, 8,
         "time 2026-01-15T09:09:59.000Z is earlier than the previous event's 2026-01-15T09:10:00.000Z"),
        ("rule 2 without a correction: the correction made a withdrawal (seq 7, 09:10:00)",
         build(lambda b: b.__setitem__(slice(7, 9), [dict(b[8], seq=7, cmd=7, at="2026-01-15T09:10:00.000Z")])), 8, 7,
         "time 2026-01-15T09:10:00.000Z is earlier than the previous event's 2999-01-01T00:00:00.000Z"),
    ]
    for name, data, line, seq, reason in cases:
        checks.run("clock: %s: %s" % (name, "verifies" if reason is None else "fails at line %d" % line), verdict(data, line, seq, reason))


def main(argv):
    checks = Checks()
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__.strip())
        return 64
    if len(argv) == 2:
        check_folder(checks, argv[1])
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        self_tests(checks)
        check_vectors(checks, here)
        check_resigned(checks, here)
        check_evidence(checks, here)
        check_policy_versions(checks, here)
        check_derived_files(checks, here)
        check_subject_map(checks, here)
        check_erasure(checks, here)
        check_rotation(checks, here)
        check_clock(checks, here)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
