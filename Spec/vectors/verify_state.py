#!/usr/bin/env python3
"""An independent verifier of ConsentLedger state proofs, version 1.

Written from Spec/state-proof.md (and Spec/export-format.md and Spec/ledger-format.md, which it
builds on), with the Python 3 standard library only. Ed25519, canonical JSON, event decoding,
the subject map and replay are imported from verify_vectors.py in this folder; the Merkle tree,
signed notes, checkpoints, entry checks and the state listing from verify_export.py. The state
proof itself (reading the file, the map proofs, stream completeness, the catalogue versions and
the replay up to 'at', each grant's sealed evidence reference first opened with the key the
proof's subject record gives: Spec/erasure.md, Sealed evidence, with verify_vectors.py's
XSalsa20-Poly1305, so that the state lists it in clear) is implemented here.

Usage:
    python3 Spec/vectors/verify_state.py                  Spec/vectors/state (expected.json), a
                                                          prover reproducing its files, and
                                                          derived cases; then the state cases of
                                                          Spec/vectors/rotated (key rotation
                                                          and revocation) and derived cases
    python3 Spec/vectors/verify_state.py FILE --key KEY   verify one state proof against the
                                                          pinned verifier KEY (the key text
                                                          name+hash+key, or a file holding it)

Prints one line per check and ends with "N passed, M failed"; exits 0 only when M is 0.
"""

import json
import os
import sys

sys.dont_write_bytecode = True  # importing the other verifiers must not touch __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from verify_vectors import (  # noqa: E402
    KEY_BITS, LEDGER_STREAM, LINE_PREFIX, SIG_PREFIX, SALT_LENGTH, STREAM_KEY_LENGTH, CatalogError, Checks, SubjectMap, SubjectState,
    Violation, catalog_hash, decode_catalog, decode_line, ed25519_public_key, event_lines, hex_decode, map_leaf, map_node, map_root,
    parse_canonical, parse_time, problem_as_update, read_file, serialize, sha256, sign_log, stream_key, subject_ref, tree_root,
    trimmed_text, verify_folder, verify_map_proof, SealError, evidence_key, flip_hex_byte, opened_event, seal_evidence, effective_time,
)
from verify_export import (  # noqa: E402
    Checkpoint, Entry, ExportFailure, NoteError, NoteKey, b64decode, b64encode, build_stored, check_attested, check_consistency,
    check_entry, check_same_rotations, with_revocations, is_int, json_equal, leaf_hash, listing_json, open_note, parse_checkpoint, parse_json, parse_verifier_key,
    read_key_argument, resolve_keys, same_bytes, same_text, sign_note, stored_consistency_proof, stored_inclusion_proof, verify_chain,
    Rotated,
)

STATE_FORMAT = "consentledger-state-v1"


class StateFailure(ExportFailure):
    """Why a state proof does not verify: a reason and, when an event is at fault, its seq."""


# ---------------------------------------------------------------------------------------------
# Reading the file (Spec/state-proof.md, "Reading the file"), in the reference's order
# ---------------------------------------------------------------------------------------------

class Proof:
    pass


def read_proof(data):
    def fail(reason):
        return StateFailure(None, reason)
    try:
        value = parse_json(data)
    except ValueError:
        raise fail("the file is not JSON")
    top = value if isinstance(value, dict) else {}
    if top.get("format") != STATE_FORMAT:
        raise fail("not a state proof (format %s)" % STATE_FORMAT)

    def string(name):
        if not isinstance(top.get(name), str):
            raise fail("the proof has no string '%s'" % name)
        return top[name]

    def digests(v, what):
        if not isinstance(v, list):
            raise fail("%s is not an array" % what)
        out = []
        for item in v:
            raw = b64decode(item)
            if raw is None or len(raw) != 32:
                raise fail("%s holds something that is not the base64 of 32 bytes" % what)
            out.append(raw)
        return out

    def entry(v, what):
        if not (isinstance(v, dict) and is_int(v.get("seq")) and v["seq"] >= 0 and isinstance(v.get("line"), str)):
            raise fail("%s lacks 'seq' or 'line'" % what)
        return Entry(v["seq"], v["line"], digests(v.get("proof"), "%s's proof" % what))

    def entries(name):
        if not isinstance(top.get(name), list):
            raise fail("'%s' is not an array" % name)
        return [entry(item, "an entry of '%s'" % name) for item in top[name]]

    def map_proof(name):
        if name not in top:
            raise fail("the proof has no '%s'" % name)
        v = top[name] if isinstance(top[name], dict) else {}
        siblings = digests(v.get("siblings"), "'%s.siblings'" % name)
        end = v.get("end")
        if end == "empty":
            return siblings, None
        key = hex_decode(end.get("key"), STREAM_KEY_LENGTH) if isinstance(end, dict) else None
        seq = end.get("seq") if isinstance(end, dict) else None
        if key is None or not is_int(seq) or seq < 0:
            raise fail("'%s.end' is neither \"empty\" nor {key: 32 hex digits, seq}" % name)
        return siblings, (key, seq)

    p = Proof()
    if not isinstance(top.get("catalog"), dict):
        raise fail("the proof has no catalogue")
    p.catalog = top["catalog"]
    s = top.get("subject")
    if not (isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("id", "ref", "salt"))):
        raise fail("'subject' needs id, ref and salt")
    p.subject = (s["id"], s["ref"], s["salt"])
    p.at = p.at_ms = None
    if "at" in top:
        at = top["at"]
        if not isinstance(at, str) or parse_time(at) is None:
            raise fail("'at' is not a canonical UTC time")
        p.at, p.at_ms = at, parse_time(at)
    state = top.get("state")
    if not (isinstance(state, dict) and "features" in state):
        raise fail("the proof has no state")
    p.state = state["features"]
    p.ledger, p.verifier_key, p.checkpoint = string("ledger"), string("verifierKey"), string("checkpoint")
    p.genesis, p.last = entry(top.get("genesis"), "'genesis'"), entry(top.get("last"), "'last'")
    p.events, p.catalog_versions = entries("events"), entries("catalogVersions")
    # Item 10: the key rotations below the checkpoint, only after a rotation ([] counts as absent).
    p.keys = entries("keys") if "keys" in top else []
    p.subject_map, p.ledger_map = map_proof("subjectMap"), map_proof("ledgerMap")
    return p


# ---------------------------------------------------------------------------------------------
# Verifying (Spec/state-proof.md, "Verifying a state proof, step by step")
# ---------------------------------------------------------------------------------------------

class StateReport:
    pass


