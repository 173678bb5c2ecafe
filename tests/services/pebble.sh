#!/usr/bin/env bash
# Pebble (Let's Encrypt's test ACME CA) and pebble-challtestsrv (its test DNS) for tests, entirely
# inside DIR, on free 127.0.0.1 ports.
#
#   pebble.sh start DIR   start both, wait until both answer, write DIR/env
#   pebble.sh stop DIR    stop both (by the pids saved in DIR); the logs stay in DIR
#
# DIR/env is shell-sourceable KEY=value lines (no quoting needed, nothing else in it):
#   ACME_URL                the directory URL (https, Pebble's own TLS certificate)
#   ACME_CA_BUNDLE          the CA that issued Pebble's listener certificate (made here)
#   ACME_EAB_KID / ACME_EAB_HMAC_KEY   the external account binding Pebble requires
#   CHALLTESTSRV_URL        challtestsrv's management API (http)
#   ACME_DNS_RESOLVER       challtestsrv's DNS server, host:port (Pebble's VA asks it too)
#   PEBBLE_MANAGEMENT_URL   Pebble's management API (https, same certificate): /roots/0,
#                           /intermediates/0 are the roots of what Pebble issues
#   PEBBLE_DIR              DIR, absolute (pebble.log and challtestsrv.log are there)
#
# Environment: PEBBLE_CERT_VALIDITY_SECONDS (optional) sets Pebble's certificateValidityPeriod for
# the certificates it issues (default: Pebble's own, five years); renewal tests use a short one.
# Pebble runs with PEBBLE_VA_NOSLEEP=1 (no random validation delays), PEBBLE_WFE_NONCEREJECT=15
# (15% of good nonces are rejected with badNonce: clients must retry) and PEBBLE_AUTHZREUSE=50.
#
# The Debian packages (pebble 2.4): pebble-challtestsrv has no -doh flag; Pebble's configuration
# is based on /usr/share/doc/pebble/examples/pebble-config-external-account-bindings.json.
set -euo pipefail

readonly kReadySeconds=30   # bound on waiting for each server to answer
readonly kStopSeconds=10    # bound on a clean stop before the process is killed
readonly kPortAttempts=5    # new ports to try when another process takes ours meanwhile
readonly kMarker="pebble.sh"  # content of DIR/.made-by, so stop/start only touch our own DIR

usage() {
  echo "usage: $0 start|stop DIR" >&2
  exit 2
}

