#!/usr/bin/env python3
"""Every command's JSON output against its JSON Schema in Spec/schemas/.

    python3 Tests/external/check_schemas.py PATH/TO/consentctl

Plays a scenario on a fresh ledger that runs every command of the binary (the command tree comes
from the binary itself, so a new command without a schema fails this check) with --format json,
in its success forms and its failure forms (each exit code's error object), and validates each
output with jsonschema (Draft 2020-12). Then it checks that the schemas are not vacuous: mutated
outputs (a state outside the vocabulary, a display string where a number belongs, a missing
member, a local time) must be refused.
"""
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import nacl.signing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Spec", "vectors"))
from verify_key_file import open_key_file  # noqa: E402  (the independent reader of key files)
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from tally import check, finish

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCHEMAS = os.path.join(ROOT, "Spec", "schemas")
CATALOG_V2 = os.path.join(ROOT, "Samples", "catalog-v2.json")

# Commands that print no JSON, and why.
NO_JSON = {"completion": "prints a shell completion script"}
# Commands that succeed only against PostgreSQL: here their refusal on a folder is validated, and
# PostgresCLITests checks their success output against the schema.
POSTGRES_ONLY = {"key move-out"}



def load_schemas():
    resources, validators = [], {}
    for name in sorted(os.listdir(SCHEMAS)):
        if not name.endswith(".schema.json"):
            continue
        with open(os.path.join(SCHEMAS, name), encoding="utf-8") as f:
            schema = json.load(f)
        Draft202012Validator.check_schema(schema)
        resources.append((schema["$id"], Resource.from_contents(schema)))
        validators[name[: -len(".schema.json")]] = schema
    registry = Registry().with_resources(resources)
    return {name: Draft202012Validator(schema, registry=registry) for name, schema in validators.items()}


def leaf_commands(binary):
    tree = json.loads(subprocess.run([binary, "--experimental-dump-help"], capture_output=True, text=True, check=True).stdout)["command"]
    out = []

    def walk(node, path):
        subs = [s for s in node.get("subcommands", []) if s["commandName"] != "help"]
        if not subs and path:
            out.append(" ".join(path))
        for s in subs:
            walk(s, path + [s["commandName"]])

    walk(tree, [])
    return out


PASSPHRASE = "a passphrase for the schema check"