def verify_state(data, key):
    """Verifies state-proof bytes against the pinned NoteKey. Returns a StateReport or raises
    StateFailure naming the first failure in the order of the spec."""
    p = read_proof(data)
    # 1. The pinned key and the checkpoint: the key schedule and the checkpoint key
    # (export-format.md, Keys; without 'keys', verifierKey must be the pinned key's text), the
    # checkpoint opened with the checkpoint key, then the chain of 'keys'.
    keys = resolve_keys(key, p.genesis.line, p.keys, p.checkpoint, p.verifier_key, "proof")
    try:
        checkpoint_text = open_note(p.checkpoint, keys.checkpoint_key)
        checkpoint = parse_checkpoint(checkpoint_text)
    except NoteError as e:
        raise StateFailure(None, "checkpoint: %s" % e)
    if not (same_bytes(checkpoint.origin, key.name) and same_bytes(p.ledger, key.name)):
        raise StateFailure(None, "the checkpoint or the proof is for another ledger than the pinned key's '%s'" % key.name)
    verify_chain(keys, checkpoint)

    def check(e):
        event = check_entry(e, checkpoint, keys.schedule, True, keys.rotated)
        if event.v < 2:
            raise StateFailure(event.seq, "the event is of format version 1, which has no stream links")
        return event

    # 2. The catalogue and the genesis event.
    try:
        catalog, _ = decode_catalog(p.catalog)
    except CatalogError as e:
        raise StateFailure(0, "catalogue: %s" % e)
    if not json_equal(catalog.value, p.catalog):
        raise StateFailure(0, "the catalogue is not in its canonical form (required consents first)")
    genesis = check(p.genesis)
    if genesis.type != "ledger.created" or genesis.seq != 0:
        raise StateFailure(0, "the genesis entry is not the ledger's first event")
    if not (same_text(genesis.public_key, keys.schedule.periods[0][1].hex()) and same_text(genesis.ledger, key.name)):
        raise StateFailure(0, "the genesis event pins another key or ledger name")
    if sha256(serialize(p.catalog)).hex() != genesis.catalog:
        raise StateFailure(0, "the catalogue's SHA-256 differs from the genesis event's")

    # 3. The checkpoint's last event, and the subject map's root it signs.
    last = check(p.last)
    if last.seq != checkpoint.size - 1:
        raise StateFailure(last.seq, "the 'last' event is not the checkpoint's last (seq %d)" % (checkpoint.size - 1))
    if last.stream_root is None:
        raise StateFailure(last.seq, "the checkpoint's last event carries no subject-map root")
    root = bytes.fromhex(last.stream_root)
    # A signed head's chain line names the hash of its last event's body: it must be 'last'.
    for line in checkpoint_text.split("\n")[3:]:
        if line.startswith("chain ") and line[6:] != sha256(last.body).hex():
            raise StateFailure(last.seq, "the checkpoint's chain line names another event than 'last'")

    # 4. The subject: the pseudonym of the id under the salt.
    subject_id, ref, salt_hex = p.subject
    salt = hex_decode(salt_hex)
    if salt is None:
        raise StateFailure(None, "the subject's salt is not hex")
    if len(salt) != SALT_LENGTH:
        raise StateFailure(None, "the subject's salt is %d bytes, not %d" % (len(salt), SALT_LENGTH))
    computed = subject_ref(subject_id, salt)
    if not same_text(computed, ref):
        raise StateFailure(None, "the subject's pseudonym does not match its id and salt")

    # 5. Each stream is complete: the map names its newest event, each event the one before it.
    def stream(entries, stream, proof, what):
        found = verify_map_proof(stream, root, proof)
        if found is None:
            raise StateFailure(None, "the subject-map proof for %s does not lead to the root the checkpoint's last event signs" % what)
        newest = found[1] if found[0] == "present" else None

        def name(seq, nothing):
            return nothing if seq is None else "seq %d" % seq
        events = []
        for e in entries:
            event = check(e)
            if stream_key(event.subject) != stream:
                raise StateFailure(event.seq, "the event is not one of %s" % what)
            previous = events[-1].seq if events else None
            if event.stream_prev != previous:
                raise StateFailure(event.seq, "the event names %s as the previous event of %s, but the proof's previous one is %s: "
                                   "an event is missing, added or out of order" % (name(event.stream_prev, "no event"), what, name(previous, "none")))
            events.append(event)
        mine = events[-1].seq if events else None
        if mine != newest:
            raise StateFailure(None, "the subject map says the newest event of %s is %s, but the proof's is %s: events are missing or added"
                               % (what, name(newest, "none"), name(mine, "none")))
        return events

    subject_events = stream(p.events, bytes.fromhex(computed), p.subject_map, "the subject")
    ledger_events = stream([p.genesis] + p.catalog_versions, LEDGER_STREAM, p.ledger_map, "the ledger's own stream")

    # 6. The ledger stream's key rotations are exactly 'keys'; its revocations are taken in, in
    # order, and each event of the subject's stream that a revoked key signed in its compromised
    # window must be re-attested, in order (export-format.md, Keys, Revocations); then the
    # catalogue versions: (seq, time in ms, catalogue), the genesis catalogue first, a key rotation
    # or revocation skipped.
    check_same_rotations(keys, p.catalog_versions, ledger_events[1:])
    revoked = with_revocations(keys, ledger_events)
    for event in subject_events:
        check_attested(event, revoked)
    versions, corrections = [(0, genesis.at_ms, catalog)], []
    for previous, event in zip(ledger_events, ledger_events[1:]):
        if event.type in ("key.rotated", "key.revoked"):
            continue
        if event.type == "clock.corrected":
            # Rule 5b as far as the stream shows it; as-of questions count in effective times.
            if not event.at_ms < event.corrected_from_ms:
                raise StateFailure(event.seq, "a clock correction moves the ledger's time back, but %s is not earlier than the time it corrects, %s" % (event.at, event.corrected_from))
            if not previous.at_ms <= event.corrected_from_ms:
                raise StateFailure(event.seq, "a clock correction corrects %s, earlier than the ledger's own event before it at %s" % (event.corrected_from, previous.at))
            corrections.append((event.seq, event.at_ms))
            continue
        if event.type != "catalog.published":
            raise StateFailure(event.seq, "a ledger event after the genesis event is not a published catalogue")
        if catalog_hash(event.document) != event.catalog:
            raise StateFailure(event.seq, "the published catalogue's SHA-256 differs from its 'catalog' member")
        problem = problem_as_update(event.document, versions[-1][2])
        if problem is not None:
            raise StateFailure(event.seq, "the published catalogue cannot replace the one in force: %s" % problem)
        versions.append((event.seq, event.at_ms, event.document))

    # 7. Replay the subject's events up to 'at', each under the catalogue in force for its seq,
    # a sealed evidence reference first opened with the key of the proof's subject record (the
    # replayed event then holds it in clear, and the state lists it as 'evidence').
    state, replayed = SubjectState(), []
    key_of_subject = evidence_key(subject_id, salt)
    for event in subject_events:
        if p.at_ms is not None and effective_time(event.seq, event.at_ms, corrections) > p.at_ms:
            break
        in_force = [c for s, _, c in versions if s < event.seq][-1]
        try:
            event = opened_event(event, key_of_subject)
        except SealError as err:
            raise StateFailure(event.seq, "%s (the key the proof's subject record gives)" % err.problem)
        try:
            state.apply(event, in_force)
        except Violation as v:
            raise StateFailure(event.seq, "replay: %s" % v.reason)
        replayed.append(event)
    if state.open is not None:
        raise StateFailure(None, "the events end inside a command")

    # 8. The listing under the catalogue in force at 'at' (the last version when there is none).
    if p.at_ms is None:
        listed_under = versions[-1][2]
    else:
        listed_under = ([c for s, t, c in versions if effective_time(s, t, corrections) <= p.at_ms] or [catalog])[-1]
    listing = listing_json(state, listed_under)
    if not json_equal(listing, p.state):
        raise StateFailure(None, "the proof's state differs from the replay of its events")

    r = StateReport()
    r.checkpoint, r.subject, r.at, r.events, r.listing = checkpoint, subject_id, p.at, replayed, listing
    r.versions = [s for s, _, _ in versions]
    return r


def describe(r):
    active = [f["key"] for f in r.listing if f["active"]]
    return "%s%s: %d event(s) replayed, catalogue versions %s, active: %s; checkpoint %s size %d root %s" % (
        r.subject, " as of %s" % r.at if r.at else "", len(r.events), r.versions, ", ".join(active) or "none",
        r.checkpoint.origin, r.checkpoint.size, b64encode(r.checkpoint.root))


# ---------------------------------------------------------------------------------------------
# A prover (Spec/state-proof.md, "What prove-state writes"), for the vectors and derived cases
# ---------------------------------------------------------------------------------------------

def head_note(lines, key, seed, chain=True):
    """The signed head of the log `lines` (without newlines): a checkpoint with a 'chain HASH'
    line, as a write signs it; or, without `chain`, a plain checkpoint."""
    root = tree_root([leaf_hash(line) for line in lines])
    text = Checkpoint(key.name, len(lines), root).text
    if chain:
        last = decode_line(lines[-1])
        text += "chain %s\n" % sha256(last.body).hex()
    return sign_note(text, key, seed)


