"""controld goes away while tunnels carry traffic (docs/relayd.md "controld", docs/reliability.md):
killed (SIGKILL) and started again on the same database and sockets, stopped gracefully
(SIGTERM), or frozen (SIGSTOP, noticed by the session's keepalive). Meanwhile no bridge closes,
no visitor connection breaks, every byte arrives, relayd answers the API with 503 JSON at once
and authorizes attaches from its cache; afterwards controld's view equals relayd's and pushes
(a deletion, a newly issued certificate) reach relayd again."""
import signal
import socket
import time

import pytest

import bridge_client as bc
import harness
import relay_harness as rh
import resilience_harness as rz

MB = 1_000_000


def _keepalive_get(sock, reader, hostname, origin="origin"):
    """One request on a visitor connection that stays open across the fault."""
    sock.sendall(f"GET /hello HTTP/1.1\r\nHost: {hostname}\r\n\r\n".encode())
    status, _, body = rh.read_http_response(reader)
    assert (status, body) == (200, f"hello from {origin}\n".encode())


def _assert_api_unavailable(relayd, tunnel_id, token):
    """relayd's API while controld is away: 503 ServiceUnavailableError JSON, at once."""
    for method, path, kwargs in (("GET", f"/api/tunnel/{tunnel_id}", {"token": token}),
                                 ("POST", "/api/tunnel", {})):
        started = time.monotonic()
        answer = relayd.api(method, path, **kwargs)
        elapsed = time.monotonic() - started
        assert answer.status == 503, answer
        assert answer.headers.get("Content-Type", "").startswith("application/json"), answer
        assert answer.json()["_tag"] == "ServiceUnavailableError", answer
        assert elapsed < 3.0, f"{method} {path} took {elapsed:.2f} s"


def _probe_until(relayd, hostname, wanted, timeout=30.0):
    """Visitors that relayd refuses, sent until one is counted as `wanted` (the outcome shows
    what relayd's cache holds for the tunnel). Every probe is counted exactly once."""
    outcomes = ("rejected_unknown_tunnel", "rejected_cert_not_ready", "rejected_no_bridge")
    before = relayd.metrics()
    start = {o: before.visitors(o) for o in outcomes}
    probes = 0
    deadline = time.monotonic() + timeout
    while True:
        rz.hello_then_close(relayd.tls_port, hostname)
        probes += 1
        metrics = relayd.wait_metric(
            lambda m: sum(m.visitors(o) - start[o] for o in outcomes) == probes,
            what="the probe to be counted")
        if metrics.visitors(wanted) > start[wanted]:
            assert metrics.visitors(wanted) - start[wanted] == 1
            return probes
        assert time.monotonic() < deadline, f"relayd never counted {wanted}"