[[ $# -eq 2 ]] || usage
cmd=$1
dir=$2

log() { echo "pebble.sh: $*" >&2; }

require() {
  local name
  for name in "$@"; do
    command -v "$name" >/dev/null 2>&1 || { log "$name is not installed (apt-get install pebble)"; exit 1; }
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

random_b64url() {  # 32 random bytes, base64url without padding (what Pebble's EAB keys are)
  python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))'
}

# The pid saved in DIR/NAME.pid when it is still that program started from this DIR.
live_pid() {  # name
  local pid file="$dir/$1.pid"
  [[ -f "$file" ]] || return 0
  pid=$(<"$file")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  if [[ -r "/proc/$pid/environ" ]] && tr '\0' '\n' <"/proc/$pid/environ" | grep -qxF -- "OT_PEBBLE_DIR=$dir"; then
    echo "$pid"
  fi
}

stop_one() {  # name
  local pid deadline
  pid=$(live_pid "$1")
  rm -f "$dir/$1.pid"
  [[ -n "$pid" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + kStopSeconds))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$1 ($pid) did not stop in ${kStopSeconds}s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

check_owned_dir() {
  [[ -d "$dir" ]] || return 0
  [[ "$dir" != "/" ]] || { log "refusing to use / as the server directory"; exit 1; }
  if [[ -f "$dir/.made-by" ]] && [[ "$(<"$dir/.made-by")" == "$kMarker" ]]; then return 0; fi
  if [[ -z "$(ls -A "$dir")" ]]; then return 0; fi
  log "$dir is not empty and was not made by this script; refusing to touch it"
  exit 1
}

make_tls() {  # a CA and Pebble's listener certificate for 127.0.0.1 and localhost
  local tls="$dir/tls"
  mkdir -p "$tls"
  (
    cd "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
      -subj "/CN=OpenTunnel test Pebble CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
      -keyout key.pem -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 \
      -extfile server.ext -out cert.pem 2>/dev/null
    rm -f server.csr server.ext ca.srl
  )
}

write_config() {  # acme_port management_port
  local validity=""
  if [[ -n "${PEBBLE_CERT_VALIDITY_SECONDS:-}" ]]; then
    [[ "$PEBBLE_CERT_VALIDITY_SECONDS" =~ ^[1-9][0-9]*$ ]] || { log "bad PEBBLE_CERT_VALIDITY_SECONDS"; exit 2; }
    validity=",
    \"certificateValidityPeriod\": $PEBBLE_CERT_VALIDITY_SECONDS"
  fi
  cat >"$dir/pebble.json" <<EOF
{
  "pebble": {
    "listenAddress": "127.0.0.1:$1",
    "managementListenAddress": "127.0.0.1:$2",
    "certificate": "$dir/tls/cert.pem",
    "privateKey": "$dir/tls/key.pem",
    "httpPort": 5002,
    "tlsPort": 5001,
    "ocspResponderURL": "",
    "externalAccountBindingRequired": true,
    "externalAccountMACKeys": {
      "$eab_kid": "$eab_key"
    }$validity
  }
}
EOF
}

# Waits until `probe` succeeds while the process `name` lives. 0: ready; 3: it exited and its log
# says the port was taken; 1: anything else.
wait_ready() {  # name probe...
  local name=$1 pid deadline
  shift
  pid=$(<"$dir/$name.pid")
  deadline=$((SECONDS + kReadySeconds))
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -qi "address already in use" "$dir/$name.log"; then return 3; fi
      log "$name exited during startup; its log:"
      tail -n 20 "$dir/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  log "$name did not answer within ${kReadySeconds}s; its log:"
  tail -n 20 "$dir/$name.log" >&2
  return 1
}

launch() {  # name command...: in its own session, so it outlives this script and ctest's signals
  local name=$1
  shift
  : >"$dir/$name.log"
  OT_PEBBLE_DIR="$dir" setsid "$@" </dev/null >>"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

start_challtestsrv() {
  local status attempt
  for ((attempt = 1; attempt <= kPortAttempts; attempt++)); do
    dns_port=$(free_port)
    challtestsrv_port=$(free_port)
    launch challtestsrv pebble-challtestsrv -dns01 "127.0.0.1:$dns_port" \
      -management "127.0.0.1:$challtestsrv_port" -http01 "" -https01 "" -tlsalpn01 ""
    status=0
    # Any HTTP answer from the management API means it serves (the DNS server starts first).
    wait_ready challtestsrv curl -s -o /dev/null "http://127.0.0.1:$challtestsrv_port/" || status=$?
    [[ $status -eq 0 ]] && return 0
    stop_one challtestsrv
    [[ $status -eq 3 ]] || exit 1
    log "a port was taken; trying others"
  done
  log "no free ports for challtestsrv after $kPortAttempts attempts"
  exit 1
}

start_pebble() {
  local status attempt
  for ((attempt = 1; attempt <= kPortAttempts; attempt++)); do
    acme_port=$(free_port)
    management_port=$(free_port)
    write_config "$acme_port" "$management_port"
    PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=15 PEBBLE_AUTHZREUSE=50 \
      launch pebble pebble -config "$dir/pebble.json" -dnsserver "127.0.0.1:$dns_port"
    status=0
    wait_ready pebble curl -sf --cacert "$dir/tls/ca.pem" -o /dev/null \
      "https://127.0.0.1:$acme_port/dir" || status=$?
    if [[ $status -eq 0 ]]; then
      wait_ready pebble curl -sf --cacert "$dir/tls/ca.pem" -o /dev/null \
        "https://127.0.0.1:$management_port/roots/0" || status=$?
    fi
    [[ $status -eq 0 ]] && return 0
    stop_one pebble
    [[ $status -eq 3 ]] || { stop_one challtestsrv; exit 1; }
    log "a port was taken; trying others"
  done
  stop_one challtestsrv
  log "no free ports for pebble after $kPortAttempts attempts"
  exit 1
}

start() {
  require pebble pebble-challtestsrv openssl curl python3
  check_owned_dir
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  stop_one pebble
  stop_one challtestsrv
  rm -rf "${dir:?}"/*
  echo "$kMarker" >"$dir/.made-by"
  make_tls
  eab_kid="ot-test-kid"
  eab_key=$(random_b64url)
  start_challtestsrv
  start_pebble
  cat >"$dir/env.tmp" <<EOF
ACME_URL=https://127.0.0.1:$acme_port/dir
ACME_CA_BUNDLE=$dir/tls/ca.pem
ACME_EAB_KID=$eab_kid
ACME_EAB_HMAC_KEY=$eab_key
CHALLTESTSRV_URL=http://127.0.0.1:$challtestsrv_port
ACME_DNS_RESOLVER=127.0.0.1:$dns_port
PEBBLE_MANAGEMENT_URL=https://127.0.0.1:$management_port
PEBBLE_DIR=$dir
EOF
  mv "$dir/env.tmp" "$dir/env"
  log "Pebble ready at https://127.0.0.1:$acme_port/dir (DNS 127.0.0.1:$dns_port; files in $dir)"
}

stop() {
  [[ -d "$dir" ]] || return 0
  dir=$(cd "$dir" && pwd)
  check_owned_dir
  stop_one pebble
  stop_one challtestsrv
  rm -f "$dir/env"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
