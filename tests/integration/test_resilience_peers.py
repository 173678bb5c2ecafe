"""Hostile and broken peers, made with the fault proxy (tests/tools/fault_proxy.py) between
otunnel and relayd or between a visitor and relayd: a client whose path freezes or drops
silently is found by relayd's pings and its bridge freed, and otunnel reconnects around it; a
reset path is reconnected at once; a relay that never answers fails the attempt after 10 s; a
frozen visitor is cut by the idle timeout; a slowloris ClientHello is cut at 10 s; a visitor that
uploads and never reads is reset as too slow while its neighbour keeps full speed; a client that
ignores flow-control credit is closed with 1002. Counts are exact, bytes are checked, and
relayd's descriptors and memory return to their baseline after each fault."""
import socket
import ssl
import time

import pytest

import bridge_client as bc
import harness
import relay_harness as rh
import resilience_harness as rz

MB = 1_000_000
WINDOW = 524288
FAST_BRIDGES = {"BRIDGE_HEARTBEAT_MS": "1000", "BRIDGE_IDLE_TIMEOUT_MS": "2000"}


def _detaches(reason):
    return ("opentunnel_bridge_detaches_total", (("reason", reason),))


def _total(metrics, name):
    return sum(v for (n, _), v in metrics.values.items() if n == name)


def _timed_download(url, ca_file, size, seed, out):
    started = time.monotonic()
    got = rh.curl_url(f"{url}/bytes?n={size}&seed={seed}", ca_file, "--http1.1", "-o", str(out),
                      "-w", "%{http_code} %{size_download}", timeout=120)
    seconds = time.monotonic() - started
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"200 {size}", got.stdout
    assert rh.sha256_file(out) == rh.pattern_sha256(size, seed)
    return seconds


# ---------------------------------------------------------------------------------------------
# Clients whose path to relayd breaks

def test_a_frozen_client_is_retired_by_pings_and_reconnects_when_the_path_thaws(stack, tmp_path):
    s = stack(relayd_env=FAST_BRIDGES)
    relay = s.relayd
    web = s.origin()
    direct = s.tunnel(web.port, links=1, name="direct")
    proxy = rz.proxy_to(relay)
    try:
        frozen = rz.proxied_tunnel(s, proxy, web.port, links=1, name="frozen")
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2})
        rz.get_hello(rz.tunnel_url(frozen, relay), s.ca_file)
        baseline = rz.ResourceBaseline(relay.process, "relayd")

        # Both directions stop, sockets stay open: only relayd's pings can tell.
        proxy.set_mode("freeze")
        frozen_at = time.monotonic()
        rz.wait_metrics(relay, {_detaches("idle_retire"): 1, "opentunnel_bridges_attached": 1},
                        timeout=20)
        retired_after = time.monotonic() - frozen_at
        print(f"\nfrozen bridge retired after {retired_after:.1f} s")
        # Silent for the idle timeout plus one heartbeat (3 s here), read on 250 ms ticks.
        assert 1.5 <= retired_after <= 8.0, retired_after
        rz.get_hello(rz.tunnel_url(direct, relay), s.ca_file)  # the other tunnel never noticed
        # otunnel gave up on the silent bridge too (3 heartbeats) and is trying again.
        rz.wait_stderr(frozen, "reconnecting", timeout=30)

        # The path thaws: otunnel's attempt goes through and it is whole again.
        proxy.set_mode("pass")
        frozen.wait_connected(count=2, timeout=60)
        metrics = rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2})
        assert metrics.attaches("ok") == 3
        assert metrics.get("opentunnel_bridge_detaches_total", reason="idle_retire") == 1
        assert _total(metrics, "opentunnel_bridge_detaches_total") == 1
        size = 4 * MB
        _timed_download(rz.tunnel_url(frozen, relay), s.ca_file, size, "thawed",
                        tmp_path / "thawed.bin")
        baseline.wait_back()
    finally:
        proxy.close()


def test_a_client_whose_path_drops_without_fin_is_retired_and_reconnects_around_it(stack):
    s = stack(relayd_env=FAST_BRIDGES)
    relay = s.relayd
    web = s.origin()
    proxy = rz.proxy_to(relay)
    try:
        t = rz.proxied_tunnel(s, proxy, web.port, links=2, name="dropped")
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2})
        baseline = rz.ResourceBaseline(relay.process, "relayd")
        # The existing connections vanish (no FIN, no RST, never read again); new ones pass.
        proxy.set_mode("drop", scope="existing")
        dropped_at = time.monotonic()
        rz.wait_metrics(relay, {_detaches("idle_retire"): 2}, timeout=20)
        assert time.monotonic() - dropped_at <= 8.0
        t.wait_connected(count=2, timeout=60)
        metrics = rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2})
        assert metrics.attaches("ok") == 4
        assert _total(metrics, "opentunnel_bridge_detaches_total") == 2
        rz.get_hello(rz.tunnel_url(t, relay), s.ca_file)
        # The dropped connections are still open at the proxy: relayd freed its side anyway.
        dropped = [c for c in proxy.connections() if c["mode"] == "drop"]
        assert len(dropped) == 2 and not any(c["closed"] for c in dropped), dropped
        baseline.wait_back()
    finally:
        proxy.close()