def test_controld_sigkill_under_load_loses_no_bridge_no_connection_no_byte(stack, tmp_path):
    s = stack()
    web = s.origin()
    a = s.tunnel(web.port, links=2, name="a")
    b = s.tunnel(web.port, links=2, name="b")
    proxy = rz.proxy_to(s.relayd)  # c's links go through it, so the test can cut them
    raw_bridges = []
    transfers = []
    try:
        c = rz.proxied_tunnel(s, proxy, web.port, links=2, name="c")
        tokens = {t.tunnel_id: t.state()["token"] for t in (a, b, c)}
        relay = s.relayd
        rz.wait_views_match(s, tokens, {a.tunnel_id: 2, b.tunnel_id: 2, c.tunnel_id: 2})
        baseline = rz.ResourceBaseline(relay.process, "relayd")

        # Traffic through a and b, paced to outlast the gap (c's links are cut on purpose
        # below, which aborts what they carry; c gets its download once they are back).
        for t in (a, b):
            url = rz.tunnel_url(t, relay)
            transfers.append(rz.Download(url, s.ca_file, 8 * MB, f"kill-{t.name}",
                                         tmp_path / f"{t.name}.bin", rate=MB))
        for t in (a, b):
            transfers.append(rz.Upload(rz.tunnel_url(t, relay), s.ca_file, 4 * MB,
                                       f"up-{t.name}", tmp_path, limit_rate=600_000))
        visitor = rh.tls_connect(relay.tls_port, a.hostname, s.ca_file)
        reader = visitor.makefile("rb")
        _keepalive_get(visitor, reader, a.hostname)
        harness.wait_until(lambda: all(d.in_flight() for d in transfers[:2]), 30,
                           "the downloads to be in flight")
        # All five visitors are on otunnel's bridges before the gap (a bridge attached later,
        # the raw one below, never serves them: it does not answer opens).
        rz.wait_metrics(relay, {"opentunnel_visitor_connections_open": 5})

        # The gap: controld is killed.
        assert rz.kill_controld(s.controld) == -signal.SIGKILL
        rz.wait_metric_value(relay, "opentunnel_control_connected", 0)
        _assert_api_unavailable(relay, a.tunnel_id, tokens[a.tunnel_id])
        # Attaches are authorized from the cache: a new bridge of a known tunnel...
        raw, attached = bc.attached_bridge(relay, {"id": a.tunnel_id,
                                                   "token": tokens[a.tunnel_id]})
        raw_bridges.append(raw)
        assert attached["limits"]["window"] == 524288
        # ...a bad token still is refused from the cache...
        refused = bc.BridgeClient(relay.tls_port, s.ca_file)
        assert refused.upgrade(a.tunnel_id) == 101
        answer = refused.attach("tk_not_the_token")
        assert (answer["type"], answer["code"]) == ("attach_error", "bad_token"), answer
        assert refused.wait_close()[0] == 1008
        refused.close()
        # ...an unknown tunnel cannot be asked about: 503 on the upgrade.
        unknown = bc.BridgeClient(relay.tls_port, s.ca_file)
        assert unknown.upgrade("nosuchtunnel") == 503
        assert unknown.json_body()["_tag"] == "ServiceUnavailableError"
        unknown.close()
        # ...and c's links, cut under it, come back from the cache while controld is down.
        proxy.set_mode("reset", scope="existing")
        c.wait_connected(count=2, timeout=60)
        assert relay.metrics().get("opentunnel_control_connected") == 0  # still in the gap
        rz.get_hello(rz.tunnel_url(c, relay), s.ca_file)
        transfers.append(rz.Download(rz.tunnel_url(c, relay), s.ca_file, 4 * MB, "kill-c",
                                     tmp_path / "c.bin", rate=MB))
        harness.wait_until(transfers[-1].in_flight, 30, "c's download to be in flight")
        _keepalive_get(visitor, reader, a.hostname)

        # controld comes back on the same database and sockets; relayd reconnects.
        rz.restart_controld(s.controld)
        rz.wait_metric_value(relay, "opentunnel_control_sessions_total", 2)
        assert relay.metrics().get("opentunnel_control_connected") == 1
        for transfer in transfers:
            transfer.assert_intact()
        _keepalive_get(visitor, reader, a.hostname)

        # controld's view equals relayd's: a has 2 links + the raw bridge, c re-attached.
        rz.wait_views_match(s, tokens, {a.tunnel_id: 3, b.tunnel_id: 2, c.tunnel_id: 2})
        metrics = relay.metrics()
        assert metrics.get("opentunnel_bridge_detaches_total", reason="drop") == 2  # c's two
        for reason in ("client_close", "idle_retire", "drain", "delete", "server_close", "reset"):
            assert metrics.get("opentunnel_bridge_detaches_total", reason=reason) == 0, reason
        assert metrics.attaches("ok") == 6 + 1 + 2
        assert metrics.attaches("bad_token") == 1
        # 3 downloads, 2 uploads, the kept-alive visitor, one visitor of c in the gap.
        assert metrics.visitors("served_local") == 7
        assert metrics.visitors("error") == 0
        assert metrics.get("opentunnel_bridge_backpressure_total", event="reset") == 0

        # Pushes after the reconnect reach relayd. A deletion closes b's bridges (1000) and
        # otunnel then hears 404 and stops, saying why.
        deleted = relay.api("DELETE", f"/api/tunnel/{b.tunnel_id}", token=tokens[b.tunnel_id])
        assert deleted.status == 200 and deleted.json() == {"deleted": True}, deleted
        rz.wait_metric_value(relay, "opentunnel_bridge_detaches_total", 2, reason="delete")
        assert b.process.wait(60) == 1, b.stderr_text()[-2000:]
        assert "404" in b.stderr_text(), b.stderr_text()[-2000:]
        before = relay.metrics().visitors("rejected_unknown_tunnel")
        rz.hello_then_close(relay.tls_port, b.hostname)
        relay.wait_metric(lambda m: m.visitors("rejected_unknown_tunnel") == before + 1,
                          what="b's visitor refused as unknown")
        # A tunnel created and issued after the reconnect: its record and then its ready
        # certificate are pushed (a visitor is refused for "no bridge", not "cert not ready"),
        # and a bridge attaches and is given a visitor.
        d = bc.create_ready_tunnel(relay, tmp_path)
        _probe_until(relay, d["hostname"], "rejected_no_bridge")
        raw_d, _ = bc.attached_bridge(relay, d)
        raw_bridges.append(raw_d)
        hello, _ = rh.client_hello_bytes(d["hostname"])
        dv = socket.create_connection(("127.0.0.1", relay.tls_port), timeout=15)
        dv.sendall(hello)
        kind, conn_id, _ = bc.parse_stream_frame(raw_d.recv_message()[1])
        assert (kind, conn_id) == (bc.KIND_OPEN, 1)
        dv.close()

        reader.close()  # the file object holds the socket open too
        visitor.close()
        for raw_bridge in raw_bridges:
            raw_bridge.close()
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 4,
                                "opentunnel_visitor_connections_open": 0})
        baseline.wait_back()
    finally:
        for transfer in transfers:
            transfer.kill()
        for raw_bridge in raw_bridges:
            raw_bridge.close()
        proxy.close()


