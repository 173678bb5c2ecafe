"""relayd's connection timers (protocol.md section 6), shortened through the environment: an idle
connection is reset after CONNECTION_IDLE_TIMEOUT_MS, a half-closed one after
HALF_CLOSE_TIMEOUT_MS without data, and a connection with traffic is left alone."""
import socket
import time

import pytest

import relay_harness as rh


@pytest.mark.waits
def test_an_idle_visitor_is_reset_after_the_idle_timeout(stack):
    s = stack(relayd_env={"CONNECTION_IDLE_TIMEOUT_MS": "2000"})
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    port = s.relayd.tls_port

    busy = rh.tls_connect(port, tunnel.hostname, s.ca_file)
    idle = rh.tls_connect(port, tunnel.hostname, s.ca_file)
    reader = busy.makefile("rb")
    started = time.monotonic()
    # The busy visitor asks for something every 0.5 s for 4 s: twice the idle timeout.
    while time.monotonic() - started < 4.0:
        busy.sendall(f"GET /hello HTTP/1.1\r\nHost: {tunnel.hostname}\r\n\r\n".encode())
        status, _, body = rh.read_http_response(reader)
        assert (status, body) == (200, b"hello from web\n")
        time.sleep(0.5)  # the traffic pattern under test, not a wait for an event

    # The idle one was reset meanwhile (the busy loop outlasts the timeout), and the relay
    # recorded its life: about 2 s, not less than 1.5 s, far less than 10 s.
    # wait_closed raises if the connection stays open. How the end shows (an error or an EOF)
    # is not checked: Python's TLS layer reports relayd's RST either way, depending on timing.
    rh.wait_closed(idle, 10)
    idle.close()
    metrics = s.relayd.wait_metric(
        lambda m: m.get("opentunnel_visitor_connection_duration_seconds_count") >= 1,
        what="the idle connection's duration recorded")
    assert metrics.get("opentunnel_visitor_connection_duration_seconds_count") == 1
    duration = metrics.get("opentunnel_visitor_connection_duration_seconds_sum")
    assert 1.5 <= duration < 10.0, duration
    assert metrics.get("opentunnel_visitor_connections_open") == 1  # the busy one
    busy.sendall(f"GET /hello HTTP/1.1\r\nHost: {tunnel.hostname}\r\n\r\n".encode())
    assert rh.read_http_response(reader)[0] == 200
    busy.close()


@pytest.mark.waits
def test_an_idle_visitor_is_not_reset_before_1_5_s(stack):
    s = stack(relayd_env={"CONNECTION_IDLE_TIMEOUT_MS": "2000"})
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    idle = rh.tls_connect(s.relayd.tls_port, tunnel.hostname, s.ca_file)
    quiet_since = time.monotonic()
    waited, how = rh.wait_closed(idle, 10)
    total = time.monotonic() - quiet_since
    idle.close()
    assert 1.5 <= total < 10.0, (total, how)


@pytest.mark.waits
def test_a_half_closed_visitor_is_reset_after_the_half_close_timeout(stack):
    s = stack(relayd_env={"HALF_CLOSE_TIMEOUT_MS": "2000"})
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)

    tls = rh.MemoryTls(tunnel.hostname, s.ca_file)
    sock = socket.create_connection(("127.0.0.1", s.relayd.tls_port), timeout=30)
    sock.sendall(tls.start())
    tls.handshake(sock)
    # /hang answers its headers and one byte, then never ends the body.
    tls.send(sock, f"GET /hang HTTP/1.1\r\nHost: {tunnel.hostname}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\nx" not in head:
        try:
            head += tls.obj.read(65536)
        except rh.ssl.SSLWantReadError:
            tls.incoming.write(sock.recv(65536))
    assert head.startswith(b"HTTP/1.1 200 ")
    sock.shutdown(socket.SHUT_WR)  # the visitor half-closes: a TCP FIN
    half_closed_at = time.monotonic()
    waited, how = rh.wait_closed(sock, 15)
    sock.close()
    assert 1.5 <= waited < 10.0, (waited, how)
    assert time.monotonic() - half_closed_at < 10.0