class Scenario:
    def __init__(self, binary, validators, work):
        self.binary, self.validators, self.work = binary, validators, work
        self.ledger = os.path.join(work, "ledger")
        self.covered = set()
        self.error_kinds = set()
        self.samples = {}
        self.outputs = []

    def run(self, args, expect_rc=0, ledger=True, stdin=None, env_extra=None):
        argv = [self.binary] + (["--ledger", self.ledger] if ledger else []) + args
        env = dict(os.environ)
        for name in ("CONSENTCTL_STORE", "CONSENTCTL_LEDGER", "CONSENTCTL_TZ", "CONSENTCTL_NEW_PASSPHRASE"):
            env.pop(name, None)
        env.update(env_extra or {})
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.work, env=env, input=stdin, timeout=120)
        self.outputs.append((" ".join(args), r.stdout + r.stderr))
        if expect_rc is not None and r.returncode != expect_rc:
            check("consentctl %s exits %d" % (" ".join(args), expect_rc), False, "got %d: %s" % (r.returncode, r.stderr.strip()[:300]))
        return r

    def validate(self, schema, value, what):
        errors = sorted(self.validators[schema].iter_errors(value), key=lambda e: list(e.absolute_path))
        check("%s matches %s.schema.json" % (what, schema), not errors,
              "; ".join("%s: %s" % ("/".join(map(str, e.absolute_path)), e.message[:200]) for e in errors[:3]))
        return not errors

    def json_command(self, command, args, expect_rc=0, schema=None, lines=False, ledger=True, stdin=None, env_extra=None):
        """Runs `consentctl COMMAND ARGS` and validates its standard output (one JSON value, or
        JSON lines) against COMMAND's schema, or error.schema.json when it fails."""
        r = self.run(command.split() + args, expect_rc, ledger=ledger, stdin=stdin, env_extra=env_extra)
        texts = [l for l in r.stdout.split("\n") if l] if lines else [r.stdout]
        check("consentctl %s %s prints JSON" % (command, " ".join(args)), bool(texts) and all(t.strip() for t in texts), repr(r.stdout[:200]))
        values = []
        for text in texts:
            try:
                value = json.loads(text)
            except ValueError as e:
                check("consentctl %s prints JSON" % command, False, "%s: %r" % (e, text[:200]))
                continue
            failure = isinstance(value, dict) and value.get("ok") is False
            name = "error" if failure else (schema or command.replace(" ", "-"))
            if self.validate(name, value, "consentctl %s %s" % (command, " ".join(args))):
                if failure:
                    self.error_kinds.add(value["kind"])
                else:
                    self.covered.add(command)
                    self.samples.setdefault(name, value)
            values.append(value)
        return values

    def play(self):
        j = ["--format", "json"]
        self.json_command("init", ["--insecure-plaintext-key", "--name", "clinic.example/schemas"] + j)
        self.json_command("init", ["--insecure-plaintext-key"] + j, expect_rc=73)  # already-exists
        with open(os.path.join(self.ledger, "secret.key")) as f:
            self.seed = bytes.fromhex(f.read().strip())
        key = self.run(["key", "show"]).stdout.strip()
        self.json_command("key show", j)
        refused = self.json_command("key move-out", ["--insecure-plaintext-key"] + j, expect_rc=64)
        if refused and refused[0].get("kind") == "usage":
            self.samples["key-move-out-refused"] = refused[0]
        # The plaintext key sealed under a passphrase; later writes unlock it from the environment.
        self.json_command("key passphrase", j, env_extra={"CONSENTCTL_NEW_PASSPHRASE": PASSPHRASE})
        self.json_command("give", ["--subject", "zoe", "--feature", "timeline", "--consent", "required"] + j, expect_rc=77)  # key-locked
        os.environ["CONSENTCTL_PASSPHRASE"] = PASSPHRASE
        self.json_command("catalog show", j)
        self.json_command("give", ["--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a"] + j)
        self.json_command("give", ["--subject", "alice", "--feature", "timeline", "--consent", "required"] + j)  # nothing to do
        self.json_command("give", ["--subject", "bob", "--feature", "1", "--consent", "required", "--effective-at", "2026-01-02T10:00:00Z",
                                   "--channel", "paper", "--notice-language", "de-AT", "--evidence", "scan-0042"] + j)
        self.json_command("give", ["--subject", "carol", "--feature", "timeline", "--consent", "required", "--consent", "optional-b"] + j)
        self.json_command("give", ["--subject", "erin", "--feature", "timeline", "--consent", "optional-a"] + j, expect_rc=1)  # R2
        self.json_command("give", ["--subject", "alice", "--feature", "nope", "--consent", "required"] + j, expect_rc=64)  # not-found
        self.json_command("revoke", ["--subject", "alice", "--feature", "timeline", "--consent", "required"] + j)  # with its cascade
        self.json_command("revoke", ["--subject", "alcie", "--feature", "timeline", "--consent", "required"] + j)  # unknown: a note
        self.json_command("revoke", ["--subject", "alcie", "--feature", "timeline", "--consent", "required", "--must-exist"] + j, expect_rc=64)
        old = os.path.join(self.work, "old.checkpoint")
        with open(old, "w") as f:
            f.write(self.run(["checkpoint"]).stdout)
        self.json_command("catalog publish", [CATALOG_V2, "--dry-run"] + j)
        self.json_command("catalog publish", [CATALOG_V2] + j)
        self.json_command("catalog publish", [CATALOG_V2] + j)  # the catalogue in force: a no-op
        self.json_command("give", ["--subject", "carol", "--feature", "timeline", "--consent", "required"] + j)  # re-consent
        for subject in ("alice", "bob", "carol", "zed"):
            self.json_command("status", ["--subject", subject] + j)
            self.json_command("history", ["--subject", subject] + j)
        self.json_command("status", ["--subject", "alice", "--at", "2026-01-01"] + j)
        # As of the end of today (UTC): --at refuses a time more than a day ahead.
        self.json_command("history", ["--subject", "carol", "--at", time.strftime("%Y-%m-%d", time.gmtime())] + j)
        self.json_command("status", ["--subject", "zed", "--must-exist"] + j, expect_rc=64)
        self.json_command("subjects list", j)
        self.json_command("subjects list", ["--prefix", "c"] + j)
        self.json_command("report", ["--format", "json"])
        self.json_command("report", ["--format", "json", "--subject", "carol", "--feature", "timeline", "--from", "2026-01-01",
                                     "--to", "2099-01-01", "--actor", "self", "--at", "2099-01-01"])
        self.json_command("verify", j)
        self.json_command("clock show", j)
        self.json_command("clock correct", j)  # nothing to correct: the ledger's time is this clock's
        self.json_command("checkpoint", j)
        self.json_command("witness keygen", ["--name", "witness.example/schemas", "--key", "witness.key"] + j, ledger=False)
        witness = self.json_command("witness show", ["--name", "witness.example/schemas", "--key", "witness.key"] + j, ledger=False)
        witness_key = witness[0]["witnessKey"] if witness else "none"
        # A witness that does not answer (nothing listens on port 1): unavailable, exit 69.
        self.json_command("checkpoint", ["--witness-url", "http://127.0.0.1:1", "--witness", witness_key, "--witness-timeout", "2"] + j, expect_rc=69)
        for args in (["--subject", "alice", "--out", "alice.json"], ["--all", "--out", "all.json"],
                     ["--subject", "alice", "--format", "fhir", "--fhir-bundle", "transaction", "--out", "alice.fhir.json"],
                     ["--subject", "bob", "--format", "html", "--lang", "en", "--out", "bob.html"]):
            self.json_command("export", args + ["--json"])
        self.json_command("export", ["--subject", "zed", "--out", "zed.json", "--json"], expect_rc=64)
        self.json_command("verify-export", ["alice.json", "--key", key] + j)
        self.json_command("verify-export", ["all.json", "--key", key] + j)
        self.json_command("verify-export", ["alice.fhir.json", "--key", key] + j, expect_rc=64)  # the wrong kind of file
        self.json_command("prove-consistency", ["--from", old, "--out", "grew.json"] + j)
        self.json_command("verify-consistency", ["grew.json", "--key", key] + j)
        self.json_command("prove-state", ["--subject", "carol", "--out", "carol.state.json"] + j)
        self.json_command("verify-state", ["carol.state.json", "--key", key] + j)
        commands = "\n".join(json.dumps(c) for c in [
            {"subject": "dan", "feature": "timeline", "give": ["required", "optional-a"]},
            {"subject": "dan", "feature": "timeline", "revoke": "required", "actor": "dr.house"},
            {"subject": "dan", "feature": "timeline", "give": ["optional-b"]},  # R2: refused, names line 3
        ]) + "\n"
        values = self.json_command("apply", ["-"], expect_rc=1, lines=True, stdin=commands)
        check("apply: the failing command's error names its line", bool(values) and values[-1].get("line") == 3, repr(values[-1:]))
        self.json_command("migrate", ["--to", os.path.join(self.work, "copy")] + j)
        self.json_command("erase", ["--subject", "dan", "--reason", "request 1", "--actor", "dpo"] + j)
        self.json_command("erase", ["--subject", "dan"] + j, expect_rc=64)  # already erased: unknown
        self.json_command("report", ["--format", "json", "--subject", "dan"], expect_rc=None)
        # A key rotation (the passphrase of the environment seals the new key), then the keys.
        self.json_command("key rotate", ["--actor", "security"] + j)
        with open(os.path.join(self.ledger, "secret.key"), "rb") as f:
            self.rotated_seed = open_key_file(f.read(), PASSPHRASE.encode())[0]
        self.json_command("key show", ["--all"] + j)
        self.json_command("key revoke", ["--compromised-since", "3", "--actor", "security"] + j)
        self.json_command("key revoke", ["--compromised-since", "3"] + j, expect_rc=64)  # revoked before
        self.json_command("verify", j)
        # A ledger whose signature no longer verifies: the integrity error names the entry.
        shutil.copytree(self.ledger, os.path.join(self.work, "damaged"))
        path = os.path.join(self.work, "damaged", "ledger.jsonl")
        data = bytearray(open(path, "rb").read())
        data[data.index(b'"actor":"self"') + 10] ^= 0x01
        open(path, "wb").write(bytes(data))
        values = self.json_command("verify", ["--ledger", os.path.join(self.work, "damaged")] + j, expect_rc=2, ledger=False)
        check("an integrity error names the log entry", bool(values) and isinstance(values[0].get("entry"), int), repr(values[:1]))
        self.json_command("status", ["--ledger", os.path.join(self.work, "nowhere"), "--subject", "alice"] + j, expect_rc=66, ledger=False)