def prove_state(lines, subject_id, salt, key, note, catalog_value, at=None, strict=True):
    """The state proof of `subject_id` for the log `lines` under the signed checkpoint `note` (of
    the whole of `lines`, signed by `key`, the key in force for seq len(lines)), as the reference
    writes it: the subject's stream and the ledger's, each read from the map's newest seq back
    along the 'streamPrev' links; after a key rotation, the key.rotated entries as 'keys'. A
    replay violation raises Violation (the reference writes no proof), or, without `strict`, ends
    the replay (the listing is of the events before it: what a key holder could sign anyway). A
    sealed evidence reference is opened with the subject's record and listed in clear; one that
    does not open raises SealError, or, without `strict`, is listed as it is ('sealedEvidence')."""
    n, stored = len(lines), build_stored(lines)
    read = stored.__getitem__
    events = [decode_line(line) for line in lines]
    subject_map = SubjectMap()
    for e in events:
        if e.seq == e.cmd + e.cmd_size - 1:
            subject_map.set(stream_key(e.subject), e.seq)
    ref = subject_ref(subject_id, salt)

    def walk(stream):
        seq, out = subject_map.lookup(stream)[0], []
        while seq is not None:
            out.append(events[seq])
            seq = events[seq].stream_prev
        return out[::-1]

    def entry(seq):
        return {"seq": seq, "line": lines[seq].decode("utf-8"), "proof": [b64encode(h) for h in stored_inclusion_proof(seq, n, read)]}

    def map_proof(stream):
        siblings, end = subject_map.lookup(stream)[1]
        return {"siblings": [b64encode(h) for h in siblings], "end": "empty" if end is None else {"key": end[0].hex(), "seq": end[1]}}

    mine, ledger_stream = walk(bytes.fromhex(ref)), walk(LEDGER_STREAM)
    catalog = decode_catalog(catalog_value)[0]
    versions = [(0, ledger_stream[0].at_ms, catalog)] + [(e.seq, e.at_ms, e.document) for e in ledger_stream[1:]
                                                           if e.type == "catalog.published"]
    corrections = [(e.seq, e.at_ms) for e in ledger_stream if e.type == "clock.corrected"]
    at_ms = parse_time(at) if at is not None else None
    state = SubjectState()
    key_of_subject = evidence_key(subject_id, salt)
    for e in mine:
        if at_ms is not None and effective_time(e.seq, e.at_ms, corrections) > at_ms:
            break
        try:
            e = opened_event(e, key_of_subject)
        except SealError:
            if strict:
                raise
        try:
            state.apply(e, [c for s, _, c in versions if s < e.seq][-1])
        except Violation:
            if strict:
                raise
            break
    listed_under = versions[-1][2] if at_ms is None else ([c for s, t, c in versions if effective_time(s, t, corrections) <= at_ms] or [catalog])[-1]
    proof = {"format": STATE_FORMAT, "ledger": key.name, "verifierKey": key.text, "checkpoint": note, "catalog": catalog_value,
             "genesis": entry(0), "last": entry(n - 1), "subject": {"id": subject_id, "ref": ref, "salt": salt.hex()},
             "events": [entry(e.seq) for e in mine], "catalogVersions": [entry(e.seq) for e in ledger_stream[1:]],
             "subjectMap": map_proof(bytes.fromhex(ref)), "ledgerMap": map_proof(LEDGER_STREAM),
             "state": {"features": listing_json(state, listed_under)}}
    if at is not None:
        proof["at"] = at
    rotations = [e.seq for e in ledger_stream if e.type == "key.rotated"]
    if rotations:
        proof["keys"] = [entry(seq) for seq in rotations]
    return proof


def file_bytes(proof):
    return serialize(proof) + b"\n"


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

class Vectors:
    """Spec/vectors/state, and the 12-line log its proofs hold (the tiny ledger, then a
    publication at seq 10 and alice's re-consent at seq 11)."""

    def __init__(self, here):
        self.here = here
        self.dir = os.path.join(here, "state")
        self.folder = os.path.join(here, "tiny-ledger")
        self.seed = hex_decode(trimmed_text(read_file(self.folder, "secret.key")), 32)
        self.catalog_value = parse_canonical(read_file(self.folder, "catalog.json"))
        self.salts = {s["id"]: bytes.fromhex(s["salt"]) for s in json.loads(read_file(here, "expected.json"))["subjects"]}
        lines = {}
        for name in ("alice.state.json", "bob.state.json"):
            p = json.loads(self.read(name))
            for e in [p["genesis"], p["last"]] + p["events"] + p["catalogVersions"]:
                lines.setdefault(e["seq"], e["line"].encode("utf-8"))
        self.lines = [lines[i] for i in range(max(lines) + 1)] if sorted(lines) == list(range(len(lines))) else None

    def read(self, name):
        return read_file(self.dir, name)


def outcome_check(data, key, ok, reason=None, seq=None):
    """(ok, detail) for a check that `data` verifies (ok) or fails with `reason` and exactly `seq`."""
    try:
        r = verify_state(data, key)
    except ExportFailure as f:  # StateFailure, or an entry check's failure (verify_export.check_entry)
        return (not ok and reason in f.reason and f.seq == seq), str(f)
    return ok, describe(r)


def check_vectors(checks, here):
    v = Vectors(here)
    expected_bytes = v.read("expected.json")
    expected = json.loads(expected_bytes)
    checks.check(expected_bytes.endswith(b"\n") and serialize(parse_canonical(expected_bytes[:-1])) == expected_bytes[:-1],
                 "state/expected.json is canonical JSON followed by a newline")
    key_file = v.read("verifier-key.txt")
    checks.check(key_file.endswith(b"\n") and not key_file.endswith(b"\n\n") and key_file[:-1].decode("utf-8") == expected["verifierKey"],
                 "state/verifier-key.txt is expected.json's verifierKey and one newline", expected["verifierKey"])
    key = parse_verifier_key(key_file[:-1].decode("utf-8"))

    # Every case of expected.json, with the pinned key.
    names = sorted(f for f in os.listdir(v.dir) if f.endswith(".json") and f != "expected.json")
    checks.check(sorted(c["file"] for c in expected["cases"]) == names,
                 "state/expected.json lists every proof file of state/ once", "%d files" % len(names))
    for c in expected["cases"]:
        data = v.read(c["file"])
        label = "state/%s %s" % (c["file"], "verifies" if c["ok"] else "fails: %s%s" % (
            "seq %d, " % c["seq"] if "seq" in c else "", c["reason"]))
        checks.run(label, lambda c=c, data=data: outcome_check(data, key, c["ok"], c.get("reason"), c.get("seq")))

    if v.lines is None or len(v.lines) != 12:
        checks.check(False, "the proofs of alice and bob hold every line of a 12-line log")
        return
    check_log(checks, v, key)
    check_prover(checks, v, key)
    check_derived(checks, v, key)
    check_evidence(checks, v, key)


def check_log(checks, v, key):
    """The log the proofs come from, and the worked example of Spec/state-proof.md."""
    lines = v.lines
    alice = json.loads(v.read("alice.state.json"))
    tiny = event_lines(read_file(v.folder, "ledger.jsonl"))  # its head lines left out
    checks.check(lines[:10] == tiny, "the proofs' lines 0-9 are tiny-ledger/ledger.jsonl's event lines")
    log = b"".join(line + b"\n" for line in lines)

    def whole():
        r = verify_folder(v.folder, log=log, head_text=alice["checkpoint"], derived=False, subject_map=False)
        return r.events == 12 and r.head[0] == 11, "%d events, head seq %d, catalogue versions %s" % (
            r.events, r.head[0], [s for s, _, _ in r.replay.versions])
    checks.run("the 12 lines with alice.state.json's checkpoint as the signed head verify as a ledger (ledger-format.md)", whole)

    checkpoint = parse_checkpoint(open_note(alice["checkpoint"], key))
    text = open_note(alice["checkpoint"], key)
    checks.check(checkpoint.size == 12 and b64encode(checkpoint.root) == "cx59aRvdWVdGmgBP/JdPC03RXjqj2Qugovyq7DaP2To="
                 and text.split("\n")[3] == "chain " + sha256(decode_line(lines[11]).body).hex()
                 and head_note(lines, key, v.seed) == alice["checkpoint"],
                 "example: the checkpoint is the signed head of the 12 lines (size 12, root cx59aRvd…, chain = SHA-256 of seq 11's body), "
                 "reproduced by signing with the test key")
    events = [decode_line(line) for line in lines]
    newest = {}
    for e in events:
        if e.seq == e.cmd + e.cmd_size - 1:
            newest[stream_key(e.subject)] = e.seq
    alice_key, bob_key = bytes.fromhex("4d0deb9245e18aa6cf570b7b4336ab00"), bytes.fromhex("d80cd52115b0ec7beeeb36bf158c36a3")
    expected_root = map_node(map_node(map_leaf(LEDGER_STREAM, 10), map_leaf(alice_key, 11)), map_leaf(bob_key, 9))
    checks.check(newest == {LEDGER_STREAM: 10, alice_key: 11, bob_key: 9} and map_root(newest) == expected_root
                 and expected_root.hex() == events[11].stream_root == "c73eb21da73623d615fdbd9a47517cfb019c5ff7104627dc9af8123e5632b912",
                 "example: the map at size 12 is {ledger: 10, alice: 11, bob: 9}; its root node(node(leaf(0, 10), leaf(alice, 11)), "
                 "leaf(bob, 9)) is seq 11's streamRoot", expected_root.hex())
    siblings = [b64decode(s) for s in alice["subjectMap"]["siblings"]]
    checks.check(siblings == [map_leaf(bob_key, 9), map_leaf(LEDGER_STREAM, 10)]
                 and alice["subjectMap"]["end"] == {"key": alice_key.hex(), "seq": 11}
                 and [b64decode(s) for s in alice["ledgerMap"]["siblings"]] == [map_leaf(bob_key, 9), map_leaf(alice_key, 11)],
                 "example: alice's map proof is [leaf(bob, 9), leaf(ledger, 10)] ending at her leaf (seq 11); the ledger's is "
                 "[leaf(bob, 9), leaf(alice, 11)] ending at seq 10")


