#!/usr/bin/env python3
"""Checks the ledger's clock rules end to end, through consentctl and the independent verifiers
(Spec/ledger-format.md, Clock corrections):

- a ledger whose newest event is stamped 2999 (Spec/vectors/clock-ledger cut after bob's grant,
  seq 6) refuses writes with exit code 4 and changes no byte; `clock show` exits 4; `verify`
  passes with a warning;
- `clock correct` appends one clock.corrected event; writes go on; `verify` lists it;
- the bundles and the state proof consentctl then writes verify with Spec/vectors/verify_export.py
  and verify_state.py, as of a time after the correction in effective times.

Usage: check_clock.py PATH/TO/consentctl. Ends with 'N passed, M failed'; exit 0 only if M == 0.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from tally import check, finish

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "Spec", "vectors")
CONSENTCTL = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp(prefix="consentledger-clock-")
ledger = os.path.join(work, "ledger")


def run(*args):
    return subprocess.run([CONSENTCTL, "--ledger", ledger, *args], capture_output=True, text=True)


def folder_bytes():
    return {name: open(os.path.join(ledger, name), "rb").read() for name in sorted(os.listdir(ledger))
            if os.path.isfile(os.path.join(ledger, name)) and name != "lock"}


try:
    shutil.copytree(os.path.join(VECTORS, "clock-ledger"), ledger)
    os.chmod(os.path.join(ledger, "secret.key"), 0o600)
    # Cut the log after bob's grant stamped 2999 (seq 6) and its head line: a ledger whose clock
    # went wrong and was never corrected.
    lines = open(os.path.join(ledger, "ledger.jsonl"), "rb").read().split(b"\n")[:-1]
    events = 0
    for i, line in enumerate(lines):
        if line.startswith(b'{"body":'):
            events += 1
        elif events == 7:
            cut = lines[:i + 1]
            break
    open(os.path.join(ledger, "ledger.jsonl"), "wb").write(b"".join(l + b"\n" for l in cut))
    check("the vector cut after seq 6 (stamped 2999) verifies, with a warning that its clock went wrong",
          run("verify").returncode == 0 and "the ledger's clock went wrong" in run("verify").stderr, run("verify").stderr)
    before = folder_bytes()
    give = run("give", "--subject", "carol", "--feature", "timeline", "--consent", "required")
    check("give on it: exit 4, naming both times and `consentctl clock correct`",
          give.returncode == 4 and "2999-01-01T00:00:00.000Z" in give.stderr and "consentctl clock correct" in give.stderr, "%d %s" % (give.returncode, give.stderr))
    erase = run("erase", "--subject", "alice", "--format", "json")
    check("erase on it: exit 4, kind clock-ahead in JSON", erase.returncode == 4 and json.loads(erase.stdout)["kind"] == "clock-ahead", erase.stdout)
    check("the refused writes changed no byte of the ledger", folder_bytes() == before)
    show = run("clock", "show", "--format", "json")
    status = json.loads(show.stdout)
    check("clock show: exit 4, writesRefused, the ledger's time 2999-01-01T00:00:00.000Z, no correction",
          show.returncode == 4 and status["writesRefused"] and status["ledgerTime"] == "2999-01-01T00:00:00.000Z" and status["corrections"] == [], show.stdout)
    skew = run("--clock-skew", "400000000", "clock", "show")
    check("clock show with --clock-skew of more than a year: refused as a usage error (64)", skew.returncode == 64, "%d %s" % (skew.returncode, skew.stderr))
    dry = run("clock", "correct", "--dry-run", "--format", "json")
    planned = json.loads(dry.stdout) if dry.returncode == 0 else {}
    check("clock correct --dry-run: exit 0, would re-date seq 6 alone, nothing written",
          dry.returncode == 0 and planned.get("dryRun") is True and planned.get("appended") is False
          and planned.get("redated") == {"first": 6, "last": 6, "count": 1} and folder_bytes() == before, dry.stdout + dry.stderr)
    correct = run("clock", "correct", "--reason", "NTP server served 2999", "--actor", "ops", "--format", "json")
    corrected = json.loads(correct.stdout) if correct.returncode == 0 else {}
    check("clock correct: exit 0, appended at seq 7, correcting 2999-01-01T00:00:00.000Z",
          correct.returncode == 0 and corrected.get("appended") and corrected.get("seq") == 7 and corrected.get("correctedFrom") == "2999-01-01T00:00:00.000Z", correct.stdout + correct.stderr)
    again = run("clock", "correct", "--format", "json")
    check("clock correct again: nothing to correct, exit 0, nothing appended", again.returncode == 0 and json.loads(again.stdout)["appended"] is False, again.stdout)
    give = run("give", "--subject", "bob", "--feature", "timeline", "--consent", "optional-a")
    revoke = run("revoke", "--subject", "bob", "--feature", "timeline", "--consent", "required")
    check("writes go on after the correction (bob gives optional-a, then withdraws required)", give.returncode == 0 and revoke.returncode == 0, give.stderr + revoke.stderr)
    verify = run("verify", "--format", "json")
    report = json.loads(verify.stdout)
    check("verify: passes, no warning, lists the correction (seq 7, from 2999 back to its time)",
          verify.returncode == 0 and report["clockAhead"] is None and [c["seq"] for c in report["clockCorrections"]] == [7]
          and report["clockCorrections"][0]["correctedFrom"] == "2999-01-01T00:00:00.000Z" and verify.stderr == "", verify.stdout + verify.stderr)
    key = run("key", "show").stdout.splitlines()[0]
    for scope, args in (("bob's export", ("export", "--subject", "bob")), ("the whole ledger's export", ("export", "--all"))):
        out = os.path.join(work, scope.replace(" ", "-").replace("'", "") + ".json")
        made = run(*args, "--out", out)
        p = subprocess.run([sys.executable, os.path.join(VECTORS, "verify_export.py"), out, key], capture_output=True, text=True)
        check("%s, with the correction among its ledger events, verifies with verify_export.py" % scope,
              made.returncode == 0 and p.returncode == 0, made.stderr + p.stdout[-400:])
    # As of the correction's own time, bob's grant stamped 2999 counts (its effective time is the
    # correction's), and his later events do not.
    corrected_at = corrected.get("at", "")
    out = os.path.join(work, "bob.state.json")
    made = run("prove-state", "--subject", "bob", "--at", corrected_at, "--out", out, "--format", "json")
    check("prove-state counts one catalogue version (the correction in the ledger stream is none)",
          made.returncode == 0 and json.loads(made.stdout).get("catalogueVersions") == 1, made.stdout + made.stderr)
    p = subprocess.run([sys.executable, os.path.join(VECTORS, "verify_state.py"), out, "--key", key], capture_output=True, text=True)
    check("prove-state of bob as of the correction's time: verify_state.py replays his 2999 grant and stops there",
          made.returncode == 0 and p.returncode == 0 and "timeline (active): given required" in p.stdout, made.stderr + p.stdout[-600:])
    status = run("status", "--subject", "bob", "--at", corrected_at, "--format", "json")
    given = [(f["key"], c["code"]) for f in json.loads(status.stdout)["features"] for c in f["consents"] if c["state"] == "given"] if status.returncode == 0 else None
    check("status of bob as of the correction's time: timeline's required given", given == [("timeline", "required")], status.stdout + status.stderr)
finally:
    shutil.rmtree(work, ignore_errors=True)
finish()
