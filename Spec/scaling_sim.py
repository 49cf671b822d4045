#!/usr/bin/env python3
"""Simulates and costs the "past one database" plan of Spec/scaling.md.

Standard library only. Two parts:

(a) A scaled-down simulation with real RFC 6962 Merkle trees (SHA-256): S shard ledgers of fake
    event lines, subjects routed to shards by HMAC-SHA-256(routing key, id) range partitioning, and
    a top-level log ("log of logs") whose leaves are C2SP tlog-witness `add-checkpoint` request
    bodies (old size, consistency proof, the shard's signed checkpoint). An aggregator checks each
    entry as a witness would before appending it. The script then builds and CHECKS two-level
    proofs (event in its shard's tree + shard checkpoint in the top tree + the top checkpoint),
    replays the top log's chain of per-shard consistency proofs, runs a "nothing was removed"
    audit, and shows that a forked shard is refused.
(b) A cost table for the full-size parameters (append time, full audit time, proof sizes).

Merkle algorithms: MTH, PATH and PROOF/SUBPROOF as defined in RFC 6962 section 2.1; inclusion
and consistency verification as the iterative algorithms of RFC 9162 sections 2.1.3.2 and
2.1.4.2. Checkpoints are C2SP tlog-checkpoint texts in C2SP signed notes with Ed25519 (the pure
Python Ed25519 of Spec/vectors/verify_vectors.py, via verify_export.py); when those files are
not next to this one, an HMAC stand-in marks the signature lines instead (said in the output).
Keys here are derived from fixed strings: simulation keys, never to be used for anything else.

    python3 Spec/scaling_sim.py                       # simulation + cost table, default numbers
    python3 Spec/scaling_sim.py --shards 128 --shard-rate 400 --patients 50000000
    python3 Spec/scaling_sim.py --self-test           # also exhaustive checks and tamper tests

Exit status 0 when every proof verified and every refusal happened; 1 otherwise.
"""

import argparse
import base64
import hashlib
import hmac
import math
import os
import random
import sys

# ---------------------------------------------------------------------------------------------
# RFC 6962 Merkle tree (SHA-256)
# ---------------------------------------------------------------------------------------------


def sha256(data):
    return hashlib.sha256(data).digest()


def leaf_hash(entry):
    return sha256(b"\x00" + entry)


def node_hash(left, right):
    return sha256(b"\x01" + left + right)


def split_point(n):
    """k: the largest power of two smaller than n (n > 1)."""
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


class Tree:
    """An append-only list of entries and RFC 6962's recursive definitions over any prefix."""

    def __init__(self):
        self.leaves = []  # leaf hashes
        self.entries = []  # entry bytes
        self._mth = {}  # (lo, hi) -> MTH(D[lo:hi]); a range's hash never changes once complete

    def append(self, entry):
        self.entries.append(entry)
        self.leaves.append(leaf_hash(entry))
        return len(self.leaves) - 1

    @property
    def size(self):
        return len(self.leaves)

    def mth(self, lo, hi):
        """RFC 6962 2.1: MTH(D[lo:hi]), hi - lo >= 1."""
        if hi - lo == 1:
            return self.leaves[lo]
        key = (lo, hi)
        h = self._mth.get(key)
        if h is None:
            k = split_point(hi - lo)
            h = node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))
            self._mth[key] = h
        return h

    def root(self, size=None):
        return self.mth(0, self.size if size is None else size)

    def path(self, m, size):
        """RFC 6962 2.1.1: PATH(m, D[0:size]), leaf end first."""

        def rec(m, lo, hi):
            if hi - lo == 1:
                return []
            k = split_point(hi - lo)
            if m < k:
                return rec(m, lo, lo + k) + [self.mth(lo + k, hi)]
            return rec(m - k, lo + k, hi) + [self.mth(lo, lo + k)]

        assert 0 <= m < size <= self.size
        return rec(m, 0, size)

    def consistency(self, m, size):
        """RFC 6962 2.1.2: PROOF(m, D[0:size]) = SUBPROOF(m, D[0:size], true)."""

        def sub(m, lo, hi, b):
            if m == hi - lo:
                return [] if b else [self.mth(lo, hi)]
            k = split_point(hi - lo)
            if m <= k:
                return sub(m, lo, lo + k, b) + [self.mth(lo + k, hi)]
            return sub(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]

        assert 1 <= m <= size <= self.size
        return sub(m, 0, size, True)


