#!/usr/bin/env python3
"""The FHIR R5 export over random consent histories, checked by outside tools and by our own.

    python3 Tests/external/check_fhir.py PATH/TO/consentctl [--histories N] [--seed S]
                                         [--ledgers K] [--edge-cases] [--keep]

Builds K ledgers (default 6) in temporary folders and drives them through `consentctl apply`
with random histories that keep the consent rules: grants of required and optional consents,
some with evidence (effectiveAt, channel, noticeLanguage, evidence), withdrawals of optional
and required consents (with their cascades), re-consents, no-op repeats, and new catalogue
versions published mid-way (Samples/catalog-v2.json; a version that outdates optional
consents; a catalogue of its own with a feature of two required consents and one of none
optional). At least N subjects in all (default 1,000), each with a history of its own. The
random source is seeded; the seed is printed first, and --seed S replays a run. Needs
fhir.resources 8.x and fhirpathpy (python3 -m pip install fhir.resources fhirpathpy).

Each ledger is exported once with `export --all --format fhir`; a few subjects are exported on
their own as transactions, and one ledger as a whole as a transaction too. Every Bundle is checked:

1. fhir.resources R5 model: `Bundle.model_validate` of fhir.resources 8.x (PyPI), the pydantic
   models generated from the R5 StructureDefinitions (element names, cardinality, primitive
   formats);
2. FHIR JSON rules: no null, no empty string, array or object;
3. FHIRPath invariants: the core R5 invariants of every element they apply to, evaluated by
   fhirpathpy (PyPI) with its R5 model: Bundle bdl-1/2/3a/3b/3c/3d/7/9..18 on the Bundle,
   bdl-5/8 on each entry, dom-2..5 on each resource, ele-1 on every element, ext-1 on every
   Extension, ref-1/2 on every Reference, per-1 on every Period, pat-1 on every Patient.contact;
   the warnings ident-1, cod-1 and dom-6 are counted, not failed. fhirpathpy lacks hasValue(),
   lowBoundary() and highBoundary(); they are supplied here;
4. extensions against the StructureDefinitions of Spec/fhir/ (fhir.resources ignores profiles,
   and no FHIR validator runs here): a known url, the context, the extension's cardinality, no
   value on a complex extension, closed slicing, each slice's cardinality, value[x] type and
   lexical form, fixed values, required bindings to the ValueSets of Spec/fhir/ (BCP 47 for
   all-languages), and the StructureDefinition's own FHIRPath constraints;
5. R5 required bindings of the core elements used (Bundle.type, request.method, Consent.status,
   Consent.decision, ...), and every consentledger.example system resolving to a CodeSystem or
   NamingSystem of Spec/fhir/;
6. references: every urn:uuid reference names an entry of the same Bundle, of the right type;
7. transaction requests: a conditional create per Patient and a conditional update per Consent
   whose search, decoded and parsed by the FHIR search rules (escaping of `\\ , $ |`), selects
   exactly the resource's own identifier, no two entries on the same one;
8. agreement with the ledger: the subjects and their order, every fullUrl, the Bundle's
   timestamp, the checkpoint, and for a sample of at least 50 subjects every element of their
   Patient and Consents rebuilt from `consentctl status`, `history`, `catalog show` and
   `checkpoint` (so the FHIR says exactly what the ledger says); the subjects exported on their
   own say the same as the --all export.

Before that: each conformance resource of Spec/fhir/ is a valid R5 resource (fhir.resources),
each StructureDefinition a well-formed complex extension, and they agree with what
Sources/ConsentReports/FHIRConsent.swift emits. After it, the negative self-tests: altered
copies of Spec/fhir/ and mutated copies of the Bundles, one defect each, that the checker meant
for it must catch (a case named after an invariant or constraint, by that one).

--edge-cases adds what the export does not yet get right (Spec/fhir-mapping.md): subject ids
with the characters FHIR search gives a meaning to (`, | $ \\`), and the export of a ledger
without subjects. --keep keeps the ledgers. Prints one line per check (`ok` or `FAIL`), then
'N passed, M failed'; exits 1 if a check failed.
"""
import base64
import calendar
import copy
import datetime
import glob
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote, unquote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402

try:
    from fhir.resources.bundle import Bundle
    from fhirpathpy import compile as fhirpath
    from fhirpathpy.engine.nodes import FP_DateTime, ResourceNode, TypeInfo
    from fhirpathpy.models import models as fhirpath_models
except ImportError as e:
    sys.exit("check_fhir.py needs fhir.resources 8.x and fhirpathpy: python3 -m pip install fhir.resources fhirpathpy (%s)" % e)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SPEC_FHIR = os.path.join(ROOT, "Spec", "fhir")
SWIFT_SOURCE = os.path.join(ROOT, "Sources", "ConsentReports", "FHIRConsent.swift")
SWIFT_EVIDENCE = os.path.join(ROOT, "Sources", "ConsentDomain", "Events", "GrantEvidence.swift")
CATALOG = os.path.join(ROOT, "Samples", "catalog.json")
CATALOG_V2 = os.path.join(ROOT, "Samples", "catalog-v2.json")

BASE = "https://consentledger.example/fhir/"
EXTENSION_BASE = BASE + "StructureDefinition/"
CONSENT_SYSTEM = BASE + "CodeSystem/consent"
SUBJECT_SYSTEM = BASE + "NamingSystem/subject"
EVENT_SYSTEM = BASE + "NamingSystem/ledger-event"
RECORD_SYSTEM = BASE + "NamingSystem/consent-record"
EVIDENCE_SYSTEM = BASE + "NamingSystem/consent-evidence"
CHECKPOINT_URL = EXTENSION_BASE + "ledger-checkpoint"
STATE_URL = EXTENSION_BASE + "consent-state"
ALL_LANGUAGES = "http://hl7.org/fhir/ValueSet/all-languages"

R5 = fhirpath_models["r5"]
SLUG = re.compile(r"^[a-z][a-z0-9-]*$")
BCP47 = re.compile(r"^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$")
UUID_URN = re.compile(r"^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# --- FHIRPath ----------------------------------------------------------------------------------
# fhirpathpy 2.x has no hasValue(), lowBoundary() or highBoundary(); these follow the FHIRPath
# specification for the primitives a Bundle holds.

def _has_value(inputs):
    return [len(inputs) == 1 and not isinstance(inputs[0], (dict, list)) and inputs[0] is not None and inputs[0] != ""]


_DATETIME = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?)?)?(Z|[+-]\d{2}:\d{2})?$")


def _boundary(high):
    def fn(inputs):
        out = []
        for value in inputs:
            m = _DATETIME.match(str(value))
            if not m:
                continue
            y, mo, d, hh, mi, ss, frac, tz = m.groups()
            mo = mo or ("12" if high else "01")
            d = d or ("%02d" % calendar.monthrange(int(y), int(mo))[1] if high else "01")
            hh, mi, ss = hh or ("23" if high else "00"), mi or ("59" if high else "00"), ss or ("59" if high else "00")
            frac = (frac or "")[:3].ljust(3, "9" if high else "0") if frac or high else "000"
            # No zone: the earliest (+14:00) or latest (-12:00) instant it can mean.
            tz = tz or ("-12:00" if high else "+14:00")
            out.append(FP_DateTime("%s-%s-%sT%s:%s:%s.%s%s" % (y, mo, d, hh, mi, ss, frac, tz)))
        return out
    return fn


FHIRPATH_OPTIONS = {
    "userInvocationTable": {
        "hasValue": {"fn": _has_value, "arity": {0: []}},
        "lowBoundary": {"fn": _boundary(False), "arity": {0: []}},
        "highBoundary": {"fn": _boundary(True), "arity": {0: []}},
    },
    "traceFn": lambda *args: None,
}


def compiled(expression):
    return fhirpath(expression, R5, FHIRPATH_OPTIONS)


def holds(fn, focus, variables=None):
    """An invariant holds when it evaluates to true; false, empty or an error is a failure."""
    try:
        return fn(focus, variables or {}) == [True]
    except Exception:
        return False


# The core invariants of R5 (5.0.0), as its StructureDefinitions state them: (key, context,
# severity, expression). Context Bundle is the Bundle; Bundle.entry each entry; DomainResource
# each resource of an entry; a data type every element of that type, found by the R5 model.
INVARIANTS = [
    ("bdl-1", "Bundle", "error", "total.empty() or (type = 'searchset') or (type = 'history')"),
    ("bdl-2", "Bundle", "error", "(type = 'searchset') or entry.search.empty()"),
    ("bdl-3a", "Bundle", "error", "type in ('document' | 'message' | 'searchset' | 'collection') implies entry.all(resource.exists() and request.empty() and response.empty())"),
    ("bdl-3b", "Bundle", "error", "type = 'history' implies entry.all(request.exists() and response.exists() and ((request.method in ('POST' | 'PATCH' | 'PUT')) = resource.exists()))"),
    ("bdl-3c", "Bundle", "error", "type in ('transaction' | 'batch') implies entry.all(request.method.exists() and ((request.method in ('POST' | 'PATCH' | 'PUT')) = resource.exists()))"),
    ("bdl-3d", "Bundle", "error", "type in ('transaction-response' | 'batch-response') implies entry.all(response.exists())"),
    ("bdl-7", "Bundle", "error", "(type = 'history') or entry.where(fullUrl.exists()).select(fullUrl&iif(resource.meta.versionId.exists(), resource.meta.versionId, '')).isDistinct()"),
    ("bdl-9", "Bundle", "error", "type = 'document' implies (identifier.system.exists() and identifier.value.exists())"),
    ("bdl-10", "Bundle", "error", "type = 'document' implies (timestamp.hasValue())"),
    ("bdl-11", "Bundle", "error", "type = 'document' implies entry.first().resource.is(Composition)"),
    ("bdl-12", "Bundle", "error", "type = 'message' implies entry.first().resource.is(MessageHeader)"),
    ("bdl-13", "Bundle", "error", "type = 'subscription-notification' implies entry.first().resource.is(SubscriptionStatus)"),
    ("bdl-14", "Bundle", "error", "type = 'history' implies entry.request.method != 'PATCH'"),
    ("bdl-15", "Bundle", "error", "type='transaction' or type='transaction-response' or type='batch' or type='batch-response' or entry.all(fullUrl.exists() or request.method='POST')"),
    ("bdl-16", "Bundle", "error", "issues.exists() implies (issues.issue.severity = 'information' or issues.issue.severity = 'warning')"),
    ("bdl-17", "Bundle", "error", "type = 'document' implies issues.empty()"),
    ("bdl-18", "Bundle", "error", "type = 'searchset' implies link.where(relation = 'self' and url.exists()).exists()"),
    ("bdl-5", "Bundle.entry", "error", "resource.exists() or request.exists() or response.exists()"),
    ("bdl-8", "Bundle.entry", "error", "fullUrl.exists() implies fullUrl.contains('/_history/').not()"),
    ("dom-2", "DomainResource", "error", "contained.contained.empty()"),
    ("dom-3", "DomainResource", "error", "contained.where((('#'+id in (%resource.descendants().reference | %resource.descendants().ofType(canonical) | %resource.descendants().ofType(uri) | %resource.descendants().ofType(url))) or descendants().where(reference = '#').exists() or descendants().where(ofType(canonical) = '#').exists() or descendants().where(ofType(canonical) = '#').exists()).not()).trace('unmatched', id).empty()"),
    ("dom-4", "DomainResource", "error", "contained.meta.versionId.empty() and contained.meta.lastUpdated.empty()"),
    ("dom-5", "DomainResource", "error", "contained.meta.security.empty()"),
    ("dom-6", "DomainResource", "warning", "text.`div`.exists()"),
    ("ele-1", "Element", "error", "hasValue() or (children().count() > id.count())"),
    ("ext-1", "Extension", "error", "extension.exists() != value.exists()"),
    ("ref-1", "Reference", "error", "reference.exists()  implies (reference.startsWith('#').not() or (reference.substring(1).trace('url') in %rootResource.contained.id.trace('ids')) or (reference='#' and %rootResource!=%resource))"),
    ("ref-2", "Reference", "error", "reference.exists() or identifier.exists() or display.exists() or extension.exists()"),
    ("per-1", "Period", "error", "start.hasValue().not() or end.hasValue().not() or (start.lowBoundary() <= end.highBoundary())"),
    ("ident-1", "Identifier", "warning", "value.exists()"),
    ("cod-1", "Coding", "warning", "code.exists().not() implies display.exists().not()"),
    ("pat-1", "Patient.contact", "error", "name.exists() or telecom.exists() or address.exists() or organization.exists()"),
]
COMPILED = {key: compiled(expression) for key, _, _, expression in INVARIANTS}
RAW = dict(FHIRPATH_OPTIONS, returnRawData=True)
DESCENDANTS = fhirpath("descendants()", R5, RAW)
# The data types whose invariants depend on values: their elements are those of a resource's
# descendants() that are of the type, as ofType() tells them by the R5 model; each invariant is
# evaluated on all of them in one call, which returns those it does not hold for.
ELEMENT_TYPES = {t: TypeInfo(name=t, namespace=TypeInfo.FHIR) for t in ("Reference", "Period", "Identifier", "Coding")}
FAILING = {key: fhirpath("where(iif(%s, false, true))" % expression, R5, RAW) for key, _, _, expression in INVARIANTS}
PATIENT_CONTACTS = fhirpath("Patient.contact", R5, RAW)
# ele-1 and ext-1 depend only on which elements are present and which are empty, so they are
# evaluated once per shape of resource, on a real resource of that shape: the same result as
# evaluating them on every resource, in a fraction of the time.
SHAPE_INVARIANTS = {
    "ele-1": fhirpath("descendants().where(isResource().not()).where((hasValue() or (children().count() > id.count())).not())", R5,
                      dict(RAW, userInvocationTable=dict(FHIRPATH_OPTIONS["userInvocationTable"], isResource={"fn": lambda i: [len(i) == 1 and isinstance(i[0], dict) and "resourceType" in i[0]], "arity": {0: []}}))),
    "ext-1": fhirpath("descendants().ofType(Extension).where((extension.exists() != value.exists()).not())", R5, RAW),
}
COUNT_EXTENSIONS = fhirpath("descendants().ofType(Extension).count()", R5, FHIRPATH_OPTIONS)


