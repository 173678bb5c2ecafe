#!/usr/bin/env python3
"""Capture real ClientHellos as test fixtures for common/client_hello.

Listens on 127.0.0.1 (port 0), points one real client at a time at it (openssl s_client, curl,
headless Chromium), reads exactly the TLS records that carry the first handshake message (record
headers and the 4-byte handshake header are the only things parsed), writes them to
tests/fixtures/client_hello/<name>.bin with a <name>.json sidecar, and closes the connection.
The server never answers, so every client gives up on its own or is killed.

Usage: tests/tools/capture_client_hellos.py [--out DIR] [--only NAME ...]
Stdlib only. Needs openssl, curl and /usr/bin/chromium on PATH.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "client_hello")
CHROMIUM = "/usr/bin/chromium"
ACCEPT_TIMEOUT = 20.0
READ_TIMEOUT = 10.0
MAX_HELLO = 65536


def chromium_command(port, profile, extra):
    return [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--user-data-dir=" + profile,
        "--host-resolver-rules=MAP * 127.0.0.1:%s" % port,
    ] + extra + ["https://route.tunnel.example.localhost/"]


# A real client's hello that spans records: ALPN names are opaque<1..255>, so 100 long ones plus
# h2 and http/1.1 push OpenSSL's hello past 16384 bytes.
BIG_ALPN = ["h2", "http/1.1"] + ["p%03d-" % i + "x" * 195 for i in range(100)]

# Chromium 156 always sends an X25519MLKEM768 key share: the PostQuantumKyber/UseMLKEM features
# and the PostQuantumKeyAgreementEnabled policy are gone from the binary (the policy was removed
# in Chrome 147), so there is no classic-only Chromium capture; curl and openssl cover X25519.
# name -> (expected sni, expected alpn, command builder(port, profile dir), version command, notes)
CLIENTS = {
    "openssl_sni": (
        "demo.example.localhost", [],
        lambda port, _: ["openssl", "s_client", "-connect", "127.0.0.1:%s" % port,
                         "-servername", "demo.example.localhost"],
        ["openssl", "version"], "OpenSSL default: TLS 1.3 + 1.2, X25519 key share, no ALPN"),
    "openssl_alpn": (
        "demo.example.localhost", ["h2", "http/1.1"],
        lambda port, _: ["openssl", "s_client", "-connect", "127.0.0.1:%s" % port,
                         "-servername", "demo.example.localhost", "-alpn", "h2,http/1.1"],
        ["openssl", "version"], "OpenSSL with -alpn h2,http/1.1"),
    "openssl_tls12": (
        "demo.example.localhost", [],
        lambda port, _: ["openssl", "s_client", "-connect", "127.0.0.1:%s" % port,
                         "-servername", "demo.example.localhost", "-tls1_2"],
        ["openssl", "version"], "OpenSSL with -tls1_2: no supported_versions extension"),
    "openssl_multirecord": (
        "demo.example.localhost", BIG_ALPN,
        lambda port, _: ["openssl", "s_client", "-connect", "127.0.0.1:%s" % port,
                         "-servername", "demo.example.localhost", "-alpn", ",".join(BIG_ALPN)],
        ["openssl", "version"],
        "OpenSSL with a ~20 KB ALPN list: the hello is larger than one record (2^14) and spans two"),
    "curl_h2": (
        "abc.example.localhost", ["h2", "http/1.1"],
        lambda port, _: ["curl", "--silent", "--http2", "-k", "--max-time", "15",
                         "--resolve", "abc.example.localhost:%s:127.0.0.1" % port,
                         "https://abc.example.localhost:%s/" % port],
        ["curl", "--version"], "curl --http2 -k (ALPN h2,http/1.1)"),
    "chromium_pq": (
        "route.tunnel.example.localhost", ["h2", "http/1.1"],
        lambda port, profile: chromium_command(port, profile, []),
        [CHROMIUM, "--version"], "headless Chromium defaults: X25519MLKEM768 key share, GREASE"),
}


def read_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("peer closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def read_client_hello(conn):
    """Reads whole records until the first handshake message is complete; returns the raw bytes
    and the number of records. Only record headers and the handshake header are looked at."""
    raw = b""
    handshake = b""
    records = 0
    while True:
        header = read_exact(conn, 5)
        if header[0] != 0x16:
            raise ValueError("record content type %d is not handshake" % header[0])
        length = int.from_bytes(header[3:5], "big")
        if length == 0 or length > 16384:
            raise ValueError("bad record length %d" % length)
        payload = read_exact(conn, length)
        raw += header + payload
        handshake += payload
        records += 1
        if len(raw) > MAX_HELLO:
            raise ValueError("ClientHello larger than %d bytes" % MAX_HELLO)
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            return raw, records


def client_version(command):
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def stop(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group we created: Chromium's helpers too
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def capture(name, out_dir):
    sni, alpn, build, version_command, notes = CLIENTS[name]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    profile = tempfile.mkdtemp(prefix="ot-capture-")
    command = build(str(port), profile)
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + ACCEPT_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("%s: no ClientHello naming %s" % (name, sni))
            listener.settimeout(remaining)
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(READ_TIMEOUT)
                try:
                    raw, records = read_client_hello(conn)
                except (EOFError, ValueError, socket.timeout) as error:
                    print("%s: skipped a connection: %s" % (name, error), file=sys.stderr)
                    continue
            # A browser may open other connections; keep the one that names our host.
            if sni.encode() in raw:
                break
            print("%s: skipped a connection without %s" % (name, sni), file=sys.stderr)
    finally:
        stop(proc)
        listener.close()
        shutil.rmtree(profile, ignore_errors=True)

    display = build("PORT", "<fresh tmp dir>")
    display = ["<%d ALPN names, listed under alpn>" % len(BIG_ALPN) if arg == ",".join(BIG_ALPN)
               else arg for arg in display]
    with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
        f.write(raw)
    sidecar = {
        "client": name,
        "client_version": client_version(version_command),
        "captured": datetime.date.today().isoformat(),
        "command": " ".join(display),
        "notes": notes,
        "sni": sni,
        "alpn": alpn,
        "bytes": len(raw),
        "records": records,
    }
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(sidecar, f, indent=1)
        f.write("\n")
    print("%s: %d bytes in %d record(s)" % (name, len(raw), records))
    return len(raw)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*", choices=sorted(CLIENTS), default=None)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sizes = {}
    for name in args.only or CLIENTS:
        sizes[name] = capture(name, args.out)
    # The post-quantum key share is the point of the Chromium pair: check it is there and gone.
    if "chromium_pq" in sizes and sizes["chromium_pq"] <= 1500:
        sys.exit("chromium_pq is only %d bytes: no post-quantum key share?" % sizes["chromium_pq"])
    if "openssl_multirecord" in sizes and sizes["openssl_multirecord"] <= 16384 + 5:
        sys.exit("openssl_multirecord fits one record (%d bytes)" % sizes["openssl_multirecord"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
