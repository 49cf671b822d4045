#!/usr/bin/env python3
"""Runs the HTTP service (Samples/ConsentService) on a loopback port and checks every response
against Spec/openapi.yaml: the status must be one the operation declares, and the JSON body must
validate against the declared schema (JSON Schema 2020-12, as OpenAPI 3.1 uses).

Usage: check_service.py PATH/TO/consent-service [STORE]. STORE is where the service keeps the
ledger: a new folder by default, or a postgres:// URL naming an unused schema (make test runs
both). Ends with 'N passed, M failed'.
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec

from tally import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = yaml.safe_load(open(os.path.join(ROOT, "Spec", "openapi.yaml")))


def pointer(*parts):
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def response_schema_pointer(template, method, status):
    responses = SPEC["paths"][template][method]["responses"]
    if str(status) not in responses:
        return None, None
    response = responses[str(status)]
    base = ["paths", template, method, "responses", str(status)]
    if "$ref" in response:
        base = response["$ref"][2:].split("/")
        response = SPEC[base[0]][base[1]][base[2]]
    return response, pointer(*base, "content", "application/json", "schema")


def validate_response(name, template, method, status, body):
    response, ptr = response_schema_pointer(template, method, status)
    if response is None:
        check(name + ": status %d is declared" % status, False, "not in the spec")
        return
    wrapper = dict(SPEC)
    wrapper["$ref"] = ptr
    errors = list(Draft202012Validator(wrapper).iter_errors(body))
    check(name + ": %d body matches the spec" % status, not errors, "; ".join(e.message for e in errors[:3]))


def call(base, method, path, token=None, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method=method.upper())
    if token:
        request.add_header("Authorization", "Bearer " + token)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_until_up(base):
    """Waits (up to 10 s) until the service answers: an unauthenticated call gets its 401."""
    for _ in range(100):
        try:
            if call(base, "get", "/v1/checkpoint")[0] == 401:
                return
        except OSError:
            time.sleep(0.1)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def idp_token(signing_key, kid, sub, now, lifetime=600, iss="consent-service", aud="consent-service"):
    """A JWT as an identity provider signs it: EdDSA over Ed25519 (RFC 8037), written from RFC 7519
    with PyNaCl, independently of jwt-kit."""
    header = b64url(json.dumps({"alg": "EdDSA", "kid": kid, "typ": "JWT"}).encode())
    claims = b64url(json.dumps({"iss": iss, "aud": aud, "sub": sub, "role": "subject", "iat": now, "exp": now + lifetime, "jti": os.urandom(8).hex()}).encode())
    signature = signing_key.sign((header + "." + claims).encode()).signature
    return header + "." + claims + "." + b64url(signature)


def check_jwks_url(binary, work):
    """--jwks URL: the identity provider's keys fetched at start; its tokens are accepted, a key it
    does not list is not, and http from another machine is refused."""
    import http.server
    import threading
    import nacl.signing
    idp = nacl.signing.SigningKey.generate()
    jwks = json.dumps({"keys": [{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": "idp-1", "x": b64url(bytes(idp.verify_key))}]}).encode()

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/jwks.json" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(jwks if self.path == "/jwks.json" else b"{}")

        def log_message(self, *args):
            pass

    keys = http.server.HTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=keys.serve_forever, daemon=True).start()
    port = free_port()
    url = "http://127.0.0.1:%d/jwks.json" % keys.server_address[1]
    service = subprocess.Popen([binary, "serve", "--store", os.path.join(work, "jwks-ledger"), "--port", str(port), "--token-key", os.path.join(work, "jwks-token.key"),
                                "--insecure-plaintext-key", "--jwks", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % port
    try:
        wait_until_up(base)
        now = int(time.time())
        status, _ = call(base, "get", "/v1/subjects/alice/active", idp_token(idp, "idp-1", "alice", now))
        check("--jwks URL: a token of the identity provider's listed key is accepted", status == 200, "got %d" % status)
        status, _ = call(base, "get", "/v1/subjects/alice/active", idp_token(nacl.signing.SigningKey.generate(), "idp-1", "alice", now))
        check("--jwks URL: a token signed by a key the JWKS does not list is refused (401)", status == 401, "got %d" % status)
    finally:
        service.terminate()
        service.wait(timeout=10)
        keys.shutdown()
    r = subprocess.run([binary, "serve", "--store", os.path.join(work, "jwks-ledger"), "--port", str(free_port()), "--token-key", os.path.join(work, "jwks-token.key"),
                        "--jwks", "http://idp.example/jwks.json"], capture_output=True, text=True, timeout=60)
    check("--jwks over http from another machine is refused (64)", r.returncode == 64 and "fetched over https" in r.stderr, r.stderr.strip()[:200])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


binary = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp(prefix="consent-service-check-")
store = sys.argv[2] if len(sys.argv) > 2 else os.path.join(work, "ledger")
print("== service on %s" % ("PostgreSQL" if store.startswith("postgres") else "the file store"))
port = free_port()
key = os.path.join(work, "token.key")
# A PostgreSQL store keeps no signing key: the service brings a key file of its own.
ledger_key = ["--key-file", os.path.join(work, "ledger.key")] if store.startswith("postgres") else []
server = subprocess.Popen([binary, "serve", "--store", store, "--port", str(port), "--token-key", key, "--insecure-plaintext-key"] + ledger_key,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = "http://127.0.0.1:%d" % port
try:
    validate_spec(SPEC)
    check("Spec/openapi.yaml is a valid OpenAPI 3.1 document", True)
    wait_until_up(base)
    token = lambda *args: subprocess.run([binary, "token", *args, "--token-key", key], capture_output=True, text=True, check=True).stdout.strip()
    alice, bob, auditor = token("--subject", "alice"), token("--subject", "bob"), token("--auditor", "dpo")
    T = "/v1/subjects/{subject}"
    cases = [
        ("activate", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", alice, {"consents": ["required", "optional-a"]}, 200),
        ("feature", "get", T + "/features/{feature}", "/v1/subjects/alice/features/2", alice, None, 200),
        ("active", "get", T + "/active", "/v1/subjects/alice/active", alice, None, 200),
        ("status as auditor", "get", T + "/status", "/v1/subjects/alice/status", auditor, None, 200),
        ("status at a date", "get", T + "/status", "/v1/subjects/alice/status?at=2000-01-01", alice, None, 200),
        ("revoke", "post", T + "/features/{feature}/revoke", "/v1/subjects/alice/features/timeline/revoke", alice, {"consent": "required"}, 200),
        ("history", "get", T + "/history", "/v1/subjects/alice/history", alice, None, 200),
        ("checkpoint", "get", "/v1/checkpoint", "/v1/checkpoint", auditor, None, 200),
        ("principal", "get", "/v1/principal", "/v1/principal", alice, None, 200),
        ("principal as auditor", "get", "/v1/principal", "/v1/principal", auditor, None, 200),
        ("principal without a token", "get", "/v1/principal", "/v1/principal", None, None, 401),
        ("export", "get", T + "/export", "/v1/subjects/alice/export", alice, None, 200),
        ("no token", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", None, {"consents": ["required"]}, 401),
        ("bad token", "get", T + "/active", "/v1/subjects/alice/active", "v1.x.y", None, 401),
        ("other subject", "get", T + "/history", "/v1/subjects/alice/history", bob, None, 403),
        ("auditor write", "post", T + "/features/{feature}/revoke", "/v1/subjects/alice/features/timeline/revoke", auditor, {"consent": "optional-a"}, 403),
        ("malformed JSON", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", alice, b'{"consents": [', 400),
        ("bad time", "get", T + "/status", "/v1/subjects/alice/status?at=yesterday", alice, None, 400),
        ("unknown feature", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/diary/activate", alice, {"consents": ["required"]}, 404),
        ("rule violation", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", alice, {"consents": ["optional-b"]}, 409),
        ("too large", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", alice, {"consents": ["x" * 20000]}, 413),
        ("an actor in the body", "post", T + "/features/{feature}/activate", "/v1/subjects/alice/features/timeline/activate", alice, {"consents": ["required"], "actor": "dr.house"}, 400),
        # Bob asks to be forgotten: an auditor cannot ask for him, he can, once.
        ("bob activates", "post", T + "/features/{feature}/activate", "/v1/subjects/bob/features/timeline/activate", bob, {"consents": ["required"]}, 200),
        ("erase as auditor", "post", T + "/erase", "/v1/subjects/bob/erase", auditor, {}, 403),
        ("erase another subject", "post", T + "/erase", "/v1/subjects/bob/erase", alice, {}, 403),
        ("erase with a reason too long", "post", T + "/erase", "/v1/subjects/bob/erase", bob, {"reason": "x" * 201}, 400),
        ("erase", "post", T + "/erase", "/v1/subjects/bob/erase", bob, {"reason": "request 9"}, 200),
        ("erase again", "post", T + "/erase", "/v1/subjects/bob/erase", bob, {}, 404),
        ("status after erasure", "get", T + "/history", "/v1/subjects/bob/history", bob, None, 200),
    ]
    for name, method, template, path, tok, body, expected in cases:
        status, payload = call(base, method, path, tok, body)
        check("%s: status %d" % (name, expected), status == expected, "got %d: %s" % (status, str(payload)[:200]))
        validate_response(name, template, method, status, payload)
    check("principal names the token's subject", call(base, "get", "/v1/principal", alice)[1] == {"role": "subject", "id": "alice"})
    # The token is a JWT: three base64url parts, EdDSA, with the claims the spec names.
    header, claims = (json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in alice.split(".")[:2])
    check("a token is a JWT signed with EdDSA", header.get("alg") == "EdDSA" and len(alice.split(".")) == 3, str(header))
    check("its claims: iss, aud, sub, role, iat, exp, jti", {"iss", "aud", "sub", "role", "iat", "exp", "jti"} <= set(claims) and claims["sub"] == "alice"
          and claims["role"] == "subject" and claims["exp"] - claims["iat"] <= 12 * 3600, str(claims))
    # Integer options are range-checked: a lifetime near Int64.max is a usage error, not a trap.
    for ttl in ("9223372036854775807", "0", "-5", "x"):
        r = subprocess.run([binary, "token", "--subject", "alice", "--ttl", ttl, "--token-key", key], capture_output=True, text=True)
        check("token --ttl %s is refused (64) with the range" % ttl, r.returncode == 64 and "--ttl must be a whole number from 1 to 43200" in r.stderr, r.stderr.strip()[:200])
    # A token key that cannot be used stops the service; it is never replaced by a new key.
    for name, content, mode in (("crlf", None, 0o600), ("garbled", b"not a key\n", 0o600), ("readable by others", None, 0o644)):
        bad = os.path.join(work, "bad-%s.key" % name.replace(" ", "-"))
        with open(key, "rb") as f:
            good = f.read()
        data = good.rstrip(b"\n") + b"\r\n" if content is None else content
        with open(bad, "wb") as f:
            f.write(data)
        os.chmod(bad, mode)
        r = subprocess.run([binary, "token", "--subject", "alice", "--token-key", bad], capture_output=True, text=True)
        with open(bad, "rb") as f:
            after = f.read()
        if name == "crlf":
            check("a token key with CRLF line ends is read as it is", r.returncode == 0 and after == data, r.stderr.strip()[:200])
        else:
            check("a token key %s stops the command and is left as it is" % name, r.returncode == 64 and "cannot use the token key" in r.stderr and after == data, r.stderr.strip()[:200])
    if not store.startswith("postgres"):
        check_jwks_url(binary, work)
finally:
    server.terminate()
    server.wait(timeout=10)
    shutil.rmtree(work, ignore_errors=True)

finish()