def mutations(samples):
    """(description, schema, mutated value): each must be refused."""
    out = []

    def mutate(schema, what, change):
        if schema in samples:
            value = copy.deepcopy(samples[schema])
            change(value)
            out.append((what, schema, value))

    mutate("status", "a state outside the vocabulary", lambda v: v["features"][0]["consents"][0].__setitem__("state", "revoked"))
    mutate("status", "a withheld consent without its reason", lambda v: next(c for f in v["features"] for c in f["consents"] if c["state"] == "withheld").pop("reason"))
    mutate("status", "a local time instead of UTC", lambda v: v.__setitem__("asOf", "24.11.2026 10:00"))
    mutate("history", "a cascade without its cause", lambda v: v["events"].append({"seq": 9, "at": "2026-11-24T10:00:00.000Z", "actor": "self", "type": "cascade-withdrawn", "feature": "timeline", "featureCode": 2, "consent": "optional-a"}))
    mutate("report", "a share as a display string", lambda v: v["withdrawal"][0].__setitem__("cascadeWithdrawals", "33.3%"))
    mutate("report", "a policy change as a display string", lambda v: v["events"].append({"seq": 9, "at": "2026-11-24T10:00:00.000Z", "actor": "dpo", "type": "policy-change", "catalogue": "0" * 64, "changes": "timeline/required 1.0\u21922.0"}))
    mutate("report", "the old name of the event list", lambda v: v.__setitem__("entries", v.pop("events")))
    mutate("give", "an event type of the format instead of the vocabulary", lambda v: v["appended"][0].__setitem__("type", "consent.given"))
    mutate("verify", "a missing member", lambda v: v.pop("head"))
    mutate("key-show", "a hex key instead of the verifier key", lambda v: v.__setitem__("verifierKey", "ab" * 32))
    mutate("catalog-show", "a version with a trailing space", lambda v: v["features"][0]["consents"][0].__setitem__("version", "2.0 "))
    mutate("catalog-show", "names as a string instead of one per language", lambda v: v["features"][0].__setitem__("name", "Timeline"))
    return out


