#!/usr/bin/env python3
"""An independent verifier of ConsentLedger audit exports, version 1.

Written from Spec/export-format.md (and Spec/ledger-format.md for events, the catalogue and
replay), with the Python 3 standard library only. Ed25519, canonical JSON, event decoding and
replay are imported from verify_vectors.py in this folder; the Merkle tree (RFC 6962 and the tlog
storage layout), signed notes (C2SP signed-note), checkpoints (C2SP tlog-checkpoint), bundles and
consistency proofs are implemented here, and so is the key schedule a file is checked under
after a key rotation (export-format.md, Keys), with the rotation and revocation rules of
verify_vectors.py's KeySchedule. A subject bundle carries the subject's record, so its grants'
sealed evidence references are opened with the key it gives (Spec/erasure.md, Sealed evidence;
XSalsa20-Poly1305 from verify_vectors.py) before the replay, whose listing shows them in clear;
an all bundle carries no records, and its references stay sealed.

Usage:
    python3 Spec/vectors/verify_export.py              self-tests, then Spec/vectors/export
                                                       (expected.json) and derived cases, recorded
                                                       checkpoints, then Spec/vectors/rotated (the
                                                       bundle and consistency cases of its
                                                       expected.json) and derived key-rotation
                                                       and revocation cases
    python3 Spec/vectors/verify_export.py FILE KEY     verify one export bundle or consistency-proof
                                                       file against the pinned verifier KEY (the
                                                       key text name+hash+key, or a file holding it)

Prints one line per check and ends with "N passed, M failed"; exits 0 only when M is 0.
"""

import base64
import binascii
import functools
import json
import os
import sys
import unicodedata

sys.dont_write_bytecode = True  # importing verify_vectors must not touch __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from verify_vectors import (  # noqa: E402
    LINE_PREFIX, SIG_PREFIX, SIGNING_CONTEXT, ZERO_HASH, CatalogError, Checks, DecodeError, Failure, KeySchedule, Replay,
    SubjectState, Violation, catalog_hash, catalog_version, decode_catalog, decode_line, ed25519_public_key, ed25519_sign,
    ed25519_verify, event_lines, hex_decode, key_id, notices_of, parse_canonical, problem_as_update, publish_body, read_file,
    read_subject_records, same_bytes, same_text, serialize, sha256, sign_log, subject_record_message, subject_ref, trimmed_text,
    tree_root, verify_folder,
    SALT_LENGTH, SealError, evidence_key, flip_hex_byte, opened_event, seal_evidence,
)

BUNDLE_FORMAT = "consentledger-export-v1"
CONSISTENCY_FORMAT = "consentledger-consistency-v1"
MAX_SAFE_INTEGER = 2**53 - 1


@functools.lru_cache(maxsize=None)
def signature_ok(public_key, message, signature):
    """ed25519_verify, remembered: the vectors check the same few signatures many times."""
    return ed25519_verify(public_key, message, signature)


# ---------------------------------------------------------------------------------------------
# Base64 (RFC 4648 section 4, standard alphabet, padded; canonical spellings only)
# ---------------------------------------------------------------------------------------------

def b64encode(raw):
    return base64.b64encode(raw).decode("ascii")


def b64decode(text):
    """The bytes of canonical padded standard base64, or None for any other text."""
    if not isinstance(text, str) or not text.isascii():
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if b64encode(raw) == text else None


# ---------------------------------------------------------------------------------------------
# The Merkle tree (RFC 6962 section 2.1; storage and proofs as Go's golang.org/x/mod/sumdb/tlog)
# ---------------------------------------------------------------------------------------------

class ProofError(Exception):
    pass


def leaf_hash(entry):
    return sha256(b"\x00" + entry)


def node_hash(left, right):
    return sha256(b"\x01" + left + right)


def max_pow2(n):
    """(k, level): k = 2^level is the largest power of two smaller than n (n > 1)."""
    level = 0
    while (1 << (level + 1)) < n:
        level += 1
    return 1 << level, level


def _run_inclusion(proof, lo, hi, n, leaf):
    if lo + 1 == hi:
        if proof:
            raise ProofError("inclusion proof is too long")
        return leaf
    if not proof:
        raise ProofError("inclusion proof is too short")
    k, _ = max_pow2(hi - lo)
    if n < lo + k:
        return node_hash(_run_inclusion(proof[:-1], lo, lo + k, n, leaf), proof[-1])
    return node_hash(proof[-1], _run_inclusion(proof[:-1], lo + k, hi, n, leaf))


def check_inclusion(proof, n, leaf, size, root):
    """tlog.CheckRecord(proof, size, root, n, leaf) == nil."""
    if not (0 <= n < size):
        return False
    try:
        return _run_inclusion(list(proof), 0, size, n, leaf) == root
    except ProofError:
        return False


def _run_consistency(proof, lo, hi, n, old):
    if n == hi:
        if lo == 0:
            if proof:
                raise ProofError("consistency proof is too long")
            return old, old
        if len(proof) != 1:
            raise ProofError("consistency proof has the wrong length")
        return proof[0], proof[0]
    if not proof:
        raise ProofError("consistency proof is too short")
    k, _ = max_pow2(hi - lo)
    if n <= lo + k:
        oh, th = _run_consistency(proof[:-1], lo, lo + k, n, old)
        return oh, node_hash(th, proof[-1])
    oh, th = _run_consistency(proof[:-1], lo + k, hi, n, old)
    return node_hash(proof[-1], oh), node_hash(proof[-1], th)


def check_consistency(proof, old_size, old_root, new_size, new_root):
    """tlog.CheckTree(proof, new_size, new_root, old_size, old_root) == nil."""
    if not (1 <= old_size <= new_size):
        return False
    try:
        o, n = _run_consistency(list(proof), 0, new_size, old_size, old_root)
    except ProofError:
        return False
    return o == old_root and n == new_root


# Stored hashes: the layout of tree.hashes (tlog.StoredHashIndex, StoredHashCount, StoredHashes),
# and proofs made from them (tlog.TreeHash, ProveRecord, ProveTree).

def stored_hash_index(level, n):
    for _ in range(level):
        n = 2 * n + 1
    i = 0
    while n > 0:
        i += n
        n >>= 1
    return i + level


def stored_hash_count(n):
    if n == 0:
        return 0
    count = stored_hash_index(0, n - 1) + 1
    i = n - 1
    while i & 1:
        count += 1
        i >>= 1
    return count


def stored_hashes_for_record(n, leaf, read):
    """The hashes appended to tree.hashes for record n: its leaf hash, then the hash of each
    subtree it completes (levels 1, 2, ...). `read(index)` returns an earlier stored hash."""
    hashes, h, level = [leaf], leaf, 0
    while (n + 1) >> level & 1 == 0:
        h = node_hash(read(stored_hash_index(level, (n >> level) - 1)), h)
        hashes.append(h)
        level += 1
    return hashes


def build_stored(entries):
    stored = []
    for n, e in enumerate(entries):
        stored += stored_hashes_for_record(n, leaf_hash(e), stored.__getitem__)
    return stored


def _sub_tree_hash(lo, hi, read):
    parts = []
    while lo < hi:
        k, level = max_pow2(hi - lo + 1)
        assert lo & (k - 1) == 0
        parts.append(read(stored_hash_index(level, lo >> level)))
        lo += k
    h = parts[-1]
    for p in reversed(parts[:-1]):
        h = node_hash(p, h)
    return h


def stored_tree_hash(size, read):
    return _sub_tree_hash(0, size, read)


def stored_inclusion_proof(n, size, read):
    def prove(lo, hi):
        if lo + 1 == hi:
            return []
        k, _ = max_pow2(hi - lo)
        if n < lo + k:
            return prove(lo, lo + k) + [_sub_tree_hash(lo + k, hi, read)]
        return prove(lo + k, hi) + [_sub_tree_hash(lo, lo + k, read)]
    return prove(0, size)


def stored_consistency_proof(old, new, read):
    def prove(lo, hi):
        if old == hi:
            return [] if lo == 0 else [_sub_tree_hash(lo, hi, read)]
        k, _ = max_pow2(hi - lo)
        if old <= lo + k:
            return prove(lo, lo + k) + [_sub_tree_hash(lo + k, hi, read)]
        return prove(lo + k, hi) + [_sub_tree_hash(lo, lo + k, read)]
    return prove(0, new)


class RFC6962:
    """MTH, PATH and PROOF of RFC 6962 section 2.1, by their recursive definitions over a list
    of entries D[lo:hi] (subtree hashes remembered, so small trees stay cheap)."""

    def __init__(self, entries):
        self.d = entries
        self.mth = functools.lru_cache(maxsize=None)(self._mth)

    @staticmethod
    def k(n):
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    def _mth(self, lo, hi):
        n = hi - lo
        if n == 0:
            return sha256(b"")
        if n == 1:
            return sha256(b"\x00" + self.d[lo])
        k = self.k(n)
        return sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi))

    def path(self, m, lo, hi):
        n = hi - lo
        if n == 1:
            return []
        k = self.k(n)
        if m < k:
            return self.path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self.path(m - k, lo + k, hi) + [self.mth(lo, lo + k)]

    def subproof(self, m, lo, hi, b):
        n = hi - lo
        if m == n:
            return [] if b else [self.mth(lo, hi)]
        k = self.k(n)
        if m <= k:
            return self.subproof(m, lo, lo + k, b) + [self.mth(lo + k, hi)]
        return self.subproof(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]

    def proof(self, m, n):
        return self.subproof(m, 0, n, True)


# ---------------------------------------------------------------------------------------------
# Verifier keys, signed notes (C2SP signed-note) and checkpoints (C2SP tlog-checkpoint)
# ---------------------------------------------------------------------------------------------

class NoteError(Exception):
    pass


# Unicode White_Space (Swift's Unicode.Scalar.Properties.isWhitespace; Go's unicode.IsSpace).
WHITE_SPACE = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
DASH = "\u2014 "