def shape(value):
    if isinstance(value, dict):
        return {k: (v if k == "resourceType" else shape(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, str):
        return "s" if value else ""
    return value if value is None or isinstance(value, bool) else 0


def show(value, limit=160):
    text = json.dumps(value.data if isinstance(value, ResourceNode) else value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


class Invariants:
    """The FHIRPath invariants of Bundles, with counts of what they were evaluated on."""

    def __init__(self):
        self.counts = {key: 0 for key, _, _, _ in INVARIANTS}
        self.warnings = {}
        self.shapes = {}
        self.plain = {}

    def fail_or_warn(self, key, severity, where, what, problems):
        if severity == "warning":
            self.warnings[key] = self.warnings.get(key, 0) + 1
        else:
            problems.append("%s: %s failed on %s" % (where, key, what))

    def problems(self, bundle, label):
        problems = []
        for key, context, severity, _ in INVARIANTS:
            if context == "Bundle":
                self.counts[key] += 1
                if not holds(COMPILED[key], bundle):
                    self.fail_or_warn(key, severity, label, "the Bundle", problems)
        # ele-1 on the Bundle's own elements: the Bundle without its entries' resources, which are
        # checked one by one below (a resource is not an Element).
        shell = dict(bundle, entry=[{k: v for k, v in e.items() if k != "resource"} for e in bundle.get("entry", [])]) if bundle.get("entry") else bundle
        for node in SHAPE_INVARIANTS["ele-1"](shell, {}):
            problems.append("%s: ele-1 failed on %s %s" % (label, node.path, show(node)))
        self.counts["ele-1"] += len(DESCENDANTS(shell, {}))
        for i, entry in enumerate(bundle.get("entry", [])):
            node = ResourceNode.create_node(entry, "Bundle.entry")
            for key in ("bdl-5", "bdl-8"):
                self.counts[key] += 1
                if not holds(COMPILED[key], node):
                    problems.append("%s, entry %d: %s failed on %s" % (label, i, key, show(entry)))
            resource = entry.get("resource")
            if isinstance(resource, dict) and "resourceType" in resource:
                problems += self.resource_problems(resource, "%s, entry %d (%s/%s)" % (label, i, resource.get("resourceType"), resource.get("id")))
        return problems

    def resource_problems(self, resource, where):
        problems = []
        variables = {"resource": resource, "rootResource": resource}
        severity = {k: s for k, _, s, _ in INVARIANTS}
        # dom-2..6 read only contained and text: without either, every resource gives the same.
        plain = "contained" not in resource and "text" not in resource
        for key in ("dom-2", "dom-3", "dom-4", "dom-5", "dom-6"):
            self.counts[key] += 1
            if plain:
                if key not in self.plain:
                    self.plain[key] = holds(COMPILED[key], {"resourceType": "Basic"}, variables)
                ok = self.plain[key]
            else:
                ok = holds(COMPILED[key], resource, variables)
            if not ok:
                self.fail_or_warn(key, severity[key], where, "the resource", problems)
        key = json.dumps(shape(resource), sort_keys=True)
        if key not in self.shapes:
            failed = []
            for name, fn in SHAPE_INVARIANTS.items():
                try:
                    failed += ["%s failed on %s %s" % (name, node.path, show(node)) for node in fn(resource, {})]
                except Exception as e:
                    failed.append("%s could not be evaluated: %s" % (name, e))
            self.shapes[key] = (failed, len(DESCENDANTS(resource, {})), COUNT_EXTENSIONS(resource, {})[0])
        failed, elements, extensions = self.shapes[key]
        self.counts["ele-1"] += elements
        self.counts["ext-1"] += extensions
        problems += ["%s: %s" % (where, f) for f in failed]
        groups = {t: [] for t in ELEMENT_TYPES}
        for node in DESCENDANTS(resource, {}):
            info = TypeInfo.from_value(node)
            for t, wanted in ELEMENT_TYPES.items():
                if info.is_(wanted):
                    groups[t].append(node)
        if resource.get("resourceType") == "Patient":
            groups["Patient.contact"] = PATIENT_CONTACTS(resource, {})
        for k, context, _, _ in INVARIANTS:
            if groups.get(context):
                self.counts[k] += len(groups[context])
                try:
                    failing = FAILING[k](groups[context], variables)
                except Exception as e:
                    failing = ["(an error: %s)" % e]
                for node in failing:
                    self.fail_or_warn(k, severity[k], where, "%s %s" % (getattr(node, "path", context), show(node)), problems)
        return problems

    def summary(self):
        return ", ".join("%s ×%d" % (k, n) for k, n in self.counts.items() if n and dict((x, s) for x, _, s, _ in INVARIANTS)[k] == "error")

    def warning_summary(self):
        severity = {k: s for k, _, s, _ in INVARIANTS}
        return ", ".join("%s fails on %d of %d" % (k, self.warnings.get(k, 0), n) for k, n in self.counts.items() if severity[k] == "warning")


# --- conformance resources ---------------------------------------------------------------------

FHIR_TYPES = {
    # type: (JSON kind, lexical form of R5)
    "string": (str, re.compile(r"^[\s\S]+$")),
    "code": (str, re.compile(r"^[^\s]+( [^\s]+)*$")),
    "uri": (str, re.compile(r"^\S*$")),
    "dateTime": (str, re.compile(r"^([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1])(T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?(Z|(\+|-)((0[0-9]|1[0-3]):[0-5][0-9]|14:00)))?)?)?$")),
    "integer64": (str, re.compile(r"^(0|[-+]?[1-9][0-9]*)$")),
    "integer": (int, re.compile(r"^(0|[-+]?[1-9][0-9]*)$")),
    "base64Binary": (str, re.compile(r"^(\s*([0-9a-zA-Z+/=]){4}\s*)+$")),
    "boolean": (bool, re.compile(r"^(true|false)$")),
}


def type_suffix(key):
    """valueDateTime -> dateTime, valueBase64Binary -> base64Binary."""
    name = key[len("value"):]
    return name[:1].lower() + name[1:]


class Conformance:
    """The conformance resources of Spec/fhir/, by kind and URL."""

    def __init__(self, resources):
        self.resources = resources
        self.definitions, self.valuesets, self.codesystems, self.namingsystems = {}, {}, {}, {}
        for resource in resources.values():
            kind = resource.get("resourceType")
            if kind == "StructureDefinition":
                self.definitions[resource["url"]] = resource
            elif kind == "ValueSet":
                self.valuesets[resource["url"]] = {(inc.get("system"), c.get("code")) for inc in resource.get("compose", {}).get("include", []) for c in inc.get("concept", [])}
            elif kind == "CodeSystem":
                self.codesystems[resource["url"]] = resource
            elif kind == "NamingSystem":
                for unique in resource.get("uniqueId", []):
                    self.namingsystems[unique["value"]] = resource
        self.constraints = {}
        for url, sd in self.definitions.items():
            root = self.elements(sd).get("Extension", {})
            self.constraints[url] = [(c["key"], c["human"], c["expression"], compiled(c["expression"]), c.get("severity", "error")) for c in root.get("constraint", [])]
        self.constraint_cache = {}

    @staticmethod
    def load(folder):
        resources = {}
        for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
            with open(path, encoding="utf-8") as f:
                resources[os.path.relpath(path, ROOT)] = json.load(f)
        return Conformance(resources)

    @staticmethod
    def elements(sd):
        return {e["id"]: e for e in sd["differential"]["element"]}

    def slices(self, sd):
        return {e["sliceName"]: e for e in sd["differential"]["element"] if e.get("sliceName")}

    def codes(self, valueset):
        return {code for _, code in self.valuesets.get(valueset, set())}


def model_problem(resource):
    module = __import__("fhir.resources." + resource["resourceType"].lower(), fromlist=[resource["resourceType"]])
    try:
        getattr(module, resource["resourceType"]).model_validate(resource)
        return ""
    except Exception as e:
        return " ".join(str(e).split())[:400]


def structure_problems(sd, conf):
    """An R5 StructureDefinition of a complex extension, as Spec/fhir/README.md promises."""
    p = []
    name = sd.get("id")
    want = {"resourceType": "StructureDefinition", "fhirVersion": "5.0.0", "kind": "complex-type", "abstract": False, "type": "Extension",
            "baseDefinition": "http://hl7.org/fhir/StructureDefinition/Extension", "derivation": "constraint", "status": "active"}
    for k, v in want.items():
        if sd.get(k) != v:
            p.append("%s: %s is %r, wants %r" % (name, k, sd.get(k), v))
    if sd.get("url") != EXTENSION_BASE + str(name):
        p.append("%s: url %r is not %s%s" % (name, sd.get("url"), EXTENSION_BASE, name))
    if not re.match(r"^[A-Z]([A-Za-z0-9_]){1,254}$", sd.get("name", "")):
        p.append("%s: name %r is not a computable name" % (name, sd.get("name")))
    if not sd.get("context") or any(c.get("type") != "element" for c in sd["context"]):
        p.append("%s: wants an element context" % name)
    elements = conf.elements(sd)
    ids = [e["id"] for e in sd["differential"]["element"]]
    if len(ids) != len(set(ids)) or any(not (e["id"] == "Extension" or e["id"].startswith("Extension.")) or e.get("path") != re.sub(r":[^.]+", "", e["id"]) for e in sd["differential"]["element"]):
        p.append("%s: element ids are not unique, not under Extension, or do not match their paths" % name)
    root = elements.get("Extension")
    if not root or root.get("min") != 0 or root.get("max") not in ("1", "*"):
        p.append("%s: the Extension element wants min 0 and max 1 or *" % name)
    if elements.get("Extension.url", {}).get("fixedUri") != sd.get("url"):
        p.append("%s: Extension.url is not fixed to the canonical url" % name)
    if elements.get("Extension.value[x]", {}).get("max") != "0":
        p.append("%s: Extension.value[x] is not max 0 (a complex extension has no value)" % name)
    slicing = elements.get("Extension.extension", {}).get("slicing", {})
    if slicing.get("discriminator") != [{"type": "value", "path": "url"}] or slicing.get("rules") != "closed":
        p.append("%s: Extension.extension is not sliced closed by value:url" % name)
    slices = conf.slices(sd)
    if elements.get("Extension.extension", {}).get("min") != sum(s["min"] for s in slices.values()):
        p.append("%s: Extension.extension min is not the sum of its slices' min" % name)
    for s, rule in slices.items():
        if rule.get("path") != "Extension.extension" or not isinstance(rule.get("min"), int) or rule.get("max") not in ("0", "1", "*"):
            p.append("%s: slice %s wants path Extension.extension, min and max" % (name, s))
        if elements.get("Extension.extension:%s.url" % s, {}).get("fixedUri") != s:
            p.append("%s: slice %s has no url fixed to %r" % (name, s, s))
        if elements.get("Extension.extension:%s.extension" % s, {}).get("max") != "0":
            p.append("%s: slice %s does not forbid nested extensions" % (name, s))
        value = elements.get("Extension.extension:%s.value[x]" % s)
        if not value or value.get("min") != 1 or not value.get("type"):
            p.append("%s: slice %s wants value[x] min 1 with its types" % (name, s))
            continue
        for t in value["type"]:
            if t.get("code") not in FHIR_TYPES:
                p.append("%s: slice %s has type %r" % (name, s, t.get("code")))
        binding = value.get("binding")
        if binding and (binding.get("strength") != "required" or (binding.get("valueSet") not in conf.valuesets and binding.get("valueSet") != ALL_LANGUAGES)):
            p.append("%s: slice %s binds to %r, which Spec/fhir/ does not define" % (name, s, binding))
    for key, _, expression, _, _ in conf.constraints.get(sd.get("url"), []):
        if not re.match(r"^[a-z]+-\d+$", key):
            p.append("%s: constraint key %r" % (name, key))
        try:
            compiled(expression)
        except Exception as e:
            p.append("%s: constraint %s does not parse: %s" % (name, key, e))
    return p


def swift_problems(conf):
    """Spec/fhir/ defines what FHIRConsent.swift emits: every extension, slice, type, code and system."""
    p = []
    source = open(SWIFT_SOURCE, encoding="utf-8").read()
    constants = dict(re.findall(r'static let (\w+) = "([^"]+)"', source))
    expected = {"extensionBase": EXTENSION_BASE, "consentSystem": CONSENT_SYSTEM, "subjectSystem": SUBJECT_SYSTEM, "eventSystem": EVENT_SYSTEM,
                "recordSystem": RECORD_SYSTEM, "evidenceSystem": EVIDENCE_SYSTEM}
    for k, v in expected.items():
        if constants.get(k) != v:
            p.append("FHIRConsent.%s is %r, this check expects %r" % (k, constants.get(k), v))
    for k, v in constants.items():
        if k != "extensionBase" and v not in conf.codesystems and v not in conf.namingsystems:
            p.append("FHIRConsent.%s (%s) has no CodeSystem or NamingSystem in Spec/fhir/" % (k, v))
    extensions = {EXTENSION_BASE + n for n in re.findall(r'extensionBase \+ "([\w-]+)"', source)}
    for url in sorted(extensions - set(conf.definitions)):
        p.append("FHIRConsent.swift emits %s, which has no StructureDefinition" % url)
    for url in sorted(set(conf.definitions) - extensions):
        p.append("Spec/fhir/ defines %s, which FHIRConsent.swift does not emit" % url)
    owner = {}
    for url, sd in conf.definitions.items():
        for s in conf.slices(sd):
            owner[s] = (url, sd)
    emitted = set()
    for line in source.split("\n"):
        for s, kind in re.findall(r'sub\("(\w+)", "value(\w+)"', line):
            emitted.add(s)
            if s not in owner:
                p.append("FHIRConsent.swift emits sub-extension %r, which no StructureDefinition has" % s)
                continue
            url, sd = owner[s]
            rule = conf.elements(sd)["Extension.extension:%s.value[x]" % s]
            t = kind[:1].lower() + kind[1:]
            if t not in [x["code"] for x in rule["type"]]:
                p.append("%s.%s: FHIRConsent.swift emits value%s, the StructureDefinition allows %s" % (sd["id"], s, kind, [x["code"] for x in rule["type"]]))
            binding = rule.get("binding", {}).get("valueSet")
            if binding in conf.valuesets:
                for literal in re.findall(r'"([a-z][a-z-]*)"', line.split("value" + kind, 1)[1]):
                    if literal not in conf.codes(binding):
                        p.append("%s.%s: FHIRConsent.swift emits %r, not in %s" % (sd["id"], s, literal, binding))
    for s in sorted(set(owner) - emitted):
        p.append("%s defines sub-extension %r, which FHIRConsent.swift never emits" % (owner[s][1]["id"], s))
    evidence = open(SWIFT_EVIDENCE, encoding="utf-8").read()
    channels = re.search(r"enum Channel[^{]*\{\s*case ([\w, ]+)", evidence)
    channel_vs = conf.elements(conf.definitions.get(STATE_URL, {"differential": {"element": []}})).get("Extension.extension:channel.value[x]", {}).get("binding", {}).get("valueSet")
    if not channels or {c.strip() for c in channels.group(1).split(",")} != conf.codes(channel_vs):
        p.append("GrantEvidence.Channel %s differs from %s" % (channels.group(1) if channels else "?", channel_vs))
    return p


# --- extensions against Spec/fhir/ --------------------------------------------------------------

def walk_extensions(value, path):
    """(path of the element an extension is on, the list of its extensions) for every element."""
    if isinstance(value, dict):
        if "resourceType" in value:
            path = value["resourceType"]
        for key in ("extension", "modifierExtension"):
            if key in value:
                yield path, key, value[key]
        for k, v in value.items():
            if k in ("extension", "modifierExtension", "resourceType"):
                continue
            yield from walk_extensions(v, path + "." + k.lstrip("_") if path else k)
    elif isinstance(value, list):
        for v in value:
            yield from walk_extensions(v, path)


def lexical_problem(kind, value):
    json_kind, pattern = FHIR_TYPES[kind]
    if not isinstance(value, json_kind) or isinstance(value, bool) != (json_kind is bool):
        return "is JSON %s, %s wants %s" % (type(value).__name__, kind, json_kind.__name__)
    text = value if isinstance(value, str) else json.dumps(value)
    if not pattern.match(text):
        return "%r is not a valid %s" % (value, kind)
    if kind == "integer64" and not -2**63 <= int(text) < 2**63:
        return "%s is out of the integer64 range" % text
    if kind == "base64Binary":
        try:
            base64.b64decode(re.sub(r"\s", "", text), validate=True)
        except Exception:
            return "%r is not base64" % value
    return ""


def extension_problems(bundle, conf, label):
    problems = []
    for i, entry in enumerate(bundle.get("entry", [])):
        resource = entry.get("resource")
        if not isinstance(resource, dict):
            continue
        where = "%s, entry %d (%s/%s)" % (label, i, resource.get("resourceType"), resource.get("id"))
        for path, key, extensions in walk_extensions(resource, ""):
            if key == "modifierExtension":
                problems.append("%s: a modifierExtension on %s; Spec/fhir/ defines none" % (where, path))
                continue
            counts = {}
            for extension in extensions:
                counts[extension.get("url")] = counts.get(extension.get("url"), 0) + 1
                problems += ["%s: %s" % (where, x) for x in instance_problems(extension, path, conf)]
            for url, n in counts.items():
                sd = conf.definitions.get(url)
                root = conf.elements(sd)["Extension"] if sd else None
                if root and root["max"] != "*" and n > int(root["max"]):
                    problems.append("%s: %s occurs %d times on %s, max %s" % (where, sd["id"], n, path, root["max"]))
    return problems


def instance_problems(extension, path, conf):
    url = extension.get("url")
    sd = conf.definitions.get(url)
    if sd is None:
        return ["extension %r on %s has no StructureDefinition in Spec/fhir/" % (url, path)]
    name = sd["id"]
    p = []
    if path not in [c["expression"] for c in sd["context"] if c["type"] == "element"]:
        p.append("%s is on %s, its context is %s" % (name, path, [c["expression"] for c in sd["context"]]))
    elements = conf.elements(sd)
    values = [k for k in extension if k.startswith("value")]
    if elements.get("Extension.value[x]", {}).get("max") == "0" and values:
        p.append("%s is complex but has %s" % (name, values))
    for k in extension:
        if k not in ("url", "id", "extension") and not k.startswith("value"):
            p.append("%s has an element %r" % (name, k))
    slices = conf.slices(sd)
    closed = elements.get("Extension.extension", {}).get("slicing", {}).get("rules") == "closed"
    seen = {}
    for sub in extension.get("extension", []):
        s = sub.get("url")
        if s not in slices:
            if closed:
                p.append("%s has no sub-extension %r (its slicing is closed)" % (name, s))
            continue
        seen[s] = seen.get(s, 0) + 1
        if sub.get("extension") and elements.get("Extension.extension:%s.extension" % s, {}).get("max") == "0":
            p.append("%s.%s has extensions (max 0)" % (name, s))
        fixed_url = elements.get("Extension.extension:%s.url" % s, {}).get("fixedUri")
        if fixed_url is not None and s != fixed_url:
            p.append("%s.%s: url is fixed to %r" % (name, s, fixed_url))
        for k in sub:
            if k not in ("url", "id", "extension") and not k.startswith("value"):
                p.append("%s.%s has an element %r" % (name, s, k))
        rule = elements["Extension.extension:%s.value[x]" % s]
        types = [t["code"] for t in rule["type"]]
        subvalues = [k for k in sub if k.startswith("value")]
        if len(subvalues) != 1:
            p.append("%s.%s has %d values, wants one of %s" % (name, s, len(subvalues), types))
            continue
        kind, value = type_suffix(subvalues[0]), sub[subvalues[0]]
        if kind not in types:
            p.append("%s.%s is %s, wants %s" % (name, s, subvalues[0], " or ".join("value" + t[:1].upper() + t[1:] for t in types)))
            continue
        lexical = lexical_problem(kind, value) if kind in FHIR_TYPES else ""
        if lexical:
            p.append("%s.%s: %s" % (name, s, lexical))
        for k, fixed in rule.items():
            if (k.startswith("fixed") or k.startswith("pattern")) and fixed != value:
                p.append("%s.%s is %r, fixed to %r" % (name, s, value, fixed))
        binding = rule.get("binding")
        if binding and binding.get("strength") == "required":
            if binding["valueSet"] == ALL_LANGUAGES:
                if not (isinstance(value, str) and BCP47.match(value)):
                    p.append("%s.%s %r is not a BCP 47 language tag" % (name, s, value))
            elif value not in conf.codes(binding["valueSet"]):
                p.append("%s.%s %r is not in %s" % (name, s, value, binding["valueSet"]))
    for s, rule in slices.items():
        n = seen.get(s, 0)
        if n < rule["min"] or (rule["max"] != "*" and n > int(rule["max"])):
            p.append("%s.%s occurs %d times, wants %s..%s" % (name, s, n, rule["min"], rule["max"]))
    for key, human, expression, fn, severity in conf.constraints.get(url, []):
        if severity == "error" and not constraint_holds(conf, url, key, expression, fn, extension):
            p.append("%s: constraint %s failed (%s) on %s" % (name, key, human, show(extension)))
    return p


def constraint_holds(conf, url, key, expression, fn, extension):
    """The StructureDefinition's own constraint, evaluated by fhirpathpy on the extension. Its
    result depends only on the sub-extensions present and on the values the expression reads
    (`where(url = 'X').value`), so it is cached on those."""
    read = set(re.findall(r"url = '([^']+)'\)\.value", expression))
    if len(re.findall(r"\bvalue\b", expression)) == len(re.findall(r"url = '[^']+'\)\.value\b", expression)):
        projection = [(s.get("url"), [(k, v if s.get("url") in read else None) for k, v in sorted(s.items()) if k != "url"]) for s in extension.get("extension", [])]
        cache_key = (url, key, json.dumps([sorted(k for k in extension if k != "extension"), projection], sort_keys=True))
    else:
        cache_key = (url, key, json.dumps(extension, sort_keys=True))
    if cache_key not in conf.constraint_cache:
        conf.constraint_cache[cache_key] = holds(fn, ResourceNode.create_node(extension, "Extension"))
    return conf.constraint_cache[cache_key]


# --- JSON rules, bindings, references, transactions --------------------------------------------

def json_problems(bundle, label):
    problems = []

    def visit(value, path):
        if value is None or value == "" or value == [] or value == {}:
            problems.append("%s: %s is %s" % (label, path, json.dumps(value)))
        elif isinstance(value, dict):
            for k, v in value.items():
                visit(v, path + "." + k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, "%s[%d]" % (path, i))
    visit(bundle, "Bundle")
    return problems


CORE_BINDINGS = {
    # element: the codes of its required R5 binding
    ("Bundle", "type"): {"document", "message", "transaction", "transaction-response", "batch", "batch-response", "history", "searchset", "collection", "subscription-notification"},
    ("Bundle.entry.request", "method"): {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"},
    ("Consent", "status"): {"draft", "active", "inactive", "not-done", "entered-in-error", "unknown"},
    ("Consent", "decision"): {"deny", "permit"},
    ("Identifier", "use"): {"usual", "official", "temp", "secondary", "old"},
    ("Patient", "gender"): {"male", "female", "other", "unknown"},
}


def binding_problems(bundle, conf, label):
    problems = []

    def code(kind, element, value, where):
        allowed = CORE_BINDINGS[(kind, element)]
        if value is not None and value not in allowed:
            problems.append("%s: %s.%s %r is not in its required R5 ValueSet" % (where, kind, element, value))

    code("Bundle", "type", bundle.get("type"), label)
    for i, entry in enumerate(bundle.get("entry", [])):
        where = "%s, entry %d" % (label, i)
        if "request" in entry:
            code("Bundle.entry.request", "method", entry["request"].get("method"), where)
        resource = entry.get("resource", {})
        kind = resource.get("resourceType")
        if kind == "Consent":
            code("Consent", "status", resource.get("status"), where)
            code("Consent", "decision", resource.get("decision"), where)
        if kind == "Patient":
            code("Patient", "gender", resource.get("gender"), where)
        for path, value in walk(resource, kind or ""):
            if not isinstance(value, dict):
                continue
            if "use" in value and path.split(".")[-1].split("[")[0] in ("identifier",):
                code("Identifier", "use", value["use"], where)
            system = value.get("system")
            if isinstance(system, str) and system.startswith("https://consentledger.example/"):
                is_coding = "code" in value
                if is_coding and system not in conf.codesystems:
                    problems.append("%s: %s codes from %s, which Spec/fhir/ has no CodeSystem for" % (where, path, system))
                elif not is_coding and system not in conf.namingsystems:
                    problems.append("%s: %s identifies by %s, which Spec/fhir/ has no NamingSystem for" % (where, path, system))
                if is_coding and system == CONSENT_SYSTEM:
                    parts = str(value.get("code")).split("/")
                    if len(parts) not in (1, 2) or not all(SLUG.match(x) for x in parts):
                        problems.append("%s: %s code %r is not KEY or KEY/CODE of %s" % (where, path, value.get("code"), system))
    return problems


def walk(value, path=""):
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, path + "." + k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, "%s[%d]" % (path, i))


REFERENCE_TARGETS = {("Consent", "subject"): {"Patient", "Practitioner", "Group"}}


def reference_problems(bundle, label):
    problems = []
    by_url = {}
    for i, entry in enumerate(bundle.get("entry", [])):
        url = entry.get("fullUrl")
        if url is not None and not UUID_URN.match(url):
            problems.append("%s, entry %d: fullUrl %r is not a urn:uuid" % (label, i, url))
        if url is not None:
            by_url[url] = entry.get("resource", {}).get("resourceType")
    for i, entry in enumerate(bundle.get("entry", [])):
        resource = entry.get("resource", {})
        for path, value in walk(resource, resource.get("resourceType", "")):
            if isinstance(value, dict) and isinstance(value.get("reference"), str):
                reference = value["reference"]
                if reference.startswith("urn:"):
                    if reference not in by_url:
                        problems.append("%s, entry %d: %s %r names no entry of the Bundle" % (label, i, path, reference))
                        continue
                    element = tuple(re.sub(r"\[\d+\]", "", path).split(".")[:2])
                    targets = REFERENCE_TARGETS.get(element)
                    if targets and by_url[reference] not in targets:
                        problems.append("%s, entry %d: %s names a %s, wants %s" % (label, i, path, by_url[reference], sorted(targets)))
    return problems


def parse_token(text):
    """A token search value as FHIR search reads it: (system, code), or None when the value is
    several (an unescaped `,`), composite (`$`) or not system|code."""
    parts, current, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            current += text[i + 1]
            i += 2
            continue
        if c in ",$":
            return None
        if c == "|":
            parts.append(current)
            current = ""
        else:
            current += c
        i += 1
    parts.append(current)
    return tuple(parts) if len(parts) == 2 else None


def condition(query, parameter):
    """The identifier a conditional URL's query selects, or an error."""
    if "&" in query or not query.startswith(parameter + "="):
        return None, "is not one %s= parameter" % parameter
    raw = query[len(parameter) + 1:]
    if re.search(r"[^A-Za-z0-9\-._~%]", raw):
        return None, "is not percent-encoded (%r)" % raw
    token = parse_token(unquote(raw))
    if token is None:
        return None, "is not one system|value token under the FHIR search rules (%r)" % unquote(raw)
    return token, ""


def transaction_problems(bundle, label):
    if bundle.get("type") != "transaction":
        return []
    problems = []
    seen = {}
    for i, entry in enumerate(bundle.get("entry", [])):
        where = "%s, entry %d" % (label, i)
        resource, request = entry.get("resource", {}), entry.get("request", {})
        kind = resource.get("resourceType")
        identifiers = {(x.get("system"), x.get("value")) for x in resource.get("identifier", [])}
        if kind == "Patient":
            if request.get("method") != "POST" or request.get("url") != "Patient":
                problems.append("%s: the Patient's request is %s %s, wants a conditional create (POST Patient)" % (where, request.get("method"), request.get("url")))
            token, error = condition(request.get("ifNoneExist", ""), "identifier")
        elif kind == "Consent":
            url = request.get("url", "")
            if request.get("method") != "PUT" or not url.startswith("Consent?"):
                problems.append("%s: the Consent's request is %s %s, wants a conditional update (PUT Consent?…)" % (where, request.get("method"), url))
            token, error = condition(url.split("?", 1)[1] if "?" in url else "", "identifier")
        else:
            problems.append("%s: unexpected %s" % (where, kind))
            continue
        if error:
            problems.append("%s: the %s's conditional search %s" % (where, kind, error))
        elif token not in identifiers:
            problems.append("%s: the %s's conditional search selects %s|%s, not its identifier %s" % (where, kind, token[0], token[1], sorted(identifiers)))
        elif (kind, token) in seen:
            problems.append("%s: entries %d and %d are conditional on the same %s %s|%s" % (where, seen[(kind, token)], i, kind, token[0], token[1]))
        else:
            seen[(kind, token)] = i
    return problems


def model_problems(bundle, label):
    try:
        Bundle.model_validate(bundle)
        return []
    except Exception as e:
        return ["%s: %s" % (label, " ".join(str(e).split())[:500])]


# --- the ledger's own account ------------------------------------------------------------------

def run(binary, ledger, args, stdin=None, expect=0):
    r = subprocess.run([binary, "--ledger", ledger] + args, capture_output=True, text=True, input=stdin, timeout=600)
    if r.returncode != expect:
        raise RuntimeError("consentctl %s exited %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()[:400]))
    return r


def fhir_uuid(*parts):
    digest = hashlib.sha256(b"".join(p.encode("utf-8") + b"\0" for p in parts)).hexdigest()[:32]
    return "urn:uuid:%s-%s-8%s-a%s-%s" % (digest[0:8], digest[8:12], digest[13:16], digest[17:20], digest[20:32])


def coding(system, code, display):
    return {"coding": [{"system": system, "code": code, "display": display}]}


class LedgerView:
    """What the ledger itself says, through consentctl's own commands."""

    def __init__(self, binary, folder, name):
        self.binary, self.folder, self.name = binary, folder, name
        self.catalog = json.loads(run(binary, folder, ["catalog", "show", "--format", "json"]).stdout)
        self.checkpoint = json.loads(run(binary, folder, ["checkpoint", "--format", "json"]).stdout)
        self.subjects = json.loads(run(binary, folder, ["subjects", "--format", "json"]).stdout)["subjects"]
        self.cache = {}

    def subject(self, sid):
        if sid not in self.cache:
            status = json.loads(run(self.binary, self.folder, ["status", "--subject", sid, "--format", "json"]).stdout)
            history = json.loads(run(self.binary, self.folder, ["history", "--subject", sid, "--format", "json"]).stdout)
            self.cache[sid] = (status, history)
        return self.cache[sid]

    def features(self):
        """Catalogue order, each feature's consents required first (rule R7)."""
        out = []
        for f in self.catalog["features"]:
            consents = [c for c in f["consents"] if c["required"]] + [c for c in f["consents"] if not c["required"]]
            out.append((f, consents))
        return out

    def expected_entries(self, sid, ref):
        """The Patient entry and the Consent entries the mapping (Spec/fhir-mapping.md) gives this
        subject, rebuilt from status, history, catalogue and checkpoint; `ref` is the pseudonym."""
        status, history = self.subject(sid)
        by_key = {f["key"]: f for f in status["features"]}
        newest = {}
        for e in history["events"]:
            newest[(e["featureCode"], e["consent"])] = e
        identifier = {"system": SUBJECT_SYSTEM, "value": sid}
        patient_url = fhir_uuid(self.name, sid, "Patient")
        entries = [{"fullUrl": patient_url, "resource": {"resourceType": "Patient", "id": "subject-" + ref[:12], "identifier": [identifier]}}]
        checkpoint = {"url": CHECKPOINT_URL, "extension": [
            {"url": "origin", "valueString": self.checkpoint["origin"]},
            {"url": "size", "valueInteger64": str(self.checkpoint["size"])},
            {"url": "root", "valueBase64Binary": self.checkpoint["root"]},
        ]}
        for feature, consents in self.features():
            line = by_key[feature["key"]]
            listed = {c["code"]: c for c in line["consents"]}
            states, sources, evidence = [], [], []
            for c in consents:
                s = listed[c["code"]]
                last = newest.get((feature["code"], c["code"]))
                parts = [{"url": "consent", "valueCode": c["code"]}]
                if s["state"] in ("given", "outdated"):
                    parts += [{"url": "state", "valueCode": s["state"]}, {"url": "policyVersion", "valueString": s["currentVersion"]},
                              {"url": "givenPolicyVersion", "valueString": s["version"]}]
                    if last:
                        parts.append({"url": "recordedAt", "valueDateTime": last["at"]})
                    for member, key in (("effectiveAt", "valueDateTime"), ("channel", "valueCode"), ("noticeLanguage", "valueCode")):
                        if member in s:
                            parts.append({"url": member, key: s[member]})
                    if "evidence" in s:
                        evidence.append({"identifier": {"system": EVIDENCE_SYSTEM, "value": s["evidence"]}, "display": "evidence for %s/%s" % (feature["key"], c["code"])})
                else:
                    parts += [{"url": "state", "valueCode": "withheld"}, {"url": "reason", "valueCode": s["reason"]},
                              {"url": "policyVersion", "valueString": s["currentVersion"]}]
                    if s["reason"] != "never-given" and last:
                        parts.append({"url": "recordedAt", "valueDateTime": last["at"]})
                if last:
                    parts.append({"url": "ledgerEvent", "valueInteger64": str(last["seq"])})
                    sources.append(last)
                states.append({"url": STATE_URL, "extension": parts})
            main = listed[consents[0]["code"]]
            record = "%s/%s" % (ref, feature["key"])
            consent = {
                "resourceType": "Consent", "id": "consent-%s-%d" % (ref[:12], feature["code"]),
                "identifier": [{"system": RECORD_SYSTEM, "value": record}],
                "status": "active" if line["active"] else "inactive",
                "category": [coding(CONSENT_SYSTEM, feature["key"], line["name"])],
                "subject": {"reference": patient_url, "identifier": identifier},
                "decision": "permit" if line["active"] else "deny",
                "policyBasis": {"url": consents[0]["link"]},
                "extension": [checkpoint] + states,
            }
            if line["active"]:
                exceptions = [c for c in consents if not c["required"] and listed[c["code"]]["state"] != "given"]
                if exceptions:
                    consent["provision"] = [{"code": [coding(CONSENT_SYSTEM, "%s/%s" % (feature["key"], c["code"]), listed[c["code"]]["name"])]} for c in exceptions]
            if main["state"] in ("given", "outdated"):
                agreed = main.get("effectiveAt") or main["validFrom"]
                consent["date"] = agreed[:10]
                consent["period"] = {"start": agreed}
            elif sources:
                consent["date"] = max(e["at"] for e in sources)[:10]
            references = [{"identifier": {"system": EVENT_SYSTEM, "value": "%s#%d" % (self.name, e["seq"])}, "display": "ledger event seq %d" % e["seq"]}
                          for e in sorted(sources, key=lambda e: e["seq"])] + evidence
            if references:
                consent["sourceReference"] = references
            entries.append({"fullUrl": fhir_uuid(self.name, sid, feature["key"]), "resource": consent})
        return entries


def difference(want, got, path=""):
    if type(want) is not type(got):
        return "%s: the ledger says %s, the Bundle %s" % (path or "/", show(want, 120), show(got, 120))
    if isinstance(want, dict):
        for k in list(want) + [k for k in got if k not in want]:
            if k not in got:
                return "%s.%s: the ledger says %s, the Bundle has none" % (path, k, show(want[k], 120))
            if k not in want:
                return "%s.%s: the Bundle has %s, the ledger says nothing" % (path, k, show(got[k], 120))
            d = difference(want[k], got[k], path + "." + k)
            if d:
                return d
        return ""
    if isinstance(want, list):
        for i, (w, g) in enumerate(zip(want, got)):
            d = difference(w, g, "%s[%d]" % (path, i))
            if d:
                return d
        if len(want) != len(got):
            return "%s: the ledger says %d items, the Bundle has %d" % (path, len(want), len(got))
        return ""
    return "" if want == got else "%s: the ledger says %s, the Bundle %s" % (path, show(want, 120), show(got, 120))


def subject_part(bundle, sid):
    """The entries of one subject: its Patient and the Consents that follow it."""
    entries = bundle.get("entry", [])
    for i, entry in enumerate(entries):
        r = entry.get("resource", {})
        if r.get("resourceType") == "Patient" and [x.get("value") for x in r.get("identifier", [])] == [sid]:
            j = i + 1
            while j < len(entries) and entries[j].get("resource", {}).get("resourceType") == "Consent":
                j += 1
            return i, entries[i:j]
    return None, []


def agreement_problems(view, bundle, sid, label):
    """Every element of the subject's entries is what the ledger says."""
    start, part = subject_part(bundle, sid)
    if not part:
        return ["%s: no Patient for subject %r" % (label, sid)]
    consents = [e["resource"] for e in part[1:]]
    refs = {c.get("identifier", [{}])[0].get("value", "").split("/")[0] for c in consents}
    ref = next(iter(refs)) if len(refs) == 1 else ""
    if not re.match(r"^[0-9a-f]{32}$", ref):
        return ["%s, subject %r: Consent identifiers name pseudonyms %s, want one of 32 hex digits" % (label, sid, sorted(refs))]
    problems = []
    want = view.expected_entries(sid, ref)
    got = [{k: v for k, v in e.items() if k != "request"} for e in part]
    for i, (w, g) in enumerate(zip(want, got)):
        d = difference(w, g)
        if d:
            problems.append("%s, entry %d (subject %r, %s): %s" % (label, start + i, sid, w["resource"]["resourceType"] if i == 0 else "Consent " + w["resource"]["category"][0]["coding"][0]["code"], d))
    if len(want) != len(got):
        problems.append("%s, subject %r: %d entries, the ledger's catalogue gives %d" % (label, sid, len(got), len(want)))
    return problems


def bundle_agreement_problems(view, bundle, label, subjects, bundle_id):
    """The Bundle as a whole: its id, its subjects in order, each with one Consent per feature,
    every fullUrl, and its timestamp (the newest event of its subjects)."""
    problems = []
    if bundle.get("id") != bundle_id:
        problems.append("%s: id %r, wants %r" % (label, bundle.get("id"), bundle_id))
    keys = [f["key"] for f, _ in view.features()]
    entries = bundle.get("entry", [])
    patients = [(i, e) for i, e in enumerate(entries) if e.get("resource", {}).get("resourceType") == "Patient"]
    ids = [e["resource"]["identifier"][0]["value"] for _, e in patients]
    if ids != subjects:
        problems.append("%s: its Patients are %d subjects %s…, the ledger has %d %s…" % (label, len(ids), ids[:3], len(subjects), subjects[:3]))
    if len(entries) != len(subjects) * (1 + len(keys)):
        problems.append("%s: %d entries for %d subjects of %d features" % (label, len(entries), len(subjects), len(keys)))
    newest = None
    for i, entry in patients:
        sid = entry["resource"]["identifier"][0]["value"]
        if entry.get("fullUrl") != fhir_uuid(view.name, sid, "Patient"):
            problems.append("%s, entry %d: fullUrl %s is not the one of subject %r" % (label, i, entry.get("fullUrl"), sid))
        features = [e.get("resource", {}).get("category", [{}])[0].get("coding", [{}])[0].get("code") for e in entries[i + 1:i + 1 + len(keys)]]
        if features != keys:
            problems.append("%s, entry %d: subject %r has Consents for %s, the catalogue %s" % (label, i, sid, features, keys))
            continue
        for j, key in enumerate(keys):
            entry2 = entries[i + 1 + j]
            if entry2.get("fullUrl") != fhir_uuid(view.name, sid, key):
                problems.append("%s, entry %d: fullUrl %s is not the one of %r/%s" % (label, i + 1 + j, entry2.get("fullUrl"), sid, key))
            for ext in entry2["resource"].get("extension", []):
                for sub in ext.get("extension", []):
                    if sub.get("url") == "recordedAt" and (newest is None or sub["valueDateTime"] > newest):
                        newest = sub["valueDateTime"]
    want = newest or "1970-01-01T00:00:00.000Z"
    if bundle.get("timestamp") != want:
        problems.append("%s: timestamp %s, but its newest event was recorded at %s" % (label, bundle.get("timestamp"), want))
    return problems


# --- random histories --------------------------------------------------------------------------

class Catalogue:
    def __init__(self, doc):
        self.features = []
        for f in doc["features"]:
            consents = [c for c in f["consents"] if c["required"]] + [c for c in f["consents"] if not c["required"]]
            self.features.append({"key": f["key"], "code": f["code"], "required": [c["code"] for c in consents if c["required"]],
                                  "optional": [c["code"] for c in consents if not c["required"]], "version": {c["code"]: c["version"] for c in consents}})

    def publish(self, doc):
        self.__init__(doc)


class Subject:
    """One subject's consents as the rules (docs/consent-rules.md) make them, so that its commands
    keep the rules: an exact model of ConsentRules.decide for gives and withdrawals."""

    def __init__(self, sid, catalogue):
        self.sid = sid
        self.given = {f["key"]: {} for f in catalogue.features}  # consent code -> version given
        self.touched = set()  # features with events

    def current(self, f, c):
        return self.given[f["key"]].get(c) == f["version"][c]

    def active(self, f):
        return all(self.current(f, r) for r in f["required"])

    def give(self, f, codes):
        changed = [c for c in codes if not self.current(f, c)]
        for c in changed:
            self.given[f["key"]][c] = f["version"][c]
        if changed:
            self.touched.add(f["key"])

    def revoke(self, f, codes):
        g = self.given[f["key"]]
        changed = False
        for c in f["optional"] + f["required"]:
            if c in codes and c in g:
                del g[c]
                changed = True
                if c in f["required"]:
                    for o in f["optional"]:
                        g.pop(o, None)
        if changed:
            self.touched.add(f["key"])

    def command(self, rng, catalogue, now):
        f = rng.choice(catalogue.features)
        g = self.given[f["key"]]
        command = {"subject": self.sid, "feature": f["key"] if rng.random() < 0.75 else str(f["code"])}
        if not self.active(f):
            given_required = [r for r in f["required"] if r in g]
            if given_required and rng.random() < 0.3:
                pick = rng.sample(given_required, rng.randint(1, len(given_required)))
                command["revoke"] = pick[0] if len(pick) == 1 and rng.random() < 0.5 else pick
                self.revoke(f, pick)
                return command
            give = [r for r in f["required"] if not self.current(f, r)]
            give += [c for c in f["optional"] if not self.current(f, c) and rng.random() < 0.45]
            if rng.random() < 0.1:
                give += [c for c in f["required"] + f["optional"] if c not in give and self.current(f, c)][:1]
        else:
            missing = [c for c in f["optional"] if not self.current(f, c)]
            given_optional = [c for c in f["optional"] if c in g]
            roll = rng.random()
            if missing and roll < 0.4:
                give = rng.sample(missing, rng.randint(1, len(missing)))
            elif given_optional and roll < 0.65:
                pick = rng.sample(given_optional, rng.randint(1, len(given_optional)))
                command["revoke"] = pick[0] if len(pick) == 1 and rng.random() < 0.7 else pick
                self.revoke(f, pick)
                return command
            elif roll < 0.72:
                give = [rng.choice(f["required"] + f["optional"])]
                if not self.current(f, give[0]):
                    give.append(f["required"][0])
            else:
                pick = [rng.choice(f["required"])]
                if given_optional and rng.random() < 0.3:
                    pick = [rng.choice(given_optional)] + pick
                command["revoke"] = pick[0] if len(pick) == 1 else pick
                self.revoke(f, pick)
                return command
        rng.shuffle(give)
        command["give"] = give
        if rng.random() < 0.3:
            command["channel"] = rng.choice(["app", "portal", "paper", "phone", "clinician"])
        if rng.random() < 0.25:
            command["noticeLanguage"] = rng.choice(["de", "en", "en-GB", "hr", "de-CH-1901", "sr-Latn-RS"])
        if rng.random() < 0.15:
            command["evidence"] = rng.choice(["scan-%05d" % rng.randint(0, 99999), "Formular %d/Ä" % rng.randint(1, 999), "https://dms.example/doc/%d" % rng.randint(1, 10**6)])
        if f["key"] not in self.touched and rng.random() < 0.6:
            # An effective time may only be earlier than any event about the feature when there is
            # none yet; never in the future.
            t = now - datetime.timedelta(days=rng.randint(1, 300), seconds=rng.randint(0, 86399))
            offset = rng.choice([0, 0, 0, 60, -300, 330])
            local = t + datetime.timedelta(minutes=offset)
            zone = "Z" if offset == 0 else "%s%02d:%02d" % ("+" if offset > 0 else "-", abs(offset) // 60, abs(offset) % 60)
            command["effectiveAt"] = local.strftime("%Y-%m-%dT%H:%M:%S") + zone
        if rng.random() < 0.2:
            command["actor"] = rng.choice(["dr.house", "nurse.joy", "front-desk"])
        self.give(f, give)
        return command


def subject_ids(rng, prefix, count, edge):
    ids = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.8:
            ids.append("%s-%05d" % (prefix, i))
        elif roll < 0.9:
            ids.append("%s Müller-%d" % (prefix, i))
        elif roll < 0.96 or not edge:
            ids.append("%s/José.%d~ä" % (prefix, i))
        else:
            ids.append("%s,%d|x$y\\z" % (prefix, i))
    return ids


def apply_commands(binary, folder, commands, atomic, work):
    """Appends the commands with one `apply`; a command the rules refuse (the model missed a
    rule) is dropped and the rest applied. Returns (events, refused)."""
    events = refused = 0
    path = os.path.join(work, "commands.jsonl")
    while commands:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(json.dumps(c, ensure_ascii=False) for c in commands) + "\n")
        r = subprocess.run([binary, "--ledger", folder, "apply", path] + (["--atomic"] if atomic else []), capture_output=True, text=True, timeout=600)
        lines = [json.loads(l) for l in r.stdout.split("\n") if l.strip()]
        events += sum(len(l.get("events", [])) for l in lines if l.get("ok"))
        if r.returncode == 0:
            return events, refused
        if atomic:
            atomic = False  # the refused line is named only without --atomic
            continue
        failure = lines[-1] if lines and not lines[-1].get("ok") else None
        if r.returncode not in (1, 64) or failure is None or "line" not in failure:
            raise RuntimeError("apply failed (%d): %s %s" % (r.returncode, r.stdout[-300:], r.stderr.strip()[:300]))
        refused += 1
        commands = commands[failure["line"]:]
    return events, refused


def interleave(rng, queues):
    order = [sid for sid, q in queues.items() for _ in q]
    rng.shuffle(order)
    position = {sid: 0 for sid in queues}
    out = []
    for sid in order:
        out.append(queues[sid][position[sid]])
        position[sid] += 1
    return out


def custom_catalogues():
    """A catalogue of its own: the sample's features, a research feature with two required consents
    (one listed after an optional one, and one named only in German) and a feature with nothing
    optional; then a version that changes a required and an optional consent."""
    with open(CATALOG, encoding="utf-8") as f:
        first = json.load(f)
    link = "https://consentledger.example/notices/research/"
    first["features"].append({"code": 7, "key": "research", "name": {"en": "Research Registry", "de": "Forschungsregister"}, "consents": [
        {"code": "recontact", "name": {"en": "Recontact for studies", "de": "Wiederkontakt für Studien"}, "required": False, "link": link + "recontact", "version": "2026-01"},
        {"code": "registry", "name": {"en": "Registry participation", "de": "Teilnahme am Register"}, "required": True, "link": link + "registry", "version": "2026-01"},
        {"code": "data-use", "name": {"de": "Datennutzung für Forschung"}, "required": True, "link": link + "data-use", "version": "1"},
        {"code": "biobank", "name": {"en": "Biobank samples", "de": "Bioproben"}, "required": False, "link": link + "biobank", "version": "1"},
    ]})
    first["features"].append({"code": 9, "key": "reminders", "name": {"en": "Appointment reminders", "de": "Terminerinnerungen"}, "consents": [
        {"code": "required", "name": {"en": "Reminders by text message", "de": "Erinnerungen per SMS"}, "required": True, "link": "https://consentledger.example/notices/reminders", "version": "1.0"},
    ]})
    second = copy.deepcopy(first)
    for c in second["features"][2]["consents"]:
        if c["code"] in ("data-use", "biobank"):
            c["version"] = "2"
            c["link"] += "-v2"
    return first, second


def optional_bump(doc):
    """The next catalogue version: two optional consents change, so their grants become outdated."""
    doc = copy.deepcopy(doc)
    for f in doc["features"]:
        for c in f["consents"]:
            if (f["key"], c["code"]) in (("medication-management", "optional-a"), ("timeline", "optional-b")):
                c["version"] = c["version"] + "+rev1"
    return doc


PLANS = [
    # (catalogue, versions published after each phase, all applies with --atomic)
    ("sample", [None, None], False),
    ("sample", ["v2", None], True),
    ("sample", ["v2", "optional"], True),
    ("custom", ["custom-v2", None], True),
    ("sample", [None, "v2"], True),
    ("sample", [None, None], True),
]


def build_ledger(binary, work, n, rng, count, edge):
    folder = os.path.join(work, "ledger-%d" % n)
    name = "clinic-%d.example/consents" % n
    plan, publishes, atomic = PLANS[n % len(PLANS)]
    first_custom, second_custom = custom_catalogues()
    if plan == "custom":
        path = os.path.join(work, "custom-%d.json" % n)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(first_custom, f, ensure_ascii=False)
        run(binary, folder, ["init", "--insecure-plaintext-key", "--name", name, "--catalog", path])
    else:
        run(binary, folder, ["init", "--insecure-plaintext-key", "--name", name])
    catalogue = Catalogue(json.loads(run(binary, folder, ["catalog", "show", "--format", "json"]).stdout))
    subjects = {sid: Subject(sid, catalogue) for sid in subject_ids(rng, "L%d" % n, count, edge)}
    stats = {"commands": 0, "events": 0, "refused": 0, "publishes": 0}
    for phase, publish in enumerate(publishes + [None]):
        now = datetime.datetime.now(datetime.timezone.utc)
        queues = {}
        for sid, s in subjects.items():
            k = rng.randint(1, 5) if phase == 0 else rng.randint(0, 3)
            queues[sid] = [s.command(rng, catalogue, now) for _ in range(k)]
        commands = interleave(rng, queues)
        # Three applies a phase, so that events carry several recorded times. A ledger whose plan
        # says so appends its first phase's first part command by command (each with its own
        # recorded time and sync), the rest with --atomic (one write and sync), which is faster.
        third = len(commands) // 3
        for part, chunk in enumerate((commands[:third], commands[third:2 * third], commands[2 * third:])):
            events, refused = apply_commands(binary, folder, chunk, atomic or phase > 0 or part > 0, work)
            stats["commands"] += len(chunk)
            stats["events"] += events
            stats["refused"] += refused
        if publish:
            if publish == "v2":
                path = CATALOG_V2
            else:
                doc = second_custom if publish == "custom-v2" else optional_bump(json.loads(run(binary, folder, ["catalog", "show", "--format", "json"]).stdout))
                path = os.path.join(work, "catalog-%d-%d.json" % (n, phase))
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(doc, f, ensure_ascii=False)
            run(binary, folder, ["catalog", "publish", path])
            catalogue.publish(json.loads(run(binary, folder, ["catalog", "show", "--format", "json"]).stdout))
            stats["publishes"] += 1
    return folder, name, sorted(subjects), stats


# --- main --------------------------------------------------------------------------------------

def coverage(bundles):
    """How often the --all exports show each case the mapping distinguishes."""
    seen = dict.fromkeys(["given", "outdated", "never-given", "withdrawn", "cascade-withdrawn", "active", "inactive",
                          "inactive with an outdated required consent", "deny exceptions", "deny exceptions for outdated consents",
                          "two required consents", "effectiveAt", "channel", "noticeLanguage", "evidence references",
                          "subject ids with spaces or non-ASCII"], 0)
    for bundle in bundles:
        for entry in bundle["entry"]:
            r = entry["resource"]
            if r["resourceType"] == "Patient":
                seen["subject ids with spaces or non-ASCII"] += bool(re.search(r"[^\x21-\x7e]", r["identifier"][0]["value"]))
                continue
            seen[r["status"]] += 1
            states = [{x["url"]: next(v for k, v in x.items() if k.startswith("value")) for x in e["extension"]} for e in r["extension"] if e["url"] == STATE_URL]
            for st in states:
                seen[st["state"] if st["state"] != "withheld" else st["reason"]] += 1
                for member in ("effectiveAt", "channel", "noticeLanguage"):
                    seen[member] += member in st
            by_code = {st["consent"]: st for st in states}
            if r["status"] == "inactive" and states[0]["state"] == "outdated":
                seen["inactive with an outdated required consent"] += 1
            for p in r.get("provision", []):
                seen["deny exceptions"] += 1
                seen["deny exceptions for outdated consents"] += by_code[p["code"][0]["coding"][0]["code"].split("/")[1]]["state"] == "outdated"
            seen["two required consents"] += r["category"][0]["coding"][0]["code"] == "research"
            seen["evidence references"] += sum(1 for x in r.get("sourceReference", []) if x["identifier"]["system"] == EVIDENCE_SYSTEM)
    return seen


def all_checks(bundle, label, conf, invariants):
    return {
        "fhir.resources R5 model": model_problems(bundle, label),
        "FHIR JSON rules": json_problems(bundle, label),
        "FHIRPath invariants": invariants.problems(bundle, label),
        "extensions against Spec/fhir/": extension_problems(bundle, conf, label),
        "R5 required bindings and Spec/fhir/ systems": binding_problems(bundle, conf, label),
        "references resolve in the Bundle": reference_problems(bundle, label),
        "transaction requests": transaction_problems(bundle, label),
    }


def option(args, name, default, kind=int):
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            sys.exit("%s needs a value" % name)
        return kind(args[i + 1])
    return default


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    started = time.time()
    binary = os.path.abspath(args[0])
    histories = option(args, "--histories", 1000)
    ledgers = max(1, option(args, "--ledgers", 6))
    seed = option(args, "--seed", random.SystemRandom().randrange(1 << 32))
    edge = "--edge-cases" in args
    print("seed %d (rerun with --seed %d)" % (seed, seed))
    rng = random.Random(seed)

    conf = Conformance.load(SPEC_FHIR)
    invalid = [(path, model_problem(r)) for path, r in conf.resources.items()]
    invalid = ["%s: %s" % (p, e) for p, e in invalid if e]
    check("Spec/fhir/: %d conformance resources (%d StructureDefinitions, %d ValueSets, %d CodeSystems, %d NamingSystems) are valid R5 (fhir.resources)"
          % (len(conf.resources), len(conf.definitions), len(conf.valuesets), len(conf.codesystems), len({id(x) for x in conf.namingsystems.values()})),
          not invalid and len(conf.definitions) >= 2, "; ".join(invalid[:3]))
    problems = [x for sd in conf.definitions.values() for x in structure_problems(sd, conf)]
    check("Spec/fhir/: each StructureDefinition is a complex extension with closed slices, fixed urls, typed and bound values and parsing constraints",
          not problems, "; ".join(problems[:5]))
    problems = swift_problems(conf)
    check("Spec/fhir/ defines every extension, sub-extension, value type, code and system FHIRConsent.swift emits", not problems, "; ".join(problems[:5]))

    work = tempfile.mkdtemp(prefix="consent-fhir-")
    failures = {}
    invariants = Invariants()
    samples = []
    totals = {"subjects": 0, "commands": 0, "events": 0, "refused": 0, "publishes": 0, "bundles": 0, "resources": 0, "sampled": 0}
    try:
        per = math.ceil(histories / ledgers)
        sample_per = max(10, math.ceil(50 / ledgers))
        for n in range(ledgers):
            folder, name, subjects, stats = build_ledger(binary, work, n, rng, per, edge)
            for k in stats:
                totals[k] += stats[k]
            totals["subjects"] += len(subjects)
            view = LedgerView(binary, folder, name)
            out = os.path.join(work, "all-%d.fhir.json" % n)
            run(binary, folder, ["export", "--all", "--format", "fhir", "--out", out])
            with open(out, encoding="utf-8") as f:
                everyone = json.load(f)
            bundles = [("ledger %d --all" % n, everyone)]
            if n == 1 % ledgers:
                run(binary, folder, ["export", "--all", "--format", "fhir", "--fhir-bundle", "transaction", "--out", out])
                with open(out, encoding="utf-8") as f:
                    bundles.append(("ledger %d --all transaction" % n, json.load(f)))
            sampled = rng.sample(subjects, min(sample_per, len(subjects)))
            singles = []
            for sid in sampled[:3]:
                path = os.path.join(work, "one.fhir.json")
                run(binary, folder, ["export", "--subject", sid, "--format", "fhir", "--fhir-bundle", "transaction", "--out", path])
                with open(path, encoding="utf-8") as f:
                    single = json.load(f)
                bundles.append(("ledger %d --subject %r transaction" % (n, sid), single))
                singles.append((sid, single))
            for label, bundle in bundles:
                totals["bundles"] += 1
                totals["resources"] += len(bundle.get("entry", []))
                for group, found in all_checks(bundle, label, conf, invariants).items():
                    failures.setdefault(group, []).extend(found)
            agreement = bundle_agreement_problems(view, everyone, "ledger %d --all" % n, view.subjects, "consents-all")
            for label, bundle in bundles[1:]:
                if "--all" in label:
                    agreement += bundle_agreement_problems(view, bundle, label, view.subjects, "consents-all")
                    agreement += ["%s: its resources differ from the collection's" % label] if [e["resource"] for e in bundle["entry"]] != [e["resource"] for e in everyone["entry"]] else []
            for sid in sampled:
                agreement += agreement_problems(view, everyone, sid, "ledger %d --all" % n)
            for sid, single in singles:
                label = "ledger %d --subject %r" % (n, sid)
                ref = single["entry"][1]["resource"]["identifier"][0]["value"].split("/")[0] if len(single.get("entry", [])) > 1 else ""
                agreement += bundle_agreement_problems(view, single, label, [sid], "consents-" + ref[:12])
                agreement += agreement_problems(view, single, sid, label)
                if [e["resource"] for e in single["entry"]] != [e["resource"] for e in subject_part(everyone, sid)[1]]:
                    agreement.append("%s: its resources differ from those of the --all export" % label)
            totals["sampled"] += len(sampled)
            failures.setdefault("agreement with the ledger", []).extend(agreement)
            samples.append((view, everyone, sampled, singles))
        if edge:
            # A ledger without subjects, exported as a whole.
            folder = os.path.join(work, "empty")
            run(binary, folder, ["init", "--insecure-plaintext-key", "--name", "clinic-empty.example/consents"])
            view = LedgerView(binary, folder, "clinic-empty.example/consents")
            for kind in ("collection", "transaction"):
                out = os.path.join(work, "empty.fhir.json")
                run(binary, folder, ["export", "--all", "--format", "fhir", "--fhir-bundle", kind, "--out", out])
                with open(out, encoding="utf-8") as f:
                    bundle = json.load(f)
                label = "a ledger without subjects, --all %s" % kind
                totals["bundles"] += 1
                for group, found in all_checks(bundle, label, conf, invariants).items():
                    failures.setdefault(group, []).extend(found)
                failures.setdefault("agreement with the ledger", []).extend(bundle_agreement_problems(view, bundle, label, [], "consents-all"))
        check("%d random histories in %d ledgers (%d commands, %d events, %d refused by the rules; %d catalogue versions published)"
              % (totals["subjects"], ledgers, totals["commands"], totals["events"], totals["refused"], totals["publishes"]),
              totals["subjects"] >= histories and totals["events"] > 0)
        seen = coverage([s[1] for s in samples])
        missing = sorted(k for k, n in seen.items() if n == 0)
        summary = ", ".join("%s %d" % (k, n) for k, n in seen.items())
        if histories >= 500 and ledgers >= len(PLANS):
            check("the exports cover every case of the mapping (%s)" % summary, not missing, "none of: " + ", ".join(missing))
        else:
            print("note  the exports cover: %s" % summary)
        scope = "%d Bundles, %d resources" % (totals["bundles"], totals["resources"])
        for group in ["fhir.resources R5 model", "FHIR JSON rules", "FHIRPath invariants", "extensions against Spec/fhir/",
                      "R5 required bindings and Spec/fhir/ systems", "references resolve in the Bundle", "transaction requests", "agreement with the ledger"]:
            found = failures.get(group, [])
            detail = scope
            if group == "FHIRPath invariants":
                detail += ": " + invariants.summary()
            if group == "agreement with the ledger":
                detail += "; every element of %d sampled subjects" % totals["sampled"]
            check("%s (%s)" % (group, detail), not found, "%d problems: %s" % (len(found), " | ".join(found[:4])))
        print("note  warning-level invariants (best practice, not failures): %s" % invariants.warning_summary())

        self_tests(samples, conf)
    finally:
        if "--keep" in args:
            print("kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("%.0f s" % (time.time() - started))
    finish()


# --- negative self-tests -----------------------------------------------------------------------

def self_tests(samples, conf):
    """Each checker must catch the defect it is there for, in a mutated copy of a real Bundle."""
    # A ledger with a new catalogue version if there is one, and in it a small collection: three
    # subjects, the last with an active Consent with deny exceptions.
    candidates = [s for s in samples if s[0].catalog != samples[0][0].catalog] + samples
    candidates = [s for s in candidates if any(e["resource"].get("provision") for e in s[1]["entry"])]
    if not candidates:
        check("the self-tests find a Consent with a deny exception to mutate", False, "run with more --histories")
        return
    view, everyone, sampled, singles = candidates[0]
    width = 1 + len(view.features())
    active = [i for i, e in enumerate(everyone["entry"]) if e["resource"].get("provision")]
    cut = (active[0] // width + 1) * width
    small = dict(everyone, entry=everyone["entry"][max(0, cut - 3 * width):cut])
    consent_at = next(i for i, e in enumerate(small["entry"]) if e["resource"].get("provision"))
    subject = small["entry"][(consent_at // width) * width]["resource"]["identifier"][0]["value"]
    transaction = singles[0][1]

    def consent(b):
        return b["entry"][consent_at]["resource"]

    def state_of(b, given=True):
        for e in consent(b)["extension"]:
            if e["url"] == STATE_URL and any(s.get("valueCode") in (("given", "outdated") if given else ("withheld",)) for s in e["extension"] if s["url"] == "state"):
                return e
        raise LookupError("no such consent-state")

    def sub(b, name, given=True):
        return next(s for s in state_of(b, given)["extension"] if s["url"] == name)

    def rename(d, old, new):
        d[new] = d.pop(old)

    def never_given_with_event(state):
        names = [x["url"] for x in state["extension"]]
        next(x for x in state["extension"] if x["url"] == "reason")["valueCode"] = "never-given"
        if "ledgerEvent" not in names:
            state["extension"] += [{"url": "recordedAt", "valueDateTime": "2026-01-01T00:00:00.000Z"}, {"url": "ledgerEvent", "valueInteger64": "3"}]

    I = Invariants()
    checkers = {
        "fhir.resources R5 model": lambda b: model_problems(b, "mutant"),
        "FHIR JSON rules": lambda b: json_problems(b, "mutant"),
        "FHIRPath invariants": lambda b: I.problems(b, "mutant"),
        "extensions against Spec/fhir/": lambda b: extension_problems(b, conf, "mutant"),
        "R5 required bindings and Spec/fhir/ systems": lambda b: binding_problems(b, conf, "mutant"),
        "references resolve in the Bundle": lambda b: reference_problems(b, "mutant"),
        "transaction requests": lambda b: transaction_problems(b, "mutant"),
        "agreement with the ledger": lambda b: agreement_problems(view, b, subject, "mutant"),
    }
    cases = [
        ("fhir.resources R5 model", "a Consent without status", small, lambda b: consent(b).pop("status")),
        ("fhir.resources R5 model", "an element R5 does not define", small, lambda b: consent(b).__setitem__("colour", "red")),
        ("fhir.resources R5 model", "a date that is not a date", small, lambda b: consent(b).__setitem__("date", "24.11.2026")),
        ("FHIR JSON rules", "a null", small, lambda b: consent(b).__setitem__("date", None)),
        ("FHIR JSON rules", "an empty array", small, lambda b: consent(b).__setitem__("category", [])),
        ("FHIRPath invariants", "a period that ends before it starts (per-1)", small, lambda b: consent(b).__setitem__("period", {"start": "2026-02-01T00:00:00Z", "end": "2026-01-31T10:00:00+01:00"})),
        ("FHIRPath invariants", "two entries with one fullUrl (bdl-7)", small, lambda b: b["entry"][1].__setitem__("fullUrl", b["entry"][0]["fullUrl"])),
        ("FHIRPath invariants", "a request in a collection (bdl-3a)", small, lambda b: b["entry"][0].__setitem__("request", {"method": "POST", "url": "Patient"})),
        ("FHIRPath invariants", "a transaction entry without a request (bdl-3c)", transaction, lambda b: b["entry"][1].pop("request")),
        ("FHIRPath invariants", "a version-specific fullUrl (bdl-8)", small, lambda b: b["entry"][0].__setitem__("fullUrl", "https://example.org/fhir/Patient/1/_history/2")),
        ("FHIRPath invariants", "an extension with a value and sub-extensions (ext-1)", small, lambda b: state_of(b).__setitem__("valueString", "x")),
        ("FHIRPath invariants", "a sub-extension with neither value nor extensions (ext-1)", small, lambda b: state_of(b)["extension"].append({"url": "channel"})),
        ("FHIRPath invariants", "an element with no value and no children (ele-1)", small, lambda b: consent(b).__setitem__("policyBasis", {"id": "x"})),
        ("FHIRPath invariants", "a reference with nothing to refer by (ref-2)", small, lambda b: consent(b)["sourceReference"].append({"type": "DocumentReference"})),
        ("FHIRPath invariants", "a local reference to nothing contained (ref-1)", small, lambda b: consent(b)["subject"].__setitem__("reference", "#nobody")),
        ("FHIRPath invariants", "a contained resource nothing refers to (dom-3)", small, lambda b: consent(b).__setitem__("contained", [{"resourceType": "Patient", "id": "p1", "active": True}])),
        ("extensions against Spec/fhir/", "an unknown sub-extension", small, lambda b: state_of(b)["extension"].append({"url": "colour", "valueCode": "red"})),
        ("extensions against Spec/fhir/", "a value of the wrong type", small, lambda b: rename(sub(b, "consent"), "valueCode", "valueString")),
        ("extensions against Spec/fhir/", "a code outside its ValueSet", small, lambda b: sub(b, "state").__setitem__("valueCode", "revoked")),
        ("extensions against Spec/fhir/", "a missing required sub-extension", small, lambda b: state_of(b).__setitem__("extension", [s for s in state_of(b)["extension"] if s["url"] != "policyVersion"])),
        ("extensions against Spec/fhir/", "a sub-extension twice", small, lambda b: state_of(b)["extension"].append(copy.deepcopy(sub(b, "state")))),
        ("extensions against Spec/fhir/", "a value on a complex extension", small, lambda b: state_of(b).__setitem__("valueString", "x")),
        ("extensions against Spec/fhir/", "an extension with no StructureDefinition", small, lambda b: consent(b)["extension"].append({"url": "https://example.org/x", "valueString": "y"})),
        ("extensions against Spec/fhir/", "a second checkpoint", small, lambda b: consent(b)["extension"].append(copy.deepcopy(consent(b)["extension"][0]))),
        ("extensions against Spec/fhir/", "an extension outside its context", small, lambda b: b["entry"][0]["resource"].__setitem__("extension", [copy.deepcopy(consent(b)["extension"][0])])),
        ("extensions against Spec/fhir/", "a dateTime that is not one", small, lambda b: sub(b, "recordedAt").__setitem__("valueDateTime", "2026-11-24 10:00")),
        ("extensions against Spec/fhir/", "a notice language that is not BCP 47", small, lambda b: state_of(b)["extension"].insert(-1, {"url": "noticeLanguage", "valueCode": "deutsch!"})),
        ("extensions against Spec/fhir/", "a reason on a given consent (constraint cst-1)", small, lambda b: state_of(b)["extension"].insert(2, {"url": "reason", "valueCode": "withdrawn"})),
        ("extensions against Spec/fhir/", "an outdated state with the version in force (constraint cst-3)", small, lambda b: sub(b, "givenPolicyVersion").__setitem__("valueString", sub(b, "policyVersion")["valueString"] + ("" if sub(b, "state")["valueCode"] == "outdated" else ".old"))),
        ("extensions against Spec/fhir/", "a never-given consent with a ledger event (constraint cst-5)", small, lambda b: never_given_with_event(state_of(b, given=False))),
        ("R5 required bindings and Spec/fhir/ systems", "a Consent.status outside consent-state-codes", small, lambda b: consent(b).__setitem__("status", "revoked")),
        ("R5 required bindings and Spec/fhir/ systems", "a Consent.decision outside consent-provision-type", small, lambda b: consent(b).__setitem__("decision", "allow")),
        ("R5 required bindings and Spec/fhir/ systems", "a system Spec/fhir/ does not define", small, lambda b: consent(b)["category"][0]["coding"][0].__setitem__("system", BASE + "CodeSystem/features")),
        ("references resolve in the Bundle", "a subject reference to no entry", small, lambda b: consent(b)["subject"].__setitem__("reference", "urn:uuid:00000000-0000-8000-a000-000000000000")),
        ("references resolve in the Bundle", "a subject reference to a Consent", small, lambda b: consent(b)["subject"].__setitem__("reference", b["entry"][consent_at]["fullUrl"])),
        ("transaction requests", "a conditional create for another subject", transaction, lambda b: b["entry"][0]["request"].__setitem__("ifNoneExist", "identifier=" + quote(SUBJECT_SYSTEM + "|someone-else", safe=""))),
        ("transaction requests", "a conditional update for another record", transaction, lambda b: b["entry"][1]["request"].__setitem__("url", b["entry"][2]["request"]["url"])),
        ("transaction requests", "a subject id with a comma, unescaped in the search", transaction, lambda b: (b["entry"][0]["resource"]["identifier"][0].__setitem__("value", "a,b"),
                                                                                                              b["entry"][0]["request"].__setitem__("ifNoneExist", "identifier=" + quote(SUBJECT_SYSTEM + "|a,b", safe="")))),
        ("agreement with the ledger", "a permit the ledger does not give", small, lambda b: (consent(b).__setitem__("decision", "deny"), consent(b).__setitem__("status", "inactive"))),
        ("agreement with the ledger", "a deny exception dropped", small, lambda b: consent(b)["provision"].pop()),
        ("agreement with the ledger", "a consent-state that says given for a withheld consent", small, lambda b: sub(b, "state", given=False).__setitem__("valueCode", "given")),
        ("agreement with the ledger", "another ledger event", small, lambda b: sub(b, "ledgerEvent").__setitem__("valueInteger64", str(int(sub(b, "ledgerEvent")["valueInteger64"]) + 1))),
        ("agreement with the ledger", "another checkpoint size", small, lambda b: consent(b)["extension"][0]["extension"][1].__setitem__("valueInteger64", "1")),
        ("agreement with the ledger", "another period start", small, lambda b: consent(b)["period"].__setitem__("start", "2001-01-01T00:00:00.000Z")),
    ]
    # The checks of Spec/fhir/ itself, on altered copies of its resources.
    state_file = next(p for p, r in conf.resources.items() if r.get("url") == STATE_URL)

    def altered(change):
        resources = copy.deepcopy(conf.resources)
        change(resources[state_file], resources)
        return Conformance(resources)

    def element(sd, element_id):
        return next(e for e in sd["differential"]["element"] if e["id"] == element_id)

    def drop_slice(sd, name):
        sd["differential"]["element"] = [e for e in sd["differential"]["element"] if not (e["id"] == "Extension.extension:" + name or e["id"].startswith("Extension.extension:%s." % name))]

    spec_cases = [
        ("a StructureDefinition without status", "model", lambda sd, rs: sd.pop("status")),
        ("a ValueSet concept that is not a concept", "model", lambda sd, rs: [r["compose"]["include"][0]["concept"].append({"display": "no code"}) for r in rs.values() if r.get("resourceType") == "ValueSet"]),
        ("a slice whose url is not fixed", "structure", lambda sd, rs: element(sd, "Extension.extension:state.url").pop("fixedUri")),
        ("open slicing", "structure", lambda sd, rs: element(sd, "Extension.extension")["slicing"].__setitem__("rules", "open")),
        ("a complex extension that allows a value", "structure", lambda sd, rs: element(sd, "Extension.value[x]").__setitem__("max", "1")),
        ("kind resource", "structure", lambda sd, rs: sd.__setitem__("kind", "resource")),
        ("a binding to a ValueSet Spec/fhir/ lacks", "structure", lambda sd, rs: element(sd, "Extension.extension:reason.value[x]")["binding"].__setitem__("valueSet", BASE + "ValueSet/reasons")),
        ("a sub-extension FHIRConsent.swift emits but no StructureDefinition defines", "swift", lambda sd, rs: drop_slice(sd, "channel")),
        ("a value type FHIRConsent.swift does not emit", "swift", lambda sd, rs: element(sd, "Extension.extension:ledgerEvent.value[x]").__setitem__("type", [{"code": "integer"}])),
        ("a code FHIRConsent.swift emits missing from its ValueSet", "swift", lambda sd, rs: [r["compose"]["include"][0].__setitem__("concept", r["compose"]["include"][0]["concept"][:-1]) for r in rs.values() if r.get("url") == BASE + "ValueSet/withheld-reason"]),
        ("a system FHIRConsent.swift uses without a NamingSystem", "swift", lambda sd, rs: [r.__setitem__("uniqueId", [{"type": "uri", "value": BASE + "NamingSystem/other"}]) for r in rs.values() if r.get("url") == EVENT_SYSTEM]),
    ]
    for what, which, change in spec_cases:
        other = altered(change)
        if which == "model":
            caught = [e for e in (model_problem(r) for r in other.resources.values()) if e]
        elif which == "structure":
            caught = [x for sd in other.definitions.values() for x in structure_problems(sd, other)]
        else:
            caught = swift_problems(other)
        title = {"model": "fhir.resources", "structure": "StructureDefinition", "swift": "FHIRConsent.swift"}[which]
        check("the %s check of Spec/fhir/ catches %s" % (title, what), bool(caught), "" if caught else "not caught")

    for name, checker in checkers.items():
        found = checker(copy.deepcopy(small if name != "transaction requests" else transaction))
        check("%s passes the unchanged Bundle its self-tests mutate" % name, not found, "; ".join(found[:2]))
    for name, what, base, change in cases:
        mutant = copy.deepcopy(base)
        try:
            change(mutant)
        except (LookupError, KeyError, IndexError) as e:
            check("%s catches %s" % (name, what), False, "the sample has nothing to mutate (%r)" % e)
            continue
        caught = checkers[name](mutant)
        # A case named after an invariant or constraint must be caught by that one.
        key = re.search(r"\((?:constraint )?([a-z]+-\d+[a-z]?)\)", what)
        if key:
            caught = [c for c in caught if re.search(r"\b%s\b" % key.group(1), c)]
        check("%s catches %s" % (name, what), bool(caught), "" if caught else "not caught")


if __name__ == "__main__":
    main()
