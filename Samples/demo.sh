#!/usr/bin/env bash
# A day at a clinic, told with consentctl against a ledger in a temporary folder: patients give
# and withdraw consents (the rules are in docs/consent-rules.md), the clinic publishes a new
# notice, an auditor checks the evidence, a patient gets their own page, and someone tampers with
# the log.
# Usage: Samples/demo.sh [path/to/consentctl] [path/to/consent-witness]
set -euo pipefail
consentctl=${1:-consentctl}
witness_server=${2:-}
samples=$(dirname "${BASH_SOURCE[0]}")
work=$(mktemp -d /tmp/consent-demo.XXXXXX)
export CONSENTCTL_LEDGER=$work/ledger

chapter() { printf '\n\033[1m== %s\033[0m\n' "$1"; }
say() { printf '%s\n' "$*" | fold -s -w 96; }
# Runs consentctl, echoing the command with the short name a reader would type.
run() {
  printf '\n$ consentctl'; printf ' %q' "$@"; printf '\n'
  "$consentctl" "$@"
}
# The same, for a command that is expected to fail: shows its exit code and goes on.
refused() {
  printf '\n$ consentctl'; printf ' %q' "$@"; printf '\n'
  if "$consentctl" "$@"; then echo "(expected a refusal, got success)" >&2; exit 1; else echo "(exit code $?)"; fi
}

chapter "1. The clinic sets up its ledger"
say "A ledger is a folder with a signing key, the consent catalogue and a log of signed events. The signing key is sealed under a passphrase; every command that signs needs it, and reads never do. Here it comes from \$CONSENTCTL_PASSPHRASE; a clinic uses --passphrase-file or types it at the prompt."
export CONSENTCTL_PASSPHRASE="correct horse battery staple"
run init --name clinic.example/consents
run catalog show

chapter "2. Alice starts with nothing"
say "A new patient has every feature off (R1), and the listing says so plainly (R8)."
run status --subject alice

chapter "3. Alice turns on two features in the app"
say "A feature is activated with its required consent; the optional ones are chosen on the same screen (R2)."
run give --subject alice --feature medication-management --consent required --consent optional-a
run give --subject alice --feature timeline --consent required --consent optional-a --consent optional-b

chapter "4. Bob signs a paper form, recorded the next day"
say "The grant keeps both times: when it was recorded (what the rules use) and when Bob agreed, with the channel, the notice's language and the scan."
run give --subject bob --feature timeline --consent required --effective-at "$(date -u -d '1 day ago' +%Y-%m-%dT%H:%M:%SZ)" \
  --channel paper --notice-language de --evidence scan-2026-0042 --actor dr.house
say "The scan's reference may name Bob, so the log holds it sealed under a key that only Bob's record gives (an erasure destroys it). The ledger opens it for every read; the log's bytes never show it:"
run history --subject bob
printf '\n$ grep -c scan-2026-0042 "$CONSENTCTL_LEDGER/ledger.jsonl"\n'
grep -c scan-2026-0042 "$CONSENTCTL_LEDGER/ledger.jsonl" || true
say "An optional consent alone cannot activate a feature (R2): refused, nothing appended."
refused give --subject carol --feature timeline --consent optional-a

chapter "5. Alice withdraws Medication Management"
say "Withdrawing the required consent takes the optional one with it, as an event of its own that names its cause (R4)."
run revoke --subject alice --feature medication-management --consent required
run status --subject alice
run history --subject alice
say "A typo in a subject id is a normal answer that names the ids it may have meant."
run status --subject alcie

chapter "6. The clinic publishes a new Timeline notice"
say "A dry run shows what a publication would change before anything is appended."
run catalog publish "$samples/catalog-v2.json" --dry-run
run catalog publish "$samples/catalog-v2.json"
say "Alice agreed to the old notice: her Timeline consent is outdated and the feature inactive until she consents again."
run status --subject alice
run give --subject alice --feature timeline --consent required

chapter "7. The data-protection officer reads the report"
run report
run report --format html --out "$work/report.html"
run report --actor dr.house --format json --out "$work/dr-house.json"

chapter "8. An auditor checks the evidence with nothing but the public key"
run verify
run key show
key=$("$consentctl" key show)
run export --subject alice --out "$work/alice.json"
run verify-export "$work/alice.json" --key "$key"