def check_name(name):
    if not name or any(c == "+" or ord(c) in WHITE_SPACE or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise NoteError("key name '%s' must be non-empty, without spaces, control characters or '+'" % name)


def note_key_hash(name, public_key):
    return int.from_bytes(sha256(name.encode("utf-8") + b"\n\x01" + public_key)[:4], "big")


class NoteKey:
    def __init__(self, name, public_key):
        check_name(name)
        self.name, self.public_key = name, public_key
        self.hash = note_key_hash(name, public_key)

    @property
    def text(self):
        return "%s+%08x+%s" % (self.name, self.hash, b64encode(b"\x01" + self.public_key))


def parse_verifier_key(text):
    """`name+hash+key`, split at the first two '+'; the hash must match."""
    first = text.split("+", 1)
    rest = first[1].split("+", 1) if len(first) == 2 else []
    if len(rest) != 2 or len(rest[0].encode("utf-8")) != 8 or any(c not in "0123456789abcdef" for c in rest[0]):
        raise NoteError("verifier key is not <name>+<8 hex digits>+<base64 key>")
    name, hash_hex, key64 = first[0], rest[0], rest[1]
    raw = b64decode(key64)
    if raw is None or len(raw) != 33 or raw[0] != 0x01:
        raise NoteError("verifier key is not an Ed25519 key (algorithm byte 0x01 and 32 bytes)")
    key = NoteKey(name, raw[1:])
    if key.hash != int(hash_hex, 16):
        raise NoteError("verifier key hash %s does not match its name and key" % hash_hex)
    return key


def sign_note(text, key, seed):
    """The signed note of `text` (ending in a newline) with one signature by `key` (seed)."""
    signature = ed25519_sign(seed, text.encode("utf-8"))
    return text + "\n" + DASH + key.name + " " + b64encode(key.hash.to_bytes(4, "big") + signature) + "\n"


def split_note(note):
    """The form of a signed note, no signature verified: its text (ending in a newline) and its
    signature lines as (name, key hash, signature bytes). Raises NoteError."""
    if len(note.encode("utf-8")) > 1 << 20:
        raise NoteError("note is too large")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("note has no blank line before its signatures")
    text, block = note[:split] + "\n", note[split + 2:]
    # The reference compares Characters: a final CR LF is one Character, not a newline.
    if not block.endswith("\n") or block.endswith("\r\n"):
        raise NoteError("note's signature block does not end with a newline")
    if any((ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F for c in text):
        raise NoteError("note text contains control characters")
    lines = block[:-1].split("\n")
    if len(lines) > 100:
        raise NoteError("note has more than 100 signature lines")
    signatures = []
    for line in lines:
        if not line.startswith(DASH):
            raise NoteError("signature line does not start with '\u2014 '")
        rest = line[len(DASH):].split(" ")
        raw = b64decode(rest[1]) if len(rest) == 2 else None
        if raw is None or len(raw) <= 4:
            raise NoteError("malformed signature line")
        signatures.append((rest[0], int.from_bytes(raw[:4], "big"), raw[4:]))
    return text, signatures


def open_note(note, key):
    """Checks that `note` carries a valid signature by `key`; returns its text. The whole note is
    read (split_note) before any signature is checked, as the reference does."""
    text, signatures = split_note(note)
    found = False
    for name, key_hash, signature in signatures:
        if not same_text(name, key.name) or key_hash != key.hash:
            continue  # another key's signature: ignored
        if len(signature) != 64 or not signature_ok(key.public_key, text.encode("utf-8"), signature):
            raise NoteError("the signature by %s does not verify" % key.name)
        found = True
    if not found:
        raise NoteError("the note has no signature by key %s+%08x" % (key.name, key.hash))
    return text


class Checkpoint:
    def __init__(self, origin, size, root):
        self.origin, self.size, self.root = origin, size, root

    @property
    def text(self):
        return "%s\n%d\n%s\n" % (self.origin, self.size, b64encode(self.root))


def parse_checkpoint(text):
    if not text.endswith("\n"):
        raise NoteError("checkpoint does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise NoteError("checkpoint has fewer than three lines")
    if not lines[0]:
        raise NoteError("checkpoint origin is empty")
    size = lines[1]
    if not (size and all(c in "0123456789" for c in size) and (size == "0" or size[0] != "0") and int(size) <= 2**62):
        raise NoteError("checkpoint size '%s' is not a decimal number without leading zeros" % size)
    root = b64decode(lines[2])
    if root is None or len(root) != 32:
        raise NoteError("checkpoint root hash is not the base64 of 32 bytes")
    if any(not extension for extension in lines[3:]):
        raise NoteError("checkpoint has an empty extension line")
    return Checkpoint(lines[0], int(size), root)


def check_recorded_checkpoints(lines, records, name, schedule):
    """ledger-format.md, Verifying, step 8: every recorded checkpoint {"note","size"} must be
    signed by the key of `schedule` (the KeySchedule verify_folder returns as
    report.key_schedule) in force for seq `size` (Key rotation: a checkpoint of size S is the key
    in force for seq S's), under the ledger's `name`; name the ledger and its own size; not exceed
    the log's `lines` (verified lines without their newlines); and commit to the root of the first
    `size` lines, computed from the lines themselves. Raises Failure."""
    for record in records:
        size, note = record["size"], record["note"]
        key = NoteKey(name, schedule.in_force(max(0, size))[0])
        try:
            checkpoint = parse_checkpoint(open_note(note, key))
        except NoteError as e:
            raise Failure(None, None, "the recorded checkpoint of size %d does not verify with the ledger's key: %s" % (size, e))
        if checkpoint.origin != name or checkpoint.size != size:
            raise Failure(None, None, "the recorded checkpoint of size %d is for '%s' at size %d" % (size, checkpoint.origin, checkpoint.size))
        if size > len(lines):
            raise Failure(None, None, "the ledger signed a checkpoint of %d records, but the log holds only %d: "
                          "signed events were removed from the end of the log" % (size, len(lines)))
        if size > 0 and tree_root([leaf_hash(line) for line in lines[:size]]) != checkpoint.root:
            raise Failure(None, None, "the signed checkpoint of size %d commits to another root: "
                          "the log was changed after it was signed" % size)


def read_recorded_checkpoints(data):
    """checkpoints.jsonl: one canonical {"note":NOTE,"size":N} per line."""
    records = []
    for line in data.split(b"\n")[:-1]:
        value = parse_canonical(line)
        if not isinstance(value, dict) or set(value) != {"note", "size"}:
            raise Failure(None, None, "checkpoints.jsonl holds a line that is not {\"note\":…,\"size\":…}")
        records.append(value)
    return records


def check_recorded_vectors(checks, here):
    """Recorded checkpoints against the tiny ledger: honest ones pass; a cut log, a changed log
    and a forged note fail with the documented phrases."""
    v = Vectors(here)
    report = verify_folder(v.folder)
    key = NoteKey(report.ledger_name, report.public_key)

    def record(lines, size):
        root = tree_root([leaf_hash(line) for line in lines[:size]])
        return {"note": sign_note(Checkpoint(key.name, size, root).text, key, v.seed), "size": size}

    records = [record(v.lines, 3), record(v.lines, len(v.lines))]
    data = b"".join(serialize(r) + b"\n" for r in records)
    checks.check(read_recorded_checkpoints(data) == records, "checkpoints.jsonl: canonical records read back")

    def verdict(lines, recs, phrase):
        def run():
            try:
                check_recorded_checkpoints(lines, recs, report.ledger_name, report.key_schedule)
            except Failure as f:
                return phrase is not None and phrase in f.reason, f.reason
            return phrase is None, "passed"
        return run

    checks.run("recorded checkpoints of the tiny ledger (sizes 3 and %d) pass" % len(v.lines), verdict(v.lines, records, None))
    # The cut: the last command's lines gone (head rewritten to match), the checkpoints kept.
    cut = v.lines[:-1]
    checks.run("a log cut below a recorded checkpoint fails: signed events were removed",
               verdict(cut, records, "signed events were removed from the end of the log"))
    changed = v.lines[:1] + [v.lines[1][:-1] + bytes([v.lines[1][-1] ^ 1])] + v.lines[2:]
    checks.run("a log changed below a recorded checkpoint fails: changed after it was signed",
               verdict(changed, records, "the log was changed after it was signed"))
    forged = dict(records[0])
    forged["note"] = forged["note"][:-6] + ("A" if forged["note"][-6] != "A" else "B") + forged["note"][-5:]
    checks.run("a recorded note whose signature is broken fails",
               verdict(v.lines, [forged], "does not verify with the ledger's key"))

    # The rotated ledger (key rotated at seq 6): a checkpoint of size S is signed by the key in
    # force for seq S, the genesis key up to size 6, the new key from size 7 on.
    folder = os.path.join(here, "rotated-ledger")
    rotated = verify_folder(folder)
    lines = event_lines(read_file(folder, "ledger.jsonl"))
    seeds = {"genesis": v.seed, "new": hex_decode(trimmed_text(read_file(folder, "secret.key")), 32)}

    def signed(size, which):
        signer = NoteKey(rotated.ledger_name, ed25519_public_key(seeds[which]))
        root = tree_root([leaf_hash(line) for line in lines[:size]])
        return {"note": sign_note(Checkpoint(signer.name, size, root).text, signer, seeds[which]), "size": size}

    def rotated_verdict(lines, recs, phrase):
        def run():
            try:
                check_recorded_checkpoints(lines, recs, rotated.ledger_name, rotated.key_schedule)
            except Failure as f:
                return phrase is not None and phrase in f.reason, f.reason
            return phrase is None, "passed"
        return run
    honest = [signed(3, "genesis"), signed(6, "genesis"), signed(7, "new"), signed(10, "new")]
    checks.run("rotated-ledger: recorded checkpoints of sizes 3 and 6 (genesis key) and 7 and 10 (the new key) pass",
               rotated_verdict(lines, honest, None))
    checks.run("rotated-ledger: a recorded checkpoint of size 7 signed by the genesis key (retired at seq 6) fails",
               rotated_verdict(lines, [signed(7, "genesis")], "the recorded checkpoint of size 7 does not verify with the ledger's key"))
    checks.run("rotated-ledger: a recorded checkpoint of size 6 signed by the new key (not yet in force) fails",
               rotated_verdict(lines, [signed(6, "new")], "the recorded checkpoint of size 6 does not verify with the ledger's key"))
    checks.run("rotated-ledger: a log cut below a recorded checkpoint of size 10 (the new key's) fails: signed events were removed",
               rotated_verdict(lines[:9], honest, "signed events were removed from the end of the log"))


# ---------------------------------------------------------------------------------------------
# Reading JSON files leniently (bundles and consistency-proof files are read as ordinary JSON)
# ---------------------------------------------------------------------------------------------

def nfc(s):
    return unicodedata.normalize("NFC", s)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def parse_json(data):
    """Ordinary JSON (whitespace, any member order) of the format's subset: integers only, within
    ±(2^53 − 1), no -0; strings of Unicode scalar values; member names distinct (compared as
    canonically equivalent strings, as the reference does); at most 64 levels. ValueError if not."""
    text = bytes(data).decode("utf-8")  # UnicodeDecodeError is a ValueError

    def members(pairs):
        out, seen = {}, set()
        for k, v in pairs:
            if nfc(k) in seen:
                raise ValueError("duplicate member name '%s'" % k)
            seen.add(nfc(k))
            out[k] = v
        return out

    def integer(s):
        v = int(s)
        if s == "-0":
            raise ValueError("'-0' is not allowed")
        if abs(v) > MAX_SAFE_INTEGER:
            raise ValueError("integer is out of range")
        return v

    def no_fraction(s):
        raise ValueError("only integers are allowed here")

    def no_constant(s):
        raise ValueError("invalid literal")

    try:
        value = json.loads(text, object_pairs_hook=members, parse_int=integer, parse_float=no_fraction,
                           parse_constant=no_constant)
    except RecursionError:
        raise ValueError("nesting is deeper than 64 levels")

    def walk(v, depth):
        if depth >= 64:
            raise ValueError("nesting is deeper than 64 levels")
        if isinstance(v, str):
            v.encode("utf-8")  # an unpaired surrogate raises UnicodeEncodeError, a ValueError
        elif isinstance(v, list):
            for item in v:
                walk(item, depth + 1)
        elif isinstance(v, dict):
            for k, item in v.items():
                k.encode("utf-8")
                walk(item, depth + 1)
    walk(value, 0)
    return value


def json_equal(a, b):
    """Equality of JSON values as the reference decides it: same type (a boolean is not a number),
    same integers, arrays element by element, objects with the same member names, strings equal
    when canonically equivalent (Swift String equality)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if a is None or b is None:
        return a is None and b is None
    if is_int(a) or is_int(b):
        return is_int(a) and is_int(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and same_text(a, b)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if not (isinstance(a, dict) and isinstance(b, dict)) or len(a) != len(b):
        return False
    bn = {nfc(k): v for k, v in b.items()}
    return all(nfc(k) in bn and json_equal(v, bn[nfc(k)]) for k, v in a.items())


# ---------------------------------------------------------------------------------------------
# Bundles and consistency-proof files (Spec/export-format.md, "Verifying a bundle")
# ---------------------------------------------------------------------------------------------

class ExportFailure(Exception):
    """Why an export does not verify; `seq` names the event when one is at fault."""

    def __init__(self, seq, reason):
        super().__init__(reason)
        self.seq, self.reason = seq, reason

    def __str__(self):
        return ("seq %d: " % self.seq if self.seq is not None else "") + self.reason


class Entry:
    def __init__(self, seq, line, proof):
        self.seq, self.line, self.proof = seq, line, proof


class Bundle:
    pass


def read_bundle(data):
    """Step 0: the members, in the reference's order of checks."""
    try:
        value = parse_json(data)
    except ValueError as e:
        raise ExportFailure(None, "the bundle is not JSON: %s" % e)
    top = value if isinstance(value, dict) else {}

    def string(name):
        if not isinstance(top.get(name), str):
            raise ExportFailure(None, "the bundle has no string '%s'" % name)
        return top[name]

    def entry(v):
        if not isinstance(v, dict) or not is_int(v.get("seq")) or not isinstance(v.get("line"), str):
            raise ExportFailure(None, "an event entry lacks 'seq' or 'line'")
        proof = []
        for h in v["proof"] if isinstance(v.get("proof"), list) else []:
            raw = b64decode(h)
            if raw is None or len(raw) != 32:
                raise ExportFailure(max(0, v["seq"]), "a proof hash is not the base64 of 32 bytes")
            proof.append(raw)
        return Entry(v["seq"], v["line"], proof)

    b = Bundle()
    if string("format") != BUNDLE_FORMAT:
        raise ExportFailure(None, "unknown bundle format (expected %s)" % BUNDLE_FORMAT)
    b.scope = string("scope")
    if b.scope not in ("subject", "all"):
        raise ExportFailure(None, "unknown scope")
    if not isinstance(top.get("catalog"), dict):
        raise ExportFailure(None, "the bundle has no catalogue")
    b.catalog = top["catalog"]
    b.events = [entry(e) for e in (top["events"] if isinstance(top.get("events"), list) else [])]
    b.catalog_versions = [entry(e) for e in (top["catalogVersions"] if isinstance(top.get("catalogVersions"), list) else [])]
    b.subject = None
    if "subject" in top:
        s = top["subject"]
        if not (isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("id", "ref", "salt"))):
            raise ExportFailure(None, "'subject' needs id, ref and salt")
        b.subject = (s["id"], s["ref"], s["salt"])
    b.ledger, b.verifier_key, b.checkpoint = string("ledger"), string("verifierKey"), string("checkpoint")
    b.genesis = entry(top.get("genesis"))
    state = top.get("state")
    b.state = state["features"] if isinstance(state, dict) and "features" in state else None
    b.statement = top["statement"] if isinstance(top.get("statement"), str) else None
    # The key rotations below the checkpoint (Keys): present only after a rotation; [] is absent.
    b.keys = []
    if "keys" in top:
        if not isinstance(top["keys"], list):
            raise ExportFailure(None, "'keys' is not an array")
        b.keys = [entry(e) for e in top["keys"]]
    # A subject bundle of a format 2 ledger proves itself complete by subject-map proofs instead.
    b.streams = None
    if any(name in top for name in ("last", "subjectMap", "ledgerMap")):
        if "statement" in top:
            raise ExportFailure(None, "a subject bundle proves its completeness by a signed statement or by subject-map proofs, not both")
        b.streams = {name: top.get(name) for name in ("last", "subjectMap", "ledgerMap")}
    b.raw = top
    return b


# The signed export statement of a subject bundle (Spec/export-format.md, The export statement).
STATEMENT_MAGIC = "consentledger-export-v1"
INT64_MAX = 2**63 - 1


def _fields(line):
    """The reference splits statement lines at spaces, dropping empty pieces."""
    return [p for p in line.split(" ") if p]


def _decimal(text, signed=False):
    """Swift's Int64(text) that prints back as `text`: a canonical decimal within Int64, else None."""
    body = text[1:] if signed and text.startswith("-") else text
    if not body or not body.isascii() or not body.isdigit() or (len(body) > 1 and body[0] == "0") or text == "-0":
        return None
    value = int(text)
    return value if -INT64_MAX - 1 <= value <= INT64_MAX else None


def statement_text(origin, size, subject, catalog_versions, events, salt_length=SALT_LENGTH):
    return "%s\n%s\n%d\nsubject %s salt-length %d\n%s\n%s\n" % (STATEMENT_MAGIC, origin, size, subject, salt_length, " ".join(["catalog"] + [str(n) for n in catalog_versions]),
                                                " ".join(["events"] + [str(n) for n in events]))


def parse_statement(text):
    """(origin, size, subject, catalogue-version seqs, event seqs) of a statement's text."""
    lines = text.split("\n")
    if not (len(lines) == 7 and lines[6] == "" and lines[0] == STATEMENT_MAGIC and _decimal(lines[2], signed=True) is not None
            and _fields(lines[4])[:1] == ["catalog"] and _fields(lines[5])[:1] == ["events"]):
        raise NoteError("not an export statement")
    subject_line = lines[3].split(" ")
    salt_length = _decimal(subject_line[3]) if len(subject_line) == 4 else None
    if not (len(subject_line) == 4 and subject_line[0] == "subject" and subject_line[2] == "salt-length"
            and salt_length is not None and 0 < salt_length <= 1024):
        raise NoteError("export statement: the subject line is not 'subject REF salt-length N'")

    def seqs(line):
        out = []
        for part in _fields(line)[1:]:
            n = _decimal(part)
            if n is None:
                raise NoteError("export statement: '%s' is not a sequence number" % part)
            out.append(n)
        return out
    return lines[1], int(lines[2]), subject_line[1], salt_length, seqs(lines[4]), seqs(lines[5])


def check_entry(e, checkpoint, schedule, proof_required, rotated=False):
    """One entry (Checking an entry): decode, seq, key id and signature with the key of
    `schedule` (a KeySchedule) in force for its seq, inclusion proof. `rotated`: the file carries
    `keys`, and the reason then names the key in force. Returns the event."""
    seq = max(0, e.seq)
    line = e.line.encode("utf-8")
    try:
        event = decode_line(line)
    except DecodeError as err:
        raise ExportFailure(seq, "malformed event: %s" % err)
    if event.seq != e.seq:
        raise ExportFailure(seq, "the entry says seq %d but its event is seq %d" % (e.seq, event.seq))
    key, kid = schedule.in_force(max(0, event.seq))
    if event.kid != kid or not signature_ok(key, SIGNING_CONTEXT + event.body, event.signature):
        raise ExportFailure(seq, "the event's signature does not verify with the ledger's key in force for it, %s" % kid if rotated
                            else "the event's signature does not verify with the pinned key")
    if proof_required and not (e.seq < checkpoint.size
                               and check_inclusion(e.proof, e.seq, leaf_hash(line), checkpoint.size, checkpoint.root)):
        raise ExportFailure(seq, "the inclusion proof does not lead to the checkpoint's root (tree size %d)" % checkpoint.size)
    return event


# ---------------------------------------------------------------------------------------------
# Keys (Spec/export-format.md, "Keys"): the key schedule of a bundle, state proof or consistency
# proof, from the pinned key, the genesis entry and `keys`
# ---------------------------------------------------------------------------------------------

class BundleKeys:
    """The key schedule a file is checked under (a KeySchedule of verify_vectors.py: the pinned
    key alone without `keys`; else the genesis key and each rotation's key, as the file claims
    them until verify_chain has checked them), the checkpoint key (a NoteKey) and the `keys`
    entries."""

    def __init__(self, schedule, checkpoint_key, rotations):
        self.schedule, self.checkpoint_key, self.rotations = schedule, checkpoint_key, rotations

    @property
    def rotated(self):
        return bool(self.rotations)

    def note_key(self, size):
        """The verifier key of the ledger's name and the key in force for seq `size`: the key of
        a checkpoint of that size (a consistency proof's older checkpoint)."""
        return NoteKey(self.checkpoint_key.name, self.schedule.in_force(max(0, size))[0])


def claimed_size(note, unreadable):
    """The size a signed checkpoint claims, read without its signature; `unreadable` when the
    note or its checkpoint cannot be read."""
    try:
        return parse_checkpoint(split_note(note)[0]).size
    except NoteError:
        return unreadable


def resolve_keys(pinned, genesis_line, rotations, checkpoint_note, verifier_key, what):
    """Keys, items 1 and 2: the key schedule and the checkpoint key, from the pinned NoteKey, the
    genesis entry's line, the `keys` entries and the checkpoint note (its claimed size picks its
    key); `verifier_key` (None for a consistency proof, which has none) must be the checkpoint
    key's text. `what` names the file in reasons: bundle, proof, consistency proof. Returns
    BundleKeys or raises ExportFailure."""
    if not rotations:
        if verifier_key is not None and not same_bytes(verifier_key, pinned.text):
            raise ExportFailure(None, "the %s's verifier key %s differs from the pinned key %s" % (what, verifier_key, pinned.text))
        return BundleKeys(KeySchedule(pinned.public_key), pinned, [])
    try:
        genesis = decode_line(genesis_line.encode("utf-8")) if genesis_line is not None else None
    except DecodeError:
        genesis = None
    genesis_key = hex_decode(genesis.public_key, 32) if genesis is not None and genesis.type == "ledger.created" else None
    if genesis_key is None:
        raise ExportFailure(0, "the genesis entry does not name the genesis key that the 'keys' rotations start from")
    schedule = KeySchedule(genesis_key)
    for e in rotations:
        try:
            event = decode_line(e.line.encode("utf-8"))
        except DecodeError:
            event = None
        # In order: each seq at least the previous rotation's + 1 (where the key in force starts).
        if event is None or event.type != "key.rotated" or event.seq != e.seq or e.seq < schedule.periods[-1][0]:
            raise ExportFailure(max(0, e.seq), "an entry of 'keys' is not a key rotation, or is out of order")
        key = bytes.fromhex(event.public_key)
        schedule.periods.append((e.seq + 1, key, key_id(key)))  # claimed; verify_chain checks it
    if pinned.public_key not in schedule.keys:
        raise ExportFailure(None, "the pinned key %s is neither the ledger's genesis key nor a key that the %s's key rotations introduce"
                            % (pinned.text, what))
    # Unreadable: 2^63 - 1, so that no rotation is refused here and opening the note fails next.
    claimed = claimed_size(checkpoint_note, INT64_MAX)
    late = next((e for e in rotations if e.seq >= claimed), None)
    if late is not None:
        raise ExportFailure(max(0, late.seq), "a key rotation of 'keys' is not below the checkpoint's size %d" % claimed)
    try:
        checkpoint_key = NoteKey(pinned.name, schedule.in_force(claimed)[0])
    except NoteError as e:
        raise ExportFailure(None, "the pinned key's name cannot name a checkpoint key: %s" % e)
    if verifier_key is not None and not same_bytes(verifier_key, checkpoint_key.text):
        raise ExportFailure(None, "the %s's verifier key %s is not the key that signs its checkpoint, %s"
                            % (what, verifier_key, checkpoint_key.text))
    return BundleKeys(schedule, checkpoint_key, rotations)


def verify_chain(keys, checkpoint):
    """Keys, item 3, once the checkpoint is open: each `keys` entry, in order, checked as an entry
    with its proof under the schedule of the entries before it, then taken in as ledger-format.md,
    Key rotation, items 2-4 (verify_vectors.KeySchedule.admit), LEDGER the checkpoint's origin."""
    if not keys.rotations:
        return
    verified = KeySchedule(keys.schedule.periods[0][1])
    for e in keys.rotations:
        event = check_entry(e, checkpoint, verified, True, rotated=True)
        if event.type != "key.rotated":
            continue  # cannot happen: resolve_keys read the same line
        event.line = None  # admit names the line of a ledger's log; a file's entry has none
        try:
            verified.admit(event, checkpoint.origin)
        except Failure as f:
            raise ExportFailure(event.seq, f.reason)


def check_same_rotations(keys, entries, events):
    """The key.rotated events among a ledger stream's `entries` (decoded as `events`) must be
    exactly the `keys` entries: the same seqs and lines."""
    found = [e for e, event in zip(entries, events) if event.type == "key.rotated"]
    if ([e.seq for e in found] != [e.seq for e in keys.rotations]
            or not all(same_bytes(a.line, b.line) for a, b in zip(found, keys.rotations))):
        raise ExportFailure(None, "the key rotations among the ledger's events (seq [%s]) are not the ones 'keys' holds (seq [%s])" % (
            ", ".join(str(e.seq) for e in found), ", ".join(str(e.seq) for e in keys.rotations)))


def with_revocations(keys, events):
    """Keys, Revocations: the key.revoked events among a ledger stream's checked `events`, in
    order, taken into a copy of the file's schedule (ledger-format.md, Key rotation, Revocation,
    items 1-6; verify_vectors.KeySchedule.revocation), each failure with the revocation's seq.
    Returns the KeySchedule with its revocations."""
    schedule = KeySchedule(keys.schedule.periods[0][1])
    schedule.periods = list(keys.schedule.periods)
    for event in events:
        if event.type != "key.revoked":
            continue
        problem, revocation = schedule.revocation(event)
        if problem is not None:
            raise ExportFailure(event.seq, problem)
        schedule.revocations.append(revocation)
    return schedule


def check_attested(event, schedule):
    """Keys, Revocations: an event a revoked key signed in its compromised window (seq C ... U)
    must hash to its revocation's `attested` entry at its position; else its seq fails."""
    revocation = schedule.unattested(event.seq, event.kid, sha256(event.body).hex())
    if revocation is not None:
        seq, kid, since = revocation[:3]
        raise ExportFailure(event.seq, "the event was signed by key %s after it was compromised (seq %d on), and its revocation at "
                            "seq %d does not re-attest it" % (kid, since, seq))


def display_name(names):
    """The English name, else the first by language tag (tags compared as Swift sorts strings)."""
    if "en" in names:
        return names["en"]
    return names[min(names, key=nfc)]


def listing_json(state, catalog):
    """The projected state (ListingJSON) of a replayed subject under `catalog`, the catalogue in
    force at the end: every feature in catalogue order, its consents required first; 'state'
    given, outdated (given under another version than the one in force) or withheld; 'version'
    the version the subject agreed to, 'currentVersion' the one in force; a withheld consent's
    'reason' (never-given, withdrawn, cascade-withdrawn); a given one's evidence members, a sealed
    reference as the replay holds it: opened, as 'evidence', when the subject's record was at hand
    (verify_subject, the state proof), 'sealedEvidence' (its hex) otherwise."""
    out = []
    for f in catalog.ordered:
        consents = []
        for c in f["consents"]:
            status = state.status(f["code"], c["code"])
            m = {"code": c["code"], "name": display_name(c["names"]), "required": c["required"],
                 "currentVersion": c["version"], "everGiven": status is not None}
            if status is not None and status[0] == "given":
                m.update(state="given" if same_bytes(status[1], c["version"]) else "outdated", validFrom=status[3], version=status[1])
                m.update(status[4])  # the grant's evidence members, as the event names them (a sealed reference opened)
            else:
                # A withheld consent says why: never given, withdrawn, or withdrawn by cascade.
                m.update(state="withheld", validFrom=None)
                if status is None:
                    m["reason"] = "never-given"
                else:
                    m["withdrawnAt"] = status[1]
                    m["reason"] = "withdrawn" if status[3] is None else "cascade-withdrawn"
            consents.append(m)
        out.append({"code": f["code"], "key": f["key"], "name": display_name(f["names"]),
                    "active": state.is_active(f), "consents": consents})
    return out


def in_force(versions, seq):
    """The catalogue in force for an event at `seq`: the newest version with a smaller seq."""
    return [c for s, c in versions if s < seq][-1]


class ExportReport:
    pass


def verify_bundle(data, key):
    """Verifies bundle bytes against the pinned NoteKey. Returns an ExportReport or raises
    ExportFailure naming the first failure in the order of the spec."""
    b = read_bundle(data)
    # 1. Only the pinned key is trusted: the key schedule and the checkpoint key (Keys); without
    # `keys`, the bundle's verifier key must be the pinned key's text byte for byte.
    keys = resolve_keys(key, b.genesis.line, b.keys, b.checkpoint, b.verifier_key, "bundle")
    # 2. The checkpoint, opened with the checkpoint key; then the chain of `keys`.
    try:
        checkpoint = parse_checkpoint(open_note(b.checkpoint, keys.checkpoint_key))
    except NoteError as e:
        raise ExportFailure(None, "checkpoint: %s" % e)
    if not same_bytes(checkpoint.origin, key.name):
        raise ExportFailure(None, "the checkpoint's origin '%s' is not the pinned key's ledger '%s'" % (checkpoint.origin, key.name))
    if not same_bytes(b.ledger, key.name):
        raise ExportFailure(None, "the bundle says it is from ledger '%s', not the pinned key's ledger '%s'" % (b.ledger, key.name))
    verify_chain(keys, checkpoint)
    # 3. The catalogue and the genesis event.
    catalog_bytes = serialize(b.catalog)
    try:
        catalog, features = decode_catalog(b.catalog)
    except CatalogError as e:
        raise ExportFailure(0, "catalogue: %s" % e)
    genesis = check_entry(b.genesis, checkpoint, keys.schedule, True, keys.rotated)
    if genesis.type != "ledger.created" or genesis.seq != 0:
        raise ExportFailure(0, "the genesis entry is not the ledger's first event")
    if not (same_text(genesis.public_key, keys.schedule.periods[0][1].hex()) and same_text(genesis.ledger, key.name)):
        raise ExportFailure(0, "the genesis event pins another key or ledger name")
    if sha256(catalog_bytes).hex() != genesis.catalog:
        raise ExportFailure(0, "the bundled catalogue's SHA-256 differs from the genesis event's")
    report = ExportReport()
    report.scope, report.checkpoint = b.scope, checkpoint
    if b.scope == "subject":
        verify_subject(b, checkpoint, catalog, features, key, keys)
        report.events, report.subject = len(b.events), b.subject[0]
    else:
        verify_all(b, genesis, checkpoint, catalog, keys)
        report.events, report.subject = len(b.events) + 1, None
    return report


def verify_subject(b, checkpoint, catalog, features, key, keys):
    # 4S.
    if b.subject is None or b.state is None:
        raise ExportFailure(None, "a subject export needs 'subject' and 'state'")
    if b.streams is not None:
        return verify_subject_by_streams(b, key)
    subject_id, ref, salt_hex = b.subject
    salt = hex_decode(salt_hex)
    if salt is None:
        raise ExportFailure(None, "the subject's salt is not hex")
    if len(salt) != SALT_LENGTH:
        raise ExportFailure(None, "the subject's salt is %d bytes, not %d" % (len(salt), SALT_LENGTH))
    if not same_text(subject_ref(subject_id, salt), ref):
        raise ExportFailure(None, "the subject's pseudonym does not match its id and salt")
    previous = 0
    for e in b.events:
        if not e.seq > previous:
            raise ExportFailure(max(0, e.seq), "events are not in increasing sequence order")
        previous = e.seq
    # The catalogue versions: the genesis catalogue, then each published version, each proven. A
    # key rotation or revocation of the ledger's stream changes no catalogue; the rotations there
    # must be 'keys', and the revocations are taken in.
    versions, ledger_events = [(0, catalog)], []
    for e in b.catalog_versions:
        event = check_entry(e, checkpoint, keys.schedule, True, keys.rotated)
        ledger_events.append(event)
        if event.type in ("key.rotated", "key.revoked", "clock.corrected") and e.seq > versions[-1][0]:
            continue
        if event.type != "catalog.published" or not e.seq > versions[-1][0]:
            raise ExportFailure(event.seq, "a catalogue-version entry is not a published catalogue, or is out of order")
        if catalog_hash(event.document) != event.catalog:
            raise ExportFailure(event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
        problem = problem_as_update(event.document, versions[-1][1])
        if problem is not None:
            raise ExportFailure(event.seq, "the published catalogue cannot replace the one in force: %s" % problem)
        versions.append((e.seq, event.document))
    check_same_rotations(keys, b.catalog_versions, ledger_events)
    revoked = with_revocations(keys, ledger_events)
    # The signed statement says which events and catalogue versions the bundle must hold; it is
    # signed with the checkpoint key.
    if b.statement is None:
        raise ExportFailure(None, "a subject export needs its signed statement")
    try:
        origin, size, statement_subject, salt_length, listed_versions, listed_events = parse_statement(
            open_note(b.statement, keys.checkpoint_key))
    except NoteError as e:
        raise ExportFailure(None, "export statement: %s" % e)
    if not (same_bytes(origin, key.name) and size == checkpoint.size and same_bytes(statement_subject, ref) and salt_length == len(salt)):
        raise ExportFailure(None, "the signed export statement is for another ledger, checkpoint size or subject")
    bundled_versions = [e.seq for e in b.catalog_versions]
    if listed_versions != bundled_versions:
        raise ExportFailure(None, "the signed export statement lists catalogue versions [%s] but the bundle holds [%s]: a version was "
                            "left out or added" % (", ".join(map(str, listed_versions)), ", ".join(map(str, bundled_versions))))
    bundled = [e.seq for e in b.events]
    if listed_events != bundled:
        missing = sorted(set(listed_events) - set(bundled))
        raise ExportFailure(missing[0] if missing else None, "the signed export statement lists events the bundle does not hold exactly "
                            "(%d listed, %d bundled): an event was left out or added" % (len(listed_events), len(bundled)))
    state = SubjectState()
    # The bundle holds the subject's record, so its sealed evidence opens (Spec/erasure.md, Sealed
    # evidence): item 7.3, before the replay, which then lists the reference in clear.
    key_of_subject = evidence_key(subject_id, salt)
    for e in b.events:
        event = check_entry(e, checkpoint, keys.schedule, True, keys.rotated)
        if event.subject is None or not same_bytes(event.subject, ref):
            raise ExportFailure(event.seq, "the event is about another subject")
        check_attested(event, revoked)
        try:
            event = opened_event(event, key_of_subject)
        except SealError as err:
            raise ExportFailure(event.seq, "%s (the key the bundle's subject record gives)" % err.problem)
        try:
            state.apply(event, in_force(versions, e.seq))
        except Violation as v:
            raise ExportFailure(event.seq, "replay: %s" % v.reason)
    if state.open is not None:
        raise ExportFailure(None, "the events end inside a command: some of the subject's events are missing")
    if not json_equal(listing_json(state, versions[-1][1]), b.state):
        raise ExportFailure(None, "the bundled state differs from the replay of the bundled events")


def verify_subject_by_streams(b, key):
    """4S with subject-map proofs: the bundle holds what a state proof of the subject at the
    checkpoint holds, and is checked as one (state-proof.md, "Verifying a state proof")."""
    from verify_state import STATE_FORMAT, verify_state  # imported here: verify_state imports this file
    proof = {name: b.raw[name] for name in ("ledger", "verifierKey", "checkpoint", "catalog", "genesis", "subject", "events",
                                            "catalogVersions", "state", "keys") if name in b.raw}
    proof.update({name: value for name, value in b.streams.items() if value is not None})
    proof["format"] = STATE_FORMAT
    try:
        verify_state(serialize(proof), key)
    except Exception as failure:  # verify_state's ExportFailure, whose class is its own import of this file's
        if not hasattr(failure, "reason"):
            raise
        raise ExportFailure(failure.seq, failure.reason)


def verify_all(b, genesis, checkpoint, catalog, keys):
    # 4A.
    if len(b.events) + 1 != checkpoint.size:
        raise ExportFailure(None, "the bundle holds %d events but the checkpoint covers %d" % (len(b.events) + 1, checkpoint.size))
    replay, previous, leaves, rotations, revocations = Replay(catalog), ZERO_HASH, [], [], []
    entries = [b.genesis] + b.events
    for i, e in enumerate(entries):
        if e.seq != i:
            raise ExportFailure(max(0, e.seq), "expected seq %d: events are missing or out of order" % i)
        event = genesis if i == 0 else check_entry(e, checkpoint, keys.schedule, False, keys.rotated)
        if event.type == "key.rotated":
            rotations.append((e, event))
        if event.type == "key.revoked":
            revocations.append(event)
        if event.prev != previous:
            raise ExportFailure(event.seq, "prev does not match the previous event's hash")
        if event.type == "catalog.published" and catalog_hash(event.document) != event.catalog:
            raise ExportFailure(event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
        previous = sha256(event.body).hex()
        try:
            replay.apply(event)
        except Violation as v:
            raise ExportFailure(event.seq, "replay: %s" % v.reason)
        leaves.append(leaf_hash(e.line.encode("utf-8")))
    if tree_root(leaves) != checkpoint.root:
        raise ExportFailure(None, "the events' Merkle root differs from the checkpoint's")
    if replay.open is not None:
        raise ExportFailure(None, "the events end inside a command")
    check_same_rotations(keys, [e for e, _ in rotations], [event for _, event in rotations])
    # 6. The revocations, in order; then each entry of each revocation's window (seq C ... U), in
    # order, checked again as an entry without its proof, must be re-attested.
    revoked = with_revocations(keys, revocations)
    for _, _, since, until, _ in revoked.revocations:
        for seq in range(since, until + 1):
            check_attested(check_entry(entries[seq], checkpoint, keys.schedule, False, keys.rotated), revoked)


def read_proof_entry(v, what):
    """An entry read as a state proof's (state-proof.md, Reading the file): an integer seq >= 0, a
    string line and a proof that is an array of base64 hashes of 32 bytes; `what` names it."""
    if not (isinstance(v, dict) and is_int(v.get("seq")) and v["seq"] >= 0 and isinstance(v.get("line"), str)):
        raise ExportFailure(None, "%s lacks 'seq' or 'line'" % what)
    if not isinstance(v.get("proof"), list):
        raise ExportFailure(None, "%s's proof is not an array" % what)
    proof = []
    for item in v["proof"]:
        raw = b64decode(item)
        if raw is None or len(raw) != 32:
            raise ExportFailure(None, "%s's proof holds something that is not the base64 of 32 bytes" % what)
        proof.append(raw)
    return Entry(v["seq"], v["line"], proof)


def verify_consistency(data, key):
    """Verifies a consistency-proof file. Returns (old, new) checkpoints or raises ExportFailure."""
    try:
        value = parse_json(data)
    except ValueError:
        value = None
    top = value if isinstance(value, dict) else {}
    if not (top.get("format") == CONSISTENCY_FORMAT and isinstance(top.get("old"), str)
            and isinstance(top.get("new"), str) and isinstance(top.get("proof"), list)):
        raise ExportFailure(None, "not a consistency proof file (format %s)" % CONSISTENCY_FORMAT)
    proof = []
    for h in top["proof"]:
        raw = b64decode(h)
        if raw is None or len(raw) != 32:
            raise ExportFailure(None, "a proof hash is not the base64 of 32 bytes")
        proof.append(raw)
    # The second form: the genesis entry and the key rotations below `new`, with their proofs.
    rotations, genesis = [], None
    if "keys" in top:
        if not isinstance(top["keys"], list):
            raise ExportFailure(None, "'keys' is not an array")
        rotations = [read_proof_entry(item, "an entry of 'keys'") for item in top["keys"]]
        genesis = read_proof_entry(top.get("genesis"), "'genesis'")
    # 3. Each checkpoint opened with the key in force at the size it claims.
    keys = resolve_keys(key, genesis.line if genesis is not None else None, rotations, top["new"], None, "consistency proof")
    try:
        old = parse_checkpoint(open_note(top["old"], keys.note_key(claimed_size(top["old"], 0))))
        new = parse_checkpoint(open_note(top["new"], keys.checkpoint_key))
    except NoteError as e:
        raise ExportFailure(None, "checkpoint: %s" % e)
    # 4. The origins; with `keys`, the genesis entry and the chain, against `new`.
    if not (same_text(old.origin, key.name) and same_text(new.origin, key.name)):
        raise ExportFailure(None, "a checkpoint is for another ledger than the pinned key's")
    if genesis is not None and rotations:
        event = check_entry(genesis, new, keys.schedule, True, True)
        if event.type != "ledger.created" or event.seq != 0 or not same_text(event.ledger, key.name):
            raise ExportFailure(0, "the genesis entry is not the ledger's first event")
    verify_chain(keys, new)
    if not check_consistency(proof, old.size, old.root, new.size, new.root):
        raise ExportFailure(None, "the consistency proof from size %d to size %d does not verify: the log did not only grow"
                            % (old.size, new.size))
    return old, new


def file_kind(data):
    """'consistency' for a consistency-proof file, else 'bundle'."""
    try:
        value = parse_json(data)
    except ValueError:
        return "bundle"
    return "consistency" if isinstance(value, dict) and value.get("format") == CONSISTENCY_FORMAT else "bundle"


def describe_report(r):
    what = "subject %s, %d events" % (r.subject, r.events) if r.scope == "subject" else "the whole ledger, %d events" % r.events
    return "%s; checkpoint %s size %d root %s" % (what, r.checkpoint.origin, r.checkpoint.size, b64encode(r.checkpoint.root))


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

GO_VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SIGNER_KEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_SIGNATURE_LINE = "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="


def raises(fn, exception, phrase):
    """(ok, detail): fn() must raise `exception` whose text contains `phrase`."""
    try:
        fn()
    except exception as e:
        return phrase in str(e), str(e)
    return False, "accepted"


def self_tests(checks):
    # Base64: one spelling per value.
    checks.check(b64decode("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=") == bytes(range(32))
                 and all(b64decode(t) is None for t in ("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=", "AAE", "AA==AA==",
                                                         "AA=A", "AAECAw\n==", "AAEC-w==", "A===")) and b64decode("") == b"",
                 "base64: canonical padded standard base64 accepted; non-zero pad bits, missing padding, inner '=', "
                 "newlines and the URL alphabet rejected")

    # (a) Go's golang.org/x/mod/sumdb/note example.
    go_note = GO_TEXT + "\n" + GO_SIGNATURE_LINE + "\n"
    key = parse_verifier_key(GO_VERIFIER_KEY)
    checks.check(key.name == "PeterNeumann" and "%08x" % key.hash == "c74f20a3" and key.text == GO_VERIFIER_KEY,
                 "Go note example: verifier key parses, key hash = SHA-256(name || 0x0A || 0x01 || key)[0:4] = c74f20a3, text round-trips",
                 key.public_key.hex())
    checks.run("Go note example: the note opens with the verifier key and yields its text",
               lambda: (open_note(go_note, key) == GO_TEXT, "%d bytes of text" % len(GO_TEXT)))
    seed = b64decode(GO_SIGNER_KEY.split("+", 4)[4])[1:]  # PRIVATE+KEY+name+hash+base64(0x01 || seed)
    checks.check(ed25519_public_key(seed) == key.public_key and sign_note(GO_TEXT, key, seed) == go_note,
                 "Go note example: signing the text with the example's signer key reproduces the note byte for byte")
    checks.run("Go note example: a changed text fails", lambda: raises(
        lambda: open_note(go_note.replace("cryptography", "cryptographY"), key), NoteError, "the signature by PeterNeumann does not verify"))
    other = NoteKey("PeterNeumann", ed25519_public_key(bytes(range(32, 64))))
    checks.run("Go note example: another key of the same name finds no signature", lambda: raises(
        lambda: open_note(go_note, other), NoteError, "the note has no signature by key PeterNeumann+%08x" % other.hash))
    checks.run("Go note example: a verifier key with a wrong hash is refused", lambda: raises(
        lambda: parse_verifier_key(GO_VERIFIER_KEY.replace("c74f20a3", "c74f20a4")), NoteError, "does not match its name and key"))
    checks.run("verifier key: uppercase hash digits are refused", lambda: raises(
        lambda: parse_verifier_key(GO_VERIFIER_KEY.replace("c74f20a3", "C74F20A3")), NoteError, "<8 hex digits>"))
    checks.run("verifier key: a name with a space is refused", lambda: raises(
        lambda: NoteKey("has space", key.public_key), NoteError, "must be non-empty, without spaces"))

    def unusual_notes():
        two = GO_TEXT + "\n\u2014 witness.example AAAAAQE=\n" + GO_SIGNATURE_LINE + "\n"
        results = [open_note(two, key) == GO_TEXT]
        for bad, phrase in ((GO_TEXT + GO_SIGNATURE_LINE + "\n", "no blank line"),
                            (GO_TEXT + "\n" + GO_SIGNATURE_LINE, "does not end with a newline"),
                            (GO_TEXT + "\n" + GO_SIGNATURE_LINE + "\r\n", "does not end with a newline"),
                            (GO_TEXT + "\n- PeterNeumann AAAAAQ==\n", "does not start with"),
                            (GO_TEXT + "\n\u2014 PeterNeumann AAAA\n", "malformed signature line"),
                            (GO_TEXT.replace("is.", "is.\t") + "\n" + GO_SIGNATURE_LINE + "\n", "control characters")):
            try:
                open_note(bad, key)
                results.append(False)
            except NoteError as e:
                results.append(phrase in str(e))
        return all(results), "%d of %d as specified" % (sum(results), len(results))
    checks.run("signed notes: other keys' signatures are ignored; malformed notes are refused", unusual_notes)

    # Checkpoints.
    def checkpoints():
        c = parse_checkpoint("example.com/log\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")
        ext = parse_checkpoint("example.com/log\n0\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\nextension\nmore\n")
        ok = c.origin == "example.com/log" and c.size == 42 and c.root == bytes(range(32)) and ext.size == 0
        ok = ok and c.text == "example.com/log\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
        for bad in ("example.com/log\n042\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
                    "example.com/log\n+42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
                    "example.com/log\n9223372036854775808\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
                    "example.com/log\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=\n",
                    "example.com/log\n42\nAAECAw==\n", "\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
                    "example.com/log\n42\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\nx\n", "example.com/log\n42\n"):
            try:
                parse_checkpoint(bad)
                ok = False
            except NoteError:
                pass
        return ok, "origin, size, root; extension lines ignored"
    checks.run("checkpoints: parsed as C2SP tlog-checkpoint; leading zeros, '+', overflow, bad roots, empty origin "
               "or extension lines refused", checkpoints)

    # (b) The Merkle tree against the RFC's recursive definitions.
    entries = [("entry %d" % i).encode() for i in range(200)]
    stored = build_stored(entries)
    checks.check(all(stored_hash_count(n) == len(build_stored(entries[:n])) for n in range(0, 65))
                 and stored_hash_count(200) == len(stored) and stored_hash_count(10) == 18,
                 "tree.hashes layout: StoredHashCount(n) = number of hashes stored for n records (n = 0..64, 200); 18 for 10")
    checks.check([stored_hash_index(0, n) for n in range(6)] == [0, 1, 3, 4, 7, 8]
                 and [stored_hash_index(1, n) for n in range(3)] == [2, 5, 9] and stored_hash_index(2, 0) == 6,
                 "tree.hashes layout: StoredHashIndex places level 0 at 0,1,3,4,7,8, level 1 at 2,5,9, level 2 at 6")
    rfc = RFC6962(entries[:40])
    shifted = RFC6962(entries[1:41])  # another log, for "another old tree"
    read = stored.__getitem__
    roots = paths = proofs = accepted = rejected = 0
    bad = []
    for n in range(1, 41):
        root = rfc.mth(0, n)
        roots += stored_tree_hash(n, read) == root == tree_root([leaf_hash(e) for e in entries[:n]])
        for m in range(n):
            p = stored_inclusion_proof(m, n, read)
            paths += p == rfc.path(m, 0, n)
            accepted += check_inclusion(p, m, leaf_hash(entries[m]), n, root)
            fails = [not check_inclusion(p + [root], m, leaf_hash(entries[m]), n, root)]
            if n > 1:
                fails.append(not check_inclusion(p, m, leaf_hash(entries[(m + 1) % n]), n, root))
                fails.append(not check_inclusion(p, (m + 1) % n, leaf_hash(entries[m]), n, root))
            for i in range(len(p)):
                changed = list(p)
                changed[i] = bytes([changed[i][0] ^ 0x40]) + changed[i][1:]
                fails.append(not check_inclusion(changed, m, leaf_hash(entries[m]), n, root))
            rejected += all(fails)
            if not all(fails):
                bad.append("inclusion %d/%d" % (m, n))
        for m in range(1, n + 1):
            p = stored_consistency_proof(m, n, read)
            proofs += p == rfc.proof(m, n)
            accepted += check_consistency(p, m, rfc.mth(0, m), n, root)
            fails = [not check_consistency(p, m, shifted.mth(0, m), n, root)]
            for i in range(len(p)):
                changed = list(p)
                changed[i] = bytes([changed[i][0] ^ 0x40]) + changed[i][1:]
                fails.append(not check_consistency(changed, m, rfc.mth(0, m), n, root))
            rejected += all(fails)
            if not all(fails):
                bad.append("consistency %d->%d" % (m, n))
    checks.check(roots == 40, "Merkle: for n = 1..40 the stored-hash tree hash and the frontier root equal RFC 6962 MTH(D[n])",
                 "%d of 40" % roots)
    checks.check(paths == 820, "Merkle: inclusion proofs from stored hashes equal RFC 6962 PATH(m, D[n]) for all 0 <= m < n <= 40",
                 "%d of 820" % paths)
    checks.check(proofs == 820, "Merkle: consistency proofs from stored hashes equal RFC 6962 PROOF(m, D[n]) for all 1 <= m <= n <= 40",
                 "%d of 820" % proofs)
    checks.check(accepted == 1640, "Merkle: every one of those proofs is accepted by CheckRecord / CheckTree", "%d of 1640" % accepted)
    checks.check(rejected == 1640 and not bad, "Merkle: each is refused with a changed hash, an extra hash, another leaf, "
                 "another index or another old tree", ", ".join(bad[:5]) or "%d of 1640" % rejected)

    # The lenient JSON reader of bundles.
    def json_reader():
        ok = parse_json(b' {\n "b" : [1, -2, true, null],\t"a":"\\/\\u00e9"}\r\n') == {"b": [1, -2, True, None], "a": "/\u00e9"}
        ok = ok and json_equal({"a": [1, True]}, {"a": [1, True]}) and not json_equal(True, 1) and not json_equal(0, False)
        ok = ok and json_equal({"Jos\u00e9": "\u00e9"}, {"Jose\u0301": "e\u0301"}) and not json_equal({"a": 1}, {"a": 1, "b": 2})
        for bad in (b'{"a":1,"a":2}', b'{"\xc3\xa9":1,"e\xcc\x81":2}', b"1.0", b"1e3", b"-0", b"01", b"9007199254740992", b"NaN",
                    b'"\\ud800"', b'"\xed\xa0\x80"', b"[" * 65 + b"]" * 65, b"\xef\xbb\xbf{}", b'{"a":1}x', b'"\x01"'):
            try:
                parse_json(bad)
                ok = False
            except ValueError:
                pass
        return ok, "whitespace and any member order accepted; the subset enforced"
    checks.run("bundle JSON: read leniently (whitespace, any order) but only the format's subset of JSON", json_reader)


class Vectors:
    """Spec/vectors/export and the tiny ledger it was made from."""

    def __init__(self, here):
        self.here = here
        self.export = os.path.join(here, "export")
        self.folder = os.path.join(here, "tiny-ledger")
        # The tiny ledger's event lines: its log holds a head line after each commit, which is
        # not an entry of the Merkle tree the proofs and bundles are about.
        self.lines = event_lines(read_file(self.folder, "ledger.jsonl"))
        self.seed = hex_decode(trimmed_text(read_file(self.folder, "secret.key")), 32)

    def read(self, name):
        return read_file(self.export, name)


def check_vectors(checks, here):
    v = Vectors(here)
    expected_bytes = v.read("expected.json")
    expected = json.loads(expected_bytes)
    checks.check(expected_bytes.endswith(b"\n") and serialize(parse_canonical(expected_bytes[:-1])) == expected_bytes[:-1],
                 "export/expected.json is canonical JSON followed by a newline")
    key_file = v.read("verifier-key.txt")
    checks.check(key_file.endswith(b"\n") and not key_file.endswith(b"\n\n") and key_file[:-1].decode() == expected["verifierKey"],
                 "export/verifier-key.txt is expected.json's verifierKey and one newline", expected["verifierKey"])
    try:
        key = parse_verifier_key(key_file[:-1].decode("utf-8"))
    except NoteError as e:
        checks.check(False, "export/verifier-key.txt parses", str(e))
        return
    report = verify_folder(v.folder)
    checks.check(key.public_key.hex() == report.public_key.hex() and key.name == report.ledger_name,
                 "the verifier key is the tiny ledger's name and public key", "%s, %s" % (key.name, key.public_key.hex()))

    # (c) The checkpoint.
    note = v.read("checkpoint.txt").decode("utf-8")
    try:
        checkpoint = parse_checkpoint(open_note(note, key))
    except NoteError as e:
        checks.check(False, "export/checkpoint.txt opens with the verifier key", str(e))
        return
    checks.check(checkpoint.origin == key.name and checkpoint.size == len(v.lines),
                 "export/checkpoint.txt opens with the verifier key: origin is the ledger name, size the number of log lines",
                 "%s, %d" % (checkpoint.origin, checkpoint.size))
    rfc = RFC6962(v.lines)
    checks.check(checkpoint.root == rfc.mth(0, len(v.lines)) == tree_root([leaf_hash(l) for l in v.lines]),
                 "export/checkpoint.txt root = MTH of tiny-ledger/ledger.jsonl's event lines (each without its newline; head lines left out)",
                 b64encode(checkpoint.root))
    stored = build_stored(v.lines)
    checks.check(sign_note(head_text(v.lines, key.name, stored.__getitem__), key, v.seed) == note,
                 "export/checkpoint.txt is the ledger's signed head (the checkpoint and its 'chain' line), reproduced byte for byte with the test key")
    checks.check(len(stored) == stored_hash_count(10) == 18 and stored_tree_hash(10, stored.__getitem__) == checkpoint.root,
                 "the tiny ledger's tree.hashes would hold 18 hashes (576 bytes); TreeHash from them is the checkpoint's root")
    consistency = json.loads(v.read("consistency-6-10.json"))
    old = parse_checkpoint(open_note(consistency["old"], key))
    checks.check(old.size == 6 and old.root == rfc.mth(0, 6) and consistency["new"] == note,
                 "export/consistency-6-10.json: old checkpoint is MTH of the first 6 lines, new is checkpoint.txt",
                 b64encode(old.root))

    # (d) Every case of expected.json, with the pinned key.
    for c in expected["cases"]:
        data = v.read(c["file"])
        name = "export/%s (%s) %s" % (c["file"], c["kind"], "verifies" if c["ok"] else "fails: %s%s" % (
            "seq %d, " % c["seq"] if "seq" in c else "", c["reason"]))

        def run(c=c, data=data):
            try:
                if c["kind"] == "bundle":
                    detail = describe_report(verify_bundle(data, key))
                else:
                    o, n = verify_consistency(data, key)
                    detail = "size %d -> %d" % (o.size, n.size)
            except ExportFailure as f:
                return (not c["ok"] and c["reason"] in f.reason and f.seq == c.get("seq", f.seq)), str(f)
            return c["ok"], detail
        checks.run(name, run)
    check_derived(checks, v, key, checkpoint)
    check_exporter(checks, v, key)
    check_policy_versions(checks, v, key)
    check_evidence(checks, v, key)


def check_derived(checks, v, key, checkpoint):
    """Cases derived here from the vectors (the test key re-signs checkpoints where needed). They
    test this verifier against the spec, not against the reference implementation."""
    # The cases below were written for the signed statement; the bundle with subject-map proofs
    # (the vector) is checked by verify_state.py's cases and by those at the end.
    catalog_value = parse_canonical(read_file(v.folder, "catalog.json"))
    salts = {s["id"]: bytes.fromhex(s["salt"]) for s in json.loads(read_file(v.here, "expected.json"))["subjects"]}
    alice = export_subject(v.lines, "alice", salts["alice"], key, v.seed, catalog_value)
    alice_streams = json.loads(v.read("alice.bundle.json"))
    everything = json.loads(v.read("all.bundle.json"))
    stored = build_stored(v.lines)
    read = stored.__getitem__

    def note_for(text):
        return sign_note(text, key, v.seed)

    def bundle_bytes(obj):
        return serialize(obj) + b"\n"

    def recomputed_state(obj):
        """The listing of a replay of the bundle's own events (what an exporter would put there);
        as far as the events replay."""
        catalog, _ = decode_catalog(obj["catalog"])
        state = SubjectState()
        try:
            for e in obj["events"]:
                state.apply(decode_line(e["line"].encode()), catalog)
        except Violation:
            pass
        return listing_json(state, catalog)

    def edited(base, change):
        obj = json.loads(json.dumps(base))
        change(obj)
        return obj

    def restated(change):
        """`change`, then a statement re-signed for what the bundle then holds: what a key holder
        who leaves events out of an export would do (the statement is a signed claim, not a proof)."""
        def run(o):
            change(o)
            o["statement"] = sign_note(statement_text(key.name, checkpoint.size, o["subject"]["ref"],
                                                      [e["seq"] for e in o.get("catalogVersions", [])],
                                                      [e["seq"] for e in o["events"]]), key, v.seed)
        return run

    def restated_salt(change, salt_length):
        """`change`, then a statement re-signed with another salt length: only a key holder can."""
        def run(o):
            change(o)
            o["statement"] = sign_note(statement_text(key.name, checkpoint.size, o["subject"]["ref"],
                                                      [e["seq"] for e in o.get("catalogVersions", [])],
                                                      [e["seq"] for e in o["events"]], salt_length), key, v.seed)
        return run

    def drop_events(*seqs, recompute=False):
        def change(o):
            o["events"] = [e for e in o["events"] if e["seq"] not in seqs]
            if recompute:
                o["state"]["features"] = recomputed_state(o)
        return change

    def set_state_member(o):
        o["state"]["features"][1]["active"] = not o["state"]["features"][1]["active"]

    def with_bob(o):
        line = v.lines[8].decode()
        o["events"].append({"seq": 8, "line": line, "proof": [b64encode(h) for h in stored_inclusion_proof(8, 10, read)]})

    def entry(at_seq, **members):
        def change(o):
            for e in o["events"]:
                if e["seq"] == at_seq:
                    e.update(members)
        return change

    def proof_hash(seq, i, value):
        def change(o):
            for e in o["events"]:
                if e["seq"] == seq:
                    e["proof"][i] = value
        return change

    def checkpoint_text(text):
        def change(o):
            o["checkpoint"] = note_for(text)
        return change

    other_key = NoteKey(key.name, ed25519_public_key(bytes(range(1, 33))))

    def parse_note_text(note):
        return note[:note.rindex("\n\n") + 1]

    extra_signature = note_for(checkpoint.text)
    extra_signature = extra_signature.replace("\n\n", "\n\n\u2014 witness.example AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 1)
    bad_note_signature = note_for(checkpoint.text)
    bad_note_signature = bad_note_signature[:-6] + ("A" if bad_note_signature[-6] != "A" else "B") + bad_note_signature[-5:]
    origin_root = Checkpoint("consentledger.example/other", 10, checkpoint.root)

    def resign_last(o):
        """All scope: seq 9 edited (actor) and re-signed: chain and replay still hold, the root not."""
        body = decode_line(o["events"][-1]["line"].encode()).body.replace(b'"actor":"self"', b'"actor":"selF"')
        o["events"][-1]["line"] = '{"body":%s,"sig":"%s"}' % (body.decode(), ed25519_sign(v.seed, SIGNING_CONTEXT + body).hex())

    def swap(i, j):
        def change(o):
            o["events"][i], o["events"][j] = o["events"][j], o["events"][i]
        return change

    def pretty(o):
        return json.dumps(o, indent=2).encode()

    cases = [
        ("alice, written with whitespace and escaped non-ASCII (read leniently)", alice, None, None, None, pretty),
        ("alice, with another member in 'state' and at the top level (ignored)", alice,
         lambda o: o.update(note="x") or o["state"].update(extra=1), None, None, None),
        ("alice, checkpoint with extension lines (ignored)", alice, checkpoint_text(checkpoint.text + "extension one\nextension two\n"),
         None, None, None),
        ("alice, checkpoint with a witness signature before the ledger's (ignored)", alice,
         lambda o: o.update(checkpoint=extra_signature), None, None, None),
        ("alice, a whole command (seq 3-5) left out and the state recomputed", alice, drop_events(3, 4, 5, recompute=True), 3,
         "the signed export statement lists events the bundle does not hold exactly (7 listed, 4 bundled)", None),
        ("alice, a whole command (seq 3-5) left out, the state recomputed and the statement re-signed by the key holder "
         "(the statement is a signed claim, not a proof)", alice, restated(drop_events(3, 4, 5, recompute=True)), None, None, None),
        ("alice, one event inside a command (seq 4) left out, state and statement redone (a command's events are consecutive)",
         alice, restated(drop_events(4, recompute=True)), 5, "replay: command starting at seq 3 is incomplete: expected 3 events", None),
        ("alice, a whole command (seq 3-5) left out, state kept, statement redone", alice, restated(drop_events(3, 4, 5)), None,
         "bundled state differs", None),
        ("alice, the last event of a command (seq 7) left out, statement redone", alice, restated(drop_events(7)), None,
         "the events end inside a command", None),
        ("alice, the first event of a command (seq 6) left out, statement redone", alice, restated(drop_events(6)), 7,
         "which is not open for this subject", None),
        ("alice, without its statement", alice, lambda o: o.pop("statement"), None, "a subject export needs its signed statement", None),
        ("alice, the statement signed by another key", alice, lambda o: o.update(statement=sign_note(
            parse_note_text(o["statement"]), other_key, bytes(range(1, 33)))), None, "export statement: the note has no signature by key", None),
        ("alice, the statement for another checkpoint size", alice, lambda o: o.update(statement=sign_note(
            parse_note_text(o["statement"]).replace("\n10\n", "\n9\n", 1), key, v.seed)), None,
         "the signed export statement is for another ledger, checkpoint size or subject", None),
        ("alice, the statement's text not a statement", alice, lambda o: o.update(statement=sign_note(
            parse_note_text(o["statement"]).replace("events", "event", 1), key, v.seed)), None, "export statement: not an export statement", None),
        ("alice, the statement listing a seq with a leading zero", alice, lambda o: o.update(statement=sign_note(
            parse_note_text(o["statement"]).replace(" 7\n", " 07\n", 1), key, v.seed)), None,
         "export statement: export statement: '07' is not a sequence number", None),
        ("alice, a state member changed", alice, set_state_member, None, "bundled state differs", None),
        ("alice, bob's event (seq 8, with a valid proof) added", alice, with_bob, None,
         "the signed export statement lists events the bundle does not hold exactly (7 listed, 8 bundled)", None),
        ("alice, bob's event (seq 8, with a valid proof) added, statement redone", alice, restated(with_bob), 8,
         "the event is about another subject", None),
        ("alice, an entry's seq (7) changed to 8", alice, entry(7, seq=8), 7, "the signed export statement lists events", None),
        ("alice, an entry's seq (7) changed to 8, statement redone", alice, restated(entry(7, seq=8)), 8,
         "the entry says seq 8 but its event is seq 7", None),
        ("alice, an entry without its proof", alice, entry(3, proof=None), 3, "inclusion proof", None),
        ("alice, a proof hash changed", alice, proof_hash(5, 1, b64encode(b"\x00" * 32)), 5, "inclusion proof", None),
        ("alice, a proof hash in non-canonical base64", alice, proof_hash(5, 1, b64encode(b"\x00" * 32)[:-2] + "B="), 5,
         "a proof hash is not the base64 of 32 bytes", None),
        ("alice, another salt", alice, lambda o: o["subject"].update(salt="02" * 16), None, "pseudonym does not match", None),
        ("alice, the salt in uppercase hex", alice, lambda o: o["subject"].update(salt="0A" * 16), None, "salt is not hex", None),
        # Relabelling: bytes moved from the id's start to the salt's end keep the hash.
        ("alice, relabelled as 'ice' (the id's first bytes moved into the salt)", alice,
         lambda o: o["subject"].update(salt=o["subject"]["salt"] + b"al".hex(), id="ice"), None, "the subject's salt is 18 bytes, not 16", None),
        ("alice, relabelled as 'ice' with a statement that says salt-length 18", alice,
         restated_salt(lambda o: o["subject"].update(salt=o["subject"]["salt"] + b"al".hex(), id="ice"), 18), None,
         "the subject's salt is 18 bytes, not 16", None),
        ("alice, without 'state'", alice, lambda o: o.pop("state"), None, "needs 'subject' and 'state'", None),
        ("alice, 'ledger' changed", alice, lambda o: o.update(ledger="consentledger.example/other"), None,
         "the bundle says it is from ledger 'consentledger.example/other', not the pinned key's ledger", None),
        ("alice, checkpoint with another origin, re-signed", alice, checkpoint_text(origin_root.text), None,
         "is not the pinned key's ledger", None),
        ("alice, the ledger's signature on the checkpoint changed", alice, lambda o: o.update(checkpoint=bad_note_signature), None,
         "checkpoint: the signature by consentledger.example/vectors does not verify", None),
        ("alice, checkpoint size 0 for the same root, re-signed", alice, checkpoint_text(Checkpoint(key.name, 0, checkpoint.root).text),
         0, "inclusion proof does not lead to the checkpoint's root (tree size 0)", None),
        ("alice, the catalogue changed", alice, lambda o: o["catalog"]["features"][0].update(key="medication"), 0,
         "the bundled catalogue's SHA-256 differs from the genesis event's", None),
        ("alice, an invalid catalogue", alice, lambda o: o["catalog"].update(features=[]), 0, "catalogue: ", None),
        ("alice, another format", alice, lambda o: o.update(format="consentledger-export-v2"), None, "unknown bundle format", None),
        ("all, the event of seq 5 left out", everything, lambda o: o["events"].pop(4), None,
         "the bundle holds 9 events but the checkpoint covers 10", None),
        ("all, seq 5 and 6 swapped", everything, swap(4, 5), 6, "expected seq 5: events are missing or out of order", None),
        ("all, seq 9 edited and re-signed", everything, resign_last, None, "the events' Merkle root differs from the checkpoint's", None),
        ("all, written with whitespace", everything, None, None, None, pretty),
        # The vector's form: complete by the subject map (checked as a state proof).
        ("alice with subject-map proofs, written with whitespace", alice_streams, None, None, None, pretty),
        ("alice with subject-map proofs, her last two events left out", alice_streams, lambda o: o.update(events=o["events"][:-2]), None,
         "the subject map says the newest event of the subject is seq 7", None),
        ("alice with subject-map proofs, also carrying a statement", alice_streams, lambda o: o.update(statement=alice["statement"]), None,
         "by a signed statement or by subject-map proofs, not both", None),
        ("alice with subject-map proofs, without 'ledgerMap'", alice_streams, lambda o: o.pop("ledgerMap"), None, "the proof has no 'ledgerMap'", None),
        ("alice with subject-map proofs, a map sibling changed", alice_streams,
         lambda o: o["subjectMap"]["siblings"].__setitem__(0, b64encode(b"\x01" * 32)), None, "the subject-map proof for the subject does not lead", None),
        ("alice with subject-map proofs, a state member changed", alice_streams,
         lambda o: o["state"]["features"][0].update(active=not o["state"]["features"][0]["active"]), None, "state", None),
    ]
    for name, base, change, seq, reason, writer in cases:
        def run(base=base, change=change, seq=seq, reason=reason, writer=writer):
            obj = edited(base, change) if change else base
            data = (writer or bundle_bytes)(obj)
            try:
                r = verify_bundle(data, key)
            except ExportFailure as f:
                return reason is not None and reason in f.reason and f.seq == seq, str(f)
            return reason is None, describe_report(r)
        checks.run("derived: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), run)

    # Consistency proofs between every pair of sizes of the tiny ledger, signed with the test key.
    rfc = RFC6962(v.lines)

    def consistency_file(m, n, proof=None, old=None, new=None):
        old = old or note_for(Checkpoint(key.name, m, rfc.mth(0, m)).text)
        new = new or note_for(Checkpoint(key.name, n, rfc.mth(0, n)).text)
        proof = stored_consistency_proof(m, n, read) if proof is None else proof
        return serialize({"format": CONSISTENCY_FORMAT, "old": old, "new": new, "proof": [b64encode(h) for h in proof]}) + b"\n"

    def all_pairs():
        ok = 0
        for n in range(1, 11):
            for m in range(1, n + 1):
                o, nn = verify_consistency(consistency_file(m, n), key)
                ok += (o.size, nn.size) == (m, n)
        return ok == 55, "%d of 55" % ok
    checks.run("derived: consistency proofs for every 1 <= m <= n <= 10 of the tiny ledger verify", all_pairs)
    base = json.loads(v.read("consistency-6-10.json"))
    consistency_cases = [
        ("old and new swapped", serialize(dict(base, old=base["new"], new=base["old"])), "from size 10 to size 6 does not verify"),
        ("an old checkpoint of a rewritten log (another root at size 6)",
         consistency_file(6, 10, old=note_for(Checkpoint(key.name, 6, rfc.mth(1, 7)).text)), "from size 6 to size 10 does not verify"),
        ("a hash too many", serialize(dict(base, proof=base["proof"] + base["proof"][:1])), "does not verify"),
        ("an old checkpoint of size 0", consistency_file(1, 10, old=note_for(Checkpoint(key.name, 0, sha256(b"")).text)),
         "from size 0 to size 10 does not verify"),
        ("a checkpoint of another origin", consistency_file(6, 10, old=note_for(Checkpoint("other", 6, rfc.mth(0, 6)).text)),
         "a checkpoint is for another ledger than the pinned key's"),
        ("another format", serialize(dict(base, format="consentledger-consistency-v2")), "not a consistency proof file"),
    ]
    for name, data, reason in consistency_cases:
        def run_consistency(data=data, reason=reason):
            try:
                o, n = verify_consistency(data, key)
            except ExportFailure as f:
                return reason in f.reason and f.seq is None, str(f)
            return False, "verified %d -> %d" % (o.size, n.size)
        checks.run("derived: consistency, %s, fails: %s" % (name, reason), run_consistency)


def export_subject(lines, subject_id, salt, key, seed, catalog_value, streams=False):
    """A subject bundle of the log `lines` (without newlines): the signed head of the whole log
    (signed with `seed`, the key `key` in force for seq len(lines)) as the checkpoint, the genesis
    entry, every entry of the ledger stream after it (catalog.published, key.rotated and
    key.revoked: catalogVersions), the key.rotated entries again as `keys` when there are any, and the
    subject's entries, all with inclusion proofs, and the listing of the subject's replay under
    the catalogue in force at each event. With `streams`, as the reference exports a format 2
    ledger: complete by the subject map's proofs; without, with the signed export statement
    (as for a ledger of format 1, signed with `seed` too)."""
    n, stored = len(lines), build_stored(lines)
    read = stored.__getitem__
    note = sign_note(head_text(lines, key.name, read), key, seed)
    if streams:
        from verify_state import prove_state  # imported here: verify_state imports this file
        bundle = prove_state(lines, subject_id, salt, key, note, catalog_value)
        bundle.update(format=BUNDLE_FORMAT, scope="subject")
        return bundle

    def entry(seq):
        return {"seq": seq, "line": lines[seq].decode("utf-8"), "proof": [b64encode(h) for h in stored_inclusion_proof(seq, n, read)]}
    events = [decode_line(line) for line in lines]
    ref = subject_ref(subject_id, salt)
    versions = [(0, decode_catalog(catalog_value)[0])] + [(e.seq, e.document) for e in events if e.type == "catalog.published"]
    ledger_stream = [e.seq for e in events if e.type in ("catalog.published", "key.rotated", "key.revoked", "clock.corrected")]
    rotations = [e.seq for e in events if e.type == "key.rotated"]
    state = SubjectState()
    mine = [e for e in events if e.subject == ref]
    key_of_subject = evidence_key(subject_id, salt)
    for e in mine:
        # The exporter holds the subject's record: the listing shows a sealed reference opened.
        state.apply(opened_event(e, key_of_subject), in_force(versions, e.seq))
    statement = sign_note(statement_text(key.name, n, ref, ledger_stream, [e.seq for e in mine]), key, seed)
    bundle = {"format": BUNDLE_FORMAT, "scope": "subject", "ledger": key.name, "verifierKey": key.text, "checkpoint": note,
              "catalog": catalog_value, "genesis": entry(0), "events": [entry(e.seq) for e in mine],
              "catalogVersions": [entry(seq) for seq in ledger_stream], "statement": statement,
              "subject": {"id": subject_id, "ref": ref, "salt": salt.hex()}, "state": {"features": listing_json(state, versions[-1][1])}}
    if rotations:
        bundle["keys"] = [entry(seq) for seq in rotations]
    return bundle


def head_text(lines, name, read):
    """The text of the signed head of the log `lines` (ledger-format.md, "The signed head"): the
    checkpoint of the whole log and the extension line 'chain HASH', the SHA-256 of the newest
    event's body."""
    n, last = len(lines), lines[-1]
    # The body is the line between '{"body":' and ',"sig":"<128 hex digits>"}', as it is hashed
    # (ledger-format.md, "The event line"); taken as bytes, so a line whose body breaks a rule
    # still has its head, as the reference signs one for any line it appends.
    body = last[len(LINE_PREFIX):len(last) - 2 - 128 - len(SIG_PREFIX)]
    return Checkpoint(name, n, stored_tree_hash(n, read)).text + "chain %s\n" % sha256(body).hex()


def export_all(lines, key, seed, catalog_value):
    """The all bundle of the log `lines`: the ledger's signed head as the checkpoint (signed with
    `seed`, the key `key` in force for seq len(lines)), genesis with its proof, every other line
    without one, and the key.rotated entries with their proofs as `keys` when there are any."""
    n, stored = len(lines), build_stored(lines)
    read = stored.__getitem__
    note = sign_note(head_text(lines, key.name, read), key, seed)

    def entry(seq):
        return {"seq": seq, "line": lines[seq].decode("utf-8"), "proof": [b64encode(h) for h in stored_inclusion_proof(seq, n, read)]}
    bundle = {"format": BUNDLE_FORMAT, "scope": "all", "ledger": key.name, "verifierKey": key.text, "checkpoint": note,
              "catalog": catalog_value, "events": [{"seq": i, "line": lines[i].decode("utf-8")} for i in range(1, n)],
              "genesis": entry(0)}
    rotations = [i for i in range(1, n) if event_type(lines[i]) == "key.rotated"]
    if rotations:
        bundle["keys"] = [entry(seq) for seq in rotations]
    return bundle


def event_type(line):
    """The type of the event a line holds, or None for a line that cannot be read (the derived
    ledgers export lines that break the format, for the verifier to refuse)."""
    try:
        return decode_line(line).type
    except DecodeError:
        return None


def check_exporter(checks, v, key):
    """The exporter above, from the tiny ledger, reproduces the reference's bundles byte for byte:
    so the bundles it makes for the derived ledgers below are the reference's too."""
    catalog_value = parse_canonical(read_file(v.folder, "catalog.json"))
    salts = {s["id"]: bytes.fromhex(s["salt"]) for s in json.loads(read_file(v.here, "expected.json"))["subjects"]}
    checks.check(serialize(export_subject(v.lines, "alice", salts["alice"], key, v.seed, catalog_value, streams=True)) + b"\n" == v.read("alice.bundle.json"),
                 "exporter: alice's subject bundle of the tiny ledger is export/alice.bundle.json byte for byte")
    checks.check(serialize(export_all(v.lines, key, v.seed, catalog_value)) + b"\n" == v.read("all.bundle.json"),
                 "exporter: the all bundle of the tiny ledger is export/all.bundle.json byte for byte")


def check_policy_versions(checks, v, key):
    """Catalogue versions in bundles (Spec/export-format.md): ledgers derived from the tiny ledger
    with a catalog.published event at seq 10 (timeline's required consent to 2.0) and alice's
    re-consent at seq 11, signed with the test key, exported as the reference does."""
    catalog_value = parse_canonical(read_file(v.folder, "catalog.json"))
    salts = {s["id"]: bytes.fromhex(s["salt"]) for s in json.loads(read_file(v.here, "expected.json"))["subjects"]}
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in v.lines]
    kid = bodies[0]["kid"]
    v2 = catalog_version(catalog_value, {("timeline", "required"): "2.0"})
    reconsent = {"v": 2, "seq": 11, "at": "2026-01-15T09:00:06.000Z", "actor": "self", "cmd": 11, "cmdSize": 1, "kid": kid,
                 "type": "consent.given", "subject": bodies[1]["subject"], "feature": 2, "consent": "required", "version": "2.0",
                 "renews": 3}

    def ledger(**publish_members):
        publish = publish_body(10, v2, "2026-01-15T09:00:05.000Z", kid)
        publish.update(publish_members)
        log, _ = sign_log(bodies + [publish, reconsent], v.seed)
        return log.split(b"\n")[:-1]

    good = ledger()
    structural = catalog_version(v2, edit=lambda value: value["features"][1].update(
        consents=[c for c in value["features"][1]["consents"] if c["code"] != "optional-b"]))
    ledgers = {
        "good": good,
        "bad hash": ledger(catalog="ab" * 32),
        "structural": ledger(document=structural, catalog=catalog_hash(decode_catalog(structural)[0]), notices=notices_of(structural)),
        "old notices": ledger(notices=notices_of(catalog_value)),
    }

    def subject(name, who="alice"):
        return export_subject(ledgers[name], who, salts[who], key, v.seed, catalog_value)

    def everything(name):
        return export_all(ledgers[name], key, v.seed, catalog_value)

    def edited(obj, change):
        obj = json.loads(json.dumps(obj))
        change(obj)
        return obj

    def restate(change):
        def run(o):
            change(o)
            text = statement_text(key.name, len(good), o["subject"]["ref"], [e["seq"] for e in o["catalogVersions"]], [e["seq"] for e in o["events"]])
            o["statement"] = sign_note(text, key, v.seed)
        return run

    def timeline_required(bundle):
        return next(c for c in bundle["state"]["features"][1]["consents"] if c["code"] == "required"), bundle["state"]["features"][1]["active"]

    def proof_changed(o):
        o["catalogVersions"][0]["proof"][0] = b64encode(bytes(32))

    def bob_given(o):
        for c in o["state"]["features"][1]["consents"]:
            if c["state"] == "outdated":
                c["state"] = "given"

    alice, bob = subject("good"), subject("good", "bob")
    first = next(e for e in alice["events"] if e["seq"] == 1)
    cases = [
        ("alice: catalogVersions holds seq 10, the re-consent is seq 11", alice, None, None),
        ("bob: his required consent outdated", bob, None, None),
        ("all: the publication and the re-consent", everything("good"), None, None),
        ("alice without catalogVersions", edited(alice, lambda o: o.update(catalogVersions=[])), None,
         "the signed export statement lists catalogue versions [10] but the bundle holds []: a version was left out or added"),
        ("alice without catalogVersions, statement redone by the key holder", edited(alice, restate(lambda o: o.update(catalogVersions=[]))), 11,
         "replay: consent 'required' of 'timeline' is given twice"),
        ("alice with a consent event among catalogVersions", edited(alice, lambda o: o["catalogVersions"].insert(0, first)), 1,
         "a catalogue-version entry is not a published catalogue, or is out of order"),
        ("alice with the catalogue version twice", edited(alice, lambda o: o["catalogVersions"].append(o["catalogVersions"][0])), 10,
         "a catalogue-version entry is not a published catalogue, or is out of order"),
        ("alice with the catalogue version's proof changed", edited(alice, proof_changed), 10, "inclusion proof"),
        ("bob with his outdated consent listed as given", edited(bob, bob_given), None, "bundled state differs"),
        ("alice, the published catalogue's hash wrong", subject("bad hash"), 10,
         "the published catalogue's SHA-256 differs from its 'catalog' member"),
        ("all, the published catalogue's hash wrong", everything("bad hash"), 10,
         "the published catalogue's SHA-256 differs from its 'catalog' member"),
        ("alice, a structural change published", subject("structural"), 10,
         "the published catalogue cannot replace the one in force: the consents of 'timeline' differ"),
        ("all, a structural change published", everything("structural"), 10,
         "replay: the published catalogue cannot replace the one in force: the consents of 'timeline' differ"),
        ("alice, the notices of the old versions (a subject bundle does not check notices)", subject("old notices"), None, None),
        ("all, the notices of the old versions", everything("old notices"), 10, "replay: the notices must list every consent"),
    ]
    for name, obj, seq, reason in cases:
        def run(obj=obj, seq=seq, reason=reason):
            try:
                r = verify_bundle(serialize(obj) + b"\n", key)
            except ExportFailure as f:
                return reason is not None and reason in f.reason and f.seq == seq, str(f)
            return reason is None, describe_report(r)
        checks.run("policy versions: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), run)

    a, a_active = timeline_required(alice)
    checks.check(a["state"] == "given" and a["version"] == a["currentVersion"] == "2.0" and a["validFrom"] == reconsent["at"] and a_active,
                 "policy versions: alice's listing after the re-consent: timeline active, required given at version 2.0",
                 json.dumps(a, sort_keys=True))
    b, b_active = timeline_required(bob)
    checks.check(b["state"] == "outdated" and b["version"] == "1.0" and b["currentVersion"] == "2.0" and not b_active,
                 "policy versions: bob's listing: timeline inactive, required 'outdated' with version 1.0 (agreed) and currentVersion 2.0",
                 json.dumps(b, sort_keys=True))


def check_evidence(checks, v, key):
    """A grant's evidence and why a consent is withheld, in bundles (Spec/export-format.md, The
    state listing and step 4S, item 7.3; Spec/ledger-format.md, consent.given and rule 11a;
    Spec/erasure.md, Sealed evidence): bob's subject bundle of the tiny ledger, whose last grant
    (seq 9) carries all four evidence members, its reference sealed under bob's key and listed
    opened; and derived ledgers re-signed with the test key in which a grant's evidence or an
    event's members break the format or the rules, or its sealed reference does not open under
    the key of the bundle's subject record, exported as the reference would have exported them."""
    catalog_value = parse_canonical(read_file(v.folder, "catalog.json"))
    salts = {s["id"]: bytes.fromhex(s["salt"]) for s in json.loads(read_file(v.here, "expected.json"))["subjects"]}
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in v.lines]

    def resigned(i, **members):
        """The tiny ledger with event i's members changed (None: removed), chained, linked and
        signed with the test key: its event lines."""
        events = [dict(b) for b in bodies]
        events[i].update(members)
        events[i] = {k: val for k, val in events[i].items() if val is not None}
        log, _ = sign_log(events, v.seed)
        return log.split(b"\n")[:-1]

    def bundle_of(lines, who, like=None):
        """`who`'s subject bundle of `lines`. A log the exporter cannot replay (an event it cannot
        read) gets `like`'s bundle of the tiny ledger with every line, proof and the checkpoint
        replaced by those of `lines`: the same seqs, so the signed statement still holds."""
        if like is None:
            return export_subject(lines, who, salts[who], key, v.seed, catalog_value)
        n, stored = len(lines), build_stored(lines)
        read = stored.__getitem__
        o = json.loads(json.dumps(like))
        o["checkpoint"] = sign_note(Checkpoint(key.name, n, stored_tree_hash(n, read)).text, key, v.seed)
        for e in [o["genesis"]] + o["events"] + o["catalogVersions"]:
            e["line"] = lines[e["seq"]].decode("utf-8")
            e["proof"] = [b64encode(h) for h in stored_inclusion_proof(e["seq"], n, read)]
        return o

    bob = bundle_of(v.lines, "bob")
    alice = bundle_of(v.lines, "alice")
    # Sealed evidence: seq 9 holds bob's reference sealed under his key (Spec/erasure.md).
    bob_key, alice_key = evidence_key("bob", salts["bob"]), evidence_key("alice", salts["alice"])
    sealed = bodies[9]["sealedEvidence"]

    flip = flip_hex_byte

    def not_open(problem):
        return "%s (the key the bundle's subject record gives)" % problem
    no_key = not_open("the sealed evidence reference does not open under the subject's key")

    def consent(bundle, feature, code):
        f = next(f for f in bundle["state"]["features"] if f["key"] == feature)
        return next(c for c in f["consents"] if c["code"] == code)

    def verifies(obj):
        try:
            verify_bundle(serialize(obj) + b"\n", key)
        except ExportFailure as f:
            return False, str(f)
        return True, "verifies"

    # What the listing says, checked against the bundles (the reference's and this exporter's).
    b9 = consent(bob, "timeline", "optional-b")
    checks.check(verifies(bob)[0] and b9["state"] == "given" and "reason" not in b9
                 and {k: b9.get(k) for k in ("effectiveAt", "channel", "noticeLanguage", "evidence")}
                 == {"effectiveAt": "2026-01-15T09:00:03.500Z", "channel": "paper", "noticeLanguage": "de", "evidence": "scan-0042"}
                 and b9["validFrom"] == "2026-01-15T09:00:04.000Z",
                 "evidence: bob's bundle of the tiny ledger verifies; his timeline optional-b is given from its recorded time 09:00:04 "
                 "with the grant's four evidence members (effectiveAt 09:00:03.500, paper, de, scan-0042)", json.dumps(b9, sort_keys=True))
    line9 = parse_canonical(next(e for e in bob["events"] if e["seq"] == 9)["line"].encode("utf-8"))["body"]
    checks.check(line9.get("sealedEvidence") == sealed and "evidence" not in line9 and "sealedEvidence" not in b9
                 and seal_evidence("scan-0042", 9, bob_key) == sealed,
                 "evidence: bob's bundle carries seq 9 with its reference sealed (sealedEvidence, scan-0042 sealed under the key of "
                 "the bundle's subject record), and its state lists the reference opened, as evidence")
    b8 = consent(bob, "timeline", "required")
    checks.check(not set(b8) & {"effectiveAt", "channel", "noticeLanguage", "evidence", "reason"},
                 "evidence: a grant without evidence lists none (bob's timeline required)", json.dumps(b8, sort_keys=True))
    reasons = {(f["key"], c["code"]): c.get("reason") for f in alice["state"]["features"] for c in f["consents"]}
    checks.check(reasons == {("medication-management", "required"): "withdrawn", ("medication-management", "optional-a"): "cascade-withdrawn",
                             ("medication-management", "optional-b"): "never-given", ("timeline", "required"): None,
                             ("timeline", "optional-a"): None, ("timeline", "optional-b"): None},
                 "evidence: alice's bundle says why each withheld consent is withheld: required withdrawn, optional-a "
                 "cascade-withdrawn, optional-b never-given; a given consent has no reason", json.dumps(sorted(reasons.items())))
    checks.check(all(c.get("reason") == "never-given" and not c["everGiven"] for c in bob["state"]["features"][0]["consents"])
                 and consent(bob, "timeline", "optional-a")["reason"] == "never-given",
                 "evidence: bob's consents never given are listed withheld with reason never-given")

    def edit_state(feature, code, **members):
        def change(o):
            c = consent(o, feature, code)
            c.update(members)
            for k in [k for k, val in c.items() if val is None]:
                del c[k]
        return change

    def edited(obj, change):
        obj = json.loads(json.dumps(obj))
        change(obj)
        return obj

    no_evidence = resigned(9, effectiveAt=None, channel=None, noticeLanguage=None, sealedEvidence=None)
    in_clear = resigned(9, sealedEvidence=None, evidence="scan-0042")
    # Bob's bundle in the map form (as the reference exports a format 2 ledger), checked as a
    # state proof: its failures name the proof's subject record (export-format.md, 4S, item 1).
    bob_map = export_subject(v.lines, "bob", salts["bob"], key, v.seed, catalog_value, streams=True)

    def map_relined(lines):
        """bob_map with every line, inclusion proof and the signed head replaced by those of
        `lines` (the same seqs and streams, so the map proofs still hold)."""
        n, stored = len(lines), build_stored(lines)
        read = stored.__getitem__
        o = json.loads(json.dumps(bob_map))
        o["checkpoint"] = sign_note(head_text(lines, key.name, read), key, v.seed)
        for e in [o["genesis"], o["last"]] + o["events"] + o["catalogVersions"]:
            e["line"] = lines[e["seq"]].decode("utf-8")
            e["proof"] = [b64encode(h) for h in stored_inclusion_proof(e["seq"], n, read)]
        return o
    cases = [
        # The listing compared with the replay.
        ("bob, the listed channel changed", edited(bob, edit_state("timeline", "optional-b", channel="app")), None, "bundled state differs"),
        ("bob, the listed evidence reference left out", edited(bob, edit_state("timeline", "optional-b", evidence=None)), None,
         "bundled state differs"),
        ("bob, the effective time listed as validFrom", edited(bob, edit_state("timeline", "optional-b", validFrom="2026-01-15T09:00:03.500Z")),
         None, "bundled state differs"),
        ("bob, evidence listed on a grant that has none", edited(bob, edit_state("timeline", "required", channel="paper")), None,
         "bundled state differs"),
        ("alice, a cascade listed as her own withdrawal", edited(alice, edit_state("medication-management", "optional-a", reason="withdrawn")),
         None, "bundled state differs"),
        ("alice, a withdrawal listed as never given", edited(alice, edit_state("medication-management", "required", reason="never-given")),
         None, "bundled state differs"),
        ("alice, a never-given consent listed without its reason", edited(alice, edit_state("medication-management", "optional-b", reason=None)),
         None, "bundled state differs"),
        ("bob, the reference listed sealed (its hex) instead of opened",
         edited(bob, edit_state("timeline", "optional-b", evidence=None, sealedEvidence=sealed)), None, "bundled state differs"),
        ("bob, the reference listed both opened and sealed", edited(bob, edit_state("timeline", "optional-b", sealedEvidence=sealed)), None,
         "bundled state differs"),
        # Ledgers re-signed with the test key.
        ("bob, the last grant without evidence (allowed)", bundle_of(no_evidence, "bob"), None, None),
        # Sealed evidence (item 7.3): opened with the key of the bundle's subject record.
        ("bob, the reference in clear, as older ledgers hold it (allowed)", bundle_of(in_clear, "bob"), None, None),
        ("bob, another reference sealed for seq 9 under his key (allowed)",
         bundle_of(resigned(9, sealedEvidence=seal_evidence("paper form 7, front desk", 9, bob_key)), "bob"), None, None),
        ("bob, his reference sealed with a nonce of zeros (a reader does not check the nonce: allowed)",
         bundle_of(resigned(9, sealedEvidence=seal_evidence("scan-0042", 9, bob_key, nonce=bytes(24))), "bob"), None, None),
        ("bob, his reference sealed under alice's key",
         bundle_of(resigned(9, sealedEvidence=seal_evidence("scan-0042", 9, alice_key)), "bob", like=bob), 9, no_key),
        ("bob, a flipped byte of the sealed reference's box", bundle_of(resigned(9, sealedEvidence=flip(sealed, len(sealed) // 2 - 1)), "bob",
                                                                         like=bob), 9, no_key),
        ("bob, a flipped byte of the sealed reference's nonce", bundle_of(resigned(9, sealedEvidence=flip(sealed, 0)), "bob", like=bob), 9,
         no_key),
        ("bob, a sealed box that opens to bytes that are not UTF-8",
         bundle_of(resigned(9, sealedEvidence=seal_evidence(b"scan-\xff0042", 9, bob_key)), "bob", like=bob), 9,
         not_open("the sealed evidence reference opens to bytes that are not UTF-8")),
        ("bob, a sealed box that opens to a reference with a control character",
         bundle_of(resigned(9, sealedEvidence=seal_evidence("scan\n0042", 9, bob_key)), "bob", like=bob), 9,
         not_open("the sealed evidence reference opens to one no command records: the evidence reference contains a control character")),
        ("bob, the reference in clear and sealed at once", bundle_of(resigned(9, evidence="scan-0042"), "bob", like=bob), 9,
         "malformed event: a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both"),
        ("bob, the map form (allowed)", bob_map, None, None),
        ("bob, the map form, his reference sealed under alice's key",
         map_relined(resigned(9, sealedEvidence=seal_evidence("scan-0042", 9, alice_key))), 9,
         "the sealed evidence reference does not open under the subject's key (the key the proof's subject record gives)"),
        ("all, a flipped byte of bob's sealed reference (an all bundle carries no records: its references stay sealed, allowed)",
         export_all(resigned(9, sealedEvidence=flip(sealed, len(sealed) // 2 - 1)), key, v.seed, catalog_value), None, None),
        ("all, the reference in clear and sealed at once", export_all(resigned(9, evidence="scan-0042"), key, v.seed, catalog_value), 9,
         "malformed event: a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both"),
        ("bob, the last grant with an unknown channel", bundle_of(resigned(9, channel="fax"), "bob", like=bob), 9,
         "malformed event: member 'channel' must be one of app, portal, paper, phone, clinician"),
        ("all, the last grant with an unknown channel", export_all(resigned(9, channel="fax"), key, v.seed, catalog_value), 9,
         "malformed event: member 'channel' must be one of app, portal, paper, phone, clinician"),
        ("bob, a notice language that is not a BCP 47 tag", bundle_of(resigned(9, noticeLanguage="deutsch-deutschland"), "bob", like=bob), 9,
         "malformed event: notice language 'deutsch-deutschland' is not a BCP 47 language tag"),
        ("bob, an effective time after the recorded time", bundle_of(resigned(9, effectiveAt="2026-01-15T09:00:04.001Z"), "bob", like=bob), 9,
         "replay: consent 'optional-b' of 'timeline' has an effective time after the time it was recorded"),
        ("all, an effective time after the recorded time",
         export_all(resigned(9, effectiveAt="2026-01-15T09:00:04.001Z"), key, v.seed, catalog_value), 9,
         "replay: consent 'optional-b' of 'timeline' has an effective time after the time it was recorded"),
        ("bob, an effective time before his previous event about the feature",
         bundle_of(resigned(9, effectiveAt="2026-01-15T09:00:02.999Z"), "bob", like=bob), 9,
         "replay: consent 'optional-b' of 'timeline' has an effective time before the subject's previous event about 'timeline'"),
        ("alice, evidence on her withdrawal (seq 6)", bundle_of(resigned(6, evidence="scan-0042"), "alice", like=alice), 6,
         "malformed event: member 'evidence' does not belong to a 'consent.revoked' event"),
        ("all, evidence on alice's withdrawal (seq 6)", export_all(resigned(6, evidence="scan-0042"), key, v.seed, catalog_value), 6,
         "malformed event: member 'evidence' does not belong to a 'consent.revoked' event"),
    ]
    for name, obj, seq, reason in cases:
        def run(obj=obj, seq=seq, reason=reason):
            try:
                r = verify_bundle(serialize(obj) + b"\n", key)
            except ExportFailure as f:
                return reason is not None and reason in f.reason and f.seq == seq, str(f)
            return reason is None, describe_report(r)
        checks.run("evidence: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), run)
    plain = consent(bundle_of(no_evidence, "bob"), "timeline", "optional-b")
    checks.check(not set(plain) & {"effectiveAt", "channel", "noticeLanguage", "evidence", "sealedEvidence", "reason"},
                 "evidence: without evidence on the grant, the listing has no evidence member", json.dumps(plain, sort_keys=True))
    checks.check(bundle_of(in_clear, "bob")["state"] == bob["state"],
                 "evidence: a reference in clear (an older ledger) and the same reference sealed are listed alike, as evidence")
    checks.check(bob_map["state"] == bob["state"], "evidence: bob's bundle in the map form lists the same state, the reference opened")
    other = consent(bundle_of(resigned(9, sealedEvidence=seal_evidence("paper form 7, front desk", 9, bob_key)), "bob"), "timeline", "optional-b")
    checks.check(other.get("evidence") == "paper form 7, front desk" and "sealedEvidence" not in other,
                 "evidence: the listing shows what the sealed reference opens to", json.dumps(other, sort_keys=True))


# ---------------------------------------------------------------------------------------------
# Key rotation (Spec/export-format.md, Keys): Spec/vectors/rotated and derived cases
# ---------------------------------------------------------------------------------------------

class Rotated:
    """Spec/vectors/rotated and the ledger its files were made from, rotated-ledger/ (the genesis
    key, of seed 00..1f, rotated at seq 6 to the key of seed 20..3f and revoked at seq 10,
    compromised from seq 3), with a writer of derived
    ledgers re-signed as a rotating writer signs them (verify_vectors.sign_log)."""

    def __init__(self, here):
        self.here = here
        self.dir = os.path.join(here, "rotated")
        self.folder = os.path.join(here, "rotated-ledger")
        self.expected_bytes = read_file(self.dir, "expected.json")
        self.expected = json.loads(self.expected_bytes)
        self.keys = {"genesis": parse_verifier_key(self.expected["genesisKey"]), "current": parse_verifier_key(self.expected["currentKey"])}
        self.lines = event_lines(read_file(self.folder, "ledger.jsonl"))
        self.name = decode_line(self.lines[0]).ledger
        self.genesis_seed = hex_decode(trimmed_text(read_file(os.path.join(here, "tiny-ledger"), "secret.key")), 32)
        self.new_seed = hex_decode(trimmed_text(read_file(self.folder, "secret.key")), 32)
        self.other_seed = bytes(range(64, 96))   # a key the ledger never used
        self.third_seed = bytes(range(96, 128))  # the key of a second rotation, in derived ledgers
        self.catalog_value = parse_canonical(read_file(self.folder, "catalog.json"))
        self.salts = {i: record.salt for i, record in read_subject_records(self.folder).items()}
        self.bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in self.lines]

    def read(self, name):
        return read_file(self.dir, name)

    def signer(self, seed):
        """The verifier key of the ledger's name and the key of `seed`."""
        return NoteKey(self.name, ed25519_public_key(seed))

    def kid(self, seed):
        return key_id(ed25519_public_key(seed))

    def ledger(self, change=None):
        """(event lines, seed in force after them) of the vector's bodies, with the handover to
        the seed 20..3f at seq 6, changed by `change` (on the list of bodies; it may return a new
        list) and re-signed by sign_log: each body with the key in force for it ('@next' hands
        over, '@handover' signs the handover with another seed, '@seed' signs one body)."""
        bodies = [dict(b) for b in self.bodies]
        bodies[6]["@next"] = self.new_seed
        bodies = (change(bodies) if change else None) or bodies
        seed = self.genesis_seed
        for b in bodies:
            seed = b.get("@next", seed)
        return sign_log(bodies, self.genesis_seed)[0].split(b"\n")[:-1], seed

    def two_rotations(self, bodies):
        """The vector's first ten events (before its revocation), a second rotation at seq 10, to
        the key of seed 60..7f, and bob's grant of timeline's optional-a at seq 11, signed with it."""
        third = self.kid(self.third_seed)
        return bodies[:10] + [
            {"v": 2, "seq": 10, "at": "2026-01-15T09:00:05.000Z", "actor": "vector-generator", "cmd": 10, "cmdSize": 1,
             "kid": self.kid(self.new_seed), "type": "key.rotated", "@next": self.third_seed},
            {"v": 2, "seq": 11, "at": "2026-01-15T09:00:06.000Z", "actor": "self", "cmd": 11, "cmdSize": 1, "kid": third,
             "type": "consent.given", "subject": bodies[9]["subject"], "feature": 2, "consent": "optional-a", "version": "1.0"}]

    def subject(self, lines, seed, who="alice", streams=True):
        return export_subject(lines, who, self.salts[who], self.signer(seed), seed, self.catalog_value, streams=streams)

    def everything(self, lines, seed):
        return export_all(lines, self.signer(seed), seed, self.catalog_value)

    def revoked(self, seq, key_seed, since, window, kid_seed=None, **members):
        """A key.revoked body at `seq` (a command of its own) naming the key of `key_seed`,
        compromised from `since`, attesting the events of `window` (sign_log's '@attest': first,
        last[, edit]), with the kid of `kid_seed` (the seed 20..3f's by default; sign_log signs it
        with the key in force)."""
        x = {"v": 2, "seq": seq, "at": "2026-01-15T09:00:05.000Z", "actor": "vector-generator", "cmd": seq, "cmdSize": 1,
             "kid": self.kid(kid_seed or self.new_seed), "type": "key.revoked", "publicKey": ed25519_public_key(key_seed).hex(),
             "compromisedSince": since, "@attest": window}
        x.update(members)
        return x

    def revocation_cases(self):
        """Derived ledgers about the revocation (export-format.md, Keys, Revocations), each re-signed
        so that only its defect remains: [(name, event lines, seed in force after them, outcomes)],
        outcomes {form: None (verifies) or (seq, reason)} for the forms 'alice', 'bob' (a subject
        bundle in either form, or a state proof) and 'all' (the all bundle)."""
        genesis_kid, new_kid = self.kid(self.genesis_seed), self.kid(self.new_seed)

        def wrong(i):
            def edit(hashes):
                hashes[i] = sha256(b"").hex()
                return hashes
            return edit

        def window(*args):
            return lambda b: b[10].update({"@attest": args})

        def replace(**members):
            return lambda b: b[10].update(members)

        def not_attested(kid, since, at):
            return "the event was signed by key %s after it was compromised (seq %d on), and its revocation at seq %d does not re-attest it" % (
                kid, since, at)
        genesis_window = not_attested(genesis_kid, 3, 10)
        still = "the key revocation names key %s, which is still in force: a key is rotated away from before it is revoked"
        second = self.two_rotations(self.bodies)[10]  # the rotation at seq 10 to the key of seed 60..7f
        third_seed = self.third_seed

        def then_revoke_new(edit=None):
            """The first ten events, a second rotation (seq 10) and a revocation (seq 11, signed by
            the third key) of the first rotation's key, compromised from seq 7 (its first event),
            attesting seq 7-10."""
            def change(b):
                return b[:10] + [dict(second), self.revoked(11, self.new_seed, 7, (7, 10) + ((edit,) if edit else ()), kid_seed=third_seed)]
            return change

        def thief(b):
            b[5]["evidence"] = "forged-form-0666"  # alice's grant of seq 5, made by the holder of the leaked key

        cases = [
            ("the revocation's hash for seq 4 replaced", window(3, 6, wrong(1)),
             {"alice": (4, genesis_window), "bob": None, "all": (4, genesis_window)}),
            ("seq 5 replaced by an event signed with the leaked genesis key (re-chained), the vector's revocation as it is", thief,
             {"alice": (5, genesis_window), "bob": None, "all": (5, genesis_window)}),
            ("the revocation's hash for seq 6 (the rotation, no subject's event) replaced", window(3, 6, wrong(3)),
             {"alice": None, "bob": None, "all": (6, genesis_window)}),
            ("a revocation from seq 0 whose hash for the genesis event is replaced", replace(compromisedSince=0, **{"@attest": (0, 6, wrong(0))}),
             {"alice": None, "bob": None, "all": (0, not_attested(genesis_kid, 0, 10))}),
            ("a revocation from seq 0 (7 hashes, seq 0-6)", replace(compromisedSince=0, **{"@attest": (0, 6)}),
             {"alice": None, "bob": None, "all": None}),
            ("a revocation naming the key in force", replace(publicKey=ed25519_public_key(self.new_seed).hex(), compromisedSince=7,
                                                            **{"@attest": (7, 9)}),
             dict.fromkeys(("alice", "bob", "all"), (10, still % new_kid))),
            ("a revocation naming a key the ledger never used", replace(publicKey=ed25519_public_key(self.other_seed).hex()),
             dict.fromkeys(("alice", "bob", "all"), (10, "the key revocation names a key this ledger never used"))),
            ("the genesis key revoked twice (again at seq 11)", lambda b: b + [self.revoked(11, self.genesis_seed, 3, (3, 6))],
             dict.fromkeys(("alice", "bob", "all"), (11, "the key revocation names key %s, which was revoked before" % genesis_kid))),
            ("compromisedSince 7, outside the genesis key's period", replace(compromisedSince=7),
             dict.fromkeys(("alice", "bob", "all"), (10, "the key revocation says key %s was compromised from seq 7, but it signed seq 0 to 6"
                                                     % genesis_kid))),
            ("3 hashes for the window seq 3-6", window(3, 5),
             dict.fromkeys(("alice", "bob", "all"), (10, "the key revocation attests 3 events, but key %s signed 4 from seq 3 to 6"
                                                     % genesis_kid))),
            ("a second rotation (seq 10), then a revocation of the first rotation's key from seq 7 (seq 11)", then_revoke_new(),
             {"alice": None, "bob": None, "all": None}),
            ("a second rotation (seq 10), then a revocation of the first rotation's key whose hash for seq 8 is replaced",
             then_revoke_new(wrong(1)),
             {"alice": (8, not_attested(new_kid, 7, 11)), "bob": None, "all": (8, not_attested(new_kid, 7, 11))}),
        ]
        out = []
        for name, change, outcomes in cases:
            lines, seed = self.ledger(change)
            out.append((name, lines, seed, outcomes))
        return out

    def consistency(self, lines, m, old_seed, new_seed, n=None, keys=True):
        """A consistency-proof file from size m (a plain checkpoint signed with `old_seed`) to the
        signed head of the first n lines (signed with `new_seed`), as the reference writes it:
        with the genesis entry and the key rotations below n, proved against the newer tree."""
        n = len(lines) if n is None else n
        stored = build_stored(lines[:n])
        read = stored.__getitem__
        old = sign_note(Checkpoint(self.name, m, stored_tree_hash(m, read)).text, self.signer(old_seed), old_seed)
        new = sign_note(head_text(lines[:n], self.name, read), self.signer(new_seed), new_seed)
        out = {"format": CONSISTENCY_FORMAT, "old": old, "new": new, "proof": [b64encode(h) for h in stored_consistency_proof(m, n, read)]}

        def entry(seq):
            return {"seq": seq, "line": lines[seq].decode("utf-8"), "proof": [b64encode(h) for h in stored_inclusion_proof(seq, n, read)]}
        rotations = [i for i in range(1, n) if event_type(lines[i]) == "key.rotated"]
        if keys and rotations:
            out.update(genesis=entry(0), keys=[entry(seq) for seq in rotations])
        return out


def check_rotated(checks, here):
    """The rotated vectors: every bundle and consistency case of rotated/expected.json with the
    key it pins (the state proofs are verify_state.py's), this file's exporter reproducing the
    vectors byte for byte, and derived cases (edited vectors; ledgers re-signed with the test
    seeds, each breaking one rule of Keys, exported as the reference would export them)."""
    r = Rotated(here)
    expected = r.expected
    checks.check(r.expected_bytes.endswith(b"\n") and serialize(parse_canonical(r.expected_bytes[:-1])) == r.expected_bytes[:-1],
                 "rotated/expected.json is canonical JSON followed by a newline")
    names = sorted(f for f in os.listdir(r.dir) if f.endswith(".json") and f != "expected.json")
    checks.check(sorted({c["file"] for c in expected["cases"]}) == names and {c["kind"] for c in expected["cases"]} == {"bundle", "state", "consistency"},
                 "rotated/expected.json names every file of rotated/ (bundles, state proofs, consistency proofs)", "%d files" % len(names))
    report = verify_folder(r.folder)
    genesis_key, new_key = ed25519_public_key(r.genesis_seed), ed25519_public_key(r.new_seed)
    checks.check(r.keys["genesis"].text == r.signer(r.genesis_seed).text and genesis_key == report.public_key
                 and r.keys["current"].text == r.signer(r.new_seed).text and r.name == report.ledger_name
                 and [p[1] for p in report.key_schedule.periods] == [genesis_key, new_key],
                 "rotated/expected.json: genesisKey is rotated-ledger's public.key (seed 00..1f), currentKey the key it rotated to at "
                 "seq 6 (secret.key, seed 20..3f)", "%s, %s" % (r.keys["genesis"].text, r.keys["current"].text))

    def outcome(data, key, kind, reason, seq):
        """(ok, detail): `data` verifies with `key` (reason None), or fails with `reason` in its
        reason and exactly `seq`."""
        try:
            if kind == "consistency":
                o, n = verify_consistency(data, key)
                detail = "size %d -> %d" % (o.size, n.size)
            else:
                detail = describe_report(verify_bundle(data, key))
        except ExportFailure as f:
            return reason is not None and reason in f.reason and f.seq == seq, str(f)
        return reason is None, detail

    # Every bundle and consistency case of expected.json, with the key it pins.
    for c in expected["cases"]:
        if c["kind"] == "state":
            continue
        label = "rotated/%s (%s, %s key pinned) %s" % (c["file"], c["kind"], c["key"], "verifies" if c["ok"] else "fails: %s%s" % (
            "seq %d, " % c["seq"] if "seq" in c else "", c["reason"]))
        checks.run(label, lambda c=c: outcome(r.read(c["file"]), r.keys[c["key"]], c["kind"], None if c["ok"] else c["reason"],
                                              c.get("seq")))

    # The exporter: the vectors, byte for byte, from the ledger's lines and the two seeds.
    lines, seed = r.ledger()
    checks.check(lines == r.lines, "rotated: the vector's bodies, handed over to the seed 20..3f at seq 6 and re-signed, are "
                 "rotated-ledger's event lines byte for byte (the derived ledgers below are written as the reference writes)")
    for name, made in (("alice.bundle.json", lambda: r.subject(lines, seed)),
                       ("alice-statement.bundle.json", lambda: r.subject(lines, seed, streams=False)),
                       ("all.bundle.json", lambda: r.everything(lines, seed)),
                       ("consistency-6-11.json", lambda: r.consistency(lines, 6, r.genesis_seed, seed))):
        checks.run("rotated: exporter: %s is reproduced byte for byte (checkpoint signed with the seed 20..3f, 'keys' = seq 6)" % name,
                   lambda name=name, made=made: (serialize(made()) + b"\n" == r.read(name), name))

    def edited(name, change):
        o = json.loads(r.read(name)) if isinstance(name, str) else json.loads(json.dumps(name))
        change(o)
        return serialize(o) + b"\n"

    def entry_of(o, seq):
        return next(e for e in o["events"] + o.get("catalogVersions", []) if e["seq"] == seq)

    def flip_handover(o, *lists):
        for name in lists:
            for e in o[name]:
                if "key.rotated" in e["line"]:
                    e["line"] = e["line"].replace('"handover":"5', '"handover":"6')

    genesis_text, current_text = r.keys["genesis"].text, r.keys["current"].text
    G, C = r.keys["genesis"], r.keys["current"]
    other = r.signer(r.other_seed)
    in_force_new = "the event's signature does not verify with the ledger's key in force for it, %s" % r.kid(r.new_seed)
    in_force_genesis = "the event's signature does not verify with the ledger's key in force for it, %s" % r.kid(r.genesis_seed)
    size6 = sign_note(head_text(lines[:6], r.name, build_stored(lines[:6]).__getitem__), G, r.genesis_seed)
    stored = build_stored(lines)
    size11_by_genesis = sign_note(head_text(lines, r.name, stored.__getitem__), G, r.genesis_seed)
    alice_statement = json.loads(r.read("alice-statement.bundle.json"))

    cases = [
        # Edited vector files.
        ("all, 'keys' an empty array (counts as absent), genesis key pinned", edited("all.bundle.json", lambda o: o.update(keys=[])), G, None,
         "the bundle's verifier key %s differs from the pinned key %s" % (current_text, genesis_text)),
        ("all, without 'keys', current key pinned: the genesis event is the genesis key's", edited("all.bundle.json", lambda o: o.pop("keys")), C, 0,
         "the event's signature does not verify with the pinned key"),
        ("all, 'keys' not an array", edited("all.bundle.json", lambda o: o.update(keys={})), G, None, "'keys' is not an array"),
        ("all, an entry of 'keys' without 'line'", edited("all.bundle.json", lambda o: o["keys"][0].pop("line")), G, None,
         "an event entry lacks 'seq' or 'line'"),
        ("alice, pinned a key the ledger never used (same name)", r.read("alice.bundle.json"), other, None,
         "the pinned key %s is neither the ledger's genesis key nor a key that the bundle's key rotations introduce" % other.text),
        ("alice, 'keys' holding her consent of seq 5", edited("alice.bundle.json", lambda o: o.update(keys=[entry_of(o, 5)])), G, 5,
         "an entry of 'keys' is not a key rotation, or is out of order"),
        ("alice, 'keys' holding the rotation twice", edited("alice.bundle.json", lambda o: o.update(keys=o["keys"] * 2)), G, 6,
         "an entry of 'keys' is not a key rotation, or is out of order"),
        ("alice, her first event as the genesis entry", edited("alice.bundle.json", lambda o: o.update(genesis=entry_of(o, 1))), G, 0,
         "the genesis entry does not name the genesis key that the 'keys' rotations start from"),
        ("alice, 'verifierKey' the genesis key's text", edited("alice.bundle.json", lambda o: o.update(verifierKey=genesis_text)), C, None,
         "the bundle's verifier key %s is not the key that signs its checkpoint, %s" % (genesis_text, current_text)),
        ("alice (statement form), the checkpoint the signed head of size 6 (below the rotation of 'keys')",
         edited(alice_statement, lambda o: o.update(checkpoint=size6)), G, 6, "a key rotation of 'keys' is not below the checkpoint's size 6"),
        ("alice, the checkpoint (size 11) signed by the genesis key instead of the key in force for seq 11",
         edited("alice.bundle.json", lambda o: o.update(checkpoint=size11_by_genesis)), G, None,
         "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("alice (statement form), the statement signed by the genesis key, not the checkpoint key",
         edited(alice_statement, lambda o: o.update(statement=sign_note(o["statement"][:o["statement"].rindex("\n\n") + 1], G, r.genesis_seed))),
         G, None, "export statement: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("all, the rotation's handover changed in 'keys' (its line no longer verifies)", edited("all.bundle.json", lambda o: flip_handover(o, "keys")),
         G, 6, in_force_genesis),
        ("all, the rotation's handover changed in 'keys' and in the events", edited("all.bundle.json", lambda o: flip_handover(o, "keys", "events")),
         C, 6, in_force_genesis),
        ("all, the rotation's handover changed in the events only", edited("all.bundle.json", lambda o: flip_handover(o, "events")),
         G, 6, in_force_genesis),
        ("all, a proof hash of the entry of 'keys' changed", edited("all.bundle.json", lambda o: o["keys"][0]["proof"].__setitem__(0, b64encode(bytes(32)))),
         C, 6, "the inclusion proof does not lead to the checkpoint's root (tree size 11)"),
        ("all, seq 7 (after the rotation) with a byte changed", edited("all.bundle.json", lambda o: o["events"][6].update(
            line=o["events"][6]["line"].replace('"actor":"self"', '"actor":"selF"'))), G, 7, in_force_new),
        ("alice (statement form), the rotation left out of catalogVersions",
         edited(alice_statement, lambda o: o.update(catalogVersions=[])), G, None,
         "the key rotations among the ledger's events (seq []) are not the ones 'keys' holds (seq [6])"),
        ("alice (statement form), the rotation left out of catalogVersions, the statement re-signed by the holder of the key in force",
         edited(alice_statement, lambda o: o.update(catalogVersions=[], statement=sign_note(statement_text(
             r.name, 11, o["subject"]["ref"], [], [e["seq"] for e in o["events"]]), C, r.new_seed))), C, None,
         "the key rotations among the ledger's events (seq []) are not the ones 'keys' holds (seq [6])"),
        ("alice (statement form), without 'keys', genesis key pinned: the pinned key no longer leads to the checkpoint",
         edited(alice_statement, lambda o: o.pop("keys")), G, None,
         "the bundle's verifier key %s differs from the pinned key %s" % (current_text, genesis_text)),
    ]

    # Ledgers re-signed with the test seeds.
    genesis_kid = r.kid(r.genesis_seed)

    def same_key_again(bodies):
        del bodies[6]["publicKey"]  # sign_log names the key of '@next'
        bodies[6]["@next"] = r.genesis_seed
        for b in bodies[7:]:
            b["kid"] = genesis_kid

    def retired_signs_7(bodies):
        bodies[7].update({"@seed": r.genesis_seed, "kid": genesis_kid})

    handover, handover_seed = r.ledger(lambda b: b[6].update({"@handover": r.other_seed}))
    again, again_seed = r.ledger(same_key_again)
    retired, retired_seed = r.ledger(retired_signs_7)
    two, two_seed = r.ledger(r.two_rotations)
    T = r.signer(r.third_seed)
    not_handed = "the key rotation's handover signature does not verify with the new key %s" % r.kid(r.new_seed)
    for form, make in (("alice", lambda l, s: r.subject(l, s)), ("alice (statement form)", lambda l, s: r.subject(l, s, streams=False)),
                       ("all", r.everything)):
        cases += [
            ("%s, the handover signed by a key the ledger never used" % form, serialize(make(handover, handover_seed)) + b"\n", G, 6, not_handed),
            ("%s, the handover signed by a key the ledger never used, current key pinned" % form, serialize(make(handover, handover_seed)) + b"\n",
             C, 6, not_handed),
            ("%s, a rotation to the genesis key again" % form, serialize(make(again, again_seed)) + b"\n", G, 6,
             "the key rotation names key %s, which this ledger has used before" % genesis_kid),
            ("%s, seq 7 signed with the genesis key it retired (kid too)" % form, serialize(make(retired, retired_seed)) + b"\n", G, 7, in_force_new),
        ]
    two_all, two_alice = r.everything(two, two_seed), r.subject(two, two_seed)
    two_statement = r.subject(two, two_seed, streams=False)
    for which, pinned in (("genesis", G), ("middle", C), ("third", T)):
        cases += [("two rotations (seq 6 and 10), %s key pinned: %s" % (which, form), serialize(o) + b"\n", pinned, None, None)
                  for form, o in (("all", two_all), ("alice", two_alice), ("alice (statement form)", two_statement), ("bob", r.subject(two, two_seed, "bob")))]
    cases += [
        ("two rotations, 'keys' without the first: the second is signed by a key the schedule does not have yet",
         edited(two_all, lambda o: o.update(keys=o["keys"][1:])), G, 10, in_force_genesis),
        ("two rotations, 'keys' without the second: the bundle's verifier key is not the checkpoint key",
         edited(two_all, lambda o: o.update(keys=o["keys"][:1])), G, None,
         "the bundle's verifier key %s is not the key that signs its checkpoint, %s" % (T.text, current_text)),
        ("two rotations, 'keys' without the second and 'verifierKey' to match: the checkpoint is not the middle key's",
         edited(two_all, lambda o: o.update(keys=o["keys"][:1], verifierKey=current_text)), G, None,
         "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("two rotations, 'keys' without the second, third key pinned", edited(two_all, lambda o: o.update(keys=o["keys"][:1])), T, None,
         "the pinned key %s is neither the ledger's genesis key nor a key that the bundle's key rotations introduce" % T.text),
        ("two rotations, 'keys' in reverse order", edited(two_all, lambda o: o.update(keys=o["keys"][::-1])), G, 6,
         "an entry of 'keys' is not a key rotation, or is out of order"),
    ]
    for name, data, pinned, seq, reason in cases:
        checks.run("rotated: derived: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), lambda data=data, pinned=pinned, seq=seq, reason=reason:
                   outcome(data, pinned, "bundle", reason, seq))

    # Revocations (Keys, Revocations): ledgers re-signed so that only the revocation's defect
    # remains, exported as the reference exports them; every form, with each key it can pin.
    for name, revoked_lines, revoked_seed, outcomes in r.revocation_cases():
        pins = (("genesis", G), ("current", C)) + ((("third", T),) if revoked_seed == r.third_seed else ())
        for form, who, make in (("alice", "alice", lambda l, s: r.subject(l, s)),
                                ("alice (statement form)", "alice", lambda l, s: r.subject(l, s, streams=False)),
                                ("bob", "bob", lambda l, s: r.subject(l, s, "bob")),
                                ("bob (statement form)", "bob", lambda l, s: r.subject(l, s, "bob", streams=False)),
                                ("all", "all", r.everything)):
            data = serialize(make(revoked_lines, revoked_seed)) + b"\n"
            outcome_of = outcomes[who]
            seq, reason = outcome_of if outcome_of is not None else (None, None)
            for which, pinned in pins:
                checks.run("rotated: revocation: %s, %s, %s key pinned: %s" % (
                    name, form, which, "verifies" if reason is None else "fails: seq %d, %s" % (seq, reason)),
                    lambda data=data, pinned=pinned, seq=seq, reason=reason: outcome(data, pinned, "bundle", reason, seq))

    def revocation_as_ledger():
        """verify_vectors.verify_folder on the same derived ledgers: the same defects, each where
        verify names it (the line of its seq)."""
        wrong = []
        records = read_subject_records(r.folder)
        for name, lines, seed, outcomes in r.revocation_cases():
            log = b"".join(line + b"\n" for line in lines)
            # The subject records as the revocation's writer leaves them: signed again by the key
            # in force (ledger-format.md, Key rotation, Revocation: Records).
            subjects = b"".join(serialize({"id": i, "salt": x.salt.hex(), "sig": ed25519_sign(seed, subject_record_message(i, x.salt)).hex()})
                                + b"\n" for i, x in records.items())
            try:
                verify_folder(r.folder, log=log, head_text=sign_note(head_text(lines, r.name, build_stored(lines).__getitem__),
                                                                  r.signer(seed), seed), derived=False, subject_map=False,
                              subjects=subjects)
                got = None
            except Failure as f:
                got = (f.seq, f.reason)
            expected = outcomes["all"]
            if (got is None) != (expected is None) or (got is not None and got[0] != expected[0]):
                wrong.append("%s: %s" % (name, got))
        return not wrong, "; ".join(wrong) or "%d ledgers, each failing verify at the seq the all bundle names" % len(r.revocation_cases())
    checks.run("rotated: revocation: the derived ledgers verify, or fail verify_folder at the seq their all bundle fails", revocation_as_ledger)
    checks.run("rotated: revocation: alice (statement form) with the revocation left out of catalogVersions (statement as signed)",
               lambda: outcome(edited(alice_statement, lambda o: o.update(catalogVersions=o["catalogVersions"][:1])), G, "bundle",
                               "the signed export statement lists catalogue versions [6, 10] but the bundle holds [6]", None))
    checks.run("rotated: revocation: all, the revocation's line with a changed hash in 'attested' (not re-signed): its signature fails",
               lambda: outcome(edited("all.bundle.json", lambda o: o["events"][9].update(line=o["events"][9]["line"].replace(
                   '"attested":["9', '"attested":["8'))), C, "bundle", in_force_new, 10))

    def as_ledger():
        log = sign_log(r.two_rotations([dict(b, **({"@next": r.new_seed} if b["seq"] == 6 else {})) for b in r.bodies]),
                       r.genesis_seed, heads_in_log=True)[0]
        v = verify_folder(r.folder, log=log, derived=False, subject_map=False)
        return ([p[0] for p in v.key_schedule.periods] == [0, 7, 11] and event_lines(log) == two,
                ", ".join("%s from seq %d" % (kid, start) for start, _, kid in v.key_schedule.periods))
    checks.run("rotated: derived: the ledger of two rotations verifies as a ledger (verify_vectors.verify_folder): keys from seq 0, 7, 11",
               as_ledger)

    # Consistency proofs: each checkpoint opened with the key in force at its size.
    base = json.loads(r.read("consistency-6-11.json"))
    consistency = [
        ("6 -> 11 without 'genesis' and 'keys', genesis key pinned: the newer checkpoint is not the genesis key's",
         edited(base, lambda o: (o.pop("keys"), o.pop("genesis"))), G, None,
         "checkpoint: the note has no signature by key %s" % "+".join(genesis_text.split("+")[:2])),
        ("6 -> 11 without 'genesis' and 'keys', current key pinned: the older checkpoint is not the current key's",
         edited(base, lambda o: (o.pop("keys"), o.pop("genesis"))), C, None,
         "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("6 -> 11, 'keys' without 'genesis'", edited(base, lambda o: o.pop("genesis")), G, None, "'genesis' lacks 'seq' or 'line'"),
        ("6 -> 11, 'keys' not an array", edited(base, lambda o: o.update(keys="6")), G, None, "'keys' is not an array"),
        ("6 -> 11, an entry of 'keys' without its proof", edited(base, lambda o: o["keys"][0].pop("proof")), G, None,
         "an entry of 'keys''s proof is not an array"),
        ("6 -> 11, pinned a key the ledger never used", r.read("consistency-6-11.json"), other, None,
         "the pinned key %s is neither the ledger's genesis key nor a key that the consistency proof's key rotations introduce" % other.text),
        ("6 -> 11, the older checkpoint (size 6) signed by the new key", serialize(r.consistency(lines, 6, r.new_seed, seed)) + b"\n", C, None,
         "checkpoint: the note has no signature by key %s" % "+".join(genesis_text.split("+")[:2])),
        ("7 -> 11, the older checkpoint (size 7) signed by the new key, in force for seq 7", serialize(r.consistency(lines, 7, r.new_seed, seed)) + b"\n",
         G, None, None),
        ("7 -> 11, the older checkpoint (size 7) signed by the genesis key", serialize(r.consistency(lines, 7, r.genesis_seed, seed)) + b"\n",
         C, None, "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("3 -> 6, before the rotation (no 'keys'; genesis key pinned)", serialize(r.consistency(lines, 3, r.genesis_seed, r.genesis_seed, n=6)) + b"\n",
         G, None, None),
        ("3 -> 6, before the rotation, current key pinned", serialize(r.consistency(lines, 3, r.genesis_seed, r.genesis_seed, n=6)) + b"\n",
         C, None, "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
        ("6 -> 11, the rotation's handover changed in 'keys'", edited(base, lambda o: flip_handover(o, "keys")), C, 6, in_force_genesis),
        ("6 -> 11, the genesis entry of the tiny ledger (same genesis key, another ledger)",
         edited(base, lambda o: o["genesis"].update(line=event_lines(read_file(os.path.join(here, "tiny-ledger"), "ledger.jsonl"))[0].decode())),
         G, 0, "the inclusion proof does not lead to the checkpoint's root (tree size 11)"),
        ("6 -> 11, 'genesis' holding alice's first event", edited(base, lambda o: o.update(genesis={
            "seq": 1, "line": lines[1].decode(), "proof": [b64encode(h) for h in stored_inclusion_proof(1, 11, stored.__getitem__)]})), G, 0,
         "the genesis entry does not name the genesis key that the 'keys' rotations start from"),
        ("6 -> 11, the handover signed by a key the ledger never used", serialize(r.consistency(handover, 6, r.genesis_seed, handover_seed)) + b"\n",
         G, 6, not_handed),
    ]
    for m in (1, 6, 7, 10):
        for which, pinned in (("genesis", G), ("middle", C), ("third", T)):
            old_seed = r.genesis_seed if m <= 6 else r.new_seed
            consistency.append(("two rotations, %d -> 12, %s key pinned" % (m, which), serialize(r.consistency(two, m, old_seed, two_seed)) + b"\n",
                                pinned, None, None))
    consistency += [
        ("two rotations, 1 -> 12, 'keys' without the first: the second is signed by a key the schedule does not have yet",
         edited(r.consistency(two, 1, r.genesis_seed, two_seed), lambda o: o.update(keys=o["keys"][1:])), G, 10, in_force_genesis),
        ("two rotations, 7 -> 12, 'keys' without the first: the older checkpoint is opened with the genesis key",
         edited(r.consistency(two, 7, r.new_seed, two_seed), lambda o: o.update(keys=o["keys"][1:])), G, None,
         "checkpoint: the note has no signature by key %s" % "+".join(genesis_text.split("+")[:2])),
        ("two rotations, 1 -> 12, 'keys' without the second", edited(r.consistency(two, 1, r.genesis_seed, two_seed),
                                                                    lambda o: o.update(keys=o["keys"][:1])), G, None,
         "checkpoint: the note has no signature by key %s" % "+".join(current_text.split("+")[:2])),
    ]
    for name, data, pinned, seq, reason in consistency:
        checks.run("rotated: consistency: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), lambda data=data, pinned=pinned, seq=seq, reason=reason:
                   outcome(data, pinned, "consistency", reason, seq))


def read_key_argument(argument):
    """The verifier key: the text itself, or (without a '+') a file holding it."""
    text = argument
    if "+" not in argument and os.path.isfile(argument):
        with open(argument, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    while text.endswith("\n") or text.endswith(" "):
        text = text[:-1]
    return parse_verifier_key(text)


def check_file(checks, path, key_argument):
    try:
        key = read_key_argument(key_argument)
    except (NoteError, OSError) as e:
        checks.check(False, "verifier key", str(e))
        return
    checks.check(True, "verifier key", key.text)
    with open(path, "rb") as f:
        data = f.read()
    kind = file_kind(data)
    name = "%s verifies (%s)" % (path, "consistency proof" if kind == "consistency" else "export bundle")
    try:
        if kind == "consistency":
            old, new = verify_consistency(data, key)
            detail = "the ledger %s at size %d extends its checkpoint at size %d" % (new.origin, new.size, old.size)
        else:
            detail = describe_report(verify_bundle(data, key))
    except ExportFailure as f:
        checks.check(False, name, str(f))
        return
    checks.check(True, name, detail)


def main(argv):
    checks = Checks()
    if len(argv) not in (1, 3) or (len(argv) > 1 and argv[1] in ("-h", "--help")):
        print(__doc__.strip())
        return 64
    if len(argv) == 3:
        check_file(checks, argv[1], argv[2])
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        self_tests(checks)
        check_vectors(checks, here)
        check_recorded_vectors(checks, here)
        check_rotated(checks, here)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
