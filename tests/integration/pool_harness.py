"""Helpers for the whole-pool tests (test_pool_full.py, test_pool_browser.py): origins that are real
otunnel processes, a TCP forwarder the test can kill (a second way to reach the relay), visitors
from many loopback source addresses, and the relay's documented choice of origin recomputed here.

Loopback range of these tests: 127.0.24.x for listeners, 127.24.N.M for visitors.
"""
import concurrent.futures
import http.client
import json
import math
import socket
import struct
import subprocess
import threading
import time

import harness
import relay_harness as rh

M64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# The relay's choice (docs/pools-choice.md), written out independently of relayd.

def _fnv1a(h, data):
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & M64
    return h


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def expected_origin(source, origins):
    """Weighted rendezvous hashing with equal weights: the highest 1 / -ln(u) wins."""
    def score(name):
        h = _fnv1a(_fnv1a(_fnv1a(0xCBF29CE484222325, source.encode()), b"\0"), name.encode())
        u = ((_splitmix64(h) >> 11) + 0.5) / float(1 << 53)
        return (1.0 / -math.log(u), name)
    return max(origins, key=score)


def source_address(i):
    """Visitor i's address: 127.24.N.M (any 127/8 address is loopback on Linux)."""
    return f"127.24.{i // 250}.{i % 250 + 1}"


# ---------------------------------------------------------------------------------------------
# Visitors: HTTPS through relayd to the tunnel, bound to a source address.

class _SourceHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, port, hostname, context, source, timeout):
        super().__init__(hostname, port, timeout=timeout, context=context)
        self._relay_port = port
        self._source = source

    def connect(self):
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            raw.settimeout(self.timeout)
            raw.bind((self._source, 0))
            raw.connect(("127.0.0.1", self._relay_port))
            self.sock = self._context.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise


class Visitors:
    """Visits of one tunnel. Every origin's local server answers /hello with "hello from NAME"."""

    def __init__(self, relay_port, hostname, ca_file):
        self.port = relay_port
        self.hostname = hostname
        self.context = rh.client_context(ca_file)  # one context: loading the CA is the slow part

    def connection(self, source, timeout=15):
        return _SourceHTTPSConnection(self.port, self.hostname, self.context, source, timeout)

    def visit(self, source, timeout=15):
        """The name of the origin that answered a visitor from `source` (raises on failure)."""
        connection = self.connection(source, timeout)
        try:
            connection.request("GET", "/hello", headers={"Connection": "close"})
            response = connection.getresponse()
            body = response.read().decode()
            if response.status != 200 or not body.startswith("hello from "):
                raise RuntimeError(f"{source}: {response.status} {body[:200]!r}")
            return body[len("hello from "):].strip()
        finally:
            connection.close()

    def try_visit(self, source, timeout=15):
        try:
            return self.visit(source, timeout)
        except (OSError, RuntimeError, http.client.HTTPException):
            return None

    def visit_all(self, indexes, threads=16):
        """{i: origin name} for visitors `indexes`, visited concurrently."""
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(lambda i: (i, self.visit(source_address(i))), indexes))

    def hold_open(self, source, timeout=15):
        """A visitor whose stream stays open: TLS done, a request sent, its answer never read to
        the end (/hang answers headers and one byte, then waits). Close it to end the stream."""
        connection = self.connection(source, timeout)
        connection.request("GET", "/hang")
        held = _Held(connection.sock, connection)
        response = connection.getresponse()
        held.response = response
        assert response.status == 200, response.status
        assert response.read(1) == b"x"
        return held


class _Held:
    """An open visitor; close() resets its connection, so the stream ends at once: a plain close
    is a half-close the tunnel carries to the origin, whose /hang never finishes its side (and
    http.client's response keeps its own reference to the socket besides)."""

    def __init__(self, sock, connection):
        self.sock = sock
        self.connection = connection
        self.response = None

    def close(self):
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        if self.response is not None:
            self.response.close()
        self.connection.close()
        self.sock.close()


