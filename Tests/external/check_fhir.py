#!/usr/bin/env python3
"""The FHIR R5 export over random consent histories, checked by outside tools and our own.

    python3 Tests/external/check_fhir.py PATH/TO/consentctl [--histories N] [--seed S]

Builds ledgers whose subjects follow random histories (grants with and without evidence,
withdrawals with their cascades, a new catalogue version and re-consents), at least N subjects
in all (default 1,000), exports them with `export --all --format fhir` and per subject as
transactions, and checks every Bundle:

1. against the FHIR R5 models of `fhir.resources` (PyPI);
2. against the core FHIRPath invariants of the resources it holds, evaluated by `fhirpathpy`
   (PyPI) with its R5 model (Bundle bdl-1/2/3a/3d/5/7/8/9/10/11/12, Element ele-1, Extension
   ext-1, Period per-1, DomainResource dom-2/3/4/5);
3. every extension against the StructureDefinitions of Spec/fhir/ (fhir.resources ignores
   profiles, and no FHIR validator can be installed here): known url, closed slices, each
   sub-extension's cardinality and type, required bindings to the ValueSets of Spec/fhir/, no
   value on a complex extension, the context;
4. against the ledger itself: for a sample of subjects, each Consent's decision, provisions and
   consent-state extensions say exactly what `consentctl status --format json` says.

Then it mutates a Bundle in ways each checker must catch, and fails if one does not.
"""
import copy
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

from fhir.resources.bundle import Bundle
from fhirpathpy import evaluate
from fhirpathpy.models import models

from tally import check, finish

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC_FHIR = os.path.join(ROOT, "Spec", "fhir")
CATALOG_V2 = os.path.join(ROOT, "Samples", "catalog-v2.json")
R5 = models["r5"]
FEATURES = {"medication-management": 1, "timeline": 2}
OPTIONAL = ["optional-a", "optional-b"]
BCP47 = re.compile(r"^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$")

# The core invariants, as the R5 specification states them (hasValue() is written exists(),
# which fhirpathpy implements and which is the same for primitives without extensions).
BUNDLE_INVARIANTS = {
    "bdl-1": "total.empty() or (type = 'searchset') or (type = 'history')",
    "bdl-2": "(type = 'searchset') or entry.search.empty()",
    "bdl-3a": "type in ('document' | 'message' | 'searchset' | 'collection') implies entry.all(resource.exists() and request.empty() and response.empty())",
    "bdl-3d": "type in ('transaction' | 'batch') implies entry.all(request.method.exists() and ((request.method in ('POST' | 'PUT' | 'PATCH')) implies resource.exists()))",
    "bdl-5": "entry.all(resource.exists() or request.exists() or response.exists())",
    "bdl-7": "(type = 'history') or entry.where(fullUrl.exists()).select(fullUrl & iif(resource.meta.versionId.exists(), resource.meta.versionId, '')).isDistinct()",
    "bdl-8": "entry.all(fullUrl.exists() implies fullUrl.contains('/_history/').not())",
    "bdl-9": "type = 'document' implies (identifier.system.exists() and identifier.value.exists())",
    "bdl-10": "type = 'document' implies (timestamp.exists())",
    "bdl-11": "type = 'document' implies entry.first().resource.is(Composition)",
    "bdl-12": "type = 'message' implies entry.first().resource.is(MessageHeader)",
}
RESOURCE_INVARIANTS = {
    "dom-2": "contained.contained.empty()",
    "dom-3": "contained.where((('#'+id in (%resource.descendants().reference | %resource.descendants().ofType(canonical) | %resource.descendants().ofType(uri) | %resource.descendants().ofType(url))) or descendants().where(reference = '#').exists() or descendants().where(ofType(canonical) = '#').exists() or descendants().where(ofType(canonical) = '#').exists()).not()).trace('unmatched', id).empty()",
    "dom-4": "contained.meta.versionId.empty() and contained.meta.lastUpdated.empty()",
    "dom-5": "contained.meta.security.empty()",
}
CONSENT_INVARIANTS = {
    "ext-1": "Consent.extension.all(extension.exists() != value.exists())",
    "ext-1 (sub-extensions)": "Consent.extension.extension.all(extension.exists() != value.exists())",
    "per-1": "Consent.period.all(start.exists().not() or end.exists().not() or (start <= end))",
    "per-1 (provisions)": "Consent.provision.period.all(start.exists().not() or end.exists().not() or (start <= end))",
}


