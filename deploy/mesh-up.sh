#!/usr/bin/env bash
# Three machines of a region mesh on one box (docs/mesh.md "Three machines by hand"): machine-a,
# -b and -c, each a controld + relayd pair on its own loopback address (127.0.0.11, .12, .13),
# linked through their internal listeners (:9000), sharing one database (the SQLite file below,
# or DATABASE_URL, e.g. a MariaDB). machine-a's relayd serves https://opentunnel.localhost:8443 on
# 127.0.0.1 (where the name resolves), machine-b's and -c's on 127.0.0.12 and .13; pick the
# machine a visitor lands on with curl --resolve. Ctrl-C stops all six.
#
# Assumes the binaries are built (./deploy/dev-up.sh builds them, or cmake --build build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state=${OT_MESH_STATE:-$root/.mesh}
mkdir -p "$state"
chmod 700 "$state"
export OPENTUNNEL_DOMAIN=${OPENTUNNEL_DOMAIN:-opentunnel.localhost}
database=${DATABASE_URL:-sqlite:$state/opentunnel.db}
# Shared by every machine; proven on each link, never sent. Kept in the state directory.
[[ -s "$state/internal-token" ]] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' \
  >"$state/internal-token"
chmod 600 "$state/internal-token"
token=$(cat "$state/internal-token")
addresses=(127.0.0.11 127.0.0.12 127.0.0.13)
pids=()
trap 'for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done; wait' EXIT

for i in 0 1 2; do
  address=${addresses[$i]}
  name=machine-$(printf "\\x$(printf %x $((97 + i)))")
  dir="$state/$name"
  mkdir -p "$dir"
  chmod 700 "$dir"
  peers=""
  for other in "${addresses[@]}"; do
    [[ "$other" == "$address" ]] || peers+="${peers:+,}$other:9000"
  done
  # machine-a's public listener is 127.0.0.1:8443, where opentunnel.localhost resolves, so
  # otunnel's default server reaches it; the others listen on their own address.
  public=$address
  [[ $i == 0 ]] && public=127.0.0.1
  common=(env MACHINE_ID="$name" REGION=local INTERNAL_LISTEN="$address:9000"
    INTERNAL_TOKEN="$token" STATE_DIR="$dir" CONTROL_SOCKET="$dir/control.sock"
    API_SOCKET="$dir/api.sock")
  "${common[@]}" DATABASE_URL="$database" ISSUER=local LOCAL_CA_FILE="$state/local-ca.pem" \
    HTTP_MODE=socket MESH_PEERS="$peers" METRICS_LISTEN="$address:9092" \
    build/controld/controld >"$dir/controld.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    [[ -S "$dir/control.sock" ]] && break
    sleep 0.1
  done
  "${common[@]}" TLS_LISTEN="$public:8443" HTTP_LISTEN="$public:8080" \
    METRICS_LISTEN="$address:9091" build/relayd/relayd >"$dir/relayd.log" 2>&1 &
  pids+=($!)
done

cat <<MSG
Three machines are starting (logs in $state/machine-*/): relayd on 127.0.0.1 (machine-a),
127.0.0.12 and .13, port 8443; controld metrics on 127.0.0.11-13:9092. A tunnel through
machine-a, a visitor landing on machine-c:
  build/client/otunnel --server https://$OPENTUNNEL_DOMAIN:8443 --ca-file $state/local-ca.pem http 3000
  curl --cacert $state/local-ca.pem --resolve <id>.$OPENTUNNEL_DOMAIN:8443:127.0.0.13 \\
    https://<id>.$OPENTUNNEL_DOMAIN:8443/
  curl -s 127.0.0.13:9091/metrics | grep forwarded_out
MSG
wait
