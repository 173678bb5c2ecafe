#!/usr/bin/env bash
# Builds the OpenTunnel image (controld + relayd under ot-supervise) from Debian packages and our
# CMake build, without any image registry:
#   1. resolves the runtime packages the two binaries link against (plus bash, coreutils,
#      ca-certificates, netbase) with apt against an empty package status, so every Depends is
#      pulled in exactly as an install would;
#   2. fetches the .deb files with `apt-get download` into a cache (kept between runs) and unpacks
#      them with dpkg-deb into a fresh root filesystem (no maintainer scripts run: what they would
#      do for us, ldconfig and the CA bundle, is done here);
#   3. adds the binaries, the supervisor and its health check;
#   4. writes an OCI image layout (oci-layout, index.json, manifest, config, one gzip layer) with
#      oci_pack.py.
#
# Usage: build-image.sh BUILD_DIR OUT_DIR [TAG]
#   OUT_DIR/rootfs   the root filesystem (what a chroot or `podman run --rootfs` takes)
#   OUT_DIR/oci      the OCI layout (`podman load -i OUT_DIR/oci`, `skopeo copy oci:...`)
#   OT_DEB_CACHE     where .deb files are kept (default OUT_DIR/debs)
#   OT_IMAGE_STRIP=0 keeps the binaries' debug info (default: stripped, 30 MB instead of 230 MB)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build_dir=$(cd "${1:?usage: build-image.sh BUILD_DIR OUT_DIR [TAG]}" && pwd)
out_dir=${2:?usage: build-image.sh BUILD_DIR OUT_DIR [TAG]}
tag=${3:-opentunnel:dev}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
cache=${OT_DEB_CACHE:-$out_dir/debs}
mkdir -p "$cache"
started=$(date +%s%N)
step() { echo "build-image: $(( ($(date +%s%N) - started) / 1000000 )) ms: $*"; }

binaries=("$build_dir/relayd/relayd" "$build_dir/controld/controld")
for binary in "${binaries[@]}"; do
  [[ -x "$binary" ]] || { echo "build-image: $binary is not built" >&2; exit 1; }
done

# --- 1. the packages -------------------------------------------------------------------------
# The libraries' packages, as this build machine has them (the binaries were linked here).
mapfile -t libraries < <(ldd "${binaries[@]}" | awk '/=> \//{print $3}' | sort -u)
# One dpkg -S for all (each call reads the whole file database): the path as ldd names it, the
# file it resolves to, and the path without /usr (Debian 12's packages still ship /lib paths).
queries=()
for library in "${libraries[@]}"; do
  queries+=("$library" "$(readlink -f "$library")" "${library#/usr}")
