#!/usr/bin/env bash
# Installs every Debian 12 package that building, running and testing OpenTunnel needs.
# Idempotent: packages already present are skipped by apt, and apt-get update runs only when
# something is missing. Nothing is fetched from anywhere but Debian's package registry.
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config git
  libuv1-dev libssl-dev node-llhttp libnghttp2-dev liburing-dev
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libsoci-dev libboost-dev libsqlite3-dev default-libmysqlclient-dev
  libspdlog-dev libfmt-dev doctest-dev nlohmann-json3-dev libcurl4-openssl-dev
  prometheus-cpp-dev libcli11-dev
  clang-format
)
fuzz_packages=( clang libclang-rt-14-dev )
test_packages=(
  openssl curl ca-certificates procps iproute2 python3 python3-pytest python3-grpcio python3-protobuf
  python3-cryptography python3-yaml
  mariadb-server mariadb-client pebble prometheus nghttp2-server
  chromium
  # The image's test runs podman with runc (crun refuses hybrid cgroup hierarchies); systemd
  # brings systemd-analyze and systemd-sysusers for the units' test.
  podman runc systemd
)

wanted=( "${build_packages[@]}" "${fuzz_packages[@]}" "${test_packages[@]}" )

missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#wanted[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# --no-install-recommends keeps the machine lean; the list above names what we use.
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