def test_a_reset_path_is_reconnected_at_once(stack):
    s = stack()
    relay = s.relayd
    web = s.origin()
    proxy = rz.proxy_to(relay)
    try:
        t = rz.proxied_tunnel(s, proxy, web.port, links=2, name="reset")
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2})
        baseline = rz.ResourceBaseline(relay.process, "relayd")
        proxy.set_mode("reset", scope="existing")
        reset_at = time.monotonic()
        t.wait_connected(count=2, timeout=30)
        # 125-250 ms after an attached bridge ends, plus the TLS and attach round trips.
        assert time.monotonic() - reset_at < 5.0
        metrics = rz.wait_metrics(relay, {"opentunnel_bridges_attached": 2, _detaches("drop"): 2})
        assert metrics.attaches("ok") == 4
        assert _total(metrics, "opentunnel_bridge_detaches_total") == 2
        rz.get_hello(rz.tunnel_url(t, relay), s.ca_file)
        baseline.wait_back()
    finally:
        proxy.close()


@pytest.mark.waits
def test_a_relay_that_never_answers_fails_the_attempt_after_10_s(stack):
    s = stack()
    relay = s.relayd
    web = s.origin()
    proxy = rz.proxy_to(relay)
    try:
        t = rz.proxied_tunnel(s, proxy, web.port, links=1, name="blackholed")
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 1})
        # The link is cut and every new connection is swallowed: TCP accepts, nothing answers.
        proxy.set_mode("blackhole", scope="new")
        proxy.set_mode("reset", scope="existing")
        cut_at = time.monotonic()
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 0, _detaches("drop"): 1})
        harness.wait_until(lambda: any(c["mode"] == "blackhole" and c["discarded"] > 0
                                       for c in proxy.connections()), 30,
                           "otunnel's attempt (its ClientHello) to reach the black hole")
        # The attempt fails after 10 s (TCP, TLS, upgrade and attach together), then otunnel
        # waits and tries again.
        harness.wait_until(lambda: sum(c["mode"] == "blackhole" for c in proxy.connections())
                           >= 2, 40, "a second attempt")
        first, second = [c for c in proxy.connections() if c["mode"] == "blackhole"][:2]
        # otunnel abandoned the first attempt itself after 10 s, then waited its backoff.
        assert first["how_closed"] == "client_gave_up", first
        gave_up_after = first["closed_at"] - first["accepted_at"]
        assert 9.5 <= gave_up_after <= 15.0, gave_up_after
        assert second["accepted_at"] - first["closed_at"] >= 0.1, (first, second)
        assert second["accepted_at"] - cut_at >= 9.5
        proxy.set_mode("pass", scope="new")
        t.wait_connected(count=2, timeout=90)
        metrics = rz.wait_metrics(relay, {"opentunnel_bridges_attached": 1})
        assert metrics.attaches("ok") == 2
        rz.get_hello(rz.tunnel_url(t, relay), s.ca_file)
    finally:
        proxy.close()


# ---------------------------------------------------------------------------------------------
# Visitors that vanish, crawl, or never read

def test_a_frozen_visitor_is_cut_by_the_idle_timeout_and_freed(stack):
    s = stack(relayd_env={"CONNECTION_IDLE_TIMEOUT_MS": "2000"})
    relay = s.relayd
    web = s.origin()
    t = s.tunnel(web.port, links=1)
    proxy = rz.proxy_to(relay)
    try:
        baseline = rz.ResourceBaseline(relay.process, "relayd")
        visitor = rh.tls_connect(proxy.port, t.hostname, s.ca_file)
        reader = visitor.makefile("rb")
        visitor.sendall(f"GET /hello HTTP/1.1\r\nHost: {t.hostname}\r\n\r\n".encode())
        assert rh.read_http_response(reader)[::2] == (200, b"hello from origin\n")
        rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 1})

        proxy.set_mode("freeze")
        frozen_at = time.monotonic()
        # The visitor asks again; the frozen path holds the request, relayd hears nothing.
        visitor.sendall(f"GET /hello HTTP/1.1\r\nHost: {t.hostname}\r\n\r\n".encode())
        rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 0,
                                "opentunnel_relay_buffered_bytes": 0}, timeout=20)
        cut_after = time.monotonic() - frozen_at
        assert 1.5 <= cut_after <= 8.0, cut_after
        metrics = relay.metrics()
        assert metrics.get("opentunnel_visitor_connection_duration_seconds_count") == 1
        assert metrics.visitors("served_local") == 1
        assert metrics.get("opentunnel_bridges_attached") == 1  # the bridge is not involved
        # When the path thaws the visitor learns its connection is gone.
        proxy.set_mode("pass")
        rh.wait_closed(visitor, 15)  # raises if it stays open (the proxy may turn RST into FIN)
        reader.close()
        visitor.close()
        rz.get_hello(rz.tunnel_url(t, relay), s.ca_file)
        baseline.wait_back()
    finally:
        proxy.close()