def run(binary, ledger, args, stdin=None, expect=0):
    r = subprocess.run([binary, "--ledger", ledger] + args, capture_output=True, text=True, input=stdin, timeout=600)
    if r.returncode != expect:
        raise RuntimeError("consentctl %s exited %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()[:400]))
    return r


# --- random histories --------------------------------------------------------------------------

class Model:
    """What the consent rules allow next for one subject: enough to write mostly valid commands.
    A command the ledger still refuses is dropped (apply names its line), so the model needs
    not be exact."""

    def __init__(self):
        self.given = {f: set() for f in FEATURES}
        self.outdated = {f: False for f in FEATURES}

    def active(self, f):
        return "required" in self.given[f] and not self.outdated[f]

    def next_command(self, rng, subject, day):
        f = rng.choice(sorted(FEATURES))
        command = {"subject": subject, "feature": f if rng.random() < 0.7 else str(FEATURES[f])}
        if not self.active(f):
            if "required" in self.given[f] and rng.random() < 0.3:
                command["revoke"] = "required"
                self.given[f].clear()
            else:
                chosen = ["required"] + [c for c in OPTIONAL if rng.random() < 0.5 and c not in self.given[f]]
                command["give"] = chosen
                self.given[f] |= set(chosen)
                self.outdated[f] = False
        else:
            missing = [c for c in OPTIONAL if c not in self.given[f]]
            roll = rng.random()
            if missing and roll < 0.35:
                pick = rng.sample(missing, rng.randint(1, len(missing)))
                command["give"] = pick
                self.given[f] |= set(pick)
            elif roll < 0.6 and self.given[f] - {"required"}:
                pick = sorted(self.given[f] - {"required"})
                command["revoke"] = rng.choice(pick) if rng.random() < 0.7 else pick
                for c in ([command["revoke"]] if isinstance(command["revoke"], str) else command["revoke"]):
                    self.given[f].discard(c)
            else:
                command["revoke"] = "required"
                self.given[f].clear()
        if "give" in command:
            if rng.random() < 0.3:
                command["channel"] = rng.choice(["app", "portal", "paper", "phone", "clinician"])
            if rng.random() < 0.2:
                command["noticeLanguage"] = rng.choice(["de", "en", "en-GB", "hr"])
            if rng.random() < 0.15:
                command["evidence"] = "scan-%05d" % rng.randint(0, 99999)
            if day is not None and rng.random() < 0.5:
                command["effectiveAt"] = "2026-01-%02dT%02d:%02d:00Z" % (day, rng.randint(0, 23), rng.randint(0, 59))
        if rng.random() < 0.2:
            command["actor"] = rng.choice(["dr.house", "nurse.joy", "front-desk"])
        return command

    def policy_changed(self):
        # The new catalogue changes Timeline's required consent: its grants become outdated.
        if "required" in self.given["timeline"]:
            self.outdated["timeline"] = True


def apply_all(binary, ledger, commands):
    """Appends the commands with `apply`, dropping a command the rules refuse and going on."""
    appended = 0
    while commands:
        text = "\n".join(json.dumps(c) for c in commands) + "\n"
        r = subprocess.run([binary, "--ledger", ledger, "apply", "-"], capture_output=True, text=True, input=text, timeout=600)
        lines = [json.loads(l) for l in r.stdout.split("\n") if l]
        appended += sum(1 for l in lines if l.get("ok"))
        if r.returncode == 0:
            return appended
        failure = lines[-1] if lines and not lines[-1].get("ok") else None
        if r.returncode not in (1, 64) or failure is None or "line" not in failure:
            raise RuntimeError("apply failed: %s %s" % (r.returncode, r.stderr.strip()[:400]))
        commands = commands[failure["line"]:]
    return appended


def build_ledger(binary, folder, rng, subjects, prefix, publish):
    run(binary, folder, ["init", "--name", "clinic.example/fhir-" + prefix])
    models_ = {}
    first = []
    for i in range(subjects):
        sid = "%s-%04d" % (prefix, i) if rng.random() < 0.9 else "%s-José-%d" % (prefix, i)
        models_[sid] = Model()
        # Each subject's first command may carry an effective time in the past.
        first.append(models_[sid].next_command(rng, sid, rng.randint(1, 28)))
    later = []
    for sid, model in models_.items():
        for _ in range(rng.randint(0, 5)):
            later.append(model.next_command(rng, sid, None))
    rng.shuffle(later)
    count = apply_all(binary, folder, first + later)
    if publish:
        run(binary, folder, ["catalog", "publish", CATALOG_V2])
        after = []
        for sid, model in models_.items():
            model.policy_changed()
            for _ in range(rng.randint(0, 3)):
                after.append(model.next_command(rng, sid, None))
        count += apply_all(binary, folder, after)
    return sorted(models_), count


# --- checks ------------------------------------------------------------------------------------

def load_conformance():
    definitions, valuesets = {}, {}
    for path in glob.glob(os.path.join(SPEC_FHIR, "*.json")):
        with open(path, encoding="utf-8") as f:
            resource = json.load(f)
        if resource["resourceType"] == "StructureDefinition":
            definitions[resource["url"]] = resource
        elif resource["resourceType"] == "ValueSet":
            valuesets[resource["url"]] = {(inc["system"], c["code"]) for inc in resource["compose"]["include"] for c in inc["concept"]}
    return definitions, valuesets


def value_of(extension):
    values = [(k[len("value"):], v) for k, v in extension.items() if k.startswith("value")]
    return values


def check_extension(extension, where, definitions, valuesets, systems):
    """Problems of one extension instance against its StructureDefinition."""
    problems = []
    definition = definitions.get(extension.get("url"))
    if definition is None:
        return ["%s: extension %r has no StructureDefinition in Spec/fhir/" % (where, extension.get("url"))]
    if where not in [c["expression"] for c in definition["context"]]:
        problems.append("%s: extension %s is not allowed here (context %s)" % (where, definition["id"], [c["expression"] for c in definition["context"]]))
    elements = {e["id"]: e for e in definition["differential"]["element"]}
    if elements.get("Extension.value[x]", {}).get("max") == "0" and value_of(extension):
        problems.append("%s: complex extension %s has a value" % (where, definition["id"]))
    slices = {e["sliceName"]: e for e in definition["differential"]["element"] if e.get("sliceName")}
    seen = {}
    for sub in extension.get("extension", []):
        name = sub.get("url")
        if name not in slices:
            problems.append("%s: %s has no sub-extension %r (slicing is closed)" % (where, definition["id"], name))
            continue
        seen[name] = seen.get(name, 0) + 1
        if sub.get("extension"):
            problems.append("%s: %s.%s has extensions (max 0)" % (where, definition["id"], name))
        rule = elements["Extension.extension:%s.value[x]" % name]
        values = value_of(sub)
        types = [t["code"] for t in rule["type"]]
        if len(values) != 1:
            problems.append("%s: %s.%s has %d values, wants one of %s" % (where, definition["id"], name, len(values), types))
            continue
        kind, value = values[0]
        if kind[0].lower() + kind[1:] not in types:
            problems.append("%s: %s.%s is value%s, wants %s" % (where, definition["id"], name, kind, types))
        binding = rule.get("binding")
        if binding and binding["strength"] == "required":
            if binding["valueSet"] == "http://hl7.org/fhir/ValueSet/all-languages":
                if not (isinstance(value, str) and BCP47.match(value)):
                    problems.append("%s: %s.%s %r is not a BCP 47 language tag" % (where, definition["id"], name, value))
            else:
                allowed = valuesets.get(binding["valueSet"])
                if allowed is None:
                    problems.append("%s: %s.%s binds to unknown ValueSet %s" % (where, definition["id"], name, binding["valueSet"]))
                elif not any(code == value for _, code in allowed):
                    problems.append("%s: %s.%s %r is not in %s" % (where, definition["id"], name, value, binding["valueSet"]))
    for name, rule in slices.items():
        n = seen.get(name, 0)
        if n < rule["min"] or (rule["max"] != "*" and n > int(rule["max"])):
            problems.append("%s: %s.%s occurs %d times, wants %s..%s" % (where, definition["id"], name, n, rule["min"], rule["max"]))
    return problems


def extension_problems(bundle, definitions, valuesets):
    problems = []
    for entry in bundle.get("entry", []):
        resource = entry.get("resource", {})
        kind = resource.get("resourceType")
        counts = {}
        for extension in resource.get("extension", []):
            counts[extension.get("url")] = counts.get(extension.get("url"), 0) + 1
            problems += check_extension(extension, kind, definitions, valuesets, None)
        for url, n in counts.items():
            definition = definitions.get(url)
            if definition and definition["differential"]["element"][0]["max"] != "*" and n > int(definition["differential"]["element"][0]["max"]):
                problems.append("%s: extension %s occurs %d times, max %s" % (kind, definition["id"], n, definition["differential"]["element"][0]["max"]))
        for path, value in walk(resource):
            if isinstance(value, dict) and "url" in value and path.count("extension") > 2:
                problems.append("%s: an extension nested deeper than the profiles allow at %s" % (kind, path))
    return problems


def walk(value, path=""):
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, path + "." + k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, "%s[%d]" % (path, i))