def check_prover(checks, v, key):
    """The prover above reproduces the reference's proofs and the bad-* files byte for byte."""
    lines, note = v.lines, head_note(v.lines, key, v.seed)

    def prove(who, at=None):
        return prove_state(lines, who, v.salts[who], key, note, v.catalog_value, at)
    alice, bob = prove("alice"), prove("bob")
    for name, proof in (("alice.state.json", alice), ("bob.state.json", bob),
                        ("alice-as-of.state.json", prove("alice", "2026-01-15T09:00:01.500Z"))):
        checks.check(file_bytes(proof) == v.read(name), "prover: %s is reproduced byte for byte" % name)

    def edited(change):
        o = json.loads(json.dumps(alice))
        change(o)
        return file_bytes(o)

    def flip(o):
        line = bytearray(o["events"][1]["line"].encode("utf-8"))
        line[-10] = 0x31 if line[-10] == 0x30 else 0x30
        o["events"][1]["line"] = line.decode("utf-8")

    def swap(o):
        o["events"][1], o["events"][2] = o["events"][2], o["events"][1]

    def sibling(o):
        o["subjectMap"]["siblings"][0] = b64encode(bytes([7]) * 32)

    def older(o):
        o["subjectMap"]["end"]["seq"] = o["events"][-2]["seq"]
        o["events"] = o["events"][:-1]

    impostor = bytes(range(32, 64))
    impostor_key = NoteKey(key.name, ed25519_public_key(impostor))

    def forged(o):
        o["checkpoint"] = sign_note(o["checkpoint"].split("\n\n")[0] + "\n", impostor_key, impostor)
    edits = {
        "bad-dropped-newest-event.json": lambda o: o.update(events=o["events"][:-1]),
        "bad-dropped-middle-event.json": lambda o: o["events"].pop(1),
        "bad-added-event.json": lambda o: o["events"].insert(2, bob["events"][0]),
        "bad-swapped-events.json": swap,
        "bad-flipped-event-byte.json": flip,
        "bad-map-sibling.json": sibling,
        "bad-map-claims-older-event.json": older,
        "bad-last-not-the-checkpoints.json": lambda o: o.update(last=o["events"][0]),
        "bad-dropped-catalogue-version.json": lambda o: o.update(catalogVersions=[]),
        "bad-state.json": lambda o: o.update(state=bob["state"]),
        "bad-relabelled-subject.json": lambda o: o["subject"].update(id="bob"),
        "bad-checkpoint-other-key.json": forged,
    }
    for name, change in edits.items():
        checks.check(edited(change) == v.read(name), "prover: %s is alice's proof with exactly the change of Test vectors" % name)


