#!/usr/bin/env python3
"""An independent checker of witness cosignatures and add-checkpoint requests, written from
Spec/witness.md (C2SP tlog-cosignature and tlog-witness).

    python3 Spec/vectors/verify_witness.py          # check Spec/vectors/witness/ and the specs' examples

Ed25519 comes from PyNaCl (libsodium's Python binding), not from the Swift package or from
verify_vectors.py's own Ed25519; the RFC 6962 consistency check and the checkpoint and note
parsing are verify_export.py's. Prints one line per check and ends with "N passed, M failed";
exits 0 only when nothing failed.
"""
import base64
import binascii
import hashlib
import json
import os
import sys

import nacl.exceptions
import nacl.signing

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from verify_export import (  # noqa: E402
    Checks, NoteError, check_consistency, leaf_hash, open_note, parse_checkpoint, parse_verifier_key, RFC6962,
)
from verify_vectors import event_lines  # noqa: E402

DASH = "\u2014 "
WITNESS = os.path.join(HERE, "witness")


def b64(text):
    raw = base64.b64decode(text, validate=True)
    if base64.b64encode(raw).decode() != text:
        raise ValueError("not canonical base64: " + text)
    return raw


class WitnessKey:
    """A cosigner key: `name+id+base64(0x04 || key)`, id = SHA-256(name || 0x0A || 0x04 || key)[:4]."""

    def __init__(self, text):
        name, rest = text.split("+", 1)
        key_id, key64 = rest.split("+", 1)
        raw = b64(key64)
        if len(raw) != 33 or raw[0] != 0x04:
            raise NoteError("not a cosignature key (type 0x04 and 32 bytes)")
        self.name, self.public_key = name, raw[1:]
        self.key_id = hashlib.sha256(name.encode() + b"\n\x04" + self.public_key).digest()[:4]
        if self.key_id.hex() != key_id:
            raise NoteError("key id %s does not match the name and key" % key_id)


def split_note(note):
    cut = note.rfind("\n\n")
    if cut < 0:
        raise NoteError("note has no blank line before its signatures")
    text, block = note[:cut] + "\n", note[cut + 2:]
    if not block.endswith("\n"):
        raise NoteError("note's signature block does not end with a newline")
    block_lines = block[:-1].split("\n")
    if len(block_lines) > 100:
        raise NoteError("note has more than 100 signature lines")
    lines = []
    for line in block_lines:
        if not line.startswith(DASH):
            raise NoteError("signature line does not start with '\u2014 '")
        name, _, sig64 = line[len(DASH):].partition(" ")
        raw = b64(sig64)
        if len(raw) <= 4:
            raise NoteError("malformed signature line")
        lines.append((name, raw[:4], raw[4:]))
    return text, lines


def cosigned_message(text, timestamp):
    return b"cosignature/v1\ntime %d\n" % timestamp + text.encode("utf-8")


def cosigners(note, keys):
    """{witness name: timestamp} of the trusted keys whose cosignature verifies; lines of other
    keys are ignored, and a line of a trusted key that does not verify is an error."""
    text, lines = split_note(note)
    found = {}
    for name, key_id, rest in lines:
        for key in keys:
            if key.name != name or key.key_id != key_id:
                continue
            if len(rest) != 72:
                raise NoteError("a cosignature line holds %d bytes" % (len(rest) + 4))
            timestamp = int.from_bytes(rest[:8], "big")
            if timestamp > 2**63 - 1:
                raise NoteError("a cosignature's timestamp exceeds 2^63 - 1")
            try:
                nacl.signing.VerifyKey(key.public_key).verify(cosigned_message(text, timestamp), rest[8:])
            except nacl.exceptions.BadSignatureError:
                raise NoteError("the cosignature by witness %s does not verify" % key.name)
            found[key.name] = max(found.get(key.name, 0), timestamp)
    return found


def check_quorum(note, keys, quorum):
    got = cosigners(note, keys)
    if len(got) < quorum:
        raise NoteError("the checkpoint carries valid cosignatures from %d of the %d witnesses required" % (len(got), quorum))


def parse_request(body):
    """old SIZE \\n, up to 63 base64 hashes, an empty line, the note."""
    text = body.decode("utf-8")
    head, _, note = text.partition("\n\n")
    lines = head.split("\n")
    if not lines[0].startswith("old "):
        raise NoteError("the first line is not 'old SIZE'")
    size = lines[0][4:]
    if not size.isdigit() or (size != "0" and size[0] == "0"):
        raise NoteError("old size with leading zeros")
    proof = [b64(line) for line in lines[1:]]
    if len(proof) > 63 or any(len(h) != 32 for h in proof):
        raise NoteError("bad proof lines")
    return int(size), proof, note