chapter "9. A witness sees the same history"
if [[ -n $witness_server ]]; then
  say "A witness cosigns a checkpoint only if it extends the last one it cosigned (C2SP tlog-witness), so the clinic cannot show one history to one auditor and another to the next. The witness has a key of its own, and the auditor pins it too."
  export CONSENT_WITNESS_PASSPHRASE="witness passphrase, not the clinic's"
  CONSENTCTL_PASSPHRASE=$CONSENT_WITNESS_PASSPHRASE run witness keygen --name witness.example/demo --key "$work/witness.key"
  witness_key=$("$consentctl" witness show --name witness.example/demo --key "$work/witness.key")
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$witness_server" serve --key "$work/witness.key" --name witness.example/demo --log "$key" --state "$work/witness-state" --port "$port" > "$work/witness.log" 2>&1 &
  witness_pid=$!
  trap 'kill $witness_pid 2>/dev/null || true' EXIT
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/" > /dev/null 2>&1 && break; sleep 0.1; done
  run checkpoint --witness-url "http://127.0.0.1:$port" --witness "$witness_key"
  say "The cosignature is recorded with the checkpoint, so exports carry it; the auditor asks for it:"
  run export --subject alice --out "$work/alice-witnessed.json"
  run verify-export "$work/alice-witnessed.json" --key "$key" --witness "$witness_key" --quorum 1
  kill $witness_pid 2>/dev/null || true
else
  say "(Skipped: give the path of consent-witness as the second argument; make demo does.)"
fi

chapter "10. Alice asks for her own records"
run export --subject alice --format html --lang en --out "$work/alice.html"
run export --subject alice --format fhir --out "$work/alice.fhir.json"

chapter "11. Bob asks to be forgotten (GDPR Art. 17)"
say "The log cannot be rewritten without breaking every signature after the change. Erasure destroys the link instead: Bob's record (his id and the salt of his pseudonym) is overwritten and removed, and a signed event says so. Every proof stays valid; nothing links Bob to his events any more."
run erase --subject bob --reason "request 2026-118" --actor dpo
run status --subject bob
run verify
say "The export handed to Alice before still verifies, and the report keeps the counts, showing Bob's pseudonym as erased."
run verify-export "$work/alice.json" --key "$key"
run report --format json --out "$work/after-erasure.json"
say "Bob's scan reference is still in the log, sealed; with his record gone, nobody can open it:"
printf '\n$ consentctl report | grep sealed\n'
"$consentctl" report | grep sealed

chapter "12. The security officer rotates the signing key"
say "A key is retired on a schedule, or as soon as it may have leaked. A signed key.rotated event names the new key: the old key signs the event and the new key countersigns it, so a thief with only the old key cannot name a successor. From then on the new key signs; the new key file takes the old one's place, sealed under the same passphrase."
run key rotate --actor security-officer
run key show --all
new_key=$("$consentctl" key show)
run give --subject carol --feature medication-management --consent required
run verify
run export --subject alice --out "$work/alice-rotated.json"
say "Bundles carry the rotation: the auditor who pinned the first key and one who pinned the new key both verify the new bundle, and the bundle exported before the rotation still verifies."
run verify-export "$work/alice-rotated.json" --key "$key"
run verify-export "$work/alice-rotated.json" --key "$new_key"
run verify-export "$work/alice.json" --key "$key"
say "Had the old key leaked, the officer revokes it as well, from the first event it may have signed for someone else: the new key re-attests the honest events since then by their hashes, and verify refuses any other event the old key signed in that window."
run key revoke --compromised-since 9 --actor security-officer
run verify

chapter "13. Someone edits the log"
say "One byte flipped in the event at seq 3, then verify again:"
python3 - "$CONSENTCTL_LEDGER/ledger.jsonl" <<'FLIP'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
start = 0
for line in data.split(b"\n"):
    if b'"seq":3,' in line and line.startswith(b'{"body":'):
        break
    start += len(line) + 1
data[start + 40] ^= 1
open(path, "wb").write(data)
FLIP
refused verify

printf '\nThe ledger and the files written are in %s\n' "$work"
