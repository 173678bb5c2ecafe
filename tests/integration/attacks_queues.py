"""Clients that make relayd queue answers they never read (issue 10, items 2, 3 and 7), written
from the outside: raw TLS over memory BIOs, the RFC 6455 upgrade and frames by hand.

  ping_flood        a bridge upgrade (attached or not) flooded with pings, pongs never read
  pipelined_flood   thousands of pipelined API requests on one TLS connection, answers never read
  api_connections_flood  many API connections from one address, each pipelining requests and
                    never reading (together they could fill the process's buffered-bytes budget)
  frozen_controld_requests  API requests waiting on a controld that was frozen (SIGSTOP)

Each attack is bounded in bytes and time, loopback only, and reports relayd's RSS (VmRSS)
before, at its peak during and after the attack, with the counters that tell what relayd did.

CLI (starts controld and relayd from OT_BUILD_DIR in a temporary directory):
  python3 tests/integration/attacks_queues.py [ping|ping-attached|pipeline|connections|frozen|all]
"""
import base64
import json
import os
import select
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time

import bridge_client as bc
import harness
import relay_harness as rh
import resilience_harness as rz

MIB = 1024 * 1024
PING = bc.encode_frame(bc.OP_PING, b"")  # 6 bytes: an empty masked ping


class RawTls:
    """TLS to relayd's API domain over a raw socket: sends never block the attacker, reads happen
    only when asked (the point of these attacks is not reading)."""

    def __init__(self, relayd, timeout=15):
        self.sock = socket.create_connection(("127.0.0.1", relayd.tls_port), timeout=timeout)
        self.tls = rh.MemoryTls(rh.DOMAIN, relayd.ca_file)
        self.sock.sendall(self.tls.start())
        self.tls.handshake(self.sock, timeout=timeout)
        self.plain = b""
        self.pending = b""  # ciphertext not yet taken by the kernel
        self.closed = False

    def send_all(self, data, timeout=15):
        self.tls.obj.write(data)
        self.sock.settimeout(timeout)
        self.sock.sendall(self.tls.outgoing.read())

    def recv_until(self, marker, timeout=15, chunk=65536):
        """Decrypts what relayd sent until `marker`; returns what came before it and keeps the rest
        in `plain`. Reads at most `chunk` bytes at a time, so a caller can leave the rest unread."""
        deadline = time.monotonic() + timeout
        while marker not in self.plain:
            try:
                self.plain += self.tls.obj.read(chunk)
                continue
            except ssl.SSLWantReadError:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {marker!r} from relayd")
            self.sock.settimeout(remaining)
            data = self.sock.recv(chunk)
            if not data:
                raise ConnectionError("relayd closed")
            self.tls.incoming.write(data)
        head, self.plain = self.plain.split(marker, 1)
        return head

    def pump(self, chunk, total, seconds):
        """Sends `chunk` (plaintext) again and again, never reading, until `total` bytes were
        taken, `seconds` passed or relayd closed; returns the plaintext bytes sent."""
        self.sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + seconds
        while sent < total and time.monotonic() < deadline:
            if not self.pending:
                self.tls.obj.write(chunk)
                self.pending = memoryview(self.tls.outgoing.read())
                sent += len(chunk)
            try:
                n = self.sock.send(self.pending)
                self.pending = self.pending[n:]
            except BlockingIOError:
                select.select([], [self.sock], [], 0.1)  # relayd stopped reading us
            except (ConnectionResetError, BrokenPipeError):
                self.closed = True
                break
        self.sock.setblocking(True)
        return sent

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def upgrade(conn, tunnel_id):
    key = base64.b64encode(os.urandom(16)).decode()
    conn.send_all((f"GET /api/tunnel/{tunnel_id}/bridge HTTP/1.1\r\nHost: {rh.DOMAIN}\r\n"
                   "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = conn.recv_until(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert status == 101, head
    return status


def attach(conn, token):
    conn.send_all(bc.encode_frame(bc.OP_TEXT, json.dumps({"type": "attach", "token": token}).encode()))
    # The answer is one short unmasked text frame; its JSON is enough to look for.
    head = conn.recv_until(b"attached")
    assert head.replace(b" ", b"").endswith(b'"type":"'), head[:200]
    conn.plain = b""


def _metric(metrics, name, **labels):
    """The value, or 0 for a metric this relayd does not have (a build before the fix)."""
    try:
        return metrics.get(name, **labels) or 0
    except KeyError:
        return 0


def _buffered(relayd):
    return _metric(relayd.metrics(), "opentunnel_relay_buffered_bytes")


def _counters(relayd):
    m = relayd.metrics()
    return {
        "buffered_bytes": _metric(m, "opentunnel_relay_buffered_bytes"),
        "shed_source_api_connections": _metric(m, "opentunnel_connections_shed_total",
                                               reason="source_api_connections"),
        "peer_backlog_paused": _metric(m, "opentunnel_relay_peer_backlog_total", event="paused"),
        "peer_backlog_reset": _metric(m, "opentunnel_relay_peer_backlog_total", event="reset"),
        "api_proxy_failures": _metric(m, "opentunnel_api_proxy_failures_total"),
    }


def ping_flood(relayd, tunnel, total=64 * MIB, seconds=8.0, attached=False):
    """Opens a bridge upgrade for `tunnel` (attached with its token if `attached`) and sends
    `total` bytes of empty pings without reading a pong. Returns what it measured; the caller
    closes result["conn"]."""
    conn = RawTls(relayd)
    upgrade(conn, tunnel["id"])
    if attached:
        attach(conn, tunnel["token"])
    sampler = rz.RssPeak(relayd.process.pid).start()
    started = time.monotonic()
    sent = conn.pump(PING * 10923, total, seconds)  # 64 KiB of pings per TLS write
    elapsed = time.monotonic() - started
    during = _counters(relayd)
    return {"conn": conn, "sampler": sampler, "sent": sent, "seconds": elapsed,
            "closed_by_relay": conn.closed, "during": during}


def pipelined_flood(relayd, requests=20_000, seconds=10.0, path="/openapi.json"):
    """Sends `requests` pipelined GETs on one TLS connection and never reads an answer."""
    conn = RawTls(relayd)
    request = f"GET {path} HTTP/1.1\r\nHost: {rh.DOMAIN}\r\n\r\n".encode()
    sampler = rz.RssPeak(relayd.process.pid).start()
    batch = 500
    sent = conn.pump(request * batch, len(request) * requests, seconds)
    return {"conn": conn, "sampler": sampler, "sent": sent, "request_bytes": len(request)}


def api_connections_flood(relayd, connections=100, requests_each=600, seconds_each=0.5,
                          path="/openapi.json"):
    """Opens `connections` TLS connections to the API domain one after the other, from one
    address (127.0.0.1), and on each sends `requests_each` pipelined GETs without ever reading.
    Returns the connections still open (the caller closes them), how many relayd closed, and the
    RSS sampler started before the first."""
    request = f"GET {path} HTTP/1.1\r\nHost: {rh.DOMAIN}\r\n\r\n".encode()
    sampler = rz.RssPeak(relayd.process.pid).start()
    conns = []
    closed = refused = 0
    try:
        for _ in range(connections):
            try:
                conn = RawTls(relayd)
            except (ssl.SSLError, ConnectionError, OSError):
                closed += 1  # refused during the handshake
                continue
            conn.pump(request * requests_each, len(request) * requests_each, seconds_each)
            status = None if conn.closed else first_status(conn)
            if status == 429:
                refused += 1
                conn.close()
            elif status is None:
                closed += 1
                conn.close()
            else:
                conns.append(conn)
    except BaseException:
        for conn in conns:
            conn.close()
        raise
    return {"conns": conns, "refused_429": refused, "closed_by_relay": closed, "sampler": sampler}


def first_status(conn, timeout=5.0):
    """The status of the first answer on `conn` (decrypting only what it takes to see it: the
    attacker still leaves the rest unread); None when relayd closed without one."""
    try:
        head = conn.recv_until(b"\r\n", timeout, chunk=4096)
    except (OSError, ssl.SSLError):  # closed, reset, timed out or TLS failed: no answer
        return None
    conn.plain = head + b"\r\n" + conn.plain
    try:
        return int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def download_from(source, relayd, hostname, ca_file, length, seed="q", timeout=30):
    """GET /bytes from a tunnel's origin as a visitor from `source`: (status, intact, seconds);
    status None when refused, closed or stalled past `timeout`."""
    started = time.monotonic()
    try:
        raw = socket.create_connection(("127.0.0.1", relayd.tls_port), timeout=timeout,
                                       source_address=(source, 0))
        with rh.client_context(ca_file).wrap_socket(raw, server_hostname=hostname) as tls:
            tls.sendall(f"GET /bytes?n={length}&seed={seed} HTTP/1.1\r\nHost: {hostname}\r\n"
                        "Connection: close\r\n\r\n".encode())
            status, _, body = rh.read_http_response(tls.makefile("rb"))
            intact = body == rh.pattern_bytes(length, seed)
            return status, intact, time.monotonic() - started
    except (ssl.SSLError, ConnectionError, OSError):
        return None, False, time.monotonic() - started


def wait_settled(relayd, seconds=2.0, timeout=30.0):
    """Waits until relayd's buffered bytes stopped changing for `seconds` (every attacker
    connection paused or refused); returns them."""
    deadline = time.monotonic() + timeout
    last = _buffered(relayd)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _buffered(relayd)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            break
    return last


def wait_quiet(relayd, sampler, bound_kb, seconds):
    """Waits until relayd paused the peer (the counter moved) and then `seconds` more, or until
    RSS grew past `bound_kb` (the old, unbounded queue). Returns the peak growth in KiB."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if sampler.peak - sampler.before > bound_kb:
            return sampler.peak - sampler.before
        if _counters(relayd)["peer_backlog_paused"]:
            break
        time.sleep(0.1)
    end = time.monotonic() + seconds
    while time.monotonic() < end and sampler.peak - sampler.before <= bound_kb:
        time.sleep(0.1)
    return sampler.peak - sampler.before


def after_close(relayd, conn, timeout=30.0):
    """Closes the attacker and waits for relayd's buffered bytes to be given back; RSS after."""
    conn.close()
    harness.wait_until(lambda: _buffered(relayd) == 0, timeout, "buffered bytes back to 0")
    return rz.rss_kb(relayd.process.pid)


def frozen_controld_requests(stack, count=4):
    """Starts `count` API requests, freezes controld while they wait (the requests are sent to a
    frozen process: controld's accept queue holds them), and times how long each waits for its
    answer. Returns (seconds each request waited after the freeze, seconds until relayd marked the
    session down). controld is thawed before returning."""
    relayd = stack.relayd
    controld = stack.controld
    results = [None] * count
    controld.process.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        def one(i):
            started = time.monotonic()
            try:
                answer = relayd.api("GET", "/openapi.json")
                results[i] = (time.monotonic() - started, answer.status, answer.json())
            except Exception as error:  # noqa: BLE001 - reported, the caller asserts
                results[i] = (time.monotonic() - started, None, repr(error))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        rz.wait_metric_value(relayd, "opentunnel_control_connected", 0, timeout=45)
        down_after = time.monotonic() - frozen_at
        for thread in threads:
            thread.join(60)
    finally:
        controld.process.send_signal(signal.SIGCONT)
    return results, down_after


# ---------------------------------------------------------------------------------------------
# CLI

def _report(name, before_kb, peak_kb, after_kb, extra):
    print(f"{name}: relayd RSS before {before_kb / 1024:.1f} MiB, peak {peak_kb / 1024:.1f} MiB "
          f"(+{(peak_kb - before_kb) / 1024:.1f}), after {after_kb / 1024:.1f} MiB "
          f"(+{(after_kb - before_kb) / 1024:.1f}); {extra}")


def _run_ping(stack, attached):
    tunnel = bc.create_ready_tunnel(stack.relayd, stack.workdir)
    result = ping_flood(stack.relayd, tunnel, total=200 * MIB, seconds=10.0, attached=attached)
    peak = result["sampler"].stop()
    after = after_close(stack.relayd, result["conn"])
    name = "ping flood (attached bridge)" if attached else "ping flood (upgrade, no attach)"
    _report(name, result["sampler"].before, peak, after,
            f"sent {result['sent'] / MIB:.0f} MiB of pings in {result['seconds']:.1f} s, "
            f"reset by relayd: {result['closed_by_relay']}, counters during: {result['during']}, "
            f"after: {_counters(stack.relayd)}")


def _run_pipeline(stack):
    result = pipelined_flood(stack.relayd, requests=20_000)
    wait_quiet(stack.relayd, result["sampler"], 512 * 1024, 5.0)
    during = _counters(stack.relayd)
    peak = result["sampler"].stop()
    after = after_close(stack.relayd, result["conn"])
    _report("pipelined GET /openapi.json", result["sampler"].before, peak, after,
            f"sent {result['sent'] // result['request_bytes']} requests "
            f"({result['sent'] / MIB:.1f} MiB), counters during: {during}, "
            f"after: {_counters(stack.relayd)}")


def _run_connections(stack):
    relayd = stack.relayd
    web = stack.origin("web")
    tunnel = stack.tunnel(web.port)
    # 140: at the old 2 MiB each, more than the default 256 MiB budget.
    result = api_connections_flood(relayd, connections=140, requests_each=600)
    try:
        buffered = wait_settled(relayd)
        during = _counters(relayd)
        status, intact, waited = download_from("127.0.0.2", relayd, tunnel.hostname,
                                               stack.ca_file, 8 * MIB)
        peak = result["sampler"].stop()
    finally:
        for conn in result["conns"]:
            conn.close()
    harness.wait_until(lambda: _buffered(relayd) == 0, 30, "buffered bytes back to 0")
    after = rz.rss_kb(relayd.process.pid)
    _report("140 API connections from one address, 600 pipelined GET /openapi.json each, never "
            "read", result["sampler"].before, peak, after,
            f"{len(result['conns'])} left open, {result['refused_429']} refused with 429, "
            f"{result['closed_by_relay']} closed by relayd otherwise, "
            f"buffered bytes settled at {buffered / MIB:.1f} MiB; a visitor from 127.0.0.2 "
            f"downloading 8 MiB meanwhile: status {status}, intact {intact}, {waited:.2f} s; "
            f"counters during: {during}, after: {_counters(relayd)}")


def _run_frozen(stack):
    before = rz.rss_kb(stack.relayd.process.pid)
    results, down_after = frozen_controld_requests(stack)
    after = rz.rss_kb(stack.relayd.process.pid)
    waits = ", ".join(f"{r[0]:.1f} s -> {r[1]}" for r in results)
    _report("requests in flight when controld freezes", before, max(before, after), after,
            f"session down after {down_after:.1f} s; waits: {waits}; "
            f"counters: {_counters(stack.relayd)}")


def main(argv):
    which = argv[1] if len(argv) > 1 else "all"
    with tempfile.TemporaryDirectory(prefix="ot-attacks-queues-") as workdir:
        stack = rh.Stack(workdir)
        try:
            if which in ("ping", "all"):
                _run_ping(stack, attached=False)
            if which in ("ping-attached", "all"):
                _run_ping(stack, attached=True)
            if which in ("pipeline", "all"):
                _run_pipeline(stack)
            if which in ("connections", "all"):
                _run_connections(stack)
            if which in ("frozen", "all"):
                _run_frozen(stack)
        finally:
            stack.close()


if __name__ == "__main__":
    main(sys.argv)
