#!/usr/bin/python3
"""Throughput of one stream through the tunnel, against the same stream straight to the origin.

Not a test (pytest never collects it: it lives outside tests/integration and its name does not
start with test_). It starts controld + relayd (relay_harness.Stack), a fast local origin (a
preallocated buffer written with sendall, so the origin is not the bottleneck), and otunnel, then
moves N MB with curl in each direction twice: directly to the origin over plain HTTP, and through
relayd + otunnel over TLS (visitor TLS terminated by otunnel in `http` mode). It prints MB/s for
both and the ratio tunnel/direct, and the CPU time relayd and otunnel spent per MB moved through
the tunnel (read from /proc, summed over every run; it holds steady on a busy machine where MB/s
does not).

Usage (after building controld, relayd and otunnel in build/):
    /usr/bin/python3 tests/bench/tunnel_throughput.py [--mb 200] [--links 2] [--runs 3]
    OT_BUILD_DIR=/work/main/build-asan /usr/bin/python3 tests/bench/tunnel_throughput.py --mb 50

Output, one line per direction, e.g.:
    download  direct 1850.3 MB/s  tunnel 210.4 MB/s  ratio 0.11  cpu ms/MB relayd 3.10 otunnel 4.02
The best of --runs runs is reported for each path.

With --rtt N it then measures small round trips on their own stream of the same tunnel (one
HTTPS keep-alive connection through relayd + otunnel, N requests of GET /dl?n=1): alone, then
while a bulk download runs on another stream. Run with --links 1 so both streams share one bridge
(issue 12 item 5: frame scheduling between streams). Prints p50 / p99 / max in ms for both.
"""
import argparse
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import relay_harness as rh  # noqa: E402

MB = 1_000_000
BLOCK = bytes(range(256)) * 4096  # 1 MiB


class FastOrigin:
    """HTTP/1.1, one thread per connection: GET /dl?n=N answers N bytes; POST /ul discards its
    body and answers the byte count."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            # Without it a small answer (head, then body) waits for a delayed ACK: 40 ms that
            # are the origin's, not the tunnel's, in every round trip of --rtt.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(conn):
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                length = 0
                while True:
                    header = reader.readline()
                    if header in (b"\r\n", b""):
                        break
                    key, value = header.decode().split(":", 1)
                    if key.strip().lower() == "content-length":
                        length = int(value)
                    if key.strip().lower() == "expect":
                        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if method == "GET":
                    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))
                    n = int(query["n"])
                    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode())
                    view = memoryview(BLOCK)
                    left = n
                    while left:
                        take = min(left, len(BLOCK))
                        conn.sendall(view[:take])
                        left -= take
                else:
                    left = length
                    sink = memoryview(bytearray(1 << 20))
                    while left:
                        got = reader.readinto(sink[:min(left, len(sink))])
                        if not got:
                            return
                        left -= got
                    body = str(length).encode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode()
                                 + b"\r\n\r\n" + body)
        except OSError:
            return
        finally:
            conn.close()

    def stop(self):
        self.sock.close()


def cpu_seconds(pid):
    """User + system CPU seconds of a running process (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_curl(args):
    started = time.monotonic()
    result = subprocess.run(["curl", "-sS", "--http1.1", *args], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"curl failed: {result.stderr}")
    return seconds, result.stdout


def round_trips(url, ca_file, count):
    """Milliseconds of `count` GET /dl?n=1 on one keep-alive connection through the tunnel."""
    parsed = urllib.parse.urlsplit(url)
    context = rh.client_context(ca_file)
    # The tunnel's hostname for SNI and Host, the socket to 127.0.0.1 (no resolver needed).
    connection = http.client.HTTPSConnection(parsed.hostname, parsed.port, timeout=30)
    connection.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", parsed.port), timeout=30),
        server_hostname=parsed.hostname)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", "/dl?n=1")
            response = connection.getresponse()
            if response.read() != BLOCK[:1]:
                raise RuntimeError("round trip: wrong body")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return times