def test_controld_sigterm_restart_is_invisible_to_tunnels(stack, tmp_path):
    s = stack()
    web = s.origin()
    a = s.tunnel(web.port, links=2, name="a")
    b = s.tunnel(web.port, links=2, name="b")
    relay = s.relayd
    tokens = {t.tunnel_id: t.state()["token"] for t in (a, b)}
    rz.wait_views_match(s, tokens, {a.tunnel_id: 2, b.tunnel_id: 2})
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    downloads = [rz.Download(rz.tunnel_url(t, relay), s.ca_file, 6 * MB, f"term-{t.name}",
                             tmp_path / f"{t.name}.bin", rate=MB) for t in (a, b)]
    try:
        harness.wait_until(lambda: all(d.in_flight() for d in downloads), 30, "downloads")
        assert rz.kill_controld(s.controld, signal.SIGTERM) == 0  # a clean exit
        rz.wait_metric_value(relay, "opentunnel_control_connected", 0)
        _assert_api_unavailable(relay, a.tunnel_id, tokens[a.tunnel_id])
        rz.get_hello(rz.tunnel_url(b, relay), s.ca_file)

        rz.restart_controld(s.controld)
        rz.wait_metric_value(relay, "opentunnel_control_sessions_total", 2)
        for download in downloads:
            download.assert_intact()
        rz.wait_views_match(s, tokens, {a.tunnel_id: 2, b.tunnel_id: 2})
        assert relay.api("GET", f"/api/tunnel/{a.tunnel_id}",
                         token=tokens[a.tunnel_id]).status == 200
        metrics = relay.metrics()
        for reason in ("client_close", "drop", "idle_retire", "drain", "delete", "server_close",
                       "reset"):
            assert metrics.get("opentunnel_bridge_detaches_total", reason=reason) == 0, reason
        assert metrics.attaches("ok") == 4
        assert metrics.visitors("served_local") == 3
        assert a.connected_count() == 1 and b.connected_count() == 1  # never reconnected
        baseline.wait_back()
    finally:
        for download in downloads:
            download.kill()


@pytest.mark.waits
def test_frozen_controld_is_noticed_by_keepalive_and_recovers_on_sigcont(stack, tmp_path):
    s = stack()
    web = s.origin()
    a = s.tunnel(web.port, links=2, name="a")
    relay = s.relayd
    token = a.state()["token"]
    tokens = {a.tunnel_id: token}
    rz.wait_views_match(s, tokens, {a.tunnel_id: 2})
    baseline = rz.ResourceBaseline(relay.process, "relayd")
    controld_baseline = rz.ResourceBaseline(s.controld.process, "controld")
    raw = None
    download = rz.Download(rz.tunnel_url(a, relay), s.ca_file, 8 * MB, "frozen",
                           tmp_path / "frozen.bin", rate=MB)
    frozen = False
    try:
        harness.wait_until(download.in_flight, 30, "the download to be in flight")
        s.controld.process.send_signal(signal.SIGSTOP)
        frozen = True
        stopped_at = time.monotonic()
        # The socket stays open and silent: only the session's keepalive (10 s pings, 5 s
        # timeout) can tell. Visitors are served meanwhile.
        rz.get_hello(rz.tunnel_url(a, relay), s.ca_file)
        rz.wait_metric_value(relay, "opentunnel_control_connected", 0, timeout=40)
        noticed = time.monotonic() - stopped_at
        print(f"\nfrozen controld noticed after {noticed:.1f} s")
        assert noticed <= 25.0, noticed
        _assert_api_unavailable(relay, a.tunnel_id, token)
        raw, _ = bc.attached_bridge(relay, {"id": a.tunnel_id, "token": token})
        download.assert_intact()

        s.controld.process.send_signal(signal.SIGCONT)
        frozen = False
        rz.wait_metric_value(relay, "opentunnel_control_connected", 1, timeout=30)
        assert relay.metrics().get("opentunnel_control_sessions_total") == 2
        rz.wait_views_match(s, tokens, {a.tunnel_id: 3})
        answer = relay.api("GET", f"/api/tunnel/{a.tunnel_id}", token=token)
        assert answer.status == 200 and answer.json()["bridges"] == 3, answer
        metrics = relay.metrics()
        assert sum(v for (name, _), v in metrics.values.items()
                   if name == "opentunnel_bridge_detaches_total") == 0
        assert metrics.attaches("ok") == 3
        assert a.connected_count() == 1
        raw.close()
        relay.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 2, what="raw gone")
        rz.wait_views_match(s, tokens, {a.tunnel_id: 2})
        baseline.wait_back()
        controld_baseline.wait_back(fd_slack=2)  # the same process, thawed
    finally:
        if frozen:
            s.controld.process.send_signal(signal.SIGCONT)
        download.kill()
        if raw is not None:
            raw.close()
