"""What relayd does with a visitor's first bytes: a ClientHello trickled byte by byte still routes;
oversized, non-TLS, unknown-SNI and silent connections are closed and counted; with
PROXY_PROTOCOL=true a PROXY v1 header is required in front of the hello."""
import ipaddress
import socket
import struct
import threading
import time

import pytest

import bridge_client as bc
import relay_harness as rh


def _tunnel(s):
    web = s.origin("web")
    return web, s.tunnel(web.port, links=1)


def _get_over_memory_tls(sock, tls, hostname):
    tls.handshake(sock)
    tls.send(sock, f"GET /hello HTTP/1.1\r\nHost: {hostname}\r\nConnection: close\r\n\r\n"
             .encode())
    return tls.recv_all(sock)


def _closed_and_counted(s, payload, outcome, timeout=15):
    before = s.relayd.metrics()
    sock = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
    try:
        if payload:
            sock.sendall(payload)
        waited, how = rh.wait_closed(sock, timeout)
    finally:
        sock.close()
    after = s.relayd.wait_metric(
        lambda m: m.visitors(outcome) >= before.visitors(outcome) + 1, what=f"{outcome} counted")
    assert after.visitors(outcome) == before.visitors(outcome) + 1
    assert after.visitors("served_local") == before.visitors("served_local")
    return waited, how


def test_a_hello_trickled_byte_by_byte_still_routes(stack):
    s = stack()
    web, tunnel = _tunnel(s)
    tls = rh.MemoryTls(tunnel.hostname, s.ca_file)
    hello = tls.start()
    assert hello[0] == 0x16 and len(hello) > 200
    sock = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(hello)):
        sock.sendall(hello[i:i + 1])
        time.sleep(0.002)  # pacing so that each byte is its own segment, not synchronization
    response = _get_over_memory_tls(sock, tls, tunnel.hostname)
    sock.close()
    assert response.startswith(b"HTTP/1.1 200 ")
    assert response.endswith(b"\r\n\r\nhello from web\n")
    assert s.relayd.metrics().visitors("served_local") == 1


def test_an_oversized_hello_is_closed_as_bad_hello(stack):
    s = stack()
    _tunnel(s)
    # A handshake message announcing 70000 bytes, sent as full 16 KiB handshake records: the relay
    # must give up at 64 KiB instead of buffering on.
    body = b"\x01" + (70000).to_bytes(3, "big") + b"\x03\x03" + b"\x00" * (70000 - 2)
    records = b"".join(b"\x16\x03\x01" + struct.pack(">H", len(body[i:i + 16384]))
                       + body[i:i + 16384] for i in range(0, len(body), 16384))
    sock = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
    before = s.relayd.metrics().visitors("rejected_bad_hello")
    try:
        try:
            sock.sendall(records)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: that is the point
        rh.wait_closed(sock, 10)
    finally:
        sock.close()
    after = s.relayd.wait_metric(lambda m: m.visitors("rejected_bad_hello") >= before + 1,
                                 what="bad hello counted")
    assert after.visitors("rejected_bad_hello") == before + 1


def test_non_tls_bytes_are_closed_as_bad_hello(stack):
    s = stack()
    _tunnel(s)
    _closed_and_counted(s, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "rejected_bad_hello")
    _closed_and_counted(s, b"\x00" * 10, "rejected_bad_hello")


def test_unknown_and_deeper_names_are_closed(stack):
    s = stack()
    web, tunnel = _tunnel(s)
    for name in ("other.domain", f"a.b.{tunnel.hostname}", f"nosuchtunnel.{rh.DOMAIN}"):
        hello, _ = rh.client_hello_bytes(name)
        _closed_and_counted(s, hello, "rejected_unknown_tunnel")
    assert web.requests == []


@pytest.mark.waits
def test_a_silent_connection_is_closed_after_10_s(stack):
    s = stack()
    before = s.relayd.metrics()
    # Two at once: one that sends nothing, one whose hello stops after 20 bytes.
    hello, _ = rh.client_hello_bytes(f"x.{rh.DOMAIN}")
    silent = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
    partial = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
    partial.sendall(hello[:20])
    try:
        waited_silent, _ = rh.wait_closed(silent, 20)
        waited_partial, _ = rh.wait_closed(partial, 20)
    finally:
        silent.close()
        partial.close()
    assert 9.0 <= waited_silent <= 12.0, waited_silent
    assert waited_partial <= 1.0, waited_partial  # closed at about the same moment
    after = s.relayd.wait_metric(
        lambda m: m.visitors("rejected_timeout") >= before.visitors("rejected_timeout") + 2,
        what="both timeouts counted")
    assert after.visitors("rejected_timeout") == before.visitors("rejected_timeout") + 2
    assert after.visitors("rejected_bad_hello") == before.visitors("rejected_bad_hello")