def test_visitors_that_vanish_mid_download_are_cleaned_up_and_relayd_keeps_serving(
        stack, tmp_path):
    s = stack()
    relay = s.relayd
    web = s.origin()
    t = s.tunnel(web.port, links=1)
    proxy = rz.proxy_to(relay)
    url = rz.tunnel_url(t, relay)
    try:
        baseline = rz.ResourceBaseline(relay.process, "relayd")
        # Paced downloads: relayd is writing to the visitor when it goes away, so its next
        # write fails (EPIPE/ECONNRESET). One visitor process is killed (its kernel answers
        # with an RST); the other's path is reset by the proxy, both ways.
        killed = rz.Download(url, s.ca_file, 20 * MB, "killed", tmp_path / "killed.bin",
                             rate=2 * MB)
        proxied = f"https://{t.hostname}:{proxy.port}"
        reset = rz.Download(proxied, s.ca_file, 20 * MB, "reset", tmp_path / "reset.bin",
                            rate=2 * MB)
        harness.wait_until(lambda: all(d.in_flight() and d.out.stat().st_size > MB
                                       for d in (killed, reset)), 30,
                           "the downloads to be well under way")
        killed.kill()
        proxy.set_mode("reset")
        code, _, _ = reset.wait(60)
        assert code != 0  # curl saw the reset
        rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 0,
                                "opentunnel_relay_buffered_bytes": 0}, timeout=20)
        assert relay.process.poll() is None, f"relayd died: {relay.process.returncode}"
        metrics = relay.metrics()
        assert metrics.get("opentunnel_bridges_attached") == 1
        assert _total(metrics, "opentunnel_bridge_detaches_total") == 0
        # The same bridge serves the next visitor, every byte.
        _timed_download(url, s.ca_file, 4 * MB, "after", tmp_path / "after.bin")
        baseline.wait_back()
    finally:
        proxy.close()


@pytest.mark.waits
def test_a_slowloris_client_hello_is_cut_at_10_s(stack):
    s = stack()
    relay = s.relayd
    web = s.origin()
    t = s.tunnel(web.port, links=1)
    proxy = rz.proxy_to(relay)
    try:
        baseline = rz.ResourceBaseline(relay.process, "relayd")
        proxy.set_mode("trickle", bytes_per_interval=1, interval=1.0)
        hello, _ = rh.client_hello_bytes(t.hostname)
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
        sock.sendall(hello)  # whole, at once: the proxy hands relayd one byte a second
        waited, how = rh.wait_closed(sock, 30)
        sock.close()
        assert 9.0 <= waited <= 14.0, (waited, how)
        [conn] = proxy.connections()
        assert 8 <= conn["bytes_up"] <= 14, conn  # about one byte a second reached relayd
        assert conn["bytes_down"] == 0, conn
        metrics = rz.wait_metrics(relay, {("opentunnel_visitor_connections_total",
                                           (("outcome", "rejected_timeout"),)): 1})
        assert metrics.visitors("served_local") == 0
        assert metrics.get("opentunnel_visitor_connections_open") == 0
        baseline.wait_back()
    finally:
        proxy.close()


