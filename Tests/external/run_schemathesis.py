#!/usr/bin/env python3
"""Runs schemathesis against the HTTP service (Samples/ConsentService) and Spec/openapi.yaml:
requests generated from the document (its examples, the coverage of each parameter, fuzzed
values, and stateful sequences that follow one response with the next request), each response
checked for a server error (5xx), a status the operation does not declare, a body or headers
that break the document, and an undeclared method not answered with 405.

Usage: run_schemathesis.py PATH/TO/consent-service [STORE] [MAX_EXAMPLES]. STORE is a new folder by
default, or a postgres:// URL naming an unused schema. The token is the subject alice's, and
every path names alice (others get 403, which says nothing new). Prints the number of test cases
run and exits non-zero on any failure.

Not checked: that every request the document allows is accepted (schemathesis's
positive_data_acceptance). The document cannot list a ledger's features and consents, so a
well-formed request naming an unknown one gets 400 by design.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,unsupported_method"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    binary = sys.argv[1]
    work = tempfile.mkdtemp(prefix="consent-schemathesis-")
    store = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else os.path.join(work, "ledger")
    max_examples = sys.argv[3] if len(sys.argv) > 3 else "25"
    key = os.path.join(work, "token.key")
    ledger_key = ["--key-file", os.path.join(work, "ledger.key")] if store.startswith("postgres") else []
    port = free_port()
    server = subprocess.Popen([binary, "serve", "--store", store, "--port", str(port), "--token-key", key, "--insecure-plaintext-key"] + ledger_key,
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "service.log"), "w"))
    try:
        base = "http://127.0.0.1:%d" % port
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/v1/principal", timeout=1)
            except urllib.error.HTTPError:
                break  # 401: it answers
            except OSError:
                time.sleep(0.1)
        token = subprocess.run([binary, "token", "--subject", "alice", "--token-key", key], capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(work, "schemathesis.toml"), "w") as config:
            config.write('[parameters]\n"path.subject" = "alice"\n')
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", os.path.join(work, "schemathesis.toml"), "run", os.path.join(ROOT, "Spec", "openapi.yaml"),
             "--url", base, "-H", "Authorization: Bearer " + token, "--checks", CHECKS,
             "--max-examples", max_examples, "--phases", "examples,coverage,fuzzing,stateful", "--seed", "1", "--no-color"],
            capture_output=True, text=True, cwd=work, timeout=900)
        output = run.stdout + run.stderr
        cases = re.search(r"(\d+) generated", output)
        print("schemathesis on %s: %s test cases, exit %d" % ("PostgreSQL" if store.startswith("postgres") else "a folder", cases.group(1) if cases else "?", run.returncode))
        if run.returncode != 0:
            print(output[-6000:])
            sys.exit(1)
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