def element_problems(bundle):
    """ele-1 and the JSON rules of FHIR: no empty values, no nulls."""
    problems = []
    for path, value in walk(bundle):
        if value is None or value == "" or value == [] or value == {}:
            problems.append("ele-1: empty value at %s" % path)
    return problems


def invariant_problems(bundle):
    problems = []
    for name, expression in BUNDLE_INVARIANTS.items():
        if evaluate(bundle, expression, {}, R5) != [True]:
            problems.append("%s failed on the Bundle" % name)
    for i, entry in enumerate(bundle.get("entry", [])):
        resource = entry.get("resource")
        if not resource:
            continue
        for name, expression in RESOURCE_INVARIANTS.items():
            if name == "dom-3":
                continue  # no contained resources: checked below
            if evaluate(resource, expression, {"resource": resource}, R5) not in ([True], []):
                problems.append("%s failed on entry %d (%s)" % (name, i, resource.get("resourceType")))
        if resource.get("contained"):
            problems.append("dom-3: entry %d has contained resources, none expected" % i)
        if resource.get("resourceType") == "Consent":
            for name, expression in CONSENT_INVARIANTS.items():
                if evaluate(resource, expression, {}, R5) != [True]:
                    problems.append("%s failed on entry %d (%s)" % (name, i, resource.get("id")))
            subject = resource.get("subject", {}).get("reference")
            if subject not in {e.get("fullUrl") for e in bundle["entry"] if e.get("resource", {}).get("resourceType") == "Patient"}:
                problems.append("entry %d: Consent.subject %r is not a Patient of the Bundle" % (i, subject))
    return problems