def describe(times):
    ordered = sorted(times)
    def pick(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return f"p50 {pick(0.50):6.2f} ms  p99 {pick(0.99):6.2f} ms  max {ordered[-1]:6.2f} ms"


def rtt_probe(tunnel, ca_file, tunnel_args, count, size):
    alone = round_trips(tunnel.url, ca_file, count)
    print(f"round trips alone          {describe(alone)}  ({count})")
    bulk = threading.Thread(target=timed_curl, args=([*tunnel_args, "-o", "/dev/null",
                                                      f"{tunnel.url}/dl?n={size}"],))
    bulk.start()
    time.sleep(0.3)  # the download is under way
    shared = round_trips(tunnel.url, ca_file, count)
    still_running = bulk.is_alive()
    bulk.join()
    print(f"round trips with download  {describe(shared)}  ({count}"
          f"{'' if still_running else '; the download ended before the probe did: raise --mb'})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="megabytes per transfer")
    parser.add_argument("--links", type=int, default=2, help="otunnel --links")
    parser.add_argument("--runs", type=int, default=3, help="runs per path; the best is shown")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--rtt", type=int, default=0,
                        help="then this many small round trips, alone and beside a download")
    options = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="ot-bench-"))
    origin = FastOrigin()
    stack = rh.Stack(workdir, relayd_env={"SHUTDOWN_DRAIN_MS": "200", "LOG_LEVEL": "info"})
    try:
        tunnel = stack.tunnel(origin.port, links=options.links)
        size = options.mb * MB
        upload = workdir / "upload.bin"
        with open(upload, "wb") as f:
            for _ in range(size // len(BLOCK)):
                f.write(BLOCK)
            f.write(BLOCK[:size % len(BLOCK)])

        parsed = urllib.parse.urlsplit(tunnel.url)
        tunnel_args = ["--cacert", str(stack.ca_file), "--resolve",
                       f"{parsed.hostname}:{parsed.port}:127.0.0.1"]
        direct = f"http://127.0.0.1:{origin.port}"
        paths = {"direct": (direct, []), "tunnel": (tunnel.url, tunnel_args)}
        print(f"{options.mb} MB per transfer, otunnel --links {options.links}, "
              f"best of {options.runs}")
        daemons = {"relayd": stack.relayd.process.pid, "otunnel": tunnel.process.pid}
        for direction in ("download", "upload"):
            best = {}
            cpu = {}
            for name, (base, extra) in paths.items():
                before = {d: cpu_seconds(pid) for d, pid in daemons.items()}
                for _ in range(options.runs):
                    if direction == "download":
                        seconds, out = timed_curl([*extra, "-o", "/dev/null", "-w",
                                                   "%{size_download}", f"{base}/dl?n={size}"])
                    else:
                        # -T streams the file (--data-binary copies it first, at ~150 MB/s).
                        seconds, out = timed_curl([*extra, "-H", "Expect:", "-X", "POST", "-T",
                                                   str(upload), f"{base}/ul"])
                    if int(out) != size:
                        raise RuntimeError(f"{direction} {name}: {out} bytes, wanted {size}")
                    best[name] = max(best.get(name, 0.0), size / MB / seconds)
                if name == "tunnel":
                    moved = options.runs * size / MB
                    cpu = {d: (cpu_seconds(pid) - before[d]) * 1000 / moved
                           for d, pid in daemons.items()}
            print(f"{direction:8}  direct {best['direct']:8.1f} MB/s  "
                  f"tunnel {best['tunnel']:8.1f} MB/s  "
                  f"ratio {best['tunnel'] / best['direct']:.2f}  "
                  f"cpu ms/MB relayd {cpu['relayd']:.2f} otunnel {cpu['otunnel']:.2f}")
        if options.rtt:
            rtt_probe(tunnel, stack.ca_file, tunnel_args, options.rtt, size)
    finally:
        codes = stack.close()
        origin.stop()
        if options.keep:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        bad = {name: code for name, code in codes.items() if code != 0}
        if bad:
            print(f"processes exited badly: {bad}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
