"""Analytics events (docs/analytics.md) from the real daemons to a local HTTP receiver on
127.0.6.x: a real create / attach / visit / delete arrives in batches (JSON arrays) with the bearer
token; a receiver that answers 500, or is not there, costs only the events (counted as failed) while
both daemons keep serving; without ANALYTICS_URL nothing connects anywhere."""
import http.server
import json
import socketserver
import threading

import pytest

import harness
import relay_harness as rh

RECEIVER_HOST = "127.0.6.1"
TOKEN = "analytics-test-token-0123456789"
EVENTS = "opentunnel_analytics_events_total"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        status = self.server.receiver.record(self.path, dict(self.headers), body)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def get_request(self):
        request = super().get_request()
        with self.receiver.lock:
            self.receiver.connections += 1
        return request


class Receiver:
    """The platform's event stream, played by a local server: records every POST and answers
    `status` (200 unless told otherwise)."""

    def __init__(self, status=200, host=RECEIVER_HOST):
        self.status = status
        self.lock = threading.Lock()
        self.posts = []
        self.connections = 0
        self.server = _Server((host, 0), _Handler)
        self.server.receiver = self
        self.url = f"http://{host}:{self.server.server_address[1]}/ingest"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def record(self, path, headers, body):
        with self.lock:
            self.posts.append({"path": path, "headers": headers, "body": body})
            return self.status

    def batches(self):
        with self.lock:
            return [json.loads(post["body"]) for post in self.posts]

    def events(self):
        return [event for batch in self.batches() for event in batch]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    started = []

    def start(**kwargs):
        instance = Receiver(**kwargs)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        instance.stop()


def _analytics_env(url, **extra):
    env = {"ANALYTICS_URL": url, "ANALYTICS_TOKEN": TOKEN, "ANALYTICS_RETRY_DELAY_MS": "50"}
    env.update({key: str(value) for key, value in extra.items()})
    return env


def _controld_metrics(s):
    response = harness.wait_until(lambda: _get_metrics(s.controld_metrics_port), 10,
                                  "controld /metrics")
    return rh.Metrics(rh.parse_metrics(response))


def _get_metrics(port):
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def _start(stack, controld_env, relayd_env):
    port = harness.free_port()
    s = stack(relayd_env=relayd_env,
              controld_env={"METRICS_LISTEN": f"127.0.0.1:{port}", **controld_env})
    s.controld_metrics_port = port
    return s


def _visit(s, tunnel):
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from web\n"


def test_a_tunnels_life_arrives_in_batches_with_the_token(stack, receiver):
    sink = receiver()
    # Full batches go at once; the rest waits for the interval (an hour here), so what is left
    # arrives with the shutdown flush: every batch size is decided by the sizes, not by timing.
    controld_env = _analytics_env(sink.url, ANALYTICS_BATCH_SIZE=3, ANALYTICS_FLUSH_MS=3_600_000)
    relayd_env = _analytics_env(sink.url, ANALYTICS_BATCH_SIZE=2, ANALYTICS_FLUSH_MS=3_600_000)
    s = _start(stack, controld_env, relayd_env)
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    token = tunnel.state()["token"]
    _visit(s, tunnel)
    _visit(s, tunnel)
    # Two visits: relayd's first batch (two events) goes before anything stops.
    harness.wait_until(
        lambda: any(e["type"] == "visitor.connection" for e in sink.events()), 30,
        "relayd's batch of visitor events")
    deleted = s.relayd.api("DELETE", f"/api/tunnel/{tunnel.tunnel_id}", token=token)
    assert deleted.status in (200, 204), deleted
    codes = s.close()
    assert all(code == 0 for code in codes.values()), codes

    with sink.lock:
        posts = list(sink.posts)
    assert posts
    for post in posts:
        assert post["path"] == "/ingest"
        assert post["headers"].get("Authorization") == f"Bearer {TOKEN}"
        assert post["headers"].get("Content-Type") == "application/json"
    batches = sink.batches()
    assert all(isinstance(batch, list) and batch for batch in batches)
    by_source = {"controld": [], "relayd": []}
    for batch in batches:
        sources = {event["source"] for event in batch}
        assert len(sources) == 1, batch  # one daemon per POST
        by_source[sources.pop()].append(len(batch))
    # Batches of at most the configured size; the full ones came while running.
    assert max(by_source["controld"]) == 3 and all(n <= 3 for n in by_source["controld"])
    assert by_source["relayd"][0] == 2 and all(n <= 2 for n in by_source["relayd"])

    events = sink.events()
    for event in events:
        assert event["v"] == 1
        assert event["machine"] in ("controld", "relayd0")  # the harness's MACHINE_IDs
        assert event["region"] == "local"
        assert event["time"].endswith("Z")
    assert len({event["id"] for event in events}) == len(events)
    mine = [event for event in events if event.get("tunnel") == tunnel.tunnel_id]
    types = [event["type"] for event in mine]
    for wanted in ("tunnel.created", "certificate.issued", "bridge.attached",
                   "visitor.connection", "bridge.detached", "tunnel.deleted"):
        assert wanted in types, (wanted, types)
    assert types.index("tunnel.created") < types.index("tunnel.deleted")
    visits = [event["data"] for event in mine if event["type"] == "visitor.connection"]
    assert len(visits) == 2
    for visit in visits:
        assert visit["outcome"] == "served_local"
        assert visit["bytes_out"] > 0 and visit["bytes_in"] > 0
        assert visit["duration_ms"] >= 0
    issued = next(e["data"] for e in mine if e["type"] == "certificate.issued")
    assert issued["kind"] == "issue"
    detached = next(e["data"] for e in mine if e["type"] == "bridge.detached")
    assert detached["reason"] == "delete"
    attached = next(e["data"] for e in mine if e["type"] == "bridge.attached")
    assert attached["routes"] >= 1 and attached["bridge"] == detached["bridge"]
    created = next(e for e in mine if e["type"] == "tunnel.created")
    assert created["source"] == "controld" and created["data"] == {"chosen_id": False}