class Load(threading.Thread):
    """Visitors running throughout a test phase: cycles over `indexes`, one visit at a time per
    worker, recording (start, end, index, origin or None for a failure)."""

    def __init__(self, visitors, indexes, workers=4):
        super().__init__(daemon=True)
        self.visitors = visitors
        self.indexes = list(indexes)
        self.workers = workers
        self.records = []
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def _work(self, offset):
        position = offset
        while not self._halt.is_set():
            i = self.indexes[position % len(self.indexes)]
            position += self.workers
            started = time.monotonic()
            answer = self.visitors.try_visit(source_address(i), timeout=10)
            with self._lock:
                self.records.append((started, time.monotonic(), i, answer))

    def run(self):
        threads = [threading.Thread(target=self._work, args=(w,), daemon=True)
                   for w in range(self.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def between(self, start, end):
        """Visits that started at or after `start` and ended before `end`."""
        with self._lock:
            return [r for r in self.records if r[0] >= start and r[1] <= end]

    def stop(self):
        self._halt.set()
        self.join(30)


# ---------------------------------------------------------------------------------------------
# A TCP forwarder: a second way to the relay that the test can cut.

class Forwarder:
    """Accepts on (host, 0) and copies bytes both ways to target; kill() closes the listener and
    every connection at once (what a broken path or a dead front looks like to both ends)."""

    def __init__(self, host, target):
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(128)
        self.host, self.port = self.listener.getsockname()
        self.pairs = []
        self._lock = threading.Lock()
        self.dead = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return
            try:
                outside = socket.create_connection(self.target, timeout=10)
            except OSError:
                inside.close()
                continue
            outside.settimeout(None)
            for sock in (inside, outside):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (inside, outside)
            with self._lock:
                if self.dead:
                    inside.close()
                    outside.close()
                    return
                self.pairs.append(pair)
            threading.Thread(target=self._copy, args=(inside, outside, pair), daemon=True).start()
            threading.Thread(target=self._copy, args=(outside, inside, pair), daemon=True).start()

    def _copy(self, source, sink, pair):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        # One side ended: end both, as a forwarder that loses a leg would.
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            if pair in self.pairs:
                self.pairs.remove(pair)

    def connections(self):
        with self._lock:
            return len(self.pairs)

    def stop_listening(self):
        """New connections are refused from now on; the ones carried stay up."""
        with self._lock:
            self.dead = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def cut(self, count):
        """Closes `count` of the carried connections (the oldest first)."""
        with self._lock:
            pairs, self.pairs = self.pairs[:count], self.pairs[count:]
        self._close(pairs)

    def kill(self):
        self.stop_listening()
        with self._lock:
            pairs, self.pairs = self.pairs, []
        self._close(pairs)

    @staticmethod
    def _close(pairs):
        for pair in pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


# ---------------------------------------------------------------------------------------------
# Origins: otunnel processes, their state and status.

def otunnel_status(state_dir):
    """`otunnel status --json` of a state directory: (exit code, document)."""
    done = subprocess.run([str(rh.OTUNNEL), "--state-dir", str(state_dir), "status", "--json"],
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
    return done.returncode, json.loads(done.stdout)


def profile_figures(state_dir, pid=None):
    """{profile name: (attached, streams, [addresses])} from the origin's status, or None (also
    when `pid` is given and the status was written by another process: a killed one's)."""
    code, document = otunnel_status(state_dir)
    if code != 0 or not document.get("tunnels"):
        return None
    if pid is not None and document["tunnels"][0].get("pid") != pid:
        return None
    figures = {}
    for profile in document["tunnels"][0]["profiles"]:
        addresses = profile["addresses"]
        figures[profile["name"]] = (sum(a["attached"] for a in addresses),
                                    sum(a["streams"] for a in addresses), addresses)
    return figures


def copy_state_without_token(owner, directory):
    """The owner's state file, token removed, in a new state directory (docs/pools-dialer.md)."""
    directory.mkdir(mode=0o700)
    state_file = next(p for p in owner.state_dir.glob("*.json")
                      if not p.name.endswith(".status.json"))
    copy = json.loads(state_file.read_text())
    del copy["token"]
    target = directory / state_file.name
    target.write_text(json.dumps(copy))
    target.chmod(0o600)
    return directory


def wait_profiles(origin, wanted, timeout=30):
    """Until the origin's status shows `wanted` ({profile: attached links})."""
    def check():
        origin._alive()
        figures = profile_figures(origin.state_dir, origin.process.pid)
        if figures and all(figures.get(p, (None,))[0] == n for p, n in wanted.items()):
            return figures
        return None
    return harness.wait_until(check, timeout, f"{origin.name}: links {wanted}")