def verify_inclusion(index, size, leaf, path, root):
    """RFC 9162 2.1.3.2, step by step."""
    if index >= size or index < 0:
        return False
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first, second, first_hash, second_hash, path):
    """RFC 9162 2.1.4.2, step by step. Equal sizes (outside the RFC's 0 < first < second): the
    proof is empty and the roots are equal, as C2SP tlog-witness and export-format.md require."""
    if first < 1 or first > second:
        return False
    if first == second:
        return not path and first_hash == second_hash
    if not path:
        return False
    path = list(path)
    if first & (first - 1) == 0:  # an exact power of 2
        path = [first_hash] + path
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_hash and sr == second_hash and sn == 0


def inclusion_length(m, n):
    """len(PATH(m, D[0:n])) without hashing anything."""
    length = 0
    while n > 1:
        k = split_point(n)
        if m < k:
            n = k
        else:
            m, n = m - k, n - k
        length += 1
    return length


def consistency_length(m, n):
    """len(PROOF(m, D[0:n])) without hashing anything."""
    length, b = 0, True
    while m != n:
        k = split_point(n)
        if m <= k:
            n = k
        else:
            m, n, b = m - k, n - k, False
        length += 1
    return length + (0 if b else 1)


# ---------------------------------------------------------------------------------------------
# Signed notes and checkpoints (C2SP signed-note, tlog-checkpoint)
# ---------------------------------------------------------------------------------------------

HERE = os.path.dirname(os.path.abspath(__file__))
ED25519 = None
try:
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(HERE, "vectors"))
    import verify_export as ED25519  # noqa: E402  (this repository's stdlib-only verifier)
except Exception:  # pragma: no cover - only when Spec/vectors is not next to this file
    ED25519 = None

DASH = "\u2014 "


def b64(raw):
    return base64.b64encode(raw).decode("ascii")


def unb64(text):
    raw = base64.b64decode(text, validate=True)
    if b64(raw) != text:
        raise ValueError("not canonical base64")
    return raw


class Refused(Exception):
    pass


class Key:
    """A note signing key named `name`; Ed25519 when available, else an HMAC stand-in."""

    def __init__(self, name, variant=b""):
        self.name = name
        self.seed = sha256(b"consentledger scaling_sim key, never use elsewhere\n" + name.encode() + variant)
        if ED25519:
            self.note_key = ED25519.NoteKey(name, ED25519.ed25519_public_key(self.seed))
            self.hash = self.note_key.hash
        else:
            self.hash = int.from_bytes(sha256(name.encode() + b"\n\xffstand-in" + self.seed)[:4], "big")

    def sign(self, text):
        if ED25519:
            return ED25519.sign_note(text, self.note_key, self.seed)
        sig = hmac.new(self.seed, text.encode(), hashlib.sha512).digest()
        return text + "\n" + DASH + self.name + " " + b64(self.hash.to_bytes(4, "big") + sig) + "\n"

    def open(self, note):
        """The note's text when it carries a valid signature by this key; else Refused."""
        if ED25519:
            try:
                return ED25519.open_note(note, self.note_key)
            except Exception as error:  # NoteError
                raise Refused(str(error))
        split = note.rfind("\n\n")
        if split < 0:
            raise Refused("note has no blank line before its signatures")
        text, block = note[: split + 1], note[split + 2:]
        for line in block[:-1].split("\n"):
            parts = line[len(DASH):].split(" ")
            if len(parts) == 2 and parts[0] == self.name:
                raw = unb64(parts[1])
                expected = hmac.new(self.seed, text.encode(), hashlib.sha512).digest()
                if raw[:4] == self.hash.to_bytes(4, "big") and hmac.compare_digest(raw[4:], expected):
                    return text
                raise Refused("the signature by %s does not verify" % self.name)
        raise Refused("the note has no signature by key %s" % self.name)


def checkpoint_text(origin, size, root):
    return "%s\n%d\n%s\n" % (origin, size, b64(root))


def parse_checkpoint(text):
    lines = text[:-1].split("\n") if text.endswith("\n") else []
    if len(lines) < 3 or not lines[0] or not lines[1].isdigit() or (lines[1] != "0" and lines[1][0] == "0"):
        raise Refused("malformed checkpoint")
    root = unb64(lines[2])
    if len(root) != 32:
        raise Refused("checkpoint root is not 32 bytes")
    return lines[0], int(lines[1]), root


# ---------------------------------------------------------------------------------------------
# Routing, shards, the aggregator and the top-level log
# ---------------------------------------------------------------------------------------------


def route(routing_key, subject_id, shards):
    """Range partitioning of HMAC-SHA-256(routing key, id): the first 8 bytes as a number in
    [0, 2^64), the shard is the range of width 2^64 / shards it falls in."""
    h = int.from_bytes(hmac.new(routing_key, subject_id.encode(), hashlib.sha256).digest()[:8], "big")
    return (h * shards) >> 64


