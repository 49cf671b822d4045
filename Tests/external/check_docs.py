#!/usr/bin/env python3
"""The documentation's links, length and wording.

    python3 Tests/external/check_docs.py

- Every relative link in README.md, docs/, Spec/ and Samples/ points at a file of the
  repository, and every #anchor at a heading (GitHub's slugs) or an explicit <a id> there.
- README.md stays a first screen and a tour: at most 200 lines.
- No tracked file names the project's internal history (the seed documents, issue numbers).
"""
import os
import re
import subprocess
import sys

from tally import check, finish

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def tracked():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\n") if p]


def slug(heading):
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    names = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"#{1,6} (.*)", line)
            if m:
                base, n = slug(m.group(1)), 1
                name = base
                while name in names:
                    name, n = "%s-%d" % (base, n), n + 1
                names.add(name)
            names.update(re.findall(r'<a id="([^"]+)"', line))
    return names


def main():
    files = tracked()
    markdown = [p for p in files if p.endswith(".md") and (p == "README.md" or p.split("/")[0] in ("docs", "Spec", "Samples"))]
    links = 0
    for doc in markdown:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            links += 1
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(os.path.join(ROOT, doc)), path)) if path else os.path.join(ROOT, doc)
            if not os.path.exists(resolved):
                check("%s links to %s" % (doc, target), False, "no such file")
                continue
            if anchor and resolved.endswith(".md"):
                found = anchor in anchors(resolved)
                check("%s links to %s" % (doc, target), found, "no heading or <a id> '%s' in %s" % (anchor, os.path.relpath(resolved, ROOT)))
    check("%d relative links in %d Markdown files resolve" % (links, len(markdown)), links > 0)
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().count("\n")
    check("README.md is at most 200 lines (%d)" % readme, readme <= 200)
    history = re.compile(r"\bseeds?/0\d\d|\bseed 00\d\b|\bissue #?\d+\b|shared/consent-rules", re.I)
    offenders = []
    for p in files:
        if p.startswith(("Tests/external/check_docs.py",)) or not p.endswith((".md", ".swift", ".py", ".sh", ".yaml", ".json", "Makefile")):
            continue
        try:
            text = open(os.path.join(ROOT, p), encoding="utf-8").read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        offenders += ["%s: %s" % (p, m.group(0)) for m in history.finditer(text)]
    check("no file names internal history (seed documents, issue numbers)", not offenders, "; ".join(offenders[:5]))
    finish()


if __name__ == "__main__":
    main()