def check_derived(checks, v, key):
    """Cases derived here (checkpoints and events re-signed with the test key where needed). They
    test this verifier against the spec, not against the reference implementation."""
    lines, seed = v.lines, v.seed
    note = head_note(lines, key, seed)
    carol_salt = bytes([3]) * 16

    def prove(who, at=None, log=None, salt=None, chain=True, strict=True):
        log = log or lines
        return prove_state(log, who, salt or v.salts.get(who) or carol_salt, key, head_note(log, key, seed, chain), v.catalog_value, at,
                           strict)
    alice = prove("alice")

    def edited(proof, change):
        o = json.loads(json.dumps(proof))
        change(o)
        return file_bytes(o)

    def run(name, data, ok=True, reason=None, seq=None, extra=None):
        def fn():
            result, detail = outcome_check(data, key, ok, reason, seq)
            if result and extra is not None:
                result, detail = extra(verify_state(data, key)), detail
            return result, detail
        checks.run("derived: %s %s" % (name, "verifies" if ok else "fails: %s%s" % ("" if seq is None else "seq %d, " % seq, reason)), fn)

    def listing_of(r, feature, consent):
        f = next(f for f in r.listing if f["key"] == feature)
        return f["active"], next(c for c in f["consents"] if c["code"] == consent)

    # What verifies.
    carol = prove("carol")
    run("carol, a subject with no events (the map proves her key absent; all withheld)", file_bytes(carol),
        extra=lambda r: carol["events"] == [] and not r.events and all(c["state"] == "withheld" for f in r.listing for c in f["consents"]))
    run("alice against a plain checkpoint (no 'chain' line) of the same tree", file_bytes(prove("alice", chain=False)))
    run("alice against the signed head at size 10 (no catalogue version yet; seq 11 not covered)", file_bytes(prove("alice", log=lines[:10])),
        extra=lambda r: [e.seq for e in r.events] == [1, 2, 3, 4, 5, 6, 7] and r.versions == [0])
    run("alice against the signed head at size 11 (its last event, the publication, signs the map)", file_bytes(prove("alice", log=lines[:11])),
        extra=lambda r: listing_of(r, "timeline", "optional-a")[1]["state"] == "outdated")
    run("alice as of 09:00:05.500 (after the publication, before the re-consent): timeline's optional-a outdated",
        file_bytes(prove("alice", "2026-01-15T09:00:05.500Z")),
        extra=lambda r: listing_of(r, "timeline", "optional-a")[1]["state"] == "outdated"
        and listing_of(r, "timeline", "optional-a")[1]["currentVersion"] == "2.0" and len(r.events) == 7)
    run("alice as of a time before the genesis event: nothing given, the genesis catalogue", file_bytes(prove("alice", "2026-01-15T08:00:00.000Z")),
        extra=lambda r: not r.events and listing_of(r, "timeline", "optional-a")[1]["currentVersion"] == "1.0")
    run("alice as of a time after the checkpoint's last event: the state at the checkpoint", file_bytes(prove("alice", "2030-01-01T00:00:00.000Z")),
        extra=lambda r: r.listing == verify_state(file_bytes(alice), key).listing)
    pretty = json.dumps(alice, indent=2, sort_keys=False).encode("utf-8")
    run("alice written with whitespace and members in another order (read as ordinary JSON)", pretty)

    # A relying party holding the size-10 proof checks that the log only grew to size 12.
    old = parse_checkpoint(open_note(head_note(lines[:10], key, seed), key))
    new = parse_checkpoint(open_note(note, key))
    stored = build_stored(lines)
    checks.check(check_consistency(stored_consistency_proof(10, 12, stored.__getitem__), 10, old.root, 12, new.root),
                 "derived: the size-10 proof's checkpoint is consistent with the size-12 head (a newer state is found by a fresh proof)")

    # Reading the file.
    reading = [
        ("not JSON", b"{", "the file is not JSON"),
        ("another format", edited(alice, lambda o: o.update(format="consentledger-export-v1")), "not a state proof (format consentledger-state-v1)"),
        ("no catalogue", edited(alice, lambda o: o.pop("catalog")), "the proof has no catalogue"),
        ("a subject without salt", edited(alice, lambda o: o["subject"].pop("salt")), "'subject' needs id, ref and salt"),
        ("'at' not canonical", edited(alice, lambda o: o.update(at="2026-01-15T09:00:01Z")), "'at' is not a canonical UTC time"),
        ("'at' null", edited(alice, lambda o: o.update(at=None)), "'at' is not a canonical UTC time"),
        ("no state", edited(alice, lambda o: o.update(state={})), "the proof has no state"),
        ("no checkpoint", edited(alice, lambda o: o.pop("checkpoint")), "the proof has no string 'checkpoint'"),
        ("a negative seq", edited(alice, lambda o: o["events"][0].update(seq=-1)), "an entry of 'events' lacks 'seq' or 'line'"),
        ("an entry without proof", edited(alice, lambda o: o["last"].pop("proof")), "'last''s proof is not an array"),
        ("a proof hash of 31 bytes", edited(alice, lambda o: o["genesis"]["proof"].__setitem__(0, b64encode(bytes(31)))),
         "'genesis''s proof holds something that is not the base64 of 32 bytes"),
        ("no 'catalogVersions'", edited(alice, lambda o: o.pop("catalogVersions")), "'catalogVersions' is not an array"),
        ("no 'ledgerMap'", edited(alice, lambda o: o.pop("ledgerMap")), "the proof has no 'ledgerMap'"),
        ("a map end key in uppercase hex", edited(alice, lambda o: o["subjectMap"]["end"].update(key=o["subjectMap"]["end"]["key"].upper())),
         "'subjectMap.end' is neither \"empty\" nor {key: 32 hex digits, seq}"),
    ]
    for name, data, reason in reading:
        run("reading: " + name, data, False, reason)

    # Verifying: what the steps catch.
    other_key = NoteKey("consentledger.example/other", key.public_key)
    v1_bodies = []
    for line in lines[:10]:
        body = parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)])
        body["v"] = 1
        v1_bodies.append(body)
    v1_log = sign_log(v1_bodies, seed)[0].split(b"\n")[:-1]
    v1_stored = build_stored(v1_log)

    def v1_genesis(o):
        o["genesis"] = {"seq": 0, "line": v1_log[0].decode("utf-8"), "proof": [b64encode(h) for h in stored_inclusion_proof(0, 10, v1_stored.__getitem__)]}
        o["checkpoint"] = head_note(v1_log, key, seed, chain=False)

    at_three = edited(alice, lambda o: o.update(checkpoint=head_note(lines[:3], key, seed, chain=False)))

    def unordered_catalogue(o):
        for f in o["catalog"]["features"]:
            f["consents"].reverse()

    def published_event_as_subject(o):
        o["events"].insert(0, o["catalogVersions"][0])

    verifying = [
        ("the proof names another verifier key", edited(alice, lambda o: o.update(verifierKey=other_key.text)), None,
         "differs from the pinned key"),
        ("the proof names another ledger", edited(alice, lambda o: o.update(ledger="consentledger.example/other")), None,
         "the checkpoint or the proof is for another ledger than the pinned key's"),
        ("the catalogue's consents not in consent order", edited(alice, unordered_catalogue), 0,
         "the catalogue is not in its canonical form (required consents first)"),
        ("the subject's first event as the genesis entry", edited(alice, lambda o: o.update(genesis=o["events"][0])), 0,
         "the genesis entry is not the ledger's first event"),
        ("a genesis event of format 1 (checkpoint of a format-1 log)", edited(alice, v1_genesis), 0,
         "the event is of format version 1, which has no stream links"),
        ("the entries' proofs against another checkpoint (size 3)", at_three, 0, "inclusion proof"),
        ("a checkpoint at size 3, inside the commit of seq 1-5: its last event, seq 2, carries no root", edited(alice, lambda o: o.update(
            checkpoint=head_note(lines[:3], key, seed, chain=False),
            genesis={"seq": 0, "line": lines[0].decode(), "proof": [b64encode(h) for h in stored_inclusion_proof(0, 3, build_stored(lines[:3]).__getitem__)]},
            last={"seq": 2, "line": lines[2].decode(), "proof": [b64encode(h) for h in stored_inclusion_proof(2, 3, build_stored(lines[:3]).__getitem__)]})),
         2, "the checkpoint's last event carries no subject-map root"),
        ("the salt not hex", edited(alice, lambda o: o["subject"].update(salt="0x" + "01" * 15)), None, "the subject's salt is not hex"),
        ("a salt of 15 bytes", edited(alice, lambda o: o["subject"].update(salt="01" * 15)), None, "the subject's salt is 15 bytes, not 16"),
        ("the ledger stream's map proof given for the subject", edited(alice, lambda o: o.update(subjectMap=o["ledgerMap"])), None,
         "the subject-map proof for the subject does not lead to the root"),
        ("a map proof ending 'empty' for a present key", edited(alice, lambda o: o["subjectMap"].update(end="empty")), None,
         "does not lead to the root"),
        ("a map proof of 129 siblings", edited(alice, lambda o: o["subjectMap"].update(siblings=[b64encode(bytes(32))] * (KEY_BITS + 1))), None,
         "does not lead to the root"),
        ("the subject's first event repeated", edited(alice, lambda o: o["events"].insert(1, o["events"][0])), 1,
         "the event names no event as the previous event of the subject, but the proof's previous one is seq 1"),
        ("the publication among the subject's events", edited(alice, published_event_as_subject), 10, "the event is not one of the subject"),
        ("the ledger's map proof claiming seq 0 as the stream's newest", edited(alice, lambda o: o["ledgerMap"].update(
            end={"key": "00" * 16, "seq": 0})), None, "the subject-map proof for the ledger's own stream does not lead to the root"),
        ("'at' changed, the state left as it was", edited(alice, lambda o: o.update(at="2026-01-15T09:00:02.000Z")), None,
         "the proof's state differs from the replay of its events"),
        ("the state's 'validFrom' of one consent changed", edited(alice, lambda o: o["state"]["features"][1]["consents"][0].update(
            validFrom="2026-01-15T09:00:00.000Z")), None, "the proof's state differs"),
    ]
    for name, data, seq, reason in verifying:
        run(name, data, False, reason, seq)

    # What the key holder can still sign: a log that breaks a rule is refused by the replay; a log
    # whose links skip a command is not (only verifying the whole log shows it).
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in lines]
    kid, bob_ref = bodies[0]["kid"], bodies[8]["subject"]

    def bob_body(seq, type_, consent, at, **members):
        body = {"v": 2, "seq": seq, "at": at, "actor": "self", "cmd": seq, "cmdSize": 1, "kid": kid, "type": type_,
                "subject": bob_ref, "feature": 2, "consent": consent}
        body.update(members)
        return body
    twice = sign_log(bodies + [bob_body(12, "consent.given", "optional-b", "2026-01-15T09:00:07.000Z", version="1.0")], seed)[0]
    run("key holder: bob's optional-b given twice (seq 12), signed and linked", file_bytes(prove("bob", log=twice.split(b"\n")[:-1], strict=False)),
        False,
        "replay: consent 'optional-b' of 'timeline' is given twice", 12)
    hidden_log = sign_log(bodies + [
        bob_body(12, "consent.revoked", "optional-b", "2026-01-15T09:00:07.000Z", reason="withdrawn"),
        dict(bob_body(13, "consent.given", "optional-a", "2026-01-15T09:00:08.000Z", version="2.0"), **{"@streams": {"streamPrev": 9}}),
    ], seed)[0]
    hidden = prove("bob", log=hidden_log.split(b"\n")[:-1])
    run("key holder: bob's withdrawal at seq 12 skipped by seq 13's link (verifies: optional-b shown given)", file_bytes(hidden),
        extra=lambda r: [e.seq for e in r.events] == [8, 9, 13] and listing_of(r, "timeline", "optional-b")[1]["state"] == "given")

    def whole_log():
        try:
            verify_folder(v.folder, log=hidden_log, head_text=head_note(hidden_log.split(b"\n")[:-1], key, seed), derived=False, subject_map=False)
        except Exception as f:  # noqa: BLE001 - verify_vectors.Failure
            return "as its stream's previous event, but that is seq 12" in str(f), str(f)
        return False, "verified"
    checks.run("key holder: verifying that whole log refuses seq 13's link (ledger-format.md, Verifying, step 5, item 8)", whole_log)


