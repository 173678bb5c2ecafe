"""TLS handshakes on worker threads (docs/relayd.md, "TLS handshakes on worker threads"): with
TLS_HANDSHAKE_THREADS workers the API domain's handshake steps run off relayd's loop, and
everything a handshake feeds still works: API requests over HTTP/1.1 and h2 in parallel, bridges
that attach and carry visitors, tickets sealed and opened (a restarted relayd resumes its
bridges). With 0 the loop runs them and the counter stays at 0."""
import concurrent.futures

import relay_harness as rh

STEPS = "opentunnel_relay_tls_handshake_steps_total"
SESSIONS = "opentunnel_api_tls_sessions_total"


def steps(relay):
    return relay.metrics().get(STEPS) or 0


def parallel_api_requests(relay, count):
    """`count` API requests at once, each on its own TLS connection; their statuses."""
    def one(i):
        http = "--http2" if i % 2 else "--http1.1"
        got = rh.curl([http, "--cacert", str(relay.ca_file), "--resolve",
                       f"{rh.DOMAIN}:{relay.tls_port}:127.0.0.1", "-o", "/dev/null",
                       "-w", "%{http_code}", f"https://{rh.DOMAIN}:{relay.tls_port}/openapi.json"])
        return got.stdout if got.returncode == 0 else got.stderr
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def test_handshakes_on_workers_serve_api_bridges_and_resumption(stack, tmp_path):
    env = {"TLS_HANDSHAKE_THREADS": "2", "STATE_DIR": str(tmp_path / "relay-state"),
           "SHUTDOWN_DRAIN_MS": "200"}
    s = stack(relayd_env=env)
    first = s.relayd
    assert "tls_handshake_threads=2" in first.log_text()
    port = first.tls_port

    assert parallel_api_requests(first, 24) == ["200"] * 24
    web = s.origin()
    tunnel = s.tunnel(web.port, links=2)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "hello from origin\n"
    # Each handshake took two steps on the workers (the hello, then the Finished).
    handshakes = first.metrics().get("opentunnel_api_tls_handshakes_total", result="ok") or 0
    assert handshakes >= 26
    assert steps(first) >= 2 * handshakes
    assert first.stop() == 0

    # The same keys: the bridges come back resumed, the tickets opened on a worker.
    second = s.start_relayd(env=env, name="relayd-again", tls_port=port)
    second.wait_metric(lambda m: m.get("opentunnel_bridges_attached") == 2 and
                       (m.get(SESSIONS, handshake="resumed") or 0) >= 2,
                       what="both bridges back, resumed, on the restarted relayd", timeout=60)
    assert steps(second) >= 4
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert second.stop() == 0


def test_no_workers_runs_handshakes_on_the_loop(stack):
    s = stack(relayd_env={"TLS_HANDSHAKE_THREADS": "0"})
    log = s.relayd.log_text()
    assert "tls_handshake_threads=\"on the loop\"" in log or \
        "tls_handshake_threads=on the loop" in log, log[-2000:]
    assert parallel_api_requests(s.relayd, 8) == ["200"] * 8
    web = s.origin()
    tunnel = s.tunnel(web.port, links=1)
    got = rh.curl_url(tunnel.url + "/hello", s.ca_file, "--http1.1")
    assert got.returncode == 0, got.stderr
    assert steps(s.relayd) == 0