done
mapfile -t lib_packages < <(dpkg -S "${queries[@]}" 2>/dev/null | sed 's/[:,].*//' | sort -u)
((${#lib_packages[@]} > 0)) || { echo "build-image: dpkg owns none of the libraries" >&2; exit 1; }
# bash runs the supervisor; coreutils gives `sleep` and a usable shell for `exec`; netbase the
# services/protocols files getaddrinfo reads; ca-certificates the roots ACME needs.
wanted=(base-files bash coreutils netbase ca-certificates "${lib_packages[@]}")

# Resolve against an empty status file: apt then lists every package a fresh install needs.
empty_status="$out_dir/.empty-status"
: > "$empty_status"
mapfile -t resolved < <(apt-get -s -qq -o Dir::State::status="$empty_status" \
    -o APT::Install-Recommends=false -o Debug::NoLocking=1 install "${wanted[@]}" 2>/dev/null |
  awk '$1 == "Inst" {gsub(/[()]/, "", $3); print $2 "=" $3}')
((${#resolved[@]} > 0)) || { echo "build-image: apt resolved nothing (run apt-get update)" >&2; exit 1; }
step "${#wanted[@]} packages wanted, ${#resolved[@]} with their dependencies"

# --- 2. fetch (cached) and unpack -------------------------------------------------------------
debs=()
missing=()
for spec in "${resolved[@]}"; do
  name=${spec%%=*}
  version=${spec#*=}
  file_version=${version//:/%3a}
  match=("$cache/${name}_${file_version}"_*.deb)
  if [[ -e "${match[0]}" ]]; then
    debs+=("${match[0]}")
  else
    missing+=("$spec")
  fi
done
if ((${#missing[@]} > 0)); then
  (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}")
  for spec in "${missing[@]}"; do
    name=${spec%%=*}
    version=${spec#*=}
    match=("$cache/${name}_${version//:/%3a}"_*.deb)
    [[ -e "${match[0]}" ]] || { echo "build-image: $spec was not downloaded" >&2; exit 1; }
    debs+=("${match[0]}")
  done
fi
step "${#missing[@]} .deb files downloaded, $((${#debs[@]} - ${#missing[@]})) from the cache"

rootfs="$out_dir/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"
# Merged /usr, as Debian 12 installs it: /bin, /sbin and /lib* are links into /usr.
mkdir -p "$rootfs"/usr/{bin,sbin,lib,lib64}
for dir in bin sbin lib lib64; do ln -s "usr/$dir" "$rootfs/$dir"; done
for deb in "${debs[@]}"; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$rootfs" --keep-directory-symlink
done
step "${#debs[@]} packages unpacked"
for library in "${libraries[@]}"; do
  name=$(basename "$library")
  [[ -e "$rootfs/usr/lib/x86_64-linux-gnu/$name" || -e "$rootfs/usr/lib/$name" ]] ||
    { echo "build-image: $name (for $library) is missing from the root filesystem" >&2; exit 1; }
done

# What the skipped maintainer scripts would have done for us.
ldconfig -r "$rootfs"
mkdir -p "$rootfs/etc/ssl/certs"
find "$rootfs/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z |
  xargs -0 cat > "$rootfs/etc/ssl/certs/ca-certificates.crt"
# Users: root, and opentunnel (uid/gid 999) that owns the state; dpkg's base-passwd would write
# many more we do not need.
cat > "$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/bash
opentunnel:x:999:999:OpenTunnel:/var/lib/opentunnel:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
cat > "$rootfs/etc/group" <<'GROUP'
root:x:0:
opentunnel:x:999:
nogroup:x:65534:
GROUP
printf 'hosts: files dns\npasswd: files\ngroup: files\n' > "$rootfs/etc/nsswitch.conf"
mkdir -p "$rootfs"/{proc,sys,dev,tmp,run,root} "$rootfs/var/lib/opentunnel" "$rootfs/run/opentunnel"
chmod 1777 "$rootfs/tmp"
chown 999:999 "$rootfs/var/lib/opentunnel" "$rootfs/run/opentunnel"
# Docs and manuals are dead weight in a service image.
rm -rf "$rootfs"/usr/share/{doc,man,info,locale,lintian} "$rootfs"/var/cache/debconf

# --- 3. ours ----------------------------------------------------------------------------------
install -d "$rootfs/usr/local/bin"
for binary in "${binaries[@]}"; do
  target="$rootfs/usr/local/bin/$(basename "$binary")"
  if [[ "${OT_IMAGE_STRIP:-1}" == 1 ]]; then
    objcopy --strip-debug "$binary" "$target"
  else
    install -m 0755 "$binary" "$target"
  fi
done
install -m 0755 "$here/ot-supervise" "$rootfs/usr/local/bin/ot-supervise"
install -m 0755 "$here/ot-healthcheck" "$rootfs/usr/local/bin/ot-healthcheck"
step "binaries and supervisor added ($(du -sh "$rootfs" | cut -f1) root filesystem)"

# --- 4. the OCI layout ------------------------------------------------------------------------
/usr/bin/python3 "$here/oci_pack.py" --rootfs "$rootfs" --out "$out_dir/oci" --tag "$tag" \
  --config "$here/image-config.json"
step "OCI layout written to $out_dir/oci"