class Shard:
    """One ledger: its own key (named by its origin), salts, log and tree."""

    def __init__(self, origin):
        self.origin = origin
        self.key = Key(origin)
        self.tree = Tree()
        self.salts = {}  # subjects.jsonl: chosen when the subject's first command writes
        self.events = {}  # subject id -> seqs
        self.tree.append(self.line({"type": "ledger.created", "ledger": origin}))

    def line(self, body):
        body = dict(body, seq=self.tree.size)
        text = "{" + ",".join('"%s":%s' % (k, ('"%s"' % v) if isinstance(v, str) else v) for k, v in sorted(body.items())) + "}"
        sig = hashlib.sha512(b"fake signature\n" + text.encode()).hexdigest()  # fake: 128 hex digits
        return ('{"body":%s,"sig":"%s"}' % (text, sig)).encode()

    def command(self, subject_id, rng, at):
        if subject_id not in self.salts:
            self.salts[subject_id] = rng.randbytes(16)
        ref = sha256(b"consentledger-subject-v1\n" + self.salts[subject_id] + subject_id.encode())[:16].hex()
        first = self.tree.size
        size = rng.choice((1, 1, 2, 3))
        for _ in range(size):
            seq = self.tree.append(self.line({"type": "consent.given", "subject": ref, "at": at, "cmd": first, "cmdSize": size}))
            self.events.setdefault(subject_id, []).append(seq)

    def signed_checkpoint(self, size=None):
        size = self.tree.size if size is None else size
        return self.key.sign(checkpoint_text(self.origin, size, self.tree.root(size)))


def witness_request(old_size, proof, note):
    """The body of a C2SP tlog-witness add-checkpoint request: the top log's entry."""
    return ("old %d\n" % old_size + "".join(b64(h) + "\n" for h in proof) + "\n" + note).encode()


def parse_witness_request(entry):
    text = entry.decode()
    head, sep, note = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or not lines[0].startswith("old ") or not lines[0][4:].isdigit():
        raise Refused("not an add-checkpoint body")
    proof = [unb64(line) for line in lines[1:]]
    if len(proof) > 63:
        raise Refused("more than 63 consistency proof lines")
    return int(lines[0][4:]), proof, note


class Aggregator:
    """Checks each shard checkpoint as a C2SP tlog-witness does (pinned key, old size equal to
    the last recorded size, RFC 6962 consistency proof, equal roots at equal sizes), then appends
    the request body as a leaf of the top-level log and signs the top log's checkpoints."""

    def __init__(self, origin, roster):
        self.origin = origin
        self.key = Key(origin)
        self.roster = roster  # shard origin -> Key (the pinned verifier keys)
        self.tree = Tree()
        self.latest = {}  # shard origin -> (size, root, top index)
        self.notes = []

    def add(self, entry):
        old, proof, note = parse_witness_request(entry)
        first_line = note.split("\n", 1)[0]
        if first_line not in self.roster:
            raise Refused("unknown origin %s" % first_line)  # 404
        origin, size, root = parse_checkpoint(self.roster[first_line].open(note))  # 403
        last_size, last_root, _ = self.latest.get(origin, (0, None, None))
        if old > size:
            raise Refused("old size %d > checkpoint size %d" % (old, size))  # 400
        if old != last_size:
            raise Refused("old size %d is not the recorded size %d" % (old, last_size))  # 409
        if old == 0 and proof:
            raise Refused("proof must be empty from size 0")
        if old and not verify_consistency(old, size, last_root, root, proof):
            raise Refused("consistency proof from %d to %d does not verify: %s forked or lost events" % (old, size, origin))  # 422/409
        index = self.tree.append(entry)
        self.latest[origin] = (size, root, index)
        return index

    def sign(self):
        note = self.key.sign(checkpoint_text(self.origin, self.tree.size, self.tree.root()))
        self.notes.append(note)
        return note


def submit(aggregator, shard):
    last = aggregator.latest.get(shard.origin)
    old = last[0] if last else 0
    if old == shard.tree.size:
        return None  # unchanged: no entry this round
    proof = shard.tree.consistency(old, shard.tree.size) if old else []
    return aggregator.add(witness_request(old, proof, shard.signed_checkpoint()))


def two_level_proof(shard, seq, aggregator, top_note):
    """Event `seq` of `shard`: its inclusion proof in the shard checkpoint recorded at the smallest
    top index covering it, and that entry's inclusion proof in the top tree of `top_note`."""
    _, top_size, _ = parse_checkpoint(top_note[: top_note.rfind("\n\n") + 1])
    for index in range(top_size):
        old, _, note = parse_witness_request(aggregator.tree.entries[index])
        origin, size, _ = parse_checkpoint(note[: note.rfind("\n\n") + 1])
        if origin == shard.origin and size > seq:
            return {
                "line": shard.tree.entries[seq], "seq": seq, "shard_proof": shard.tree.path(seq, size),
                "top_index": index, "top_entry": aggregator.tree.entries[index],
                "top_proof": aggregator.tree.path(index, top_size), "top_note": top_note,
            }
    return None  # not yet covered by the top log: wait for the next round


