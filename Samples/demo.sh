#!/usr/bin/env bash
# The consent rules' seed scenario (docs: README, "The consent rules") against a ledger in a
# temporary folder.
# Usage: Samples/demo.sh [path/to/consentctl]
set -euo pipefail
consentctl=${1:-consentctl}
ledger=$(mktemp -d /tmp/consent-demo.XXXXXX)/ledger
export CONSENTCTL_LEDGER=$ledger
step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

step "Create a ledger (key pair, seed catalogue, genesis event)" "$consentctl" init --name consentledger.example/demo
step "The catalogue" "$consentctl" catalog
step "Nothing is given yet (R1, R8)" "$consentctl" status --subject alice
step "1. Activate Medication Management: required consent and optional consent A (R2)" \
  "$consentctl" give --subject alice --feature medication-management --consent required --consent optional-a
step "2. Activate Timeline with all three consents" \
  "$consentctl" give --subject alice --feature timeline --consent required --consent optional-a --consent optional-b
step "An optional consent alone cannot activate a feature (R2): refused, nothing appended" \
  "$consentctl" give --subject bob --feature timeline --consent optional-a || echo "(exit code $?)"
step "3. Revoke Medication Management's required consent: the optional one goes with it (R4)" \
  "$consentctl" revoke --subject alice --feature medication-management --consent required
step "4. Status, grouped by feature, required first (R3, R7)" "$consentctl" status --subject alice
step "4. History, cascades linked to their cause" "$consentctl" history --subject alice
step "5. Verify every hash link, signature, sequence number and rule" "$consentctl" verify

step "Pin the ledger's verifier key (what an auditor keeps)" "$consentctl" key show
key=$("$consentctl" key show)
step "Export alice's events with inclusion proofs under a signed checkpoint" \
  "$consentctl" export --subject alice --out "$(dirname "$ledger")/alice.json"
step "Verify the export offline, trusting only the pinned key" \
  "$consentctl" verify-export "$(dirname "$ledger")/alice.json" --key "$key"

step "Preview a new catalogue version: Timeline's required consent goes to policy version 2.0" \
  "$consentctl" catalog publish "$(dirname "${BASH_SOURCE[0]}")/catalog-v2.json" --dry-run
step "Publish it" \
  "$consentctl" catalog publish "$(dirname "${BASH_SOURCE[0]}")/catalog-v2.json"
step "Alice's Timeline consent is now outdated, and Timeline inactive" "$consentctl" status --subject alice
step "Alice consents again: a re-consent that names the grant it renews" \
  "$consentctl" give --subject alice --feature timeline --consent required
step "The audit report: events, counts, outdated consents, activity, withdrawal times" "$consentctl" report
step "The same report as one self-contained HTML page with timelines" \
  "$consentctl" report --html "$(dirname "$ledger")/report.html"
step "Alice's consents as a FHIR R5 Bundle of Consent resources" \
  "$consentctl" export --subject alice --format fhir --out "$(dirname "$ledger")/alice.fhir.json"

line=4
offset=$(awk -v n=$line 'NR < n { sum += length($0) + 1 } END { print sum + 40 }' "$ledger/ledger.jsonl")
step "6. Flip one byte (line $line, byte $offset of the log) and verify again" \
  python3 -c "import sys; p=sys.argv[1]; o=int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=1; open(p,'wb').write(b)" "$ledger/ledger.jsonl" "$offset"
if "$consentctl" verify; then
  echo "verify did not catch the flipped byte" >&2
  exit 1
else
  echo "(exit code $?: the tampered entry is named above)"
fi
echo
echo "The ledger is in $ledger"
