#!/usr/bin/env bash
# Runs every fuzz target of consent-fuzz (built with --sanitize=fuzzer,address) under libFuzzer:
#   scripts/fuzz.sh BINARY [--runs N] [libFuzzer options, such as -max_total_time=300]
# --runs N runs N inputs of each target, and N/10 of `derived` (each of its inputs opens, reads
# and verifies a ledger folder: about 25 a second under the sanitizers).
# Each target starts from its seed corpus in Tests/Fuzz/<target> (read only) and keeps what it
# finds in .fuzz/corpus/<target>; a crash, leak or timeout is written to .fuzz/crashes/ and fails
# the run. Prints each target's executions.
set -uo pipefail
cd "$(dirname "$0")/.."
binary=$1; shift
runs=""
if [ "${1:-}" = "--runs" ]; then runs=$2; shift 2; fi
targets=(event-line catalog bundle state-proof note apply derived)
mkdir -p .fuzz/crashes
status=0
for target in "${targets[@]}"; do
    mkdir -p ".fuzz/corpus/$target"
    log=".fuzz/$target.log"
    bound=()
    if [ -n "$runs" ]; then
        if [ "$target" = derived ]; then bound=(-runs=$((runs / 10))); else bound=(-runs="$runs"); fi
    fi
    # -rss_limit_mb: an input that makes a reader take more than this is a finding too.
    CONSENT_FUZZ_TARGET=$target CONSENT_FUZZ_LEDGER=Spec/vectors/tiny-ledger \
        "$binary" ".fuzz/corpus/$target" "Tests/Fuzz/$target" \
        -artifact_prefix=".fuzz/crashes/$target-" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 ${bound[@]+"${bound[@]}"} "$@" > "$log" 2>&1
    code=$?
    executed=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
    seconds=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -Eo 'in [0-9]+' | grep -Eo '[0-9]+' | tail -1)
    if [ "$code" -ne 0 ]; then
        echo "fuzz: $target: FAILED after ${executed:-?} executions (exit $code); see $log and .fuzz/crashes/"
        grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5
        status=1
    else
        echo "fuzz: $target: ${executed:-?} executions in ${seconds:-?} s, no crash, corpus $(ls ".fuzz/corpus/$target" | wc -l) new + $(ls "Tests/Fuzz/$target" | wc -l) seed inputs"
    fi
done
exit $status