def verify_two_level(p, top_key, roster):
    """What an offline auditor runs: pinned top key and shard roster, nothing else trusted."""
    try:
        origin, top_size, top_root = parse_checkpoint(top_key.open(p["top_note"]))
        if origin != top_key.name:
            return False
        if not verify_inclusion(p["top_index"], top_size, leaf_hash(p["top_entry"]), p["top_proof"], top_root):
            return False
        _, _, note = parse_witness_request(p["top_entry"])
        first_line = note.split("\n", 1)[0]
        if first_line not in roster:
            return False
        origin, size, root = parse_checkpoint(roster[first_line].open(note))
        if origin != first_line:
            return False
        return verify_inclusion(p["seq"], size, leaf_hash(p["line"]), p["shard_proof"], root)
    except (Refused, ValueError, UnicodeDecodeError):
        return False


def replay_top_log(entries, roster):
    """An auditor of the top log re-runs the aggregator's checks over every entry."""
    check = Aggregator("replay", roster)
    for entry in entries:
        check.add(entry)
    return check.latest


# ---------------------------------------------------------------------------------------------
# The simulation
# ---------------------------------------------------------------------------------------------


class Tally:
    def __init__(self, verbose):
        self.passed = self.failed = 0
        self.verbose = verbose

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        if self.verbose or not ok:
            print("  %s  %s" % ("ok  " if ok else "FAIL", what))