def check_evidence(checks, v, key):
    """A grant's evidence and why a consent is withheld, in state proofs (Spec/export-format.md,
    The state listing; Spec/ledger-format.md, consent.given and rule 11a; Spec/state-proof.md,
    step 7, item 2, and Spec/erasure.md, Sealed evidence): bob's proof, whose seq 9 carries all
    four evidence members, its reference sealed under bob's key and listed opened, as of times
    around them; and the 12-line log re-signed with the test key with a grant's evidence or an
    event's members breaking the format or the rules, or its sealed reference not opening under
    the key of the proof's subject record, proved as a key holder would."""
    lines, seed = v.lines, v.seed
    bob = json.loads(v.read("bob.state.json"))
    bodies = [parse_canonical(line[len(LINE_PREFIX):-(len(SIG_PREFIX) + 130)]) for line in lines]

    def resigned(i, **members):
        """The 12-line log with event i's members changed (None: removed), chained, linked and
        signed with the test key."""
        events = [dict(b) for b in bodies]
        events[i].update(members)
        events[i] = {k: val for k, val in events[i].items() if val is not None}
        return sign_log(events, seed)[0].split(b"\n")[:-1]

    def prove(who, log=None, at=None, strict=True):
        log = log or lines
        return prove_state(log, who, v.salts[who], key, head_note(log, key, seed), v.catalog_value, at, strict)

    def relined(proof, log):
        """`proof` (of the 12 vector lines) with every line, inclusion proof and the checkpoint
        replaced by those of `log`: the same seqs and streams, so the map proofs still hold. For a
        log the prover cannot read (an event it cannot decode)."""
        n, stored = len(log), build_stored(log)
        o = json.loads(json.dumps(proof))
        o["checkpoint"] = head_note(log, key, seed)
        for e in [o["genesis"], o["last"]] + o["events"] + o["catalogVersions"]:
            e["line"] = log[e["seq"]].decode("utf-8")
            e["proof"] = [b64encode(h) for h in stored_inclusion_proof(e["seq"], n, stored.__getitem__)]
        return file_bytes(o)

    def optional_b(listing):
        return next(c for f in listing if f["key"] == "timeline" for c in f["consents"] if c["code"] == "optional-b")

    # Sealed evidence: seq 9 holds bob's reference sealed under his key.
    bob_key, alice_key = evidence_key("bob", v.salts["bob"]), evidence_key("alice", v.salts["alice"])
    sealed = bodies[9]["sealedEvidence"]

    flip = flip_hex_byte

    def not_open(problem):
        return "%s (the key the proof's subject record gives)" % problem
    no_key = not_open("the sealed evidence reference does not open under the subject's key")

    def listed_sealed(o):
        """The proof `o` with optional-b's reference listed as the log holds it, not opened."""
        c = optional_b(o["state"]["features"])
        del c["evidence"]
        c["sealedEvidence"] = sealed

    evidence = {"effectiveAt": "2026-01-15T09:00:03.500Z", "channel": "paper", "noticeLanguage": "de", "evidence": "scan-0042"}
    b9 = optional_b(bob["state"]["features"])
    checks.check({k: b9.get(k) for k in evidence} == evidence and b9["validFrom"] == "2026-01-15T09:00:04.000Z" and "reason" not in b9,
                 "evidence: bob.state.json lists timeline optional-b given from its recorded time 09:00:04 with the grant's four "
                 "evidence members", json.dumps(b9, sort_keys=True))
    line9 = parse_canonical(next(e for e in bob["events"] if e["seq"] == 9)["line"].encode("utf-8"))["body"]
    checks.check(line9.get("sealedEvidence") == sealed and "evidence" not in line9 and "sealedEvidence" not in b9
                 and seal_evidence("scan-0042", 9, bob_key) == sealed and bob["subject"]["id"] == "bob",
                 "evidence: bob.state.json carries seq 9 with its reference sealed (scan-0042 sealed under the key of the proof's "
                 "subject record, with the writer's nonce), and its state lists the reference opened, as evidence")
    never = [c for f in bob["state"]["features"] for c in f["consents"] if not c["everGiven"]]
    checks.check(len(never) == 4 and all(c["reason"] == "never-given" and c["state"] == "withheld" for c in never),
                 "evidence: bob.state.json lists his four consents never given as withheld with reason never-given")

    def run(name, data, ok=True, reason=None, seq=None, extra=None):
        def fn():
            result, detail = outcome_check(data, key, ok, reason, seq)
            if result and extra is not None:
                r = verify_state(data, key)
                result, detail = extra(r), json.dumps(optional_b(r.listing), sort_keys=True)
            return result, detail
        checks.run("evidence: %s %s" % (name, "verifies" if ok else "fails: %s%s" % ("" if seq is None else "seq %d, " % seq, reason)), fn)

    # As of a time: the replay stops by the recorded 'at', never by the effective time.
    run("bob as of 09:00:03.750, after seq 9's effective time (09:00:03.500), before its recorded time (09:00:04): optional-b "
        "never given", file_bytes(prove("bob", at="2026-01-15T09:00:03.750Z")),
        extra=lambda r: [e.seq for e in r.events] == [8] and optional_b(r.listing)["reason"] == "never-given"
        and "effectiveAt" not in optional_b(r.listing))
    run("bob as of 09:00:04.000: optional-b given, from 09:00:04, with its evidence", file_bytes(prove("bob", at="2026-01-15T09:00:04.000Z")),
        extra=lambda r: optional_b(r.listing)["validFrom"] == "2026-01-15T09:00:04.000Z" and optional_b(r.listing)["channel"] == "paper")
    bob_proof = prove("bob")
    cases = [
        ("bob, the evidence reference changed in the state", edited_bytes(bob_proof, lambda o: optional_b(o["state"]["features"]).update(
            evidence="scan-0043")), False, "the proof's state differs from the replay of its events", None),
        ("bob, the grant's effective time listed as validFrom", edited_bytes(bob_proof, lambda o: optional_b(o["state"]["features"]).update(
            validFrom="2026-01-15T09:00:03.500Z")), False, "the proof's state differs from the replay of its events", None),
        ("bob, a never-given consent listed as withdrawn", edited_bytes(bob_proof, lambda o: o["state"]["features"][0]["consents"][0].update(
            reason="withdrawn")), False, "the proof's state differs from the replay of its events", None),
        ("bob, the reference listed sealed (its hex) instead of opened", edited_bytes(bob_proof, listed_sealed), False,
         "the proof's state differs from the replay of its events", None),
        ("bob, the last grant without evidence, re-signed (allowed)",
         file_bytes(prove("bob", log=resigned(9, effectiveAt=None, channel=None, noticeLanguage=None, sealedEvidence=None))), True, None, None),
        # Sealed evidence (step 7, item 2): opened with the key of the proof's subject record.
        ("bob, the reference in clear, as older ledgers hold it, re-signed (allowed)",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=None, evidence="scan-0042"))), True, None, None),
        ("bob, another reference sealed for seq 9 under his key, re-signed (allowed)",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=seal_evidence("paper form 7, front desk", 9, bob_key)))), True, None, None),
        ("bob, his reference sealed under alice's key, re-signed",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=seal_evidence("scan-0042", 9, alice_key)), strict=False)), False, no_key, 9),
        ("bob, a flipped byte of the sealed reference's box, re-signed",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=flip(sealed, len(sealed) // 2 - 1)), strict=False)), False, no_key, 9),
        ("bob, a flipped byte of the sealed reference's nonce, re-signed",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=flip(sealed, 0)), strict=False)), False, no_key, 9),
        ("bob, a sealed box that opens to bytes that are not UTF-8, re-signed",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=seal_evidence(b"scan-\xff0042", 9, bob_key)), strict=False)), False,
         not_open("the sealed evidence reference opens to bytes that are not UTF-8"), 9),
        ("bob, a sealed box that opens to a reference with a control character, re-signed",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=seal_evidence("scan\n0042", 9, bob_key)), strict=False)), False,
         not_open("the sealed evidence reference opens to one no command records: the evidence reference contains a control character"), 9),
        ("bob, the reference in clear and sealed at once, re-signed", relined(bob_proof, resigned(9, evidence="scan-0042")), False,
         "malformed event: a grant holds its evidence reference either sealed ('sealedEvidence') or in clear ('evidence'), not both", 9),
        ("bob as of 09:00:03.750, his reference at seq 9 garbled (seq 9 is not replayed, so not opened: allowed)",
         file_bytes(prove("bob", log=resigned(9, sealedEvidence=flip(sealed, 0)), at="2026-01-15T09:00:03.750Z")), True, None, None),
        ("bob, the last grant with an unknown channel, re-signed", relined(bob_proof, resigned(9, channel="fax")), False,
         "malformed event: member 'channel' must be one of app, portal, paper, phone, clinician", 9),
        ("bob, an evidence reference with a trailing space, re-signed", relined(bob_proof, resigned(9, sealedEvidence=None, evidence="scan-0042 ")),
         False,
         "malformed event: the evidence reference has leading or trailing spaces", 9),
        ("bob, an effective time after the recorded time, re-signed",
         file_bytes(prove("bob", log=resigned(9, effectiveAt="2026-01-15T09:00:04.001Z"), strict=False)), False,
         "replay: consent 'optional-b' of 'timeline' has an effective time after the time it was recorded", 9),
        ("bob, an effective time before his previous event about the feature, re-signed",
         file_bytes(prove("bob", log=resigned(9, effectiveAt="2026-01-15T09:00:02.999Z"), strict=False)), False,
         "replay: consent 'optional-b' of 'timeline' has an effective time before the subject's previous event about 'timeline'", 9),
        ("alice, evidence on her withdrawal (seq 6), re-signed", relined(prove("alice"), resigned(6, evidence="scan-0042")), False,
         "malformed event: member 'evidence' does not belong to a 'consent.revoked' event", 6),
        ("alice, a channel on the publication (seq 10), re-signed", relined(prove("alice"), resigned(10, channel="app")), False,
         "malformed event: member 'channel' does not belong to a 'catalog.published' event", 10),
    ]
    for name, data, ok, reason, seq in cases:
        run(name, data, ok, reason, seq)