def test_a_visitor_that_uploads_and_never_reads_is_reset_and_its_neighbour_keeps_speed(
        stack, tmp_path):
    s = stack()
    relay = s.relayd
    web = s.origin()
    t = s.tunnel(web.port, links=1)  # one bridge: both visitors share it
    url = rz.tunnel_url(t, relay)
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    size = 20 * MB
    reference = _timed_download(url, s.ca_file, size, "reference", tmp_path / "ref.bin")

    # Uploads 2 MB to /echo and never reads: the echo fills its socket and relayd's window.
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", relay.tls_port))
    hog = rh.client_context(s.ca_file).wrap_socket(raw, server_hostname=t.hostname)
    body = rh.pattern_bytes(2 * MB, "echo")
    hog.sendall(f"POST /echo HTTP/1.1\r\nHost: {t.hostname}\r\nContent-Length: {len(body)}\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n".encode() + body)
    uploaded_at = time.monotonic()
    relay.wait_metric(lambda m: m.get("opentunnel_relay_buffered_bytes") >= WINDOW // 2,
                      timeout=30, what="the echo to back up in relayd")

    # Meanwhile a neighbour on the same bridge downloads at full speed.
    seconds = _timed_download(url, s.ca_file, size, "neighbour", tmp_path / "n.bin")
    print(f"\n20 MB: {reference:.2f} s alone, {seconds:.2f} s next to the hog")
    assert seconds <= max(3 * reference, reference + 5.0), (seconds, reference)

    metrics = rz.wait_metrics(relay, {("opentunnel_bridge_backpressure_total",
                                       (("event", "reset"),)): 1,
                                      "opentunnel_visitor_connections_open": 0,
                                      "opentunnel_relay_buffered_bytes": 0}, timeout=30)
    reset_after = time.monotonic() - uploaded_at
    assert reset_after <= 20.0, reset_after
    assert metrics.get("opentunnel_bridge_backpressure_total", event="stall") == 0
    assert metrics.get("opentunnel_bridges_attached") == 1
    assert metrics.attaches("ok") == 1
    assert _total(metrics, "opentunnel_bridge_detaches_total") == 0
    assert metrics.visitors("served_local") == 3
    # The hog finds its connection closed once it reads what its socket holds (wait_closed raises
    # if it stays open; TLS reports the RST as an error or an EOF, depending on timing).
    rh.wait_closed(hog, 15)
    hog.close()
    baseline.wait_back()


def test_a_client_that_ignores_credit_is_closed_1002_and_others_are_untouched(stack, tmp_path):
    s = stack()
    relay = s.relayd
    web = s.origin()
    other = s.tunnel(web.port, links=1, name="other")
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    tunnel = bc.create_ready_tunnel(relay, tmp_path)
    client, attached = bc.attached_bridge(relay, tunnel)
    assert attached["limits"]["window"] == WINDOW
    download = rz.Download(rz.tunnel_url(other, relay), s.ca_file, 6 * MB, "bystander",
                           tmp_path / "bystander.bin", rate=2 * MB)
    visitor = None
    try:
        # A visitor that sends its ClientHello and never reads.
        hello, _ = rh.client_hello_bytes(tunnel["hostname"])
        visitor = socket.socket()
        visitor.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        visitor.settimeout(15)
        visitor.connect(("127.0.0.1", relay.tls_port))
        visitor.sendall(hello)
        kind, conn_id, _ = bc.parse_stream_frame(client.recv_message()[1])
        assert (kind, conn_id) == (bc.KIND_OPEN, 1)
        received = b""
        while len(received) < len(hello):
            kind, conn_id, data = bc.parse_stream_frame(client.recv_message()[1])
            assert (kind, conn_id) == (bc.KIND_DATA, 1)
            received += data
        assert received == hello

        # Exactly the window, without waiting for credit: allowed.
        chunk = bc.data_frame(1, b"z" * 32768)
        for _ in range(WINDOW // 32768):
            client.send_binary(chunk)
        client.send_frame(bc.OP_PING, b"still-open?")
        granted = 0
        while True:
            op, payload = client.recv_frame()[1:]
            if op == bc.OP_PONG:
                assert payload == b"still-open?"
                break
            assert op == bc.OP_BINARY, (op, payload[:100])
            kind, _, body = bc.parse_stream_frame(payload)
            assert kind == bc.KIND_CREDIT
            granted += int.from_bytes(body, "big")
        # Then past it: the relay closes the whole bridge with 1002.
        sent = WINDOW
        close_code = None
        while sent <= WINDOW + granted + 8 * MB:
            try:
                client.send_binary(chunk)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                break
            sent += 32768
        close_code = client.wait_close(timeout=15)[0]
        assert close_code == 1002
        assert sent > WINDOW + granted
        rh.wait_closed(visitor, 15)  # the bridge's visitor is aborted with it
        metrics = rz.wait_metrics(relay, {_detaches("server_close"): 1,
                                          "opentunnel_bridges_attached": 1}, timeout=20)
        assert _total(metrics, "opentunnel_bridge_detaches_total") == 1
        download.assert_intact()  # the other tunnel's visitor never noticed
        rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 0,
                                "opentunnel_relay_buffered_bytes": 0})
        rz.get_hello(rz.tunnel_url(other, relay), s.ca_file)
    finally:
        download.kill()
        client.close()
        if visitor is not None:
            visitor.close()
    baseline.wait_back()