def build_world(n_shards, n_subjects, rounds, seed, snapshot_round=None):
    rng = random.Random(seed)
    routing_key = sha256(b"scaling_sim routing key %d" % seed)
    shards = [Shard("consents.example.org/shard-%03d" % i) for i in range(n_shards)]
    roster = {s.origin: s.key for s in shards}
    aggregator = Aggregator("consents.example.org/top", roster)
    snapshot = None
    for r in range(rounds):
        at = "2026-12-%02dT10:00:00.000Z" % (r + 1)
        for _ in range(n_subjects // 2):
            subject = "patient-%07d" % rng.randrange(n_subjects)
            shards[route(routing_key, subject, n_shards)].command(subject, rng, at)
        for shard in shards:
            submit(aggregator, shard)
        aggregator.sign()
        if r == snapshot_round:
            snapshot = ({s.origin: (s.tree.size, s.tree.root()) for s in shards}, (aggregator.tree.size, aggregator.tree.root()))
    return rng, routing_key, shards, roster, aggregator, snapshot


def simulate(args, tally):
    print("(a) simulation: %d shards, %d subjects, %d top-log rounds, signatures: %s" % (
        args.sim_shards, args.sim_subjects, args.sim_rounds,
        "Ed25519 (C2SP signed-note)" if ED25519 else "HMAC stand-in (Spec/vectors/verify_export.py not found)"))
    rng, routing_key, shards, roster, aggregator, snapshot = build_world(
        args.sim_shards, args.sim_subjects, args.sim_rounds, args.seed, snapshot_round=0)
    top_key, top_note = aggregator.key, aggregator.notes[-1]

    # Every subject's history lives in exactly one shard (routing is a function of the id).
    homes = {}
    for i, s in enumerate(shards):
        for subject in s.events:
            homes.setdefault(subject, set()).add(i)
    tally.check(all(len(v) == 1 for v in homes.values()), "every subject's events are in one shard")
    tally.check(all(route(routing_key, subj, len(shards)) == min(v) for subj, v in homes.items()), "the router finds each subject's shard again")

    # Two-level proofs for every subject's first and last event.
    proofs, sizes = 0, []
    for s in shards:
        for subject, seqs in s.events.items():
            for seq in {seqs[0], seqs[-1]}:
                p = two_level_proof(s, seq, aggregator, top_note)
                ok = p is not None and verify_two_level(p, top_key, roster)
                tally.check(ok, "two-level proof of %s seq %d in %s" % (subject, seq, s.origin))
                proofs += 1
                if p:
                    sizes.append((len(p["shard_proof"]), len(p["top_proof"]), len(p["top_entry"]), len(p["top_note"].encode())))
    shard_sizes = [s.tree.size for s in shards]
    print("  shard sizes %d..%d events; top log %d entries (one per shard per round in which it grew)" % (
        min(shard_sizes), max(shard_sizes), aggregator.tree.size))
    print("  %d two-level proofs checked; per proof: shard path <= %d hashes, top path <= %d hashes,"
          % (proofs, max(x[0] for x in sizes), max(x[1] for x in sizes)))
    print("    <= %d bytes of hashes, + top entry <= %d bytes + top note %d bytes + the event line"
          % (32 * max(x[0] + x[1] for x in sizes), max(x[2] for x in sizes), max(x[3] for x in sizes)))

    # Tampering: an edited event line, an edited shard note in the entry, a wrong pinned key.
    s = shards[0]
    seq = s.events[next(iter(s.events))][0]
    p = two_level_proof(s, seq, aggregator, top_note)
    bad = dict(p, line=p["line"].replace(b"consent.given", b"consent.revoked"))
    tally.check(not verify_two_level(bad, top_key, roster), "an edited event line fails its two-level proof")
    shard_note = parse_witness_request(p["top_entry"])[2]
    recorded_size = parse_checkpoint(shard_note[: shard_note.rfind("\n\n") + 1])[1]
    bad = dict(p, top_entry=p["top_entry"].replace(b"\n%d\n" % recorded_size, b"\n%d\n" % (recorded_size + 1), 1))
    tally.check(not verify_two_level(bad, top_key, roster), "an edited shard checkpoint in the top entry fails")
    other = dict(roster)
    other[s.origin] = Key(s.origin, variant=b"impostor")
    tally.check(not verify_two_level(p, top_key, other), "a shard checkpoint checked against another key fails")
    tally.check(not verify_two_level(dict(p, top_index=p["top_index"] + 1), top_key, roster), "a wrong top index fails")

    # The top log's chain of per-shard consistency proofs replays.
    try:
        latest = replay_top_log(aggregator.tree.entries, roster)
        ok = all(latest[sh.origin][:2] == (sh.tree.size, sh.tree.root()) for sh in shards)
    except Refused as error:
        ok = False
        print("   ", error)
    tally.check(ok, "the top log replays: every shard's recorded checkpoints extend each other")

    # "Nothing was removed since the last audit": one consistency proof per shard + one top.
    old_shards, (old_top_size, old_top_root) = snapshot
    hashes = 0
    for sh in shards:
        m, old_root = old_shards[sh.origin]
        proof = sh.tree.consistency(m, sh.tree.size)
        hashes += len(proof)
        tally.check(verify_consistency(m, sh.tree.size, old_root, sh.tree.root(), proof), "%s grew from %d to %d" % (sh.origin, m, sh.tree.size))
    proof = aggregator.tree.consistency(old_top_size, aggregator.tree.size)
    hashes += len(proof)
    tally.check(verify_consistency(old_top_size, aggregator.tree.size, old_top_root, aggregator.tree.root(), proof), "top log grew")
    print("  'nothing removed' audit since round 1: %d consistency proofs, %d hashes (%d bytes)" % (len(shards) + 1, hashes, 32 * hashes))

    # A forked shard (an old line rewritten) and a truncated one are refused by the aggregator.
    forked = Shard(s.origin)
    forked.tree = Tree()
    for i, e in enumerate(s.tree.entries):
        forked.tree.append(e.replace(b"consent.given", b"consent.revoked") if i == 1 else e)
    forked.command("patient-fork", rng, "2026-12-31T00:00:00.000Z")
    old = aggregator.latest[s.origin][0]
    entry = witness_request(old, forked.tree.consistency(old, forked.tree.size), forked.signed_checkpoint())
    tally.check(refused(aggregator, entry), "the aggregator refuses a forked shard (a rewritten old line)")
    entry = witness_request(old, [], s.signed_checkpoint(old - 1))
    tally.check(refused(aggregator, entry), "the aggregator refuses a shard that lost events (a smaller tree)")
    entry = witness_request(0, [], s.signed_checkpoint())
    tally.check(refused(aggregator, entry), "the aggregator refuses a stale old size")
    return shards, aggregator


def refused(aggregator, entry):
    before = aggregator.tree.size
    try:
        aggregator.add(entry)
    except (Refused, ValueError):
        return aggregator.tree.size == before
    return False


# ---------------------------------------------------------------------------------------------
# The cost table
# ---------------------------------------------------------------------------------------------


def duration(seconds):
    if seconds < 1:
        return "%.1f ms" % (seconds * 1000)
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.1f min" % (seconds / 60)
    if seconds < 3 * 86400:
        return "%.1f h" % (seconds / 3600)
    return "%.1f days" % (seconds / 86400)


def size(nbytes):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return "%.1f %s" % (nbytes / scale, unit)
    return "%d B" % nbytes


def ceil_log2(n):
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def costs(a):
    E = a.patients * a.events_per_patient
    n = math.ceil(E / a.shards)
    rounds = math.ceil(a.horizon_days * 86400 / a.top_interval)
    T = a.shards * rounds  # upper bound: every shard grows every round
    shard_path = inclusion_length(0, n)  # = ceil(log2 n), the longest path
    top_path = inclusion_length(0, T)
    per_round = max(1, min(n - 1, round(a.shard_rate * a.top_interval)))
    entry_proof = consistency_length(n - per_round, n)
    origin = "consents.example.org/shard-000"
    note = len((checkpoint_text(origin, n, bytes(32)) + "\n" + DASH + origin + " " + "A" * 92 + "\n").encode())
    top_note = len((checkpoint_text("consents.example.org/top", T, bytes(32)) + "\n" + DASH + "consents.example.org/top " + "A" * 92 + "\n").encode())
    entry = len("old %d\n" % (n - per_round)) + 45 * entry_proof + 1 + note
    g_shard = max(1, round(n * a.audit_growth))
    g_top = max(1, round(T * a.audit_growth))
    removed_shard = consistency_length(n - g_shard, n)
    removed_top = consistency_length(T - g_top, T)
    removed_hashes = a.shards * removed_shard + removed_top
    removed_notes = 2 * (a.shards * note + top_note)
    core_rate = a.verify_rate * a.auditor_cores

    rows = [
        ("population", "%s patients x %d events = %s events" % (f"{a.patients:,}", a.events_per_patient, f"{E:,}")),
        ("per shard (%d shards)" % a.shards, "%s events, %s of log lines (%d B/line)" % (f"{n:,}", size(n * a.bytes_per_event), a.bytes_per_event)),
        ("write capacity", "%s shards x %s events/s = %s events/s durable" % (a.shards, f"{a.shard_rate:g}", f"{a.shards * a.shard_rate:,.0f}")),
        ("append the population", "%s / %s events/s = %s" % (f"{E:,}", f"{a.shards * a.shard_rate:,.0f}", duration(E / (a.shards * a.shard_rate)))),
        ("full audit, one auditor", "%s / (%d cores x %s/s) = %s, fetching %s" % (f"{E:,}", a.auditor_cores, f"{a.verify_rate:,}", duration(E / core_rate), size(E * a.bytes_per_event))),
        ("full audit, one auditor per shard", "%s / (%d cores x %s/s) = %s (shards in parallel)" % (f"{n:,}", a.auditor_cores, f"{a.verify_rate:,}", duration(n / core_rate))),
        ("replay all (links+rules, 1 core/shard)", "%s / %s/s = %s" % (f"{n:,}", f"{a.replay_rate:,}", duration(n / a.replay_rate))),
        ("top log", "%d entries/round every %g s = %.2f entries/s; <= %s entries after %g days" % (a.shards, a.top_interval, a.shards / a.top_interval, f"{T:,}", a.horizon_days)),
        ("one event, shard level", "%d hashes (%d B) in a tree of %s" % (shard_path, 32 * shard_path, f"{n:,}")),
        ("one event, top level", "%d hashes (%d B) in a tree of %s, + entry ~%d B + top note %d B" % (top_path, 32 * top_path, f"{T:,}", entry, top_note)),
        ("one event, two levels", "%d hashes = %d B of hashes, ~%d B with entry and note" % (shard_path + top_path, 32 * (shard_path + top_path), 32 * (shard_path + top_path) + entry + top_note)),
        ("one subject (%d events)" % a.events_per_patient, "%d x %d + %d = %d hashes (%s), + %d event lines" % (
            a.events_per_patient, shard_path, top_path, a.events_per_patient * shard_path + top_path,
            size(32 * (a.events_per_patient * shard_path + top_path)), a.events_per_patient)),
        ("'nothing removed' audit", "%d x %d + %d = %s hashes (%s) + %d notes (%s), %.0f%% growth" % (
            a.shards, removed_shard, removed_top, f"{removed_hashes:,}", size(32 * removed_hashes), 2 * (a.shards + 1), size(removed_notes), 100 * a.audit_growth)),
        ("  making those proofs", "%d x %.2f ms = %s (library, measured per proof)" % (a.shards + 1, a.consistency_ms, duration((a.shards + 1) * a.consistency_ms / 1000))),
        ("  checking them", "%d signatures at %s/s = %s" % (2 * (a.shards + 1), f"{core_rate:,}", duration(2 * (a.shards + 1) / core_rate))),
    ]
    print("(b) cost at full size (formulas in Spec/scaling.md; rates are inputs, not measured here)")
    width = max(len(r[0]) for r in rows)
    for label, value in rows:
        print("  %-*s  %s" % (width, label, value))


# ---------------------------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------------------------


def self_test(tally, args):
    print("self-test")
    # 1. Inclusion and consistency, every tree up to 40 leaves, against RFC 6962's definitions,
    #    against the project's own verifier, and with tampering.
    tree = Tree()
    for i in range(40):
        tree.append(b"entry %d" % i)
    ok_incl = ok_tamper = ok_cons = ok_cons_tamper = ok_len = ok_cross = True
    for n in range(1, 41):
        root = tree.root(n)
        for m in range(n):
            p = tree.path(m, n)
            leaf = tree.leaves[m]
            ok_incl &= verify_inclusion(m, n, leaf, p, root)
            ok_len &= len(p) == inclusion_length(m, n)
            ok_tamper &= not verify_inclusion(m, n, leaf_hash(b"tampered"), p, root)
            ok_tamper &= not verify_inclusion(m, n, leaf, p + [root], root)
            if p:
                ok_tamper &= not verify_inclusion(m, n, leaf, p[:-1], root)
                ok_tamper &= not verify_inclusion(m, n, leaf, [bytes([p[0][0] ^ 1]) + p[0][1:]] + p[1:], root)
                ok_tamper &= not verify_inclusion((m + 1) % n, n, leaf, p, root)
            if ED25519:
                ok_cross &= ED25519.check_inclusion(p, m, leaf, n, root)
        for m in range(1, n + 1):
            p = tree.consistency(m, n)
            ok_cons &= verify_consistency(m, n, tree.root(m), root, p)
            ok_len &= len(p) == consistency_length(m, n)
            ok_cons_tamper &= not verify_consistency(m, n, leaf_hash(b"x"), root, p)
            if p:
                ok_cons_tamper &= not verify_consistency(m, n, tree.root(m), root, [bytes([p[0][0] ^ 1]) + p[0][1:]] + p[1:])
                ok_cons_tamper &= not verify_consistency(m, n, tree.root(m), root, p[:-1])
            if ED25519:
                ok_cross &= ED25519.check_consistency(p, m, tree.root(m), n, root)
    tally.check(ok_incl, "RFC 9162 2.1.3.2 accepts PATH(m, D[n]) for all 0 <= m < n <= 40")
    tally.check(ok_tamper, "... and refuses a tampered leaf, a wrong index, a flipped, short or long path")
    tally.check(ok_cons, "RFC 9162 2.1.4.2 accepts PROOF(m, D[n]) for all 1 <= m <= n <= 40")
    tally.check(ok_cons_tamper, "... and refuses a wrong old root, a flipped or a short proof")
    tally.check(ok_len, "the counting functions give the proof lengths")
    if ED25519:
        tally.check(ok_cross, "the same proofs pass Spec/vectors/verify_export.py (Go tlog's recursive checks)")

    # 2. The project's vectors: the tiny ledger's tree (Spec/export-format.md).
    log = os.path.join(HERE, "vectors", "tiny-ledger", "ledger.jsonl")
    if os.path.exists(log):
        t = Tree()
        for line in open(log, "rb").read().split(b"\n")[:-1]:
            if not line.startswith(b'{"h'):  # head lines are not leaves
                t.append(line)
        tally.check(b64(t.root(10)) == "O8KLCmBycdriHgZJA7SLLqOPKeUbk4ZfH+AP3qJjs3A=", "root(10) of the tiny ledger matches export-format.md")
        tally.check(b64(t.root(6)) == "nBBZKWGGkFJXF157tR9DvHLapfI7CCYfRidxQ3OPunE=", "root(6) of the tiny ledger matches export-format.md")
        tally.check([b64(h) for h in t.path(1, 10)] == [
            "y2ltEUPWFf2L/oPM0O2xWsoMme0PNCH2mtmyW9cloak=", "SfptUzhnNn40mq8yB1qWLcOYPg0TMW67iN+BdpfkdPk=",
            "tXThnzE4HSn9Pt94iRKWyA45W074lq3n0GBAPl7845s=", "Vwl9/KvzGSvImnzxGCHdYYN0Xm5x2IRZJ5BnYeXla+c="],
            "inclusion proof of record 1 in the tree of 10 matches export-format.md")
        tally.check([b64(h) for h in t.consistency(6, 10)] == [
            "qjD80juwZWCqWIahoXymAA36Jtwgs8yq636l664aCbo=", "4pkTPHZoGZRev4lGdCPNQBAw9L/STTRj3Zjpnlnvy8M=",
            "RSgI93PYYBegPIwb3rGJ0uwXWwGx720CJpsJY2srbko=", "Vwl9/KvzGSvImnzxGCHdYYN0Xm5x2IRZJ5BnYeXla+c="],
            "consistency proof from 6 to 10 matches export-format.md")
        if ED25519:
            key = ED25519.parse_verifier_key(open(os.path.join(HERE, "vectors", "export", "verifier-key.txt")).read().strip())
            text = ED25519.open_note(open(os.path.join(HERE, "vectors", "export", "checkpoint.txt")).read(), key)
            tally.check(parse_checkpoint(text)[1:] == (10, t.root(10)), "the vectors' signed checkpoint opens and names root(10)")

    # 3. Routing: stable, and close to uniform over the ranges.
    rk = sha256(b"routing")
    counts = [0] * 16
    for i in range(32000):
        counts[route(rk, "patient-%d" % i, 16)] += 1
    tally.check(all(abs(c - 2000) < 250 for c in counts), "HMAC range routing spreads 32,000 ids over 16 shards within 12.5%")
    tally.check(route(rk, "patient-7", 16) == route(rk, "patient-7", 16), "routing is a function of (key, id, shard count)")

    # 4. A second, smaller world where a tampered leaf must make the two-level proof fail.
    _, _, shards, roster, aggregator, _ = build_world(3, 60, 2, args.seed + 1)
    note = aggregator.notes[-1]
    for s in shards:
        seq = s.tree.size - 1
        p = two_level_proof(s, seq, aggregator, note)
        good = p
        tally.check(verify_two_level(p, aggregator.key, roster), "%s: two-level proof of the last event" % s.origin)
        s.tree.entries[seq] = s.tree.entries[seq][:-3] + b"0\"}"  # the stored line is tampered with
        p = two_level_proof(s, seq, aggregator, note)
        tally.check(not verify_two_level(p, aggregator.key, roster), "%s: the same proof over the tampered line fails" % s.origin)
    tally.check(not verify_two_level(good, aggregator.key, {}), "without the shard's pinned key the proof fails")
    forged = note.replace("\n%d\n" % aggregator.tree.size, "\n%d\n" % (aggregator.tree.size + 1))
    tally.check(not verify_two_level(dict(good, top_note=forged), aggregator.key, roster), "an edited top checkpoint fails its signature")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = ap.add_argument_group("full-size plan (cost table)")
    g.add_argument("--patients", type=int, default=10_000_000, help="subjects in the whole population")
    g.add_argument("--events-per-patient", type=int, default=20, help="events per subject over the horizon")
    g.add_argument("--shards", type=int, default=64, help="ledgers (one PostgreSQL schema each)")
    g.add_argument("--shard-rate", type=float, default=249.0, help="durable appends (events) per second per shard: measured by make bench-postgres, 4 writer processes on one 2-core VM")
    g.add_argument("--verify-rate", type=int, default=13_800, help="events verified per second per core (measured: 27,610/s on 2 cores)")
    g.add_argument("--auditor-cores", type=int, default=2, help="cores of one auditor machine")
    g.add_argument("--replay-rate", type=int, default=383_000, help="events replayed per second on one core (measured)")
    g.add_argument("--top-interval", type=float, default=60.0, help="seconds between top-log rounds")
    g.add_argument("--horizon-days", type=float, default=365.0, help="top-log age for its size")
    g.add_argument("--audit-growth", type=float, default=0.10, help="fraction of each log appended since the last audit")
    g.add_argument("--bytes-per-event", type=int, default=450, help="bytes of one log line (tiny ledger: 444-461)")
    g.add_argument("--consistency-ms", type=float, default=0.40, help="one consistency proof (measured, library)")
    s = ap.add_argument_group("scaled-down simulation")
    s.add_argument("--sim-shards", type=int, default=8, help="shards in the simulation")
    s.add_argument("--sim-subjects", type=int, default=400, help="subject ids in the simulation")
    s.add_argument("--sim-rounds", type=int, default=4, help="top-log rounds in the simulation (>= 2)")
    s.add_argument("--seed", type=int, default=1, help="random seed of the simulation")
    ap.add_argument("--self-test", action="store_true", help="also run the exhaustive and tamper checks")
    ap.add_argument("--verbose", action="store_true", help="print every check")
    a = ap.parse_args()
    if a.shards < 1 or a.patients < 1 or a.events_per_patient < 1 or a.sim_shards < 1 or a.sim_rounds < 2 or a.sim_subjects < 2:
        ap.error("shards, patients and events per patient must be >= 1, sim rounds and subjects >= 2")
    if a.patients * a.events_per_patient < 2 * a.shards:
        ap.error("need at least two events per shard")

    tally = Tally(a.verbose)
    if a.self_test:
        self_test(tally, a)
    simulate(a, tally)
    costs(a)
    print("%d checks passed, %d failed" % (tally.passed, tally.failed))
    return 0 if tally.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