def check_rotated(checks, here):
    """Key rotation in state proofs (export-format.md, Keys; state-proof.md, steps 1 and 6): the
    state cases of rotated/expected.json with the key each pins, the prover reproducing
    rotated/alice.state.json, and derived cases (edited proofs; ledgers re-signed with the test
    seeds as verify_export.Rotated writes them, proved as the reference would prove them)."""
    r = Rotated(here)
    G, C, T, other = r.keys["genesis"], r.keys["current"], r.signer(r.third_seed), r.signer(r.other_seed)
    for c in r.expected["cases"]:
        if c["kind"] != "state":
            continue
        label = "rotated/%s (%s key pinned) %s" % (c["file"], c["key"], "verifies" if c["ok"] else "fails: %s%s" % (
            "seq %d, " % c["seq"] if "seq" in c else "", c["reason"]))
        checks.run(label, lambda c=c: outcome_check(r.read(c["file"]), r.keys[c["key"]], c["ok"], c.get("reason"), c.get("seq")))

    def prove(lines, seed, who="alice", at=None, size=None):
        """`who`'s proof at the signed head of the first `size` lines, signed with `seed` (the key
        in force for seq `size`)."""
        lines = lines[:size] if size is not None else lines
        return prove_state(lines, who, r.salts[who], r.signer(seed), head_note(lines, r.signer(seed), seed), r.catalog_value, at)
    lines, seed = r.ledger()
    alice = prove(lines, seed)
    checks.check(file_bytes(alice) == r.read("alice.state.json"),
                 "rotated: prover: alice.state.json is reproduced byte for byte (the head signed with the seed 20..3f; 'keys' and "
                 "catalogVersions hold the rotation, seq 6)")

    def run(name, data, pinned, reason=None, seq=None, extra=None):
        def fn():
            result, detail = outcome_check(data, pinned, reason is None, reason, seq)
            if result and extra is not None:
                result = extra(verify_state(data, pinned))
            return result, detail
        checks.run("rotated: derived: %s %s" % (name, "verifies" if reason is None else "fails: %s%s" % (
            "" if seq is None else "seq %d, " % seq, reason)), fn)

    def entry_of(o, seq):
        return next(e for e in o["events"] + o["catalogVersions"] if e["seq"] == seq)

    def flip_handover(o):
        for e in o["keys"] + o["catalogVersions"]:
            e["line"] = e["line"].replace('"handover":"5', '"handover":"6')

    def short(key):
        return "+".join(key.text.split("+")[:2])
    in_force_new = "the event's signature does not verify with the ledger's key in force for it, %s" % r.kid(r.new_seed)
    in_force_genesis = "the event's signature does not verify with the ledger's key in force for it, %s" % r.kid(r.genesis_seed)
    genesis_kid = r.kid(r.genesis_seed)

    # What verifies: both keys, before, at and after the rotation; 'at' after it (the rotation is
    # no catalogue version).
    for which, pinned in (("genesis", G), ("current", C)):
        run("bob's proof, %s key pinned (his only event, seq 9, is the new key's)" % which, file_bytes(prove(lines, seed, "bob")), pinned,
            extra=lambda rep: [e.seq for e in rep.events] == [9])
        run("alice at the head of size 7, the one the rotation commits (the new key's; 'keys' = seq 6), %s key pinned" % which,
            file_bytes(prove(lines, r.new_seed, size=7)), pinned, extra=lambda rep: rep.checkpoint.size == 7 and rep.versions == [0])
        run("alice as of 09:00:02.500, after the rotation, before her withdrawal, %s key pinned" % which,
            file_bytes(prove(lines, seed, at="2026-01-15T09:00:02.500Z")), pinned,
            extra=lambda rep: [e.seq for e in rep.events] == [1, 2, 3, 4, 5] and rep.versions == [0])
    before = prove(lines, r.genesis_seed, size=6)
    run("alice at the head of size 6, before the rotation (no 'keys'), genesis key pinned", file_bytes(before), G,
        extra=lambda rep: "keys" not in before and rep.checkpoint.size == 6)
    run("alice at the head of size 6, before the rotation, current key pinned", file_bytes(before), C,
        "the proof's verifier key %s differs from the pinned key %s" % (G.text, C.text))

    # Edited proofs.
    cases = [
        ("alice, pinned a key the ledger never used (same name)", file_bytes(alice), other, None,
         "the pinned key %s is neither the ledger's genesis key nor a key that the proof's key rotations introduce" % other.text),
        ("alice, 'keys' not an array", edited_bytes(alice, lambda o: o.update(keys={})), G, None, "'keys' is not an array"),
        ("alice, 'keys' null", edited_bytes(alice, lambda o: o.update(keys=None)), G, None, "'keys' is not an array"),
        ("alice, an entry of 'keys' without 'line'", edited_bytes(alice, lambda o: o["keys"][0].pop("line")), G, None,
         "an entry of 'keys' lacks 'seq' or 'line'"),
        ("alice, an entry of 'keys' without its proof", edited_bytes(alice, lambda o: o["keys"][0].pop("proof")), G, None,
         "an entry of 'keys''s proof is not an array"),
        ("alice, 'keys' an empty array (counts as absent), genesis key pinned", edited_bytes(alice, lambda o: o.update(keys=[])), G, None,
         "the proof's verifier key %s differs from the pinned key %s" % (C.text, G.text)),
        ("alice, 'keys' an empty array, current key pinned: the genesis event is the genesis key's", edited_bytes(alice, lambda o: o.update(keys=[])),
         C, 0, "the event's signature does not verify with the pinned key"),
        ("alice, 'verifierKey' the genesis key's text", edited_bytes(alice, lambda o: o.update(verifierKey=G.text)), G, None,
         "the proof's verifier key %s is not the key that signs its checkpoint, %s" % (G.text, C.text)),
        ("alice, 'keys' holding her consent of seq 5", edited_bytes(alice, lambda o: o.update(keys=[entry_of(o, 5)])), G, 5,
         "an entry of 'keys' is not a key rotation, or is out of order"),
        ("alice, her first event as the genesis entry", edited_bytes(alice, lambda o: o.update(genesis=entry_of(o, 1))), C, 0,
         "the genesis entry does not name the genesis key that the 'keys' rotations start from"),
        ("alice, the checkpoint the head of size 6 (below the rotation of 'keys')",
         edited_bytes(alice, lambda o: o.update(checkpoint=head_note(lines[:6], G, r.genesis_seed))), G, 6,
         "a key rotation of 'keys' is not below the checkpoint's size 6"),
        ("alice, the checkpoint (size 11) signed by the genesis key", edited_bytes(alice, lambda o: o.update(
            checkpoint=head_note(lines, G, r.genesis_seed))), G, None, "checkpoint: the note has no signature by key %s" % short(C)),
        ("alice, the rotation's handover changed (in 'keys' and catalogVersions)", edited_bytes(alice, flip_handover), G, 6, in_force_genesis),
        ("alice, a proof hash of the entry of 'keys' changed", edited_bytes(alice, lambda o: o["keys"][0]["proof"].__setitem__(
            0, b64encode(bytes(32)))), C, 6, "the inclusion proof does not lead to the checkpoint's root (tree size 11)"),
        ("alice, the rotation and the revocation left out of catalogVersions (the map's ledger stream still ends at the revocation)",
         edited_bytes(alice, lambda o: o.update(catalogVersions=[])), G, None,
         "the subject map says the newest event of the ledger's own stream is seq 10, but the proof's is seq 0"),
    ]

    # Ledgers re-signed with the test seeds.
    def same_key_again(bodies):
        del bodies[6]["publicKey"]  # sign_log names the key of '@next'
        bodies[6]["@next"] = r.genesis_seed
        for b in bodies[7:]:
            b["kid"] = genesis_kid
    handover, handover_seed = r.ledger(lambda b: b[6].update({"@handover": r.other_seed}))
    again, again_seed = r.ledger(same_key_again)
    retired, retired_seed = r.ledger(lambda b: b[7].update({"@seed": r.genesis_seed, "kid": genesis_kid}))
    two, two_seed = r.ledger(r.two_rotations)
    cases += [
        ("alice, the handover signed by a key the ledger never used", file_bytes(prove(handover, handover_seed)), G, 6,
         "the key rotation's handover signature does not verify with the new key %s" % r.kid(r.new_seed)),
        ("alice, the handover signed by a key the ledger never used, current key pinned", file_bytes(prove(handover, handover_seed)), C, 6,
         "the key rotation's handover signature does not verify with the new key %s" % r.kid(r.new_seed)),
        ("alice, a rotation to the genesis key again", file_bytes(prove(again, again_seed)), G, 6,
         "the key rotation names key %s, which this ledger has used before" % genesis_kid),
        ("alice, seq 7 signed with the genesis key it retired (kid too)", file_bytes(prove(retired, retired_seed)), G, 7, in_force_new),
        ("two rotations (seq 6 and 10), 'keys' without the first", edited_bytes(prove(two, two_seed), lambda o: o.update(keys=o["keys"][1:])),
         G, 10, in_force_genesis),
        ("two rotations, 'keys' without the second", edited_bytes(prove(two, two_seed), lambda o: o.update(keys=o["keys"][:1])), G, None,
         "the proof's verifier key %s is not the key that signs its checkpoint, %s" % (T.text, C.text)),
    ]
    for which, pinned in (("genesis", G), ("middle", C), ("third", T)):
        for who in ("alice", "bob"):
            cases.append(("two rotations, %s's proof, %s key pinned" % (who, which), file_bytes(prove(two, two_seed, who)), pinned, None, None))
    for name, data, pinned, seq, reason in cases:
        run(name, data, pinned, reason, seq)

    # Revocations (step 6): the vector's proofs hold the revocation (seq 10) in catalogVersions
    # and the events 3-5 of alice that it re-attests; the derived ledgers of verify_export's
    # Rotated.revocation_cases, proved as the reference proves them, fail at the seq of the
    # subject's event that is not re-attested, or of the revocation that cannot be taken in.
    run("alice's proof: the revocation (seq 10) is in catalogVersions and is no catalogue version; her events 3-5, signed by the "
        "revoked genesis key in its window, are re-attested", file_bytes(alice), G,
        extra=lambda rep: rep.versions == [0] and [e["seq"] for e in alice["catalogVersions"]] == [6, 10])
    run("alice as of 09:00:01.500 (before the rotation and the revocation): verifies, her events 3-5 re-attested",
        file_bytes(prove(lines, seed, at="2026-01-15T09:00:01.500Z")), C, extra=lambda rep: [e.seq for e in rep.events] == [1, 2, 3, 4, 5])
    revocation_cases = r.revocation_cases()
    _, late_lines, late_seed, late = next(c for c in revocation_cases if "hash for seq 8 is replaced" in c[0])
    run("alice as of 09:00:02.500, the first rotation's key revoked with a wrong hash for seq 8 (09:00:03, after 'at'): every event of "
        "her stream is checked, those after 'at' too", file_bytes(prove(late_lines, late_seed, at="2026-01-15T09:00:02.500Z")), G,
        late["alice"][1], late["alice"][0])
    for name, revoked_lines, revoked_seed, outcomes in revocation_cases:
        pins = (("genesis", G), ("current", C)) + ((("third", T),) if revoked_seed == r.third_seed else ())
        for who in ("alice", "bob"):
            data = file_bytes(prove(revoked_lines, revoked_seed, who))
            seq, reason = outcomes[who] if outcomes[who] is not None else (None, None)
            for which, pinned in pins:
                checks.run("rotated: revocation: %s, %s's proof, %s key pinned %s" % (
                    name, who, which, "verifies" if reason is None else "fails: seq %d, %s" % (seq, reason)),
                    lambda data=data, pinned=pinned, seq=seq, reason=reason: outcome_check(data, pinned, reason is None, reason, seq))
    # Which check comes first: a revocation that cannot be taken in fails before the catalogue
    # versions, and an event that is not re-attested before the replay.
    unattested = next(c for c in revocation_cases if c[0] == "the revocation's hash for seq 4 replaced")
    broken = edited_bytes(prove(unattested[1], unattested[2]), lambda o: o["state"]["features"][0].update(active=not o["state"]["features"][0]["active"]))
    run("alice, the hash for seq 4 replaced and the state edited: the re-attestation (step 6) fails before the state (step 8)", broken, G,
        unattested[3]["alice"][1], 4)


