#!/usr/bin/env bash
# Builds OpenTunnel and runs it for development on this machine: controld (embedded SQLite, the
# built-in local CA) and relayd (TLS on 127.0.0.1:8443) for a development domain under .localhost,
# so every tunnel hostname resolves to loopback. Installs dependencies first. Ctrl-C stops both.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what this script runs and what its message tells you to run: the daemons, otunnel and
# otctl (about 160 build steps instead of 280; the test binaries are most of the rest).
# tests/run-all.sh builds everything.
cmake --build build -j "${OT_JOBS:-$(nproc)}" --target controld relayd otunnel otctl

state=${OT_DEV_STATE:-$root/.dev}
# The state holds the local CA's private key (in the database): this user's alone.
mkdir -p "$state"
chmod 700 "$state"
# A database an older controld made under the umask (0644) would now stop controld at start-up.
chmod 600 "$state"/opentunnel.db{,-wal,-shm} 2>/dev/null || true
export OPENTUNNEL_DOMAIN=${OPENTUNNEL_DOMAIN:-opentunnel.localhost}
export API_SOCKET="$state/api.sock" CONTROL_SOCKET="$state/control.sock"
# Both daemons keep their machine ID in the state directory: the same one, as one machine.
export STATE_DIR="$state"
tls_listen=${TLS_LISTEN:-127.0.0.1:8443}
tls_port=${tls_listen##*:}

# controld: storage, the API (on its unix socket, reached through relayd), issuance.
DATABASE_URL=${DATABASE_URL:-sqlite:$state/opentunnel.db} ISSUER=local \
  LOCAL_CA_FILE="$state/local-ca.pem" HTTP_MODE=socket \
  METRICS_LISTEN=${CONTROLD_METRICS_LISTEN:-127.0.0.1:9092} \
  build/controld/controld &
controld_pid=$!
trap 'kill -TERM $controld_pid 2>/dev/null; wait $controld_pid 2>/dev/null || true' EXIT

for _ in $(seq 1 200); do
  [[ -S "$CONTROL_SOCKET" && -f "$state/local-ca.pem" ]] && break
  kill -0 $controld_pid 2>/dev/null || { echo "controld exited; see its log above" >&2; exit 1; }
  sleep 0.1
done

cat <<MSG

OpenTunnel is starting: https://$OPENTUNNEL_DOMAIN:$tls_port (relayd), metrics on
http://127.0.0.1:9091/metrics (relayd) and :9092 (controld); the local CA is $state/local-ca.pem.
Expose a local port (for example a server on 3000) and reach it:
  build/client/otunnel --server https://$OPENTUNNEL_DOMAIN:$tls_port --ca-file $state/local-ca.pem http 3000
  curl --cacert $state/local-ca.pem https://<the id otunnel prints>.$OPENTUNNEL_DOMAIN:$tls_port/

MSG
TLS_LISTEN=$tls_listen HTTP_LISTEN=${HTTP_LISTEN:-127.0.0.1:8080} \
  METRICS_LISTEN=${METRICS_LISTEN:-127.0.0.1:9091} build/relayd/relayd &
relayd_pid=$!
trap 'kill -TERM $relayd_pid 2>/dev/null; wait $relayd_pid 2>/dev/null || true;
      kill -TERM $controld_pid 2>/dev/null; wait $controld_pid 2>/dev/null || true' EXIT
wait $relayd_pid
