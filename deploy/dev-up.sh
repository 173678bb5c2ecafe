#!/usr/bin/env bash
# Builds OpenTunnel and runs it for development on this machine: embedded SQLite, the built-in
# local CA, and a development domain under .localhost (so every tunnel hostname resolves to
# loopback). Installs dependencies first. Stop it with Ctrl-C.
#
# Today this starts controld (the HTTP API on 127.0.0.1:8080, storage, the local CA); relayd and
# the otunnel client are built but do not serve yet, so tunnels can be created and given
# certificates but not reached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash deploy/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${OT_JOBS:-$(nproc)}"

state=${OT_DEV_STATE:-$root/.dev}
mkdir -p "$state"
export OPENTUNNEL_DOMAIN=${OPENTUNNEL_DOMAIN:-opentunnel.localhost}
export DATABASE_URL=${DATABASE_URL:-sqlite:$state/opentunnel.db}
export ISSUER=local LOCAL_CA_FILE="$state/local-ca.pem"
export HTTP_MODE=serve HTTP_LISTEN=${HTTP_LISTEN:-127.0.0.1:8080}
export API_SOCKET="$state/api.sock" CONTROL_SOCKET="$state/control.sock"
export METRICS_LISTEN=${METRICS_LISTEN:-127.0.0.1:9091}

cat <<MSG

controld is starting: API http://$HTTP_LISTEN, metrics http://$METRICS_LISTEN/metrics,
local CA certificate $LOCAL_CA_FILE, state in $state.
Try:
  curl -s -X POST http://$HTTP_LISTEN/api/tunnel
  curl -s http://$HTTP_LISTEN/openapi.json
relayd and otunnel do not serve yet (see README.md, Status).

MSG
exec build/controld/controld