def main():
    checks = Checks()
    # The C2SP tlog-cosignature example: key id, timestamp and the signed message.
    example = ("example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
               "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
               "\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n")

    def spec_example():
        text, lines = split_note(example)
        name, key_id, rest = lines[1]
        timestamp = int.from_bytes(rest[:8], "big")
        message = cosigned_message(text, timestamp)
        expected = (b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
                    b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
        return (name == "witness.example.com/w1" and key_id.hex() == "8d66cf3f" and timestamp == 1679315147
                and len(rest) == 72 and message == expected), "key id %s, time %d" % (key_id.hex(), timestamp)
    checks.run("C2SP tlog-cosignature example: key id, timestamp, signed message", spec_example)

    expected = json.load(open(os.path.join(WITNESS, "expected.json")))
    ledger_key = parse_verifier_key(expected["ledgerVerifierKey"])
    keys = {}
    for w in expected["witnesses"]:
        def witness_key(w=w):
            key = WitnessKey(w["verifierKey"])
            seed = binascii.unhexlify(w["seed"])
            public = bytes(nacl.signing.SigningKey(seed).verify_key)
            ok = (key.public_key == public and key.public_key.hex() == w["publicKey"] and key.key_id.hex() == w["keyID"]
                  and open(os.path.join(WITNESS, "witness-%s.vkey" % w["name"][-1])).read() == w["verifierKey"] + "\n")
            keys[w["name"][-1]] = key
            return ok, w["verifierKey"]
        checks.run("witness key %s: id from name, type 0x04 and key" % w["name"], witness_key)
    try:
        WitnessKey(expected["ledgerVerifierKey"])
        checks.check(False, "a ledger key (type 0x01) is not a witness key")
    except NoteError:
        checks.check(True, "a ledger key (type 0x01) is not a witness key")

    cosigned = open(os.path.join(WITNESS, "cosigned-checkpoint.txt"), encoding="utf-8").read()

    def cosigned_checkpoint():
        text = open_note(cosigned, ledger_key)
        checkpoint = parse_checkpoint(text)
        got = cosigners(cosigned, list(keys.values()))
        digests = [hashlib.sha256(cosigned_message(text, t)).hexdigest() for t in expected["timestamps"]]
        return (checkpoint.size == expected["checkpointSize"] and got == {"witness.example/a": expected["timestamps"][0], "witness.example/b": expected["timestamps"][1]}
                and digests == expected["signedMessageSha256"]), "size %d, cosigned by %s" % (checkpoint.size, sorted(got))
    checks.run("cosigned-checkpoint.txt: the ledger's signature and both cosignatures verify", cosigned_checkpoint)

    for case in expected["quorumCases"]:
        def quorum(case=case):
            note = open(os.path.join(WITNESS, case["file"]), encoding="utf-8").read()
            try:
                check_quorum(note, [keys[n] for n in case["witnesses"]], case["quorum"])
                return case["ok"], "accepted"
            except NoteError as e:
                return (not case["ok"]) and case["reason"] in str(e), str(e)
        checks.run("quorum %d of %s on %s: %s" % (case["quorum"], "+".join(case["witnesses"]), case["file"], "accepted" if case["ok"] else "refused"), quorum)

    def request():
        body = open(os.path.join(WITNESS, expected["request"]["file"]), "rb").read()
        old, proof, note = parse_request(body)
        checkpoint = parse_checkpoint(open_note(note, ledger_key))
        entries = event_lines(open(os.path.join(HERE, "tiny-ledger", "ledger.jsonl"), "rb").read())
        old_root = RFC6962(entries).mth(0, old)
        ok = check_consistency(proof, old, old_root, checkpoint.size, checkpoint.root)
        rebuilt = ("old %d\n" % old + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note).encode()
        return (ok and old == expected["request"]["oldSize"] and len(proof) == expected["request"]["proofHashes"]
                and rebuilt == body), "old %d, %d proof lines, new size %d" % (old, len(proof), checkpoint.size)
    checks.run("add-checkpoint-6-10.txt: the request parses and its proof leads from size 6 to the checkpoint", request)

    def forked_request():
        body = open(os.path.join(WITNESS, expected["request"]["file"]), "rb").read()
        old, proof, note = parse_request(body)
        checkpoint = parse_checkpoint(open_note(note, ledger_key))
        entries = event_lines(open(os.path.join(HERE, "tiny-ledger", "ledger.jsonl"), "rb").read())
        other_root = RFC6962(entries[:5] + [entries[5] + b" "]).mth(0, old)
        return not check_consistency(proof, old, other_root, checkpoint.size, checkpoint.root), "a witness that saw another tree at size 6 answers 422"
    checks.run("the same proof from another tree of size 6 does not verify", forked_request)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
