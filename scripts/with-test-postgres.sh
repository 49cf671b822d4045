#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL server, then removes the server.
#
#   bash scripts/with-test-postgres.sh COMMAND [ARGS...]
#
# Installs Debian's `postgresql` package when no server binaries are found, creates a cluster in a
# temporary folder (as the unprivileged user `nobody` when run as root, since initdb refuses
# root), starts it on a free loopback port with fsync on, exports its URL as
# CONSENTLEDGER_TEST_POSTGRES_URL, runs the command, and stops and deletes the cluster however
# the command ends. Exits non-zero, loudly, when the server cannot be installed or started: the
# tests that need it must not skip silently.
set -euo pipefail

if [ $# -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 64
fi

fail() { echo "with-test-postgres: $*" >&2; exit 1; }

# `|| true`: with no server installed yet, ls fails, and set -e must not end the script here.
find_bin() { { ls -d /usr/lib/postgresql/*/bin 2>/dev/null || true; } | sort -V | tail -n 1; }

bin="$(find_bin)"
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "==> installing postgresql with apt-get"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    # A policy-rc.d that answers 101 keeps the package from starting a cluster of its own as a
    # service; ours is started below, on a port of our choosing.
    # Removed by a trap however the install ends, so no later service start is blocked.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
        $SUDO chmod 755 /usr/sbin/policy-rc.d
    fi
    status=0
    { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || status=$?
    $SUDO rm -f /usr/sbin/policy-rc.d
    trap - EXIT
    [ "$status" = 0 ] || fail "cannot install Debian's postgresql package (apt-get exit $status)"
    bin="$(find_bin)"
    [ -n "$bin" ] && [ -x "$bin/initdb" ] || fail "postgresql is installed but no initdb was found under /usr/lib/postgresql/*/bin"
fi

as_owner=()
if [ "$(id -u)" = 0 ]; then
    as_owner=(runuser -u nobody --)
fi

dir="$(mktemp -d /tmp/consentledger-pg.XXXXXX)"
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown nobody "$dir"

cleanup() {
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U consentledger --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; fail "initdb failed in $dir"; }

# TLS as in production: a private CA signs the server's certificate for "localhost", and clients
# verify it (the default sslmode=verify-full, with $PGSSLROOTCERT naming the CA). A second CA that
# signed nothing here lets tests show that a certificate from another CA is refused.
command -v openssl >/dev/null || fail "openssl is needed to make the test server's certificate"
tls="$dir/tls"
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=ConsentLedger test CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" >/dev/null 2>&1 || fail "openssl could not make the test CA"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=Another CA" \
    -keyout "$tls/other-ca.key" -out "$tls/other-ca.pem" >/dev/null 2>&1 || fail "openssl could not make the second CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$tls/server.key" -out "$tls/server.csr" >/dev/null 2>&1 || fail "openssl could not make the server key"
printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' > "$tls/server.ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 2 \
    -extfile "$tls/server.ext" -out "$tls/server.pem" >/dev/null 2>&1 || fail "openssl could not sign the server certificate"
chmod 600 "$tls/server.key"
[ "$(id -u)" = 0 ] && chown -R nobody "$tls"
chmod 755 "$tls"; chmod 644 "$tls/ca.pem" "$tls/other-ca.pem" "$tls/server.pem"

"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c synchronous_commit=on -c max_connections=200 -c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$tls/server.key" start >/dev/null \
    || { cat "$dir/server.log" >&2 || true; fail "the PostgreSQL server did not start on 127.0.0.1:$port"; }

# Server faults for the tests (CONSENTLEDGER_TEST_POSTGRES_CTL crash|start|pause|resume): a crash
# is `pg_ctl stop -m immediate` (no checkpoint, as a power cut), start brings the same cluster
# back on the same port, pause stops every server process with SIGSTOP and resume continues them.
start_options="-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=on -c synchronous_commit=on -c max_connections=200 -c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$tls/server.key"
cat > "$dir/ctl.sh" <<CTL
#!/usr/bin/env bash
set -euo pipefail
as_owner=(${as_owner[*]:-})
server_pids() { pid=\$(head -1 "$dir/data/postmaster.pid"); echo "\$pid \$(pgrep -P "\$pid" | tr '\n' ' ')"; }
case "\${1:-}" in
    crash) "\${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null ;;
    start) "\${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$start_options" start >/dev/null ;;
    pause) kill -STOP \$(server_pids) ;;
    resume) kill -CONT \$(server_pids) ;;
    *) echo "usage: \$0 crash|start|pause|resume" >&2; exit 64 ;;
esac
CTL
chmod 755 "$dir/ctl.sh"

export PGSSLROOTCERT="$tls/ca.pem"
export CONSENTLEDGER_TEST_POSTGRES_CTL="$dir/ctl.sh"
export CONSENTLEDGER_TEST_POSTGRES_OTHER_CA="$tls/other-ca.pem"
export CONSENTLEDGER_TEST_POSTGRES_URL="postgres://consentledger@localhost:$port/postgres"
echo "==> throwaway $("$bin/postgres" --version | sed 's/^postgres (PostgreSQL)/PostgreSQL/') at $CONSENTLEDGER_TEST_POSTGRES_URL (cluster in $dir)"
"$@"
