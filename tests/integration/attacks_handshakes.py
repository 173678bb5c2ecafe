"""Attacks on relayd's handshake slots, as one client with a laptop would run them (loopback only,
bounded in count and time). The test file test_hardening_handshakes.py calls these functions;
run this module directly to see relayd's memory and counters under each attack:

    OT_BUILD_DIR=$PWD/build /usr/bin/python3 tests/integration/attacks_handshakes.py

  silent_api     connections that send a ClientHello for the API domain and then nothing
  silent_tunnel  the same for a tunnel's hostname
  hello_close    visitors that send a ClientHello for a tunnel and close at once
  huge_hello     a handshake record that announces a 16 MB ClientHello
"""
import socket
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bridge_client as bc  # noqa: E402
import relay_harness as rh  # noqa: E402
import resilience_harness as res  # noqa: E402

ATTACKER = "127.0.0.1"
BYSTANDER = "127.0.0.2"  # another loopback address: another source for relayd


# ---------------------------------------------------------------------------------------------
# The hostile clients

def connect_from(source, port, timeout=10):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))


def open_silent_handshakes(port, hostname, count, source=ATTACKER):
    """`count` connections that each send a real ClientHello for `hostname` and then nothing.
    Returns the sockets (the caller closes them) and when each sent its hello."""
    hello, _ = rh.client_hello_bytes(hostname)
    sockets = []
    sent_at = []
    try:
        for _ in range(count):
            sock = connect_from(source, port)
            sock.sendall(hello)
            sockets.append(sock)
            sent_at.append(time.monotonic())
    except BaseException:
        close_all(sockets)
        raise
    return sockets, sent_at


def close_all(sockets):
    for sock in sockets:
        try:
            sock.close()
        except OSError:
            pass


def hello_then_close(port, hostname, count, source=ATTACKER):
    """`count` visitors that send a ClientHello for `hostname` and close at once (FIN)."""
    hello, _ = rh.client_hello_bytes(hostname)
    start = time.monotonic()
    for _ in range(count):
        sock = connect_from(source, port)
        try:
            sock.sendall(hello)
        finally:
            sock.close()
    return time.monotonic() - start


def huge_hello(port, hostname, source=ATTACKER, timeout=15):
    """A handshake record whose ClientHello announces 16 MB, and nothing more: seconds until relayd
    closes the connection."""
    # Record header (handshake, TLS 1.0, 16384 bytes), then the handshake header: client_hello,
    # length 0xFFFFFF. The record never completes.
    announce = bytes([22, 3, 1]) + struct.pack(">H", 16384) + bytes([1, 0xFF, 0xFF, 0xFF])
    sock = connect_from(source, port)
    try:
        sock.sendall(announce)
        waited, _ = rh.wait_closed(sock, timeout)
        return waited
    finally:
        sock.close()


def held_for(sock, sent_at, timeout):
    """Seconds from `sent_at` (the hello) until relayd closed `sock`; None if it was still open
    `timeout` s after the hello."""
    try:
        rh.wait_closed(sock, max(0.01, sent_at + timeout - time.monotonic()))
    except TimeoutError:
        return None
    return time.monotonic() - sent_at


# ---------------------------------------------------------------------------------------------
# The legitimate clients, from another source

def api_call_from(source, relayd, path="/openapi.json", timeout=15):
    """GET `path` over TLS to the API domain from `source`: (status, seconds); status None when
    the connection was refused or closed before an answer."""
    start = time.monotonic()
    try:
        raw = connect_from(source, relayd.tls_port, timeout)
        with rh.client_context(relayd.ca_file).wrap_socket(raw, server_hostname=rh.DOMAIN) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {rh.DOMAIN}\r\n"
                        "Connection: close\r\n\r\n".encode())
            status, _, _ = rh.read_http_response(tls.makefile("rb"))
            return status, time.monotonic() - start
    except (ssl.SSLError, ConnectionError, OSError) as error:
        if isinstance(error, socket.timeout):
            raise
        return None, time.monotonic() - start


class BridgeFrom(bc.BridgeClient):
    """A raw bridge client whose connection comes from `source`."""

    def __init__(self, source, port, ca_file, timeout=15):  # noqa: super().__init__ connects
        self.port = port
        self.ca_file = ca_file
        self.timeout = timeout
        raw = connect_from(source, port, timeout)
        self.sock = rh.client_context(ca_file).wrap_socket(raw, server_hostname=rh.DOMAIN)
        self.buffer = b""
        self.status = None
        self.headers = {}
        self.body = b""


def visit_from(source, port, hostname, ca_file, timeout=15):
    """GET /hello from a tunnel's origin as a visitor from `source`: (status, body, seconds);
    status None when relayd refused the visitor."""
    start = time.monotonic()
    try:
        raw = connect_from(source, port, timeout)
        with rh.client_context(ca_file).wrap_socket(raw, server_hostname=hostname) as tls:
            tls.sendall(f"GET /hello HTTP/1.1\r\nHost: {hostname}\r\n\r\n".encode())
            status, _, body = rh.read_http_response(tls.makefile("rb"))
            return status, body, time.monotonic() - start
    except (ssl.SSLError, ConnectionError, OSError) as error:
        if isinstance(error, socket.timeout):
            raise
        return None, b"", time.monotonic() - start


# ---------------------------------------------------------------------------------------------
# Measuring


def value(metrics, name, **labels):
    """A metric's value; 0 for one this relayd does not export (older builds lack some)."""
    try:
        return metrics.get(name, **labels)
    except KeyError:
        return 0