def secret_forms(seed):
    """Every spelling of the secret key a leak could take: the seed and libsodium's 64-byte
    secret key (seed and public key), raw, in hex (either case) and in base64."""
    public = nacl.signing.SigningKey(seed).verify_key.encode()
    forms = []
    for secret in (seed, seed + public):
        forms += [secret, secret.hex().encode(), secret.hex().upper().encode(), base64.b64encode(secret), base64.b64encode(secret).rstrip(b"=")]
    return forms


def text_outputs(scenario):
    """The text, CSV and HTML forms and the files of the commands whose JSON was checked."""
    out = os.path.join(scenario.work, "out")
    os.makedirs(out, exist_ok=True)
    for args in (["status", "--subject", "alice"], ["history", "--subject", "bob"], ["subjects", "list"], ["report"],
                 ["report", "--format", "csv", "--out", os.path.join(out, "r.csv")], ["report", "--format", "html", "--out", os.path.join(out, "r.html")],
                 ["export", "--subject", "bob", "--out", os.path.join(out, "bob.json")], ["export", "--all", "--out", os.path.join(out, "all.json")],
                 ["export", "--subject", "bob", "--format", "fhir", "--out", os.path.join(out, "bob.fhir.json")],
                 ["export", "--subject", "bob", "--format", "html", "--out", os.path.join(out, "bob.html")],
                 ["prove-state", "--subject", "bob", "--out", os.path.join(out, "bob.proof")], ["verify"], ["key", "show"], ["catalog", "show"],
                 ["checkpoint"], ["give", "--subject", "x", "--feature", "nope", "--consent", "required"], ["completion", "bash"]):
        scenario.run(args, expect_rc=None)