def check_clock(checks, here):
    """Clock corrections in state proofs (state-proof.md, steps 6 and 7; ledger-format.md, Clock
    corrections): proofs of bob in the vector clock-ledger/, whose grant (seq 6) is stamped 2999 and
    corrected at seq 7 (09:10:00), as the reference writes them, asked as of times in effective
    times; and a correction edited so that it moves no time back."""
    folder = os.path.join(here, "clock-ledger")
    seed = bytes(range(32))
    lines = event_lines(read_file(folder, "ledger.jsonl"))
    salts = {json.loads(r)["id"]: bytes.fromhex(json.loads(r)["salt"]) for r in read_file(folder, "subjects.jsonl").split(b"\n")[:-1] if r and b"\0" not in r}
    key = NoteKey("consentledger.example/clock", ed25519_public_key(seed))
    catalog_value = parse_canonical(read_file(folder, "catalog.json"))

    def prove(at):
        return file_bytes(prove_state(lines, "bob", salts["bob"], key, head_note(lines, key, seed), catalog_value, at))

    def given(r):
        return sorted("%s/%s" % (f["key"], c["code"]) for f in r.listing for c in f["consents"] if c["state"] == "given")

    cases = [
        ("as of 09:10:00.500, after the correction, before his withdrawal: the grant stamped 2999 counts as of 09:10:00",
         "2026-01-15T09:10:00.500Z", ["timeline/required"], [6]),
        ("as of 09:10:01, after his withdrawal: nothing given (a cut by recorded time would stop at the 2999 grant)",
         "2026-01-15T09:10:01.000Z", [], [6, 8]),
        ("as of 09:05, before the correction: the grant's effective time is later, nothing applied", "2026-01-15T09:05:00.000Z", [], []),
        ("without 'at': the state at the checkpoint", None, [], [6, 8]),
    ]
    for name, at, expected, seqs in cases:
        def run(at=at, expected=expected, seqs=seqs):
            r = verify_state(prove(at), key)
            return given(r) == expected and [e.seq for e in r.events] == seqs, "%s, events %s" % (given(r), [e.seq for e in r.events])
        checks.run("clock: bob %s" % name, run)

    def edited_correction():
        o = json.loads(prove(None))
        for e in o["catalogVersions"]:
            e["line"] = e["line"].replace('"correctedFrom":"2999-01-01T00:00:00.000Z"', '"correctedFrom":"2026-01-15T09:09:00.000Z"')
        return outcome_check(file_bytes(o), key, False, "does not verify", 7)
    checks.run("clock: bob's proof with the correction's correctedFrom edited to 09:09: refused at seq 7 (its line is no longer the "
               "signed one)", edited_correction)


def edited_bytes(proof, change):
    o = json.loads(json.dumps(proof))
    change(o)
    return file_bytes(o)


def check_file(checks, path, key_argument):
    try:
        key = read_key_argument(key_argument)
    except (NoteError, OSError) as e:
        checks.check(False, "verifier key", str(e))
        return
    checks.check(True, "verifier key", key.text)
    with open(path, "rb") as f:
        data = f.read()
    try:
        r = verify_state(data, key)
    except ExportFailure as f:
        checks.check(False, "%s verifies (state proof)" % path, str(f))
        return
    checks.check(True, "%s verifies (state proof)" % path, describe(r))
    for f in r.listing:
        given = [c["code"] + (" (outdated)" if c["state"] == "outdated" else "") for c in f["consents"] if c["state"] != "withheld"]
        print("      %s%s: %s" % (f["key"], " (active)" if f["active"] else "", "given " + ", ".join(given) if given else "nothing given"))


def main(argv):
    checks = Checks()
    args = argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 64
    if len(args) == 3 and args[1] == "--key":
        check_file(checks, args[0], args[2])
    elif len(args) == 3 and args[0] == "--key":
        check_file(checks, args[2], args[1])
    elif not args:
        check_vectors(checks, os.path.dirname(os.path.abspath(__file__)))
        check_rotated(checks, os.path.dirname(os.path.abspath(__file__)))
        check_clock(checks, os.path.dirname(os.path.abspath(__file__)))
    else:
        print(__doc__.strip())
        return 64
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
