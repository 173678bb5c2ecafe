"""The database goes away under a running service (controld on MariaDB): visitors and bridges
keep working, already-known tunnels attach again (relayd's and controld's caches), the API
calls that need storage answer 503 ServiceUnavailableError JSON, and everything recovers when
the server returns, without restarting anything. (A controld *started* during an outage fails
its health check and exits 1: test_controld_api.py::test_storage_down_answers_503.)

The MariaDB server is our own (tests/services/mariadb.sh in a temp directory), so stopping it
never disturbs other tests using the ctest fixture's server."""
import os

import pytest

import bridge_client as bc
import harness
import resilience_harness as rz

MB = 1_000_000


@pytest.fixture(scope="module")
def private_mariadb(tmp_path_factory):
    if not os.environ.get("OT_TEST_MYSQL_URL_FILE"):
        pytest.skip("OT_TEST_MYSQL_URL_FILE is not set (run under ctest for MariaDB tests)")
    server = rz.PrivateMariaDB(tmp_path_factory.mktemp("mariadb") / "server").start()
    yield server
    server.stop()


def _unavailable(response):
    assert response.status == 503, response
    assert response.headers.get("Content-Type", "").startswith("application/json"), response
    body = response.json()
    assert body["_tag"] == "ServiceUnavailableError", body
    assert isinstance(body["message"], str) and body["message"], body


def test_database_outage_keeps_tunnels_serving_and_recovers_without_restarts(
        stack, private_mariadb, tmp_path):
    s = stack(controld_env={"DATABASE_URL": private_mariadb.create_database()})
    relay = s.relayd
    web = s.origin()
    a = s.tunnel(web.port, links=2, name="a")
    proxy = rz.proxy_to(relay)
    raw = None
    server_down = False
    downloads = []
    try:
        b = rz.proxied_tunnel(s, proxy, web.port, links=2, name="b")
        tokens = {t.tunnel_id: t.state()["token"] for t in (a, b)}
        rz.wait_views_match(s, tokens, {a.tunnel_id: 2, b.tunnel_id: 2})
        relay_baseline = rz.ResourceBaseline(relay.process, "relayd")
        controld_baseline = rz.ResourceBaseline(s.controld.process, "controld")
        controld_pid = s.controld.process.pid
        downloads = [rz.Download(rz.tunnel_url(a, relay), s.ca_file, 8 * MB, "outage",
                                 tmp_path / "outage.bin", rate=MB)]
        harness.wait_until(downloads[0].in_flight, 30, "the download to be in flight")

        private_mariadb.stop_server()
        server_down = True
        # Storage-backed calls fail fast and say so, through relayd and on controld itself.
        info = f"/api/tunnel/{a.tunnel_id}"
        harness.wait_until(
            lambda: relay.api("GET", info, token=tokens[a.tunnel_id]).status == 503, 60,
            "the API to notice the outage")
        _unavailable(relay.api("GET", info, token=tokens[a.tunnel_id]))
        _unavailable(relay.api("POST", "/api/tunnel"))
        _unavailable(relay.api("DELETE", f"/api/tunnel/{b.tunnel_id}",
                               token=tokens[b.tunnel_id]))
        _unavailable(s.controld.request("GET", info, token=tokens[a.tunnel_id]))
        assert s.controld.request("GET", "/health").status == 503

        # The data plane never needed the database.
        rz.get_hello(rz.tunnel_url(a, relay), s.ca_file)
        rz.get_hello(rz.tunnel_url(b, relay), s.ca_file)
        # Known tunnels attach again: b's links are cut and come back, a gets a new bridge.
        proxy.set_mode("reset", scope="existing")
        b.wait_connected(count=2, timeout=60)
        raw, _ = bc.attached_bridge(relay, {"id": a.tunnel_id, "token": tokens[a.tunnel_id]})
        rz.get_hello(rz.tunnel_url(b, relay), s.ca_file)
        metrics = relay.metrics()
        assert metrics.get("opentunnel_control_connected") == 1  # controld itself stayed up
        assert metrics.get("opentunnel_control_sessions_total") == 1

        # The server returns: the same processes recover on their own.
        private_mariadb.start_server()
        server_down = False
        harness.wait_until(
            lambda: relay.api("GET", info, token=tokens[a.tunnel_id]).status == 200, 60,
            "the API to recover")
        assert s.controld.request("GET", "/health").status == 200
        # Recovered means recovered: no call fails any more (a pooled connection the server
        # dropped must not surface as a 503 now).
        answers = [relay.api("GET", info, token=tokens[a.tunnel_id]).status for _ in range(20)]
        answers += [s.controld.request("GET", f"/api/tunnel/{b.tunnel_id}/certificate",
                                       token=tokens[b.tunnel_id]).status for _ in range(20)]
        assert answers == [200] * 40, answers
        fresh = bc.create_ready_tunnel(relay, tmp_path)  # writes work again, issuance too
        assert relay.api("GET", f"/api/tunnel/{fresh['id']}", token=fresh["token"]).status == 200
        downloads[0].assert_intact()
        rz.wait_views_match(s, tokens, {a.tunnel_id: 3, b.tunnel_id: 2})
        metrics = relay.metrics()
        assert metrics.get("opentunnel_bridge_detaches_total", reason="drop") == 2  # b's cut
        assert sum(v for (n, _), v in metrics.values.items()
                   if n == "opentunnel_bridge_detaches_total") == 2
        assert metrics.attaches("ok") == 4 + 2 + 1
        assert metrics.get("opentunnel_control_sessions_total") == 1
        assert s.controld.process.pid == controld_pid and s.controld.process.poll() is None
        assert a.connected_count() == 1

        raw.close()
        rz.wait_metrics(relay, {"opentunnel_bridges_attached": 4,
                                "opentunnel_visitor_connections_open": 0})
        relay_baseline.wait_back()
        # controld's pool reconnected: a few descriptors of slack for its connections.
        controld_baseline.wait_back(fd_slack=4)
    finally:
        if server_down:
            private_mariadb.start_server()
        for download in downloads:
            download.kill()
        if raw is not None:
            raw.close()
        proxy.close()
