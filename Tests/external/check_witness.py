#!/usr/bin/env python3
"""Two consent-witness servers and consentctl, as separate processes over real HTTP: the
witness keys, checkpoint --witness-url, the cosignatures in exports and proofs, the verifiers'
--witness/--quorum, a fork that both witnesses refuse, and each add-checkpoint status code
(C2SP tlog-witness) answered to raw HTTP requests.

Usage: check_witness.py PATH/TO/consentctl PATH/TO/consent-witness. Ends with 'N passed, M failed'.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from tally import check, finish

consentctl, witness_binary = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
work = tempfile.mkdtemp(prefix="consent-witness-check-")
ENV = dict(os.environ, CONSENTCTL_PASSPHRASE="witness check passphrase", CONSENT_WITNESS_PASSPHRASE="witness check passphrase")


def ctl(*args, ledger=None):
    command = [consentctl] + (["--ledger", ledger] if ledger else []) + list(args)
    return subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    request = urllib.request.Request("http://127.0.0.1:%d/add-checkpoint" % port, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def wait_until_up(port):
    for _ in range(200):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=1):
                return True
        except OSError:
            time.sleep(0.05)
    return False


ledger = os.path.join(work, "ledger")
result = ctl("init", "--name", "witness-check.example/ledger", "--kdf", "interactive", ledger=ledger)
check("init a ledger with an encrypted key", result.returncode == 0, result.stderr)
ctl("give", "--subject", "alice", "--feature", "timeline", "--consent", "required", ledger=ledger)
ledger_key = ctl("key", "show", ledger=ledger).stdout.strip()

witnesses = []
servers = []
try:
    for name in ("a", "b"):
        key_file = os.path.join(work, "witness-%s.key" % name)
        made = ctl("witness", "keygen", "--name", "witness.example/%s" % name, "--key", key_file)
        check("witness keygen %s prints a type-0x04 key" % name, made.returncode == 0 and made.stdout.startswith("witness.example/%s+" % name), made.stderr)
        shown = ctl("witness", "show", "--name", "witness.example/%s" % name, "--key", key_file)
        check("witness show %s prints the same key without a passphrase" % name, shown.stdout == made.stdout and shown.returncode == 0, shown.stderr)
        check("the witness key file is private (0600)", os.stat(key_file).st_mode & 0o777 == 0o600)
        port = free_port()
        server = subprocess.Popen([witness_binary, "serve", "--key", key_file, "--name", "witness.example/%s" % name, "--log", ledger_key,
                                   "--state", os.path.join(work, "state-%s" % name), "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        servers.append(server)
        check("consent-witness %s answers" % name, wait_until_up(port))
        witnesses.append((made.stdout.strip(), "http://127.0.0.1:%d" % port, port))

    def witness_args(selection=witnesses):
        args = []
        for key, url, _ in selection:
            args += ["--witness-url", url, "--witness", key]
        return args

    def quorum_args(k):
        args = []
        for key, _, _ in witnesses:
            args += ["--witness", key]
        return args + ["--quorum", str(k)]

    done = ctl("checkpoint", *witness_args(), ledger=ledger)
    check("checkpoint --witness-url: both witnesses cosign", done.returncode == 0 and done.stdout.count("\n\u2014 witness.example/") == 2, done.stderr + done.stdout)
    old_checkpoint = os.path.join(work, "old.checkpoint")
    open(old_checkpoint, "w").write(done.stdout)
    again = ctl("checkpoint", ledger=ledger)
    check("checkpoint without witnesses prints the recorded cosignatures", again.stdout == done.stdout, again.stdout)

    export = os.path.join(work, "alice.json")
    ctl("export", "--subject", "alice", "--out", export, ledger=ledger)
    verified = ctl("verify-export", export, "--key", ledger_key, *quorum_args(2))
    check("verify-export --quorum 2 accepts the witnessed export", verified.returncode == 0, verified.stderr)
    proof = os.path.join(work, "alice-state.json")
    ctl("prove-state", "--subject", "alice", "--out", proof, ledger=ledger)
    verified = ctl("verify-state", proof, "--key", ledger_key, *quorum_args(2))
    check("verify-state --quorum 2 accepts the witnessed state proof", verified.returncode == 0, verified.stderr)

    # The ledger grows; a fork of it (the same key, another history) appears beside it.
    fork = os.path.join(work, "fork")
    shutil.copytree(ledger, fork)
    ctl("give", "--subject", "bob", "--feature", "timeline", "--consent", "required", ledger=ledger)
    unwitnessed = os.path.join(work, "bob.json")
    ctl("export", "--subject", "bob", "--out", unwitnessed, ledger=ledger)
    refused = ctl("verify-export", unwitnessed, "--key", ledger_key, *quorum_args(1))
    check("an export of an unwitnessed checkpoint fails the quorum (exit 2)", refused.returncode == 2 and "cosignatures from 0" in refused.stderr, refused.stderr)
    done = ctl("checkpoint", *witness_args(), ledger=ledger)
    check("the grown ledger is cosigned from the size each witness last saw", done.returncode == 0 and done.stdout.count("\n\u2014 witness.example/") == 2, done.stderr)
    consistency = os.path.join(work, "consistency.json")
    ctl("prove-consistency", "--from", old_checkpoint, "--out", consistency, ledger=ledger)
    verified = ctl("verify-consistency", consistency, "--key", ledger_key, *quorum_args(2))
    check("verify-consistency --quorum 2 accepts the witnessed newer checkpoint", verified.returncode == 0, verified.stderr)

    ctl("give", "--subject", "mallory", "--feature", "timeline", "--consent", "required", ledger=fork)
    forked = ctl("checkpoint", *witness_args(), ledger=fork)
    check("both witnesses refuse the fork: exit 2, named as evidence", forked.returncode == 2 and "witness.example/a did not cosign" in forked.stderr, forked.stderr)
    forked_export = os.path.join(work, "mallory.json")
    ctl("export", "--subject", "mallory", "--out", forked_export, ledger=fork)
    refused = ctl("verify-export", forked_export, "--key", ledger_key, *quorum_args(2))
    check("the fork's export fails the quorum", refused.returncode == 2, refused.stderr)
    accepted = ctl("verify-export", forked_export, "--key", ledger_key)
    check("without --witness the fork's export still verifies (only witnesses tell forks apart)", accepted.returncode == 0, accepted.stderr)

    # A witness that is down: exit 69, the other's cosignature kept.
    down = [(witnesses[0][0], "http://127.0.0.1:%d" % free_port(), 0), witnesses[1]]
    ctl("give", "--subject", "carol", "--feature", "timeline", "--consent", "required", ledger=ledger)
    partial = ctl("checkpoint", *witness_args(down), ledger=ledger)
    check("an unreachable witness exits 69 and names it", partial.returncode == 69 and "witness.example/a" in partial.stderr, "%d %s" % (partial.returncode, partial.stderr))
    check("the other witness's cosignature is recorded", ctl("checkpoint", ledger=ledger).stdout.count("\n\u2014 witness.example/b") == 1)

    # Usage errors, each exit 64 and nothing sent.
    bad = ctl("checkpoint", "--witness-url", witnesses[0][1], ledger=ledger)
    check("--witness-url without its --witness key is a usage error", bad.returncode == 64, bad.stderr)
    bad = ctl("verify-export", export, "--key", ledger_key, "--witness", witnesses[0][0], "--quorum", "2")
    check("a quorum above the number of witnesses is a usage error", bad.returncode == 64, bad.stderr)
    bad = ctl("verify-export", export, "--key", ledger_key, "--witness", ledger_key)
    check("a ledger key given as a witness key is a usage error", bad.returncode == 64 and "witness key" in bad.stderr, bad.stderr)

    # Raw add-checkpoint requests to witness b, status by status.
    port = witnesses[1][2]
    note = ctl("checkpoint", ledger=ledger).stdout
    size = int(note.split("\n")[1])
    status, kind, body = post(port, b"hello")
    check("raw: garbage gets 400", status == 400, str(status))
    status, kind, body = post(port, ("old 1\n\n" + note).encode())
    check("raw: a stale old size gets 409 with text/x.tlog.size", status == 409 and kind == "text/x.tlog.size" and body == b"%d\n" % size, "%s %s %r" % (status, kind, body))
    status, kind, body = post(port, ("old %d\n\n" % size + note).encode())
    check("raw: the latest checkpoint again gets 200 and a cosignature line", status == 200 and body.startswith("\u2014 witness.example/b ".encode()), "%s %r" % (status, body))
    other = os.path.join(work, "other")
    ctl("init", "--name", "witness-check.example/other", "--insecure-plaintext-key", ledger=other)
    status, _, _ = post(port, ("old 0\n\n" + ctl("checkpoint", ledger=other).stdout).encode())
    check("raw: an unknown ledger gets 404", status == 404, str(status))
    text, _, signatures = note.partition("\n\n")
    forged = text + "\n\n" + "\u2014 witness-check.example/ledger " + "A" * 88 + "\n"
    status, _, _ = post(port, ("old %d\n\n" % size + forged).encode())
    check("raw: a checkpoint without a valid ledger signature gets 403", status == 403, str(status))
    ctl("give", "--subject", "dave", "--feature", "timeline", "--consent", "required", ledger=ledger)
    newer = ctl("checkpoint", ledger=ledger).stdout
    status, _, _ = post(port, ("old %d\n%s\n\n" % (size, "A" * 43 + "=") + newer).encode())
    check("raw: a consistency proof that does not verify gets 422", status == 422, str(status))
finally:
    for server in servers:
        server.terminate()
        server.wait(timeout=10)
    shutil.rmtree(work, ignore_errors=True)
finish()