def model_problems(bundle):
    try:
        Bundle.model_validate(bundle)
        return []
    except Exception as e:  # pydantic's ValidationError, or a model error
        return [str(e).split("\n")[0] + " " + str(e)[:300]]


def agreement_problems(binary, ledger, bundle, subject):
    """The subject's Consents say what `status` says."""
    status = json.loads(run(binary, ledger, ["status", "--subject", subject, "--format", "json"]).stdout)
    by_feature = {f["key"]: f for f in status["features"]}
    patient = next(e["fullUrl"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient"
                   and e["resource"]["identifier"][0]["value"] == subject)
    consents = [e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] == "Consent" and e["resource"]["subject"]["reference"] == patient]
    problems = []
    if sorted(c["category"][0]["coding"][0]["code"] for c in consents) != sorted(by_feature):
        problems.append("%s: one Consent per feature expected" % subject)
    for consent in consents:
        key = consent["category"][0]["coding"][0]["code"]
        feature = by_feature[key]
        active = feature["active"]
        if consent["status"] != ("active" if active else "inactive") or consent["decision"] != ("permit" if active else "deny"):
            problems.append("%s/%s: status %s decision %s, but the ledger says active=%s" % (subject, key, consent["status"], consent["decision"], active))
        denied = sorted(p["code"][0]["coding"][0]["code"] for p in consent.get("provision", []))
        expected = sorted("%s/%s" % (key, c["code"]) for c in feature["consents"] if not c["required"] and c["state"] != "given") if active else []
        if denied != expected:
            problems.append("%s/%s: deny exceptions %s, but the ledger withholds %s" % (subject, key, denied, expected))
        states = [{s["url"]: next(iter(v for k, v in s.items() if k.startswith("value"))) for s in e["extension"]}
                  for e in consent["extension"] if e["url"].endswith("/consent-state")]
        for listed, state in zip(feature["consents"], states):
            want = {"consent": listed["code"], "state": listed["state"], "policyVersion": listed["currentVersion"]}
            for member in ("reason", "channel", "noticeLanguage", "effectiveAt"):
                if member in listed:
                    want[member] = listed[member]
            if "version" in listed:
                want["givenPolicyVersion"] = listed["version"]
            got = {k: v for k, v in state.items() if k in want}
            if got != want:
                problems.append("%s/%s: consent-state %s, but the ledger says %s" % (subject, key, got, want))
        if len(states) != len(feature["consents"]):
            problems.append("%s/%s: %d consent-state extensions for %d consents" % (subject, key, len(states), len(feature["consents"])))
    return problems


