#!/usr/bin/env bash
# The service under load: wrk on loopback against Samples/ConsentService, on the file store and
# on PostgreSQL, then `consentctl verify` on each ledger and a count of what was acknowledged.
#
#   make load-test                     (starts a throwaway PostgreSQL, runs this script in it)
#   DURATION=30 THREADS=8 make load-test
#
# Each store gets three bounded runs: principal (an authenticated endpoint that reads nothing of
# the ledger: the service's own cost), status (reads) and activate (durable writes: alternating
# activate/withdraw, two events per request). Prints one table row per run, the rate of status
# over principal, then the checks.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-10}"
THREADS="${THREADS:-8}"
: "${CONSENTLEDGER_TEST_POSTGRES_URL:?run through scripts/with-test-postgres.sh (make load-test)}"

command -v wrk >/dev/null || {
    echo "==> installing wrk with apt-get"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
}

echo "==> building consent-service and consentctl (release, with PostgreSQL)"
(cd Samples/ConsentService && swift build -c release --product consent-service >/dev/null && swift build -c release --product consentctl >/dev/null)
BIN="$(cd Samples/ConsentService && swift build -c release --show-bin-path)"

work="$(mktemp -d /tmp/consent-load.XXXXXX)"
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

failures=0
rows=()
ratios=()
run_store() {
    local label="$1" store="$2"
    local port key tokens
    port="$(free_port)"
    key="$work/$label.key"
    tokens="$work/$label.tokens"
    # A PostgreSQL store keeps no signing key: the service brings a key file.
    "$BIN/consent-service" serve --store "$store" --port "$port" --token-key "$key" --insecure-plaintext-key --key-file "$work/$label.ledger.key" >"$work/$label.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/v1/checkpoint" && break
        sleep 0.1
    done
    : >"$tokens"
    for t in $(seq 0 $((THREADS - 1))); do
        for s in $(seq 0 49); do
            echo "t$t-s$s $("$BIN/consent-service" token --subject "t$t-s$s" --ttl 43200 --token-key "$key")" >>"$tokens"
        done
    done
    local before events principal status activate acked expected
    before="$("$BIN/consentctl" --store "$store" verify --json)"
    before="$(field "$before" events)"
    principal="$(wrk -t"$THREADS" -c"$THREADS" -d"${DURATION}s" -s Samples/ConsentService/loadtest/principal.lua "http://127.0.0.1:$port" -- "$tokens" | grep '^RESULT ' | cut -c8-)"
    status="$(wrk -t"$THREADS" -c"$THREADS" -d"${DURATION}s" -s Samples/ConsentService/loadtest/status.lua "http://127.0.0.1:$port" -- "$tokens" | grep '^RESULT ' | cut -c8-)"
    ratios+=("$label: status $(field "$status" rps) req/s = $(python3 -c 'import sys; print("%.0f" % (100 * float(sys.argv[1]) / float(sys.argv[2])))' "$(field "$status" rps)" "$(field "$principal" rps)")% of principal $(field "$principal" rps) req/s (target >= 50%)")
    activate="$(wrk -t"$THREADS" -c"$THREADS" -d"${DURATION}s" -s Samples/ConsentService/loadtest/activate.lua "http://127.0.0.1:$port" -- "$tokens" | grep '^RESULT ' | cut -c8-)"
    if ! kill "$server" 2>/dev/null; then
        echo "FAIL $label: the service had exited; its log:"; cat "$work/$label.log"; failures=$((failures + 1))
    fi
    wait "$server" 2>/dev/null || true; server=""
    local verify
    if ! verify="$("$BIN/consentctl" --store "$store" verify --json)"; then
        echo "FAIL $label: verify failed: $verify"; failures=$((failures + 1)); return
    fi
    events="$(field "$verify" events)"
    acked="$(field "$activate" acked)"
    expected=$((before + 2 * acked))
    # Requests in flight when wrk stopped may have been committed without being counted.
    if [ "$events" -ge "$expected" ] && [ "$events" -le $((expected + 2 * THREADS)) ]; then
        echo "ok   $label: verify passed; $events events = $before before + 2 x $acked acknowledged writes + $((events - expected)) in flight at the cut-off"
    else
        echo "FAIL $label: $events events, expected $expected (+ up to $((2 * THREADS)) in flight)"; failures=$((failures + 1))
    fi
    for result in "$principal" "$status" "$activate"; do
        [ "$(field "$result" non2xx)" = 0 ] && [ "$(field "$result" socket_errors)" = 0 ] \
            || { echo "FAIL $label: errors in $result"; failures=$((failures + 1)); }
        rows+=("| $label | $(field "$result" test) | $(field "$result" rps) | $(field "$result" p50_ms) | $(field "$result" p90_ms) | $(field "$result" p99_ms) | $(field "$result" max_ms) | $(field "$result" requests) |")
    done
}

run_store file "$work/ledger"
run_store postgres "$CONSENTLEDGER_TEST_POSTGRES_URL?schema=load_$(date +%s)"

echo
echo "wrk, loopback, $THREADS threads x 1 connection each, ${DURATION}s per run ($(nproc) cores, server and wrk on the same machine)"
echo
echo "| store | endpoint | req/s | p50 ms | p90 ms | p99 ms | max ms | requests |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${ratios[@]}"
exit "$failures"