@pytest.mark.parametrize("failure", ["answers_500", "not_listening"])
def test_a_failing_receiver_costs_only_the_events(stack, receiver, failure):
    if failure == "answers_500":
        sink = receiver(status=500)
        url = sink.url
    else:
        sink = None
        url = f"http://127.0.6.2:{harness.free_port('127.0.6.2')}/ingest"  # nothing listens
    env = _analytics_env(url, ANALYTICS_FLUSH_MS=100, ANALYTICS_MAX_RETRIES=1)
    s = _start(stack, env, env)
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    _visit(s, tunnel)

    # Both daemons count what they gave up on (controld: the tunnel's events; relayd: the visit).
    harness.wait_until(lambda: _controld_metrics(s).get(EVENTS, result="failed") >= 1, 30,
                       "controld to count failed events")
    s.relayd.wait_metric(lambda m: m.get(EVENTS, result="failed") >= 1, 30,
                         "relayd to count failed events")
    # ...and go on serving: the API and the tunnel answer as before.
    _visit(s, tunnel)
    token = tunnel.state()["token"]
    info = s.relayd.api("GET", f"/api/tunnel/{tunnel.tunnel_id}", token=token)
    assert info.status == 200, info
    assert _controld_metrics(s).get(EVENTS, result="sent") == 0
    assert s.relayd.metrics().get(EVENTS, result="sent") == 0
    if sink is not None:
        # Each batch was tried twice (the first POST and one retry), with the same events.
        batches = sink.batches()
        assert len(batches) >= 2
        assert batches[0] == batches[1]
    codes = s.close()
    assert all(code == 0 for code in codes.values()), codes
    assert "analytics events lost" in s.controld.log_path.read_text(errors="replace")


def test_without_a_url_nothing_connects(stack, receiver):
    sink = receiver()
    # The token alone turns nothing on.
    env = {"ANALYTICS_TOKEN": TOKEN}
    s = _start(stack, env, env)
    web = s.origin("web")
    tunnel = s.tunnel(web.port, links=1)
    _visit(s, tunnel)
    token = tunnel.state()["token"]
    assert s.relayd.api("DELETE", f"/api/tunnel/{tunnel.tunnel_id}", token=token).status in (
        200, 204)
    controld_metrics = _controld_metrics(s)
    relayd_metrics = s.relayd.metrics()
    codes = s.close()
    assert all(code == 0 for code in codes.values()), codes
    assert sink.connections == 0 and sink.posts == []
    for metrics in (controld_metrics, relayd_metrics):
        for result in ("sent", "failed", "dropped"):
            assert metrics.get(EVENTS, result=result) == 0
    assert "analytics on" not in s.controld.log_path.read_text(errors="replace")
    assert "analytics on" not in s.relayd.log_text()
