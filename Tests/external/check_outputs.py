#!/usr/bin/env python3
"""Checks consentctl's outputs with real outside tools:

- the FHIR R5 Consent export validates against the official R5 definitions (fhir.resources 8.x,
  pydantic models generated from the FHIR R5 StructureDefinitions), plus the required value-set
  bindings those models do not enforce (Consent.status, Consent.decision);
- the HTML report loads in a real headless browser (Debian's chromium) without script errors,
  draws its SVG timelines, and renders to a PNG; it fetches nothing;
- the CSV report parses back with Python's csv module and agrees with the JSON report.

Usage: check_outputs.py PATH/TO/consentctl. Ends with 'N passed, M failed'; exit 0 only if M == 0.
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from tally import check, finish



def run(*args, ok=True):
    p = subprocess.run([CONSENTCTL, *args], capture_output=True, text=True, env=ENV)
    if ok and p.returncode != 0:
        raise SystemExit("consentctl %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
    return p


CONSENTCTL = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp(prefix="consentledger-external-")
ENV = dict(os.environ, CONSENTCTL_LEDGER=os.path.join(work, "ledger"))
try:
    run("init", "--insecure-plaintext-key", "--name", "clinic.example/consents")
    run("give", "--subject", "alice", "--feature", "medication-management", "--consent", "required", "--consent", "optional-a")
    run("give", "--subject", "alice", "--feature", "timeline", "--consent", "required", "--consent", "optional-a", "--consent", "optional-b")
    run("revoke", "--subject", "alice", "--feature", "medication-management", "--consent", "required")
    run("give", "--subject", "bob", "--feature", "timeline", "--consent", "required")
    # The catalogue file as `catalog show --format json` prints it, edited: the next version.
    v2 = json.loads(run("catalog", "show", "--format", "json").stdout)
    for f in v2["features"]:
        for c in f["consents"]:
            if f["key"] == "timeline" and c["code"] == "required":
                c["version"] = "2.0"
    with open(os.path.join(work, "catalog-v2.json"), "w") as fh:
        json.dump(v2, fh)
    run("catalog", "publish", os.path.join(work, "catalog-v2.json"))
    run("give", "--subject", "alice", "--feature", "timeline", "--consent", "required")

    # FHIR R5 -------------------------------------------------------------------------------
    from fhir.resources.bundle import Bundle
    consent_states = {"draft", "active", "inactive", "not-done", "entered-in-error", "unknown"}
    for subject in ["alice", "bob"]:
        path = os.path.join(work, subject + ".fhir.json")
        run("export", "--subject", subject, "--format", "fhir", "--out", path)
        text = open(path).read()
        try:
            bundle = Bundle.model_validate_json(text)
            check("FHIR R5: %s's Bundle validates (fhir.resources %s)" % (subject, __import__("fhir.resources").resources.__version__), True)
        except Exception as err:  # noqa: BLE001 - report any validation failure
            check("FHIR R5: %s's Bundle validates" % subject, False, str(err)[:400])
            continue
        data = json.loads(text)
        kinds = [e["resource"]["resourceType"] for e in data["entry"]]
        check("FHIR: %s's Bundle is a collection of a Patient and 2 Consents" % subject, data["type"] == "collection" and kinds == ["Patient", "Consent", "Consent"], str(kinds))
        patient_url = data["entry"][0]["fullUrl"]
        for entry in data["entry"][1:]:
            c = entry["resource"]
            check("FHIR: %s status binding (ConsentState)" % c["id"], c["status"] in consent_states, c["status"])
            check("FHIR: %s decision binding (ConsentProvisionType)" % c["id"], c["decision"] in ("permit", "deny"))
            check("FHIR: %s decision follows status" % c["id"], (c["status"] == "active") == (c["decision"] == "permit"))
            check("FHIR: %s references its Patient" % c["id"], c["subject"]["reference"] == patient_url and c["subject"]["identifier"]["value"] == subject)
            check("FHIR: %s names the checkpoint" % c["id"], any(x["url"].endswith("/ledger-checkpoint") for x in c["extension"]))
        by_key = {e["resource"]["category"][0]["coding"][0]["code"]: e["resource"] for e in data["entry"][1:]}
        def states(consent):
            out = {}
            for x in consent["extension"]:
                if x["url"].endswith("/consent-state"):
                    parts = {p["url"]: next(v for k, v in p.items() if k.startswith("value")) for p in x["extension"]}
                    out[parts["consent"]] = parts
            return out
        if subject == "alice":
            tl = by_key["timeline"]
            check("FHIR: alice's Timeline is active after re-consent", tl["status"] == "active")
            check("FHIR: alice's Timeline permits with no exception: both optional consents are given", "provision" not in tl, str(tl.get("provision")))
            mm = by_key["medication-management"]
            check("FHIR: alice's Medication Management is inactive after the cascade, with no exception", mm["status"] == "inactive" and "provision" not in mm)
            check("FHIR: the cascade is the reason of the optional consent's state", states(mm)["optional-a"].get("reason") == "cascade-withdrawn", str(states(mm)))
        else:
            tl = states(by_key["timeline"])
            check("FHIR: bob's Timeline is inactive and its required consent outdated",
                  by_key["timeline"]["status"] == "inactive" and tl["required"]["state"] == "outdated", str(tl))

    # HTML in a real browser ------------------------------------------------------------------
    html = os.path.join(work, "report.html")
    run("report", "--format", "html", "--out", html)
    page = open(html).read()
    check("HTML: self-contained (no external script, style, image or font)",
          not re.search(r'<script[^>]+src=|<link\b|<img\b|@import|url\(', page))
    check("HTML: the page forbids every fetch itself (Content-Security-Policy default-src 'none')",
          "default-src 'none'" in page and not re.search(r"fetch\(|XMLHttpRequest|src=", page))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        check("HTML: chromium is installed", False, "install Debian's chromium (make test does)")
    else:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]

        def rendered(url):
            dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
            body = re.search(r"<body([^>]*)>", dom)
            return dom, (dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body.group(1))) if body else {})

        dom, attrs = rendered("file://" + html)
        entries = [e for e in json.loads(run("report", "--format", "json").stdout)["events"]]
        check("HTML: the page loaded and its script ran in chromium", attrs.get("data-rendered") == "ok", str(attrs))
        check("HTML: no script errors", attrs.get("data-errors", "missing") == "", attrs.get("data-errors", "missing"))
        check("HTML: one chart, one time axis shared by every subject", attrs.get("data-axis") == "shared"
              and dom.count('<svg class="chart"') == 1 and dom.count('<g class="axis">') == 1, str(attrs))
        check("HTML: a marker for every subject event", int(attrs.get("data-markers", "0")) == len([e for e in entries if e["type"] != "policy-change"]), str(attrs))
        for kind in ["given", "re-consent", "withdrawn", "cascade-withdrawn"]:
            check("HTML: %s events have their marker" % kind, dom.count('class="marker %s"' % kind) == len([e for e in entries if e["type"] == kind]))
        check("HTML: the policy change is a line across the chart", int(attrs.get("data-policy-lines", "0")) == 1)
        check("HTML: the cascade is linked to its cause", int(attrs.get("data-cause-links", "0")) == len([e for e in entries if e["type"] == "cascade-withdrawn"]))
        check("HTML: the policy versions are on the bars", re.search(r'<text [^>]*class="version"[^>]*>v[0-9.]+</text>', dom) is not None)
        check("HTML: the legend comes before the chart", 0 <= int(attrs.get("data-legend-position", "-1")) < int(attrs.get("data-chart-position", "-1")), str(attrs))
        check("HTML: a summary card per subject", int(attrs.get("data-cards", "0")) == 2)
        check("HTML: the event table lists every event, by seq", int(attrs.get("data-table-rows", "0")) == len(entries) and attrs.get("data-first-row") == "1")
        _, sorted_attrs = rendered("file://" + html + "#sort=0:desc")
        check("HTML: the event table sorts in the browser (seq, descending)", sorted_attrs.get("data-first-row") == str(entries[-1]["seq"]), str(sorted_attrs))
        _, filtered = rendered("file://" + html + "#filter=bob&type=given")
        check("HTML: the event table filters in the browser (subject and type)",
              int(filtered.get("data-table-rows", "-1")) == len([e for e in entries if e.get("subject") == "bob" and e["type"] == "given"]), str(filtered))
        png = os.path.join(work, "report.png")
        subprocess.run([chromium, *flags, "--window-size=1200,1600", "--screenshot=" + png, "file://" + html], capture_output=True, timeout=120)
        check("HTML: chromium renders it to a PNG", os.path.exists(png) and os.path.getsize(png) > 10000,
              str(os.path.getsize(png)) if os.path.exists(png) else "no file")
        if os.environ.get("REPORT_PNG"):
            shutil.copy(png, os.environ["REPORT_PNG"])

        # The patient's page: in their language, self-contained.
        patient = os.path.join(work, "alice.html")
        run("export", "--subject", "alice", "--format", "html", "--lang", "de", "--out", patient)
        pdom, _ = rendered("file://" + patient)
        check("HTML: the patient's page renders in German with what was consented to",
              'lang="de"' in pdom and "Ihre Einwilligungen" in pdom and "erteilt" in pdom)

    # CSV parses back and agrees with JSON ----------------------------------------------------
    rows = list(csv.DictReader(io.StringIO(run("report", "--format", "csv").stdout)))
    report = json.loads(run("report", "--format", "json").stdout)
    sections = {r["section"] for r in rows}
    check("CSV: parses with the section column", {"checkpoint", "event", "count", "active", "withdrawal"} <= sections, str(sections))
    check("CSV: one entry row per JSON event", len([r for r in rows if r["section"] == "event"]) == len(report["events"]))
    check("CSV: counts agree with JSON", sorted((r["feature"], r["consent"], int(r["given"]), int(r["re-consent"]), int(r["withdrawn"]), int(r["cascade-withdrawn"])) for r in rows if r["section"] == "count")
          == sorted((c["feature"], c["consent"], c["given"], c["re-consent"], c["withdrawn"], c["cascade-withdrawn"]) for c in report["counts"]))
    check("CSV: the checkpoint row names the JSON checkpoint", [r["value"] for r in rows if r["section"] == "checkpoint"]
          == ["%s %d %s" % (report["checkpoint"]["origin"], report["checkpoint"]["size"], report["checkpoint"]["root"])])
    check("report: the policy change and the re-consent are listed",
          [e["type"] for e in report["events"]].count("policy-change") == 1 and [e["type"] for e in report["events"]].count("re-consent") == 1)
    check("report: bob is listed with an outdated consent", [(o["subject"], o["consent"]) for o in report["outdated"]] == [("bob", "required")])
finally:
    shutil.rmtree(work, ignore_errors=True)

finish()