def counters(relayd):
    class Lenient:
        def __init__(self, metrics):
            self.metrics = metrics

        def get(self, name, **labels):
            return value(self.metrics, name, **labels)

        def visitors(self, outcome):
            return self.get("opentunnel_visitor_connections_total", outcome=outcome)

    m = Lenient(relayd.metrics())
    return {
        "handshake slots shed (pool)": m.get("opentunnel_connections_shed_total", reason="handshakes"),
        "handshake slots shed (per source)": m.get("opentunnel_connections_shed_total",
                                                   reason="source_handshakes"),
        "api handshakes timed out": m.get("opentunnel_api_tls_handshakes_total", result="timeout"),
        "api handshakes ok": m.get("opentunnel_api_tls_handshakes_total", result="ok"),
        "visitors rejected_source_limit": m.visitors("rejected_source_limit"),
        "visitors rejected_too_many_connections": m.visitors("rejected_too_many_connections"),
        "visitors rejected_bad_hello": m.visitors("rejected_bad_hello"),
        "visitors served_local": m.visitors("served_local"),
        "visitor connections open": m.get("opentunnel_visitor_connections_open"),
    }


# ---------------------------------------------------------------------------------------------
# The CLI

def _report(name, relayd, before, peak, extra, counted_before):
    after = res.rss_kb(relayd.process.pid)
    print(f"\n== {name}")
    print(f"relayd VmRSS before {before} kB, during (peak) {peak} kB, after {after} kB")
    for key, value in extra.items():
        print(f"  {key}: {value}")
    for key, value in counters(relayd).items():
        if key == "visitor connections open":
            print(f"  {key}: {value:g}")
        else:
            print(f"  {key}: +{value - counted_before[key]:g}")


def _seconds_until(predicate, timeout):
    """Seconds until predicate() holds, as text; "not within N s" when it did not."""
    start = time.monotonic()
    try:
        rh.harness.wait_until(predicate, timeout, "the condition")
    except TimeoutError:
        return f"not within {timeout} s"
    return f"{time.monotonic() - start:.2f} s"


def _open_visitors(relayd):
    return relayd.metrics().get("opentunnel_visitor_connections_open") == 0


def main():
    with tempfile.TemporaryDirectory(prefix="ot-attack-handshakes-") as tmp:
        stack = rh.Stack(Path(tmp), relayd_env={"SHUTDOWN_DRAIN_MS": "200"})
        try:
            relayd = stack.relayd
            pid = relayd.process.pid
            web = stack.origin("web")
            tunnel = stack.tunnel(web.port, links=2)

            # 1. 300 silent handshakes for the API domain; a bystander calls the API meanwhile.
            counted = counters(relayd)
            before = res.rss_kb(pid)
            with res.RssPeak(pid) as rss:
                sockets, sent_at = open_silent_handshakes(relayd.tls_port, rh.DOMAIN, 300)
                status, waited = api_call_from(BYSTANDER, relayd)
                try:
                    bridge = BridgeFrom(BYSTANDER, relayd.tls_port, relayd.ca_file)
                    upgrade = bridge.upgrade(tunnel.tunnel_id)
                    bridge.close()
                except (ssl.SSLError, ConnectionError) as error:
                    upgrade = f"refused ({error.__class__.__name__})"
                held = [held_for(sock, at, 15) for sock, at in zip(sockets, sent_at)]
                close_all(sockets)
            closed = [t for t in held if t is not None]
            _report("silent API handshakes x300 from one address", relayd, before, rss.peak, {
                "bystander API call": f"status {status} after {waited:.3f} s",
                "bystander bridge upgrade": f"status {upgrade}",
                "attack connections closed by relayd": f"{len(closed)} of 300, the longest held "
                                                       f"{max(closed, default=0):.1f} s",
            }, counted)

            # 2. 600 silent handshakes for a tunnel; a bystander visits meanwhile.
            counted = counters(relayd)
            before = res.rss_kb(pid)
            with res.RssPeak(pid) as rss:
                sockets, _ = open_silent_handshakes(relayd.tls_port, tunnel.hostname, 600)
                status, _, waited = visit_from(BYSTANDER, relayd.tls_port, tunnel.hostname,
                                               stack.ca_file)
                freed = _seconds_until(lambda: _open_visitors(relayd), 60)
                close_all(sockets)
                _seconds_until(lambda: _open_visitors(relayd), 90)  # before the next attack
            _report("silent tunnel handshakes x600 from one address", relayd, before, rss.peak, {
                "bystander visit": f"status {status} after {waited:.3f} s",
                "slots freed by otunnel's handshake timeout after": freed,
            }, counted)

            # 3. 5,000 visitors that send a ClientHello and close at once.
            counted = counters(relayd)
            before = res.rss_kb(pid)
            with res.RssPeak(pid) as rss:
                spent = hello_then_close(relayd.tls_port, tunnel.hostname, 5000)
                freed = _seconds_until(lambda: _open_visitors(relayd), 90)
                status, _, waited = visit_from(ATTACKER, relayd.tls_port, tunnel.hostname,
                                               stack.ca_file)
            _report("hello-then-close visitors x5000 from one address", relayd, before, rss.peak, {
                "attack took": f"{spent:.2f} s",
                "every slot free again after": freed,
                "visit from the same address afterwards": f"status {status} after {waited:.3f} s",
            }, counted)

            # 4. A ClientHello announcing 16 MB.
            counted = counters(relayd)
            before = res.rss_kb(pid)
            with res.RssPeak(pid) as rss:
                waited = huge_hello(relayd.tls_port, tunnel.hostname)
            _report("a 16 MB ClientHello announced", relayd, before, rss.peak, {
                "closed by relayd after": f"{waited:.3f} s",
            }, counted)
        finally:
            stack.close()


if __name__ == "__main__":
    main()