def check_no_secret(scenario):
    # The genesis key and the key a rotation put in its place.
    forms = secret_forms(scenario.seed) + secret_forms(scenario.rotated_seed)
    leaked = [what for what, text in scenario.outputs if any(f.decode("latin-1") in text for f in forms)]
    check("no command's output holds the secret key (%d outputs: standard output and error of every run)" % len(scenario.outputs), not leaked, leaked[:3])
    files = []
    for root, _, names in os.walk(scenario.work):
        for name in names:
            path = os.path.join(root, name)
            if path == os.path.join(scenario.ledger, "secret.key"):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if any(form in data for form in forms):
                files.append(os.path.relpath(path, scenario.work))
    count = sum(len(n) for _, _, n in os.walk(scenario.work)) - 1
    check("no file written holds the secret key (%d files: exports, reports, FHIR, proofs, the ledger's own files)" % count, not files, files)


def main():
    os.environ.pop("CONSENTCTL_PASSPHRASE", None)
    if len(sys.argv) != 2:
        sys.exit("usage: check_schemas.py PATH/TO/consentctl")
    binary = os.path.abspath(sys.argv[1])
    validators = load_schemas()
    check("every schema in Spec/schemas/ is a valid Draft 2020-12 schema (%d)" % len(validators), True)
    work = tempfile.mkdtemp(prefix="consent-schemas-")
    try:
        scenario = Scenario(binary, validators, work)
        scenario.play()
        text_outputs(scenario)
        check_no_secret(scenario)
        leaves = leaf_commands(binary)
        for command in leaves:
            if command in NO_JSON:
                check("%s: no JSON (%s)" % (command, NO_JSON[command]), True)
                continue
            check("%s has a schema, %s.schema.json" % (command, command.replace(" ", "-")), command.replace(" ", "-") in validators or command in ("give", "revoke"))
            if command in POSTGRES_ONLY:
                check("%s (PostgreSQL only): its refusal on a folder was validated" % command, "key-move-out-refused" in scenario.samples or command in scenario.covered)
                continue
            check("%s's JSON output was validated" % command, command in scenario.covered)
        wanted = {"rule-violation", "integrity", "usage", "not-found", "already-exists", "unavailable"}
        check("error objects of every kind seen were validated: %s" % ", ".join(sorted(scenario.error_kinds)), wanted <= scenario.error_kinds,
              "missing %s" % sorted(wanted - scenario.error_kinds))
        unused = set(validators) - {c.replace(" ", "-") for c in scenario.covered} - {"common", "error"} - {c.replace(" ", "-") for c in POSTGRES_ONLY}
        check("no schema without a command", not unused, ", ".join(sorted(unused)))
        for what, schema, value in mutations(scenario.samples):
            refused = any(True for _ in validators[schema].iter_errors(value))
            check("%s.schema.json refuses %s" % (schema, what), refused)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