class ProxyHeaderForwarder:
    """Accepts on 127.0.0.1:0 and forwards to relayd, prefixing a PROXY v1 header: stands in for
    the load balancer in front of a PROXY_PROTOCOL=true relay (otunnel itself never sends one)."""

    def __init__(self, target_port, source="192.0.2.9"):
        self.target_port = target_port
        self.source = source
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                client, addr = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.conns += [client, upstream]
            upstream.sendall(f"PROXY TCP4 {self.source} 127.0.0.1 {addr[1]} 443\r\n".encode())
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            return

    def stop(self):
        self.stopping = True
        self.sock.close()
        for conn in self.conns:
            try:
                conn.close()
            except OSError:
                pass


def test_proxy_protocol_header_required_when_enabled(stack):
    s = stack(relayd_env={"PROXY_PROTOCOL": "true"})
    web = s.origin("web")
    forwarder = ProxyHeaderForwarder(s.relayd.tls_port)
    try:
        # otunnel reaches the relay through the forwarder; visitors go straight to relayd.
        tunnel = s.tunnel(web.port, links=1,
                          server_url=f"https://{rh.DOMAIN}:{forwarder.port}")
        hostname = tunnel.hostname

        tls = rh.MemoryTls(hostname, s.ca_file)
        hello = tls.start()
        sock = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=30)
        sock.sendall(b"PROXY TCP4 198.51.100.20 127.0.0.1 40000 443\r\n" + hello)
        response = _get_over_memory_tls(sock, tls, hostname)
        sock.close()
        assert response.startswith(b"HTTP/1.1 200 "), response[:200]
        assert response.endswith(b"hello from web\n")

        # The same hello without the header is refused.
        hello, _ = rh.client_hello_bytes(hostname)
        _closed_and_counted(s, hello, "rejected_bad_hello")
        assert len(web.requests) == 1
    finally:
        forwarder.stop()


def _proxy_v2(source, source_port, dest="127.0.0.1", dest_port=443):
    body = (ipaddress.IPv4Address(source).packed + ipaddress.IPv4Address(dest).packed
            + struct.pack(">HH", source_port, dest_port))
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack(">H", len(body)) + body


def test_proxy_protocol_source_address_reaches_the_client_in_open(stack, tmp_path):
    s = stack(relayd_env={"PROXY_PROTOCOL": "true"})
    # The API through controld's own TCP listener: relayd wants a PROXY header on every
    # connection, which http.client would not send.
    tunnel = bc.create_ready_tunnel(s.relayd, tmp_path, api=s.controld.request)
    bridge, _ = bc.attached_bridge(s.relayd, tunnel,
                                   proxy_header=b"PROXY TCP4 192.0.2.1 127.0.0.1 1111 443\r\n")
    cases = [(b"PROXY TCP4 198.51.100.20 127.0.0.1 40000 443\r\n", "198.51.100.20:40000"),
             (_proxy_v2("203.0.113.7", 51234), "203.0.113.7:51234"),
             (b"PROXY TCP6 2001:db8::1 ::1 1234 443\r\n", "[2001:db8::1]:1234"),
             (b"PROXY UNKNOWN\r\n", None)]
    visitors = []
    for conn_id, (header, address) in enumerate(cases, start=1):
        hello, _ = rh.client_hello_bytes(tunnel["hostname"])
        visitor = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=10)
        visitor.sendall(header + hello)
        visitors.append(visitor)
        kind, got_id, body = bc.parse_stream_frame(bridge.recv_message()[1])
        while kind != bc.KIND_OPEN:  # the previous visitor's hello, as data frames
            kind, got_id, body = bc.parse_stream_frame(bridge.recv_message()[1])
        assert (kind, got_id) == (bc.KIND_OPEN, conn_id)
        route, seen = bc.parse_open(body)
        assert route == ""
        if address is None:  # UNKNOWN: the socket's own peer (the load balancer) or empty
            assert seen in ("", f"127.0.0.1:{visitor.getsockname()[1]}"), seen
        else:
            assert seen == address
    for visitor in visitors:
        visitor.close()
    bridge.close()