def checks_of(bundle, definitions, valuesets):
    return {
        "fhir.resources R5 model": model_problems(bundle),
        "FHIRPath invariants": invariant_problems(bundle) + element_problems(bundle),
        "extensions against Spec/fhir/": extension_problems(bundle, definitions, valuesets),
    }


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit("usage: check_fhir.py PATH/TO/consentctl [--histories N] [--seed S]")
    binary = os.path.abspath(args[0])
    histories = int(args[args.index("--histories") + 1]) if "--histories" in args else 1000
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else random.SystemRandom().randrange(1 << 32)
    print("seed %d (rerun with --seed %d)" % (seed, seed))
    rng = random.Random(seed)
    definitions, valuesets = load_conformance()
    check("Spec/fhir/ holds %d StructureDefinitions and %d ValueSets" % (len(definitions), len(valuesets)), len(definitions) >= 2 and len(valuesets) >= 3)
    for path in sorted(glob.glob(os.path.join(SPEC_FHIR, "*.json"))):
        with open(path, encoding="utf-8") as f:
            resource = json.load(f)
        module = __import__("fhir.resources." + resource["resourceType"].lower(), fromlist=[resource["resourceType"]])
        try:
            getattr(module, resource["resourceType"]).model_validate(resource)
            problem = ""
        except Exception as e:
            problem = str(e)[:300]
        check("%s is a valid R5 %s" % (os.path.relpath(path, ROOT), resource["resourceType"]), not problem, problem)
    work = tempfile.mkdtemp(prefix="consent-fhir-")
    try:
        ledgers, per = 4, (histories + 3) // 4
        total_subjects = total_resources = total_commands = 0
        failures = {}
        samples = []
        for n in range(ledgers):
            folder = os.path.join(work, "ledger-%d" % n)
            subjects, commands = build_ledger(binary, folder, rng, per, "p%d" % n, publish=n % 2 == 1)
            total_subjects += len(subjects)
            total_commands += commands
            out = os.path.join(work, "all-%d.fhir.json" % n)
            run(binary, folder, ["export", "--all", "--format", "fhir", "--out", out])
            bundles = [("ledger %d, --all" % n, json.load(open(out, encoding="utf-8")))]
            for subject in rng.sample(subjects, 5):
                path = os.path.join(work, "one.fhir.json")
                run(binary, folder, ["export", "--subject", subject, "--format", "fhir", "--fhir-bundle", "transaction", "--out", path])
                bundles.append(("ledger %d, %s, transaction" % (n, subject), json.load(open(path, encoding="utf-8"))))
            for what, bundle in bundles:
                total_resources += len(bundle["entry"])
                for name, problems in checks_of(bundle, definitions, valuesets).items():
                    failures.setdefault(name, []).extend("%s: %s" % (what, p) for p in problems)
            agreement = []
            for subject in rng.sample(subjects, min(15, len(subjects))):
                agreement += agreement_problems(binary, folder, bundles[0][1], subject)
            failures.setdefault("agreement with consentctl status", []).extend(agreement)
            samples.append(bundles[0][1])
        check("%d random histories (%d commands) in %d ledgers, half with a new catalogue version" % (total_subjects, total_commands, ledgers),
              total_subjects >= histories)
        for name, problems in failures.items():
            check("%s: %d Bundles, %d resources" % (name, ledgers * 6, total_resources), not problems, "; ".join(problems[:5]))

        # Each checker must catch what it is there for.
        # A small collection (the first subjects of a ledger with a new catalogue version), so
        # that each mutation is checked quickly.
        base = dict(samples[1], entry=samples[1]["entry"][:9])
        consent_index = next(i for i, e in enumerate(base["entry"]) if e["resource"]["resourceType"] == "Consent")

        def state_ext(b):
            return next(e for e in b["entry"][consent_index]["resource"]["extension"] if e["url"].endswith("/consent-state"))

        def mutate(change):
            b = copy.deepcopy(base)
            change(b)
            return b

        cases = [
            ("fhir.resources R5 model", "a Consent without status", lambda b: b["entry"][consent_index]["resource"].pop("status")),
            ("fhir.resources R5 model", "an element R5 does not define", lambda b: b["entry"][consent_index]["resource"].__setitem__("colour", "red")),
            ("fhir.resources R5 model", "a date that is not a date", lambda b: b["entry"][consent_index]["resource"].__setitem__("date", "24.11.2026")),
            ("FHIRPath invariants", "a period that ends before it starts (per-1)", lambda b: b["entry"][consent_index]["resource"].__setitem__("period", {"start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"})),
            ("FHIRPath invariants", "two entries with one fullUrl (bdl-7)", lambda b: b["entry"][1].__setitem__("fullUrl", b["entry"][0]["fullUrl"])),
            ("FHIRPath invariants", "a request in a collection (bdl-3a)", lambda b: b["entry"][0].__setitem__("request", {"method": "POST", "url": "Patient"})),
            ("FHIRPath invariants", "an extension with a value and sub-extensions (ext-1)", lambda b: state_ext(b).__setitem__("valueString", "x")),
            ("FHIRPath invariants", "a sub-extension with neither value nor extensions (ext-1)", lambda b: state_ext(b)["extension"].append({"url": "channel"})),
            ("extensions against Spec/fhir/", "an unknown sub-extension", lambda b: state_ext(b)["extension"].append({"url": "colour", "valueCode": "red"})),
            ("extensions against Spec/fhir/", "a state outside its ValueSet", lambda b: next(s for s in state_ext(b)["extension"] if s["url"] == "state").__setitem__("valueCode", "revoked")),
            ("extensions against Spec/fhir/", "a value of the wrong type", lambda b: next(s for s in state_ext(b)["extension"] if s["url"] == "consent").__setitem__("valueString", next(s for s in state_ext(b)["extension"] if s["url"] == "consent").pop("valueCode"))),
            ("extensions against Spec/fhir/", "a missing required sub-extension", lambda b: state_ext(b).__setitem__("extension", [s for s in state_ext(b)["extension"] if s["url"] != "policyVersion"])),
            ("extensions against Spec/fhir/", "an extension with no StructureDefinition", lambda b: b["entry"][consent_index]["resource"]["extension"].append({"url": "https://example.org/x", "valueString": "y"})),
            ("extensions against Spec/fhir/", "a second checkpoint", lambda b: b["entry"][consent_index]["resource"]["extension"].append(copy.deepcopy(b["entry"][consent_index]["resource"]["extension"][0]))),
        ]
        for checker, what, change in cases:
            caught = checks_of(mutate(change), definitions, valuesets)[checker]
            check("%s catches %s" % (checker, what), bool(caught))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
